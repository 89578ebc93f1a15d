"""Fleet outliers (issue 15): nodes that differ from their group's majority, from the nodes' verify reports.

The facts are those a simulated MI300X node really yields (node_check.read_facts on a lab-spec tree), copied per
node and changed the way a fleet drifts: a GPU fewer, another kernel, an HCA firmware update on some nodes.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from xml.etree import ElementTree

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import checker_files
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import inventory, outliers, report
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_check
from ansible_collections.nodetune.instinct.plugins.plugin_utils import fleet_reports
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.support.specs import AUDIT_SPEC as SPEC


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


def test_the_fleet_report_takes_the_peers_from_the_inventory_groups() -> None:
    groups = {"all": ["a", "b", "c"], "ungrouped": ["c"], "mi300x": ["a", "b"], "rack1": ["a"], "empty": None}
    every = fleet_reports.groups_of_hosts(groups)
    assert every == {"a": {"all": 3, "mi300x": 2, "rack1": 1}, "b": {"all": 3, "mi300x": 2},
                     "c": {"all": 3, "ungrouped": 1}}
    # the same answer as asking host by host (report_context's way), for hosts in the inventory and not
    for host in ("a", "b", "c", "localhost"):
        assert every.get(host, {}) == fleet_reports.host_groups(groups, host)
    # the entries of a play's results carry them (the run_once fleet report)
    entries = fleet_reports.play_entries([("a", {}), ("c", {}), ("z", {})], groups, {"time": 1.0})
    assert {entry.host: entry.groups for entry in entries} == {"a": every["a"], "c": every["c"], "z": {}}
    # and so do the records of the nodes that failed in the play
    records = fleet_reports.play_failures({"c": "unreachable", "z": "failed"}, groups, {"time": 2.0})
    assert {host: (record["groups"], record["message"]) for host, record in records.items()} == {
        "c": (every["c"], "unreachable"), "z": ({}, "failed")}


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


# ------------------------------------------------------------------------------------------------ learned (issue 24)
# Where no inventory is declared, the group's majority is the expectation: a node that lost a GPU gets the
# inventory.gpu_count drift a declaration would give, in its own verdict, and the next apply writes the expectation
# into nodetune-check's files.
@pytest.fixture(scope="module")
def lost_gpu(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A node of the same spec that lost its second GPU the way a real one does: the PCI device, its KFD node and
    its DRM card are gone (the spec without it)."""
    spec = copy.deepcopy(SPEC)
    del spec["gpus"][1]
    dest: Path = tmp_path_factory.mktemp("outliers_lost") / "node"
    simnode.build(spec, str(dest))
    return dest, node_check.read_facts(str(dest))


def three(facts: dict, lost: dict, declared: tuple = ()) -> tuple[dict, dict]:
    """n1 and n2 as the spec, n3 with a GPU gone; all in group mi300x."""
    results = {"n1": result("n1", facts), "n2": result("n2", facts), "n3": result("n3", lost, declared)}
    return results, {host: ["all", "mi300x"] for host in results}


def learned_of(results: dict, groups: dict) -> dict:
    known = {host: outliers.host_facts(r) for host, r in results.items()}
    return {host: outliers.learned_expectation(expected)
            for host, expected, _seen in outliers.expectations(known, groups)}


def test_a_node_that_lost_a_gpu_gets_the_findings_a_declaration_gives(facts: dict, lost_gpu: tuple) -> None:
    lost = lost_gpu[1]
    results, groups = three(facts, lost)
    found = outliers.fleet_outliers(results, groups)
    learned = outliers.learned_findings(found)
    assert set(learned) == {"n3"}
    # what nodetune_inventory_expected with the group's values would report on n3: the same ids, values, status
    declared = {"gpu_count": facts["gpu_count"], "xgmi_hive_size": facts["xgmi_hive_size"][0]}
    want = [f.to_dict() for f in inventory.findings(declared, lost)]
    keys = ("id", "target", "expected", "actual", "status", "severity")
    assert [tuple(f[k] for k in keys) for f in learned["n3"]] == [tuple(f[k] for k in keys) for f in want]
    assert [f["id"] for f in learned["n3"]] == ["inventory.gpu_count", "inventory.xgmi_hive_size"]
    gpu = learned["n3"][0]
    assert (gpu["expected"], gpu["actual"], gpu["status"], gpu["source"]) == (2, 1, "drift", "learned")
    assert gpu["remedy"].startswith("learned from the majority of group mi300x: 2 of its 3 nodes have 2 (n1, n2)")
    assert "nodetune_inventory_expected.gpu_count" in gpu["remedy"] and "amdgpu" in gpu["remedy"]
    # every node of the group learns the expectation (for its checker), not only the outlier
    expectation = learned_of(results, groups)
    assert expectation["n1"] == expectation["n3"]
    assert expectation["n3"]["expected"]["gpu_count"] == 2 and expectation["n3"]["groups"]["gpu_count"] == "mi300x"
    assert "smt" not in expectation["n3"]["expected"]  # nodetune's smt area changes it (outliers.LEARNED_KEYS)
    assert not any(k.startswith("versions.") for k in expectation["n3"]["expected"])


