"""Access to the real captures in ``../shared/fixtures/real`` (never copied into the project).

Each capture is extracted once per test session into a temporary directory. Tests that use them must skip
with a clear reason where the folder is absent (a user's fresh clone): use :func:`require_real`.
"""

from __future__ import annotations

import bz2
import shutil
import tarfile
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
REAL_DIR = REPO_ROOT.parent / "shared" / "fixtures" / "real"
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

_extracted: dict[str, Path] = {}
_tmp: Path | None = None


def real_available() -> bool:
    return REAL_DIR.is_dir()


def require_real() -> Path:
    if not real_available():
        pytest.skip(SKIP_REASON)
    return REAL_DIR


def _tmpdir() -> Path:
    global _tmp
    if _tmp is None:
        _tmp = Path(tempfile.mkdtemp(prefix="nodetune-real-"))
    return _tmp


def extract_archive(archive: str) -> Path:
    """Extract one archive (path relative to REAL_DIR) once; returns the extraction folder."""
    require_real()
    if archive not in _extracted:
        dest = _tmpdir() / archive.replace("/", "__")
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(REAL_DIR / archive) as tar:
            tar.extractall(dest, filter="data")
        _extracted[archive] = dest
    return _extracted[archive]


def capture_root(name: str) -> Path:
    """The node root of a named capture (see CAPTURES), extracted on first use."""
    archive, inner = CAPTURES[name]
    root = extract_archive(archive) / inner if inner else extract_archive(archive)
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
    if _tmp is not None:
        shutil.rmtree(_tmp, ignore_errors=True)
