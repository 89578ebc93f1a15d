"""Fleet reports from report files (issue 28 item 2): any number of runs, slices or controllers, the newest report of
each node winning, one node's findings in memory at a time.

The node reports are those a verify writes (report.node_report with the facts a simulated MI300X node really yields,
node_check.read_facts), with what the controller adds to them (plugin_utils/fleet_reports.report_context: the run
and the host's inventory groups with their sizes).
"""

from __future__ import annotations

import copy
import json
import weakref
from pathlib import Path
from xml.etree import ElementTree

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import outliers, report
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_check
from ansible_collections.nodetune.instinct.plugins.plugin_utils import fleet_reports as fleet
from ansible_collections.nodetune.instinct.plugins.plugin_utils import report_files
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

import nodetune
from nodetune.cli import main
from tests.support.specs import AUDIT_SPEC as SPEC


@pytest.fixture(scope="module")
def facts(tmp_path_factory: pytest.TempPathFactory) -> dict:
    dest: Path = tmp_path_factory.mktemp("fleet_facts") / "node"
    simnode.build(SPEC, str(dest))
    return node_check.read_facts(str(dest))


def finding(check: str, target: str, drift: bool = False, source: str = "setting") -> dict:
    return {"id": check, "target": target, "expected": "performance", "actual": "powersave" if drift else "performance",
            "status": "drift" if drift else "ok", "severity": "medium", "remedy": "apply" if drift else "",
            "source": source, "waiver": None}


def node_file(folder: Path, host: str, facts: dict, when: float, run: str = "run-a", drift: bool = False,
              groups: dict | None = None, extra_findings: list | None = None, checks: bool = True) -> Path:
    """A node report as the tune/verify action writes it on the controller (report_files.finish_audit); without
    ``checks`` as an older nodetune wrote it."""
    findings = [finding("cpu.governor", f"cpu{c}", drift and c < 2) for c in range(4)]
    findings += extra_findings or []
    summary = {"drift": drift, "drift_ids": ["cpu.governor"] if drift else []}
    data = report.node_report(host, findings, summary, timestamp=when - 5, extra={"inventory": facts})
    data["run"] = {"id": run, "controller": "controller1", "started": when - 60, "time": when}
    data["groups"] = {"all": 9, "lab": 5} if groups is None else groups
    path = folder / "nodes" / report.report_file_name(host)
    report_files.write_report(str(path), report_files.with_checks(data) if checks else data)
    return path


def failure_file(folder: Path, host: str, when: float, run: str = "run-b", message: str = "unreachable: ssh") -> Path:
    context = {"run": {"id": run, "controller": "controller2", "started": when - 60, "time": when},
               "groups": {"all": 9, "lab": 5}}
    path = folder / "failed" / report.report_file_name(host)
    report_files.write_report(str(path), fleet.failure_record(host, message, context))
    return path


def build(*folders: Path) -> fleet.FleetOutputs:
    return fleet.build(fleet.file_entries(str(f) for f in folders), now=1000.0)


def lab(tmp_path: Path, facts: dict) -> tuple[Path, Path]:
    """Two slices of a 5-node group: n1-n3 in slice a, n4-n5 in slice b; n5 has a GPU fewer."""
    a, b = tmp_path / "slice-a", tmp_path / "slice-b"
    lost = copy.deepcopy(facts)
    lost["gpu_count"] = facts["gpu_count"] - 1
    for host in ("n1", "n2", "n3"):
        node_file(a, host, facts, 100.0, run="run-a")
    node_file(b, "n4", facts, 110.0, run="run-b", drift=True)
    node_file(b, "n5", lost, 110.0, run="run-b")
    return a, b


