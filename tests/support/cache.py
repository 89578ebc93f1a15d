"""Simulated node trees and their topologies, made once per test session (issue 29 item 3).

What a tree costs is writing it: ``simnode.build`` spends almost all of its time creating the entries (a lab node has
30,000-42,000 of them), little generating them, and creating an entry in memory (tmpfs) costs a fraction of creating
it on disk. Hence:

- a test that only reads a tree shares one built once per session and spec (:func:`shared_tree`), kept in memory
  where the host has room; the conftest's ``shared_tree`` fixture fails the test that changed one;
- a test that writes builds its own (:func:`fresh_tree`), in memory too: ``simnode.build`` again, not a copy of the
  shared tree, which would create the same entries and read them as well (``shutil.copytree`` costs more CPU time
  than a build);
- a test about planning takes the topology discovered once per session and spec (:func:`topology`), the way hwloc
  tests its tools on saved topologies.

One session (the controlling pytest process and its xdist workers) shares one folder, named by :data:`SESSION_ENV`:
:func:`open_session` makes it before the workers start, :func:`close_session` removes it. The lab and the core are
imported where first used: the session hooks need neither.
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: the session's folder of shared trees, set by the controlling process and inherited by xdist's workers
SESSION_ENV = "NODETUNE_TEST_TREE_CACHE"
_PREFIX = "nodetune-test-trees-"
_MEMORY = Path("/dev/shm")
_MEMORY_ROOM = 2 << 30  # leave the host this much memory: the trees of a whole session take a few hundred MB
_MEMORY_INODES = 500_000  # and this many entries: a full-size lab node is about 42,000

_topologies: dict[tuple[str, bool], dict[str, Any]] = {}
_fingerprints: dict[Path, str] = {}


def open_session() -> Path:
    """The session's tree folder: in memory where there is room, else in the temporary folder. Folders left by
    sessions whose process is gone (killed before :func:`close_session`) are removed first."""
    base = _MEMORY if _has_room(_MEMORY) else Path(tempfile.gettempdir())
    _remove_orphans(base)
    folder = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=base))
    os.environ[SESSION_ENV] = str(folder)
    return folder


def in_memory(folder: Path) -> bool:
    """Whether the session's folder is on the in-memory file system."""
    return folder.parent == _MEMORY


def close_session(keep: str | None = None) -> None:
    """Remove the session's folder; with ``keep``, all but that entry of it (a failed session's tmp_path folders, for
    a look: the next session removes them with the rest, its process being gone)."""
    folder = os.environ.pop(SESSION_ENV, None)
    if not (folder and Path(folder).name.startswith(_PREFIX)):
        return
    if keep is None:
        shutil.rmtree(folder, ignore_errors=True)
        return
    for entry in Path(folder).iterdir():
        if entry.name == keep:
            continue
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _has_room(base: Path) -> bool:
    """Bytes and inodes to spare: a tmpfs runs out of either (every tree entry takes an inode)."""
    if not (base.is_dir() and os.access(base, os.W_OK)):
        return False
    space = os.statvfs(base)
    return space.f_bavail * space.f_frsize > _MEMORY_ROOM and space.f_favail > _MEMORY_INODES


def _remove_orphans(base: Path) -> None:
    for folder in base.glob(f"{_PREFIX}*"):
        pid = folder.name[len(_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, as another user's
    return True


def _session_folder() -> Path:
    folder = os.environ.get(SESSION_ENV)
    if not folder:  # a helper used outside pytest (a script, a REPL): a session of its own
        return open_session()
    return Path(folder)


def spec_key(spec: Any) -> str:
    """The spec's identity: its normalised form (every default filled in), so equal specs share one tree."""
    from ansible_collections.nodetune.lab.plugins.module_utils import simnode

    normalised = json.dumps(simnode.load_spec(spec), sort_keys=True)
    return hashlib.sha256(normalised.encode()).hexdigest()[:20]


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """One builder per spec across the session's processes (xdist's workers share the folder)."""
    with open(path, "w", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def shared_tree(spec: Any) -> Path:
    """The tree of ``spec``, built once per session and shared: read it, never write to it."""
    from ansible_collections.nodetune.lab.plugins.module_utils import simnode

    folder = _session_folder()
    key = spec_key(spec)
    tree = folder / key
    if not simnode.is_simnode(str(tree)):  # a finished build is moved into place whole, never replaced
        with locked(folder / f"{key}.lock"):
            if not simnode.is_simnode(str(tree)):
                simnode.build(spec, str(tree))
    if tree not in _fingerprints:
        _fingerprints[tree] = fingerprint(tree)
    return tree


def fresh_tree(spec: Any) -> Path:
    """A tree of ``spec`` of the caller's own, to write to, in the session's folder (in memory where there is room);
    the caller removes it (:func:`remove_fresh_tree`)."""
    from ansible_collections.nodetune.lab.plugins.module_utils import simnode

    dest = Path(tempfile.mkdtemp(prefix="own-", dir=_session_folder())) / "node"
    simnode.build(spec, str(dest))
    return dest


def remove_fresh_tree(tree: Path) -> None:
    shutil.rmtree(tree.parent, ignore_errors=True)


def topology(spec: Any, irq_counts: bool = True) -> dict[str, Any]:
    """The topology of ``spec``'s tree, discovered once per process and spec; each caller gets its own copy."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover

    key = (spec_key(spec), irq_counts)
    if key not in _topologies:
        _topologies[key] = discover(str(shared_tree(spec)), irq_counts=irq_counts)
    return copy.deepcopy(_topologies[key])


def fingerprint(tree: Path) -> str:
    """Every entry's path, type, mode, size and modification time: any write, creation or removal changes it."""
    digest = hashlib.sha256()
    for entry in sorted(_entries(str(tree)), key=lambda e: e[0]):
        digest.update(repr(entry).encode())
    return digest.hexdigest()


def _entries(top: str) -> Iterator[tuple[str, int, int, int]]:
    with os.scandir(top) as listing:
        for item in listing:
            info = item.stat(follow_symlinks=False)
            yield item.path, info.st_mode, info.st_size, info.st_mtime_ns
            if item.is_dir(follow_symlinks=False):
                yield from _entries(item.path)


def untouched(tree: Path) -> bool:
    """Whether a shared tree is still as built."""
    return fingerprint(tree) == _fingerprints[tree]


def changed_shared_trees() -> list[Path]:
    """The shared trees this process handed out that are no longer as built."""
    return [tree for tree in _fingerprints if not untouched(tree)]
