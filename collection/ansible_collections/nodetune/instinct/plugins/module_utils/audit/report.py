# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Reports of verify: per-node JSON, fleet JUnit XML, Prometheus textfile, fleet summary.

Pure functions over plain data (the verify module's findings and results), shared by the module on the node
(JSON report, textfile) and the filters on the controller (JUnit, fleet summary), so every consumer sees the same
ids and statuses. Formats:

- JUnit (the Jenkins/GitLab schema): one ``<testsuite>`` per node, one ``<testcase>`` per check id
  (``classname`` = node, ``name`` = id), whatever the number of CPUs or IRQs it checks; drift -> ``<failure>``
  naming the offending targets compactly (``cpu0-191``), all not_applicable/unsupported/waived -> ``<skipped>``;
  a node whose verify did not run -> one ``<testcase name="nodetune.verify">`` with ``<error>``. The per-value
  detail is in the node's JSON report.
- Prometheus text exposition format 0.0.4 (what node_exporter's textfile collector reads), labels ``check`` and
  ``status`` only: ``nodetune_drift{check}`` 0|1, ``nodetune_drift_targets{check}``, ``nodetune_findings{status}``,
  ``nodetune_last_verify_timestamp_seconds``.
"""

from __future__ import annotations

import datetime
import re
import time
from urllib.parse import quote
from typing import Any, Dict, List, Optional, Tuple
from xml.etree import ElementTree

from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import group_findings

REPORT_SCHEMA = 1
STATUSES = ("ok", "drift", "not_applicable", "unsupported", "waived", "pending")
# pending (right in the boot loader, a reboot away): skipped in JUnit, a failure being for drift only
SKIPPED_STATUSES = ("not_applicable", "unsupported", "waived", "pending")


# ------------------------------------------------------------------------------------------------ text
# C0, DEL, C1, the two separators str.splitlines() breaks at, lone surrogates (no UTF-8 writer takes them) and the two
# non-characters XML cannot hold: a node name or value holding one would forge a log line, drive the terminal or
# break a file, so every text output writes them as Python escapes, as the CLI's tables do (render.plain_cell)
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")
# the same but tab, line feed and carriage return, which XML holds (in an attribute as character references)
_UNSAFE_IN_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")


def _escaped(match: Any) -> str:
    return repr(match.group())[1:-1]


def plain_text(value: Any) -> str:
    """``value`` as one line of printable text: control characters and the like as Python escapes (``\\x1b``)."""
    return _UNSAFE.sub(_escaped, str(value))


def markup_text(text: str) -> str:
    """Serialised XML (or HTML) whose every character XML 1.0 holds: the others, and the control characters that it
    holds but a terminal or log reader obeys, as Python escapes (one pass over the document, whatever its size)."""
    return _UNSAFE_IN_XML.sub(_escaped, text)


# ------------------------------------------------------------------------------------------------ per node
def report_file_name(node: str) -> str:
    """The file name of a node's JSON report: the host name %-encoded so that no name (``../../etc/x``, ``a/b``,
    ``..``) reaches outside the report folder; ordinary host names are kept as they are."""
    name = quote(str(node), safe=":@[]", errors="surrogatepass")  # a lone surrogate too: JSON can name one
    if name in ("", ".", ".."):
        name = name.replace(".", "%2E") or "%00"
    return name + ".json"


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


def node_digest(host: str, result: Any) -> Dict[str, Any]:
    """What the fleet reports need of one host's result, read once: outcome, message, timestamp, the findings'
    totals per status and their groups (one per check id). A fleet's digests are a small fraction of its results:
    the per-value findings are not kept."""
    outcome, report, message = node_outcome(result)
    digest = {"host": str(host), "outcome": outcome, "message": message, "timestamp": None, "generated_at": "",
              "totals": dict((status, 0) for status in STATUSES), "groups": []}  # type: Dict[str, Any]
    if outcome == "ok" and report is not None:
        digest["timestamp"] = report.get("timestamp")
        digest["generated_at"] = report.get("generated_at", "")
        digest["groups"] = group_findings(report["findings"])
        for group in digest["groups"]:
            for status, count in group["counts"].items():
                digest["totals"][status] = digest["totals"].get(status, 0) + count
    return digest


def digest_results(results: Dict[str, Any]) -> List[Dict[str, Any]]:
    """``{host: verify result}`` -> the hosts' digests, sorted by host (:func:`node_digest`)."""
    return [node_digest(host, results[host]) for host in sorted(results)]


def fleet_reports(results: Dict[str, Any], suite_name: str = "nodetune verify", top: int = 10
                  ) -> Tuple[Dict[str, Any], str]:
    """The fleet summary and JUnit XML from one pass over the results."""
    digests = digest_results(results)
    return fleet_summary({}, top=top, digests=digests), junit_xml({}, suite_name=suite_name, digests=digests)


# ------------------------------------------------------------------------------------------------ JUnit
#: the attributes each element may carry in the Jenkins JUnit schema (xunit-plugin junit-10.xsd), which GitLab
#: reads too; tests/core/test_report.py checks the output against it
JUNIT_ATTRIBUTES = {
    "testsuites": ("name", "time", "tests", "failures", "disabled", "errors"),
    "testsuite": ("name", "tests", "failures", "errors", "time", "disabled", "skipped", "timestamp", "hostname",
                  "id", "package"),
    "testcase": ("name", "assertions", "time", "classname", "status"),
    "failure": ("message", "type"),
    "error": ("message", "type"),
    "skipped": ("message",),
}


def _junit_timestamp(report: Dict[str, Any]) -> str:  # a report or a digest
    """ISO 8601 without a zone (the schema's pattern), in UTC."""
    when = report.get("timestamp")
    if isinstance(when, (int, float)):
        return datetime.datetime.fromtimestamp(when, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return str(report.get("generated_at", "")).rstrip("Z")


def _drift_message(group: Dict[str, Any]) -> str:
    counts = group["counts"]
    return "%d of %d drift (%s): expected %s, found %s" % (
        counts.get("drift", 0), group["findings"], group["drift_targets"], group["expected"], group["actual"])


def _group_case(suite: Any, host: str, group: Dict[str, Any], counts: Dict[str, int]) -> None:
    counts["tests"] += 1
    case = ElementTree.SubElement(suite, "testcase", name=group["id"], classname=str(host), time="0")
    status = group["status"]
    if status == "drift":
        counts["failures"] += 1
        failure = ElementTree.SubElement(case, "failure", type="drift", message=_drift_message(group))
        failure.text = "severity: %s\ntargets: %s\nremedy: %s\n(every value: the node's JSON report)" % (
            group["severity"], group["drift_targets"], group["remedy"])
    elif status in SKIPPED_STATUSES:
        counts["skipped"] += 1
        reason = group["remedy"]
        waiver = group.get("waiver")
        if status == "waived" and isinstance(waiver, dict):
            reason = "%s (until %s)" % (waiver.get("reason", ""), waiver.get("expires", ""))
        ElementTree.SubElement(case, "skipped", message="%s: %s" % (status, reason))


def junit_xml(results: Dict[str, Any], suite_name: str = "nodetune verify",
              digests: Optional[List[Dict[str, Any]]] = None) -> str:
    """Fleet JUnit XML: ``{host: verify result}`` (or their ``digests``) -> ``<testsuites>`` text; one testcase
    per node and check id."""
    suites = ElementTree.Element("testsuites", name=suite_name)
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for digest in digest_results(results) if digests is None else digests:
        host = digest["host"]
        suite = ElementTree.SubElement(suites, "testsuite", name=host)
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        if digest["outcome"] != "ok":
            case = ElementTree.SubElement(suite, "testcase", name="nodetune.verify", classname=host, time="0")
            error = ElementTree.SubElement(case, "error", message=digest["message"], type="verify_failed")
            error.text = digest["message"]
            counts["tests"] += 1
            counts["errors"] += 1
        else:
            suite.set("timestamp", _junit_timestamp(digest))
            for group in digest["groups"]:
                _group_case(suite, host, group, counts)
        for key, value in counts.items():
            suite.set(key, str(value))
            if key in totals:
                totals[key] += value
        suite.set("time", "0")
    for key, value in totals.items():
        suites.set(key, str(value))
    if hasattr(ElementTree, "indent"):  # Python >= 3.9: one element per line, for humans reading CI artifacts
        ElementTree.indent(suites)
    text = ElementTree.tostring(suites, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + markup_text(text) + "\n"


# ------------------------------------------------------------------------------------------------ Prometheus
#: the only labels nodetune's series carry (docs/verify.md): a check id or a finding status, never a CPU, IRQ or
#: device, so that the series of a node are as many as its check ids whatever its size
PROMETHEUS_LABELS = ("check", "status")


def escape_label(value: Any) -> str:
    """Label value escaping of the text exposition format: backslash, double quote and line feed; any other
    control character (:func:`plain_text`) as its Python escape, itself escaped."""
    text = str(value).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")
    return _UNSAFE.sub(lambda match: _escaped(match).replace("\\", "\\\\"), text)


def prometheus_text(findings: List[Dict[str, Any]], timestamp: Optional[float] = None) -> str:
    """The node_exporter textfile for one node's findings: per check id, whether it drifts and on how many
    targets; totals per status; the time of the run. Series: 2 per check id + 7."""
    when = time.time() if timestamp is None else timestamp
    groups = sorted(group_findings(findings), key=lambda group: group["id"])
    counts = dict((status, 0) for status in STATUSES)
    for group in groups:
        for status, count in group["counts"].items():
            counts[status] = counts.get(status, 0) + count
    lines = [
        "# HELP nodetune_drift 1 when the check drifts from the desired state on any of its targets, else 0.",
        "# TYPE nodetune_drift gauge",
    ]
    for group in groups:
        lines.append('nodetune_drift{check="%s"} %d' % (escape_label(group["id"]), group["status"] == "drift"))
    lines += [
        "# HELP nodetune_drift_targets Number of targets (CPUs, IRQs, devices, files) on which the check drifts.",
        "# TYPE nodetune_drift_targets gauge",
    ]
    for group in groups:
        lines.append('nodetune_drift_targets{check="%s"} %d' % (escape_label(group["id"]), group["counts"]["drift"]))
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
def fleet_summary(results: Dict[str, Any], top: int = 10, digests: Optional[List[Dict[str, Any]]] = None
                  ) -> Dict[str, Any]:
    """Nodes clean, drifted and failed; per drifting check id, on how many nodes and targets it drifts; the most
    frequent drift ids (by number of nodes). From ``results`` ({host: verify result}) or their ``digests``."""
    if digests is None:
        digests = digest_results(results)
    clean: List[str] = []
    drifted: Dict[str, List[str]] = {}
    pending: Dict[str, List[str]] = {}
    failed: Dict[str, str] = {}
    totals = dict((status, 0) for status in STATUSES)
    by_id: Dict[str, List[int]] = {}
    for digest in digests:
        host = digest["host"]
        if digest["outcome"] != "ok":
            failed[host] = digest["message"]
            continue
        for status, count in digest["totals"].items():
            totals[status] = totals.get(status, 0) + count
        ids = [group for group in digest["groups"] if group["status"] == "drift"]
        if ids:
            drifted[host] = sorted(group["id"] for group in ids)
            for group in ids:
                entry = by_id.setdefault(group["id"], [0, 0])
                entry[0] += 1
                entry[1] += group["counts"]["drift"]
        elif any(group["status"] == "pending" for group in digest["groups"]):
            # configured right, waiting for a reboot (kernel_cmdline.running): neither clean nor drifted
            pending[host] = sorted(group["id"] for group in digest["groups"] if group["status"] == "pending")
        else:
            clean.append(host)
    frequent = sorted(by_id.items(), key=lambda item: (-item[1][0], item[0]))
    summary = {
        "nodes": len(digests),
        "clean": clean,
        "drifted": drifted,
        "pending": pending,
        "failed": failed,
        "counts": {"clean": len(clean), "drifted": len(drifted), "pending": len(pending), "failed": len(failed)},
        "findings": totals,
        "drift_by_id": [{"id": check, "nodes": n, "targets": t} for check, (n, t) in frequent],
        "top_drift_ids": [{"id": check, "nodes": n} for check, (n, _t) in frequent[:top]],
    }
    summary["text"] = summary_lines(summary)
    return summary


def summary_lines(summary: Dict[str, Any], names: int = 8) -> List[str]:
    """Human lines for a playbook's closing message."""

    def some(hosts: List[str]) -> str:
        shown = ", ".join(hosts[:names])
        return shown + (" ... (+%d)" % (len(hosts) - names) if len(hosts) > names else "")

    counts = summary["counts"]
    lines = ["nodetune verify: %d node(s): %d clean, %d drifted, %s%d failed"
             % (summary["nodes"], counts["clean"], counts["drifted"],
                "%d pending (reboot), " % counts["pending"] if counts.get("pending") else "", counts["failed"])]
    if summary["drifted"]:
        lines.append("drifted: " + some(sorted(summary["drifted"])))
    if summary.get("pending"):
        lines.append("pending a reboot: " + some(sorted(summary["pending"])))
    if summary["failed"]:
        lines.append("failed: " + some(sorted(summary["failed"])))
    if summary["top_drift_ids"]:
        lines.append("most frequent drift: " + ", ".join(
            "%s (%d node%s)" % (item["id"], item["nodes"], "" if item["nodes"] == 1 else "s")
            for item in summary["top_drift_ids"]))
    return [plain_text(line) for line in lines]


# ------------------------------------------------------------------------------------------------ apply summary
def apply_summary(results: Dict[str, Any], top: Optional[int] = None, names: int = 8, title: str = "nodetune apply"
                  ) -> Dict[str, Any]:
    """The fleet's tune results in a few lines: nodes changed, unchanged, failed; changes by id (nodes, values;
    every changed id unless ``top`` limits them: a cut list silently hid ids such as the sysctls);
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
        restored += _items(result, "restored")
        for check, values in _changed_ids(result).items():
            entry = by_id.setdefault(check, [0, 0])
            entry[0] += 1
            entry[1] += values
        for note in result.get("notes") or []:
            notes[str(note)] = notes.get(str(note), 0) + 1
    frequent = sorted(by_id.items(), key=lambda item: (-item[1][0], -item[1][1], item[0]))
    summary = {
        "nodes": len(results),
        "ids_changed": len(frequent),
        "counts": {"changed": len(changed), "unchanged": len(unchanged), "failed": len(failed)},
        "changed": changed, "unchanged": unchanged, "failed": failed, "reboot_required": reboot,
        "restored": restored,
        "changes_by_id": [{"id": check, "nodes": n, "values": v} for check, (n, v) in frequent[:top]],
        "notes": [{"note": note, "nodes": n} for note, n in sorted(notes.items(), key=lambda i: (-i[1], i[0]))],
    }
    summary["text"] = _apply_lines(summary, names, title)
    return summary


def _items(result: Dict[str, Any], key: str) -> int:
    """How many items a tune result's list has: in it, or counted where it moved to its spill file (``spilled``)."""
    spilled = result.get("spilled")
    if key not in result and isinstance(spilled, dict) and isinstance(spilled.get(key), int):
        return spilled[key]
    return len(result.get(key) or [])


def _changed_ids(result: Dict[str, Any]) -> Dict[str, int]:
    """Setting id -> values changed: from the actions, or the counts a bounded result keeps (``changed_ids``)."""
    if "actions" not in result and isinstance(result.get("changed_ids"), dict):
        return dict((str(k), int(v)) for k, v in result["changed_ids"].items())
    counts: Dict[str, int] = {}
    for action in result.get("actions") or []:
        counts[str(action.get("id"))] = counts.get(str(action.get("id")), 0) + 1
    return counts


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
