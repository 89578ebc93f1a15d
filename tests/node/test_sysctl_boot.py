"""The value a sysctl gets at boot, by sysctl.d(5)'s rules, on plain trees."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import sysctl_boot
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import FILE, INT, Setting
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root

OURS = "etc/sysctl.d/90-nodetune-sysctl.conf"


def write(root: Path, rel: str, text: str) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


def desired(value: int = 20) -> list[Setting]:
    return [Setting("sysctl.vm.dirty_ratio", "vm.dirty_ratio", "proc/sys/vm/dirty_ratio", value, compare=INT,
                    persist="sysctl.d"),
            Setting("persist.sysctl_d", "sysctl", OURS, f"vm.dirty_ratio = {value}\n", kind=FILE,
                    compare="content")]


@pytest.mark.parametrize("key, path", [("vm.dirty_ratio", "vm/dirty_ratio"), ("vm/dirty_ratio", "vm/dirty_ratio"),
                                       ("-vm.dirty_ratio", "vm/dirty_ratio"),
                                       ("net.ipv4.conf.eth0/200.forwarding", "net/ipv4/conf/eth0.200/forwarding"),
                                       ("net/ipv4/conf/eth0.200/forwarding", "net/ipv4/conf/eth0.200/forwarding")])
def test_keys_with_dots_or_slashes_name_the_same_file(key: str, path: str) -> None:
    assert sysctl_boot.key_path(key) == path


def test_a_later_file_name_wins_whatever_its_folder(tmp_path: Path) -> None:
    write(tmp_path, "usr/lib/sysctl.d/95-vendor.conf", "vm.dirty_ratio = 30\n")
    found = sysctl_boot.shadowed(Root(str(tmp_path)), desired())
    assert [(e["key"], e["boot_value"], e["file"]) for e in found] == [
        ("vm.dirty_ratio", "30", "/usr/lib/sysctl.d/95-vendor.conf")]
    assert "/usr/lib/sysctl.d/95-vendor.conf sets vm.dirty_ratio=30" in sysctl_boot.message(found[0])
    # an earlier name loses to nodetune's 90-nodetune-sysctl.conf
    (tmp_path / "usr/lib/sysctl.d/95-vendor.conf").rename(tmp_path / "usr/lib/sysctl.d/50-vendor.conf")
    assert sysctl_boot.shadowed(Root(str(tmp_path)), desired()) == []


def test_a_file_in_etc_masks_the_same_name_elsewhere(tmp_path: Path) -> None:
    write(tmp_path, "usr/lib/sysctl.d/99-vendor.conf", "vm.dirty_ratio = 30\n")
    write(tmp_path, "etc/sysctl.d/99-vendor.conf", "# emptied by the admin\n")
    assert sysctl_boot.shadowed(Root(str(tmp_path)), desired()) == []
    write(tmp_path, "run/sysctl.d/99-vendor.conf", "vm.dirty_ratio = 35\n")  # /etc still wins over /run
    assert sysctl_boot.shadowed(Root(str(tmp_path)), desired()) == []
    (tmp_path / "etc/sysctl.d/99-vendor.conf").unlink()  # now /run wins over /usr/lib
    assert [e["boot_value"] for e in sysctl_boot.shadowed(Root(str(tmp_path)), desired())] == ["35"]


def test_etc_sysctl_conf_counts_through_its_99_link_only(tmp_path: Path) -> None:
    write(tmp_path, "etc/sysctl.conf", "vm.dirty_ratio=40\n")
    assert sysctl_boot.shadowed(Root(str(tmp_path)), desired()) == []  # systemd-sysctl does not read it itself
    (tmp_path / "etc/sysctl.d").mkdir(parents=True, exist_ok=True)
    (tmp_path / "etc/sysctl.d/99-sysctl.conf").symlink_to("../sysctl.conf")
    found = sysctl_boot.shadowed(Root(str(tmp_path)), desired())
    assert found[0]["file"] == "/etc/sysctl.d/99-sysctl.conf" and found[0]["via"] == " (-> /etc/sysctl.conf)"


def test_same_value_comments_and_globs(tmp_path: Path) -> None:
    write(tmp_path, "etc/sysctl.d/99-site.conf", "# vm.dirty_ratio = 1\n; vm.dirty_ratio = 2\nvm.dirty_ratio =  20\n")
    assert sysctl_boot.shadowed(Root(str(tmp_path)), desired()) == []  # a later file with the same value is fine
    # a key set explicitly anywhere (nodetune's file always does) is left out of every glob, even a later one
    write(tmp_path, "etc/sysctl.d/99-site.conf", "vm.dirty_* = 5\n")
    assert sysctl_boot.shadowed(Root(str(tmp_path)), desired()) == []
    # without nodetune's file the glob writes both forms, in glob(3)'s order: vm.dirty_bytes=5 is refused (below two
    # pages), vm.dirty_ratio=5 is taken and zeroes vm.dirty_bytes; never both at once
    assert sysctl_boot.boot_values(Root(str(tmp_path)), ["vm.dirty_ratio", "vm.dirty_bytes"]) == {
        "vm.dirty_ratio": ("5", "etc/sysctl.d/99-site.conf"), "vm.dirty_bytes": ("0", "etc/sysctl.d/99-site.conf")}


def test_checks_report_nodetunes_own_file_as_the_winner(tmp_path: Path) -> None:
    checks = sysctl_boot.boot_checks(Root(str(tmp_path)), desired())
    assert checks == [{"key": "vm.dirty_ratio", "value": "20", "boot_value": "20", "file": "/" + OURS,
                       "nodetune": True, "shadowed": False, "via": "", "set_key": "vm.dirty_ratio",
                       "set_value": "20"}]
    assert sysctl_boot.boot_checks(Root(str(tmp_path)), desired()[:1]) == []  # nothing persisted: nothing to check


# ------------------------------------------------------------------------ the writeback pairs (issue 24, item 3)
GIB = 1 << 30
PAIRS = ["vm.dirty_ratio", "vm.dirty_bytes", "vm.dirty_background_ratio", "vm.dirty_background_bytes"]
SITE = "etc/sysctl.d/99-site.conf"


def persisted(values: dict[str, int]) -> list[Setting]:
    """nodetune's runtime sysctls and the 90-nodetune-sysctl.conf that holds them, in the given order."""
    settings = [Setting("sysctl." + key, key, "proc/sys/" + key.replace(".", "/"), value, compare=INT,
                        persist="sysctl.d") for key, value in values.items()]
    text = "".join(f"{key} = {value}\n" for key, value in values.items())
    return settings + [Setting("persist.sysctl_d", "sysctl", OURS, text, kind=FILE, compare="content")]