def test_slices_give_the_reports_of_one_folder(tmp_path: Path, facts: dict) -> None:
    a, b = lab(tmp_path, facts)
    sliced = build(a, b)
    whole = tmp_path / "whole"
    for folder in (a, b):
        for path in (folder / "nodes").iterdir():
            (whole / "nodes").mkdir(parents=True, exist_ok=True)
            (whole / "nodes" / path.name).write_bytes(path.read_bytes())
    one = build(whole)
    assert sliced.junit == one.junit and sliced.prometheus == one.prometheus
    assert sliced.learned == one.learned and sliced.outliers == one.outliers
    drop = ("sources", "text")
    assert {k: v for k, v in sliced.summary.items() if k not in drop} == {
        k: v for k, v in one.summary.items() if k not in drop}
    summary = sliced.summary
    assert summary["counts"] == {"clean": 3, "drifted": 2, "pending": 0, "failed": 0}
    assert summary["drifted"] == {"n4": ["cpu.governor"], "n5": ["inventory.gpu_count"]}
    # the majority of the whole group (4 of 5), though slice b alone has no majority
    assert [(o["node"], o["key"], o["majority_nodes"], o["group_nodes"]) for o in sliced.outliers] == [
        ("n5", "gpu_count", 4, 5)]
    assert sliced.learned["n5"][0]["source"] == "learned"
    # which run and file each node came from, and when
    assert summary["sources"]["n1"]["run"] == "run-a" and summary["sources"]["n4"]["run"] == "run-b"
    assert summary["sources"]["n4"]["time"] == 110.0 and summary["sources"]["n4"]["timestamp"] == 105.0
    assert summary["sources"]["n4"]["file"] == str(b / "nodes" / "n4.json")
    assert [(r["run"], r["nodes"]) for r in summary["runs"]] == [("run-a", 3), ("run-b", 2)]
    assert "reports from 2 runs: run-a (3), run-b (2)" in summary["text"]


def test_the_newest_report_of_a_node_wins_whatever_the_order(tmp_path: Path, facts: dict) -> None:
    old, new = tmp_path / "monday", tmp_path / "tuesday"
    node_file(old, "n1", facts, 100.0, run="monday", drift=True)
    node_file(new, "n1", facts, 200.0, run="tuesday")
    node_file(old, "n2", facts, 100.0, run="monday")
    for order in ((old, new), (new, old)):
        done = build(*order)
        assert done.summary["clean"] == ["n1", "n2"] and done.summary["drifted"] == {}
        assert done.summary["sources"]["n1"]["run"] == "tuesday"
        assert done.summary["sources"]["n1"]["file"] == str(new / "nodes" / "n1.json")
        assert done.summary["nodes"] == 2
    # a tie goes to the folder given last
    node_file(old, "n2", facts, 300.0, run="monday-late", drift=True)
    node_file(new, "n2", facts, 300.0, run="tuesday-same-time")
    assert build(old, new).summary["sources"]["n2"]["run"] == "tuesday-same-time"
    assert build(new, old).summary["sources"]["n2"]["run"] == "monday-late"


def test_a_failure_newer_than_the_last_report_fails_the_node_and_a_newer_report_wins_back(
        tmp_path: Path, facts: dict) -> None:
    first, second, third = tmp_path / "1", tmp_path / "2", tmp_path / "3"
    node_file(first, "n1", facts, 100.0, run="one")
    failure_file(second, "n1", 200.0, run="two", message="unreachable: ssh: No route to host")
    done = build(first, second)
    assert done.summary["failed"] == {"n1": "unreachable: ssh: No route to host"}
    assert done.summary["sources"]["n1"]["run"] == "two"
    suites = ElementTree.fromstring(done.junit.split("\n", 1)[1])
    assert suites.find("testsuite/testcase/error") is not None
    assert 'nodetune_node_verdict{node="n1",status="failed"} 1' in done.prometheus
    node_file(third, "n1", facts, 300.0, run="three")
    assert build(first, second, third).summary["clean"] == ["n1"]


