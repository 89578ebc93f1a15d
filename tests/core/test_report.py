"""Reports (module_utils/audit/report.py): JUnit parsed back with ElementTree, Prometheus text parsed with
prometheus_client's own parser, the fleet summary's counts."""

from __future__ import annotations

import json
import re
from xml.etree import ElementTree

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import report
from prometheus_client.parser import text_string_to_metric_families


def finding(id_: str, target: str, status: str, **extra) -> dict:
    data = {"id": id_, "target": target, "expected": "x", "actual": "y" if status == "drift" else "x",
            "status": status, "severity": "medium", "remedy": "do it" if status == "drift" else "",
            "source": "setting", "waiver": None}
    data.update(extra)
    return data


def node_result(findings: list[dict], node: str = "n") -> dict:
    """A verify module result as registered by Ansible."""
    counts = {s: sum(1 for f in findings if f["status"] == s) for s in report.STATUSES}
    summary = {"counts": counts, "drift": counts["drift"] > 0,
               "drift_ids": sorted({f["id"] for f in findings if f["status"] == "drift"})}
    return {"changed": False, "findings": findings, "summary": summary,
            "report": report.node_report(node, findings, summary, timestamp=1767225600.0)}


FLEET = {
    "mi300x-01": node_result([finding("nvme.scheduler", "nvme0n1", "ok"), finding("cpu.governor", "cpu0", "ok")]),
    "mi300x-02": node_result([
        finding("nvme.scheduler", "nvme0n1", "drift"),
        finding("irq.nic_local", "irq 142", "drift"),
        finding("bios.iommu", "-", "not_applicable", remedy="no platform advice"),
        finding("health.ib_port", "mlx5_3/1", "waived",
                waiver={"id": "health.ib_port", "target": "mlx5_3/1", "reason": "not cabled", "expires": "2099-01-01"}),
        finding("bios.pcie_link", "-", "unsupported", remedy="no link attributes"),
    ]),
    "mi250-01": node_result([finding("nvme.scheduler", "nvme1n1", "drift"), finding("cpu.governor", "cpu0", "ok")]),
    "mi250-02": {"failed": True, "msg": "nodetune verify: invalid variables: nodetune_bios_smt='of' is not valid"},
    "mi250-03": None,  # unreachable: never registered a result
}


# ------------------------------------------------------------------------------------------------ JSON
def test_node_report_is_json_with_a_utc_timestamp() -> None:
    rep = node_result([finding("nvme.scheduler", "nvme0n1", "ok")], node="mi300x-01")["report"]
    assert json.loads(json.dumps(rep)) == rep
    assert rep["generated_at"] == "2026-01-01T00:00:00Z"
    assert rep["node"] == "mi300x-01" and rep["schema"] == 1


# ------------------------------------------------------------------------------------------------ JUnit
def test_junit_has_a_testsuite_per_node_and_a_testcase_per_check_id() -> None:
    root = ElementTree.fromstring(report.junit_xml(FLEET))
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert sorted(suites) == sorted(FLEET)
    drifted = suites["mi300x-02"]
    cases = {c.get("name"): c for c in drifted.findall("testcase")}
    assert sorted(cases) == ["bios.iommu", "bios.pcie_link", "health.ib_port", "irq.nic_local", "nvme.scheduler"]
    assert all(c.get("classname") == "mi300x-02" for c in cases.values())
    failure = cases["nvme.scheduler"].find("failure")
    assert failure is not None and failure.get("message") == "1 of 1 drift (nvme0n1): expected x, found y"
    assert "do it" in failure.text
    for name in ("bios.iommu", "bios.pcie_link", "health.ib_port"):
        assert cases[name].find("skipped") is not None and cases[name].find("failure") is None
    assert "not cabled" in cases["health.ib_port"].find("skipped").get("message")
    assert (drifted.get("tests"), drifted.get("failures"), drifted.get("skipped"), drifted.get("errors")) == \
        ("5", "2", "3", "0")
    clean = suites["mi300x-01"]
    assert clean.get("failures") == "0" and all(len(c) == 0 for c in clean.findall("testcase"))


def _cpus_and_irqs(cpus: int, irqs: int, drift_every: int = 1) -> list[dict]:
    """A full-size node's findings: a governor per CPU, an affinity per IRQ, a few single checks."""
    out = [finding("cpu.governor", f"cpu{n}", "drift" if n % drift_every == 0 else "ok") for n in range(cpus)]
    out += [finding("irq.nic_local", f"irq {40 + n}", "drift") for n in range(irqs)]
    out += [finding(f"sysctl.vm.x{n}", f"vm.x{n}", "ok") for n in range(20)]
    return out


