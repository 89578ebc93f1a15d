# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The value each sysctl gets at boot, computed the way systemd-sysctl and the kernel compute it (sysctl.d(5)).

nodetune persists its sysctls in ``/etc/sysctl.d/90-nodetune-<area>.conf``. A site file read after it (a later file
name, such as ``99-sysctl.conf``, the standard link to ``/etc/sysctl.conf``) silently wins at the next boot: the
runtime value is right until the reboot, and wrong after it. This module finds such shadowing files so that apply
warns and verify reports them (``persist.sysctl_boot``), naming the file.

The rules (sysctl.d(5)): every ``*.conf`` in the search folders below; a file name found in several folders is
read from the first folder only (``/etc`` overrides ``/run``, which overrides the library folders); files are read
in the lexicographic order of their names, whatever their folder. ``/etc/sysctl.conf`` is read through
``99-sysctl.conf`` (the link distributions ship), not by itself. Keys may use ``/`` or ``.`` as separators and a
leading ``-``; a glob key applies only to keys no file names explicitly (``-key`` alone names one without a value).

The order of the writes is systemd-sysctl's (src/sysctl/sysctl.c, ``parse_file()`` and ``apply_all()``): one
entry per key in an ordered map, written once each in the map's order; a later assignment with another value moves
the key to the end, one with the same value keeps the key where it was. That order matters for the writeback pairs
(``vm.dirty_ratio``/``vm.dirty_bytes`` and the background pair): they are one limit in two forms, and the kernel
zeroes one form when the other is written (mm/page-writeback.c, ``dirty_ratio_handler()``/``dirty_bytes_handler()``,
which do so only when the value changes, and the background handlers, which always do). So a pair is one key here:
its writes are replayed through those handlers, and a site file that sets ``vm.dirty_bytes`` after nodetune's
``vm.dirty_ratio`` is found even though it never names ``vm.dirty_ratio``.

The same pairs at run time (:data:`KERNEL_PAIRS`): a write of one form changes the other, so the engine journals
both forms with either and revert puts the pair back with one write (:func:`pair_restore`).
"""

from __future__ import annotations

import fnmatch
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root

SEARCH_DIRS = ("etc/sysctl.d", "run/sysctl.d", "usr/local/lib/sysctl.d", "usr/lib/sysctl.d", "lib/sysctl.d")
CHECK_ID = "persist.sysctl_boot"
_GLOB = "*?["
_ULONG_MAX = (1 << 64) - 1
# The kernel refuses vm.dirty_bytes below two pages (dirty_bytes_min = 2 * PAGE_SIZE); 4 KiB pages on x86-64.
DIRTY_BYTES_MIN = 2 * 4096
# (ratio variable, bytes variable, ratio key, bytes key) of each exclusive pair; the sysctl area's (areas/sysctl.py)
DIRTY_PAIRS = (
    ("nodetune_vm_dirty_ratio", "nodetune_vm_dirty_bytes", "vm.dirty_ratio", "vm.dirty_bytes"),
    ("nodetune_vm_dirty_background_ratio", "nodetune_vm_dirty_background_bytes",
     "vm.dirty_background_ratio", "vm.dirty_background_bytes"),
)


def key_path(key: str) -> str:
    """The /proc/sys path form of a sysctl key: ``vm.dirty_ratio`` and ``vm/dirty_ratio`` -> ``vm/dirty_ratio``.

    If the first separator is a dot, dots and slashes are interchanged (``net.ipv4.conf.eth0/200.x`` names the
    interface ``eth0.200``); if it is a slash, the key is a path already."""
    key = key.strip().lstrip("-").strip()
    dot, slash = key.find("."), key.find("/")
    if dot != -1 and (slash == -1 or dot < slash):
        return key.translate(str.maketrans("./", "/."))
    return key


def _dotted(path: str) -> str:
    return path.translate(str.maketrans("./", "/."))


# Each form of a writeback pair -> the other form (/proc/sys paths)
PARTNER: Dict[str, str] = {}
for _ratio, _size in ((key_path(p[2]), key_path(p[3])) for p in DIRTY_PAIRS):
    PARTNER[_ratio], PARTNER[_size] = _size, _ratio
# mm/page-writeback.c: the values before any file is read (vm_dirty_ratio = 20, dirty_background_ratio = 10), and
# each key's range, its ctl_table's extra1/extra2 (dirty_bytes at least dirty_bytes_min, two pages); a value out of
# range is refused with EINVAL and changes nothing.
DIRTY_DEFAULTS = {"vm/dirty_ratio": 20, "vm/dirty_bytes": 0, "vm/dirty_background_ratio": 10,
                  "vm/dirty_background_bytes": 0}
DIRTY_RANGES = {"vm/dirty_ratio": (0, 100), "vm/dirty_bytes": (DIRTY_BYTES_MIN, _ULONG_MAX),
                "vm/dirty_background_ratio": (0, 100), "vm/dirty_background_bytes": (1, _ULONG_MAX)}
# dirty_ratio_handler() and dirty_bytes_handler() zero the other form only when the written value differs from the
# old one; dirty_background_ratio_handler() and dirty_background_bytes_handler() on every successful write.
ZERO_ONLY_ON_CHANGE = ("vm/dirty_ratio", "vm/dirty_bytes")


def sysctl_path(key: str) -> str:
    """A sysctl key's /proc/sys path, relative to the root: ``vm.dirty_ratio`` -> ``proc/sys/vm/dirty_ratio``."""
    return "proc/sys/" + key.replace(".", "/")


