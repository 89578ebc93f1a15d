"""The kernel_cmdline area (issue 26 item 1): iommu=pt, pci=realloc=off and no amd_iommu=on in the boot loader.

On simulated nodes of both kinds: a RHEL-family node with BootLoaderSpec entries changed by (simulated) grubby, and a
Debian-family node with GRUB, a drop-in in /etc/default/grub.d sourced by a real /bin/sh as grub-mkconfig sources it,
and a regenerated grub.cfg. The simulated reboot boots the default entry, so /proc/cmdline shows what the boot loader
was given. One parser of command lines (cmdline.py) serves the area, verify and the bios checks.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine, node
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import kernel_cmdline as area_kernel_cmdline
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import Context
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import audit, bios, report, verify
from ansible_collections.nodetune.instinct.plugins.module_utils.discover import cmdline
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import bootloader
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import Finding
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import SettingError
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.lab.plugins.module_utils import simbootloader, simnode

from tests.support.trees import tree_digest

pytestmark = pytest.mark.usefixtures("simulated_kernel")

ACS = "pci=disable_acs_redir=pci:1022:14ab;pci:1000:c030"
SPEC = {
    "name": "kc",
    "cpu": {"model": "EPYC 9654", "sockets": 1, "cores_per_socket": 8, "threads_per_core": 1, "caches": False},
    "numa": {"per_socket": 1},
    "iommu": True,
    "gpus": [{"model": "MI300X", "bdf": "0000:05:00.0"}],
}
RHEL = {"family": "RedHat", "pretty_name": "Red Hat Enterprise Linux 9.4 (Plow)"}
UBUNTU = {"family": "Debian", "pretty_name": "Ubuntu 24.04.2 LTS"}
ALLOWED = {"nodetune_kernel_cmdline_allowed": True}


def build(tmp_path: Path, os_: dict, cmdline_text: str, name: str = "node") -> Path:
    dest = tmp_path / name
    simnode.build(dict(SPEC, os=os_, kernel={"release": "6.8.0-60-generic", "cmdline": cmdline_text}), str(dest))
    return dest


def plan(dest: Path, config: dict | None = None) -> tuple[list, Context]:
    root = Root(str(dest))
    ctx = Context(root, discover(root))
    settings = area_kernel_cmdline.build(ctx, dict(ALLOWED, **(config or {})))
    if ctx.errors:
        raise SettingError(ctx.errors)
    return settings, ctx


def by_id(findings: list[Finding]) -> dict[tuple[str, str], Finding]:
    return {(f.id, f.target): f for f in findings}


def findings_of(dest: Path, settings: list) -> dict[tuple[str, str], Finding]:
    root = Root(str(dest))
    found = verify.setting_findings(root, settings) + area_kernel_cmdline.running_findings(root, settings)
    found += bios.check(discover(root), {}, {}, boot=bootloader.configured_lines(root))
    return by_id(found)


def entries(dest: Path) -> dict[str, str]:
    return {path.name: bootloader.bls_entry(path.read_text()).get("options", "")
            for path in sorted((dest / "boot/loader/entries").glob("*.conf"))}


# ------------------------------------------------------------------------------------------------ one parser
def test_the_parser_reads_a_line_as_the_kernel_does() -> None:
    found = cmdline.params('root=/dev/sda "acpi_osi=Linux" foo="a b" amd-iommu=on -- iommu=pt')
    assert ("acpi_osi", "Linux") in found and ("foo", "a b") in found
    assert cmdline.last(found, "amd_iommu") == "on"  # kernel/params.c parameqn(): - and _ are one
    assert cmdline.iommu_passthrough(found) is False  # after "--": init's, not the kernel's
    assert cmdline.met(cmdline.params("iommu.passthrough=1"), "iommu=pt")
    assert not cmdline.met(cmdline.params("iommu=pt iommu=nopt"), "iommu=pt")  # the last word wins
    assert cmdline.met(cmdline.params("pci=noaer,realloc=off"), "pci=realloc=off")
    assert not cmdline.met(cmdline.params("pci=realloc=off pci=realloc"), "pci=realloc=off")
    assert cmdline.unmet("ro amd_iommu=on iommu=pt", ["iommu=pt", "pci=realloc=off"], ["amd_iommu=on"]) == [
        "pci=realloc=off", "-amd_iommu=on"]
    # GRUB's lexer: quotes removed, ';' ends the command where it is not quoted
    assert cmdline.grub_words("\tlinux\t/vmlinuz ro 'pci=disable_acs_redir=a;b' x;y z") == [
        "linux", "/vmlinuz", "ro", "pci=disable_acs_redir=a;b", "x"]


def test_bios_and_the_area_read_one_parser() -> None:
    """bios.py keeps its names, and they are cmdline.py's functions: one reading of a command line."""
    assert bios.cmdline_params is cmdline.params
    assert bios.iommu_passthrough is cmdline.iommu_passthrough and bios.pci_realloc is cmdline.pci_realloc


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("config, words", [
    ({"nodetune_kernel_cmdline_args": ["amd_iommu=on"]}, ["amd_iommu=on", "AMD-Vi: Unknown option", "iommu=pt",
                                                          "valid amd_iommu options"]),
    ({"nodetune_kernel_cmdline_args": ["iommu=pt", "iommu=nopt"]}, ["iommu twice", "one value"]),
    ({"nodetune_kernel_cmdline_extra_args": ["quiet splash"]}, ["nodetune_kernel_cmdline_extra_args",
                                                                "'quiet splash'", "no blanks"]),
    ({"nodetune_kernel_cmdline_args": ["x=$(reboot)"]}, ["'x=$(reboot)'", "no blanks, quotes, $"]),
    ({"nodetune_kernel_cmdline_remove_args": ["iommu"]}, ["removes 'iommu=pt'", "both added and removed"]),
    ({"nodetune_kernel_cmdline_platform": "mi355"}, ["nodetune_kernel_cmdline_platform='mi355'",
                                                    "auto, mi250, mi300x, generic"]),
    ({"nodetune_kernel_cmdline_allowd": True}, ["nodetune_kernel_cmdline_allowd is not a setting"]),
])
def test_bad_input_is_refused_before_any_write(tmp_path: Path, config: dict, words: list[str]) -> None:
    dest = build(tmp_path, RHEL, "root=/dev/sda ro amd_iommu=on")
    before = tree_digest(dest)
    with pytest.raises(SettingError) as raised:
        plan(dest, config)
    for word in words:
        assert word in str(raised.value)
    assert tree_digest(dest) == before