def test_junit_one_testcase_per_check_id_whatever_the_node_size() -> None:
    root = ElementTree.fromstring(report.junit_xml({"big": node_result(_cpus_and_irqs(1152, 4000, 2))}))
    cases = {c.get("name"): c for c in root.findall("testsuite/testcase")}
    assert len(cases) == 22
    failure = cases["cpu.governor"].find("failure")
    assert failure.get("message").startswith("576 of 1152 drift (cpu0,2,4,")
    assert "irq 40-4039" in cases["irq.nic_local"].find("failure").get("message")


#: Jenkins' JUnit schema (xunit-plugin junit-10.xsd, also what GitLab reads): elements, their children, required
#: attributes (the allowed ones are report.JUNIT_ATTRIBUTES, checked against this list here)
JUNIT_SCHEMA = {
    "testsuites": ({"testsuite"}, set(), {"name", "time", "tests", "failures", "disabled", "errors"}),
    "testsuite": ({"properties", "testcase", "system-out", "system-err"}, {"name", "tests"},
                  {"name", "tests", "failures", "errors", "time", "disabled", "skipped", "timestamp", "hostname", "id",
                   "package"}),
    "testcase": ({"skipped", "error", "failure", "system-out", "system-err"}, {"name"},
                 {"name", "assertions", "time", "classname", "status"}),
    "failure": (set(), set(), {"message", "type"}),
    "error": (set(), set(), {"message", "type"}),
    "skipped": (set(), set(), {"message"}),
}


def _schema_errors(element: ElementTree.Element) -> list[str]:
    children, required, allowed = JUNIT_SCHEMA[element.tag]
    errors = [f"{element.tag}: attribute {name}" for name in set(element.attrib) - allowed]
    errors += [f"{element.tag}: missing {name}" for name in required - set(element.attrib)]
    for name in ("tests", "failures", "errors", "skipped", "disabled"):
        if name in element.attrib and not element.attrib[name].isdigit():
            errors.append(f"{element.tag}: {name}={element.attrib[name]!r}")
    stamp = element.attrib.get("timestamp")
    if stamp is not None and not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", stamp):
        errors.append(f"timestamp {stamp!r} is not ISO 8601 without a zone")
    for child in element:
        errors += [f"{element.tag} holds {child.tag}"] if child.tag not in children else _schema_errors(child)
    return errors


def test_junit_is_valid_against_the_jenkins_schema() -> None:
    assert {tag: set(names) for tag, names in report.JUNIT_ATTRIBUTES.items()} == \
        {tag: allowed for tag, (_c, _r, allowed) in JUNIT_SCHEMA.items()}
    for results in (FLEET, {"big": node_result(_cpus_and_irqs(64, 100, 3))}):
        assert _schema_errors(ElementTree.fromstring(report.junit_xml(results))) == []


def test_junit_reports_nodes_without_a_result_as_errors() -> None:
    root = ElementTree.fromstring(report.junit_xml(FLEET))
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    for host in ("mi250-02", "mi250-03"):
        error = suites[host].find("testcase/error")
        assert error is not None and suites[host].get("errors") == "1"
    assert "nodetune_bios_smt" in suites["mi250-02"].find("testcase/error").get("message")
    totals = {k: int(root.get(k)) for k in ("tests", "failures", "errors")}
    assert totals == {"tests": 2 + 5 + 2 + 1 + 1, "failures": 3, "errors": 2}


def test_junit_escapes_what_xml_needs() -> None:
    text = report.junit_xml({"n<1>": node_result([finding("rocm.env", 'a "b" & <c>', "drift")])})
    case = ElementTree.fromstring(text).find("testsuite/testcase")
    assert case.get("name") == "rocm.env" and 'a "b" & <c>' in case.find("failure").get("message")


# ------------------------------------------------------------------------------------------------ Prometheus
def parse(text: str) -> dict:
    families = {f.name: f for f in text_string_to_metric_families(text)}
    return families


