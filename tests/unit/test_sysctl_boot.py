"""The value a sysctl gets at boot, by sysctl.d(5)'s rules, on plain trees."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils import sysctl_boot
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.instinct.plugins.module_utils.setting import FILE, INT, Setting

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
    assert sysctl_boot.boot_values(Root(str(tmp_path)), ["vm.dirty_ratio", "vm.dirty_bytes"]) == {
        "vm.dirty_ratio": ("5", "etc/sysctl.d/99-site.conf"), "vm.dirty_bytes": ("5", "etc/sysctl.d/99-site.conf")}


def test_checks_report_nodetunes_own_file_as_the_winner(tmp_path: Path) -> None:
    checks = sysctl_boot.boot_checks(Root(str(tmp_path)), desired())
    assert checks == [{"key": "vm.dirty_ratio", "value": "20", "boot_value": "20", "file": "/" + OURS,
                       "nodetune": True, "shadowed": False, "via": ""}]
    assert sysctl_boot.boot_checks(Root(str(tmp_path)), desired()[:1]) == []  # nothing persisted: nothing to check
