"""The slurm role through ansible-playbook on a lab MI300X node whose sockets take turns numbering CPUs (issue 27).

The role alone with its tag: check mode writes nothing and shows the gres.conf fragment it would write, apply writes
it with Slurm's core indexes (not the Linux CPU numbers), verify (``--tags slurm``) finds it in place and reports the
read-only checks of the node's slurm.conf and slurmd unit, a second apply changes nothing, and revert puts the tree
back byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.support.playbooks import ok, playbook, recap
from tests.support.specs import small_spec
from tests.support.trees import changed_paths, tree_digest

pytestmark = pytest.mark.slow

FRAGMENT = "etc/slurm/nodetune-gres.conf"
SLURMD = ("[Unit]\nDescription=Slurm node daemon\n\n[Service]\nExecStart=/usr/sbin/slurmd -D -s\n"
          "LimitMEMLOCK=infinity\n")


def test_the_slurm_role_alone_check_apply_verify_again_revert(tmp_path: Path) -> None:
    node = tmp_path / "node"
    simnode.build(small_spec(cpu__numbering="interleaved"), str(node))
    for rel, text in (("etc/slurm/slurm.conf", "ClusterName=lab\nGresTypes=gpu\n"),
                      ("etc/slurm/gres.conf", "Include /etc/slurm/nodetune-gres.conf\n"),
                      ("usr/lib/systemd/system/slurmd.service", SLURMD)):
        (node / rel).parent.mkdir(parents=True, exist_ok=True)
        (node / rel).write_text(text)
    pristine = tree_digest(node)
    data = {"all": {"hosts": {"node1": {"nodetune_root": str(node), "nodetune_slurm_enabled": True}}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "nodetune_lab_backend": "simulated", "nodetune_report_dir": str(tmp_path / "reports")}}}
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(yaml.safe_dump(data))
    book = tmp_path / "slurm.yml"
    book.write_text(yaml.safe_dump([{"name": "Slurm alone", "hosts": "all", "gather_facts": False,
                                     "roles": ["slurm"]}]))

    check = ok(playbook(hosts, str(book), "--tags", "slurm", "--check", "--diff"))
    assert recap(check, "node1")["changed"] == 1
    assert "nodetune-gres.conf" in check.stdout, check.stdout[-4000:]
    assert tree_digest(node) == pristine

    applied = ok(playbook(hosts, str(book), "--tags", "slurm"))
    assert recap(applied, "node1")["changed"] == 1
    lines = [line for line in (node / FRAGMENT).read_text().splitlines() if line.startswith("Name=")]
    # GPU 0000:05:00.0's rank holds Linux CPUs 2,4,6 (socket 0's cores 1-3), 0000:85:00.0's 3,5,7 (socket 1's
    # cores 1-3, after socket 0's 8 cores): Slurm's cores 1-3 and 9-11
    assert lines == ["Name=gpu Type=mi300x File=/dev/dri/renderD128 Cores=1-3",
                     "Name=gpu Type=mi300x File=/dev/dri/renderD129 Cores=9-11"]
    assert "# GPU 0000:05:00.0 partition 0 (rank 0): Linux CPUs 2,4,6\n" in (node / FRAGMENT).read_text()

    ok(playbook(hosts, "playbooks/verify.yml", "--tags", "slurm"))
    findings = json.loads((tmp_path / "reports" / "nodes" / "node1.json").read_text())["findings"]
    slurm = sorted((f["id"], f["status"]) for f in findings if f["id"].startswith("slurm."))
    assert slurm == [("slurm.gres", "ok"), ("slurm.gres_include", "ok"), ("slurm.propagate_limits", "drift"),
                     ("slurm.slurmd_memlock", "ok")]

    again = ok(playbook(hosts, str(book), "--tags", "slurm"))
    assert recap(again, "node1")["changed"] == 0

    ok(playbook(hosts, "playbooks/revert.yml"))
    assert changed_paths(pristine, tree_digest(node)) == []
