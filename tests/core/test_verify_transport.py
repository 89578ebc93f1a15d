"""The cheap paths a fleet-scale verify run takes, checked against the plain ones they replace.

- ``nodetune_verify_results`` reads registered results untemplated (``HostVars.raw_get``) and
  ``nodetune_fleet_reports`` renders the JUnit XML and the summary in one call: the same reports as the filters
  piped one into another;
- the verify action plugin turns the module's JSON text of findings back into one list, in ``findings`` and in
  ``report`` (key order as the module builds it), and writes the node's report as the same JSON the role's
  ``to_nice_json(sort_keys=false)`` wrote, a line per top-level key and per finding.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from ansible.plugins.filter.core import to_nice_json
from ansible_collections.nodetune.instinct.plugins.action import verify as action
from ansible_collections.nodetune.instinct.plugins.filter import report as filters
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import report
from hypothesis import given, settings
from hypothesis import strategies as st


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


# ------------------------------------------------------------------------------------------------ the codec
# Issue 28 item 1, issue 29 item 2: one codec for the findings transport (module_utils/audit/transport.py), encoded
# once on the node, decoded in one function by every controller-side reader.
JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
FINDINGS = st.lists(st.fixed_dictionaries({
    "id": st.sampled_from(["cpu.governor", "irq.nic_local", "inventory.gpu_count", "bios.iommu"]),
    "target": st.text(max_size=30), "expected": JSON_VALUES, "actual": JSON_VALUES,
    "status": st.sampled_from(report.STATUSES), "severity": st.sampled_from(["info", "low", "medium", "high"]),
    "remedy": st.text(max_size=40), "source": st.sampled_from(["setting", "bios", "learned"]),
    "waiver": st.none() | st.fixed_dictionaries({"id": st.text(max_size=8), "reason": st.text(max_size=8)})}),
    max_size=12)


@settings(max_examples=60, deadline=None)
@given(FINDINGS)
def test_the_codec_round_trips_any_findings(found: list[dict[str, Any]]) -> None:
    """What the node encodes is what every reader decodes, and a compact result expands to the module's own: the
    report with its findings right after its summary, one list shared by ``findings`` and ``report``."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.audit import transport

    assert transport.decode(transport.encode(found)) == found
    whole = result(*found)
    sent = json.loads(json.dumps(transport.compact(json.loads(json.dumps(whole)), found, "json")))
    assert isinstance(sent["findings"], str) and "findings" not in sent["report"]
    digest = hashlib.sha256(transport.encode(found).encode("utf-8")).hexdigest()
    assert sent[transport.FINDINGS_SHA256] == digest and transport.FINDINGS_KNOWN not in sent
    back = transport.expanded(sent)
    assert back == dict(whole, findings_sha256=digest) and list(back["report"]) == list(whole["report"])
    assert back["report"]["findings"] is back["findings"]
    assert transport.expanded(whole) is whole  # a list already: nothing to decode
    assert transport.compact(dict(whole), found, "list") == whole
    # the findings the controller holds (their digest) are not sent again; any other digest: sent
    held = transport.compact(json.loads(json.dumps(whole)), found, "json", known=digest)
    assert "findings" not in held and held[transport.FINDINGS_KNOWN] is True and "findings" not in held["report"]
    other = transport.compact(json.loads(json.dumps(whole)), found, "json", known="0" * 64)
    assert other["findings"] == sent["findings"] and transport.FINDINGS_KNOWN not in other


def test_the_codec_refuses_text_that_is_not_a_list_of_findings() -> None:
    from ansible_collections.nodetune.instinct.plugins.module_utils.audit import transport

    for text in ('[{"id": "cpu.gov', '{"id": "cpu.governor"}'):
        with pytest.raises(transport.TransportError):
            transport.decode(text)
    assert transport.decode(None) is None and transport.decode({"failed": True}) is None
    failed = {"failed": True, "msg": "boom"}
    assert transport.expanded(failed) is failed


# ------------------------------------------------------------------------------------------------ bounded results
# Issue 28 item 1: what Ansible keeps per host is a bounded summary; the detail is in the node's files.
MAX_RESULT_BYTES = 8 * 1024


