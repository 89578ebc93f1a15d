"""The ansible-playbook of an API run, supervised so that it never outlives the process that started it.

ansible-runner starts the playbook in its own session (pexpect), so a signal to the caller does not reach it,
and when the caller is killed (SIGKILL) the playbook used to carry on and finish the apply alone. This small
supervisor is what runner starts instead (its ``binary``): it asks the kernel for SIGTERM when its parent dies
(``PR_SET_PDEATHSIG``), runs ansible-playbook in its own process group (the session's: with its workers and the
modules they run), and on SIGTERM, SIGINT or SIGHUP kills that whole group. A cancelled apply stops where it is;
the values written so far are in the node's journal (``nodetune revert`` restores them).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(143)


def _stop_group(signum: int, frame: object) -> None:
    del frame
    os.killpg(os.getpgrp(), signal.SIGKILL)  # ansible-playbook, its workers, their modules, and this process
    os._exit(128 + signum)


def main(parent: int, playbook: str, args: list[str]) -> int:
    """Run ``playbook`` (ansible-playbook) with ``args`` until it ends or a signal stops the whole group."""
    _die_with_parent(parent)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _stop_group)
    if os.getpgrp() != os.getpid():  # not a group leader (not started by pexpect): lead one, to stop it whole
        os.setpgid(0, 0)
    return subprocess.call([playbook, *args])


def write_launcher(folder: str, parent: int, playbook: str, target: str) -> str:
    """An executable that runs :func:`main` with this Python; returns its path (runner's ``binary``). Runner
    passes no playbook to a ``binary``: ``target`` (the playbook file or name) is appended here."""
    source = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(folder, "ansible-playbook")
    with open(path, "w") as out:
        out.write(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {source!r})\n"
                  "from nodetune._supervise import main\n"
                  f"sys.exit(main({parent}, {playbook!r}, sys.argv[1:] + [{target!r}]))\n")
    os.chmod(path, 0o700)
    return path
