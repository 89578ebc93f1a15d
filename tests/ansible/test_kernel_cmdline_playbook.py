"""The kernel_cmdline area through ansible-playbook on a simulated RHEL node (issue 26 item 1).

The node is the lab's MI300X as installed: BootLoaderSpec entries (a kernel's and a rescue entry) carrying the
guide's invalid amd_iommu=on and no pci=realloc=off, changed by the simulated grubby. The area's role alone, with its
tag: check mode shows every entry's arguments before and after and writes nothing; the apply changes the entries
and says a reboot is needed; verify finds the entries right and the running kernel not yet (pending, not drift: the
CLI exits 3); after the simulated reboot /proc/cmdline has them and verify is ok (exit 0); a second apply changes
nothing; revert puts every entry back.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import bootloader
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from nodetune.cli import main
from tests.support.playbooks import ok, playbook, recap, write_inventory
from tests.support.specs import small_mi300x_spec
from tests.support.trees import changed_paths, tree_digest

pytestmark = pytest.mark.slow


def entries(node: Path) -> dict[str, str]:
    return {p.name: bootloader.bls_entry(p.read_text()).get("options", "")
            for p in sorted((node / "boot/loader/entries").glob("*.conf"))}


def findings(reports: Path) -> dict[tuple[str, str], dict]:
    data = json.loads((reports / "nodes" / "node1.json").read_text())
    return {(f["id"], f["target"]): f for f in data["findings"]}


def cli_verify(node: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``nodetune verify --root`` of the area alone: its exit code and output."""
    code = main(["verify", "--root", str(node), "--tags", "kernel_cmdline", "-e", "nodetune_lab_backend=simulated",
                 "-e", "nodetune_kernel_cmdline_allowed=true"])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_kernel_cmdline_role_alone_check_apply_pending_reboot_again_and_revert(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = tmp_path / "node"
    simnode.build(small_mi300x_spec(), str(node))
    old = entries(node)
    assert all("amd_iommu=on" in options and "realloc" not in options for options in old.values())
    inventory = write_inventory(tmp_path, {"node1": {"nodetune_root": str(node),
                                                     "nodetune_kernel_cmdline_allowed": True}})
    reports = tmp_path / "reports"
    book = tmp_path / "kernel_cmdline.yml"
    book.write_text(yaml.safe_dump([{"name": "Kernel command line alone", "hosts": "all", "gather_facts": False,
                                     "roles": ["kernel_cmdline"]}]))
    pristine = tree_digest(node)

    # check mode with diff: every entry before and after, nothing written
    check = ok(playbook(inventory, str(book), "--tags", "kernel_cmdline", "--check", "--diff"))
    assert recap(check, "node1")["changed"] == 1
    assert "kernel_cmdline.configured" in check.stdout and "amd_iommu=on" in check.stdout, check.stdout[-4000:]
    wanted = {"root=/dev/mapper/rhel-root ro rd.lvm.lv=rhel/root iommu=pt "
              "pci=disable_acs_redir=pci:1022:14ab;pci:1000:c030 pci=realloc=off"}
    assert next(iter(wanted)) in check.stdout, check.stdout[-4000:]
    assert tree_digest(node) == pristine

    # apply: the entries (both: ALL), a reboot needed, nothing else but nodetune's own state files
    applied = ok(playbook(inventory, str(book), "--tags", "kernel_cmdline"))
    assert recap(applied, "node1")["changed"] == 1
    assert "reboot" in applied.stdout.lower(), applied.stdout[-4000:]
    touched = changed_paths(pristine, tree_digest(node))
    assert [p for p in touched if not p.startswith(("var/lib", "etc/nodetune", "usr/local"))] == [
        "boot/loader/entries/" + name for name in sorted(old)], touched
    assert set(entries(node).values()) == wanted

    # verify: configured, not yet running it: pending, which is no drift (the playbook passes; the CLI exits 3)
    ok(playbook(inventory, "playbooks/verify.yml", "--tags", "kernel_cmdline"))
    found = findings(reports)
    assert found[("kernel_cmdline.configured", "bls")]["status"] == "ok"
    running = found[("kernel_cmdline.running", "/proc/cmdline")]
    assert running["status"] == "pending" and "reboot" in running["remedy"], running
    assert not [k for k, f in found.items() if k[0].startswith("kernel_cmdline") and f["status"] == "drift"]
    code, out = cli_verify(node, capsys)
    assert code == 3, out[-3000:]

    # the simulated reboot boots the default entry: /proc/cmdline has them, verify is ok and the CLI exits 0
    simnode.reboot(str(node))
    assert (node / "proc/cmdline").read_text().split()[1:] == next(iter(wanted)).split()
    ok(playbook(inventory, "playbooks/verify.yml", "--tags", "kernel_cmdline"))
    assert findings(reports)[("kernel_cmdline.running", "/proc/cmdline")]["status"] == "ok"
    code, out = cli_verify(node, capsys)
    assert code == 0, out[-3000:]

    # a second apply changes nothing
    assert recap(ok(playbook(inventory, str(book), "--tags", "kernel_cmdline")), "node1")["changed"] == 0

    # revert: every entry as it was; only the reboot's runtime state remains
    ok(playbook(inventory, "playbooks/revert.yml"))
    assert entries(node) == old
    left = changed_paths(pristine, tree_digest(node))
    assert [p for p in left if not p.startswith(("run/", "proc/", "sys/"))] == [], left