def test_a_declared_key_wins_over_the_learned_one(facts: dict, lost_gpu: tuple) -> None:
    results, groups = three(facts, lost_gpu[1], declared=("gpu_count",))
    learned = outliers.learned_findings(outliers.fleet_outliers(results, groups))
    assert [f["id"] for f in learned["n3"]] == ["inventory.xgmi_hive_size"]
    expectation = learned_of(results, groups)
    assert "gpu_count" not in expectation["n3"]["expected"] and "gpu_count" in expectation["n1"]["expected"]
    # in the checker's file, a declared value wins over a learned one for the same key
    values, from_group = inventory.validate_learned({"expected": {"gpu_count": 2, "nvme_count": 1},
                                                     "groups": {"gpu_count": "mi300x", "nvme_count": "mi300x"}})
    files = checker_files.check_settings([], {"gpu_count": 1}, None, (values, from_group))
    data = json.loads(next(s.value for s in files if s.target == "inventory"))
    assert data == {"version": 1, "expected": {"gpu_count": 1, "nvme_count": 1}, "learned": {"nvme_count": "mi300x"}}
    # declared only: the file nodetune always wrote, byte for byte
    only = checker_files.check_settings([], {"gpu_count": 1}, None, ({}, {}))
    assert next(s.value for s in only if s.target == "inventory") == json.dumps(
        {"version": 1, "expected": {"gpu_count": 1}}, indent=1, sort_keys=True) + "\n"


def test_a_tie_or_a_small_group_learns_nothing(facts: dict, lost_gpu: tuple) -> None:
    lost = lost_gpu[1]
    results = {"n1": result("n1", facts), "n2": result("n2", facts), "n3": result("n3", lost),
               "n4": result("n4", lost)}
    tie = {host: ["mi300x"] for host in results}
    assert [o for o in outliers.fleet_outliers(results, tie) if o["key"] == "gpu_count"] == []
    assert all("gpu_count" not in e.get("expected", {}) for e in learned_of(results, tie).values())
    pair = {"n1": results["n1"], "n3": results["n3"]}
    assert outliers.learned_findings(outliers.fleet_outliers(pair, {"n1": ["g"], "n3": ["g"]})) == {}
    assert learned_of(pair, {"n1": ["g"], "n3": ["g"]}) == {"n1": {}, "n3": {}}
    # the controller's file: kept where the run saw too little of the group to tell (a --limit run)
    assert outliers.learned_file_action({"expected": {"gpu_count": 2}}, 3, 3) == "write"
    assert outliers.learned_file_action({}, 4, 4) == "delete"  # a tie in a group seen whole
    assert outliers.learned_file_action({}, 2, 2) == "delete"  # a group too small to ever learn
    assert outliers.learned_file_action({}, 1, 40) == "keep"  # --limit: one of a group of 40
    # the inventory's size of a host's biggest peer group, whatever the run's --limit
    inventory_groups = {"all": ["a", "b", "c", "d"], "ungrouped": ["d"], "mi300x": ["a", "b", "c"], "rack1": ["a"]}
    peers = fleet_reports.groups_of_hosts(inventory_groups)
    assert fleet_reports.inventory_peers(peers["a"]) == 3
    assert fleet_reports.inventory_peers(peers["d"]) == 1