def full_size_tune_result() -> dict[str, Any]:
    """A fresh full-size MI300X node's tune result with its audit, in the shape and about the size the module returns
    on the lab's mi300x spec (1,137 changes, 930 KB of JSON; 1,800 findings, 350 KB): a change per CPU and per IRQ,
    nodetune's own files whole; a finding per CPU and IRQ, two BIOS-level checks drifting."""
    actions: list[dict[str, Any]] = []

    def change(check: str, target: str, path: str, before: Any, after: str, kind: str = "attr") -> None:
        actions.append({"id": check, "target": target, "path": path, "kind": kind, "before": before, "after": after,
                        "reboot_required": False, "disruptive": check.startswith("smt."),
                        "reason": f"the lab's tuning: {check} on {target}"})

    for cpu in range(192):
        change("smt.siblings_offline", f"cpu{cpu + 192}", f"/sys/devices/system/cpu/cpu{cpu + 192}/online", "1", "0")
        change("cpu.governor", f"cpu{cpu}", f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor",
               "powersave", "performance")
        change("cpu.idle_state", f"cpu{cpu}", f"/sys/devices/system/cpu/cpu{cpu}/cpuidle/state2/disable", "0", "1")
    for irq in range(512):
        change("irq.nic_local", f"mlx5_comp{irq % 64}@pci:0000:{irq // 64:02x}:00.0",
               f"/proc/irq/{irq + 100}/smp_affinity_list", "0-383", str(irq % 96))
    expected = json.dumps({"settings": [{"id": "irq.nic_local", "target": f"irq {n}", "value": str(n % 96)}
                                        for n in range(512)]}, indent=1)
    for area in ("cpu", "irq", "smt", "nvme", "sysctl", "infiniband", "rocm_env", "persist", "gpu", "limits"):
        change("check.expected", area, f"/etc/nodetune/check.d/{area}.json", None, expected, kind="file")
    found = [{"id": "irq.nic_local", "target": f"irq {n}", "expected": str(n % 96), "actual": str(n % 96),
              "status": "ok", "severity": "medium", "remedy": "", "source": "setting", "waiver": None}
             for n in range(1798)]
    found += [{"id": "bios.iommu", "target": target, "expected": "pci=realloc=off", "actual": "absent",
               "status": "drift", "severity": "medium", "remedy": "add pci=realloc=off to the kernel command line",
               "source": "bios", "waiver": None} for target in ("pci=realloc", "amd_iommu")]
    summary = {"counts": {"ok": 1798, "drift": 2, "not_applicable": 0, "unsupported": 0, "waived": 0, "pending": 0},
               "drift": True, "drift_ids": ["bios.iommu"]}
    node = report.node_report("node1", found, summary, root="/srv/lab/node1", timestamp=1767225600.0,
                              extra={"platform": {}, "layout": {}, "notes": [], "inventory": {"gpu_count": 8}})
    audit = {"changed": False, "drift": True, "findings": found, "summary": summary, "report": node, "notes": []}
    return {"changed": True, "actions": actions, "reboot_required": True, "journal": "/var/lib/nodetune/journal.json",
            "unconfirmed": [], "verify": audit, "settings": 1155, "notes": [], "bios": found[-2:],
            "layout": {"smt_offline": 192, "housekeeping": [0, 96], "ranks": 8, "nic_irqs_pinned": 512}}


def sent(module_result: dict[str, Any]) -> dict[str, Any]:
    """The module's result in the transport the action asks for (the findings as one JSON text)."""
    out = json.loads(json.dumps(module_result))
    audit = out.get("verify", out)
    audit["findings"] = json.dumps(audit["findings"])
    audit["report"] = {k: v for k, v in audit["report"].items() if k != "findings"}
    return out


def answering(plugin: Any, args: dict[str, Any], answer: dict[str, Any], role: str | None = None) -> Any:
    from tests.support.actions import action

    run = action(plugin, args, role)
    run._execute_module = lambda module_name, module_args, task_vars: json.loads(json.dumps(answer))
    return run


def test_a_full_size_nodes_tune_result_is_bounded_and_its_detail_is_in_its_files(tmp_path: Path) -> None:
    """site.yml on a fresh MI300X node kept ~1.3 MB per host on the controller (the changes and the findings): the
    registered result is now a few KB - counts, status, the drifting ids, where the detail is - and the detail is in
    the node's report file and <report dir>/tune/<host>.json, read back whole."""
    from ansible_collections.nodetune.instinct.plugins.action import tune as tune_action
    from ansible_collections.nodetune.instinct.plugins.plugin_utils.bounded_result import restored

    from tests.support.actions import host

    module = full_size_tune_result()
    assert len(json.dumps(sent(module))) > 1000 * 1024  # full size, as the module returns it
    run = answering(tune_action, {"root": "/srv/lab/node1", "verify": True}, sent(module))
    kept = run.run(task_vars=host(nodetune_report_dir=str(tmp_path)))
    assert not kept.get("failed"), kept.get("msg")
    assert len(json.dumps(kept)) < MAX_RESULT_BYTES, len(json.dumps(kept))
    assert kept["changed"] and kept["reboot_required"] and kept["verify"]["drift"]
    assert kept["verify"]["summary"] == module["verify"]["summary"]
    assert kept["spilled"] == {"actions": len(module["actions"]), "bios": 2}
    assert kept["changed_ids"]["irq.nic_local"] == 512 and sum(kept["changed_ids"].values()) == len(module["actions"])
    assert kept["verify"]["findings_file"] == str(tmp_path / "nodes" / "node1.json")
    back = restored(kept)
    assert back["actions"] == module["actions"] and back["bios"] == module["bios"]
    audit = restored(back["verify"])
    assert audit["findings"] == module["verify"]["findings"] and audit["report"]["findings"] is audit["findings"]
    assert {k: v for k, v in audit["report"].items() if k not in ("run", "groups", "checks")} == \
        module["verify"]["report"]
    # the apply alone: bounded in the tune role's task; a task of the user's own calling the module keeps it whole
    plain = {k: v for k, v in module.items() if k != "verify"}
    in_role = answering(tune_action, {"root": "/srv/lab/node1"}, plain, role="tune").run(
        task_vars=host(nodetune_report_dir=str(tmp_path / "apply")))
    assert len(json.dumps(in_role)) < MAX_RESULT_BYTES and restored(in_role)["actions"] == module["actions"]
    own = answering(tune_action, {"root": "/srv/lab/node1"}, plain).run(
        task_vars=host(nodetune_report_dir=str(tmp_path / "own")))
    assert own["actions"] == module["actions"] and not (tmp_path / "own").exists()