def test_an_unreadable_file_is_named_and_fails_its_node_only(tmp_path: Path, facts: dict,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    a, b = lab(tmp_path, facts)
    node_file(tmp_path / "older", "n2", facts, 50.0, run="older")
    broken = a / "nodes" / "n2.json"
    broken.write_text(broken.read_text()[:200])  # cut short, as an interrupted copy leaves it
    (b / "nodes" / "n6.json").write_text('{"not": "a report"}')
    done = build(tmp_path / "older", a, b)
    failed = done.summary["failed"]
    assert set(failed) == {"n2", "n6"}
    assert failed["n2"].startswith(f"its report {broken} is not valid JSON")
    assert "is not a nodetune node report" in failed["n6"]
    # the node's older readable report is not taken for its newest state: which is newer cannot be told
    assert done.summary["sources"]["n2"]["file"] == str(broken)
    assert [u["file"] for u in done.summary["unreadable"]] == [str(broken), str(b / "nodes" / "n6.json")]
    assert any(line.startswith(f"unreadable report {broken} (node n2 failed)") for line in done.summary["text"])
    assert done.summary["counts"]["clean"] == 2  # n1 and n3: the others are judged as ever
    out = tmp_path / "out"
    assert main(["report", str(tmp_path / "older"), str(a), str(b), "-o", str(out)]) == 1
    assert f"unreadable report {broken} (node n2 failed): is not valid JSON" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "older"), str(a), str(b), "--json"]) == 1
    assert f"unreadable {broken}: is not valid JSON" in capsys.readouterr().err
    assert json.loads((out / "summary.json").read_text())["failed"]["n2"] == failed["n2"]


def test_each_node_takes_the_groups_of_its_newest_report(tmp_path: Path, facts: dict) -> None:
    """The slices disagree (the inventory changed between them): each node's newest report decides its groups,
    and the differing sizes are said."""
    old, new = tmp_path / "old", tmp_path / "new"
    lost = copy.deepcopy(facts)
    lost["gpu_count"] = facts["gpu_count"] - 1
    for host in ("n1", "n2", "n3"):
        node_file(old, host, facts, 100.0, groups={"all": 6, "rack1": 3})
    node_file(old, "n4", lost, 100.0, groups={"all": 6, "rack1": 3})  # rack1 then: n1-n4 in the report files
    for host in ("n4", "n5", "n6"):  # n4 moved to rack2 in the newer inventory
        node_file(new, host, lost if host == "n4" else facts, 200.0, groups={"all": 6, "rack2": 3})
    done = build(old, new)
    assert [(o["node"], o["group"]) for o in done.outliers] == [("n4", "rack2")]
    assert done.outliers[0]["group_nodes"] == 3
    assert done.summary["group_sizes_differ"] == {}
    node_file(new, "n5", facts, 200.0, groups={"all": 7, "rack2": 4})
    done = build(old, new)
    assert done.summary["group_sizes_differ"] == {"all": [6, 7], "rack2": [3, 4]}
    assert any(line.startswith("group rack2: the reports give 3 and 4 hosts") for line in done.summary["text"])


def test_findings_a_slice_learned_from_its_share_are_learned_again_from_the_fleet(tmp_path: Path,
                                                                                  facts: dict) -> None:
    a, b = lab(tmp_path, facts)
    path = a / "nodes" / "n1.json"
    wrong = outliers.learned_finding({"node": "n1", "group": "lab", "key": "gpu_count", "value": "2",
                                      "majority": "1", "majority_nodes": 2, "group_nodes": 3,
                                      "majority_hosts": ["x", "y"]})
    assert report_files.add_learned_to_report(str(path), [wrong])
    done = build(a, b)
    assert "n1" not in done.summary["drifted"] and set(done.learned) == {"n5"}
    # written back where the report folder is the output: the node's own report says what the fleet found
    files, changed = fleet.write_files(str(a), done)
    assert str(path) in changed
    kept = json.loads(path.read_text())
    assert not [f for f in kept["findings"] if f.get("source") == "learned"] and not kept["summary"]["drift"]
    assert sorted(Path(f).name for f in files) == ["fleet.prom", "junit.xml", "summary.json"]
    assert json.loads((a / "learned" / "n5.json").read_text())["expected"]["gpu_count"] == facts["gpu_count"]


