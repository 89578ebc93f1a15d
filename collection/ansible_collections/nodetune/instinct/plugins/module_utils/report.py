# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Reports of verify: per-node JSON, fleet JUnit XML, Prometheus textfile, fleet summary.

Pure functions over plain data (the verify module's findings and results), shared by the module on the node
(JSON report, textfile) and the filters on the controller (JUnit, fleet summary), so every consumer sees the same
ids and statuses. Formats:

- JUnit: one ``<testsuite>`` per node, one ``<testcase>`` per finding (``classname`` = node, ``name`` =
  ``id[target]``); drift -> ``<failure>``, not_applicable/unsupported/waived -> ``<skipped>``; a node whose verify
  did not run -> one ``<testcase name="nodetune.verify">`` with ``<error>``.
- Prometheus text exposition format 0.0.4 (what node_exporter's textfile collector reads):
  ``nodetune_drift{check,target}`` 0|1, ``nodetune_findings{status}``, ``nodetune_last_verify_timestamp_seconds``.
"""

from __future__ import annotations

import datetime
import time
from typing import Any, Dict, List, Optional, Tuple
from xml.etree import ElementTree

REPORT_SCHEMA = 1
STATUSES = ("ok", "drift", "not_applicable", "unsupported", "waived")
SKIPPED_STATUSES = ("not_applicable", "unsupported", "waived")


# ------------------------------------------------------------------------------------------------ per node
def node_report(node: str, findings: List[Dict[str, Any]], summary: Dict[str, Any], root: str = "/",
                timestamp: Optional[float] = None, extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The per-node JSON report (JSON-serialisable dict)."""
    when = time.time() if timestamp is None else timestamp
    report = {
        "schema": REPORT_SCHEMA,
        "node": node,
        "root": root,
        "timestamp": when,
        "generated_at": datetime.datetime.fromtimestamp(when, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "summary": summary,
        "findings": findings,
    }
    if extra:
        report.update(extra)
    return report


def _case_name(finding: Dict[str, Any]) -> str:
    return "%s[%s]" % (finding.get("id"), finding.get("target"))


# ------------------------------------------------------------------------------------------------ fleet inputs
def node_outcome(result: Any) -> Tuple[str, Optional[Dict[str, Any]], str]:
    """Classify one host's registered verify result: ("ok"|"failed", report or None, message).

    Accepts the module result (with ``report``), a report itself (with ``findings``), a failed or unreachable
    task result, or None (the host never produced a result).
    """
    if not isinstance(result, dict):
        return "failed", None, "no verify result (host unreachable or skipped before verify ran)"
    if result.get("unreachable"):
        return "failed", None, "unreachable: %s" % result.get("msg", "")
    if result.get("failed") and not result.get("failed_on_drift"):  # failed for its drift: a drifted node
        return "failed", None, str(result.get("msg") or "verify failed")
    if result.get("skipped"):
        return "failed", None, "verify was skipped on this host (%s)" % result.get("skip_reason", "condition")
    nested = result.get("report")
    report: Dict[str, Any] = nested if isinstance(nested, dict) else result
    if not isinstance(report.get("findings"), list):
        return "failed", None, "the result holds no findings"
    return "ok", report, ""


# ------------------------------------------------------------------------------------------------ JUnit
def junit_xml(results: Dict[str, Any], suite_name: str = "nodetune verify") -> str:
    """Fleet JUnit XML: ``{host: verify result}`` -> ``<testsuites>`` text."""
    suites = ElementTree.Element("testsuites", name=suite_name)
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for host in sorted(results):
        outcome, report, message = node_outcome(results[host])
        suite = ElementTree.SubElement(suites, "testsuite", name=str(host))
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        if outcome != "ok" or report is None:
            case = ElementTree.SubElement(suite, "testcase", name="nodetune.verify", classname=str(host))
            error = ElementTree.SubElement(case, "error", message=message, type="verify_failed")
            error.text = message
            counts["tests"] += 1
            counts["errors"] += 1
        else:
            suite.set("timestamp", str(report.get("generated_at", "")))
            for finding in report["findings"]:
                counts["tests"] += 1
                case = ElementTree.SubElement(suite, "testcase", name=_case_name(finding), classname=str(host))
                status = finding.get("status")
                if status == "drift":
                    counts["failures"] += 1
                    failure = ElementTree.SubElement(
                        case, "failure", type="drift",
                        message="expected %s, found %s" % (finding.get("expected"), finding.get("actual")))
                    failure.text = "severity: %s\nremedy: %s" % (finding.get("severity"), finding.get("remedy") or "")
                elif status in SKIPPED_STATUSES:
                    counts["skipped"] += 1
                    reason = finding.get("remedy") or ""
                    if status == "waived" and isinstance(finding.get("waiver"), dict):
                        waiver = finding["waiver"]
                        reason = "%s (until %s)" % (waiver.get("reason", ""), waiver.get("expires", ""))
                    ElementTree.SubElement(case, "skipped", message="%s: %s" % (status, reason))
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("time", "0")
    for key, value in totals.items():
        suites.set(key, str(value))
    if hasattr(ElementTree, "indent"):  # Python >= 3.9: one element per line, for humans reading CI artifacts
        ElementTree.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(suites, encoding="unicode") + "\n"


# ------------------------------------------------------------------------------------------------ Prometheus
def escape_label(value: Any) -> str:
    """Label value escaping of the text exposition format: backslash, double quote and line feed."""
    return str(value).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def prometheus_text(findings: List[Dict[str, Any]], timestamp: Optional[float] = None) -> str:
    """The node_exporter textfile for one node's findings."""
    when = time.time() if timestamp is None else timestamp
    drift: Dict[Tuple[str, str], int] = {}
    for finding in findings:
        key = (str(finding.get("id")), str(finding.get("target")))
        drift[key] = max(drift.get(key, 0), 1 if finding.get("status") == "drift" else 0)
    counts = dict((status, 0) for status in STATUSES)
    for finding in findings:
        status = str(finding.get("status"))
        counts[status] = counts.get(status, 0) + 1
    lines = [
        "# HELP nodetune_drift 1 when the check drifts from the desired state on this target, else 0.",
        "# TYPE nodetune_drift gauge",
    ]
    for (check, target), value in sorted(drift.items()):
        lines.append('nodetune_drift{check="%s",target="%s"} %d' % (escape_label(check), escape_label(target), value))
    lines += [
        "# HELP nodetune_findings Number of verify findings by status.",
        "# TYPE nodetune_findings gauge",
    ]
    for status in sorted(counts):
        lines.append('nodetune_findings{status="%s"} %d' % (escape_label(status), counts[status]))
    lines += [
        "# HELP nodetune_last_verify_timestamp_seconds Unix time of the last nodetune verify run.",
        "# TYPE nodetune_last_verify_timestamp_seconds gauge",
        "nodetune_last_verify_timestamp_seconds %.3f" % when,
    ]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ fleet
def fleet_summary(results: Dict[str, Any], top: int = 10) -> Dict[str, Any]:
    """Nodes clean, drifted and failed, and the most frequent drift ids (by number of nodes)."""
    clean: List[str] = []
    drifted: Dict[str, List[str]] = {}
    failed: Dict[str, str] = {}
    totals = dict((status, 0) for status in STATUSES)
    nodes_by_id: Dict[str, int] = {}
    for host in sorted(results):
        outcome, report, message = node_outcome(results[host])
        if outcome != "ok" or report is None:
            failed[host] = message
            continue
        ids = set()
        for finding in report["findings"]:
            status = str(finding.get("status"))
            totals[status] = totals.get(status, 0) + 1
            if status == "drift":
                ids.add(str(finding.get("id")))
        if ids:
            drifted[host] = sorted(ids)
            for check in ids:
                nodes_by_id[check] = nodes_by_id.get(check, 0) + 1
        else:
            clean.append(host)
    frequent = sorted(nodes_by_id.items(), key=lambda item: (-item[1], item[0]))[:top]
    summary = {
        "nodes": len(results),
        "clean": clean,
        "drifted": drifted,
        "failed": failed,
        "counts": {"clean": len(clean), "drifted": len(drifted), "failed": len(failed)},
        "findings": totals,
        "top_drift_ids": [{"id": check, "nodes": count} for check, count in frequent],
    }
    summary["text"] = summary_lines(summary)
    return summary


def summary_lines(summary: Dict[str, Any], names: int = 8) -> List[str]:
    """Human lines for a playbook's closing message."""

    def some(hosts: List[str]) -> str:
        shown = ", ".join(hosts[:names])
        return shown + (" ... (+%d)" % (len(hosts) - names) if len(hosts) > names else "")

    counts = summary["counts"]
    lines = ["nodetune verify: %d node(s): %d clean, %d drifted, %d failed"
             % (summary["nodes"], counts["clean"], counts["drifted"], counts["failed"])]
    if summary["drifted"]:
        lines.append("drifted: " + some(sorted(summary["drifted"])))
    if summary["failed"]:
        lines.append("failed: " + some(sorted(summary["failed"])))
    if summary["top_drift_ids"]:
        lines.append("most frequent drift: " + ", ".join(
            "%s (%d node%s)" % (item["id"], item["nodes"], "" if item["nodes"] == 1 else "s")
            for item in summary["top_drift_ids"]))
    return lines


# ------------------------------------------------------------------------------------------------ apply summary
def apply_summary(results: Dict[str, Any], top: int = 10, names: int = 8, title: str = "nodetune apply"
                  ) -> Dict[str, Any]:
    """The fleet's tune results in a few lines: nodes changed, unchanged, failed; changes by id (nodes, values);
    reboots required; notes with how many nodes gave them. One summary per run instead of one per host: at fleet
    scale a per-host task costs a worker process per host, and a thousand summaries are not read."""
    changed: List[str] = []
    unchanged: List[str] = []
    failed: Dict[str, str] = {}
    reboot: List[str] = []
    restored = 0
    by_id: Dict[str, List[int]] = {}
    notes: Dict[str, int] = {}
    for host in sorted(results):
        result = results[host]
        if not isinstance(result, dict) or result.get("unreachable") or result.get("skipped"):
            failed[host] = "no tune result (unreachable or skipped)" if not isinstance(result, dict) else str(
                result.get("msg") or ("unreachable" if result.get("unreachable") else "skipped"))
            continue
        if result.get("failed") and not result.get("failed_on_drift"):
            failed[host] = str(result.get("msg") or "tune failed")
            continue
        (changed if result.get("changed") else unchanged).append(host)
        if result.get("reboot_required"):
            reboot.append(host)
        restored += len(result.get("restored") or [])
        seen = set()
        for action in result.get("actions") or []:
            entry = by_id.setdefault(str(action.get("id")), [0, 0])
            entry[1] += 1
            if action.get("id") not in seen:
                seen.add(action.get("id"))
                entry[0] += 1
        for note in result.get("notes") or []:
            notes[str(note)] = notes.get(str(note), 0) + 1
    frequent = sorted(by_id.items(), key=lambda item: (-item[1][0], -item[1][1], item[0]))[:top]
    summary = {
        "nodes": len(results),
        "counts": {"changed": len(changed), "unchanged": len(unchanged), "failed": len(failed)},
        "changed": changed, "unchanged": unchanged, "failed": failed, "reboot_required": reboot,
        "restored": restored,
        "changes_by_id": [{"id": check, "nodes": n, "values": v} for check, (n, v) in frequent],
        "notes": [{"note": note, "nodes": n} for note, n in sorted(notes.items(), key=lambda i: (-i[1], i[0]))],
    }
    summary["text"] = _apply_lines(summary, names, title)
    return summary


def _apply_lines(summary: Dict[str, Any], names: int, title: str) -> List[str]:
    counts = summary["counts"]
    lines = ["%s: %d node(s): %d changed, %d unchanged, %d failed"
             % (title, summary["nodes"], counts["changed"], counts["unchanged"], counts["failed"])]
    if summary["changes_by_id"]:
        lines.append("changes by id: " + ", ".join("%s on %d node(s) (%d value(s))" % (c["id"], c["nodes"], c["values"])
                                                   for c in summary["changes_by_id"]))
    if summary["restored"]:
        lines.append("restored from the journal: %d value(s)" % summary["restored"])
    if summary["reboot_required"]:
        lines.append("reboot required: " + _names(summary["reboot_required"], names))
    for host, message in list(summary["failed"].items())[:names]:
        lines.append("failed %s: %s" % (host, message))
    for entry in summary["notes"][:names]:
        lines.append("note (%d node(s)): %s" % (entry["nodes"], entry["note"]))
    return lines


def _names(hosts: List[str], limit: int) -> str:
    shown = ", ".join(hosts[:limit])
    return shown + (" and %d more" % (len(hosts) - limit) if len(hosts) > limit else "")