def test_a_later_site_file_with_the_bytes_form_zeroes_nodetunes_ratio_at_boot(tmp_path: Path) -> None:
    """99-site.conf never names vm.dirty_ratio, but dirty_bytes_handler() zeroes it when it sets vm.dirty_bytes."""
    write(tmp_path, SITE, f"vm.dirty_bytes = {32 * GIB}\n")
    root = Root(str(tmp_path))
    found = sysctl_boot.shadowed(root, persisted({"vm.dirty_ratio": 20}))
    assert [(e["key"], e["boot_value"], e["file"], e["set_key"], e["set_value"]) for e in found] == [
        ("vm.dirty_ratio", "0", "/" + SITE, "vm.dirty_bytes", str(32 * GIB))]
    text = sysctl_boot.message(found[0])
    assert f"/{SITE} sets vm.dirty_bytes={32 * GIB}" in text and "boots with vm.dirty_ratio=0" in text
    assert f"nodetune_vm_dirty_bytes: {32 * GIB} and nodetune_vm_dirty_ratio: null" in text
    assert sysctl_boot.actual(found[0]) == f"0 (vm.dirty_bytes={32 * GIB} from /{SITE} zeroes it)"
    # the boot ends with one form of the limit, never both
    assert sysctl_boot.boot_values(root, PAIRS[:2], {OURS: "vm.dirty_ratio = 20\n"}) == {
        "vm.dirty_ratio": ("0", SITE), "vm.dirty_bytes": (str(32 * GIB), SITE)}


def test_an_earlier_site_file_with_the_other_form_loses_to_nodetunes(tmp_path: Path) -> None:
    write(tmp_path, "etc/sysctl.d/50-site.conf", f"vm.dirty_bytes = {32 * GIB}\n")
    root = Root(str(tmp_path))
    assert sysctl_boot.shadowed(root, persisted({"vm.dirty_ratio": 20})) == []
    assert sysctl_boot.boot_values(root, PAIRS[:2], {OURS: "vm.dirty_ratio = 20\n"}) == {
        "vm.dirty_ratio": ("20", OURS), "vm.dirty_bytes": ("0", OURS)}


