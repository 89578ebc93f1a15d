"""The cheap paths a fleet-scale verify run takes, checked against the plain ones they replace.

- ``nodetune_verify_results`` reads registered results untemplated (``HostVars.raw_get``) and
  ``nodetune_fleet_reports`` renders the JUnit XML and the summary in one call: the same reports as the filters
  piped one into another;
- the verify action plugin turns the module's JSON text of findings back into one list, in ``findings`` and in
  ``report`` (key order as the module builds it), and writes the node's report as the same JSON the role's
  ``to_nice_json(sort_keys=false)`` wrote, a line per top-level key and per finding.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible.plugins.filter.core import to_nice_json
from ansible_collections.nodetune.instinct.plugins.action import verify as action
from ansible_collections.nodetune.instinct.plugins.filter import report as filters
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import report


def finding(check: str, target: str, status: str) -> dict[str, Any]:
    return {"id": check, "target": target, "expected": "1", "actual": "1" if status == "ok" else "0",
            "status": status, "severity": "high", "remedy": "", "source": "setting", "waiver": None}


def result(*findings: dict[str, Any]) -> dict[str, Any]:
    items = list(findings)
    summary = {"counts": {"ok": sum(f["status"] == "ok" for f in items)}, "drift": any(
        f["status"] == "drift" for f in items), "drift_ids": sorted({f["id"] for f in items if f["status"] == "drift"})}
    node = report.node_report("n", items, summary, timestamp=1.0, extra={"platform": {}, "notes": []})
    return {"changed": False, "drift": summary["drift"], "findings": items, "summary": summary, "report": node}


FLEET = {
    "a": result(finding("cpu.governor", "cpu0", "ok"), finding("nvme.scheduler", "nvme0n1", "drift")),
    "b": result(finding("cpu.governor", "cpu0", "ok")),
    "c": {"failed": True, "msg": "boom"},
}


class FakeHostVars(dict):
    """What ansible-core hands a filter as ``hostvars``: templated items, and ``raw_get`` for stored values."""

    def __init__(self, stored: dict[str, dict[str, Any]]) -> None:
        super().__init__({host: {"templated": True, **values} for host, values in stored.items()})
        self.stored = stored
        self.raw_reads: list[str] = []

    def raw_get(self, host: str) -> Any:
        self.raw_reads.append(host)
        if host not in self.stored:
            return object()  # ansible-core's undefined marker for an unknown host: not a mapping
        return self.stored[host]


def test_registered_results_are_read_untemplated_where_hostvars_can() -> None:
    stored = {host: {"nodetune_verify_result": value} for host, value in FLEET.items()}
    stored["d"] = {"other": 1}
    hostvars = FakeHostVars(stored)
    collected = filters.nodetune_verify_results(hostvars, ["a", "b", "c", "d", "unknown"])
    assert hostvars.raw_reads == ["a", "b", "c", "d", "unknown"]
    assert collected == {**FLEET, "d": None, "unknown": None}


def test_a_result_set_to_a_template_still_goes_through_templating() -> None:
    stored = {"a": {"nodetune_verify_result": "{{ something }}"}}
    hostvars = FakeHostVars(stored)
    dict.__setitem__(hostvars, "a", {"nodetune_verify_result": FLEET["b"]})  # what templating gives
    assert filters.nodetune_verify_results(hostvars, ["a"]) == {"a": FLEET["b"]}


@pytest.mark.parametrize("raw", [True, False])
def test_fleet_reports_in_one_call_equal_the_piped_filters(raw: bool) -> None:
    stored = {host: {"nodetune_verify_result": value} for host, value in FLEET.items()}
    hostvars: Any = FakeHostVars(stored) if raw else stored
    hosts = ["a", "b", "c"]
    piped = filters.nodetune_verify_results(hostvars, hosts)
    reports = filters.nodetune_fleet_reports(hostvars, hosts, top=1)
    assert reports["junit"] == filters.nodetune_junit(piped)
    assert reports["summary"] == filters.nodetune_fleet_summary(piped, 1)
    assert reports["summary"]["counts"] == {"clean": 1, "drifted": 1, "pending": 0, "failed": 1}
    assert filters.nodetune_fleet_reports(hostvars, hosts, junit=False)["junit"] is None
    assert "nodetune_fleet_reports" in filters.FilterModule().filters()


def test_the_action_puts_the_findings_back_as_one_shared_list() -> None:
    full = FLEET["a"]
    compact = dict(full, findings=json.dumps(full["findings"]),
                   report={k: v for k, v in full["report"].items() if k != "findings"})
    action.expand_findings(compact)
    assert compact["findings"] == full["findings"]
    assert compact["report"] == full["report"]
    assert list(compact["report"]) == list(full["report"])  # findings right after summary, as the module orders
    assert compact["report"]["findings"] is compact["findings"]
    failed = {"failed": True, "msg": "boom"}
    action.expand_findings(failed)
    assert failed == {"failed": True, "msg": "boom"}


def test_the_action_writes_the_report_as_the_role_did(tmp_path: Path) -> None:
    node_report = dict(FLEET["a"]["report"], notes=["caf\u00e9 \u2713"])
    path = tmp_path / "reports" / "nodes" / "a.json"
    action.write_report(str(path), node_report)
    text = path.read_text()
    assert json.loads(text) == json.loads(to_nice_json(node_report, sort_keys=False)) == node_report
    assert list(json.loads(text)) == list(node_report)  # the module's key order
    assert "caf\u00e9 \u2713" in text  # as to_nice_json: not escaped
    lines = text.splitlines()
    findings = node_report["findings"]
    assert len(findings) > 1 and len(lines) == 2 + len(node_report) + 1 + len(findings)  # a line per finding
    for item in findings:
        assert sum(json.dumps(item["target"]) in line for line in lines) == 1
    assert path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["a.json"]  # no temporary file left


def compact(full: dict[str, Any]) -> dict[str, Any]:
    """A verify result as the tune action registers it: the findings as one JSON text, the report without them."""
    return dict(full, findings=json.dumps(full["findings"]),
                report={k: v for k, v in full["report"].items() if k != "findings"})


def test_fleet_digests_read_one_host_at_a_time_and_equal_the_whole_fleet_path() -> None:
    """The fleet report digests each host's result and drops its decoded findings before the next: its peak memory
    stays near one host's findings, where decoding the whole fleet first grew by about 1 MB per MI300X node."""
    import tracemalloc

    from ansible_collections.nodetune.instinct.plugins.module_utils.audit import outliers

    many = [finding("cpu.governor", f"cpu{n}", "ok") for n in range(1500)] + [
        finding("nvme.scheduler", "nvme0n1", "drift")]
    node = result(*many)
    node["report"]["inventory"] = {"gpu_count": 8, "versions": {"kernel": "6.8"}}
    hosts = [f"n{n:02d}" for n in range(30)]
    stored = {host: {"tune_result": {"verify": compact(node)}} for host in hosts}
    stored["n07"] = {"tune_result": {"failed": True, "msg": "boom"}}
    hostvars = FakeHostVars(stored)
    tracemalloc.start()
    try:
        one = json.loads(stored["n00"]["tune_result"]["verify"]["findings"])
        one_host = tracemalloc.get_traced_memory()[0]
        del one
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        digests, facts = filters.fleet_digests(hostvars, list(reversed(hosts)) + ["n03"], "tune_result.verify")
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    assert peak < 4 * one_host, (peak, one_host)  # the whole fleet decoded at once: about 30 hosts' worth
    whole = filters.nodetune_verify_results(hostvars, hosts, "tune_result.verify")
    assert digests == report.digest_results(whole)  # sorted by host, the repeated n03 counted once
    groups = {host: ["mi300x"] for host in hosts}
    assert outliers.outliers_of(facts, groups) == outliers.fleet_outliers(whole, groups)
    assert sorted(facts) == [h for h in hosts if h != "n07"]
