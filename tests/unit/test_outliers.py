"""Fleet outliers (issue 15): nodes that differ from their group's majority, from the nodes' verify reports.

The facts are those a simulated MI300X node really yields (node_check.read_facts on a lab-spec tree), copied per
node and changed the way a fleet drifts: a GPU fewer, another kernel, an HCA firmware update on some nodes.
"""

from __future__ import annotations

import copy
from pathlib import Path
from xml.etree import ElementTree

import pytest
from ansible_collections.nodetune.instinct.plugins.action.fleet_report import host_groups
from ansible_collections.nodetune.instinct.plugins.module_utils import node_check, outliers, report
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.unit.test_verify_module import SPEC


@pytest.fixture(scope="module")
def facts(tmp_path_factory: pytest.TempPathFactory) -> dict:
    dest: Path = tmp_path_factory.mktemp("outliers") / "node"
    simnode.build(SPEC, str(dest))
    return node_check.read_facts(str(dest))


def result(host: str, facts: dict, declared: tuple = ()) -> dict:
    findings = [{"id": "inventory." + key, "target": "node", "expected": "x", "actual": "x", "status": "ok",
                 "severity": "high", "remedy": "", "source": "inventory", "waiver": None} for key in declared]
    summary = {"counts": {"ok": len(findings)}, "drift": False, "drift_ids": []}
    node = report.node_report(host, findings, summary, timestamp=1.0, extra={"inventory": facts})
    return {"changed": False, "drift": False, "findings": findings, "summary": summary, "report": node}


def fleet(facts: dict, count: int = 5) -> dict:
    return {f"n{i}": copy.deepcopy(facts) for i in range(1, count + 1)}


def test_a_node_with_a_gpu_fewer_and_another_kernel_is_an_outlier(facts: dict) -> None:
    nodes = fleet(facts)
    nodes["n3"]["gpu_count"] = 1
    nodes["n3"]["versions"]["kernel"] = "6.8.0-31-generic"
    results = {host: result(host, f) for host, f in nodes.items()}
    found = outliers.fleet_outliers(results, {host: ["mi300x"] for host in nodes})
    assert [(o["node"], o["key"], o["value"], o["majority"], o["majority_nodes"], o["group_nodes"]) for o in found] == [
        ("n3", "gpu_count", "1", "2", 4, 5),
        ("n3", "versions.kernel", "6.8.0-31-generic", facts["versions"]["kernel"], 4, 5)]
    lines = outliers.summary_lines(found)
    assert lines[0] == "outliers (differ from their group's majority): 2"
    assert lines[1] == "  n3 gpu_count: 1, group mi300x has 2 (4 of 5 nodes)"


def test_a_declared_key_is_left_to_its_finding(facts: dict) -> None:
    nodes = fleet(facts)
    nodes["n3"]["gpu_count"] = 1
    results = {host: result(host, f, declared=("gpu_count",)) for host, f in nodes.items()}
    assert outliers.fleet_outliers(results, {host: ["mi300x"] for host in nodes}) == []


def test_no_majority_and_small_groups_give_no_outlier(facts: dict) -> None:
    nodes = fleet(facts, 4)
    for host in ("n1", "n2"):
        nodes[host]["versions"]["hca_fw"] = "28.41.1000"  # a rolling firmware update: half done, no majority
    results = {host: result(host, f) for host, f in nodes.items()}
    assert outliers.fleet_outliers(results, {host: ["mi300x"] for host in nodes}) == []
    pair = {h: results[h] for h in ("n1", "n3")}
    assert outliers.fleet_outliers(pair, {"n1": ["g"], "n3": ["g"]}) == []


def test_peers_are_the_biggest_group_a_node_is_in(facts: dict) -> None:
    nodes = fleet(facts, 6)
    nodes["n6"]["hca_rate"] = [200, 400]
    results = {host: result(host, f) for host, f in nodes.items()}
    groups = {host: ["mi300x", "rack1" if host in ("n1", "n2", "n6") else "rack2"] for host in nodes}
    found = outliers.fleet_outliers(results, groups)
    assert [(o["node"], o["group"], o["key"], o["value"], o["majority"]) for o in found] == [
        ("n6", "mi300x", "hca_rate", "200,400", "400")]
    assert outliers.peer_groups({"a": ["all", "ungrouped"], "b": ["all", "gpu"]}) == {"all": ["a"], "gpu": ["b"]}


def test_failed_nodes_have_no_facts_and_are_skipped(facts: dict) -> None:
    nodes = fleet(facts, 3)
    results = {host: result(host, f) for host, f in nodes.items()}
    results["n4"] = {"failed": True, "msg": "unreachable"}
    results["n5"] = {"unreachable": True}
    assert outliers.fleet_outliers(results, {h: ["g"] for h in results}) == []


def test_the_outliers_are_a_testsuite_of_the_fleet_junit(facts: dict) -> None:
    nodes = fleet(facts)
    nodes["n2"]["compute_partition"] = ["CPX"]
    results = {host: result(host, f) for host, f in nodes.items()}
    found = outliers.fleet_outliers(results, {host: ["mi300x"] for host in nodes})
    xml = outliers.add_to_junit(report.junit_xml(results), found)
    suites = ElementTree.fromstring(xml.split("\n", 1)[1])
    suite = [s for s in suites if s.get("name") == "nodetune.outliers"]
    assert len(suite) == 1 and suite[0].get("failures") == "1"
    case = suite[0][0]
    assert (case.get("classname"), case.get("name")) == ("n2", "outlier.compute_partition")
    assert case[0].get("message") == "compute_partition is CPX, group mi300x has SPX (4 of 5 nodes)"
    assert outliers.add_to_junit(xml, []) == xml


def test_the_fleet_report_action_takes_the_peers_from_the_inventory_groups() -> None:
    groups = {"all": ["a", "b", "c"], "ungrouped": ["c"], "mi300x": ["a", "b"], "rack1": ["a"]}
    assert host_groups(groups, ["a", "b", "c"]) == {"a": ["all", "mi300x", "rack1"], "b": ["all", "mi300x"],
                                                     "c": ["all", "ungrouped"]}


def test_the_picture_fleet_page_has_an_outliers_table(facts: dict) -> None:
    from types import SimpleNamespace

    from nodetune import picture

    nodes = fleet(facts, 4)
    nodes["n4"]["versions"]["amdgpu"] = "6.10.5<b>"
    run = SimpleNamespace(nodes={h: SimpleNamespace(host=h, report=result(h, f)["report"]) for h, f in nodes.items()})
    found = picture.outlier_records(run)
    assert [(o["node"], o["key"], o["group"]) for o in found] == [("n4", "versions.amdgpu", "all")]
    html = picture.fleet_page([], None, outliers=found)
    assert 'id="outliers"' in html and "<td>n4</td>" in html and "6.10.5&lt;b&gt;" in html
    assert "No node differs" in picture.outliers_section([])
