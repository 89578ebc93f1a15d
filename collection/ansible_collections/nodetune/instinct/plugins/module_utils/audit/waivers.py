# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Waivers: a drifting check accepted, with a reason, until a date. An entry's id must be one nodetune checks
(check_ids.py), so that a misspelt id waives nothing silently."""

from __future__ import annotations

import datetime
import re
from typing import Any, Dict, List, Optional

from ansible_collections.nodetune.instinct.plugins.module_utils.audit import check_ids
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import DRIFT, WAIVED, Finding


WAIVER_KEYS = ("id", "target", "reason", "expires")


class WaiverError(ValueError):
    """The waivers file is malformed; the message names the entry and the field."""


def validate_waivers(waivers: Any) -> List[Dict[str, Any]]:
    """Waivers: a list of {id, target (optional, '*' or omitted = every target), reason, expires (YYYY-MM-DD)}."""
    if waivers is None:
        return []
    if not isinstance(waivers, list):
        raise WaiverError("waivers must be a list of {id, target, reason, expires}, got %s" % type(waivers).__name__)
    out = []
    for index, entry in enumerate(waivers):
        where = "waiver #%d" % (index + 1)
        if not isinstance(entry, dict):
            raise WaiverError("%s is not a mapping" % where)
        unknown = sorted(str(key) for key in entry if key not in WAIVER_KEYS)
        if unknown:
            # a misspelt 'target' would waive every target, a misspelt 'expires' would be reported as missing
            raise WaiverError("%s has unknown key%s %s (valid keys: %s)" % (
                where, "s" if len(unknown) > 1 else "", ", ".join(repr(k) for k in unknown), ", ".join(WAIVER_KEYS)))
        for field in ("id", "reason", "expires"):
            if not entry.get(field):
                raise WaiverError("%s has no %s (every waiver needs id, reason and expires)" % (where, field))
        if not isinstance(entry["id"], str) or not check_ids.is_known(entry["id"]):
            raise WaiverError("%s: %s" % (where, check_ids.unknown_message(str(entry["id"]))))
        out.append({"id": str(entry["id"]), "target": str(entry.get("target") or "*"),
                    "reason": str(entry["reason"]), "expires": _expiry(entry["expires"], where, entry["id"])})
    return out


_EXPIRY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}\Z")


def _expiry(value: Any, where: str, waiver_id: str) -> str:
    """A waiver's ``expires`` as YYYY-MM-DD: a string of exactly that form or a date (YAML's unquoted date). An int
    (20260204), a week date (2026-W49-1) or a date with a time would compare wrongly, or be read differently by
    different Pythons, so they are refused rather than kept waiving."""
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, str) and _EXPIRY.match(value):
        try:
            return datetime.date.fromisoformat(value).isoformat()  # the pattern keeps 3.11's wider forms out
        except ValueError:
            pass
    raise WaiverError("%s (%s): expires=%r is not valid: a date written YYYY-MM-DD (like 2026-12-31) is needed"
                      % (where, waiver_id, value))


def apply_waivers(findings: List[Finding], waivers: List[Dict[str, Any]], today: Optional[str] = None) -> List[str]:
    """Turn drifting findings covered by an unexpired waiver into ``waived``; returns notes about expired ones."""
    day = datetime.date.fromisoformat(today) if today else datetime.date.today()
    notes = []
    for waiver in waivers:
        expired = datetime.date.fromisoformat(waiver["expires"]) < day  # as dates, never as strings
        for finding in findings:
            if finding.id != waiver["id"] or waiver["target"] not in ("*", finding.target):
                continue
            if finding.status != DRIFT:
                continue
            if expired:
                notes.append("waiver for %s[%s] expired on %s: reported as drift again"
                             % (finding.id, finding.target, waiver["expires"]))
                continue
            finding.status = WAIVED
            finding.waiver = waiver
    return notes
