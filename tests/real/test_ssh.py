"""The SSH lane (issue 22 item 3): the playbooks, the CLI and the API over real SSH, with become, to small simulated
nodes whose modules run under the node's own (system) Python.

A throw-away sshd on 127.0.0.1 and a non-root user with passwordless sudo (tests/support/sshd.py; root only,
skipped with the reason elsewhere). Every node is reached through it: ``ansible_host: 127.0.0.1``, that user,
``become: true``. The node trees belong to root and are not writable by the user, so a write that lands proves
become. Wall times go to the JUnit file (record_property); the CLI's is compared with the playbook's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import yaml
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from nodetune import api
from tests.support import sshd
from tests.support.fullsize import lab_tuning, scratch_dir
from tests.support.playbooks import ok, playbook, recap
from tests.support.specs import small_mi250_spec as small_spec
from tests.support.trees import reverted_differences, tree_digest

OPT_IN = "NODETUNE_REAL_LANES"


def _refusal() -> str | None:
    if os.environ.get(OPT_IN) != "1":
        return (f"the SSH lane adds a user and a sudoers drop-in and starts sshd on this machine: opt in with "
                f"{OPT_IN}=1 (CI's first line does)")
    return sshd.refusal()


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_refusal() is not None, reason=str(_refusal()))]

HOSTS = ("ssh-node1", "ssh-node2")
# BIOS-level and health checks report the simulated hardware itself: left out so that a tuned node verifies clean
QUIET = {"nodetune_bios_check_enabled": False, "nodetune_health_enabled": False}
T = TypeVar("T")


@pytest.fixture(scope="module")
def server() -> Iterator[sshd.SshServer]:
    with sshd.sshd_server() as running:
        yield running


@pytest.fixture(scope="module")
def fleet(server: sshd.SshServer) -> Iterator[tuple[Path, dict[str, Path]]]:
    """Small nodes (root's files, readable by the SSH user, writable only through sudo) and their SSH inventory."""
    scratch = scratch_dir("nodetune-ssh-nodes-")
    scratch.chmod(0o755)
    try:
        nodes = {host: scratch / "nodes" / host for host in HOSTS}
        for node in nodes.values():
            simnode.build(small_spec(), str(node))
        yield write_ssh_inventory(scratch / "inventory", server, nodes), nodes
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def write_ssh_inventory(folder: Path, server: sshd.SshServer, nodes: dict[str, Path]) -> Path:
    """As inventories/lab (the lab's opt-ins, the simulated backend), each node reached over SSH. The connection
    variables are the lab group's, not all's: the controller's tasks (delegate_to localhost) stay local."""
    group_vars = folder / "group_vars" / "all"
    group_vars.mkdir(parents=True)
    (group_vars / "tuning.yml").write_text(yaml.safe_dump(lab_tuning()))
    (group_vars / "reports.yml").write_text(yaml.safe_dump({"nodetune_report_dir": str(folder / "reports")}))
    hosts = {host: {"nodetune_root": str(root)} for host, root in nodes.items()}
    lab = {"hosts": hosts, "vars": {**server.host_vars(), "nodetune_lab_backend": "simulated"}}
    path = folder / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"lab": lab}}}))
    return path


def timed(record: Callable[[str, object], None], name: str, call: Callable[[], T]) -> tuple[T, float]:
    started = time.monotonic()
    result = call()
    wall = round(time.monotonic() - started, 2)
    record(f"wall_s_{name}", wall)
    return result, wall


def logins(server: sshd.SshServer) -> int:
    return (server.folder / "sshd.log").read_text().count(f"Accepted publickey for {server.user} ")


def test_the_server_is_what_it_claims(server: sshd.SshServer) -> None:
    """127.0.0.1 only, a non-root user, passwordless sudo, the system Python on the node."""
    listening = server.ssh("id", "-u")
    assert listening.returncode == 0 and listening.stdout.strip() != "0", listening.stderr
    assert server.ssh("sudo", "-n", "id", "-u").stdout.strip() == "0"
    assert re.match(r"Python 3\.\d+", server.ssh("/usr/bin/python3", "-V").stdout)
    config = (server.folder / "sshd_config").read_text()
    assert "ListenAddress 127.0.0.1\n" in config and "PasswordAuthentication no\n" in config