def test_prometheus_textfile_parses_and_says_what_drifts() -> None:
    findings = FLEET["mi300x-02"]["findings"]
    families = parse(report.prometheus_text(findings, timestamp=1767225600.5))
    drift = {s.labels["check"]: s.value for s in families["nodetune_drift"].samples}
    assert drift == {"nvme.scheduler": 1, "irq.nic_local": 1, "bios.iommu": 0, "health.ib_port": 0,
                     "bios.pcie_link": 0}
    statuses = {s.labels["status"]: s.value for s in families["nodetune_findings"].samples}
    assert statuses == {"ok": 0, "drift": 2, "not_applicable": 1, "unsupported": 1, "waived": 1, "pending": 0}
    assert families["nodetune_drift"].type == "gauge"
    [stamp] = families["nodetune_last_verify_timestamp_seconds"].samples
    assert stamp.value == pytest.approx(1767225600.5)


def test_prometheus_series_do_not_grow_with_cpus_and_irqs() -> None:
    """A full-size node: <= 200 series, labels from the documented set only (no CPU or IRQ in a label)."""
    text = report.prometheus_text(_cpus_and_irqs(1152, 4000, 2), timestamp=1.0)
    samples = [s for family in parse(text).values() for s in family.samples]
    assert len(samples) == 2 * 22 + 6 + 1 <= 200  # a count per status (6, pending too), the timestamp
    assert {name for s in samples for name in s.labels} <= set(report.PROMETHEUS_LABELS)
    targets = {s.labels["check"]: s.value for s in parse(text)["nodetune_drift_targets"].samples}
    assert targets["cpu.governor"] == 576 and targets["irq.nic_local"] == 4000


@pytest.mark.parametrize("check", ['rocm.env "quoted"', "back\\slash", "two\nlines", "ünï"])
def test_prometheus_label_values_are_escaped(check: str) -> None:
    families = parse(report.prometheus_text([finding(check, "t", "drift")], timestamp=1.0))
    [sample] = families["nodetune_drift"].samples
    assert sample.labels["check"] == check and sample.value == 1


def test_prometheus_never_repeats_a_label_set() -> None:
    text = report.prometheus_text([finding("a.b", "t", "ok"), finding("a.b", "u", "drift")], timestamp=1.0)
    samples = parse(text)["nodetune_drift"].samples
    assert [(s.labels["check"], s.value) for s in samples] == [("a.b", 1)]


def test_group_findings_one_entry_per_id_with_compact_targets() -> None:
    from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import compact_targets, group_findings

    assert compact_targets(["cpu0", "cpu1", "cpu2", "cpu7", "cpu1/C2", "cpu2/C2", "irq 40", "irq 41",
                            "0000:05:00.0", "nvme0n1", "nvme1n1"]) == \
        "cpu0-2,7, cpu1-2/C2, irq 40-41, nvme0-1n1, 0000:05:00.0"
    groups = group_findings([finding("cpu.governor", f"cpu{n}", "drift" if n < 3 else "ok") for n in range(8)]
                            + [finding("ib.mtu", "ib0", "waived"), finding("ib.mtu", "ib1", "not_applicable")])
    assert [(g["id"], g["status"], g["drift_targets"], g["findings"]) for g in groups] == [
        ("cpu.governor", "drift", "cpu0-2", 8), ("ib.mtu", "waived", "", 2)]
    assert groups[0]["counts"]["drift"] == 3 and groups[0]["expected"] == "x" and groups[0]["actual"] == "y"


# ------------------------------------------------------------------------------------------------ fleet
def test_fleet_summary_counts_nodes_and_ranks_drift_ids_by_nodes() -> None:
    summary = report.fleet_summary(FLEET)
    assert summary["counts"] == {"clean": 1, "drifted": 2, "pending": 0, "failed": 2}
    assert summary["clean"] == ["mi300x-01"]
    assert summary["drifted"] == {"mi250-01": ["nvme.scheduler"], "mi300x-02": ["irq.nic_local", "nvme.scheduler"]}
    assert set(summary["failed"]) == {"mi250-02", "mi250-03"}
    assert summary["top_drift_ids"] == [{"id": "nvme.scheduler", "nodes": 2}, {"id": "irq.nic_local", "nodes": 1}]
    assert summary["text"][0] == "nodetune verify: 5 node(s): 1 clean, 2 drifted, 2 failed"
    assert "nvme.scheduler (2 nodes)" in summary["text"][-1]
    json.dumps(summary)


def test_a_waived_only_node_is_clean() -> None:
    summary = report.fleet_summary({"n": node_result([finding("a.b", "t", "waived")])})
    assert summary["clean"] == ["n"] and summary["counts"]["drifted"] == 0


