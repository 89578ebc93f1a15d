"""The ansible-playbook of an API run, supervised so that it never outlives the process that started it.

ansible-runner starts the playbook in its own session (pexpect), so a signal to the caller does not reach it,
and Ansible's workers each run in a session of their own, so killing the playbook's process group does not stop
the module a worker runs: when the caller was killed (SIGKILL) the playbook carried on and finished the apply
alone. This small supervisor is what runner starts instead (its ``binary``):

- it asks the kernel for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``) and adopts every orphan of its
  tree (``PR_SET_CHILD_SUBREAPER``), so that no process of the run escapes it;
- it writes its pid to ``supervisor.pid`` in the run's folder, where the API finds it to cancel the run;
- on SIGTERM, SIGINT or SIGHUP it freezes its whole process tree (SIGSTOP, until no new process appears), kills
  it (SIGKILL) and exits with 128 + the signal. A cancelled apply stops where it is; the values written so far
  are in the node's journal (``nodetune revert`` restores them);
- once the playbook itself has ended (done, or killed), it stops what is left of its tree at once: the workers of a
  killed playbook block forever writing to a pipe nobody reads. SSH's ControlPersist masters are left running (and
  not waited for): they outlive the playbook by design, until their own timeout.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PID_FILE = "supervisor.pid"


def _prctl(option: int, value: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _children() -> dict[int, list[int]]:
    """Every process's children, from /proc."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        out.setdefault(int(fields[1]), []).append(int(entry))
    return out


def descendants(pid: int, spare: Callable[[int], bool] = lambda pid: False) -> list[int]:
    """Every descendant of ``pid``, less those ``spare`` names and their own descendants."""
    children = _children()
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        if spare(child):
            continue
        found.append(child)
        todo.extend(children.get(child, []))
    return found


def stop_tree(pid: int, spare: Callable[[int], bool] = lambda pid: False) -> None:
    """Freeze every descendant of ``pid`` but the spared (none can fork any more), then kill them all."""
    frozen: set[int] = set()
    while True:
        new = [p for p in descendants(pid, spare) if p not in frozen]
        if not new:
            break
        for child in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGSTOP)
        frozen.update(new)
    for child in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def ssh_master(pid: int) -> bool:
    """Whether ``pid`` is a backgrounded SSH ControlPersist master: OpenSSH retitles it ``ssh: <path> [mux]``; an ssh
    with ControlMaster/ControlPersist options counts once it has daemonised (leads its own session)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().decode(errors="replace").split("\0")
    except OSError:
        return False
    words = " ".join(argv).split()  # a retitled process may hold its whole command line in argv[0]
    if not words:
        return False
    if words[0] == "ssh:" and "[mux]" in words:
        return True
    options = any("ControlPersist" in word or "ControlMaster" in word for word in words[1:])
    try:
        return os.path.basename(words[0]) == "ssh" and options and os.getsid(pid) == pid
    except OSError:
        return False


def _reap(spared: Callable[[int], bool]) -> None:
    """Reap this subreaper's children (its duty) until only spared ones are left running."""
    deadline = time.monotonic() + 10  # bounded: a killed process in uninterruptible sleep must not hang the run
    while time.monotonic() < deadline:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if all(spared(child) for child in _children().get(os.getpid(), [])):
                return
            time.sleep(0.02)


def _stop(signum: int, frame: object) -> None:
    del frame
    stop_tree(os.getpid())
    os._exit(128 + signum)


def main(parent: int, playbook: str, args: list[str], folder: str | None = None) -> int:
    """Run ``playbook`` (ansible-playbook) with ``args`` until it ends or a signal stops its whole tree."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _stop)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if os.getppid() != parent:  # the parent died before the request took effect
        return 143
    if folder:
        with open(os.path.join(folder, PID_FILE), "w") as out:
            out.write(str(os.getpid()))
    child = subprocess.Popen([playbook, *args])
    code = child.wait()
    # The playbook has ended: anything left of its tree (but SSH masters) is a leftover that may never end alone.
    stop_tree(os.getpid(), spare=ssh_master)
    _reap(ssh_master)
    return code if code >= 0 else 128 - code  # killed by a signal: the shell's 128 + N, as the CLI's own


def write_launcher(folder: str, parent: int, playbook: str, target: str) -> str:
    """An executable that runs :func:`main` with this Python; returns its path (runner's ``binary``). Runner
    passes no playbook to a ``binary``: ``target`` (the playbook file or name) is appended here."""
    source = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(folder, "ansible-playbook")
    with open(path, "w") as out:
        out.write(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {source!r})\n"
                  "from nodetune._supervise import main\n"
                  f"sys.exit(main({parent}, {playbook!r}, sys.argv[1:] + [{target!r}], {folder!r}))\n")
    os.chmod(path, 0o700)
    return path


def cancel(folder: str, signum: int = signal.SIGTERM) -> bool:
    """Ask the run's supervisor to stop its tree; False when it is not (or no longer) running."""
    try:
        with open(os.path.join(folder, PID_FILE)) as handle:
            os.kill(int(handle.read().strip()), signum)
    except (OSError, ValueError):
        return False
    return True


def running(folder: str) -> bool:
    try:
        with open(os.path.join(folder, PID_FILE)) as handle:
            os.kill(int(handle.read().strip()), 0)
    except (OSError, ValueError):
        return False
    return True