# The pairs as /proc/sys paths: each form -> the other form. A write of either changes both (the handler zeroes
# the other form), so apply journals both and revert restores them together (engine._restore_pair).
KERNEL_PAIRS: Dict[str, str] = {}
for _pair in DIRTY_PAIRS:
    KERNEL_PAIRS[sysctl_path(_pair[2])] = sysctl_path(_pair[3])
    KERNEL_PAIRS[sysctl_path(_pair[3])] = sysctl_path(_pair[2])
# The forms whose 0 the kernel refuses (EINVAL): the bytes forms, below their ctl_table's extra1 (mm/page-writeback.c,
# vm_page_writeback_sysctls: dirty_bytes_min, two pages; SYSCTL_LONG_ONE for dirty_background_bytes). 0 reads as
# "the ratio form is in use"; it is restored by writing that ratio.
ZERO_REFUSED = {sysctl_path("vm.dirty_bytes"): DIRTY_BYTES_MIN, sysctl_path("vm.dirty_background_bytes"): 1}


def _number(value: Optional[str]) -> Optional[int]:
    text = (value or "").strip()
    return int(text) if text.isdigit() else None


def pair_restore(values: Dict[str, Optional[str]]) -> List[Tuple[str, str]]:
    """The writes that put one exclusive pair back to ``values`` (each form's path -> the value it had, None where
    the journal does not hold it): the form that was in use alone, since the kernel zeroes the other; where both
    were 0, the ratio form's 0 (dirty_background_ratio_handler() zeroes the background bytes on every write,
    dirty_ratio_handler() only when the ratio changes: :func:`pair_problem` says so when that is not enough)."""
    in_use = [(path, str(_number(value))) for path, value in sorted(values.items())
              if _number(value) not in (None, 0)]
    if in_use:
        return in_use
    return [(path, "0") for path, value in sorted(values.items())
            if _number(value) == 0 and path not in ZERO_REFUSED]


def pair_problem(values: Dict[str, Optional[str]], now: Dict[str, Optional[str]]) -> str:
    """Why a pair could not be put back to ``values`` (``now``: what it holds after :func:`pair_restore`'s
    writes), with what the operator can do before reverting again."""
    def key(path: str) -> str:
        return path[len("proc/sys/"):].replace("/", ".")
    ratio, size = sorted(values, key=lambda path: path in ZERO_REFUSED)
    shown = "%s/%s" % (key(ratio), key(size))
    was = "/".join("unknown" if values[p] is None else str(values[p]) for p in (ratio, size))
    found = "/".join(str(now.get(p)) for p in (ratio, size))
    if values[ratio] is None:
        why = ("the journal (of an earlier nodetune) does not hold %s, and the kernel refuses %s=0 (below %d, "
               "mm/page-writeback.c); set %s to the node's own value, which zeroes %s"
               % (key(ratio), key(size), ZERO_REFUSED[size], key(ratio), key(size)))
    elif _number(values[ratio]) == 0 and _number(values[size]) == 0:
        why = ("both were 0, the kernel refuses %s=0 and zeroes it only when %s changes (dirty_ratio_handler()); "
               "write another %s, then 0" % (key(size), key(ratio), key(ratio)))
    else:
        why = "the kernel did not take the writes of the form in use"
    return ("%s is %s, not %s as before nodetune: %s, and revert again" % (shown, found, was, why))


