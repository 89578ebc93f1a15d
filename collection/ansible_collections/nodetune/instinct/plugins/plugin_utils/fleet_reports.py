# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Every fleet output from per-node results, one node at a time: the fleet summary, the JUnit XML, the fleet
Prometheus text, the outliers and the findings and expectations learned from the group majorities.

One builder (:func:`build`) for two sources of nodes:

- the play's registered results (``nodetune.instinct.fleet_report``, run once at the end of a play:
  :func:`play_entries`);
- the per-node report files that any number of runs, ``--limit`` slices (AWX / Automation Platform job slicing) or
  controllers wrote (``nodetune report DIR...``, ``nodetune.api.report()`` and the action's ``sources``:
  :func:`file_entries`). The newest report of each node wins, by the time its controller recorded.

What a report file carries for this (written by the tune and verify actions, :func:`report_context`): ``run`` (which
run wrote it, its controller and when) and ``groups`` (each inventory group the host was in, with its number of hosts
in the inventory): the peers of the outliers and of the learned expectations are the groups each node was in at its
newest report, whatever run or slice that was, and the file decision for a learned expectation
(outliers.learned_file_action) takes the group sizes that report recorded. A run whose node failed leaves its last
report in ``nodes/`` and writes ``failed/<host>.json`` (:func:`failure_record`), so that the failure, being newer,
is what the fleet report shows, and the report comes back when a later run succeeds.

Only one node's findings are in memory at a time: each is digested (report.node_digest: counts and one group per
check id) and dropped before the next is read.
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import socket
import time
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple
from urllib.parse import unquote

from ansible_collections.nodetune.instinct.plugins.module_utils.audit import outliers as outliers_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import report as report_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import transport
from ansible_collections.nodetune.instinct.plugins.module_utils.audit.report import (
    escape_label,
    markup_text,
    plain_text,
    report_file_name,
)
from ansible_collections.nodetune.instinct.plugins.plugin_utils.report_files import (
    SkippedFile,
    add_learned_to_report,
    keep_learned,
    learned_path,
    loads,
    read_regular,
    write_report,
    write_text,
)

NODES_DIR = "nodes"
FAILED_DIR = "failed"
SUMMARY_FILE = "summary.json"
JUNIT_FILE = "junit.xml"
PROMETHEUS_FILE = "fleet.prom"
RUN_KEY = "run"
GROUPS_KEY = "groups"
FAILED_OUTCOME = "failed"
_IMPLICIT = ("all", "ungrouped")


class ReportSourceError(ValueError):
    """A source given to the fleet report that is not a report folder (named, with what is valid)."""


# ------------------------------------------------------------------------------------------------ what a report carries
def run_identity(task_vars: Dict[str, Any]) -> Dict[str, Any]:
    """Which run this is: ``id``, ``controller`` (host name) and ``started`` (Unix time, or None).

    AWX and Automation Platform give every job, and so every slice of a sliced job, its ``awx_job_id`` (AWX
    ``UnifiedJob.awx_meta_vars``); elsewhere the run is the ansible-playbook process: the action plugins run in
    worker processes it forks (ansible-core ``utils/multiprocessing.py``: the ``fork`` context), so their parent is
    it, and its pid with its start time names it."""
    controller = socket.gethostname()
    main = os.getppid()
    started = _process_start(main)
    job = task_vars.get("awx_job_id", task_vars.get("tower_job_id"))
    if job is not None and str(job) != "":
        run_id = "awx-job-%s" % job
    else:
        run_id = "%s:%d:%s" % (controller, main, int(started) if started is not None else "-")
    return {"id": run_id, "controller": controller, "started": started}


