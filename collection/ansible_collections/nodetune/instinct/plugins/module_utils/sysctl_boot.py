# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The value each sysctl gets at boot, computed the way systemd-sysctl computes it (sysctl.d(5)).

nodetune persists its sysctls in ``/etc/sysctl.d/90-nodetune-<area>.conf``. A site file read after it (a later file
name, such as ``99-sysctl.conf``, the standard link to ``/etc/sysctl.conf``) silently wins at the next boot: the
runtime value is right until the reboot, and wrong after it. This module finds such shadowing files so that apply
warns and verify reports them (``persist.sysctl_boot``), naming the file.

The rules (sysctl.d(5)): every ``*.conf`` in the search folders below; a file name found in several folders is
read from the first folder only (``/etc`` overrides ``/run``, which overrides the library folders); all files are
applied in the lexicographic order of their names, whatever their folder, so for one key the last file name
wins. ``/etc/sysctl.conf`` is read through ``99-sysctl.conf`` (the link distributions ship), not by itself.
Keys may use ``/`` or ``.`` as separators and a leading ``-``; a glob key applies only to keys no file sets
explicitly.
"""

from __future__ import annotations

import fnmatch
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root

SEARCH_DIRS = ("etc/sysctl.d", "run/sysctl.d", "usr/local/lib/sysctl.d", "usr/lib/sysctl.d", "lib/sysctl.d")
CHECK_ID = "persist.sysctl_boot"


def key_path(key: str) -> str:
    """The /proc/sys path form of a sysctl key: ``vm.dirty_ratio`` and ``vm/dirty_ratio`` -> ``vm/dirty_ratio``.

    If the first separator is a dot, dots and slashes are interchanged (``net.ipv4.conf.eth0/200.x`` names the
    interface ``eth0.200``); if it is a slash, the key is a path already."""
    key = key.strip().lstrip("-").strip()
    dot, slash = key.find("."), key.find("/")
    if dot != -1 and (slash == -1 or dot < slash):
        return key.translate(str.maketrans("./", "/."))
    return key


def boot_files(root: Root, replaced: Optional[Dict[str, str]] = None) -> List[Tuple[str, str, str]]:
    """``(name, path, text)`` of every file systemd-sysctl reads, in the order it applies them.

    ``replaced`` maps a file's path (relative to the root) to the text it will have, so that the boot can be
    computed for a file nodetune is about to write."""
    replaced = replaced or {}
    chosen: Dict[str, str] = {}
    for folder in SEARCH_DIRS:
        names = [n for n in root.listdir(folder) if n.endswith(".conf")]
        names += [path.rpartition("/")[2] for path in replaced if path.rpartition("/")[0] == folder]
        for name in names:
            chosen.setdefault(name, folder + "/" + name)
    out = []
    for name in sorted(chosen):
        path = chosen[name]
        text = replaced[path] if path in replaced else root.read(path, strip=False)
        if text is not None:
            out.append((name, path, text))
    return out


def assignments(text: str) -> List[Tuple[str, str]]:
    """``(key path, value)`` of each assignment in a sysctl.d file, in order (comments and blanks skipped)."""
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        key, sep, value = stripped.partition("=")
        if sep and key.strip():
            out.append((key_path(key), " ".join(value.split())))
    return out


def boot_values(root: Root, keys: List[str], replaced: Optional[Dict[str, str]] = None) -> Dict[str, Tuple[str, str]]:
    """For each key (dotted form): ``(value, file path)`` of the assignment that wins at boot; absent keys are left
    out."""
    wanted = dict((key_path(key), key) for key in keys)
    explicit: Dict[str, Tuple[str, str]] = {}
    globbed: Dict[str, Tuple[str, str]] = {}
    for _name, path, text in boot_files(root, replaced):
        for pattern, value in assignments(text):
            if pattern in wanted:
                explicit[wanted[pattern]] = (value, path)
            elif any(c in pattern for c in "*?["):
                for key_as_path, key in wanted.items():
                    if fnmatch.fnmatchcase(key_as_path, pattern):
                        globbed[key] = (value, path)
    globbed.update(explicit)
    return globbed


def boot_checks(root: Root, settings: List[Any]) -> List[Dict[str, Any]]:
    """One entry per persisted sysctl: its key, nodetune's value, the value it gets at boot and from which file.

    ``settings`` are the desired Settings: the runtime sysctls (``persist == 'sysctl.d'``) and the
    ``persist.sysctl_d`` files that hold them, computed as if those files were already written."""
    files = dict((s.path, s.value) for s in settings if s.id == "persist.sysctl_d")
    sysctls = [s for s in settings if getattr(s, "persist", None) == "sysctl.d"]
    if not files or not sysctls:
        return []
    boot = boot_values(root, [s.target for s in sysctls], files)
    out = []
    for setting in sorted(sysctls, key=lambda s: s.target):
        wanted = " ".join(setting.value.split())
        value, path = boot.get(setting.target, (None, None))
        out.append({"key": setting.target, "value": wanted, "boot_value": value,
                    "file": "/" + path if path else None, "nodetune": path in files,
                    "shadowed": path is not None and path not in files and value != wanted,
                    "via": _link_note(root, path) if path else ""})
    return out


def shadowed(root: Root, settings: List[Any]) -> List[Dict[str, Any]]:
    """The persisted sysctls whose boot value would come from another file than nodetune's, with another value."""
    return [entry for entry in boot_checks(root, settings) if entry["shadowed"]]


def message(entry: Dict[str, Any]) -> str:
    return ("%s=%s is persisted by nodetune, but %s%s sets %s=%s and is read after nodetune's file at boot, so "
            "the node boots with %s; remove or change that line, or set the same value there"
            % (entry["key"], entry["value"], entry["file"], entry["via"], entry["key"], entry["boot_value"],
               entry["boot_value"]))


def _link_note(root: Root, path: str) -> str:
    inner = root.inner(path)
    return " (-> /%s)" % inner if inner != path else ""
