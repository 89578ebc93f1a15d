"""The tune and verify action plugins on the controller, with the module call recorded instead of run: what they
refuse before any call, and what they send.

Issue 16 item 1: a misspelt ``nodetune_*`` variable is refused with the nearest real name (``nodetune_rot`` used
to be ignored, leaving the root at ``/``), and a writing run on the controller's own ``/`` needs
``nodetune_controller_allowed``. Issue 13 item 2: variables coerced as Ansible's argument specs coerce them; an area
role's task applies that area alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.action import tune as tune_action
from ansible_collections.nodetune.instinct.plugins.action import verify as verify_action
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas

from tests.support.actions import action, host


@pytest.mark.parametrize("typo,real", [
    ("nodetune_rot", "nodetune_root"), ("nodetune_layout_polcy", "nodetune_layout_policy"),
    ("nodetune_irqbalanse_mode", "nodetune_irqbalance_mode"), ("nodetune_sysctls_extra", "nodetune_sysctl_extra"),
    ("nodetune_governor", "nodetune_cpu_governor"), ("nodetune_controler_allowed", "nodetune_controller_allowed"),
])
@pytest.mark.parametrize("plugin", [tune_action, verify_action], ids=["tune", "verify"])
def test_an_undeclared_variable_is_refused_with_the_nearest_name(plugin: Any, typo: str, real: str) -> None:
    run = action(plugin, {"root": "/srv/lab/node1"})
    result = run.run(task_vars=host(**{typo: "/srv/lab/node1"}))
    assert result.get("failed") and run.calls == []
    assert f"{typo} is not a nodetune variable; did you mean {real}?" in result["msg"]


def test_the_playbook_lab_and_registered_variables_are_declared() -> None:
    run = action(tune_action, {"root": "/srv/lab/node1"})
    variables = dict.fromkeys(areas.OTHER_VARIABLES, "x")
    variables.update(nodetune_serial=1, nodetune_max_fail_percentage=0, nodetune_hosts="all",
                     nodetune_lab_backend="kernel")
    result = run.run(task_vars=host(**variables))
    assert not result.get("failed"), result.get("msg")
    assert len(run.calls) == 1


@pytest.mark.parametrize("variables", [
    {"inventory_hostname": "node1", "ansible_connection": "local"},
    {"inventory_hostname": "localhost", "ansible_connection": "ssh"},
    {"inventory_hostname": "gpu1", "ansible_host": "127.0.0.1", "ansible_connection": "ssh"},
])
@pytest.mark.parametrize("root", ["/", "//", "/.", "/srv/.."])
def test_tuning_the_controller_itself_needs_the_opt_in(variables: dict[str, Any], root: str) -> None:
    transport = variables["ansible_connection"]
    for state in ("present", "reverted"):
        run = action(tune_action, {"root": root, "state": state}, transport=transport)
        result = run.run(task_vars=dict(variables))
        assert result.get("failed") and run.calls == [], (variables, root, state)
        assert "nodetune_controller_allowed: true" in result["msg"]
    allowed = action(tune_action, {"root": root}, transport=transport)
    assert not allowed.run(task_vars=dict(variables, nodetune_controller_allowed=True)).get("failed")
    assert len(allowed.calls) == 1


def _own_addresses() -> list[str]:
    """This machine's addresses other than loopback ones, as the kernel lists them (none where it cannot say)."""
    from ansible_collections.nodetune.instinct.plugins.plugin_utils import role_variables

    return sorted(str(a) for a in role_variables._interface_addresses() if not a.is_loopback and not a.is_link_local)


@pytest.mark.parametrize("address", [
    "127.0.1.1", "127.42.0.7", "LOCALHOST", "LocalHost.", "::ffff:127.0.0.1", "::1", "0:0:0:0:0:0:0:1", "0.0.0.0",
    "localhost.localhost", "own host name", "own fqdn", *_own_addresses()[:2],
])
def test_a_name_or_address_of_the_controller_needs_the_opt_in(address: str) -> None:
    """Issue 22: the guard matched three names only, so ``ansible_host`` set to 127.0.1.1, LOCALHOST, an IPv4-mapped
    loopback or this machine's own name tuned the controller's ``/`` over SSH without the opt-in."""
    import socket

    address = {"own host name": socket.gethostname(), "own fqdn": socket.getfqdn()}.get(address, address)
    for variables in ({"inventory_hostname": "gpu1", "ansible_host": address}, {"inventory_hostname": address}):
        run = action(tune_action, {"root": "/"}, transport="ssh")
        result = run.run(task_vars=dict(variables, ansible_connection="ssh"))
        assert result.get("failed") and run.calls == [], variables
        assert "nodetune_controller_allowed: true" in result["msg"]


