# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Fleet outliers: nodes whose hardware or versions differ from the majority of their group, and the expectation
learned from that majority.

Computed on the controller from every node's verify report (``report.inventory``: the facts node_check.read_facts
reads, see inventory.py). A node's peers are the hosts of each inventory group it belongs to (``all`` and
``ungrouped`` only where a host is in no other group); in a group of at least :data:`MIN_GROUP` nodes with facts, a
value held by more than half of them is the group's expectation (a tie, or a smaller group, has none). Each key of a
node takes the expectation of the biggest of its groups that has one, and a node with another value is an outlier.
A key the node declares in ``nodetune_inventory_expected`` is left to its ``inventory.<key>`` finding: the
declaration, not the majority, is the expectation there.

Where nothing is declared the majority is the expectation (issue 24, item 11): an outlier on an inventory key becomes
the node's own ``inventory.<key>`` drift finding, the id a declaration gives, with ``source`` :data:`SOURCE` and the
group, its majority and who holds it in the remedy (:func:`learned_finding`); the fleet report adds it to the node's
report, the fleet summary and JUnit, and the API's result. Every node's learned expectation
(:func:`learned_expectation`) is kept on the controller for the next apply, which writes it into nodetune-check's
``inventory.json`` (areas/checker_files.check_settings).

The outliers also go into the fleet summary (``outliers``, and lines of its text) and into the JUnit XML as one more
testsuite, ``nodetune.outliers`` (one failing testcase per outlier).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple
from xml.sax.saxutils import quoteattr

from ansible_collections.nodetune.instinct.plugins.module_utils.audit import inventory as inventory_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import (
    DRIFT,
    STATUSES,
    Finding,
    group_findings,
)

MIN_GROUP = 3
# What is compared: the inventory keys, then versions ("versions.kernel"...).
VERSION_KEYS = ("kernel", "amdgpu", "rocm", "gpu_vbios", "hca_fw")
SUITE = "nodetune.outliers"
SOURCE = "learned"  # the source of a finding whose expectation is the group's majority, not a declaration
# The keys a majority becomes an expectation of. Not smt: nodetune's own smt area turns SMT off, and smt/active then
# reads 0 ("active: Tells whether SMT is active (enabled and siblings online)", Linux
# Documentation/ABI/testing/sysfs-devices-system-cpu), so the majority before an apply is not the node after it.
# Versions have no inventory key: they stay outliers.
LEARNED_KEYS = tuple(key for key in inventory_mod.KEYS if key != "smt")
# The facts node_check.read_facts gives per device, as a list of the distinct values (a unit test keeps this equal
# to read_facts): a finding shows them as text ("200,400"), as inventory.findings does.
PER_DEVICE_KEYS = ("gpu_model", "compute_partition", "memory_partition", "xgmi_hive_size", "hca_rate", "hca_width")
MAJORITY_HOSTS = 5  # the hosts of a majority named in a finding; the rest are counted
_IMPLICIT_GROUPS = ("all", "ungrouped")


def _report(result: Any) -> Optional[Dict[str, Any]]:
    if not isinstance(result, dict) or result.get("unreachable") or result.get("skipped"):
        return None
    if result.get("failed") and not result.get("failed_on_drift"):
        return None
    report = result.get("report") if isinstance(result.get("report"), dict) else result
    return report if isinstance(report.get("inventory"), dict) else None


def _shown(value: Any) -> Optional[str]:
    if value is None or value == []:
        return None
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def comparable(facts: Dict[str, Any]) -> Dict[str, Optional[str]]:
    """A node's facts as flat text values ("hca_rate": "200,400", "versions.kernel": "6.8.0-45")."""
    out = dict((key, _shown(value)) for key, value in facts.items() if key != "versions")
    versions = facts.get("versions") or {}
    for key in VERSION_KEYS:
        out["versions." + key] = _shown(versions.get(key))
    return out