def test_unreachable_and_skipped_results_are_failed_with_a_reason() -> None:
    assert report.node_outcome({"unreachable": True, "msg": "ssh: timeout"})[2] == "unreachable: ssh: timeout"
    assert report.node_outcome({"skipped": True, "skip_reason": "Conditional result was False"})[0] == "failed"
    assert report.node_outcome(FLEET["mi300x-01"]["report"])[0] == "ok"  # a report itself is accepted too


# ------------------------------------------------------------------------------------------------ filters
def test_filters_collect_hostvars_and_render_the_same_reports() -> None:
    from ansible.errors import AnsibleFilterError
    from ansible_collections.nodetune.instinct.plugins.filter import report as filters

    hostvars = {host: {"nodetune_verify_result": result, "other": 1} for host, result in FLEET.items()
                if result is not None}
    hostvars["mi250-03"] = {"other": 1}  # unreachable: registered nothing
    collected = filters.nodetune_verify_results(hostvars, list(FLEET) + ["not-in-inventory"])
    assert collected["mi250-03"] is None and collected["not-in-inventory"] is None
    assert collected["mi300x-02"] == FLEET["mi300x-02"]
    names = filters.FilterModule().filters()
    assert names["nodetune_junit"](collected) == report.junit_xml({**FLEET, "not-in-inventory": None})
    summary = names["nodetune_fleet_summary"](collected, 1)
    assert summary["top_drift_ids"] == [{"id": "nvme.scheduler", "nodes": 2}]
    assert names["nodetune_prometheus"](FLEET["mi250-01"], 5.0) == \
        report.prometheus_text(FLEET["mi250-01"]["findings"], timestamp=5.0)
    with pytest.raises(AnsibleFilterError, match="hosts must be a list"):
        filters.nodetune_verify_results(hostvars, "mi250-01")
    with pytest.raises(AnsibleFilterError, match="expected a mapping of host name"):
        names["nodetune_junit"]([1, 2])


def test_a_host_failed_for_its_drift_is_drifted_not_failed() -> None:
    """nodetune_verify_fail_on_drift fails the host after its report is written: the fleet still counts it as a
    drifted node with its ids, not as a node verify could not run on."""
    failed_for_drift = dict(FLEET["mi250-01"], failed=True, failed_on_drift=True, msg="found drift: nvme.scheduler")
    summary = report.fleet_summary({"mi250-01": failed_for_drift, "mi250-02": FLEET["mi250-02"]})
    assert summary["drifted"] == {"mi250-01": ["nvme.scheduler"]}
    assert list(summary["failed"]) == ["mi250-02"]


def test_tune_results_hold_the_audit_under_verify() -> None:
    """site.yml registers the tune result; its audit is read through the dotted var, and a host whose tune task
    failed (no audit) is reported with the tune task's own message."""
    from ansible_collections.nodetune.instinct.plugins.filter import report as filters

    hostvars = {
        "a": {"tune_result": {"changed": True, "actions": [], "verify": FLEET["mi300x-02"]}},
        "b": {"tune_result": {"failed": True, "msg": "nodetune refused the settings, nothing was written: x"}},
        "c": {"tune_result": {"changed": False, "actions": []}},  # tuned without verify: no audit to report
    }
    collected = filters.nodetune_verify_results(hostvars, ["a", "b", "c"], "tune_result.verify")
    assert collected["a"] == FLEET["mi300x-02"] and collected["c"] is None
    summary = report.fleet_summary(collected)
    assert summary["drifted"] == {"a": ["irq.nic_local", "nvme.scheduler"]}
    assert summary["failed"]["b"] == "nodetune refused the settings, nothing was written: x"
    assert "no verify result" in summary["failed"]["c"]