def _process_start(pid: int) -> Optional[float]:
    """The Unix time a process started (Linux /proc: ``btime`` of /proc/stat plus field 22 of /proc/PID/stat, in
    clock ticks since boot; proc(5)), or None."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as handle:
            boot = next(int(line.split()[1]) for line in handle if line.startswith("btime "))
        return boot + ticks / float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def host_groups(groups: Dict[str, Any], host: str) -> Dict[str, int]:
    """The inventory groups ``host`` is in, each with its number of hosts in the whole inventory (``groups``, the
    magic variable, is never cut by ``--limit``)."""
    return dict((str(name), len(members or [])) for name, members in sorted(groups.items())
                if host in (members or []))


def groups_of_hosts(groups: Dict[str, Any]) -> Dict[str, Dict[str, int]]:
    """:func:`host_groups` of every host at once: each group's members listed once, where asking per host would look
    through every group for each (a 10,000-host play in a group of all of them: 10^8 comparisons)."""
    found: Dict[str, Dict[str, int]] = {}
    for name, members in sorted(groups.items()):
        size = len(members or [])
        for member in members or []:
            found.setdefault(member, {})[str(name)] = size
    return found


def report_context(task_vars: Dict[str, Any]) -> Dict[str, Any]:
    """What the controller adds to a node's report file: ``run`` (:func:`run_identity` and ``time``, when the
    controller took the node's result) and ``groups`` (:func:`host_groups`)."""
    run = run_identity(task_vars)
    run["time"] = time.time()
    host = task_vars.get("inventory_hostname")
    return {RUN_KEY: run, GROUPS_KEY: host_groups(task_vars.get("groups") or {}, str(host)) if host else {}}


def failure_record(host: str, message: str, context: Dict[str, Any]) -> Dict[str, Any]:
    """``failed/<host>.json``: the node failed (or was unreachable) in this run; newer than its last report."""
    when = float(context[RUN_KEY].get("time") or time.time())
    return {"schema": report_mod.REPORT_SCHEMA, "node": host, "outcome": FAILED_OUTCOME, "message": message,
            "timestamp": when, "generated_at": _iso(when), RUN_KEY: context[RUN_KEY],
            GROUPS_KEY: context.get(GROUPS_KEY) or {}}