# (value, file path, the key written, the value written): the write that decided a key's boot value
_Origin = Tuple[str, str, str, str]


def boot_files(root: Root, replaced: Optional[Dict[str, str]] = None) -> List[Tuple[str, str, str]]:
    """``(name, path, text)`` of every file systemd-sysctl reads, in the order it reads them.

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


def entries(text: str) -> List[Tuple[str, Optional[str]]]:
    """``(key path, value)`` of each line of a sysctl.d file, in order; the value is None for a ``-key`` line
    without one (it only keeps globs off that key). Comments, blanks and other lines are skipped."""
    out: List[Tuple[str, Optional[str]]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        key, sep, value = stripped.partition("=")
        if sep and key.strip():
            out.append((key_path(key), value.strip()))
        elif not sep and stripped.startswith("-") and key_path(stripped):
            out.append((key_path(stripped), None))
    return out


def assignments(text: str) -> List[Tuple[str, str]]:
    """``(key path, value)`` of each assignment in a sysctl.d file, in order (comments and blanks skipped)."""
    return [(key, " ".join(value.split())) for key, value in entries(text) if value is not None]


def boot_options(root: Root, replaced: Optional[Dict[str, str]] = None) -> List[Tuple[str, Optional[str], str]]:
    """``(key path or glob, value, file path)`` in the order systemd-sysctl writes them (its ordered map): a later
    assignment with another value moves the key to the end, one with the same value leaves it in place."""
    options: Dict[str, Tuple[Optional[str], str]] = {}
    for _name, path, text in boot_files(root, replaced):
        for key, value in entries(text):
            if key in options and options[key][0] == value:
                continue
            options.pop(key, None)
            options[key] = (value, path)
    return [(key, value, path) for key, (value, path) in options.items()]


def _matches(pattern: str, path: str) -> bool:
    """glob(3) on /proc/sys: a wildcard matches within one path component."""
    parts, names = pattern.split("/"), path.split("/")
    return len(parts) == len(names) and all(fnmatch.fnmatchcase(n, p) for n, p in zip(names, parts))


def _writes(root: Root, paths: List[str], replaced: Optional[Dict[str, str]]) -> List[Tuple[str, str, str]]:
    """``(key path, value, file path)`` of each write systemd-sysctl makes to ``paths`` at boot, in order."""
    options = boot_options(root, replaced)
    explicit = set(key for key, _value, _path in options if not any(c in key for c in _GLOB))
    out = []
    for key, value, path in options:
        if value is None:
            continue
        if not any(c in key for c in _GLOB):
            if key in paths:
                out.append((key, value, path))
            continue
        for match in sorted(p for p in paths if p not in explicit and _matches(key, p)):
            out.append((match, value, path))
    return out


def _dirty_write(state: Dict[str, int], decided: Dict[str, _Origin], key: str, value: str, origin: _Origin) -> None:
    """One write to a writeback key, answered as the kernel's handler answers it (a refused one changes nothing)."""
    low, high = DIRTY_RANGES[key]
    text = value.strip()
    if not text.isdigit() or not low <= int(text) <= high:
        return
    changed = state[key] != int(text)
    state[key] = int(text)
    decided[key] = origin
    if changed or key not in ZERO_ONLY_ON_CHANGE:
        state[PARTNER[key]] = 0
        decided[PARTNER[key]] = origin


def boot_origins(root: Root, keys: List[str], replaced: Optional[Dict[str, str]] = None) -> Dict[str, _Origin]:
    """For each key (dotted form): ``(value, file path, key written, value written)`` of the write that decides its
    boot value. A writeback key may be decided by a write of its other form (which zeroes it). Keys no file
    writes are left out."""
    wanted = dict((key_path(key), key) for key in keys)
    paths = set(wanted) | set(PARTNER[p] for p in wanted if p in PARTNER)
    state = dict(DIRTY_DEFAULTS)
    decided: Dict[str, _Origin] = {}
    for key, value, path in _writes(root, sorted(paths), replaced):
        origin = (" ".join(value.split()), path, _dotted(key), " ".join(value.split()))
        if key in PARTNER:
            _dirty_write(state, decided, key, value, origin)
        else:
            decided[key] = origin
    out = {}
    for path, key in wanted.items():
        if path in decided:
            _value, file_path, written, written_value = decided[path]
            value = str(state[path]) if path in PARTNER else decided[path][0]
            out[key] = (value, file_path, written, written_value)
    return out