def test_one_nodes_findings_in_memory_at_a_time(facts: dict) -> None:
    alive: list[weakref.ref] = []

    class Result(dict):
        pass

    def entries():
        for i in range(6):
            held = sum(1 for ref in alive if ref() is not None)
            assert held == 0, f"{held} node result(s) still held when node {i} is read"
            data = Result(report.node_report(f"n{i}", [finding("cpu.governor", f"cpu{c}") for c in range(50)], {},
                                             timestamp=1.0, extra={"inventory": facts}))
            alive.append(weakref.ref(data))
            yield fleet.Entry(f"n{i}", data, 1.0, {"id": "r"}, {"lab": 6})
            del data

    done = fleet.build(entries())
    assert done.summary["counts"]["clean"] == 6


def test_the_fleet_prometheus_text(tmp_path: Path, facts: dict) -> None:
    a, b = lab(tmp_path, facts)
    failure_file(b, "n6", 120.0)
    text = build(a, b).prometheus
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert 'nodetune_fleet_nodes{status="clean"} 3' in lines and 'nodetune_fleet_nodes{status="failed"} 1' in lines
    assert 'nodetune_fleet_drift_nodes{check="cpu.governor"} 1' in lines
    assert 'nodetune_fleet_drift_targets{check="cpu.governor"} 2' in lines
    assert 'nodetune_fleet_drift_nodes{check="inventory.gpu_count"} 1' in lines
    assert 'nodetune_fleet_outliers{check="outlier.gpu_count"} 1' in lines
    assert 'nodetune_node_report_timestamp_seconds{node="n4"} 105.000' in lines
    assert 'nodetune_node_report_timestamp_seconds{node="n6"} 120.000' in lines
    assert lines[-1] == "nodetune_fleet_report_timestamp_seconds 1000.000"
    labels = {part.split("=")[0] for line in lines if "{" in line for part in line[line.index("{") + 1:
                                                                                   line.index("}")].split(",")}
    assert labels == {"check", "status", "node"}


def test_sources_that_are_no_report_folders_are_refused_before_any_write(tmp_path: Path, facts: dict) -> None:
    a, _b = lab(tmp_path, facts)
    out = tmp_path / "out"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(nodetune.ReportError, match="is not a folder"):
        nodetune.report([a, tmp_path / "missing"], out)
    with pytest.raises(nodetune.ReportError, match=f"{empty} holds no node report"):
        nodetune.report([a, empty], out)
    (tmp_path / "file").write_text("x")
    with pytest.raises(nodetune.ReportError, match="is a file"):
        nodetune.report([a], tmp_path / "file")
    assert not out.exists()