def test_the_learned_finding_is_in_the_nodes_report_summary_and_junit(facts: dict, lost_gpu: tuple) -> None:
    results, groups = three(facts, lost_gpu[1])
    learned = outliers.learned_findings(outliers.fleet_outliers(results, groups))
    node = outliers.with_learned(results["n3"]["report"], learned["n3"])
    assert node["summary"]["drift"] and node["summary"]["drift_ids"] == ["inventory.gpu_count",
                                                                         "inventory.xgmi_hive_size"]
    assert node["summary"]["counts"]["drift"] == 2
    assert outliers.with_learned(node, learned["n3"])["findings"] == node["findings"]  # replaced, never doubled
    # a learned finding is no declaration: the majority still decides the key where the API put it in the report
    assert outliers.host_facts({"report": node})[1] == []
    digests = report.digest_results(results)
    for digest in digests:
        outliers.add_to_digest(digest, learned.get(digest["host"]) or [])
    summary = report.fleet_summary({}, digests=digests)
    assert summary["counts"]["drifted"] == 1 and summary["drifted"]["n3"] == ["inventory.gpu_count",
                                                                              "inventory.xgmi_hive_size"]
    suites = ElementTree.fromstring(report.junit_xml({}, digests=digests).split("\n", 1)[1])
    n3 = next(s for s in suites if s.get("name") == "n3")
    case = next(c for c in n3 if c.get("name") == "inventory.gpu_count")
    assert case[0].tag == "failure" and "expected 2, found 1" in case[0].get("message")


def test_a_majority_value_that_is_no_expectation_is_not_learned() -> None:
    assert outliers.learnable("hca_rate", "200,400") is None  # ports that differ among themselves
    assert outliers.learnable("hca_rate", None) is None  # no HCA in the group
    assert outliers.learnable("smt", "on") is None
    assert outliers.learnable("versions.kernel", "6.8.0") is None
    assert outliers.learnable("hca_width", "4X") == "4X" and outliers.learnable("hca_rate", "400") == 400
    # the model name a learned expectation has matches the node it was learned from (one id, two boards)
    assert outliers.learnable("gpu_model", "MI250X/MI250") == "MI250X/MI250"
    assert node_check.compare_inventory({"gpu_model": "MI250X/MI250"}, {"gpu_model": ["MI250X/MI250"]}) == []
    assert node_check.compare_inventory({"gpu_model": "MI250X/MI250"}, {"gpu_model": ["MI300X"]}) != []


def test_the_per_device_keys_are_those_read_facts_lists(facts: dict) -> None:
    assert set(outliers.PER_DEVICE_KEYS) == {k for k, v in facts.items() if isinstance(v, list)}


@pytest.mark.parametrize("learned, words", [
    ({"expected": {"gpu_count": "eight"}, "groups": {"gpu_count": "g"}},
     ["learned_inventory.expected.gpu_count='eight'", "whole number"]),
    ({"expected": {"gpu_count": 8}, "groups": {}}, ["learned_inventory.groups.gpu_count=None", "group"]),
    ({"expected": {"gpus": 8}, "groups": {"gpus": "g"}, "when": 1},
     ["learned_inventory has unknown key 'when'", "learned_inventory.expected has unknown key 'gpus'"]),
    ([8], ["learned_inventory=[8] (list) is not valid"]),
])
def test_a_bad_learned_inventory_is_refused_naming_it(learned: object, words: list) -> None:
    with pytest.raises(inventory.InventoryConfigError) as caught:
        inventory.validate_learned(learned)
    text = "; ".join(caught.value.errors)
    assert all(word in text for word in words), text


def test_the_learned_file_on_the_controller(tmp_path: Path) -> None:
    from ansible_collections.nodetune.instinct.plugins.plugin_utils import report_files

    path = report_files.learned_path(tmp_path, "../n3")
    assert Path(path).parent == tmp_path / "learned" and Path(path).name == "..%2Fn3.json"
    assert report_files.read_learned(path) is None
    learned = {"expected": {"gpu_count": 8}, "groups": {"gpu_count": "mi300x"}}
    assert report_files.keep_learned(path, learned, "write") is True
    assert report_files.keep_learned(path, learned, "write") is False  # the same: not rewritten
    assert report_files.read_learned(path) == learned
    assert report_files.keep_learned(path, {}, "keep") is False and Path(path).exists()
    Path(path).write_text('{"version": 1, "expected": {"gpu_count": "x"}, "groups": {"gpu_count": "g"}}')
    with pytest.raises(ValueError) as caught:
        report_files.read_learned(path)
    assert path in str(caught.value) and "whole number" in str(caught.value) and "remove it" in str(caught.value)
    Path(path).write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        report_files.read_learned(path)
    assert report_files.keep_learned(path, {}, "delete") is True and not Path(path).exists()


