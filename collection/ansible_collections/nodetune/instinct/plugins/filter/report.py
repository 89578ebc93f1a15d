# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Jinja2 filters for verify reports on the controller: collect the fleet's results, JUnit XML, fleet summary,
Prometheus text, and the fleet reports in one call.

Thin wrappers over module_utils/audit/report.py (the verify module uses the same code on the nodes), documented in the
YAML file of each filter's name next to this one (``ansible-doc -t filter nodetune.instinct.<name>``).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from ansible.errors import AnsibleFilterError

from ansible_collections.nodetune.instinct.plugins.module_utils.audit import outliers as _outliers
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import report as _report
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import transport
from ansible_collections.nodetune.instinct.plugins.plugin_utils.bounded_result import restored

DEFAULT_VAR = "nodetune_verify_result"


def _plain(value: Any) -> Any:
    """Plain dicts/lists/scalars (hostvars hand out lazy, tagged containers)."""
    if isinstance(value, Mapping):
        return dict((str(k), _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _results(value: Any, name: str) -> Dict[str, Any]:
    if not isinstance(value, Mapping):
        raise AnsibleFilterError("%s: expected a mapping of host name to verify result (see "
                                 "nodetune.instinct.nodetune_verify_results), got %s" % (name, type(value).__name__))
    return dict((str(host), _plain(result)) for host, result in value.items())


def nodetune_verify_results(hostvars: Any, hosts: List[str], var: str = DEFAULT_VAR) -> Dict[str, Any]:
    """``{host: registered verify result or None}`` for ``hosts``, from ``hostvars``."""
    return dict(iter_verify_results(hostvars, hosts, var))


def iter_verify_results(hostvars: Any, hosts: List[str], var: str = DEFAULT_VAR, detail: bool = True
                        ) -> Iterator[Tuple[str, Any]]:
    """``(host, registered verify result or None)`` for each of ``hosts``, one at a time, the findings decoded as
    each is reached. The fleet reports digest a result and drop it before the next: decoded, the findings of a
    full-size MI300X node are about 1 MB, too much to hold for a fleet of thousands. ``detail=False``: the results
    as registered, bounded (bounded_result.py), their detail left in the files."""
    if isinstance(hosts, str) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("nodetune_verify_results: hosts must be a list of host names (for example "
                                 "ansible_play_hosts_all), got %r" % (hosts,))
    for host in hosts:
        result = _raw_result(hostvars, host, var)
        if result is _TEMPLATED:
            try:
                host_vars = hostvars[host]
            except KeyError:
                yield str(host), None
                continue
            name, _dot, inner = var.partition(".")
            result = _nested(host_vars.get(name), inner) if hasattr(host_vars, "get") else None
            result = _plain(result) if result is not None else None
        # else: stored data, plain already: never mutated here, so not copied
        # a bounded result keeps its findings (and a tune result its changes) in the run's files
        yield str(host), _with_findings(restored(result)) if detail else result


def fleet_digests(hostvars: Any, hosts: List[str], var: str = DEFAULT_VAR
                  ) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """The hosts' digests (report.node_digest, sorted by host) and their facts for the outliers
    (outliers.host_facts), reading one host's result at a time."""
    digests, facts = [], {}  # type: List[Dict[str, Any]], Dict[str, Any]
    seen = set()
    for host, result in iter_verify_results(hostvars, hosts, var):
        if host in seen:  # a host named twice is one host, as in nodetune_verify_results' mapping
            continue
        seen.add(host)
        digests.append(_report.node_digest(host, result))
        found = _outliers.host_facts(result)
        if found is not None:
            facts[host] = found
    digests.sort(key=lambda digest: digest["host"])
    return digests, facts


def _with_findings(result: Any) -> Any:
    """A result whose findings are one JSON text (the tune module's audit, as site.yml registers it without a report
    file) as the same result with the list, in ``findings`` and in ``report`` (transport.expanded: a new dict)."""
    try:
        return transport.expanded(result)
    except transport.TransportError as exc:
        raise AnsibleFilterError("nodetune_verify_results: %s" % exc) from None


_TEMPLATED = object()


def _raw_result(hostvars: Any, host: str, var: str) -> Any:
    """The registered result as stored, or _TEMPLATED where it must go through templating.

    A registered result is data, never a template, so reading it untemplated (``HostVars.raw_get``) gives the same
    values; templating it through ``hostvars[host]`` wraps every nested value lazily, which costs more than the
    digest itself for a 1,700-finding verify result (docs/benchmarks.md), seconds per fleet report. A value that is
    a string (a variable set to a template by hand) still takes the templating path.
    """
    raw_get = getattr(hostvars, "raw_get", None)
    if raw_get is None:
        return _TEMPLATED
    try:
        host_vars = raw_get(host)
    except KeyError:
        return _TEMPLATED
    if not isinstance(host_vars, Mapping):
        return None  # an undefined host (hostvars hands out an undefined marker)
    name, _dot, inner = var.partition(".")
    result = host_vars.get(name)
    if isinstance(result, str):
        return _TEMPLATED
    return _nested(result, inner)


def _nested(result: Any, path: str) -> Any:
    """``tune_result.verify``: the audit inside the tune result. A task result without it (the tune failed, was
    skipped or the host was unreachable) is returned whole, so the host is reported with that task's message."""
    for key in path.split(".") if path else []:
        if not isinstance(result, Mapping):
            return None
        if key not in result:
            failed = result.get("failed") or result.get("unreachable") or result.get("skipped")
            return result if failed else None
        result = result[key]
    return result


def nodetune_fleet_reports(hostvars: Any, hosts: List[str], var: str = DEFAULT_VAR,
                           suite_name: str = "nodetune verify", top: int = 10, junit: bool = True) -> Dict[str, Any]:
    """``{"summary": fleet summary, "junit": JUnit XML text or None}`` straight from ``hostvars``.

    The same reports as ``nodetune_verify_results`` piped into ``nodetune_junit`` and ``nodetune_fleet_summary``,
    in one call: since ansible-core 2.19 a filter's output reaches the next filter as a lazy container whose every
    nested value is templated on access, so piping a fleet's findings (1,700 per MI300X node) through two filters
    costs more than the digest itself, while this hands them over only as the finished text and a small summary.
    """
    digests = fleet_digests(hostvars, hosts, var)[0]
    return {"summary": _report.fleet_summary({}, top=int(top), digests=digests),
            "junit": _report.junit_xml({}, suite_name=suite_name, digests=digests) if junit else None}


def nodetune_junit(results: Any, suite_name: str = "nodetune verify") -> str:
    return _report.junit_xml(_results(results, "nodetune_junit"), suite_name=suite_name)


def nodetune_fleet_summary(results: Any, top: int = 10) -> Dict[str, Any]:
    return _report.fleet_summary(_results(results, "nodetune_fleet_summary"), top=int(top))


def nodetune_prometheus(findings: Any, timestamp: Optional[float] = None) -> str:
    if isinstance(findings, Mapping):
        findings = findings.get("findings")
    if not isinstance(findings, (list, tuple)):
        raise AnsibleFilterError("nodetune_prometheus: expected a list of findings or a verify result/report, got %s"
                                 % type(findings).__name__)
    return _report.prometheus_text(_plain(findings), timestamp=timestamp)


def nodetune_apply_summary(hostvars: Any, hosts: List[str], var: str = "tune_result", top: int = 0,
                           title: str = "nodetune apply") -> Dict[str, Any]:
    """The fleet's tune results summarised, read straight from ``hostvars`` (as stored, where ansible-core
    allows), bounded as registered: the counts per Setting id are in them (``changed_ids``), the changes are not read
    back from their files."""
    return _report.apply_summary(dict(iter_verify_results(hostvars, hosts, var, detail=False)),
                                 top=int(top) or None, title=str(title))


def nodetune_detail(result: Any) -> Any:
    """A registered tune or verify result with the detail the run keeps in the node's files put back (the findings and
    the report, the changes; bounded_result.restored), the findings as one list. A result that moved nothing out is
    returned as it is (its findings decoded)."""
    if not isinstance(result, Mapping):
        raise AnsibleFilterError("nodetune_detail: expected a registered nodetune.instinct.tune or verify result, got "
                                 "%s" % type(result).__name__)
    out = _with_findings(restored(_plain(result)))
    if isinstance(out.get("verify"), Mapping):
        out = dict(out, verify=_with_findings(restored(out["verify"])))
    return out


class FilterModule(object):
    """nodetune.instinct verify report filters."""

    def filters(self) -> Dict[str, Any]:
        return {
            "nodetune_verify_results": nodetune_verify_results,
            "nodetune_junit": nodetune_junit,
            "nodetune_fleet_summary": nodetune_fleet_summary,
            "nodetune_prometheus": nodetune_prometheus,
            "nodetune_fleet_reports": nodetune_fleet_reports,
            "nodetune_apply_summary": nodetune_apply_summary,
            "nodetune_detail": nodetune_detail,
        }
