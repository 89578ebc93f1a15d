# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The journal's format and its reader: what apply records (the baseline of every value it changed, the folders it
made, its runs) and revert restores, in ``var/lib/nodetune/journal.json`` under the root.

Apply writes it (apply/engine.py); the planner reads it as data before anything is written: a builder whose
Settings depend on what an earlier apply recorded (the IPoIB MTU's cap, the original of a value) takes it from
``Context.journal`` (apply/node.py). A journal that does not validate is refused, and kept exactly as it is.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import (
    ATTR,
    BOOT,
    COMMITS,
    FILE,
    SERVICE,
    SettingError,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root

STATE_DIR = "var/lib/nodetune"
JOURNAL = STATE_DIR + "/journal.json"
JOURNAL_VERSION = 1


class JournalError(SettingError):
    """The journal does not have the shape this nodetune writes: refused, and kept exactly as it is."""


def empty_journal() -> Dict[str, Any]:
    return {"version": JOURNAL_VERSION, "created": None, "baseline": {}, "created_dirs": [], "runs": []}


_validated: List[str] = []  # the last journal text that validated: a run reads the same one again (apply, audit)


def load_journal(root: Root) -> Dict[str, Any]:
    """The node's journal (an empty one where there is none); raises JournalError where it does not validate."""
    text = root.read(JOURNAL, strip=False)
    if text is None:
        return empty_journal()
    try:
        data = json.loads(text)
    except ValueError:
        data = _NOT_JSON
    problems = [] if _validated and _validated[0] == text else journal_problems(data)
    if not problems:
        _validated[:] = [text]
    if problems:
        raise JournalError(["the journal %s is not valid (%s); refusing to guess the node's baseline, nothing was "
                            "written or deleted (move it aside, or restore it from a backup, to go on)"
                            % ("/" + JOURNAL, "; ".join(problems[:5]) + ("; ..." if len(problems) > 5 else ""))])
    return data


_NOT_JSON = object()
_SNAPSHOT_FIELDS = {
    # kind: {field: (allowed types, required)}
    # compare: a command attribute's (setting.COMMITS), whose restore is the command, not what it reads back
    ATTR: {"restore": ((str, type(None)), True), "compare": ((str,), False)},
    # sha256: of what nodetune last wrote to a file it created (absent in journals of earlier versions)
    FILE: {"exists": ((bool,), True), "content": ((str, type(None)), True), "mode": ((str,), True),
           "sha256": ((str,), False)},
    SERVICE: {"unit": ((str,), True), "state": ((str, type(None)), True)},
    # every boot entry's kernel arguments (bootloader.snapshot): BLS by entry file, GRUB by grub.cfg linux line
    BOOT: {"loader": ((str,), True), "entries": ((dict,), True)},
}


def journal_problems(data: Any) -> List[str]:
    """What is wrong with a decoded journal, as short phrases (empty when it is one this nodetune wrote)."""
    if data is _NOT_JSON:
        return ["not JSON"]
    if not isinstance(data, dict):
        return ["expected a JSON object, found %s" % _json_type(data)]
    version = data.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version != JOURNAL_VERSION:  # true == 1
        return ["version %r, this nodetune reads version %d" % (data.get("version"), JOURNAL_VERSION)]
    problems = []
    baseline = data.get("baseline")
    if not isinstance(baseline, dict):
        problems.append("'baseline' must be an object of the original values, found %s" % _json_type(baseline))
        baseline = {}
    for key in sorted(baseline, key=str):
        problems.extend(_snapshot_problems(key, baseline[key]))
    for field in ("created_dirs", "runs"):
        value = data.get(field, [])
        if not isinstance(value, list):
            problems.append("'%s' must be a list, found %s" % (field, _json_type(value)))
    dirs = data.get("created_dirs", [])
    if isinstance(dirs, list) and not all(isinstance(d, str) and _is_inner_path(d) for d in dirs):
        problems.append("'created_dirs' must hold relative paths inside the root")
    identity = data.get("identity", {})  # absent in journals of earlier versions
    if not isinstance(identity, dict) or not all(isinstance(v, (str, type(None))) for v in identity.values()):
        problems.append("'identity' must be an object of the node's identity facts (strings)")
    return problems


def _snapshot_problems(key: str, snap: Any) -> List[str]:
    where = "baseline entry %r" % (key,)
    if not isinstance(snap, dict):
        return ["%s is %s, not an object" % (where, _json_type(snap))]
    kind = snap.get("kind")
    if kind not in _SNAPSHOT_FIELDS:
        return ["%s has kind %r (valid: %s)" % (where, kind, ", ".join(sorted(_SNAPSHOT_FIELDS)))]
    problems = []
    for field, (types, required) in sorted(_SNAPSHOT_FIELDS[kind].items()):
        if field not in snap:
            if required:
                problems.append("%s has no '%s'" % (where, field))
            continue
        if not isinstance(snap[field], types):
            problems.append("%s: '%s' is %s" % (where, field, _json_type(snap[field])))
    if kind == FILE and isinstance(snap.get("mode"), str) and not _is_octal_mode(snap["mode"]):
        problems.append("%s: mode %r is not an octal file mode" % (where, snap["mode"]))
    if kind == FILE and snap.get("exists") is True and not isinstance(snap.get("content"), str):
        problems.append("%s: an existing file needs its 'content'" % where)
    if kind == FILE and isinstance(snap.get("sha256"), str) and not _is_sha256(snap["sha256"]):
        problems.append("%s: sha256 %r is not a SHA-256 hex digest" % (where, snap["sha256"]))
    if "order" in snap and (isinstance(snap["order"], bool) or not isinstance(snap["order"], int)):
        problems.append("%s: 'order' is %s, not an integer" % (where, _json_type(snap["order"])))
    if kind == ATTR and "compare" in snap and snap["compare"] not in COMMITS:
        problems.append("%s: compare %r is not one of %s" % (where, snap["compare"], ", ".join(sorted(COMMITS))))
    if kind == SERVICE and key != "service:" + str(snap.get("unit")):
        problems.append("%s does not name its unit %r" % (where, snap.get("unit")))
    if kind != SERVICE and not _is_inner_path(key):
        problems.append("%s is not a relative path inside the root" % where)
    return problems


def _is_octal_mode(text: str) -> bool:
    return 0 < len(text) <= 4 and all(c in "01234567" for c in text)


def _is_sha256(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def _is_inner_path(path: str) -> bool:
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and ".." not in parts and "\x00" not in path


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)