@pytest.mark.usefixtures("simulated_kernel")
def test_the_next_apply_writes_the_learned_expectation_and_the_checker_fails(lost_gpu: tuple, facts: dict,
                                                                             tmp_path: Path) -> None:
    import shutil
    import subprocess
    import sys

    from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine, node

    from tests.support.lab_vars import AREAS

    root = tmp_path / "n3"
    shutil.copytree(lost_gpu[0], root, symlinks=True)
    results, groups = three(facts, lost_gpu[1])
    expectation = learned_of(results, groups)["n3"]
    state = node.load(str(root), AREAS, {}, learned_inventory=expectation)
    engine.apply(state.root, state.settings, services=state.services)
    written = json.loads((root / checker_files.CHECK_DIR / "inventory.json").read_text())
    assert written["expected"] == expectation["expected"] and written["learned"]["gpu_count"] == "mi300x"
    done = subprocess.run([sys.executable, "-I", str(root / checker_files.CHECK_SCRIPT), "--root", str(root)],
                          capture_output=True, text=True, check=False, cwd="/")
    assert done.returncode == 1, done.stderr
    assert "inventory.gpu_count node: expected 2, found 1 (learned: the majority of group mi300x)" in \
        done.stdout.splitlines()
    # a second apply with the same expectation changes nothing
    again = node.load(str(root), AREAS, {}, learned_inventory=expectation)
    assert not engine.apply(again.root, again.settings, services=again.services)["changed"]
    with pytest.raises(inventory.InventoryConfigError, match="learned_inventory.expected.gpu_count"):
        node.load(str(root), AREAS, {}, learned_inventory={"expected": {"gpu_count": "x"}, "groups": {}})


def test_the_api_puts_the_fleet_reports_learned_findings_into_the_nodes_verdict(
        facts: dict, lost_gpu: tuple, tmp_path: Path) -> None:
    """The fleet report's result is recorded under the run_once host (n1); n3's own result comes after it."""
    from nodetune.api import _Collector
    from nodetune.callback_plugins.nodetune_results import host_folder

    results, groups = three(facts, lost_gpu[1])
    learned = outliers.learned_findings(outliers.fleet_outliers(results, groups))
    collector = _Collector("verify", None, str(tmp_path / "results"))
    sequence = 0

    def recorded(host: str, action: str, res: dict) -> None:
        nonlocal sequence
        sequence += 1
        folder = Path(host_folder(str(tmp_path / "results"), host))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{sequence:06d}.json").write_text(json.dumps(
            {"host": host, "task": "t", "action": action, "status": "ok", "result": res}))
        collector.handle({"event": "runner_on_ok", "event_data": {"host": host, "task": "t", "task_action": action,
                                                                   "res": {}}}, False)

    recorded("n1", "nodetune.instinct.verify", results["n1"])
    recorded("n1", "nodetune.instinct.fleet_report", {"changed": False, "learned_findings": learned})
    recorded("n2", "nodetune.instinct.verify", results["n2"])
    recorded("n3", "nodetune.instinct.verify", results["n3"])
    run = collector.result(0, check=False)
    assert {host: n.status for host, n in run.nodes.items()} == {"n1": "ok", "n2": "ok", "n3": "drift"}
    n3 = run.nodes["n3"]
    assert [(f.id, f.expected, f.actual, f.source) for f in n3.drift] == [
        ("inventory.gpu_count", 2, 1, "learned"), ("inventory.xgmi_hive_size", 2, "1", "learned")]
    assert n3.summary is not None and n3.summary["drift_ids"] == ["inventory.gpu_count", "inventory.xgmi_hive_size"]
    assert n3.report is not None and [f["id"] for f in n3.report["findings"] if f["status"] == "drift"] == [
        "inventory.gpu_count", "inventory.xgmi_hive_size"]
