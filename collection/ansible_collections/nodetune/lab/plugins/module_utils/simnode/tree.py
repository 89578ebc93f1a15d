# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A simulated tree in memory (:class:`_Tree`: files, links and directories relative to the node root), written
to disk in one pass (:func:`_write_tree`), and the deterministic numbers (:func:`_stable`) that make every
rebuild byte-identical."""

from __future__ import annotations

import os
import zlib
from typing import Any, Dict, Tuple


# ============================================================================================ the tree model
class _Tree(object):
    """Files, links and directories to create, relative to the node root, in memory first.

    Building the whole model before touching the disk lets :func:`reboot` compare and restore exactly, and keeps
    the write loop tight (one open/write/close per file).
    """

    def __init__(self) -> None:
        self.files: Dict[str, Tuple[bytes, int]] = {}
        self.links: Dict[str, str] = {}
        self.dirs: set = set()

    def _ensure(self, directory: str) -> None:
        while directory and directory not in self.dirs:
            self.dirs.add(directory)
            directory = directory.rpartition("/")[0]

    def dir(self, path: str) -> None:
        self._ensure(path)

    def f(self, path: str, value: Any, mode: int = 0o444) -> None:
        """An attribute: text plus the newline the kernel prints."""
        self.files[path] = (("%s\n" % (value,)).encode("utf-8"), mode)
        self._ensure(path.rpartition("/")[0])

    def raw(self, path: str, data: bytes, mode: int = 0o444) -> None:
        self.files[path] = (data, mode)
        self._ensure(path.rpartition("/")[0])

    def link(self, path: str, target: str) -> None:
        """A symlink to ``target`` (relative to the root), written relative the way sysfs does."""
        self.links[path] = _kernel_relative(path, target)
        self._ensure(path.rpartition("/")[0])

    def abslink(self, path: str, target: str) -> None:
        """A symlink written exactly as given (absolute, or relative as a tool such as systemctl makes it)."""
        self.links[path] = target
        self._ensure(path.rpartition("/")[0])


def _kernel_relative(link: str, target: str) -> str:
    """sysfs writes links up to the target's parent, then down: ``../../../0000:82:00.0``."""
    target_parent, _sep, name = target.rpartition("/")
    rel = os.path.relpath(target_parent or ".", link.rpartition("/")[0] or ".")
    return name if rel == "." else rel + "/" + name


def _stable(text: str, bits: int = 32) -> int:
    """A deterministic number from a name (ids, GUIDs, serials): rebuilds are byte-identical."""
    value = zlib.crc32(text.encode())
    if bits > 32:
        value = (value << 32) | zlib.crc32((text + "#").encode())
    return value & ((1 << bits) - 1)


# ============================================================================================ writing
def _write_tree(tree: _Tree, base: str) -> int:
    """Create every directory, file and link of ``tree`` below ``base`` (which exists and is empty)."""
    mkdir = os.mkdir
    for directory in sorted(tree.dirs):
        mkdir(base + "/" + directory, 0o755)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    umask = os.umask(0o022)
    os.umask(umask)
    fix_modes = bool(umask & 0o644)
    opener = os.open
    writer = os.write
    closer = os.close
    for path, (data, mode) in tree.files.items():
        fd = opener(base + "/" + path, flags, mode)
        try:
            if data:
                writer(fd, data)
            if fix_modes:
                os.fchmod(fd, mode)
        finally:
            closer(fd)
    for path, target in tree.links.items():
        os.symlink(target, base + "/" + path)
    return len(tree.files) + len(tree.links) + len(tree.dirs)
