"""Node trees in tests: where to build them, their digests, and comparing one with itself before nodetune touched it."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

# The kernel's choice, not a value nodetune writes or restores: a reverted IRQ stays on the CPU it was pinned to
# while the restored mask holds it (arch/x86/kernel/apic/vector.c, assign_vector_locked(); modelled by the lab's
# simkernel, tests/node/test_simkernel.py). Restoring smp_affinity is what revert promises.
KERNEL_CHOSEN = ("/effective_affinity", "/effective_affinity_list")


def changed_paths(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def reverted_differences(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The paths a revert left different from ``before`` (tree digests), the kernel-chosen ones excepted."""
    return [p for p in changed_paths(before, after) if not p.endswith(KERNEL_CHOSEN)]


def tree_digest(path: Path) -> dict[str, str]:
    """Every file, link and directory under path with its content hash and mode: byte-identity check."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            rel = str(full.relative_to(path))
            if full.is_symlink():
                out[rel] = "link:" + os.readlink(full)
            elif full.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = f"{full.stat().st_mode & 0o7777:o}:{hashlib.sha256(full.read_bytes()).hexdigest()}"
    return out


def runtime_tree_digest(root: Path, tops: tuple[str, ...] = ("sys", "proc", "run")) -> dict[str, str]:
    """Path -> content hash (or link target) of everything under the given top-level folders: by default the
    runtime files a simulated reboot sets back (simnode.reboot)."""
    out = {}
    for top in tops:
        base = root / top
        for dirpath, dirnames, filenames in os.walk(base):
            for name in dirnames + filenames:
                path = Path(dirpath) / name
                rel = str(path.relative_to(root))
                if path.is_symlink():
                    out[rel] = "-> " + os.readlink(path)
                elif path.is_file():
                    mode = stat.S_IMODE(path.lstat().st_mode)
                    out[rel] = f"{mode:o} {hashlib.sha1(path.read_bytes()).hexdigest()}"
                else:
                    out[rel] = "dir"
    return out


def scratch_dir(prefix: str = "nodetune-api-test-") -> Path:
    """In memory where the host has room (the trees are many small files), else the system's temp folder."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 1 << 30:
        return Path(tempfile.mkdtemp(prefix=prefix, dir=shm))
    return Path(tempfile.mkdtemp(prefix=prefix))
