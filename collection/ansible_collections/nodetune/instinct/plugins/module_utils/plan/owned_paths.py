# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Which files a path variable may name: nodetune's own, or a new file in a documented set of folders.

The rocm_env area writes whole files at paths the user chooses (``nodetune_rocm_env_file`` ...). A path that names
a file nodetune does not own (``/etc/shadow``, ``/usr/bin/python3``) or a directory (``/etc``) must be refused
while the variables are validated, before anything is written: a journaled overwrite can be reverted, but a
node running without its password file or its Python until then is already broken.
"""

from __future__ import annotations

import json
import os
import re
from typing import Iterable, Optional, Set

from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root

# Folders a new file may be created in (relative to the root). The ones ending in "/" take their subfolders too.
WRITABLE_DIRS = ("etc", "etc/profile.d", "etc/default", "etc/sysconfig", "usr/local/bin", "usr/local/sbin",
                 "etc/nodetune/", "usr/local/etc/", "opt/")
# Text that only files nodetune renders carry: the header of its config files, the rank table's generator, the
# launcher's table line. A file holding one is nodetune's even where the journal is gone.
OWNED_MARKERS = ("# Managed by nodetune", '"generator": "nodetune ',
                 "# the rendered launcher names its node's table here")
JOURNAL = "var/lib/nodetune/journal.json"
# Folders that are nodetune's alone: its journal, lock and structure cache; the boot restore files, the rank table.
OWN_DIRS = ("var/lib/nodetune", "etc/nodetune")
# how nodetune names the programs, units and drop-ins it writes (nodetune-bind, 99-nodetune-limits.conf, ...)
_OWN_NAME = re.compile(r"^([0-9]+-)?nodetune-")
_HEAD = 65536


def documented_dirs() -> str:
    return ", ".join("/" + d.rstrip("/") + ("/..." if d.endswith("/") else "") for d in WRITABLE_DIRS)


def in_writable_dir(rel: str) -> bool:
    parent = os.path.dirname(rel)
    for folder in WRITABLE_DIRS:
        if folder.endswith("/"):
            if parent + "/" == folder and folder != "opt/" or parent.startswith(folder):
                return True
        elif parent == folder:
            return True
    return False


def created_by_nodetune(root: Root) -> Set[str]:
    """Paths the journal records as absent before nodetune wrote them (empty where there is no readable journal:
    a journal that does not validate is refused by the engine, not here)."""
    try:
        baseline = json.loads(root.read(JOURNAL, strip=False) or "{}").get("baseline") or {}
    except (ValueError, AttributeError):
        return set()
    if not isinstance(baseline, dict):
        return set()
    return set(key for key, snap in baseline.items()
               if isinstance(snap, dict) and snap.get("kind") == "file" and snap.get("exists") is False)


def carries_marker(root: Root, rel: str, markers: Iterable[str] = OWNED_MARKERS) -> bool:
    text = root.read(rel, strip=False) or ""
    head = text[:_HEAD]
    return any(marker in head for marker in markers)


def kind_problem(root: Root, rel: str) -> Optional[str]:
    """Why ``rel`` cannot be written as a whole file: a link, a directory or a special file is there; else None."""
    full = os.path.join(root.path, rel)
    if os.path.islink(full):
        return "it is a symbolic link (to %s); nodetune writes regular files only" % os.readlink(full)
    if root.isdir(rel):
        return "it is a directory"
    if root.exists(rel) and not os.path.isfile(root.real(rel)):
        return "it exists and is not a regular file"
    return None


def own_file_problem(root: Root, rel: str, header: str, name: str) -> Optional[str]:
    """Why ``rel`` is one of nodetune's own files or folders, which a path variable may not name (a file written over
    the journal: revert can never finish), or None. ``header`` and ``name``: the first line and the default name of
    the variable's own file, which are nodetune's too."""
    for folder in OWN_DIRS:
        if rel == folder or rel.startswith(folder + "/"):
            return "it is in /%s, nodetune's own folder (its journal, caches, boot restore files)" % folder
    base = os.path.basename(rel)
    if _OWN_NAME.match(base) and base != name:
        return "the name is one nodetune gives its own programs, units and drop-ins (nodetune-*)"
    if root.exists(rel) and carries_marker(root, rel) and not carries_marker(root, rel, (header,)):
        return "it is a file nodetune writes for another purpose"
    return None


def path_problem(root: Root, rel: str, created: Optional[Set[str]] = None, default: bool = False) -> Optional[str]:
    """Why nodetune may not write a whole file at ``rel`` (relative to the root), or None where it may.

    ``default``: ``rel`` is the variable's documented default, a file nodetune manages by design (an existing one
    is journaled and restored by revert); only a directory, a link or a special file there is refused."""
    kind = kind_problem(root, rel)
    if kind:
        return kind
    if root.exists(rel):
        if default:
            return None
        owned = rel in (created if created is not None else created_by_nodetune(root)) or carries_marker(root, rel)
        if not owned:
            return ("the file exists and nodetune did not create it; nodetune replaces only files it created (name "
                    "a new file, or move this one aside)")
        return None
    if not in_writable_dir(os.path.join(root.inner(os.path.dirname(rel)), os.path.basename(rel))):
        return "nodetune creates new files only in %s" % documented_dirs()
    return None
