"""bench/fleet_ssh.py over real SSH (issue 28 item 3): the nodes' CPU is counted whole, and a one-node run prints
its ratio lines for both pipelining settings. Root only, opted in as the SSH lane is (NODETUNE_REAL_LANES=1): it
adds a user and a sudoers drop-in and starts sshd on 127.0.0.1 (tests/support/sshd.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import sshd

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import fleet_ssh  # noqa: E402


def _refusal() -> str | None:
    if os.environ.get("NODETUNE_REAL_LANES") != "1":
        return "starts sshd and adds a sudo user on this machine: opt in with NODETUNE_REAL_LANES=1"
    return sshd.refusal()


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_refusal() is not None, reason=str(_refusal()))]
BURN = "python3 -c 'import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.4: pass'"


def test_the_nodes_cpu_counts_what_sudo_runs_on_a_terminal() -> None:
    """Without pipelining Ansible runs a module with ``ssh -tt`` through sudo (Debian's sudo has ``use_pty``): the
    server's process tree keeps almost none of its CPU time (a child's times reach a parent that waits for it:
    proc(5) cutime), the server's cgroup counts all of it, with a terminal and without."""
    with fleet_ssh.node_cgroup() as group, sshd.sshd_server() as server:
        group = fleet_ssh.join(group, (server.folder / "sshd.pid").read_text().strip())
        assert group is not None
        probe = fleet_ssh.SshCpu(server, group)
        for tty in ([], ["-tt"]):
            before = probe.read()[1]
            done = subprocess.run(["ssh", *sshd.SSH_OPTIONS, *tty, "-i", str(server.key), "-p", str(server.port),
                                   f"{server.user}@127.0.0.1", f'/bin/sh -c "sudo -n -H {BURN}"'],
                                  capture_output=True, text=True, timeout=60, check=False)
            assert done.returncode == 0, done.stderr
            assert probe.read()[1] - before >= 0.35, tty
    assert not group.exists()


def test_a_one_node_run_prints_both_settings_ratio_lines(capsys: pytest.CaptureFixture[str]) -> None:
    lines: list[str] = []
    figures = fleet_ssh.run([1], 1, out=lines)
    number = r"[0-9]+\.[0-9]+"
    for mode in ("off", "on"):
        for case, target in (("site", "2.5"), ("site \\(no-op\\)", "1.3")):
            pattern = (rf"ratio fleet\[ssh, pipelining {mode}\] N=1 {case}: {number}x ping wall \(rounds: {number}\), "
                       rf"{number}x ping CPU \(target <= {target}x\): (OK|OVER)")
            assert any(re.fullmatch(pattern, line) for line in lines), (pattern, lines)
        by_case = figures["ssh"]["1"][mode]
        assert by_case["ping"]["node_cpu_s"] > 0 and by_case["site"]["node_cpu_s"] > by_case["ping"]["node_cpu_s"]
    assert "x ping: wall (each round); CPU = 1 + what the nodes add" in capsys.readouterr().out
