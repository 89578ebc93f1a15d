# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Findings: what verify (and bios_check) report, with stable ids, and waivers.

A Finding's ``id`` is the same stable id as the Setting it checks (``nvme.scheduler``), so that a drift report,
a waiver, a Prometheus label and an apply action all name one thing the same way.
"""

from __future__ import annotations

import datetime
from typing import Any, Dict, List, Optional

OK = "ok"
DRIFT = "drift"
NOT_APPLICABLE = "not_applicable"
UNSUPPORTED = "unsupported"
WAIVED = "waived"
STATUSES = (OK, DRIFT, NOT_APPLICABLE, UNSUPPORTED, WAIVED)

SEVERITIES = ("info", "low", "medium", "high")


class Finding(object):
    __slots__ = ("id", "target", "expected", "actual", "status", "severity", "remedy", "source", "waiver")

    def __init__(self, id: str, target: str, expected: Any, actual: Any, status: str, severity: str = "medium",
                 remedy: str = "", source: str = "setting", waiver: Optional[Dict[str, Any]] = None) -> None:
        if status not in STATUSES:
            raise ValueError("finding status %r is not one of %s" % (status, ", ".join(STATUSES)))
        if severity not in SEVERITIES:
            raise ValueError("finding severity %r is not one of %s" % (severity, ", ".join(SEVERITIES)))
        self.id = id
        self.target = target
        self.expected = expected
        self.actual = actual
        self.status = status
        self.severity = severity
        self.remedy = remedy
        self.source = source  # setting | layout | bios | health
        self.waiver = waiver

    def to_dict(self) -> Dict[str, Any]:
        return dict((name, getattr(self, name)) for name in self.__slots__)


WAIVER_KEYS = ("id", "target", "reason", "expires")


class WaiverError(ValueError):
    """The waivers file is malformed; the message names the entry and the field."""


def validate_waivers(waivers: Any) -> List[Dict[str, Any]]:
    """Waivers: a list of {id, target (optional, '*' or omitted = every target), reason, expires (YYYY-MM-DD)}."""
    if waivers is None:
        return []
    if not isinstance(waivers, list):
        raise WaiverError("waivers must be a list of {id, target, reason, expires}, got %s" % type(waivers).__name__)
    from ansible_collections.nodetune.instinct.plugins.module_utils import check_ids  # imports bios, which imports us

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
        expires = entry["expires"]
        if isinstance(expires, datetime.date):
            expires = expires.isoformat()
        try:
            datetime.date.fromisoformat(str(expires))
        except ValueError:
            raise WaiverError("%s (%s): expires %r is not a date like 2026-12-31" % (where, entry["id"], expires)) \
                from None
        out.append({"id": str(entry["id"]), "target": str(entry.get("target") or "*"),
                    "reason": str(entry["reason"]), "expires": str(expires)})
    return out


def apply_waivers(findings: List[Finding], waivers: List[Dict[str, Any]], today: Optional[str] = None) -> List[str]:
    """Turn drifting findings covered by an unexpired waiver into ``waived``; returns notes about expired ones."""
    today = today or datetime.date.today().isoformat()
    notes = []
    for waiver in waivers:
        expired = waiver["expires"] < today
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


def summarize(findings: List[Finding]) -> Dict[str, Any]:
    counts = dict((s, 0) for s in STATUSES)
    for finding in findings:
        counts[finding.status] += 1
    drift_ids = sorted(set(f.id for f in findings if f.status == DRIFT))
    return {"counts": counts, "drift": counts[DRIFT] > 0, "drift_ids": drift_ids}
