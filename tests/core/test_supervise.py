"""The run's supervisor (nodetune._supervise) with a fake ansible-playbook: once the playbook has ended it stops
the leftovers of its tree at once, and leaves SSH's ControlPersist masters running without waiting for them.

Issue 22: over SSH every command waited for the masters' 60 s ControlPersist. Issue 23 item 5: when ansible-playbook
was killed (kill -9), its workers blocked on a pipe forever and the supervisor waited for them without limit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodetune._supervise import write_launcher

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the supervisor reads /proc")

# Starts daemonised processes (as an ssh ControlPersist master: own session, stdio closed) with the given
# argvs and a worker of its own, writes the pids and ends (or kills itself).
FAKE_PLAYBOOK = """#!{python}
import os, signal, sys

def detach(argv):
    done, wrote = os.pipe()  # close-on-exec: read() ends once the process runs as argv
    if os.fork() == 0:
        if os.fork() == 0:  # as daemon(3): fork, then lead a session of its own
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.execv({sleep!r}, argv)
        os._exit(0)
    os.close(wrote)
    os.read(done, 1)
    os.wait()

def worker():  # a worker of the playbook's own (its child, in a session of its own)
    pid = os.fork()
    if pid == 0:
        os.setsid()
        os.execv({sleep!r}, ["sleep", "60"])
    return pid

pids = []
for argv in {argvs!r}:
    detach(argv)
pids.append(worker())
with open({pids_file!r}, "w") as out:
    out.write(" ".join(map(str, pids)))
if {kill_self!r}:
    os.kill(os.getpid(), signal.SIGKILL)
"""

MASTER_TITLE = "ssh: /root/.ansible/cp/{tag} [mux]"  # OpenSSH's title for a backgrounded master


def _processes_with(marker: str) -> list[int]:
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if marker in (proc / "cmdline").read_bytes().decode(errors="replace") \
                    and "Z" not in (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]:
                found.append(int(proc.name))
    return found


def _run_launcher(tmp_path: Path, argvs: list[list[str]], kill_self: bool = False) -> tuple[int, float, list[int]]:
    fake = tmp_path / "fake-ansible-playbook"
    pids_file = tmp_path / "pids"
    fake.write_text(FAKE_PLAYBOOK.format(python=sys.executable, sleep=shutil.which("sleep"), argvs=argvs,
                                         pids_file=str(pids_file), kill_self=kill_self))
    fake.chmod(0o700)
    launcher = write_launcher(str(tmp_path), os.getpid(), str(fake), "site.yml")
    started = time.monotonic()
    proc = subprocess.Popen([launcher], stdin=subprocess.DEVNULL)
    try:
        code = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()  # the old supervisor: it waited for every leftover
            proc.wait()
    elapsed = time.monotonic() - started
    return code, elapsed, [int(p) for p in pids_file.read_text().split()]


def test_ssh_masters_are_not_waited_for_but_leftovers_are_stopped(tmp_path: Path) -> None:
    tag = f"nodetune-test-{os.getpid()}-{tmp_path.name}"
    masters = [[MASTER_TITLE.format(tag=tag), "60"],
               [f"ssh -o ControlMaster=auto -o ControlPersist=60s -o ControlPath={tag}", "60"]]
    leftover = ["sleep", f"60.{os.getpid()}"]  # detached too, but not SSH: a leftover to stop
    try:
        code, elapsed, _ = _run_launcher(tmp_path, [*masters, leftover])
        assert code == 0 and elapsed < 10
        assert len(_processes_with(tag)) == 2, "the SSH masters are left running for the next run"
        assert _processes_with(leftover[1]) == []
    finally:
        for pid in _processes_with(tag):
            os.kill(pid, signal.SIGKILL)


def test_a_killed_playbook_ends_the_run_with_137_and_no_leftover(tmp_path: Path) -> None:
    code, elapsed, (worker,) = _run_launcher(tmp_path, [], kill_self=True)
    assert code == 128 + signal.SIGKILL and elapsed < 10
    assert not Path(f"/proc/{worker}").exists() or "Z" in Path(f"/proc/{worker}/stat").read_text().split(") ")[1][:1]