def test_only_the_background_handlers_zero_the_other_form_when_the_value_does_not_change(tmp_path: Path) -> None:
    """dirty_ratio_handler() zeroes vm.dirty_bytes only when the ratio changes (it is 0 already once the bytes are
    set); dirty_background_ratio_handler() zeroes vm.dirty_background_bytes on every write."""
    write(tmp_path, SITE, "vm.dirty_ratio = 0\nvm.dirty_background_ratio = 0\n")
    found = {e["key"]: e for e in sysctl_boot.boot_checks(
        Root(str(tmp_path)), persisted({"vm.dirty_bytes": 32 * GIB, "vm.dirty_background_bytes": 4 * GIB}))}
    assert (found["vm.dirty_bytes"]["boot_value"], found["vm.dirty_bytes"]["shadowed"]) == (str(32 * GIB), False)
    background = found["vm.dirty_background_bytes"]
    assert (background["boot_value"], background["shadowed"], background["set_key"]) == (
        "0", True, "vm.dirty_background_ratio")
    # a ratio that does change zeroes the bytes form as well
    write(tmp_path, SITE, "vm.dirty_ratio = 30\n")
    assert [(e["key"], e["boot_value"]) for e in sysctl_boot.shadowed(
        Root(str(tmp_path)), persisted({"vm.dirty_bytes": 32 * GIB}))] == [("vm.dirty_bytes", "0")]


def test_a_repeated_assignment_with_the_same_value_keeps_its_first_place(tmp_path: Path) -> None:
    """systemd-sysctl's ordered map: 99-site.conf repeating 10-site.conf's vm.dirty_bytes leaves that write where
    10-site.conf put it, before nodetune's ratio; another value moves it after nodetune's file."""
    write(tmp_path, "etc/sysctl.d/10-site.conf", f"vm.dirty_bytes = {32 * GIB}\n")
    write(tmp_path, SITE, f"vm.dirty_bytes = {32 * GIB}\n")
    ours = persisted({"vm.dirty_ratio": 20})
    assert sysctl_boot.shadowed(Root(str(tmp_path)), ours) == []
    write(tmp_path, SITE, f"vm.dirty_bytes = {16 * GIB}\n")
    assert [e["set_value"] for e in sysctl_boot.shadowed(Root(str(tmp_path)), ours)] == [str(16 * GIB)]


def test_a_write_the_kernel_refuses_changes_nothing(tmp_path: Path) -> None:
    """vm.dirty_bytes below two pages and a ratio above 100 fail with EINVAL at boot: nodetune's values stay."""
    write(tmp_path, SITE, "vm.dirty_bytes = 4096\nvm.dirty_background_ratio = 101\n")
    assert sysctl_boot.shadowed(Root(str(tmp_path)), persisted({"vm.dirty_ratio": 20,
                                                                 "vm.dirty_background_ratio": 10})) == []


def test_a_glob_writes_the_form_nodetune_does_not_name(tmp_path: Path) -> None:
    write(tmp_path, SITE, f"vm.dirty_*bytes = {GIB}\n")
    ours = persisted({"vm.dirty_ratio": 20, "vm.dirty_background_ratio": 10})
    found = sysctl_boot.shadowed(Root(str(tmp_path)), ours)
    assert [(e["key"], e["boot_value"], e["set_key"]) for e in found] == [
        ("vm.dirty_background_ratio", "0", "vm.dirty_background_bytes"), ("vm.dirty_ratio", "0", "vm.dirty_bytes")]
    # a "-key" line keeps the glob off that key (sysctl.d(5))
    write(tmp_path, SITE, f"-vm.dirty_bytes\n-vm.dirty_background_bytes\nvm.dirty_*bytes = {GIB}\n")
    assert sysctl_boot.shadowed(Root(str(tmp_path)), ours) == []


