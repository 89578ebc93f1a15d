# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Fleet outliers: nodes whose hardware or versions differ from the majority of their group.

Computed on the controller from every node's verify report (``report.inventory``: the facts node_check.read_facts
reads, see inventory.py). A node's peers are the hosts of each inventory group it belongs to (``all`` and
``ungrouped`` only where a host is in no other group); in a group of at least :data:`MIN_GROUP` nodes with facts, a
value held by more than half of them is the group's expectation, and a node with another value is an outlier.
A key the node declares in ``nodetune_inventory_expected`` is left to its ``inventory.<key>`` finding: the
declaration, not the majority, is the expectation there.

The result goes into the fleet summary (``outliers``, and lines of its text) and into the JUnit XML as one more
testsuite, ``nodetune.outliers`` (one failing testcase per outlier).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple
from xml.sax.saxutils import quoteattr

MIN_GROUP = 3
# What is compared: the inventory keys, then versions ("versions.kernel"...).
VERSION_KEYS = ("kernel", "amdgpu", "rocm", "gpu_vbios", "hca_fw")
SUITE = "nodetune.outliers"
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
    return [str(f.get("id"))[len("inventory."):] for f in report.get("findings") or []
            if str(f.get("id", "")).startswith("inventory.")]


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


def outliers_of(known: Dict[str, HostFacts], groups: Dict[str, List[str]]) -> List[Dict[str, Any]]:
    """:func:`fleet_outliers` from each host's :func:`host_facts`."""
    facts = dict((host, found[0]) for host, found in known.items())
    declared = dict((host, found[1]) for host, found in known.items())
    found: Dict[Tuple[str, str], Dict[str, Any]] = {}
    by_size = sorted(peer_groups(dict((h, groups.get(h) or []) for h in facts)).items(),
                     key=lambda item: (-len(item[1]), item[0]))
    for group, hosts in by_size:
        if len(hosts) < MIN_GROUP:
            continue
        keys = sorted(set(key for host in hosts for key in facts[host]))
        for key in keys:
            majority = _majority([facts[host].get(key) for host in hosts])
            if majority is None:
                continue
            value, count = majority
            for host in hosts:
                actual = facts[host].get(key)
                if actual == value or key in declared[host] or (host, key) in found:
                    continue
                found[(host, key)] = {"node": host, "group": group, "key": key, "value": actual,
                                      "majority": value, "majority_nodes": count, "group_nodes": len(hosts)}
    return sorted(found.values(), key=lambda o: (o["node"], o["key"]))


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
