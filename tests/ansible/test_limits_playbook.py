"""The limits area through ansible-playbook on a simulated node (issue 26 item 2).

The node is as a stock image leaves it: 64 MiB of locked memory in limits.d and in systemd's DefaultLimitMEMLOCK,
and slurmd enabled and running since boot with that limit. The area's role alone, with its tag: check mode shows
the three files and writes nothing; the apply writes them; verify finds the files right but the manager and slurmd
not yet using them (drift naming the daemon-reload and the restart), health.memlock handed to the area; once the
operator reloads systemd and restarts slurmd (the simulated node's systemd, as systemctl would) verify is clean; a
second apply changes nothing; revert removes the files and the drop-in directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from ansible_collections.nodetune.lab.plugins.module_utils import simnode, simservices
from ansible_collections.nodetune.lab.plugins.module_utils.simkernel import sim_root

from tests.support.playbooks import ok, playbook, recap, write_inventory
from tests.support.specs import small_mi250_spec as small_spec
from tests.support.trees import changed_paths, tree_digest

pytestmark = pytest.mark.slow

SLURMD = ("[Unit]\nDescription=Slurm node daemon\n\n[Service]\nType=simple\nExecStart=/usr/sbin/slurmd -D -s\n"
          "LimitNOFILE=131072\n\n[Install]\nWantedBy=multi-user.target\n")


def findings(reports: Path) -> dict[tuple[str, str], dict]:
    data = json.loads((reports / "nodes" / "node1.json").read_text())
    return {(f["id"], f["target"]): f for f in data["findings"]}


def test_the_limits_role_alone_check_apply_verify_again_and_revert(tmp_path: Path) -> None:
    node = tmp_path / "node"
    spec = small_spec()
    spec["faults"] = {"memlock": 65536}
    simnode.build(spec, str(node))
    (node / "usr/lib/systemd/system").mkdir(parents=True, exist_ok=True)
    (node / "usr/lib/systemd/system/slurmd.service").write_text(SLURMD)
    os.symlink("/usr/lib/systemd/system/slurmd.service",
               node / "etc/systemd/system/multi-user.target.wants/slurmd.service")
    simnode.reboot(str(node))
    inventory = write_inventory(tmp_path, {"node1": {
        "nodetune_root": str(node), "nodetune_limits_enabled": True, "nodetune_limits_units": ["slurmd.service"]}})
    reports = tmp_path / "reports"
    book = tmp_path / "limits.yml"
    book.write_text(yaml.safe_dump([{"name": "Limits alone", "hosts": "all", "gather_facts": False,
                                     "roles": ["limits"]}]))
    pristine = tree_digest(node)

    # check mode with diff: the three files shown, nothing written
    check = ok(playbook(inventory, str(book), "--tags", "limits", "--check", "--diff"))
    assert recap(check, "node1")["changed"] == 1
    for line in ("/etc/security/limits.d/99-nodetune-limits.conf",
                 "/etc/systemd/system.conf.d/99-nodetune-limits.conf",
                 "/etc/systemd/system/slurmd.service.d/nodetune-limits.conf", "DefaultLimitMEMLOCK=infinity",
                 "LimitMEMLOCK=infinity"):
        assert line in check.stdout, check.stdout[-4000:]
    assert tree_digest(node) == pristine

    # apply: the files, and nothing else but the journal and the node-local checker's files (no reload, no restart)
    ok(playbook(inventory, str(book), "--tags", "limits"))
    touched = changed_paths(pristine, tree_digest(node))
    assert [p for p in touched if not p.startswith(("var/lib", "etc/nodetune", "usr/local"))] == [
        "etc/security/limits.d/99-nodetune-limits.conf", "etc/systemd/system.conf.d/99-nodetune-limits.conf",
        "etc/systemd/system/slurmd.service.d", "etc/systemd/system/slurmd.service.d/nodetune-limits.conf"], touched

    # verify: the files are right, what runs is not yet; health.memlock is the area's
    ok(playbook(inventory, "playbooks/verify.yml", "--tags", "limits"))
    found = findings(reports)
    assert {k for k, f in found.items() if k[0].startswith("limits.") and f["status"] == "drift"} == {
        ("limits.effective", "DefaultLimitMEMLOCK"), ("limits.effective", "slurmd.service")}
    assert "daemon-reload" in found[("limits.effective", "DefaultLimitMEMLOCK")]["remedy"]
    assert found[("limits.pam", "/etc/security/limits.d/99-nodetune-limits.conf")]["status"] == "ok"
    assert found[("limits.effective", "pam * memlock")]["status"] == "ok"
    assert [f["status"] for k, f in found.items() if k[0] == "health.memlock"] == ["not_applicable"]

    # the operator reloads systemd: the default is in effect, slurmd still runs with its old limit
    root = sim_root(str(node))
    simservices.daemon_reload(root)
    ok(playbook(inventory, "playbooks/verify.yml", "--tags", "limits"))
    found = findings(reports)
    assert found[("limits.effective", "DefaultLimitMEMLOCK")]["status"] == "ok"
    slurmd = found[("limits.effective", "slurmd.service")]
    assert slurmd["status"] == "drift" and "systemctl restart slurmd.service" in slurmd["remedy"], slurmd
    # ... and restarts slurmd: clean
    simservices.restart(root, "slurmd.service")
    ok(playbook(inventory, "playbooks/verify.yml", "--tags", "limits"))
    assert {f["status"] for k, f in findings(reports).items() if k[0].startswith("limits.")} == {"ok"}

    # a second apply changes nothing
    assert recap(ok(playbook(inventory, str(book), "--tags", "limits")), "node1")["changed"] == 0

    # revert: the files and the drop-in directory are gone; only the reload's and restart's runtime state remains
    ok(playbook(inventory, "playbooks/revert.yml"))
    left = changed_paths(pristine, tree_digest(node))
    assert [p for p in left if not p.startswith(("run/", "proc/", "var/lib/nodetune"))] == [], left
    assert not (node / "etc/systemd/system/slurmd.service.d").exists()