def test_apply_summary_counts_nodes_and_changes_by_id() -> None:
    from ansible_collections.nodetune.instinct.plugins.filter import report as filters

    def action(id_: str, target: str) -> dict:
        return {"id": id_, "target": target}

    results = {
        "n1": {"changed": True, "reboot_required": True, "notes": ["rocm_env: not applicable"],
               "actions": [action("cpu.governor", f"cpu{i}") for i in range(4)] + [action("ib.mtu", "ib0")]},
        "n2": {"changed": True, "reboot_required": False, "notes": ["rocm_env: not applicable"],
               "actions": [action("cpu.governor", "cpu0")]},
        "n3": {"changed": False, "actions": [], "notes": []},
        "n4": {"failed": True, "msg": "nodetune refused the settings, nothing was written: bad"},
        "n5": {"changed": True, "failed": True, "failed_on_drift": True, "actions": [action("ib.mtu", "ib0")]},
        "n6": {"unreachable": True, "msg": "ssh: timeout"},
    }
    summary = report.apply_summary(results)
    assert summary["counts"] == {"changed": 3, "unchanged": 1, "failed": 2}
    assert summary["changes_by_id"] == [{"id": "cpu.governor", "nodes": 2, "values": 5},
                                        {"id": "ib.mtu", "nodes": 2, "values": 2}]
    assert summary["ids_changed"] == 2
    assert summary["reboot_required"] == ["n1"]
    assert summary["failed"] == {"n4": "nodetune refused the settings, nothing was written: bad", "n6": "ssh: timeout"}
    assert summary["notes"] == [{"note": "rocm_env: not applicable", "nodes": 2}]
    assert summary["text"][0] == "nodetune apply: 6 node(s): 3 changed, 1 unchanged, 2 failed"
    assert "cpu.governor on 2 node(s) (5 value(s))" in summary["text"][1]
    hostvars = {host: {"tune_result": result} for host, result in results.items()}
    assert filters.nodetune_apply_summary(hostvars, sorted(results)) == summary
    assert report.apply_summary({"r": {"changed": True, "restored": ["a", "b"]}})["restored"] == 2


def test_findings_carried_as_json_text_are_reported_in_full() -> None:
    """The tune module's audit keeps its findings as one JSON text in the registered result; the fleet reports see
    the same findings as from a list."""
    from ansible_collections.nodetune.instinct.plugins.filter import report as filters

    listed = FLEET["mi300x-02"]
    text = dict(listed, findings=json.dumps(listed["findings"]),
                report={k: v for k, v in listed["report"].items() if k != "findings"})
    hostvars = {"a": {"tune_result": {"changed": False, "verify": text}}, "b": {"nodetune_verify_result": listed}}
    from_text = filters.nodetune_verify_results(hostvars, ["a"], "tune_result.verify")["a"]
    from_list = filters.nodetune_verify_results(hostvars, ["b"])["b"]
    assert from_text["findings"] == from_list["findings"] and from_text["report"] == from_list["report"]
    assert report.junit_xml({"n": from_text}) == report.junit_xml({"n": listed})
    assert isinstance(hostvars["a"]["tune_result"]["verify"]["findings"], str)  # the stored result is left as is


def test_a_revert_summary_says_revert() -> None:
    summary = report.apply_summary({"r": {"changed": True, "restored": ["a"]}}, title="nodetune revert")
    assert summary["text"][:2] == ["nodetune revert: 1 node(s): 1 changed, 0 unchanged, 0 failed",
                                   "restored from the journal: 1 value(s)"]


def test_apply_summary_lists_every_changed_id() -> None:
    """A fresh node changes more than ten ids; the sysctls (changed on one value each) used to fall off the list."""
    actions = [{"id": f"cpu.x{n}", "target": f"cpu{k}"} for n in range(12) for k in range(4)]
    actions += [{"id": "sysctl.vm.dirty_ratio", "target": "vm.dirty_ratio"}]
    summary = report.apply_summary({"n": {"changed": True, "actions": actions}})
    ids = [c["id"] for c in summary["changes_by_id"]]
    assert len(ids) == summary["ids_changed"] == 13 and "sysctl.vm.dirty_ratio" in ids
    assert "sysctl.vm.dirty_ratio on 1 node(s) (1 value(s))" in "\n".join(summary["text"])


@pytest.mark.parametrize("host", ["../../escape", "..", ".", "a/b", "/etc/passwd"])
def test_a_host_name_never_leaves_the_report_folder(host: str, tmp_path) -> None:
    import os

    name = report.report_file_name(host)
    assert "/" not in name and name not in (".json", "..json") or name.startswith("%")
    folder = tmp_path / "nodes"
    assert os.path.dirname(os.path.normpath(os.path.join(folder, name))) == str(folder)


def test_ordinary_host_names_keep_their_report_file_name() -> None:
    assert [report.report_file_name(h) for h in ("mi300x-01", "node_7.dc1", "fe80::1")] == \
        ["mi300x-01.json", "node_7.dc1.json", "fe80::1.json"]