def _declared(report: Dict[str, Any]) -> List[str]:
    """The keys the node declares: its ``inventory.<key>`` findings, not those learned from its group (the API
    puts those into its report too)."""
    return [str(f.get("id"))[len("inventory."):] for f in report.get("findings") or []
            if str(f.get("id", "")).startswith("inventory.") and f.get("source") != SOURCE]


def peer_groups(groups: Dict[str, List[str]]) -> Dict[str, List[str]]:
    """Group name -> its hosts, from each host's group_names; a host in no group of its own is in ``all``."""
    out: Dict[str, List[str]] = {}
    for host, names in groups.items():
        own = [g for g in names or [] if g not in _IMPLICIT_GROUPS] or ["all"]
        for group in own:
            out.setdefault(group, []).append(host)
    return dict((group, sorted(hosts)) for group, hosts in out.items())


def _majority(values: List[Optional[str]]) -> Optional[Tuple[Optional[str], int]]:
    counts: Dict[Optional[str], int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    value, count = max(counts.items(), key=lambda item: (item[1], str(item[0])))
    return (value, count) if count * 2 > len(values) else None


HostFacts = Tuple[Dict[str, Optional[str]], List[str]]
# A group's majority for one key: group, value (text, as comparable), count, group_nodes, hosts (the first
# MAJORITY_HOSTS holding it, sorted). One dict per group and key, shared by every host that takes it.
Majority = Dict[str, Any]


def host_facts(result: Any) -> Optional[HostFacts]:
    """What the outliers need of one host's result: its comparable facts and the keys it declares; None for a host
    with no report. Small: the fleet report keeps these, not the hosts' findings."""
    report = _report(result)
    if report is None:
        return None
    return comparable(report["inventory"]), _declared(report)


def fleet_outliers(results: Dict[str, Any], groups: Dict[str, List[str]]) -> List[Dict[str, Any]]:
    """Every (node, key) that differs from its group's majority, from the biggest group it belongs to."""
    known = dict((host, host_facts(result)) for host, result in results.items())
    return outliers_of(dict((host, found) for host, found in known.items() if found is not None), groups)


def expectations(known: Dict[str, HostFacts], groups: Dict[str, List[str]]
                 ) -> Iterator[Tuple[str, Dict[str, Majority], int]]:
    """``(host, {key: Majority}, seen)`` for each host of ``known`` (:func:`host_facts`), sorted: per key the host
    does not declare, the majority of the biggest of its groups that has one; ``seen``: how many hosts with facts
    its biggest group has. The majorities are computed once per group and shared: a host costs a dict of
    references."""
    facts = dict((host, found[0]) for host, found in known.items())
    peers = peer_groups(dict((h, groups.get(h) or []) for h in facts))
    majorities: Dict[str, Dict[str, Majority]] = {}
    member_of: Dict[str, List[str]] = {}  # host -> its groups, biggest first
    for group, hosts in sorted(peers.items(), key=lambda item: (-len(item[1]), item[0])):
        for host in hosts:
            member_of.setdefault(host, []).append(group)
        if len(hosts) < MIN_GROUP:
            continue
        found: Dict[str, Majority] = {}
        for key in sorted(set(key for host in hosts for key in facts[host])):
            majority = _majority([facts[host].get(key) for host in hosts])
            if majority is None:
                continue
            value, count = majority
            holders = [host for host in hosts if facts[host].get(key) == value][:MAJORITY_HOSTS]
            found[key] = {"group": group, "value": value, "count": count, "group_nodes": len(hosts),
                          "hosts": holders}
        majorities[group] = found
    for host in sorted(facts):
        declared = known[host][1]
        expected: Dict[str, Majority] = {}
        for group in member_of.get(host, []):
            for key, majority in majorities.get(group, {}).items():
                if key not in expected and key not in declared:
                    expected[key] = majority
        mine = member_of.get(host, [])
        yield host, expected, len(peers[mine[0]]) if mine else 0


def host_outliers(host: str, facts: Dict[str, Optional[str]], expected: Dict[str, Majority]) -> List[Dict[str, Any]]:
    """The outliers of one host: each key whose value is not its expectation's (:func:`expectations`), with
    ``finding`` (``inventory.<key>``) where the majority is an inventory expectation (:func:`learnable`)."""
    out = []
    for key in sorted(expected):
        majority = expected[key]
        actual = facts.get(key)
        if actual == majority["value"]:
            continue
        outlier = {"node": host, "group": majority["group"], "key": key, "value": actual,
                   "majority": majority["value"], "majority_nodes": majority["count"],
                   "group_nodes": majority["group_nodes"], "majority_hosts": list(majority["hosts"])}
        if learnable(key, majority["value"]) is not None:
            outlier["finding"] = "inventory." + key
        out.append(outlier)
    return out


def outliers_of(known: Dict[str, HostFacts], groups: Dict[str, List[str]]) -> List[Dict[str, Any]]:
    """:func:`fleet_outliers` from each host's :func:`host_facts`."""
    out: List[Dict[str, Any]] = []
    for host, expected, _seen in expectations(known, groups):
        out.extend(host_outliers(host, known[host][0], expected))
    return out


# ------------------------------------------------------------------------------------------------ learned
def learnable(key: str, value: Optional[str]) -> Any:
    """The majority's value as a declaration would give it (inventory.validate: ``"8"`` -> 8), or None where it is
    no expectation: not an inventory key nodetune learns, no value (no HCA in the group), devices that differ
    among themselves (``200,400``)."""
    if key not in LEARNED_KEYS or value is None or "," in value:
        return None
    try:
        return inventory_mod.validate({key: value}).get(key)
    except inventory_mod.InventoryConfigError:
        return None


def learned_expectation(expected: Dict[str, Majority]) -> Dict[str, Any]:
    """What the next apply writes into nodetune-check's ``inventory.json`` for the host: ``expected`` (key ->
    value) and ``groups`` (key -> the group it was learned from); empty when nothing is learned. Only what stays
    the same from run to run (not the counts), so that a verify run in which a peer failed changes no file."""
    values: Dict[str, Any] = {}
    groups: Dict[str, str] = {}
    for key in sorted(expected):
        value = learnable(key, expected[key]["value"])
        if value is not None:
            values[key] = value
            groups[key] = str(expected[key]["group"])
    return {"expected": values, "groups": groups} if values else {}


def learned_file_action(learned: Dict[str, Any], seen: int, inventory_peers: int) -> str:
    """What to do with a host's learned-expectation file on the controller: ``write`` what was learned; ``delete``
    where nothing was, and either this run saw enough of the host's group to learn (a tie, or every key declared)
    or its inventory groups are too small to ever learn; else ``keep`` it (a ``--limit`` run, or peers that failed:
    the run cannot tell)."""
    if learned:
        return "write"
    if seen >= MIN_GROUP or inventory_peers < MIN_GROUP:
        return "delete"
    return "keep"


def _actual(key: str, value: Optional[str]) -> Any:
    """The node's value as inventory.findings shows it: per-device lists as text, counts as numbers."""
    if value is None:
        return "none"
    if key not in PER_DEVICE_KEYS and inventory_mod.KEYS[key][0] == "int" and value.isdigit():
        return int(value)
    return value


def learned_finding(outlier: Dict[str, Any]) -> Dict[str, Any]:
    """The node's ``inventory.<key>`` drift finding for an outlier with a ``finding`` (:func:`host_outliers`)."""
    key = outlier["key"]
    hosts = list(outlier.get("majority_hosts") or [])
    more = outlier["majority_nodes"] - len(hosts)
    holders = ", ".join(hosts) + (" and %d more" % more if more > 0 else "")
    remedy = ("learned from the majority of group %s: %d of its %d nodes have %s (%s), nothing is declared "
              "(declare %s.%s to set it); %s"
              % (outlier["group"], outlier["majority_nodes"], outlier["group_nodes"], outlier["majority"], holders,
                 inventory_mod.VARIABLE, key, inventory_mod.REMEDIES[key]))
    return Finding("inventory." + key, "node", learnable(key, outlier["majority"]), _actual(key, outlier["value"]),
                   DRIFT, severity="high", remedy=remedy, source=SOURCE).to_dict()


def learned_findings(outliers: List[Dict[str, Any]]) -> Dict[str, List[Dict[str, Any]]]:
    """Host -> its learned drift findings, from the outliers that have one."""
    out: Dict[str, List[Dict[str, Any]]] = {}
    for outlier in outliers:
        if outlier.get("finding"):
            out.setdefault(outlier["node"], []).append(learned_finding(outlier))
    return out


def with_learned(report: Dict[str, Any], findings: List[Dict[str, Any]]) -> Dict[str, Any]:
    """A node's report (or verify result: ``findings`` and ``summary``) with its learned findings in place of any
    it had, and its summary counted again, so that its verdict (drift, drift_ids) says what the fleet found."""
    kept = [f for f in report.get("findings") or [] if not (isinstance(f, dict) and f.get("source") == SOURCE)]
    merged = kept + list(findings)
    counts = dict((status, 0) for status in STATUSES)
    for finding in merged:
        status = finding.get("status") if isinstance(finding, dict) else None
        if status in counts:
            counts[status] += 1
    drift_ids = sorted(set(str(f.get("id")) for f in merged if isinstance(f, dict) and f.get("status") == DRIFT))
    out = dict(report)
    out["findings"] = merged
    out["summary"] = dict(report.get("summary") or {}, counts=counts, drift=counts[DRIFT] > 0, drift_ids=drift_ids)
    return out


def add_to_digest(digest: Dict[str, Any], findings: List[Dict[str, Any]]) -> None:
    """A host's fleet digest (report.node_digest) with its learned findings: one more group per id, in the totals,
    so that the fleet summary and JUnit count the node as drifted with that id."""
    if not findings or digest.get("outcome") != "ok":
        return
    digest["groups"] = list(digest["groups"]) + group_findings(findings)
    totals = dict(digest["totals"])
    for finding in findings:
        totals[finding["status"]] = totals.get(finding["status"], 0) + 1
    digest["totals"] = totals


def summary_lines(outliers: List[Dict[str, Any]], limit: int = 10) -> List[str]:
    """Lines for the fleet summary's text: one per outlier, the first ``limit``."""
    if not outliers:
        return []
    lines = ["outliers (differ from their group's majority): %d" % len(outliers)]
    for o in outliers[:limit]:
        lines.append("  %s %s: %s, group %s has %s (%d of %d nodes)"
                     % (o["node"], o["key"], o["value"], o["group"], o["majority"], o["majority_nodes"],
                        o["group_nodes"]))
    if len(outliers) > limit:
        lines.append("  ... (+%d more in summary.json)" % (len(outliers) - limit))
    return lines


def junit_suite(outliers: List[Dict[str, Any]]) -> str:
    """One testsuite: a failing testcase per outlier (classname the node, name ``outlier.<key>``)."""
    cases = []
    for o in outliers:
        message = "%s is %s, group %s has %s (%d of %d nodes)" % (
            o["key"], o["value"], o["group"], o["majority"], o["majority_nodes"], o["group_nodes"])
        cases.append('    <testcase classname=%s name=%s><failure message=%s type="outlier"/></testcase>\n'
                     % (quoteattr(o["node"]), quoteattr("outlier." + o["key"]), quoteattr(message)))
    return '  <testsuite name=%s tests="%d" failures="%d">\n%s  </testsuite>\n' % (
        quoteattr(SUITE), len(outliers), len(outliers), "".join(cases))


def add_to_junit(xml: str, outliers: List[Dict[str, Any]]) -> str:
    """The fleet JUnit XML with the outliers' testsuite before its closing ``</testsuites>``."""
    if not outliers:
        return xml
    end = xml.rfind("</testsuites>")
    if end < 0:
        return xml
    return xml[:end] + junit_suite(outliers) + xml[end:]