def test_a_node_without_a_boot_loader_nodetune_can_change_is_refused(tmp_path: Path) -> None:
    dest = build(tmp_path, RHEL, "root=/dev/sda ro")
    (dest / "usr/sbin/grubby").unlink()  # BLS entries, no grubby: nothing nodetune may run
    with pytest.raises(SettingError) as raised:
        plan(dest)
    assert "no boot loader nodetune can change" in str(raised.value) and "no grubby" in str(raised.value)
    assert "nodetune_kernel_cmdline_enabled: false" in str(raised.value)
    settings, ctx = plan(dest, {"nodetune_kernel_cmdline_allowed": False})  # not asked to change it: a note
    assert settings == [] and any("no boot loader" in note for note in ctx.notes)


def test_without_the_opt_in_nothing_is_planned_and_a_note_says_what_is_missing(tmp_path: Path) -> None:
    dest = build(tmp_path, RHEL, "root=/dev/sda ro amd_iommu=on")
    settings, ctx = plan(dest, {"nodetune_kernel_cmdline_allowed": False})
    assert settings == []
    note = next(n for n in ctx.notes if n.startswith("kernel_cmdline:"))
    assert "-amd_iommu=on" in note and "iommu=pt" in note and "nodetune_kernel_cmdline_allowed: true" in note


def test_rhel8_entries_with_kernelopts_are_refused(tmp_path: Path) -> None:
    dest = build(tmp_path, RHEL, "root=/dev/sda ro")
    for path in (dest / "boot/loader/entries").glob("*.conf"):
        text = path.read_text()
        path.write_text("\n".join("options $kernelopts" if line.startswith("options") else line
                                  for line in text.splitlines()) + "\n")
    with pytest.raises(SettingError, match=r"\$kernelopts in grubenv, RHEL 8's layout"):
        plan(dest)


