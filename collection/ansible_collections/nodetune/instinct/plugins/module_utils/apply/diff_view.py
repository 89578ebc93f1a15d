# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The diff a tune run shows (``--check --diff``), bounded whatever the node's size.

A fresh full-size node has thousands of changes: a governor per CPU, an affinity per IRQ, and nodetune's own files
(the checker's ``check.d/*.json``, the boot-time lists, the ``nodetune-check`` program), which printed one line per
value and every file whole came to thousands of lines per node. Here the changes are grouped per setting id (or,
for a revert, whose journal knows paths only, per path shape): a ``-``/``+`` pair per distinct change over its
targets written compactly (``cpu0-383``, ``/sys/devices/system/cpu/cpu{0-383}/online``), a file as its path,
settings count, size and SHA-256 digest (its lines too when it is a small configuration file), and the whole diff
cut at :data:`MAX_LINES` rendered lines, saying how many groups it left out. ``full`` keeps one line per value and
every file whole (the role variable ``nodetune_full_diff``).

The line count is that of Ansible's own rendering: the default callback prints ``difflib.unified_diff`` of the
``before`` and ``after`` texts with ``DIFF_CONTEXT`` (3) lines of context, then an empty line
(ansible-core ``lib/ansible/plugins/callback/__init__.py``, ``CallbackBase._get_diff``). Each group starts with a
header line that both texts share, so that its ``-`` and ``+`` lines are printed together.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import compact_targets
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import format_cpulist

#: rendered lines of one node's diff at most (``--- ``/``+++ ``/``@@`` lines included)
MAX_LINES = 200
#: Ansible's DIFF_CONTEXT default: the lines of context its callback prints around each change
CONTEXT = 3
#: a whole file of at most this many lines that is not JSON nor a program is shown line by line under its summary
SMALL_FILE_LINES = 10
#: an id with more distinct (before, after) pairs than this is one row ("N values"); files are never merged
MAX_PAIRS = 3
VALUE_WIDTH = 120
WHERE_WIDTH = 160
FULL_DIFF_HINT = "-e nodetune_full_diff=true shows every value"
HEADERS = {"before_header": "node (current)", "after_header": "node (nodetune)"}
REVERT_HEADERS = {"before_header": "node (current)", "after_header": "node (journal baseline)"}
FILE_KINDS = ("file",)
BOOT_KIND = "boot"  # the boot loader's entries (bootloader.py): a line per entry, each listed whole


# ------------------------------------------------------------------------------------------------ files
def settings_count(text: str) -> Optional[Tuple[int, str]]:
    """How many settings a file nodetune writes holds, and what they are: the ``settings`` list of a JSON file
    (the checker's ``check.d``, the boot-time ``boot-restore.d``), else its first top-level list (``ranks``); the
    lines that are neither empty nor comments of a configuration file. None for a program (``#!``)."""
    if text.startswith("#!"):
        return None
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            if isinstance(data.get("settings"), list):
                return len(data["settings"]), "setting"
            for key, value in data.items():
                if isinstance(value, list):
                    return len(value), str(key).rstrip("s") or "entry"
            return len(data), "key"
    count = sum(1 for line in text.splitlines() if line.strip() and not line.lstrip().startswith(("#", ";")))
    return count, "setting"


def _plural(count: int, word: str) -> str:
    return "%d %s%s" % (count, word, "" if count == 1 else "s")


def file_summary(text: Optional[str]) -> str:
    """A file as one line: settings count, lines, bytes and the SHA-256 of its content (``sha256sum`` on the node
    gives the same digest); ``<absent>`` for a file that does not exist."""
    if text is None:
        return "<absent>"
    data = text.encode("utf-8", "surrogateescape")
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    parts = []
    counted = settings_count(text)
    if counted is not None:
        parts.append(_plural(counted[0], counted[1]))
    else:
        parts.append("program")
    parts += [_plural(lines, "line"), _plural(len(data), "byte"), "sha256 " + hashlib.sha256(data).hexdigest()]
    return "<file: %s>" % ", ".join(parts)


def _small_text(text: Optional[str]) -> bool:
    if not text or text.startswith("#!") or text.lstrip().startswith(("{", "[")):
        return False
    return text.count("\n") <= SMALL_FILE_LINES


# ------------------------------------------------------------------------------------------------ changes
class Change(object):
    """One value a run changes: ``label`` groups it (a setting id, or a revert's path shape), ``target`` names the
    object, ``where`` the path (or unit), ``kind`` the Setting kind, ``before``/``after`` the values (None:
    absent)."""

    __slots__ = ("label", "target", "where", "kind", "before", "after")

    def __init__(self, label: str, target: str, where: str, kind: str, before: Optional[str],
                 after: Optional[str]) -> None:
        self.label = label
        self.target = target
        self.where = where
        self.kind = kind
        self.before = before
        self.after = after


def from_actions(actions: Iterable[Dict[str, Any]]) -> List[Change]:
    """The apply's actions (``engine.Action.to_dict``) as changes grouped by setting id."""
    return [Change(str(a.get("id")), str(a.get("target")), str(a.get("path") or a.get("target")), str(a.get("kind")),
                   a.get("before"), a.get("after")) for a in actions]


_DIGITS = re.compile(r"(\d+)")


def path_shape(path: str) -> str:
    """``/proc/irq/41/smp_affinity_list`` -> ``/proc/irq/N/smp_affinity_list``: the group of a revert's entry."""
    return _DIGITS.sub("N", path)


def from_revert(changes: Iterable[Dict[str, Any]]) -> List[Change]:
    """Revert's plan (``engine.revert``'s ``changes``: path or unit, kind, current value, baseline value) as changes
    grouped by path shape (the journal keeps paths, not setting ids), whole files by their folder."""
    out = []
    for change in changes:
        where = str(change.get("path") or change.get("target"))
        if not change.get("path"):
            label = "service " + where
        elif change.get("kind") in FILE_KINDS:
            label = path_shape(where.rsplit("/", 1)[0]) + "/"
        else:
            label = path_shape(where)
        target = where.rsplit("/", 1)[-1] if change.get("path") else where
        out.append(Change(label, target, where, str(change.get("kind")), change.get("before"), change.get("after")))
    return out


# ------------------------------------------------------------------------------------------------ rendering
def _cut(text: str, width: int) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[:width - 1] + "…"


def _value(change: Change, value: Optional[str]) -> str:
    if change.kind in FILE_KINDS:
        return file_summary(value)
    if change.kind == BOOT_KIND and value is not None:
        count = len(value.splitlines())
        return "<%d boot entr%s>" % (count, "y" if count == 1 else "ies")
    return "<absent>" if value is None else _cut(str(value), VALUE_WIDTH)


def where_pattern(paths: List[str]) -> str:
    """Paths of one shape written once: ``/sys/devices/system/cpu/cpu{0-383}/online``; paths of different shapes
    as the first and a count."""
    unique = list(dict.fromkeys(paths))
    if len(unique) == 1:
        return _cut(unique[0], WHERE_WIDTH)
    parts = [_DIGITS.split(path) for path in unique]
    if any(len(p) != len(parts[0]) or p[0::2] != parts[0][0::2] for p in parts):
        return _cut("%s and %d other path(s)" % (unique[0], len(unique) - 1), WHERE_WIDTH)
    out = []
    for index, piece in enumerate(parts[0]):
        values = set(p[index] for p in parts)
        if index % 2 == 0 or len(values) == 1:
            out.append(piece)
        else:
            out.append("{%s}" % _cut(format_cpulist(int(v) for v in values), 40))
    return _cut("".join(out), WHERE_WIDTH)


def _targets(targets: List[str]) -> str:
    text = compact_targets(targets)
    if len(text) <= WHERE_WIDTH:
        return text
    return _cut(text, WHERE_WIDTH - 16) + " (%d targets)" % len(set(targets))


Row = Tuple[List[str], List[str]]


def _rows(label: str, items: List[Change], before: str, after: str) -> Row:
    """One distinct change over its targets: a line of the before text and one of the after text, and the lines of
    a small configuration file under its summary."""
    where = where_pattern([c.where for c in items])
    if label.startswith(("/", "service ")):  # a revert's path shape: the paths say it all
        head = "%s = " % where if len(items) == 1 else "%s (%s) = " % (where, _plural(len(items), "value"))
    else:
        head = "%s[%s] %s = " % (label, _targets([c.target for c in items]), where)
    before_lines, after_lines = [head + before], [head + after]
    one = items[0]
    if one.kind == BOOT_KIND and len(items) == 1:  # the command lines themselves: what a reboot would run
        before_lines += ["    | " + line for line in (one.before or "").splitlines()]
        after_lines += ["    | " + line for line in (one.after or "").splitlines()]
    if one.kind in FILE_KINDS and len(items) == 1:
        if _small_text(one.before):
            before_lines += ["    | " + line for line in (one.before or "").splitlines()]
        if _small_text(one.after):
            after_lines += ["    | " + line for line in (one.after or "").splitlines()]
    return before_lines, after_lines


def _groups(changes: List[Change]) -> List[Tuple[str, List[Row]]]:
    """(header, rows) per label, in the order the labels first appear."""
    by_label = {}  # type: Dict[str, Dict[Tuple[str, str, str], List[Change]]]
    for change in changes:
        shown = (_value(change, change.before), _value(change, change.after))
        key = (change.where if change.kind in FILE_KINDS else "",) + shown  # a file is never merged with another
        by_label.setdefault(change.label, {}).setdefault(key, []).append(change)
    out = []
    for label, pairs in by_label.items():
        count = sum(len(items) for items in pairs.values())
        files = any(items[0].kind in FILE_KINDS for items in pairs.values())
        if files or len(pairs) <= MAX_PAIRS:
            rows = [_rows(label, items, key[1], key[2]) for key, items in pairs.items()]
        else:  # one row, "N distinct values" (an affinity per IRQ)
            befores = set(key[1] for key in pairs)
            afters = set(key[2] for key in pairs)
            before = befores.pop() if len(befores) == 1 else "<%d distinct values>" % len(befores)
            after = afters.pop() if len(afters) == 1 else "<%d distinct values>" % len(afters)
            if before == after:
                before, after = before + " (current)", after + " (nodetune)"
            rows = [_rows(label, [c for items in pairs.values() for c in items], before, after)]
        out.append(("# %s: %s" % (label, _plural(count, "value")), rows))
    return out


def rendered_lines(before: str, after: str, context: int = CONTEXT) -> int:
    """How many lines Ansible's callback prints for this diff: difflib's unified diff and the empty line after
    it (none when the texts are equal)."""
    lines = list(difflib.unified_diff(before.splitlines(True), after.splitlines(True), "before", "after", "", "",
                                      n=context))
    return len(lines) + 1 if lines else 0


def _texts(flat: List[Tuple[str, Row]], note: Optional[str]) -> Tuple[str, str]:
    """The before and after texts of the first rows: each group's header line in both, then its rows."""
    before, after = [], []  # type: List[str], List[str]
    header = None
    for row_header, (row_before, row_after) in flat:
        if row_header != header:
            header = row_header
            before.append(header)
            after.append(header)
        before += row_before
        after += row_after
    if note:
        after.append(note)
    return "".join(line + "\n" for line in before), "".join(line + "\n" for line in after)


def bounded(changes: List[Change], limit: int = MAX_LINES, headers: Optional[Dict[str, str]] = None,
            hint: str = FULL_DIFF_HINT) -> Dict[str, str]:
    """The Ansible diff (``before``/``after`` texts) of ``changes``, grouped, at most ``limit`` rendered lines:
    the rows that fit, in order, then one line saying how many were left out."""
    flat = [(header, row) for header, rows in _groups(changes) for row in rows]
    before, after = _texts(flat, None)
    if rendered_lines(before, after) > limit:
        low, high = 0, len(flat)  # the most rows that fit with the note: rendered lines grow with the rows
        while low < high:
            middle = (low + high + 1) // 2
            if rendered_lines(*_texts(flat[:middle], _note(flat[middle:], hint))) <= limit:
                low = middle
            else:
                high = middle - 1
        before, after = _texts(flat[:low], _note(flat[low:], hint))
    return dict(before=before, after=after, **(headers or HEADERS))


def _note(left: List[Tuple[str, Row]], hint: str) -> str:
    labels = list(dict.fromkeys(header[2:].rsplit(":", 1)[0] for header, _row in left))
    named = ", ".join(labels[:3]) + (", ..." if len(labels) > 3 else "")
    counts = (_plural(len(left), "more change"), _plural(len(labels), "group"))
    return _cut("... %s of %s not shown (%s): %s" % (counts + (named, hint)), 300)


def full(changes: List[Change], headers: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """One line per value, files whole (the form of ``engine.diff_text``)."""
    before, after = [], []
    for change in changes:
        head = ("%s[%s] %s" % (change.label, change.target, change.where)
                if not change.label.startswith(("/", "service ")) else change.where)
        if change.kind in FILE_KINDS:
            before.append("# %s\n%s" % (head, change.before if change.before is not None else "<absent>\n"))
            after.append("# %s\n%s" % (head, change.after if change.after is not None else "<absent>\n"))
        else:
            before.append("%s = %s\n" % (head, "<absent>" if change.before is None else change.before))
            after.append("%s = %s\n" % (head, "<absent>" if change.after is None else change.after))
    return dict(before="".join(before), after="".join(after), **(headers or HEADERS))


def bounded_text(diff: Dict[str, str], limit: int = MAX_LINES) -> Dict[str, str]:
    """A diff of one file's text (verify's Prometheus textfile) as it is when it renders within ``limit`` lines,
    else as its two summaries (lines, bytes, digest)."""
    if rendered_lines(str(diff.get("before") or ""), str(diff.get("after") or "")) <= limit:
        return diff
    out = dict(diff)
    out["before"] = file_summary(diff.get("before") if diff.get("before") else None) + "\n"
    out["after"] = file_summary(diff.get("after")) + "\n" + "... the whole text: %s\n" % FULL_DIFF_HINT
    return out


__all__ = ["MAX_LINES", "REVERT_HEADERS", "Change", "bounded", "bounded_text", "file_summary", "from_actions",
           "from_revert", "full", "path_shape", "rendered_lines", "settings_count", "where_pattern"]
