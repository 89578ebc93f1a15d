"""Access to the real captures in ``../shared/fixtures/real`` (never copied into the project).

Each capture is extracted once per test session, into the session's folder that xdist's workers share (in memory
where there is room: tests/support/cache.py), or into a temporary directory of the process outside a test session.
Tests that use them must skip with a clear reason where the folder is absent (a user's fresh clone): use
:func:`require_real`.
"""

from __future__ import annotations

import bz2
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import cache

REPO_ROOT = Path(__file__).resolve().parents[1]
# NODETUNE_REAL_CAPTURES points elsewhere; CI sets it to a missing folder once, to run as a user's plain clone does.
REAL_DIR = Path(os.environ.get("NODETUNE_REAL_CAPTURES") or REPO_ROOT.parent / "shared" / "fixtures" / "real")
SKIP_REASON = (
    f"real hardware captures not available: {REAL_DIR} is absent "
    "(they live in the team's shared/ folder beside the checkout, not in the project)"
)

# capture name -> (archive inside the capture folder, folder inside the archive to use as the node root)
CAPTURES: dict[str, tuple[str, str]] = {
    "knit": ("knit-dell-2s-cx4lx-xxv710/sysinfo.tgz", ""),
    "nto": ("nto-master-2s-icx-e810-nvme/sysinfo.tgz", ""),
    "hwloc-e5": ("hwloc-2s-e5-ib-nvme/32em64t-2n8c+dax+nvme+mic+dimms.tar.bz2", "32em64t-2n8c+1mic"),
    "hwloc-opteron": ("hwloc-opteron6276-4s-8n/64amd64-4s2n4ca2co.tar.bz2", "64amd64-4s2n4ca2co"),
    "utillinux-epyc7451": ("utillinux-epyc7451-2s-8n/x86_64-epyc_7451.tar.gz", "x86_64-epyc_7451"),
    "utillinux-x7550": ("utillinux-x7550-4s-sparse-nodes/x86_64-64cpu.tar.gz", "x86_64-64cpu"),
    "nri-4s": ("nri-intel-4s-and-pmem-nodes/sysfs.tar.bz2", "sysfs/4-socket-server-nosnc"),
    "nri-server": ("nri-intel-4s-and-pmem-nodes/sysfs.tar.bz2", "sysfs/server"),
    "nri-desktop": ("nri-intel-4s-and-pmem-nodes/sysfs.tar.bz2", "sysfs/desktop"),
}

_tmp: Path | None = None
_private = False  # whether _tmp is this process's own (removed by cleanup) rather than the session's


def real_available() -> bool:
    return REAL_DIR.is_dir()


def require_real() -> Path:
    if not real_available():
        pytest.skip(SKIP_REASON)
    return REAL_DIR


def _tmpdir() -> Path:
    global _tmp, _private
    if _tmp is None:
        session = os.environ.get(cache.SESSION_ENV)
        if session:
            _tmp = Path(session) / "real-captures"
            _tmp.mkdir(exist_ok=True)
        else:
            _tmp, _private = Path(tempfile.mkdtemp(prefix="nodetune-real-")), True
    return _tmp


def _once(key: str, make: Callable[[Path], None]) -> Path:
    """``<folder>/<key>``, made by ``make(path)`` once per session: one process makes it under a lock, into a
    temporary name moved into place whole, so a folder that exists is complete."""
    folder = _tmpdir()
    done = folder / key
    if not done.exists():
        with cache.locked(folder / f"{key}.lock"):
            if not done.exists():
                partial = folder / f".{key}.{os.getpid()}"
                shutil.rmtree(partial, ignore_errors=True)
                partial.mkdir()
                make(partial)
                partial.rename(done)
    return done


def _untar(archive: Path, dest: Path, member: str | None = None) -> None:
    """GNU tar where present (5x faster than tarfile on the 64k-entry nri archive), tarfile's data filter else.

    GNU tar refuses members with '..' and strips leading '/', so neither path can write outside ``dest``.
    """
    tar_bin = shutil.which("tar")
    if tar_bin:
        argv = [tar_bin, "-xf", str(archive), "-C", str(dest), "--no-same-owner"] + ([member] if member else [])
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode == 0:
            return
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if not member or m.name == member or m.name.startswith(member + "/")]
        tar.extractall(dest, members=members, filter="data")


def extract_archive(archive: str, member: str | None = None) -> Path:
    """Extract one archive (path relative to REAL_DIR), or only ``member`` (a folder) of it, once per session."""
    require_real()
    key = (archive + ("::" + member if member else "")).replace("/", "__").replace("::", "--")
    return _once(key, lambda dest: _untar(REAL_DIR / archive, dest, member))


# Archives that hold several machines: extract only the one asked for (file creation dominates the cost).
MULTI_MACHINE = {"nri-intel-4s-and-pmem-nodes/sysfs.tar.bz2"}


def capture_root(name: str) -> Path:
    """The node root of a named capture (see CAPTURES), extracted on first use."""
    archive, inner = CAPTURES[name]
    member = inner if archive in MULTI_MACHINE else None
    root = extract_archive(archive, member) / inner if inner else extract_archive(archive)
    if not root.is_dir():
        raise AssertionError(f"capture {name}: {root} missing after extraction")
    return root