# ------------------------------------------------------------------------------------------------ BLS + grubby
def test_bls_check_mode_shows_the_command_line_diff_and_writes_nothing(tmp_path: Path) -> None:
    dest = build(tmp_path, RHEL, f"BOOT_IMAGE=(hd0,gpt2)/vmlinuz root=/dev/sda ro amd_iommu=on {ACS}")
    settings, _ctx = plan(dest)
    before = tree_digest(dest)
    result = engine.apply(Root(str(dest)), settings, check_mode=True)
    assert tree_digest(dest) == before
    assert result["changed"] and result["reboot_required"]
    assert "ro amd_iommu=on pci=disable_acs_redir" in result["diff"]["before"]
    assert f"root=/dev/sda ro {ACS} iommu=pt pci=realloc=off" in result["diff"]["after"]
    assert result["diff"]["after"].count("iommu=pt") == 2  # the kernel's entry and the rescue entry: ALL


def test_bls_apply_runs_grubby_once_then_is_idempotent_and_revert_restores_every_entry(tmp_path: Path,
                                                                                     monkeypatch: Any) -> None:
    dest = build(tmp_path, RHEL, f"BOOT_IMAGE=(hd0,gpt2)/vmlinuz root=/dev/sda ro amd_iommu=on iommu=nopt {ACS}")
    original = tree_digest(dest)
    old = entries(dest)
    calls: list[list[str]] = []
    real = simbootloader.run_tool
    monkeypatch.setattr(simbootloader, "run_tool", lambda root, argv: calls.append(argv) or real(root, argv))
    settings, _ctx = plan(dest)
    result = engine.apply(Root(str(dest)), settings)
    assert result["changed"] and result["reboot_required"] and not result["unconfirmed"]
    # one call, every entry; iommu=nopt goes with amd_iommu=on before iommu=pt is added (grubby: removals first)
    assert calls == [["/usr/sbin/grubby", "--update-kernel=ALL", "--remove-args=amd_iommu=on iommu=nopt",
                      "--args=iommu=pt pci=realloc=off"]]
    assert set(entries(dest).values()) == {f"root=/dev/sda ro {ACS} iommu=pt pci=realloc=off"}
    journal = json.loads((dest / "var/lib/nodetune/journal.json").read_text())
    assert journal["baseline"]["boot/loader/entries"]["entries"] == {f"boot/loader/entries/{k}": v
                                                                     for k, v in old.items()}
    assert engine.apply(Root(str(dest)), plan(dest)[0])["changed"] is False  # a second run changes nothing
    assert len(calls) == 1
    engine.revert(Root(str(dest)))
    assert entries(dest) == old
    assert tree_digest(dest) == original  # byte for byte, the journal and its directory gone


def test_grubby_replaces_a_word_of_the_same_key_in_place() -> None:
    """rhboot/grubby grubby-bls update_args(): --args=key=value replaces the first word of that key (the text before
    the last '='), else appends; the lab's grubby and the core's model of it agree."""
    words = ["root=/dev/sda", "iommu=nopt", "quiet", "pci=realloc=on"]
    for update in (simbootloader.update_args, bootloader.grubby_update):
        assert update(words, [], ["iommu=pt", "pci=realloc=off", "nosmt"]) == [
            "root=/dev/sda", "iommu=pt", "quiet", "pci=realloc=off", "nosmt"]
        assert update(words, ["quiet"], ["quiet"]) == ["root=/dev/sda", "iommu=nopt", "pci=realloc=on", "quiet"]


def test_revert_puts_back_options_grubby_would_otherwise_reorder(tmp_path: Path) -> None:
    """amd_iommu=on sat in the middle: re-adding it with --args would append it, so revert removes the tail after the
    first difference and adds the old tail back in order."""
    dest = build(tmp_path, RHEL, "root=/dev/sda amd_iommu=on ro quiet iommu=nopt")
    old = entries(dest)
    engine.apply(Root(str(dest)), plan(dest)[0])
    assert set(entries(dest).values()) == {"root=/dev/sda ro quiet iommu=pt pci=realloc=off"}
    assert bootloader.restore_args(["a", "c", "d", "x"], ["a", "b", "c", "d"]) == (["c", "d", "x"], ["b", "c", "d"])
    engine.revert(Root(str(dest)))
    assert entries(dest) == old