# The simulated boot replays the same files through the simulated kernel's handlers, and must agree with the model.
BOOTS = {
    "site bytes after nodetune's ratios": (
        {"90-nodetune-sysctl.conf": "vm.dirty_ratio = 20\nvm.dirty_background_ratio = 10\n",
         "99-site.conf": f"vm.dirty_bytes = {32 * GIB}\nvm.dirty_background_bytes = {4 * GIB}\n"},
        ["0", str(32 * GIB), "0", str(4 * GIB)]),
    "site bytes before nodetune's ratios": (
        {"90-nodetune-sysctl.conf": "vm.dirty_ratio = 20\nvm.dirty_background_ratio = 10\n",
         "50-site.conf": f"vm.dirty_bytes = {32 * GIB}\nvm.dirty_background_bytes = {4 * GIB}\n"},
        ["20", "0", "10", "0"]),
    "a repeated value keeps its first place": (
        {"10-site.conf": f"vm.dirty_bytes = {32 * GIB}\n", "90-nodetune-sysctl.conf": "vm.dirty_ratio = 20\n",
         "99-site.conf": f"vm.dirty_bytes = {32 * GIB}\n"},
        ["20", "0", "10", "0"]),
    "unchanged ratio keeps the bytes, background ratio never does": (
        {"90-nodetune-sysctl.conf": f"vm.dirty_bytes = {32 * GIB}\nvm.dirty_background_bytes = {4 * GIB}\n",
         "99-site.conf": "vm.dirty_ratio = 0\nvm.dirty_background_ratio = 0\n"},
        ["0", str(32 * GIB), "0", "0"]),
}


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ansible_collections.nodetune.lab.plugins.module_utils import simnode

    from tests.support.specs import small_spec

    dest = tmp_path_factory.mktemp("sysctl_boot") / "node"
    simnode.build(small_spec(), str(dest))
    return dest


@pytest.mark.parametrize("files, expected", BOOTS.values(), ids=list(BOOTS))
def test_the_simulated_boot_ends_with_one_form_of_each_pair_as_the_model_says(
        simulated: Path, files: dict[str, str], expected: list[str]) -> None:
    from ansible_collections.nodetune.lab.plugins.module_utils import simnode

    folder = simulated / "etc/sysctl.d"
    for old in folder.glob("*.conf"):
        if not old.is_symlink():
            old.unlink()
    for name, text in files.items():
        (folder / name).write_text(text)
    simnode.reboot(str(simulated))
    booted = [(simulated / "proc/sys" / key.replace(".", "/")).read_text().strip() for key in PAIRS]
    assert booted == expected
    # the model: the value the deciding write left, or the kernel's default where no file writes the key
    model = sysctl_boot.boot_values(Root(str(simulated)), PAIRS)
    defaults = sysctl_boot.DIRTY_DEFAULTS
    assert [model[key][0] if key in model else str(defaults[key.replace(".", "/")]) for key in PAIRS] == booted


def test_the_simulated_kernel_answers_runtime_writes_as_the_handlers_do(simulated: Path) -> None:
    """The same handlers at runtime: vm.dirty_bytes below two pages is EINVAL, an unchanged vm.dirty_ratio keeps
    vm.dirty_bytes, and vm.dirty_background_ratio zeroes vm.dirty_background_bytes even when it is unchanged."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import InvalidValueError
    from ansible_collections.nodetune.lab.plugins.module_utils.simkernel import sim_root

    root = sim_root(str(simulated))
    vm = simulated / "proc/sys/vm"
    root.write("proc/sys/vm/dirty_ratio", "20")
    root.write("proc/sys/vm/dirty_bytes", str(32 * GIB))
    assert ((vm / "dirty_ratio").read_text(), (vm / "dirty_bytes").read_text()) == ("0\n", f"{32 * GIB}\n")
    with pytest.raises(InvalidValueError):
        root.write("proc/sys/vm/dirty_bytes", "4096")
    root.write("proc/sys/vm/dirty_ratio", "0")
    assert (vm / "dirty_bytes").read_text() == f"{32 * GIB}\n"
    root.write("proc/sys/vm/dirty_background_bytes", str(4 * GIB))
    root.write("proc/sys/vm/dirty_background_ratio", "0")
    assert ((vm / "dirty_background_ratio").read_text(), (vm / "dirty_background_bytes").read_text()) == ("0\n", "0\n")
    root.write("proc/sys/vm/dirty_ratio", "20")
    assert ((vm / "dirty_ratio").read_text(), (vm / "dirty_bytes").read_text()) == ("20\n", "0\n")


def test_a_simulated_node_spec_holds_one_form_of_each_pair() -> None:
    from ansible_collections.nodetune.lab.plugins.module_utils import simnode

    from tests.support.specs import small_spec

    spec = simnode.load_spec(small_spec(sysctl={"vm.dirty_bytes": 32 * GIB}))
    assert (spec["sysctl"]["vm.dirty_ratio"], spec["sysctl"]["vm.dirty_bytes"]) == ("0", str(32 * GIB))
    with pytest.raises(simnode.SpecError) as caught:
        simnode.load_spec(small_spec(sysctl={"vm.dirty_background_ratio": 5, "vm.dirty_background_bytes": GIB}))
    assert "sysctl.vm.dirty_background_ratio" in str(caught.value) and "one form" in str(caught.value)
