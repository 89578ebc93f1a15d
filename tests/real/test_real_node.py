"""The real-node lane: nodetune against this machine's own kernel, the one exception to "never tune the machine
you work on" (the brief and TOOLING.md). Opt-in: it runs only where ``NODETUNE_REAL_LANES=1`` is set (`.ci/run` sets
it for CI's first line, on a throw-away VM), as root, on a machine with no GPU; it is skipped, saying why, anywhere
else.

Before anything it snapshots every value nodetune may touch: each kernel attribute the plan names (sysctls, IRQ
affinity, block queues, cpufreq/idle where present) and every file below the folders nodetune writes into. Then, on
``/`` with ``nodetune_controller_allowed``: apply, verify, a second apply, ``nodetune-check``, revert. Never SMT or
CPU offlining (``nodetune_smt_enabled: false``), never the network (no IPoIB, no MTU: this VM has no RDMA
device). After revert every snapshotted
value must be back and no nodetune file left; a ``finally`` restores from the snapshot whatever happened.

The lab simulator is checked against what this lane sees: where they disagree, the kernel wins and the simulator is
changed (with a test of its own).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodetune import api

OPT_IN = "NODETUNE_REAL_LANES"
# Only what a throw-away VM can lose: the tuned kernel values are restored, the files below come and go.
VARIABLES: dict[str, Any] = {
    "nodetune_controller_allowed": True,
    "nodetune_smt_enabled": False,  # never CPUs offline
    # no RDMA device here: the infiniband area must set nothing (it used to lower rmem_max/wmem_max)
    # values this kernel stores otherwise than written (fs/pipe.c round_pipe_size, sched_rr_handler): they must settle
    "nodetune_sysctl_extra": {"fs.pipe-max-size": 2000000, "kernel.sched_rr_timeslice_ms": 0, "vm.swappiness": 33},
    "nodetune_vm_dirty_ratio": 31,
    "nodetune_vm_dirty_background_ratio": 7,
    "nodetune_bios_check_enabled": False,  # firmware facts of a VM: not what this lane proves
    "nodetune_health_enabled": False,
}
# Folders nodetune writes files into (the persistence, the checker, the journal, the environment files).
FILE_DIRS = ("/etc/sysctl.d", "/etc/udev/rules.d", "/etc/systemd/system", "/etc/nodetune", "/etc/profile.d",
             "/etc/modprobe.d", "/etc/default", "/usr/local/sbin", "/usr/local/bin", "/var/lib/nodetune")


def _refusal() -> str | None:
    if os.environ.get(OPT_IN) != "1":
        return f"the real-node lane tunes this machine's own kernel: opt in with {OPT_IN}=1 (CI's first line does)"
    if os.geteuid() != 0:
        return "the real-node lane needs root (it writes /proc/sys and /proc/irq)"
    if Path("/sys/class/kfd").exists() or Path("/dev/kfd").exists():
        return "this machine has AMD GPUs: the real-node lane runs only on throw-away VMs"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_refusal() is not None, reason=str(_refusal()))]


# --------------------------------------------------------------------------------------------- the snapshot
class Snapshot:
    """Kernel attributes (path -> text) and the files below FILE_DIRS (path -> bytes, mode, or a link target)."""

    def __init__(self, attributes: list[str]) -> None:
        self.attributes = {path: _read(path) for path in sorted(set(attributes))}
        self.files = _files()

    def differences(self) -> list[str]:
        now = _files()
        out = [f"{path}: {before!r} -> {_read(path)!r}" for path, before in self.attributes.items()
               if _read(path) != before]
        out += [f"{path}: {'added' if path not in self.files else 'removed' if path not in now else 'changed'}"
                for path in sorted(set(now) | set(self.files)) if now.get(path) != self.files.get(path)]
        return out

    def restore(self) -> list[str]:
        """Put back whatever differs; returns what could not be (say, an IRQ the kernel manages)."""
        failed = []
        for path, before in self.attributes.items():
            if before is not None and _read(path) != before:
                try:
                    Path(path).write_text(before)
                except OSError as exc:
                    failed.append(f"{path}: {exc}")
        now = _files()
        for path in sorted(set(now) - set(self.files), key=len, reverse=True):
            _remove(path)
        for path, entry in self.files.items():
            if now.get(path) != entry:
                _put(path, entry)
        return failed


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _files() -> dict[str, tuple]:
    out: dict[str, tuple] = {}
    for top in FILE_DIRS:
        if not os.path.lexists(top):
            continue
        out[top] = ("dir",)
        for dirpath, dirnames, filenames in os.walk(top):
            for name in dirnames + filenames:
                full = os.path.join(dirpath, name)
                st = os.lstat(full)
                if os.path.islink(full):
                    out[full] = ("link", os.readlink(full))
                elif os.path.isdir(full):
                    out[full] = ("dir",)
                else:
                    data = Path(full).read_bytes()
                    out[full] = ("file", st.st_mode & 0o7777, hashlib.sha256(data).hexdigest(), data)
    return out


def _remove(path: str) -> None:
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)


def _put(path: str, entry: tuple) -> None:
    if os.path.lexists(path) and entry[0] != "dir":
        _remove(path)
    if entry[0] == "dir":
        os.makedirs(path, exist_ok=True)
    elif entry[0] == "link":
        os.symlink(entry[1], path)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Path(path).write_bytes(entry[3])
        os.chmod(path, entry[1])


# --------------------------------------------------------------------------------------------- the lane
def _run(call: Any, **kwargs: Any) -> api.NodeResult:
    result = call(api.local_inventory("/"), extra_vars=VARIABLES, raise_on_failure=False, **kwargs)
    node = result.nodes["localhost"]
    assert not node.failed, f"{call.__name__}: {node.message}"
    return node


@pytest.fixture
def snapshot() -> Iterator[Snapshot]:
    planned = _run(api.apply, check=True)
    attributes = [change.path for change in planned.settings if change.path and change.path.startswith(
        ("/proc/", "/sys/"))]
    taken = Snapshot(attributes)
    assert taken.attributes, "the plan names no kernel attribute of this machine: the lane would prove nothing"
    try:
        yield taken
    finally:
        failed = taken.restore()
        assert taken.differences() == [] and not failed, failed


def test_apply_verify_reapply_check_and_revert_on_this_kernel(snapshot: Snapshot,
                                                              record_property: Any) -> None:
    applied = _run(api.apply)
    exercised = sorted({f"{change.id}[{change.target}]" for change in applied.settings})
    record_property("settings_exercised", ", ".join(exercised))
    print("\nreal-node lane, settings exercised:\n  " + "\n  ".join(exercised))
    assert applied.settings, "apply changed nothing on this machine"

    audit = _run(api.verify)
    drift = [f"{f.id}[{f.target}]: expected {f.expected!r}, found {f.actual!r}" for f in audit.drift]
    assert drift == [], "verify right after apply:\n" + "\n".join(drift)

    again = _run(api.apply)
    assert [f"{c.id}[{c.target}]" for c in again.settings] == [], "the second apply changed something"

    checker = subprocess.run(["/usr/local/sbin/nodetune-check"], capture_output=True, text=True, timeout=120)
    assert checker.returncode == 0, f"nodetune-check disagrees with verify (clean):\n{checker.stdout}{checker.stderr}"

    reverted = _run(api.revert)
    assert reverted.restored, "revert restored nothing"
    assert snapshot.differences() == [], "after revert"