def test_revert_that_grubby_cannot_express_is_refused_and_the_journal_kept(tmp_path: Path) -> None:
    dest = build(tmp_path, RHEL, "root=/dev/sda ro console=tty0 amd_iommu=on console=ttyS0")
    engine.apply(Root(str(dest)), plan(dest)[0])
    # two console= words after the first difference: grubby's --args would replace the first, never add a second
    assert bootloader.restore_args(["ro", "console=tty0", "console=ttyS0", "iommu=pt"],
                                   ["ro", "console=tty0", "amd_iommu=on", "console=ttyS0"]) is None
    with pytest.raises(engine.ApplyError, match="grubby cannot put back its options exactly"):
        engine.revert(Root(str(dest)))
    assert (dest / engine.JOURNAL).exists()


# ------------------------------------------------------------------------------------------------ GRUB
def test_grub_drop_in_is_sourced_after_etc_default_grub_and_update_grub_writes_every_entry(tmp_path: Path) -> None:
    dest = build(tmp_path, UBUNTU, f"BOOT_IMAGE=/vmlinuz root=/dev/sda ro amd-iommu=on iommu=nopt {ACS}")
    original = tree_digest(dest)
    settings, _ctx = plan(dest)
    assert [s.id for s in settings] == ["kernel_cmdline.dropin", "kernel_cmdline.configured"]
    result = engine.apply(Root(str(dest)), settings)
    assert result["reboot_required"] and not result["unconfirmed"]
    dropin = dest / bootloader.DROPIN
    assert dropin.read_text() == bootloader.grub_dropin(["iommu=pt", "pci=realloc=off"], ["amd_iommu=on"])
    cfg = (dest / "boot/grub/grub.cfg").read_text()
    # the ';' word stays quoted for GRUB's parser; amd-iommu=on (the kernel's - = _) and iommu=nopt filtered out
    assert f"root=/dev/sda ro '{ACS}' iommu=pt pci=realloc=off" in cfg
    assert "amd-iommu" not in cfg and "nopt" not in cfg
    assert [args for _e, args in bootloader.grub_entries(cfg)] == [
        f"root=/dev/sda ro {ACS} iommu=pt pci=realloc=off",
        f"root=/dev/sda ro single {ACS} iommu=pt pci=realloc=off"]  # the recovery entry too
    assert engine.apply(Root(str(dest)), plan(dest)[0])["changed"] is False
    engine.revert(Root(str(dest)))
    assert tree_digest(dest) == original  # the drop-in and /etc/default/grub.d gone, grub.cfg regenerated as built


def test_grub_prediction_matches_what_update_grub_writes(tmp_path: Path) -> None:
    dest = build(tmp_path, UBUNTU, "root=/dev/sda ro quiet pci=realloc amd_iommu=on")
    settings, _ctx = plan(dest)
    predicted = bootloader.predicted(Root(str(dest)), "grub", settings[-1].value)
    engine.apply(Root(str(dest)), settings)
    assert predicted == bootloader.shown(Root(str(dest)), "grub")


def test_grub_cfg_older_than_the_drop_in_is_drift(tmp_path: Path) -> None:
    """grub.cfg is what update-grub made of the drop-in it read: a drop-in changed since (an apply killed before
    update-grub) is drift even where the entries still meet the requirement, and the next apply runs update-grub."""
    dest = build(tmp_path, UBUNTU, "root=/dev/sda ro")
    engine.apply(Root(str(dest)), plan(dest)[0])
    settings, _ctx = plan(dest, {"nodetune_kernel_cmdline_args": ["iommu=pt"]})  # pci=realloc=off no longer asked
    (dest / bootloader.DROPIN).write_text(settings[0].value)
    found = findings_of(dest, settings)
    assert found[("kernel_cmdline.configured", "grub")].status == "drift"
    assert "not regenerated since /etc/default/grub.d/" in found[("kernel_cmdline.configured", "grub")].actual
    result = engine.apply(Root(str(dest)), settings)
    assert [a["id"] for a in result["actions"]] == ["kernel_cmdline.configured"]  # update-grub, the drop-in is right
    assert "pci=realloc=off" not in (dest / "boot/grub/grub.cfg").read_text()
    assert findings_of(dest, settings)[("kernel_cmdline.configured", "grub")].status == "ok"


