# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Findings: what verify (and bios_check) report, with stable ids (waivers: audit/waivers.py).

A Finding's ``id`` is the same stable id as the Setting it checks (``nvme.scheduler``), so that a drift report,
a waiver, a Prometheus label and an apply action all name one thing the same way.
"""

from __future__ import annotations

import collections
import json
import operator
import re
from typing import Any, Dict, Iterable, List, Optional, Tuple

OK = "ok"
DRIFT = "drift"
NOT_APPLICABLE = "not_applicable"
UNSUPPORTED = "unsupported"
WAIVED = "waived"
# Right where it is configured, not yet in effect: the boot loader has the kernel command line, the running kernel
# booted without it (kernel_cmdline.running, bios.iommu). Not drift (apply has nothing left to do), not ok: a reboot.
PENDING = "pending"
STATUSES = (OK, DRIFT, NOT_APPLICABLE, UNSUPPORTED, WAIVED, PENDING)

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


def summarize(findings: List[Finding]) -> Dict[str, Any]:
    counts = dict((s, 0) for s in STATUSES)
    for finding in findings:
        counts[finding.status] += 1
    drift_ids = sorted(set(f.id for f in findings if f.status == DRIFT))
    summary = {"counts": counts, "drift": counts[DRIFT] > 0, "drift_ids": drift_ids}
    if counts[PENDING]:
        summary["pending_ids"] = sorted(set(f.id for f in findings if f.status == PENDING))
    return summary


# ------------------------------------------------------------------------------------------------ groups
# A numbered object: a name, a number without leading zeros, and a rest that does not start with a digit
# (cpu12, cpu12/C2, irq 40, ib3, nvme0n1); PCI addresses and paths are listed as they are.
_NUMBERED = re.compile(r"^(\D*?)(0|[1-9]\d*)(\D.*)?$")
#: the order in which a group's status is decided: the worst status any of its findings has
GROUP_STATUS_ORDER = (DRIFT, PENDING, OK, WAIVED, UNSUPPORTED, NOT_APPLICABLE)
_SEVERITY_RANK = dict((s, i) for i, s in enumerate(SEVERITIES))


def _ranges(numbers: List[int]) -> str:
    parts = []
    start = prev = numbers[0]
    for number in numbers[1:] + [None]:  # type: ignore[list-item]
        if number is not None and number == prev + 1:
            prev = number
            continue
        parts.append(str(start) if start == prev else "%d-%d" % (start, prev))
        if number is not None:
            start = prev = number
    return ",".join(parts)


def compact_targets(targets: Iterable[Any]) -> str:
    """``cpu0, cpu1, cpu2, cpu7`` -> ``cpu0-2,7``; ``cpu1/C2, cpu2/C2`` -> ``cpu1-2/C2``; other targets listed,
    each once. Whatever the number of CPUs or IRQs, one line per object kind."""
    numbered: Dict[Tuple[str, str], List[int]] = {}
    plain: List[str] = []
    for target in targets:
        text = str(target)
        match = _NUMBERED.match(text)
        if match:
            numbered.setdefault((match.group(1), match.group(3) or ""), []).append(int(match.group(2)))
        else:
            plain.append(text)
    parts = ["%s%s%s" % (prefix, _ranges(sorted(set(ids))), suffix)
             for (prefix, suffix), ids in sorted(numbered.items())]
    return ", ".join(parts + sorted(set(plain)))


def _one_value(values: List[Any]) -> Any:
    """The value all findings of a group share, or ``"<N values>"``."""
    first = values[0]
    if all(value == first for value in values):
        return first
    return "<%d values>" % len(set(json.dumps(v, sort_keys=True, default=str) for v in values))


_ID_STATUS = operator.itemgetter("id", "status")
_FIRST = operator.itemgetter(0)


def _id_status_pairs(findings: List[Dict[str, Any]]) -> List[Tuple[Any, Any]]:
    try:
        return list(map(_ID_STATUS, findings))
    except (KeyError, TypeError):  # a finding without id or status: the slow way, with None for what is missing
        return [(f.get("id"), f.get("status")) for f in findings]


def group_findings(findings: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One entry per check id (in the order the ids first appear), whatever the number of objects it checks.

    Each entry: ``id``, ``status`` (drift if any target drifts, else pending, ok, waived, unsupported, not_applicable),
    ``counts`` per status, ``findings`` (how many), ``drift_targets`` (the offending targets, compact: ``cpu0-191``),
    ``severity``, ``expected``/``actual`` (of the drifting findings: the shared value or ``"<N values>"``; of one of
    its findings when none drifts), ``remedy``, ``source`` and a ``waiver``. The per-value detail stays in the
    node's JSON report; this is what fleet reports (JUnit, Prometheus, summaries) show. A fleet's reports group
    ~1,700 findings per node: the passes over all findings run in C (map, zip, Counter, dict); only the drifting
    findings are visited one by one."""
    findings = findings if isinstance(findings, list) else list(findings)
    pairs = _id_status_pairs(findings)
    tally = collections.Counter(pairs)
    one_of = dict(zip(map(_FIRST, pairs), findings))  # keys in first-seen order, a finding per id (its last)
    drifting = {}  # type: Dict[Any, List[Dict[str, Any]]]
    if any(status == DRIFT for _check, status in tally):
        for finding, (check, status) in zip(findings, pairs):
            if status == DRIFT:
                drifting.setdefault(check, []).append(finding)
    counts_by_id = {}  # type: Dict[Any, Dict[str, int]]
    for (check, status), count in tally.items():
        counts = counts_by_id.get(check)
        if counts is None:
            counts = counts_by_id[check] = dict((s, 0) for s in STATUSES)
        counts[str(status)] = counts.get(str(status), 0) + count
    groups = []
    for check in one_of:
        counts = counts_by_id[check]
        shown = drifting.get(check) or [one_of[check]]
        status = next((s for s in GROUP_STATUS_ORDER if counts.get(s)), str(shown[0].get("status")))
        severity = max(set(str(item.get("severity") or "info") for item in shown),
                       key=lambda s: _SEVERITY_RANK.get(s, 0))
        groups.append({
            "id": str(check), "status": status, "counts": counts, "findings": sum(counts.values()),
            "drift_targets": compact_targets(item.get("target") for item in drifting.get(check, ())),
            "severity": severity,
            "expected": _one_value([item.get("expected") for item in shown]),
            "actual": _one_value([item.get("actual") for item in shown]),
            "remedy": next((str(item.get("remedy")) for item in shown if item.get("remedy")), ""),
            "source": str(shown[0].get("source") or ""),
            "waiver": one_of[check].get("waiver") if status == WAIVED else None,
        })
    return groups