def test_the_api_and_the_cli(tmp_path: Path, facts: dict, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = lab(tmp_path, facts)
    out = tmp_path / "out"
    done = nodetune.report([a, b], out)
    assert sorted(Path(f).name for f in done.files) == ["fleet.html", "fleet.prom", "junit.xml", "summary.json"]
    assert [f.id for f in done.learned_findings["n5"]] == ["inventory.gpu_count"]
    assert done.ok and set(done.drifted) == {"n4", "n5"}
    assert json.loads((out / "summary.json").read_text())["drifted"] == done.summary["drifted"]
    page = (out / "fleet.html").read_text()
    assert 'id="drift"' in page and 'id="outliers"' in page and "<td>n5</td>" in page
    assert main(["report", str(a), str(b)]) == 2
    printed = capsys.readouterr().out
    assert printed.splitlines()[0] == "nodetune verify: 5 node(s): 3 clean, 2 drifted, 0 failed"
    assert main(["report", str(a), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["clean"] == ["n1", "n2", "n3"] and data["ok"]


def test_the_report_file_says_which_run_wrote_it_and_the_hosts_groups(tmp_path: Path) -> None:
    task_vars = {"inventory_hostname": "n2", "groups": {"all": ["n1", "n2", "n3"], "lab": ["n1", "n2"],
                                                        "ungrouped": ["n3"]}}
    context = fleet.report_context(task_vars)
    assert context["groups"] == {"all": 3, "lab": 2}
    assert context["run"]["id"].startswith(context["run"]["controller"] + ":")
    assert fleet.run_identity(dict(task_vars, awx_job_id=42))["id"] == "awx-job-42"
    assert fleet.inventory_peers({"all": 3, "ungrouped": 1}) == 1 and fleet.inventory_peers({"all": 3, "lab": 2}) == 2
    # the controller writes them into the node's report (report_files.finish_audit)
    path = tmp_path / "nodes" / "n2.json"
    audit = {"report": report.node_report("n2", [finding("cpu.governor", "cpu0")], {}, timestamp=5.0)}
    report_files.finish_audit(audit, audit, {"report_file": str(path), "report_extra": context})
    written = json.loads(path.read_text())
    assert written["run"] == context["run"] and written["groups"] == {"all": 3, "lab": 2}
    assert fleet.report_time(written) == context["run"]["time"]


def test_a_report_is_read_from_its_checks_as_from_its_findings(tmp_path: Path, facts: dict) -> None:
    """The controller writes each report's findings grouped per check id (``checks``): a fleet report reads those
    instead of decoding every finding, and gets what decoding them gives; a file whose checks do not count its
    finding lines (edited by hand) is decoded whole."""
    declared = finding("inventory.gpu_count", "node", source="inventory")
    with_checks, without = tmp_path / "with", tmp_path / "without"
    for folder, checks in ((with_checks, True), (without, False)):
        lost = dict(facts, gpu_count=facts["gpu_count"] - 1)
        for host in ("n1", "n2", "n3"):
            node_file(folder, host, facts, 100.0, checks=checks, extra_findings=[declared])
        node_file(folder, "n4", lost, 100.0, drift=True, checks=checks)
        path = folder / "nodes" / "n3.json"
        wrong = outliers.learned_finding({"node": "n3", "group": "lab", "key": "nvme_count", "value": "1",
                                          "majority": "2", "majority_nodes": 2, "group_nodes": 3,
                                          "majority_hosts": ["x"]})
        assert report_files.add_learned_to_report(str(path), [wrong])
    text = (with_checks / "nodes" / "n3.json").read_text()
    assert '"checks": [' in text and "inventory.nvme_count" in text.split('"findings"')[0]  # counted again
    assert fleet._checks_only(text) is not None and fleet._checks_only(
        (without / "nodes" / "n3.json").read_text()) is None
    fast, slow = build(with_checks), build(without)
    assert fast.digests == slow.digests and fast.summary == {**slow.summary, "sources": fast.summary["sources"]}
    assert fast.outliers == slow.outliers and fast.junit == slow.junit and fast.learned == slow.learned
    assert [(o["node"], o["key"]) for o in fast.outliers] == [("n4", "gpu_count")]
    assert "gpu_count" not in fast.expectations["n1"][0].get("expected", {})  # declared: never learned
    assert fast.had_learned == slow.had_learned == {"n3"}
    # a finding line added by hand: the checks no longer count the file's findings, so it is decoded whole
    path = with_checks / "nodes" / "n1.json"
    lines = path.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith('    "findings": ['))
    lines.insert(at + 1, "        " + json.dumps(finding("nvme.scheduler", "nvme0n1", drift=True)) + ",")
    path.write_text("\n".join(lines) + "\n")
    assert fleet._checks_only(path.read_text()) is None
    assert build(with_checks).summary["drifted"]["n1"] == ["nvme.scheduler"]


def test_reports_written_at_once_share_their_new_folder(tmp_path: Path) -> None:
    """The forks of one play write their nodes' reports at the same moment: the folder one of them makes between
    another's look and its own mkdir is no failure (CI saw `[Errno 17] File exists: .../nodes` fail a node)."""
    import threading

    folder = tmp_path / "reports" / "nodes"
    ready = threading.Barrier(8)
    errors: list[BaseException] = []

    def write(host: str) -> None:
        ready.wait()
        try:
            report_files.write_text(str(folder / f"{host}.json"), "{}\n")
        except BaseException as exc:  # noqa: BLE001 - the test reports whatever a writer raised
            errors.append(exc)

    for _round in range(20):
        if folder.exists():
            for child in folder.iterdir():
                child.unlink()
            folder.rmdir()
        threads = [threading.Thread(target=write, args=(f"n{i}",)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        ready.reset()
    assert errors == []
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"n{i}.json" for i in range(8))