def real_file(rel: str) -> Path:
    require_real()
    path = REAL_DIR / rel
    if not path.exists():
        pytest.skip(f"{path} is absent from the shared captures")
    return path


def read_bz2_text(rel: str) -> str:
    return bz2.decompress(real_file(rel).read_bytes()).decode("utf-8", "replace")


def cleanup() -> None:
    """Remove this process's own extractions; the session's go with the session's folder."""
    if _tmp is not None and _private:
        shutil.rmtree(_tmp, ignore_errors=True)


# ------------------------------------------------------------------ roots built around partial captures
KFD_ARCHIVE = "rocm-kfd-mi300x-cpx-2s-epyc/topo-mi300-cpx.tar.gz"
KFD_INNER = "testdata/topo-mi300-cpx/topology"
PCP_INTERRUPTS = "pcp-interrupts-1152cpu/interrupts-1152cpu-x86_64.bz2"
PROMETHEUS_TTAR = "prometheus-procfs-fixtures/fixtures.ttar"


def kfd_root() -> Path:
    """A node root holding only the ROCm KFD capture, placed where the kernel puts it
    (``<root>/sys/class/kfd/kfd/topology``); copied, because a link out of the root would be re-anchored."""
    require_real()

    def make(root: Path) -> None:
        dest = root / "sys/class/kfd/kfd"
        dest.mkdir(parents=True)
        prefix = KFD_INNER.rsplit("/", 1)[0] + "/"  # extract testdata/topo-mi300-cpx/topology as .../kfd/topology
        with tarfile.open(REAL_DIR / KFD_ARCHIVE) as tar:
            members = []
            for member in tar.getmembers():
                if member.name.startswith(prefix):
                    member.name = member.name[len(prefix):]
                    members.append(member)
            tar.extractall(dest, members=members, filter="data")

    return _once("kfd-root", make)


def pcp_interrupts_root() -> Path:
    """A node root whose only file is PCP's 1,152-CPU /proc/interrupts."""
    require_real()  # before any folder is made: a skipped first call must not break the next one

    def make(root: Path) -> None:
        (root / "proc").mkdir()
        (root / "proc/interrupts").write_text(read_bz2_text(PCP_INTERRUPTS))

    return _once("pcp-root", make)


def _ttar_content(lines: list[str]) -> bytes:
    """Undo ttar's escaping: NULLBYTE is a NUL, a trailing EOF means "no final newline"."""
    text = "\n".join(lines) + "\n"
    if text.endswith("EOF\n") and not text.endswith("\\EOF\n"):
        text = text[: -len("EOF\n")]
    text = text.replace("\\NULLBYTE", "\x01NB\x01").replace("NULLBYTE", "\x00").replace("\x01NB\x01", "NULLBYTE")
    text = text.replace("\\EOF", "EOF")
    return text.encode("utf-8", "surrogateescape")


def extract_ttar(archive: str, dest: Path) -> Path:
    """Expand a prometheus/procfs text archive (format in prometheus-procfs-fixtures/SOURCE.md) into ``dest``.

    Paths are kept inside ``dest`` (an entry that would escape is an error); symlinks are created as
    written, absolute ones included: the Root layer must keep them inside the root.
    """
    lines = real_file(archive).read_text("utf-8", "surrogateescape").split("\n")
    base = dest.resolve()
    index = 0

    def target(rel: str) -> Path:
        path = (base / rel).resolve() if ".." in rel.split("/") else base / rel
        if base not in path.parents and path != base:
            raise AssertionError(f"ttar entry {rel!r} escapes {base}")
        return path

    while index < len(lines):
        line = lines[index]
        index += 1
        if line.startswith("Directory: "):
            target(line[len("Directory: "):]).mkdir(parents=True, exist_ok=True)
        elif line.startswith("Path: "):
            path = target(line[len("Path: "):])
            path.parent.mkdir(parents=True, exist_ok=True)
            kind = lines[index]
            index += 1
            if kind.startswith("SymlinkTo: "):
                if path.is_symlink() or path.exists():
                    path.unlink()
                path.symlink_to(kind[len("SymlinkTo: "):])
            elif kind.startswith("Lines: "):
                count = int(kind[len("Lines: "):])
                path.write_bytes(_ttar_content(lines[index:index + count]) if count else b"")
                index += count
                if index < len(lines) and lines[index].startswith("Mode: "):
                    path.chmod(int(lines[index][len("Mode: "):], 8))
                    index += 1
            else:
                raise AssertionError(f"ttar: unexpected line {kind!r} after {line!r}")
    return dest


def prometheus_root() -> Path:
    """The prometheus/procfs fixtures as a node root (a composite of many machines: parse-only value)."""
    require_real()  # before any folder is made: a skipped first call must not break the next one
    return _once("prometheus", lambda dest: extract_ttar(PROMETHEUS_TTAR, dest)) / "fixtures"


def all_roots() -> dict[str, Path]:
    """Every capture in the shared folder as a node root (the named ones plus the partial captures)."""
    roots = {name: capture_root(name) for name in sorted(CAPTURES)}
    roots["rocm-kfd"] = kfd_root()
    roots["pcp-interrupts"] = pcp_interrupts_root()
    roots["prometheus"] = prometheus_root()
    return roots
