"""A rerun whose findings the controller already holds (issue 28): the module leaves them out, the controller writes
the node's new report around the ones in its report file, and that file is the one a whole write gives.

The action plugins give the module the SHA-256 of the findings the node's report file holds (``known_findings``,
report_files.offer_held_report); the module returns ``findings_known`` instead of the text where its findings have
that digest (transport.compact), and finish_audit takes the findings, and their ``checks``, from the held text as
they are (report_files._write_around). Each test writes a report whole, then the next one both ways, and compares.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import report, transport
from ansible_collections.nodetune.instinct.plugins.plugin_utils import bounded_result, report_files
from ansible_collections.nodetune.instinct.plugins.plugin_utils.fleet_reports import file_entries
from hypothesis import given, settings
from hypothesis import strategies as st

TEXT = st.text(max_size=20)  # any Unicode: the report is written with ensure_ascii=False
FINDINGS = st.lists(st.fixed_dictionaries({
    "id": st.sampled_from(["cpu.governor", "irq.nic_local", "nvme.scheduler", "bios.iommu"]),
    "target": TEXT, "expected": st.none() | TEXT | st.integers(), "actual": st.none() | TEXT | st.integers(),
    "status": st.sampled_from(report.STATUSES), "severity": st.sampled_from(["info", "high"]),
    "remedy": TEXT, "source": st.sampled_from(["setting", "bios"]), "waiver": st.none()}), max_size=8)


def finding(check: str, target: str, status: str) -> dict[str, Any]:
    return {"id": check, "target": target, "expected": "1", "actual": "1" if status == "ok" else "0",
            "status": status, "severity": "high", "remedy": "", "source": "setting", "waiver": None}


def module_result(findings: list[dict[str, Any]], when: float, known: str | None = None) -> dict[str, Any]:
    """What the verify module returns with findings_format json (and the controller's digest ``known``)."""
    summary = {"counts": {"ok": sum(f["status"] == "ok" for f in findings)},
               "drift": any(f["status"] == "drift" for f in findings),
               "drift_ids": sorted({f["id"] for f in findings if f["status"] == "drift"})}
    node = report.node_report("n1", findings, summary, timestamp=when,
                              extra={"platform": {"name": "MI300X"}, "notes": ["a note"]})
    whole = {"changed": False, "drift": summary["drift"], "findings": findings, "summary": summary, "report": node}
    return json.loads(json.dumps(transport.compact(whole, findings, "json", known)))


def extra(when: float) -> dict[str, Any]:
    return {"run": {"id": f"run-{when:g}", "time": when}, "groups": {"gpu": 2}}


def write(path: Path, findings: list[dict[str, Any]], when: float, with_extra: bool, held: bool = False,
          fail_on_drift: bool = False) -> tuple[dict[str, Any], Any]:
    """One action's end: the controller offers the file it holds (``held``), the module answers, the report is
    written. Returns the task result and the findings finish_audit gives back."""
    controller: dict[str, Any] = {"report_file": str(path), "fail_on_drift": fail_on_drift}
    if with_extra:
        controller["report_extra"] = extra(when)
    options: dict[str, Any] = {}
    if held:
        report_files.offer_held_report(options, controller)
    result = module_result(findings, when, options.get("known_findings"))
    found, _written = report_files.finish_audit(result, result, controller)
    return result, found


@settings(max_examples=40, deadline=None)
@given(FINDINGS, st.booleans())
def test_a_report_written_around_the_held_findings_is_the_whole_write(tmp_path_factory: Any, found: list[Any],
                                                                      with_extra: bool) -> None:
    folder = tmp_path_factory.mktemp("held")
    spliced, whole = folder / "spliced.json", folder / "whole.json"
    for path in (spliced, whole):
        write(path, found, 1.0, with_extra)
    result, decoded = write(spliced, found, 2.0, with_extra, held=True)
    write(whole, found, 2.0, with_extra)
    assert result.get(transport.FINDINGS_KNOWN) is True and "findings" not in result  # nothing sent again
    assert decoded is None  # nor decoded on the controller
    assert spliced.read_bytes() == whole.read_bytes()
    data = json.loads(spliced.read_text(encoding="utf-8"))
    assert data["findings"] == found and data["timestamp"] == 2.0
    assert data[transport.FINDINGS_SHA256] == result[transport.FINDINGS_SHA256]


def test_other_findings_are_sent_and_written_whole(tmp_path: Path) -> None:
    path = tmp_path / "n1.json"
    write(path, [finding("cpu.governor", "cpu0", "ok")], 1.0, True)
    changed = [finding("cpu.governor", "cpu0", "drift")]
    result, decoded = write(path, changed, 2.0, True, held=True)
    assert transport.FINDINGS_KNOWN not in result and decoded == changed
    assert json.loads(path.read_text())["findings"] == changed


@pytest.mark.parametrize("first_extra", [True, False])
def test_a_held_report_of_another_layout_is_decoded_and_written_whole(tmp_path: Path, first_extra: bool) -> None:
    """checks are written with the run's context (report_extra): a file written without them, read by a run with
    them (or the other way round), cannot be taken over line for line."""
    found = [finding("cpu.governor", "cpu0", "ok"), finding("nvme.scheduler", "nvme0n1", "drift")]
    spliced, whole = tmp_path / "spliced.json", tmp_path / "whole.json"
    write(spliced, found, 1.0, first_extra)
    result, decoded = write(spliced, found, 2.0, not first_extra, held=True)
    write(whole, found, 2.0, not first_extra)
    assert result.get(transport.FINDINGS_KNOWN) is True and decoded == found
    assert spliced.read_bytes() == whole.read_bytes()


def test_the_fleet_report_reads_a_report_written_around_held_findings(tmp_path: Path) -> None:
    found = [finding("cpu.governor", f"cpu{n}", "ok") for n in range(3)] + [finding("bios.iommu", "", "drift")]
    write(tmp_path / "n1.json", found, 1.0, True)
    write(tmp_path / "n1.json", found, 2.0, True, held=True)
    (entry,) = list(file_entries([str(tmp_path)]))
    assert entry.host == "n1" and entry.result["checks"] and entry.time == 2.0


def test_what_is_not_held(tmp_path: Path) -> None:
    """No file, one of an earlier version (no digest), and one whose findings do not end where they should: the
    module is given nothing and sends its findings."""
    path = tmp_path / "n1.json"
    assert report_files.held_report(str(path)) == (None, None)
    found = [finding("cpu.governor", "cpu0", "ok")]
    write(path, found, 1.0, True)
    text, digest = report_files.held_report(str(path))
    assert text == path.read_text() and digest == transport.digest(transport.encode(found))
    path.write_text(text.replace(f'    "{transport.FINDINGS_SHA256}": "{digest}",\n', ""))
    assert report_files.held_report(str(path)) == (None, None)  # an earlier version's report
    path.write_text(text.replace("\n    ]", "\n  ]"))
    assert report_files.held_report(str(path)) == (None, None)
    options: dict[str, Any] = {"known_findings": "a task's own"}
    controller = {"report_file": str(tmp_path / "n1.json")}
    report_files.offer_held_report(options, controller)
    assert options == {"known_findings": "a task's own"} and "held_report" not in controller


def test_findings_left_out_with_nothing_held_fail_the_host(tmp_path: Path) -> None:
    found = [finding("cpu.governor", "cpu0", "ok")]
    result = module_result(found, 1.0, transport.digest(transport.encode(found)))
    assert report_files.finish_audit(result, result, {"report_file": str(tmp_path / "n1.json")}) == (None, None)
    assert result["failed"] and "holds none" in result["msg"] and not (tmp_path / "n1.json").exists()


def test_a_drift_failure_names_the_held_findings(tmp_path: Path) -> None:
    path = tmp_path / "n1.json"
    found = [finding("cpu.governor", "cpu0", "ok"), finding("nvme.scheduler", "nvme0n1", "drift")]
    write(path, found, 1.0, True)
    result, decoded = write(path, found, 2.0, True, held=True, fail_on_drift=True)
    assert result.get(transport.FINDINGS_KNOWN) and result["failed_on_drift"] and decoded == found
    bounded_result.bound(result, result, decoded, str(path), None, "n1")
    assert "nvme.scheduler" in result["msg"] and "nvme0n1" in result["msg"]


def test_a_held_report_that_is_not_json_fails_the_host_naming_it(tmp_path: Path) -> None:
    """Only where its findings must be decoded (another layout): a line for line copy never reads them."""
    path = tmp_path / "n1.json"
    found = [finding("cpu.governor", "cpu0", "ok")]
    write(path, found, 1.0, False)
    path.write_text(path.read_text().replace('"schema"', '"schema', 1))
    result, decoded = write(path, found, 2.0, True, held=True)
    assert result["failed"] and str(path) in result["msg"] and "not valid JSON" in result["msg"]