def test_a_name_that_resolves_to_the_controller_needs_the_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    real = socket.getaddrinfo

    def resolve(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "gpu-alias.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.1.1", 0))]
        return real(name, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    run = action(tune_action, {"root": "/"}, transport="ssh")
    result = run.run(task_vars={"inventory_hostname": "gpu1", "ansible_host": "gpu-alias.example",
                                "ansible_connection": "ssh"})
    assert result.get("failed") and run.calls == []


def test_a_name_lookup_that_hangs_is_bounded_and_not_the_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket
    import threading
    import time

    from ansible_collections.nodetune.instinct.plugins.plugin_utils import role_variables

    release = threading.Event()
    real = socket.getaddrinfo

    def hang(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "slow.example":
            release.wait(30)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", hang)
    monkeypatch.setattr(role_variables, "RESOLVE_TIMEOUT", 0.2)
    started = time.monotonic()
    try:
        run = action(tune_action, {"root": "/"}, transport="ssh")
        result = run.run(task_vars={"inventory_hostname": "gpu1", "ansible_host": "slow.example",
                                    "ansible_connection": "ssh"})
    finally:
        release.set()
    assert not result.get("failed") and len(run.calls) == 1 and time.monotonic() - started < 5


def test_check_mode_verify_and_other_roots_need_no_opt_in() -> None:
    check = action(tune_action, {"root": "/"}, check=True)
    assert not check.run(task_vars=host()).get("failed") and len(check.calls) == 1
    audit = action(verify_action, {"root": "/"})
    assert not audit.run(task_vars=host()).get("failed") and len(audit.calls) == 1
    tree = action(tune_action, {"root": "/srv/lab/node1"})
    assert not tree.run(task_vars=host()).get("failed") and len(tree.calls) == 1
    remote = action(tune_action, {"root": "/"}, transport="ssh")
    assert not remote.run(task_vars={"inventory_hostname": "gpu1", "ansible_connection": "ssh"}).get("failed")
    other = action(tune_action, {"root": "/"}, transport="ssh")
    assert not other.run(task_vars={"inventory_hostname": "gpu1", "ansible_host": "198.51.100.7",
                                    "ansible_connection": "ssh"}).get("failed")


def test_a_bad_opt_in_value_is_refused() -> None:
    run = action(tune_action, {"root": "/"})
    result = run.run(task_vars=host(nodetune_controller_allowed="perhaps"))
    assert result.get("failed") and run.calls == []
    assert "nodetune_controller_allowed='perhaps' is not valid: expected true or false" in result["msg"]


def test_variables_are_coerced_as_argument_specs_do() -> None:
    run = action(tune_action, {"root": "/srv/lab/node1"})
    result = run.run(task_vars=host(nodetune_smt_offline_allowed="true", nodetune_vm_dirty_ratio="30",
                                    nodetune_ipoib_mtu_change_allowed="yes", nodetune_cpu_enabled="no"))
    assert not result.get("failed"), result.get("msg")
    sent = run.calls[0][1]["areas"]
    assert sent["smt"]["nodetune_smt_offline_allowed"] is True
    assert sent["sysctl"]["nodetune_vm_dirty_ratio"] == 30
    assert sent["infiniband"]["nodetune_ipoib_mtu_change_allowed"] is True
    assert "cpu" not in sent


def test_null_leaves_a_setting_alone_whatever_its_default() -> None:
    """The documented `null` (the bytes form of the dirty limits, a scheduler left alone): Ansible's validator took
    null only where the default is null, so `-e nodetune_vm_dirty_ratio=null` was refused; now it reaches the area
    as null, never replaced by the default."""
    run = action(tune_action, {"root": "/srv/lab/node1"})
    result = run.run(task_vars=host(nodetune_vm_dirty_ratio=None, nodetune_vm_dirty_bytes=34359738368,
                                    nodetune_kernel_numa_balancing=None, nodetune_nvme_scheduler=None,
                                    nodetune_cpu_governor=None, nodetune_nvme_nr_requests=None))
    assert not result.get("failed"), result.get("msg")
    sent = run.calls[0][1]["areas"]
    assert sent["sysctl"]["nodetune_vm_dirty_ratio"] is None
    assert sent["sysctl"]["nodetune_vm_dirty_bytes"] == 34359738368
    assert sent["sysctl"]["nodetune_kernel_numa_balancing"] is None
    assert sent["nvme"]["nodetune_nvme_scheduler"] is None and sent["nvme"]["nodetune_nvme_nr_requests"] is None
    assert sent["cpu"]["nodetune_cpu_governor"] is None


def test_real_type_errors_are_refused_naming_the_variable() -> None:
    run = action(tune_action, {"root": "/srv/lab/node1"})
    result = run.run(task_vars=host(nodetune_vm_dirty_ratio="twenty", nodetune_smt_policy="sometimes"))
    assert result.get("failed") and run.calls == []
    assert "nodetune_vm_dirty_ratio='twenty' is not valid: expected a int" in result["msg"]
    assert "nodetune_smt_policy must be one of: keep, offline_siblings, control_off, got: sometimes" in result["msg"]


def test_an_area_role_applies_its_area_alone() -> None:
    run = action(tune_action, {"root": "/srv/lab/node1"}, role="nodetune.instinct.nvme")
    assert not run.run(task_vars=host(nodetune_nvme_scheduler="mq-deadline")).get("failed")
    sent = run.calls[0][1]
    assert list(sent["areas"]) == ["nvme"] and sent["bios"] == {}
    assert sent["areas"]["nvme"]["nodetune_nvme_scheduler"] == "mq-deadline"
    disabled = action(tune_action, {"root": "/srv/lab/node1"}, role="nvme")
    result = disabled.run(task_vars=host(nodetune_nvme_enabled=False))
    assert result.get("skipped") and disabled.calls == []


def test_the_tune_role_takes_every_area_the_tags_select() -> None:
    run = action(tune_action, {"root": "/srv/lab/node1"}, role="tune")
    run.run(task_vars=host(ansible_run_tags=["all"], ansible_skip_tags=["smt"]))
    on = {name for name in areas.AREAS if areas.defaults(name)[areas.enabled_variable(name)]}  # opt-ins are off
    assert {"limits", "slurm"} <= set(areas.AREAS) - on
    assert set(run.calls[0][1]["areas"]) == on - {"smt"}
    only = action(tune_action, {"root": "/srv/lab/node1"}, role="tune")
    only.run(task_vars=host(ansible_run_tags=["nvme"]))
    assert list(only.calls[0][1]["areas"]) == ["nvme"] and only.calls[0][1]["bios"] == {}


# ------------------------------------------------------------------------------------------------ issue 25 items 3, 8
def test_nodetune_full_diff_asks_the_module_for_every_value() -> None:
    """The diff is grouped and bounded unless nodetune_full_diff is true (apply and revert alike); a value that is
    not a boolean is refused naming the variable, before any call."""
    for state in ("present", "reverted"):
        grouped = action(tune_action, {"root": "/srv/lab/node1", "state": state})
        grouped.run(task_vars=host())
        assert "full_diff" not in grouped.calls[0][1]
        whole = action(tune_action, {"root": "/srv/lab/node1", "state": state})
        whole.run(task_vars=host(nodetune_full_diff="true"))
        assert whole.calls[0][1]["full_diff"] is True
    for plugin in (tune_action, verify_action):
        refused = action(plugin, {"root": "/srv/lab/node1"})
        result = refused.run(task_vars=host(nodetune_full_diff="everything"))
        assert result.get("failed") and refused.calls == []
        assert "nodetune_full_diff='everything' is not valid: expected true or false" in result["msg"]


def drifting_findings(count: int = 1700) -> list[dict[str, Any]]:
    """A full-size node's findings, ten of them drifting in two checks (as the verify module returns them)."""
    findings = [{"id": "irq.nic_local", "target": f"irq {n}", "expected": str(n % 96), "actual": str(n % 96),
                 "status": "ok", "severity": "medium", "source": "setting", "waiver": None,
                 "remedy": "run the nodetune apply (site.yml or playbooks/apply.yml, --tags irq_affinity) to restore "
                           "it; NIC completion vector pinned to a core of its NUMA node"} for n in range(count - 10)]
    findings += [{"id": "cpu.governor", "target": f"cpu{n}", "expected": "performance", "actual": "powersave",
                  "status": "drift", "severity": "high", "source": "setting", "waiver": None,
                  "remedy": "run the nodetune apply to restore it"} for n in range(3, 11)]
    findings += [{"id": "bios.iommu", "target": target, "expected": "pci=realloc=off", "actual": "absent",
                  "status": "drift", "severity": "medium", "source": "bios", "waiver": None,
                  "remedy": "add pci=realloc=off to the kernel command line"} for target in ("pci=realloc", "iommu")]
    return findings


def module_audit(findings: list[dict[str, Any]]) -> dict[str, Any]:
    """The verify module's result in the compact transport the actions ask for (findings as one JSON text)."""
    drift = sorted({f["id"] for f in findings if f["status"] == "drift"})
    summary = {"counts": {"ok": len(findings) - 10, "drift": 10, "not_applicable": 0, "unsupported": 0,
                          "waived": 0}, "drift": True, "drift_ids": drift}
    report = {"schema": 1, "node": "node1", "root": "/srv/lab/node1", "timestamp": 1767225600.0,
              "generated_at": "2026-01-01T00:00:00Z", "summary": summary, "platform": {}, "notes": [],
              "inventory": {}}
    return {"changed": False, "drift": True, "findings": json.dumps(findings), "summary": summary,
            "report": report, "notes": []}


def returning(plugin: Any, args: dict[str, Any], result: dict[str, Any]) -> Any:
    run = action(plugin, args)

    def execute(module_name: str, module_args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        run.calls.append((module_name, module_args))
        return json.loads(json.dumps(result))

    run._execute_module = execute
    return run


def test_a_node_failed_for_drift_prints_a_bounded_result_and_loses_nothing(tmp_path: Path) -> None:
    """verify.yml -e nodetune_verify_fail_on_drift=true printed one fatal line of 636,564 characters (every finding,
    twice): the failed result is now under 4 KB - counts per check id, the first findings, the report file's path -
    and the findings are read back from the report file by the fleet reports and the API."""
    from ansible_collections.nodetune.instinct.plugins.filter.report import fleet_digests

    from nodetune.api import _VERIFY, NodeResult, _absorb

    findings = drifting_findings()
    run = returning(verify_action, {"root": "/srv/lab/node1", "role_variables": True}, module_audit(findings))
    result = run.run(task_vars=host(nodetune_verify_fail_on_drift=True, nodetune_report_dir=str(tmp_path)))
    report_file = tmp_path / "nodes" / "node1.json"
    assert result["failed"] and result["failed_on_drift"]
    assert len(json.dumps(result)) < 4096, len(json.dumps(result))
    assert result["msg"].startswith("nodetune verify found drift on node1: 10 finding(s) of 2 check(s) drift: "
                                    "cpu.governor (8), bios.iommu (2); first: cpu.governor[cpu3]: expected "
                                    "performance, found powersave; ")
    assert result["msg"].endswith(f"; ...; every finding, with its remedy, is in {report_file}")
    assert "findings" not in result and "report" not in result and result["findings_file"] == str(report_file)
    assert len(json.loads(report_file.read_text())["findings"]) == 1700

    digests, _facts = fleet_digests({"node1": {"nodetune_verify_result": result}}, ["node1"])
    assert digests[0]["outcome"] == "ok" and digests[0]["totals"]["drift"] == 10
    assert digests[0]["totals"]["ok"] == 1690
    node = NodeResult(host="node1")
    assert _absorb(node, _VERIFY, result) is None and len(node.findings) == 1700

    # without a report file the result is the only copy: it keeps every finding, with the same message
    kept = returning(verify_action, {"root": "/srv/lab/node1", "role_variables": True}, module_audit(findings))
    whole = kept.run(task_vars=host(nodetune_verify_fail_on_drift=True, nodetune_verify_write_reports=False))
    assert len(whole["findings"]) == 1700 and "no report file" in whole["msg"]


def test_a_tune_failed_for_drift_moves_its_changes_beside_the_report(tmp_path: Path) -> None:
    """site.yml with nodetune_verify_fail_on_drift: the tune result carries every change too (a fresh node: ~1,700
    and the files whole). They go to <report dir>/tune/<host>.json; the apply summary reads them back."""
    from ansible_collections.nodetune.instinct.plugins.filter.report import fleet_digests, nodetune_apply_summary

    actions = [{"id": "cpu.governor", "target": f"cpu{n}", "path": f"/sys/devices/system/cpu/cpu{n}/cpufreq/"
                "scaling_governor", "kind": "attr", "before": "powersave", "after": "performance",
                "reboot_required": False, "disruptive": False, "reason": "performance governor"} for n in range(384)]
    module = {"changed": True, "actions": actions, "reboot_required": False, "journal": "/var/lib/nodetune/j.json",
              "settings": 1700, "layout": {}, "notes": [], "bios": [], "verify": module_audit(drifting_findings())}
    run = returning(tune_action, {"root": "/srv/lab/node1", "verify": True}, module)
    result = run.run(task_vars=host(nodetune_verify_fail_on_drift=True, nodetune_report_dir=str(tmp_path)))
    assert result["failed"] and result["failed_on_drift"] and len(json.dumps(result)) < 4096
    assert result["spill_file"] == str(tmp_path / "tune" / "node1.json") and "actions" not in result
    assert result["verify"]["findings_file"] == str(tmp_path / "nodes" / "node1.json")
    assert "cpu.governor (8), bios.iommu (2)" in result["msg"]

    hostvars = {"node1": {"tune_result": result}}
    summary = nodetune_apply_summary(hostvars, ["node1"])
    assert summary["changes_by_id"] == [{"id": "cpu.governor", "nodes": 1, "values": 384}]
    digests, _facts = fleet_digests(hostvars, ["node1"], "tune_result.verify")
    assert digests[0]["totals"]["drift"] == 10