# ------------------------------------------------------------------------------------------------ verify, reboot
@pytest.mark.parametrize("os_", [RHEL, UBUNTU], ids=["bls", "grub"])
def test_configured_but_not_rebooted_is_pending_then_ok_after_the_reboot(tmp_path: Path, os_: dict) -> None:
    dest = build(tmp_path, os_, f"BOOT_IMAGE=/vmlinuz root=/dev/sda ro amd_iommu=on {ACS}")
    settings, _ctx = plan(dest)
    found = findings_of(dest, settings)
    assert found[("kernel_cmdline.running", "/proc/cmdline")].status == "drift"
    assert found[("bios.iommu", "iommu")].status == "drift"
    engine.apply(Root(str(dest)), settings)
    found = findings_of(dest, settings)
    kind = "bls" if os_ is RHEL else "grub"
    assert found[("kernel_cmdline.configured", kind)].status == "ok"
    running = found[("kernel_cmdline.running", "/proc/cmdline")]
    assert running.status == "pending" and "reboot" in running.remedy
    # the bios checks judge the same facts: the fix waits in the boot loader, not drift
    for target in ("iommu", "pci=realloc", "amd_iommu"):
        assert found[("bios.iommu", target)].status == "pending", target
    simnode.reboot(str(dest))
    booted = (dest / "proc/cmdline").read_text().strip()
    assert booted == f"BOOT_IMAGE=/vmlinuz root=/dev/sda ro {ACS} iommu=pt pci=realloc=off"
    found = findings_of(dest, settings)
    assert found[("kernel_cmdline.running", "/proc/cmdline")].status == "ok"
    assert {found[("bios.iommu", t)].status for t in ("iommu", "pci=realloc")} == {"ok"}
    assert ("bios.iommu", "amd_iommu") not in found
    # the kernel's own view follows: with iommu=pt the IOMMU groups are passthrough (identity)
    assert (dest / "sys/kernel/iommu_groups/0/type").read_text().strip() == "identity"


@pytest.mark.parametrize("os_", [RHEL, UBUNTU], ids=["bls", "grub"])
def test_a_reboot_of_an_unchanged_boot_loader_keeps_the_command_line_byte_for_byte(tmp_path: Path, os_: dict) -> None:
    odd = "quiet root=/dev/sda 'x' ro"  # an order 10_linux would not write: kept while nothing changed
    for index, text in enumerate((f"BOOT_IMAGE=/vmlinuz root=/dev/sda ro {ACS}", odd, "ro iommu=pt")):
        dest = build(tmp_path, os_, text, name=f"n{index}")
        before = (dest / "proc/cmdline").read_bytes()
        simnode.reboot(str(dest))
        assert (dest / "proc/cmdline").read_bytes() == before


def test_audit_and_the_fleet_report_count_a_pending_node_apart(tmp_path: Path) -> None:
    dest = build(tmp_path, RHEL, "root=/dev/sda ro amd_iommu=on")
    areas = {"kernel_cmdline": ALLOWED}
    state = node.load(str(dest), areas)
    engine.apply(state.root, state.settings)
    state = node.load(str(dest), areas)
    result = audit.audit(state, areas, {}, {"nodetune_health_enabled": False}, [])
    assert result["summary"]["counts"]["pending"] >= 4
    assert "kernel_cmdline.running" in result["summary"]["pending_ids"]
    drift = [f for f in result["findings"] if f["status"] == "drift" and f["id"].startswith(("kernel_", "bios.iom"))]
    assert drift == []
    summary = report.fleet_summary({"a": result, "b": {"report": {"findings": []}}})
    assert summary["counts"] == {"clean": 1, "drifted": 0, "pending": 1, "failed": 0}
    assert summary["pending"]["a"][:1] == ["bios.iommu"]
    assert "1 pending (reboot)" in summary["text"][0] and "pending a reboot: a" in summary["text"]
    junit = report.junit_xml({"a": result})
    assert 'name="kernel_cmdline.running"' in junit and 'message="pending: pending: every boot entry' in junit


def test_node_load_builds_the_area_from_the_role_and_apply_through_the_module_path(tmp_path: Path) -> None:
    """Through node.load (what the tune and verify modules run): registered, ordered after the drop-in."""
    dest = build(tmp_path, UBUNTU, "root=/dev/sda ro")
    state = node.load(str(dest), {"kernel_cmdline": ALLOWED})
    ids = [s.id for s in state.settings if s.area == "kernel_cmdline"]
    assert ids == ["kernel_cmdline.dropin", "kernel_cmdline.configured"]
    dropin, configured = [s for s in state.settings if s.area == "kernel_cmdline"]
    assert configured.order > dropin.order and configured.after == (bootloader.DROPIN,)
    shutil.rmtree(dest)