def boot_values(root: Root, keys: List[str], replaced: Optional[Dict[str, str]] = None) -> Dict[str, Tuple[str, str]]:
    """For each key (dotted form): ``(value, file path)`` it has after the boot and the file that decided it; keys
    no file writes are left out."""
    return dict((key, origin[:2]) for key, origin in boot_origins(root, keys, replaced).items())


def boot_checks(root: Root, settings: List[Any]) -> List[Dict[str, Any]]:
    """One entry per persisted sysctl: its key, nodetune's value, the value it gets at boot and from which file
    (``set_key``/``set_value``: what that file writes, the other form of a writeback pair where that decided it).

    ``settings`` are the desired Settings: the runtime sysctls (``persist == 'sysctl.d'``) and the
    ``persist.sysctl_d`` files that hold them, computed as if those files were already written."""
    files = dict((s.path, s.value) for s in settings if s.id == "persist.sysctl_d")
    sysctls = [s for s in settings if getattr(s, "persist", None) == "sysctl.d"]
    if not files or not sysctls:
        return []
    boot = boot_origins(root, [s.target for s in sysctls], files)
    out = []
    for setting in sorted(sysctls, key=lambda s: s.target):
        wanted = " ".join(str(setting.value).split())
        value, path, set_key, set_value = boot.get(setting.target, (None, None, None, None))
        out.append({"key": setting.target, "value": wanted, "boot_value": value,
                    "file": "/" + path if path else None, "nodetune": path in files,
                    "shadowed": path is not None and path not in files and value != wanted,
                    "via": _link_note(root, path) if path else "", "set_key": set_key, "set_value": set_value})
    return out


def shadowed(root: Root, settings: List[Any]) -> List[Dict[str, Any]]:
    """The persisted sysctls whose boot value would come from another file than nodetune's, with another value."""
    return [entry for entry in boot_checks(root, settings) if entry["shadowed"]]


def actual(entry: Dict[str, Any]) -> str:
    """The boot value and where it comes from, as verify shows it."""
    if entry.get("set_key") not in (None, entry["key"]):
        return "%s (%s=%s from %s%s zeroes it)" % (entry["boot_value"], entry["set_key"], entry["set_value"],
                                                   entry["file"], entry["via"])
    return "%s (from %s%s)" % (entry["boot_value"], entry["file"], entry["via"])


def message(entry: Dict[str, Any]) -> str:
    if entry.get("set_key") not in (None, entry["key"]):
        return ("%s=%s is persisted by nodetune, but %s%s sets %s=%s and systemd-sysctl writes it after nodetune's "
                "file at boot; they are one limit in two forms and the kernel zeroes one when the other is written "
                "(mm/page-writeback.c), so the node boots with %s=%s; remove that line, or persist that form with "
                "nodetune (%s)" % (entry["key"], entry["value"], entry["file"], entry["via"], entry["set_key"],
                                   entry["set_value"], entry["key"], entry["boot_value"],
                                   _variables(entry["set_key"], entry["set_value"])))
    return ("%s=%s is persisted by nodetune, but %s%s sets %s=%s and is read after nodetune's file at boot, so "
            "the node boots with %s; remove or change that line, or set the same value there"
            % (entry["key"], entry["value"], entry["file"], entry["via"], entry["key"], entry["boot_value"],
               entry["boot_value"]))


def _variables(key: str, value: str) -> str:
    """The role variables that persist ``key=value`` as nodetune's form of its writeback pair."""
    for ratio_var, bytes_var, ratio_key, bytes_key in DIRTY_PAIRS:
        if key in (ratio_key, bytes_key):
            mine, other = (ratio_var, bytes_var) if key == ratio_key else (bytes_var, ratio_var)
            return "%s: %s and %s: null" % (mine, value, other)
    return key


def _link_note(root: Root, path: str) -> str:
    inner = root.inner(path)
    return " (-> /%s)" % inner if inner != path else ""