def test_playbooks_cli_and_api_over_ssh(server: sshd.SshServer, fleet: tuple[Path, dict[str, Path]],
                                        record_property: Callable[[str, object], None]) -> None:
    inventory, nodes = fleet
    pristine = {host: tree_digest(root) for host, root in nodes.items()}
    quiet = [word for name, value in QUIET.items() for word in ("-e", f"{name}={str(value).lower()}")]
    before = logins(server)

    # site.yml: applied over SSH, as root through sudo (the user cannot write the root-owned tree)
    site, site_wall = timed(record_property, "site", lambda: ok(playbook(inventory, "site.yml")))
    for host, root in nodes.items():
        assert recap(site, host)["changed"] >= 1 and recap(site, host)["unreachable"] == 0
        assert (root / "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor").read_text().strip() == "performance"
        assert os.stat(root / "var/lib/nodetune").st_uid == 0
    assert logins(server) > before, "no SSH login: the playbook did not go through the server"
    tuned = {host: tree_digest(root) for host, root in nodes.items()}

    noop, noop_wall = timed(record_property, "site_noop", lambda: ok(playbook(inventory, "site.yml")))
    assert {host: recap(noop, host)["changed"] for host in HOSTS} == dict.fromkeys(HOSTS, 0)
    assert {host: tree_digest(root) for host, root in nodes.items()} == tuned

    audit, verify_wall = timed(record_property, "verify_playbook",
                               lambda: ok(playbook(inventory, "playbooks/verify.yml", *quiet)))
    assert {host: recap(audit, host)["changed"] for host in HOSTS} == dict.fromkeys(HOSTS, 0)
    summary = json.loads((inventory.parent / "reports" / "summary.json").read_text())
    assert summary["counts"] == {"clean": 2, "drifted": 0, "pending": 0, "failed": 0}, summary

    # the CLI over the same inventory, as a user runs it (a process of its own, through ansible-runner)
    script = Path(sys.executable).parent / "nodetune"
    command = [str(script), "verify", "-i", str(inventory), "--json", *quiet]
    cli, cli_wall = timed(record_property, "cli_verify", lambda: subprocess.run(
        command, capture_output=True, text=True, timeout=300, check=False,
        env=dict(os.environ, PATH=f"{script.parent}{os.pathsep}{os.environ.get('PATH', '')}", NO_COLOR="1")))
    assert cli.returncode == 0, cli.stdout[-3000:] + cli.stderr[-3000:]
    assert {host: node["status"] for host, node in json.loads(cli.stdout)["nodes"].items()} == dict.fromkeys(
        HOSTS, "ok")
    record_property("cli_verify_over_playbook", round(cli_wall / verify_wall, 2))
    masters = list((server.folder / "cp").iterdir())  # the ControlPersist masters' sockets: still open
    assert masters, "no ControlPersist master: the runs did not share SSH connections as Ansible's default does"
    # The CLI ran the same playbook: what it adds is ansible-runner and the supervisor (which must not wait for
    # SSH's ControlPersist masters, 60 s)
    assert cli_wall < verify_wall + 30, f"CLI {cli_wall} s, playbook alone {verify_wall} s"

    # revert over SSH: every tree byte for byte as before nodetune
    _, revert_wall = timed(record_property, "revert", lambda: ok(playbook(inventory, "playbooks/revert.yml")))
    for host, root in nodes.items():
        assert reverted_differences(pristine[host], tree_digest(root)) == [], host

    # the API in check mode on the reverted nodes: the changes listed, nothing written
    planned, api_wall = timed(record_property, "api_apply_check", lambda: api.apply(inventory, check=True))
    assert set(planned.nodes) == set(HOSTS)
    for host, node in planned.nodes.items():
        assert node.status == "changed" and any(s.id == "cpu.governor" for s in node.settings), node
        assert reverted_differences(pristine[host], tree_digest(nodes[host])) == [], host
    assert api_wall < site_wall + 30, f"api.apply(check=True) {api_wall} s, site.yml {site_wall} s"
    print(f"over SSH: site {site_wall} s, no-op {noop_wall} s, verify.yml {verify_wall} s, CLI verify {cli_wall} s, "
          f"revert {revert_wall} s, api.apply(check) {api_wall} s")
