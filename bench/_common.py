"""Shared helpers of the benchmarks: the machine they ran on, timed child processes, interleaved repetitions.

The machines these run on are shared and noisy (two cores, other jobs), so every comparison is made side by side
in one run: the cases are interleaved round by round (a load spike hits both sides of a ratio), each is repeated,
and the median is kept. Ratios, not absolute times, are the result; wall time is what a user waits for, CPU time
(user + system of the process and every child it waited for) is steadier when other jobs hold the cores.
"""

from __future__ import annotations

import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def use_repository_code() -> None:
    """Import the collection, the package and tests/ from this checkout (bench scripts run as plain files)."""
    for entry in (REPO / "collection", REPO / "src", REPO):
        if str(entry) not in sys.path:
            sys.path.insert(0, str(entry))


# --------------------------------------------------------------------------------------------- the machine
def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def load_text() -> str:
    one, five, fifteen = load_average()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min) on {os.cpu_count()} CPUs"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


_ANSIBLE_TMP: list[str] = []


def ansible_tmpdir() -> str:
    """The TMPDIR of every ansible command the bench starts: one private folder, made on first use and removed at
    exit, whose path fits Ansible's socket (nodetune._tempdir: a test gives the bench a long TMPDIR of its own)."""
    if not _ANSIBLE_TMP:
        import atexit
        import shutil

        from nodetune._tempdir import make_run_dir

        folder, tmpdir = make_run_dir("nodetune-bench-")
        atexit.register(shutil.rmtree, folder, True)
        _ANSIBLE_TMP.append(tmpdir)
    return _ANSIBLE_TMP[0]


def ansible_env(**extra: str) -> dict[str, str]:
    """This process's environment for an ansible command: the venv's bin first on PATH, TMPDIR its own."""
    return dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
                TMPDIR=ansible_tmpdir(), **extra)


def tool_version(argv: Sequence[str], pattern: str, env: dict[str, str] | None = None) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False, env=env).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "absent"
    match = re.search(pattern, out)
    return match.group(1) if match else "unknown"


def machine() -> dict[str, object]:
    """What the figures were measured on: CPUs, model, load, the versions that set the costs."""
    bindir = os.path.dirname(sys.executable)
    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model(),
        "load_average": [round(x, 2) for x in load_average()],
        "kernel": platform.release(),
        "python": platform.python_version(),
        "ansible_core": tool_version([os.path.join(bindir, "ansible"), "--version"], r"core ([\d.]+)", ansible_env()),
        "hwloc": tool_version(["lstopo", "--version"], r"([\d.]+)"),
    }


def machine_text(info: dict[str, object]) -> str:
    load = info["load_average"]
    assert isinstance(load, list)
    return (f"machine: {info['nproc']} CPUs, {info['cpu_model']}; kernel {info['kernel']}, Python {info['python']}, "
            f"ansible-core {info['ansible_core']}, hwloc {info['hwloc']}; load average {load[0]} {load[1]} {load[2]}")


# --------------------------------------------------------------------------------------------- timing
@dataclass
class Sample:
    wall: float
    cpu: float
    returncode: int = 0
    stdout: str = ""
    stderr: str = ""
    max_rss_mb: float = 0.0  # the largest resident set of the process or of any descendant it waited for


def run_timed(argv: Sequence[str], *, cwd: Path | str = REPO, env: dict[str, str] | None = None,
              capture: bool = True) -> Sample:
    """Run a process to its end: wall time, and CPU time (user + system) of it and of every descendant it waited
    for, from wait4(2) on this very child (exact, whatever else this process runs). Output goes to temporary
    files, not pipes, so that nothing but the child's own work is timed."""
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        sink_out = out if capture else subprocess.DEVNULL
        sink_err = err if capture else subprocess.DEVNULL
        start = time.perf_counter()
        proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=sink_out,
                                stderr=sink_err)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        stdout = stderr = ""
        if capture:
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
    return Sample(wall, usage.ru_utime + usage.ru_stime, proc.returncode, stdout, stderr,
                  usage.ru_maxrss / 1024.0)  # Linux reports kilobytes


def timed_call(func: Callable[[], object]) -> Sample:
    """In-process timing: wall and this process's CPU time."""
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    func()
    return Sample(time.perf_counter() - start_wall, time.process_time() - start_cpu)


@dataclass
class Series:
    """The samples of one case, and their medians."""

    name: str
    samples: list[Sample] = field(default_factory=list)

    @property
    def wall(self) -> float:
        return statistics.median(s.wall for s in self.samples)

    @property
    def cpu(self) -> float:
        return statistics.median(s.cpu for s in self.samples)

    @property
    def max_rss_mb(self) -> float:
        return statistics.median(s.max_rss_mb for s in self.samples)


def interleaved(cases: Sequence[tuple[str, Callable[[], Sample]]], rounds: int, *,
                before_round: Callable[[int], None] | None = None, rotate: bool = True) -> dict[str, Series]:
    """Run every case once per round, ``rounds`` times; the order rotates each round unless it must not (a no-op
    rerun has to follow its first run). Returns each case's samples (medians through :class:`Series`)."""
    series = {name: Series(name) for name, _ in cases}
    order = list(cases)
    for index in range(rounds):
        if before_round is not None:
            before_round(index)
        for name, run in order:
            series[name].samples.append(run())
        if rotate:
            order = order[1:] + order[:1]
    return series


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else float("inf")


def verdict(value: float, target: float) -> str:
    return "OK" if value <= target else "OVER"


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A plain text table: first column left-aligned, the others right-aligned."""
    text_rows = [[_cell(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in text_rows]) for i, h in enumerate(headers)]
    lines = []
    for row in [list(headers)] + text_rows:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    return str(value)


def filesystem_type(path: Path | str) -> str:
    """The type of the file system ``path`` is on (/proc/self/mounts, the longest mount point above it), or ""."""
    target = os.path.realpath(path)
    found, kind = "", ""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as handle:
            for line in handle:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = fields[1].replace("\\040", " ")
                inside = target == point or target.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(found):
                    found, kind = point, fields[2]
    except OSError:
        return ""
    return kind


def storage_note(path: Path | str) -> str:
    """A warning for a fleet built off tmpfs (shm_dir's fallback where /dev/shm lacks the inodes): first runs then
    write ~1,000 files per node to a disk, and their figures do not compare with runs on tmpfs. "" on tmpfs."""
    kind = filesystem_type(path)
    if kind in ("tmpfs", "ramfs", ""):
        return ""
    return (f"; warning: the nodes are on {kind}, not tmpfs (/dev/shm lacked the inodes, or --workdir): the first "
            f"runs' figures include disk writes and do not compare with runs on tmpfs")


def shm_dir(prefix: str, inodes: int = 0) -> Path:
    """A fresh temporary folder, in /dev/shm where it exists and has ``inodes`` free inodes to spare (node trees
    build and copy several times faster there; a tmpfs has an inode limit - 64 lab nodes take 2.3 million - so a
    fleet that would not fit goes to the default temporary folder instead)."""
    import tempfile

    base = None
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        stats = os.statvfs("/dev/shm")
        if not inodes or stats.f_files == 0 or stats.f_favail > inodes * 1.1:
            base = "/dev/shm"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))