def test_a_full_size_nodes_verify_result_is_bounded(tmp_path: Path) -> None:
    from ansible_collections.nodetune.instinct.plugins.action import verify as verify_action

    from tests.support.actions import host

    module = full_size_tune_result()["verify"]
    run = answering(verify_action, {"root": "/srv/lab/node1", "role_variables": True}, sent(module))
    kept = run.run(task_vars=host(nodetune_report_dir=str(tmp_path)))
    assert len(json.dumps(kept)) < MAX_RESULT_BYTES and kept["drift"] and kept["summary"] == module["summary"]
    assert json.loads((tmp_path / "nodes" / "node1.json").read_text())["findings"] == module["findings"]
    # no report file: the result is the only copy and keeps every finding, in findings and in report
    whole = answering(verify_action, {"root": "/srv/lab/node1", "role_variables": True}, sent(module)).run(
        task_vars=host(nodetune_verify_write_reports=False))
    assert whole["findings"] == module["findings"] and whole["report"]["findings"] == module["findings"]


def test_the_fleet_reports_and_apply_summary_of_bounded_results_equal_the_whole_ones(tmp_path: Path) -> None:
    from ansible_collections.nodetune.instinct.plugins.action import tune as tune_action

    from tests.support.actions import host

    module = full_size_tune_result()
    kept = answering(tune_action, {"root": "/srv/lab/node1", "verify": True}, sent(module)).run(
        task_vars=host(nodetune_report_dir=str(tmp_path)))
    assert "actions" not in kept and "findings" not in kept["verify"]  # counted from the bounded result
    bounded = {"node1": {"tune_result": kept}}
    whole = {"node1": {"tune_result": module}}
    assert filters.nodetune_apply_summary(bounded, ["node1"]) == filters.nodetune_apply_summary(whole, ["node1"])
    assert filters.fleet_digests(bounded, ["node1"], "tune_result.verify") == \
        filters.fleet_digests(whole, ["node1"], "tune_result.verify")


def test_the_api_reads_a_nodes_findings_from_its_report_file_on_first_use_and_keeps_one_copy(tmp_path: Path) -> None:
    """nodetune.verify(report_dir=...) kept every node's findings twice (the Finding objects and the report's list):
    a node's findings are now read from its report file when first asked for, and kept once."""
    from ansible_collections.nodetune.instinct.plugins.action import verify as verify_action

    from nodetune.api import _VERIFY, _absorb, _Collector
    from tests.support.actions import host

    module = full_size_tune_result()["verify"]
    kept = answering(verify_action, {"root": "/srv/lab/node1", "role_variables": True}, sent(module)).run(
        task_vars=host(nodetune_report_dir=str(tmp_path)))
    collector = _Collector("verify", None, str(tmp_path / "results"))
    collector.handle({"event": "runner_on_ok", "event_data": {"host": "node1", "task": "Verify",
                                                              "task_action": _VERIFY, "res": {}}}, False)
    node = collector.nodes["node1"]
    assert _absorb(node, _VERIFY, kept) is None
    assert node.report_file == str(tmp_path / "nodes" / "node1.json")
    collector.expected.clear()  # the result was absorbed above, not from the callback's files
    assert collector.result(0, check=False).nodes["node1"].status == "drift"  # from the summary: nothing read yet
    unread = vars(node)
    assert unread.get("_unread") and unread["_findings"] == [] and unread.get("_report") is None, sorted(unread)
    assert [f.uid for f in node.drift] == ["bios.iommu[pci=realloc]", "bios.iommu[amd_iommu]"]
    assert len(node.findings) == 1800 and node.report is not None
    assert node.report["findings"] == module["findings"] and list(node.report)[:7] == list(module["report"])[:7]
    assert "findings" not in vars(node)["_report"]  # one copy: the report's findings are the Finding objects'