def play_failures(failed: Dict[str, str], groups: Dict[str, Any], run: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """:func:`failure_record` of each node that failed in this play (``{host: message}``, the summary's
    ``failed``), with its inventory groups."""
    groups_of = groups_of_hosts(groups) if failed else {}
    return dict((host, failure_record(host, message, {RUN_KEY: run, GROUPS_KEY: groups_of.get(host) or {}}))
                for host, message in failed.items())


def _iso(when: Optional[float]) -> str:
    if not isinstance(when, (int, float)):
        return ""
    return datetime.datetime.fromtimestamp(when, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------------------------------ entries
class Entry(object):
    """One node's result as the builder takes it: ``result`` (a verify result, a report, a failure or None),
    ``time`` (what decides which of a node's reports is the newest), ``run`` and ``groups`` (group -> inventory
    size), ``file`` (where it was read, or None), ``timestamp`` (the node's own time of its verify), ``error``
    (why the file is no report: its node fails) and ``digest`` (:func:`_digest` of a report file, taken as it is
    read: where a file's data do not digest, the file is no report)."""

    __slots__ = ("host", "result", "time", "run", "groups", "file", "timestamp", "error", "digest")

    def __init__(self, host: str, result: Any, time_: Optional[float], run: Optional[Dict[str, Any]],
                 groups: Dict[str, int], file: Optional[str] = None, timestamp: Optional[float] = None,
                 error: Optional[str] = None, digest: Optional[Tuple[Dict[str, Any], Any, bool]] = None) -> None:
        self.host = host
        self.result = result
        self.time = time_
        self.run = run
        self.groups = groups
        self.file = file
        self.timestamp = timestamp
        self.error = error
        self.digest = digest


def play_entries(results: Iterable[Tuple[str, Any]], groups: Dict[str, Any], run: Dict[str, Any],
                 report_dir: Optional[str] = None) -> Iterator[Entry]:
    """The play's registered results (``(host, result)``, filter/report.iter_verify_results) as entries of this
    run; with ``report_dir``, each names the file the run keeps for its node (its report, or its failure record)."""
    now = float(run.get("time") or time.time())
    groups_of = groups_of_hosts(groups)
    for host, result in results:
        outcome, report, _message = report_mod.node_outcome(result)
        stamp = report.get("timestamp") if report is not None else None
        where = None
        if report_dir:
            where = node_path(report_dir, host) if outcome == "ok" else failure_path(report_dir, host)
        yield Entry(host, result, now, run, dict(groups_of.get(host) or {}), where,
                    stamp if isinstance(stamp, (int, float)) else now)


def report_time(data: Dict[str, Any]) -> Optional[float]:
    """When the controller took this report (``run.time``); a file written before runs were recorded: the node's
    own ``timestamp``."""
    run = data.get(RUN_KEY)
    for value in ((run or {}).get("time") if isinstance(run, dict) else None, data.get("timestamp")):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def _host_of_file(name: str) -> str:
    return unquote(name[:-len(".json")])


def _report_files(source: str) -> List[str]:
    """The node files of one source: ``<dir>/nodes/*.json`` and ``<dir>/failed/*.json`` of a report folder, or
    ``<dir>/*.json`` of a folder of node reports; temporary files of a write in progress (``.nodetune-report-*``)
    are not reports."""
    if not os.path.isdir(source):
        raise ReportSourceError("%s is not a folder: give nodetune report folders (nodetune_report_dir of a run, "
                                "holding nodes/<host>.json) or folders of node reports" % source)
    folders = [os.path.join(source, sub) for sub in (NODES_DIR, FAILED_DIR)
               if os.path.isdir(os.path.join(source, sub))]
    if not folders and not os.path.isfile(os.path.join(source, SUMMARY_FILE)):
        folders = [source]
    out = []
    for folder in folders:
        out.extend(os.path.join(folder, name) for name in sorted(os.listdir(folder))
                   if name.endswith(".json") and not name.startswith("."))
    if not out:
        raise ReportSourceError("%s holds no node report (nodes/<host>.json or failed/<host>.json of a report "
                                "folder, or <host>.json): is it the nodetune_report_dir of a run?" % source)
    return out


# How report_files.write_report lays out a report: a line per top-level key, the findings a line each between these.
_FINDINGS_START = ',\n    "findings": [\n'
_FINDINGS_END = "\n    ]"


def _checks_only(text: str) -> Optional[Dict[str, Any]]:
    """The report without decoding its findings, where the controller wrote its ``checks`` (the findings grouped
    per check id, report_files.with_checks) and they count as many findings as the file has lines of them; else
    None (the whole file is decoded). Decoding 1,700 findings is most of what reading a full-size node's report
    costs, and its checks are all a fleet report needs of them."""
    start = text.find(_FINDINGS_START)
    if start < 0 or '\n    "checks": [' not in text[:start]:
        return None
    # the last line that closes a list: no other key's value spans lines, and no finding holds a raw newline
    end = text.rfind(_FINDINGS_END, start + len(_FINDINGS_START))
    if end < 0:
        return None
    try:
        data = loads(text[:start] + "\n}")
        data.update(loads("{" + text[end + len(_FINDINGS_END):].lstrip(",")))
        checks = data.get("checks")
        counted = sum(int(group["findings"]) for group in checks)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
        return None
    if not isinstance(data, dict) or counted != text.count("\n", start + len(_FINDINGS_START), end) + 1:
        return None
    return data


def _read_entry(path: str) -> Entry:
    """One report file as an entry, digested; a file that is not read (no regular file, too large), unreadable, or
    no nodetune report is an entry that fails its node (named after the file) and says why."""
    host = _host_of_file(os.path.basename(path))
    try:
        text = read_regular(path).decode("utf-8")
        data = _checks_only(text)
        if data is None:
            data = loads(text)
    except SkippedFile as exc:
        return _unreadable(host, path, "is %s: skipped, not read" % exc.what)
    except (IOError, OSError) as exc:
        return _unreadable(host, path, "cannot be read: %s" % (exc.strerror or exc))
    except UnicodeDecodeError as exc:
        return _unreadable(host, path, "is not UTF-8 text (byte %d)" % exc.start)
    except ValueError as exc:
        return _unreadable(host, path, "is not valid JSON (%s)" % exc)
    if not isinstance(data, dict) or not (isinstance(data.get("findings"), list) or isinstance(data.get("checks"), list)
                                          or data.get("outcome") == FAILED_OUTCOME):
        return _unreadable(host, path, "is not a nodetune node report (a mapping with findings, or a failure "
                                       "record with outcome failed)")
    problem = _report_problem(data)
    if problem:
        return _unreadable(host, path, "is not a nodetune node report (%s)" % problem)
    if data.get("node"):
        host = data["node"]
    run = data.get(RUN_KEY) if isinstance(data.get(RUN_KEY), dict) else None
    if run is not None:  # what the summary's runs show of it, as text and number only
        run = {"id": run["id"] if isinstance(run.get("id"), (str, int)) else None, "time": run.get("time"),
               "controller": run["controller"] if isinstance(run.get("controller"), str) else None,
               "started": run["started"] if _is_time(run.get("started")) else None}
    groups = data.get(GROUPS_KEY)
    groups = dict((str(k), int(v)) for k, v in groups.items() if isinstance(v, int)) if isinstance(groups, dict) \
        else {}
    stamp = float(data["timestamp"]) if data.get("timestamp") is not None else None
    if data.get("outcome") == FAILED_OUTCOME:
        result = {"failed": True, "msg": str(data.get("message") or "failed")}  # type: Any
    else:
        result = data
    try:
        digest = _digest(host, result)
    except RecursionError:
        return _unreadable(host, path, "is not a nodetune node report (a value nested too deeply)")
    if not all(_shallow(group.get(key)) for group in digest[0]["groups"] for key in _VALUES):
        return _unreadable(host, path, "is not a nodetune node report (a value nested deeper than %d levels)"
                           % _DEPTH)
    return Entry(host, result, report_time(data), run, groups, path, stamp, digest=digest)


# The latest time a report may give: 9999-12-31 (a later one is no date).
_LATEST = 253402300799
# How deep a finding's value may nest: the outputs write it as text (str(), json.dumps), which recurse.
_DEPTH = 16
_VALUES = ("expected", "actual", "waiver")
_GROUP_TEXTS = ("id", "status", "drift_targets", "severity", "remedy", "source")


def _is_time(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= _LATEST


def _shallow(value: Any, depth: int = _DEPTH) -> bool:
    """Whether a decoded JSON value nests at most ``depth`` lists and mappings."""
    level = [value]
    for _level in range(depth + 1):
        level = [item for each in level if isinstance(each, (list, dict))
                 for item in (each.values() if isinstance(each, dict) else each)]
        if not level:
            return True
    return False


def _report_problem(data: Dict[str, Any]) -> Optional[str]:
    """What of a decoded report file the fleet report cannot take, in a few words, or None: its times must be
    dates, its texts texts, its findings (or its checks, finding.group_findings) of the types nodetune writes, its
    inventory a mapping of plain values. A file is anyone's: nothing of it may reach the outputs as a traceback."""
    run = data.get(RUN_KEY)
    for name, value in (("timestamp", data.get("timestamp")),
                        ("run time", run.get("time") if isinstance(run, dict) else None)):
        if value is not None and not _is_time(value):
            shown = repr(value)[:24] if isinstance(value, (int, float)) else "a %s" % type(value).__name__
            return "its %s is no time from 1970 to 9999: %s" % (name, shown)
    for name in ("node", "generated_at", "message"):
        if data.get(name) is not None and not isinstance(data[name], str):
            return "its %s is not a text" % name
    findings = data.get("findings")
    if isinstance(findings, list):
        if not all(isinstance(f, dict) and isinstance(f.get("id"), str) and isinstance(f.get("status"), str)
                   for f in findings):
            return "a finding is not a mapping with a text id and status"
    elif isinstance(data.get("checks"), list):
        for group in data["checks"]:
            counts = group.get("counts") if isinstance(group, dict) else None
            if not (isinstance(counts, dict) and all(isinstance(group.get(k), str) for k in _GROUP_TEXTS)
                    and _is_count(group.get("findings")) and set(report_mod.STATUSES) <= set(counts)
                    and all(_is_count(n) for n in counts.values())):
                return "a check is not a mapping with the texts, counts and number of findings nodetune writes"
    inventory = data.get("inventory")
    if inventory is not None and not (isinstance(inventory, dict) and _shallow(inventory)
                                      and isinstance(inventory.get("versions") or {}, dict)):
        return "its inventory is not a mapping of plain values"
    return None


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _unreadable(host: str, path: str, why: str) -> Entry:
    return Entry(host, {"failed": True, "msg": "its report %s %s: remove or replace the file" % (path, why)},
                 None, None, {}, path, error=why)


def file_entries(sources: Iterable[str]) -> Iterator[Entry]:
    """Every node file of ``sources`` (report folders, in the order given), read one at a time. Raises
    ReportSourceError, before reading any report, for a source that is not a folder."""
    paths = []
    for source in sources:
        paths.extend(_report_files(str(source)))
    for path in paths:
        yield _read_entry(path)


# ------------------------------------------------------------------------------------------------ the builder
class FleetOutputs(object):
    """What :func:`build` gives: ``summary`` (as summary.json), ``junit`` and ``prometheus`` (texts), ``outliers``,
    ``learned`` (host -> its learned findings), ``expectations`` (host -> (learned expectation, seen, inventory
    peers), for the learned files) and ``digests`` (one per node, for the picture)."""

    def __init__(self) -> None:
        self.summary = {}  # type: Dict[str, Any]
        self.junit = ""
        self.prometheus = ""
        self.outliers = []  # type: List[Dict[str, Any]]
        self.learned = {}  # type: Dict[str, List[Dict[str, Any]]]
        self.expectations = {}  # type: Dict[str, Tuple[Dict[str, Any], int, int]]
        self.digests = []  # type: List[Dict[str, Any]]
        self.files = {}  # type: Dict[str, Optional[str]]
        self.had_learned = set()  # type: set


def _learned_in(findings: List[Any]) -> bool:
    try:  # in C: a dict.get per finding, then a membership test
        return outliers_mod.SOURCE in map(dict.get, findings, itertools.repeat("source"))
    except TypeError:  # something that is not a mapping among them
        return any(isinstance(f, dict) and f.get("source") == outliers_mod.SOURCE for f in findings)


def _without_learned(result: Any) -> Any:
    """The result with no learned finding: a fleet report learns them again from the whole fleet (a report file
    may hold those a slice's own fleet report learned from its share)."""
    if not isinstance(result, dict):
        return result
    report = result.get("report") if isinstance(result.get("report"), dict) else result
    findings = report.get("findings")
    if not isinstance(findings, list) or not _learned_in(findings):
        return result
    kept = [f for f in findings if not (isinstance(f, dict) and f.get("source") == outliers_mod.SOURCE)]
    return transport.with_findings(result, kept)


def _digest(host: str, result: Any) -> Tuple[Dict[str, Any], Optional[Any], bool]:
    """A node's digest (report.node_digest), its facts for the outliers (outliers.host_facts) and whether it held
    learned findings (dropped: the fleet learns them again). A report read without its findings (``checks`` only,
    :func:`_checks_only`) is digested from its checks."""
    if isinstance(result, dict) and not isinstance(result.get("findings"), list) \
            and isinstance(result.get("checks"), list):
        groups = [g for g in result["checks"] if g.get("source") != outliers_mod.SOURCE]
        learned = len(groups) != len(result["checks"])
        totals = dict((status, 0) for status in report_mod.STATUSES)
        for group in groups:
            for status, count in group["counts"].items():
                totals[status] = totals.get(status, 0) + count
        digest = {"host": str(host), "outcome": "ok", "message": "", "timestamp": result.get("timestamp"),
                  "generated_at": result.get("generated_at", ""), "totals": totals, "groups": groups}
        report = result
    else:
        stripped = _without_learned(result)
        learned = stripped is not result
        digest = report_mod.node_digest(host, stripped)
        report = None
        if digest["outcome"] == "ok" and isinstance(stripped, dict):
            report = stripped.get("report") if isinstance(stripped.get("report"), dict) else stripped
    if report is None or not isinstance(report.get("inventory"), dict):
        return digest, None, learned
    # what outliers.host_facts takes of the findings (the keys the node declares), from the digest's checks
    declared = [str(g["id"])[len("inventory."):] for g in digest["groups"]
                if str(g["id"]).startswith("inventory.") and g.get("source") != outliers_mod.SOURCE]
    return digest, (outliers_mod.comparable(report["inventory"]), declared), learned


def inventory_peers(groups: Dict[str, int]) -> int:
    """How many hosts the biggest peer group of a host has in the inventory: its biggest own group, else the hosts
    in no group of their own (``ungrouped``)."""
    own = [size for name, size in groups.items() if name not in _IMPLICIT]
    return max(own) if own else int(groups.get("ungrouped", 0))


def build(entries: Iterable[Entry], top: int = 10, suite_name: str = "nodetune verify",
          now: Optional[float] = None) -> FleetOutputs:
    """Every fleet output from ``entries``; a node given more than once counts once, with its newest entry (by
    ``time``; an unreadable file counts as the newest: its node fails, naming it)."""
    chosen = {}  # type: Dict[str, Tuple[Any, ...]]
    facts = {}  # type: Dict[str, Any]
    unreadable = []  # type: List[Dict[str, str]]
    sizes = {}  # type: Dict[str, set]
    for entry in entries:
        broken = entry.error is not None
        if broken:
            unreadable.append({"node": entry.host, "file": entry.file or "", "error": str(entry.error)})
        previous = chosen.get(entry.host)
        if previous is not None and not broken and (previous[0] is _BROKEN or _newer(previous[0], entry.time)):
            continue
        digest, found, learned_before = entry.digest or _digest(entry.host, entry.result)
        entry.result = entry.digest = None  # digested: the findings go before the next node's are read
        chosen[entry.host] = (_BROKEN if broken else entry.time, digest, entry, learned_before)
        if found is not None:
            facts[entry.host] = found
        else:
            facts.pop(entry.host, None)
    out = FleetOutputs()
    hosts = sorted(chosen)
    member_of = {}  # type: Dict[str, List[str]]
    sources = {}  # type: Dict[str, Dict[str, Any]]
    runs = {}  # type: Dict[str, Dict[str, Any]]
    for host in hosts:
        entry = chosen[host][2]
        member_of[host] = sorted(entry.groups)
        for name, size in entry.groups.items():
            sizes.setdefault(name, set()).add(size)
        run = entry.run if isinstance(entry.run, dict) else {}
        run_id = str(run.get("id") or "unknown")
        sources[host] = {"run": run_id, "time": entry.time, "timestamp": entry.timestamp,
                         "generated_at": _iso(entry.timestamp), "file": entry.file}
        tally = runs.setdefault(run_id, {"run": run_id, "controller": run.get("controller"),
                                         "started": run.get("started"), "nodes": 0})
        tally["nodes"] += 1
        out.files[host] = entry.file
        if chosen[host][3]:
            out.had_learned.add(host)
    for host, expected, seen in outliers_mod.expectations(facts, member_of):
        found = outliers_mod.host_outliers(host, facts[host][0], expected)
        out.outliers.extend(found)
        findings = outliers_mod.learned_findings(found).get(host)
        if findings:
            out.learned[host] = findings
        out.expectations[host] = (outliers_mod.learned_expectation(expected), seen,
                                  inventory_peers(chosen[host][2].groups))
    digests = [chosen[host][1] for host in hosts]
    for digest in digests:
        outliers_mod.add_to_digest(digest, out.learned.get(digest["host"]) or [])
    summary = report_mod.fleet_summary({}, top=int(top), digests=digests)
    summary["outliers"] = out.outliers
    summary["sources"] = sources
    summary["runs"] = sorted(runs.values(), key=lambda run: run["run"])
    summary["unreadable"] = unreadable
    disagree = dict((name, sorted(found)) for name, found in sizes.items() if len(found) > 1)
    summary["group_sizes_differ"] = disagree
    summary["text"] = [plain_text(line) for line in (list(summary["text"]) + outliers_mod.summary_lines(out.outliers)
                                                     + _source_lines(summary["runs"], unreadable, disagree))]
    out.summary = summary
    junit = report_mod.junit_xml({}, suite_name=suite_name, digests=digests)
    out.junit = markup_text(outliers_mod.add_to_junit(junit, out.outliers))
    out.prometheus = prometheus_text(digests, out.outliers, sources, now)
    out.digests = digests
    return out


_BROKEN = object()


def _newer(kept: Optional[float], offered: Optional[float]) -> bool:
    """Whether the kept entry stays: it is newer than the one offered (a tie goes to the one offered: the later
    source given)."""
    if offered is None:
        return kept is not None
    return kept is not None and kept > offered


def _source_lines(runs: List[Dict[str, Any]], unreadable: List[Dict[str, str]], disagree: Dict[str, List[int]],
                  names: int = 8) -> List[str]:
    lines = []
    if len(runs) > 1:
        shown = ", ".join("%s (%d)" % (run["run"], run["nodes"]) for run in runs[:names])
        lines.append("reports from %d runs: %s%s" % (len(runs), shown,
                                                     " ... (+%d)" % (len(runs) - names) if len(runs) > names else ""))
    for item in unreadable[:names]:
        lines.append("unreadable report %s (node %s failed): %s" % (item["file"], item["node"], item["error"]))
    for name, found in sorted(disagree.items())[:names]:
        lines.append("group %s: the reports give %s hosts in the inventory (it changed between runs; each node's "
                     "newest report decides its own)" % (name, " and ".join(str(n) for n in found)))
    return lines


# ------------------------------------------------------------------------------------------------ Prometheus
def _verdict(digest: Dict[str, Any]) -> str:
    if digest["outcome"] != "ok":
        return "failed"
    statuses = set(group["status"] for group in digest["groups"])
    return "drifted" if "drift" in statuses else ("pending" if "pending" in statuses else "clean")


def prometheus_text(digests: List[Dict[str, Any]], outliers: List[Dict[str, Any]],
                    sources: Dict[str, Dict[str, Any]], now: Optional[float] = None) -> str:
    """The fleet's Prometheus text (exposition format 0.0.4): nodes per verdict, per drifting check id its nodes
    and targets, outliers per key, and per node its verdict and the time of its newest report. Labels: ``check``,
    ``status`` and, in this fleet file only, ``node`` (one series per node and metric, whatever its size)."""
    verdicts = dict((name, 0) for name in ("clean", "drifted", "pending", "failed"))
    by_id = {}  # type: Dict[str, List[int]]
    per_node = []
    for digest in digests:
        verdict = _verdict(digest)
        verdicts[verdict] += 1
        per_node.append((digest["host"], verdict))
        for group in digest["groups"]:
            if group["status"] == "drift":
                entry = by_id.setdefault(group["id"], [0, 0])
                entry[0] += 1
                entry[1] += group["counts"].get("drift", 0)
    by_key = {}  # type: Dict[str, int]
    for outlier in outliers:
        by_key["outlier." + outlier["key"]] = by_key.get("outlier." + outlier["key"], 0) + 1
    lines = ["# HELP nodetune_fleet_nodes Nodes by the verdict of their newest report.",
             "# TYPE nodetune_fleet_nodes gauge"]
    lines += ['nodetune_fleet_nodes{status="%s"} %d' % (name, count) for name, count in sorted(verdicts.items())]
    lines += ["# HELP nodetune_fleet_drift_nodes Nodes on which the check drifts.",
              "# TYPE nodetune_fleet_drift_nodes gauge"]
    lines += ['nodetune_fleet_drift_nodes{check="%s"} %d' % (escape_label(check), n)
              for check, (n, _t) in sorted(by_id.items())]
    lines += ["# HELP nodetune_fleet_drift_targets Targets on which the check drifts, over the fleet.",
              "# TYPE nodetune_fleet_drift_targets gauge"]
    lines += ['nodetune_fleet_drift_targets{check="%s"} %d' % (escape_label(check), t)
              for check, (_n, t) in sorted(by_id.items())]
    lines += ["# HELP nodetune_fleet_outliers Nodes that differ from their group's majority, per key.",
              "# TYPE nodetune_fleet_outliers gauge"]
    lines += ['nodetune_fleet_outliers{check="%s"} %d' % (escape_label(key), n) for key, n in sorted(by_key.items())]
    lines += ["# HELP nodetune_node_verdict 1 for the verdict of the node's newest report.",
              "# TYPE nodetune_node_verdict gauge"]
    lines += ['nodetune_node_verdict{node="%s",status="%s"} 1' % (escape_label(host), verdict)
              for host, verdict in per_node]
    lines += ["# HELP nodetune_node_report_timestamp_seconds Unix time of the node's newest report (of its failure "
              "where it failed).",
              "# TYPE nodetune_node_report_timestamp_seconds gauge"]
    for host, _verdict_name in per_node:
        when = (sources.get(host) or {}).get("timestamp")
        if isinstance(when, (int, float)):
            lines.append('nodetune_node_report_timestamp_seconds{node="%s"} %.3f' % (escape_label(host), when))
    lines += ["# HELP nodetune_fleet_report_timestamp_seconds Unix time this fleet report was built.",
              "# TYPE nodetune_fleet_report_timestamp_seconds gauge",
              "nodetune_fleet_report_timestamp_seconds %.3f" % (time.time() if now is None else now)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ files
def output_texts(outputs: FleetOutputs) -> Dict[str, str]:
    """The fleet files by name: summary.json, junit.xml, fleet.prom."""
    return {SUMMARY_FILE: json.dumps(outputs.summary, indent=4, sort_keys=True) + "\n",
            JUNIT_FILE: outputs.junit, PROMETHEUS_FILE: outputs.prometheus}


def failure_path(report_dir: str, host: str) -> str:
    return os.path.join(str(report_dir), FAILED_DIR, report_file_name(host))


def node_path(report_dir: str, host: str) -> str:
    return os.path.join(str(report_dir), NODES_DIR, report_file_name(host))


def write_files(dest: str, outputs: FleetOutputs, failures: Optional[Dict[str, Dict[str, Any]]] = None
                ) -> Tuple[List[str], List[str]]:
    """Write the fleet files into ``dest`` (summary.json, junit.xml, fleet.prom), each node's learned expectation
    (``learned/<host>.json``, outliers.learned_file_action) and, where a node's result came from its report in
    ``dest/nodes``, that report with the learned findings of this fleet report in place of any it had. With
    ``failures`` (a play's: host -> its failure record), ``failed/<host>.json`` for each, and the failure records
    of the play's other nodes removed. Returns (the fleet files, the learned files and node files written or
    removed). Raises IOError/OSError."""
    changed = []  # type: List[str]
    for host in sorted(outputs.expectations):
        expectation, seen, peers = outputs.expectations[host]
        path = learned_path(dest, host)
        if keep_learned(path, expectation, outliers_mod.learned_file_action(expectation, seen, peers)):
            changed.append(path)
    for host in sorted(set(outputs.learned) | outputs.had_learned):
        path = node_path(dest, host)
        if outputs.files.get(host) == path and add_learned_to_report(path, outputs.learned.get(host) or []):
            changed.append(path)
    if failures is not None:
        for host in sorted(outputs.files):
            path = failure_path(dest, host)
            if host in failures:
                write_report(path, failures[host])
            elif os.path.lexists(path):
                os.unlink(path)
                changed.append(path)
    written = []
    for name, text in output_texts(outputs).items():
        write_text(os.path.join(dest, name), text)
        written.append(os.path.join(dest, name))
    return sorted(written), changed
