"""Verify end to end on a simulated node: apply, inject drift the way it happens on real nodes, verify.

The node is a small MI300X-shaped tree from the project's generator (simnode); the areas are built from the
roles' own defaults and the lab inventory's variables, grouped by the same variable patterns the area roles use,
so apply and verify see what a playbook run would. Drift is injected through the simulated kernel where the kernel
has side effects (a scheduler change resets nr_requests), as an operator or a package update would cause it.
The module itself runs behind its action plugin, in this process as Ansible runs it on a node
(``tests/support/inprocess.py``: argument spec, check mode, diff, the Prometheus textfile).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine, node
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import bios, health, verify
from ansible_collections.nodetune.instinct.plugins.module_utils.audit.waivers import apply_waivers, validate_waivers
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.lab.plugins.module_utils import simnode
from ansible_collections.nodetune.lab.plugins.module_utils.simservices import SimServices
from prometheus_client.parser import text_string_to_metric_families

from tests.support.inprocess import adhoc
from tests.support.lab_vars import AREAS
from tests.support.specs import AUDIT_SPEC as SPEC
from tests.support.trees import tree_digest

pytestmark = pytest.mark.usefixtures("simulated_kernel")  # applies to simulated nodes in-process


@pytest.fixture(scope="module")
def tuned_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated node, tuned once with the lab's variables (copied per test)."""
    dest = tmp_path_factory.mktemp("verify") / "tuned"
    simnode.build(SPEC, str(dest))
    state = node.load(str(dest), AREAS, {})
    result = engine.apply(state.root, state.settings, services=state.services)
    assert result["changed"] and not result.get("unconfirmed")
    return dest


@pytest.fixture
def tuned(tuned_template: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "node"
    shutil.copytree(tuned_template, dest, symlinks=True)
    return dest


def findings(root: Path, bios_config: dict | None = None) -> list:
    state = node.load(str(root), AREAS, {})
    return (verify.verify_settings(state, AREAS) + bios.check(state.topology, state.layout, bios_config or {})
            + health.check(state.root, state.topology, {}))


def drifted(found: list) -> set[tuple[str, str]]:
    return {(f.id, f.target) for f in found if f.status == "drift"}


# ------------------------------------------------------------------------------------------------ module_utils
def test_a_freshly_tuned_node_has_no_drift(tuned: Path) -> None:
    found = findings(tuned)
    assert drifted(found) == set()
    ids = {f.id for f in found}
    # every area is checked, and the BIOS-level and health checks ride along
    for expected in ("smt.siblings_offline", "cpu.governor", "cpu.idle_state", "irq.nic_local", "irq.irqbalance",
                     "ib.mtu", "nvme.scheduler", "nvme.nr_requests", "sysctl.vm.dirty_ratio", "rocm.env",
                     "bios.pcie_link", "bios.iommu", "bios.smt", "bios.nps", "bios.above_4g", "health.gpu_temp",
                     "health.gpu_power", "health.ib_port", "health.pcie_link"):
        assert expected in ids, expected
    assert {f.status for f in found} <= {"ok", "not_applicable", "unsupported"}


def test_verify_reports_exactly_the_injected_drift(tuned: Path) -> None:
    state = node.load(str(tuned), AREAS, {})
    root = Root(str(tuned))
    sibling = int(state.layout["smt_offline"][0])
    pinned = state.layout["irq_affinity"][0]
    elsewhere = min(c for c in range(64) if c not in pinned["cpus"] and c not in state.layout["smt_offline"])
    # what happens on real nodes: a scheduler reset by a package's udev rule (the kernel resets nr_requests too),
    # a governor changed by a power daemon, a sibling back online, a NIC IRQ moved, a sysctl changed, the ROCm
    # profile edited by hand, irqbalance enabled and started again by a package update
    root.write("sys/block/nvme0n1/queue/scheduler", "mq-deadline")
    root.write("sys/devices/system/cpu/cpu3/cpufreq/scaling_governor", "powersave")
    root.write(f"sys/devices/system/cpu/cpu{sibling}/online", "1")
    root.write(f"proc/irq/{pinned['irq']}/smp_affinity_list", str(elsewhere))
    root.write("proc/sys/vm/dirty_ratio", "40")
    profile = tuned / "etc/profile.d/nodetune-rocm.sh"
    profile.write_text(profile.read_text() + "export RCCL_ALGO=Ring\n")
    SimServices(root).set_state("irqbalance.service", {"enabled": "yes", "active": "yes"})

    assert drifted(findings(tuned)) == {
        ("nvme.scheduler", "nvme0n1"),
        ("nvme.nr_requests", "nvme0n1"),
        ("cpu.governor", "cpu3"),
        ("smt.siblings_offline", f"cpu{sibling}"),
        ("irq.nic_local", f"irq {pinned['irq']}"),
        ("irq.nic_local", f"irq {pinned['irq']} effective"),
        ("sysctl.vm.dirty_ratio", "vm.dirty_ratio"),
        ("rocm.env", "/etc/profile.d/nodetune-rocm.sh"),
        ("irq.irqbalance", "irqbalance.service"),
    }


def test_apply_again_then_verify_is_clean(tuned: Path) -> None:
    Root(str(tuned)).write("sys/block/nvme0n1/queue/scheduler", "kyber")
    assert drifted(findings(tuned)) == {("nvme.scheduler", "nvme0n1"), ("nvme.nr_requests", "nvme0n1")}
    state = node.load(str(tuned), AREAS, {})
    engine.apply(state.root, state.settings, services=state.services)
    assert drifted(findings(tuned)) == set()


def test_waivers_turn_drift_into_waived_until_they_expire(tuned: Path) -> None:
    Root(str(tuned)).write("proc/sys/vm/dirty_ratio", "40")
    Root(str(tuned)).write("proc/sys/kernel/numa_balancing", "1")
    found = findings(tuned)
    waivers = validate_waivers([
        {"id": "sysctl.vm.dirty_ratio", "target": "vm.dirty_ratio", "reason": "benchmark in progress",
         "expires": "2026-06-30"},
        {"id": "sysctl.kernel.numa_balancing", "reason": "old waiver", "expires": "2026-01-31"},
    ])
    notes = apply_waivers(found, waivers, today="2026-03-01")
    status = {(f.id, f.target): f.status for f in found if f.id.startswith("sysctl.")}
    assert status[("sysctl.vm.dirty_ratio", "vm.dirty_ratio")] == "waived"
    assert status[("sysctl.kernel.numa_balancing", "kernel.numa_balancing")] == "drift"
    assert notes == ["waiver for sysctl.kernel.numa_balancing[kernel.numa_balancing] expired on 2026-01-31: "
                     "reported as drift again"]


def test_bios_and_health_drift_on_a_badly_set_up_node(tmp_path: Path) -> None:
    spec = json.loads(json.dumps(SPEC))
    spec["kernel"]["cmdline"] = "BOOT_IMAGE=/vmlinuz root=/dev/sda ro amd_iommu=on iommu=pt"
    # above the GPU's own limits (issue 14.6): the edge within 5 C of its temp1_crit (100 C in the simulation),
    # the power above power1_cap + 5 % (the MI300X's 750 W cap: 640 W would be normal load)
    spec["gpus"][1].update({"link": {"speed": 16, "width": 16}, "temp_c": 97, "power_w": 800})
    spec["nics"][0]["state"] = "DOWN"
    simnode.build(spec, str(tmp_path / "node"))
    found = findings(tmp_path / "node")
    assert drifted(found) - {(f.id, f.target) for f in found if f.source in ("setting", "layout")} == {
        ("bios.iommu", "pci=realloc"),
        ("bios.iommu", "amd_iommu"),
        ("bios.pcie_link", "0000:85:00.0"),
        ("health.gpu_temp", "0000:85:00.0"),
        ("health.gpu_power", "0000:85:00.0"),
        ("health.ib_port", "mlx5_0/1"),
        # no pci=disable_acs_redir= on this command line: with the IOMMU on, the kernel turns ACS redirect on
        *(("health.pcie_acs", device["bdf"]) for device in spec["gpus"] + spec["nics"]),
    }


# ------------------------------------------------------------------------------------------------ the module
def test_module_reports_writes_only_the_textfile_and_never_in_check_mode(tuned: Path) -> None:
    Root(str(tuned)).write("proc/sys/vm/dirty_ratio", "40")
    Root(str(tuned)).write("proc/sys/kernel/numa_balancing", "1")
    textfile = "var/lib/node_exporter/textfile_collector/nodetune.prom"
    before = tree_digest(tuned)
    args = {"root": str(tuned), "areas": AREAS, "node_name": "mini300x-01", "textfile_path": "/" + textfile,
            "waivers": [{"id": "sysctl.kernel.numa_balancing", "reason": "tuning experiment",
                         "expires": "2999-12-31"}]}

    rc, res = adhoc("nodetune.instinct.verify", args, check=True)
    assert rc == 0 and res["changed"] is True  # the textfile would be created (issue 25 item 8)
    assert res["textfile"] == {"path": "/" + textfile, "written": False, "changed": True, "reason": "check mode"}
    assert tree_digest(tuned) == before

    rc, res = adhoc("nodetune.instinct.verify", args)
    assert rc == 0 and res["changed"] is True and res["drift"] is True
    assert res["summary"]["drift_ids"] == ["sysctl.vm.dirty_ratio"]
    assert res["summary"]["counts"]["waived"] == 1
    assert res["report"]["node"] == "mini300x-01" and res["report"]["platform"]["platform"] == "mi300x"
    after = tree_digest(tuned)
    assert {k: v for k, v in after.items() if k in before} == before  # nothing else changed
    assert set(after) - set(before) <= {textfile, *(str(p) for p in Path(textfile).parents if str(p) != ".")}
    families = {f.name: f for f in text_string_to_metric_families((tuned / textfile).read_text())}
    drift = {s.labels["check"]: s.value for s in families["nodetune_drift"].samples}
    assert drift["sysctl.vm.dirty_ratio"] == 1
    assert drift["sysctl.kernel.numa_balancing"] == 0  # waived
    assert sum(drift.values()) == 1
    assert len(drift) == len({f["id"] for f in res["findings"]})  # one series per check id, not per target


def test_the_textfile_is_a_change_only_when_its_metrics_change(tuned: Path) -> None:
    """Issue 25 item 8: verify wrote the Prometheus textfile and reported changed=0. The file is rewritten at every
    run (its timestamp sample and its mtime, node_exporter's node_textfile_mtime_seconds, say when the node was last
    verified), but only new metrics are a change: a rerun that finds the node as before reports changed=0; check
    mode says whether it would change and writes nothing; --diff shows the lines."""
    textfile = tuned / "var/lib/node_exporter/textfile_collector/nodetune.prom"
    args = {"root": str(tuned), "areas": AREAS, "node_name": "mini300x-01", "textfile_path": "/" + str(
        textfile.relative_to(tuned)), "bios": {"nodetune_bios_check_enabled": False},
        "health": {"nodetune_health_enabled": False}}

    rc, res = adhoc("nodetune.instinct.verify", args)
    assert rc == 0 and res["changed"] is True and res["textfile"]["written"] and textfile.exists()
    first = textfile.read_text()
    rc, res = adhoc("nodetune.instinct.verify", args)
    assert rc == 0 and res["changed"] is False and res["textfile"] == {"path": args["textfile_path"],
                                                                       "written": True, "changed": False}
    again = textfile.read_text()
    stamp = "nodetune_last_verify_timestamp_seconds "
    assert [line for line in again.splitlines() if line.startswith(stamp)] != \
        [line for line in first.splitlines() if line.startswith(stamp)]  # rewritten: fresh for staleness alerts
    assert [line for line in again.splitlines() if not line.startswith(stamp)] == \
        [line for line in first.splitlines() if not line.startswith(stamp)]

    Root(str(tuned)).write("proc/sys/vm/dirty_ratio", "40")
    rc, res = adhoc("nodetune.instinct.verify", args, check=True, diff=True)
    assert rc == 0 and res["changed"] is True and res["textfile"]["written"] is False
    assert textfile.read_text() == again  # check mode: not written
    assert '-nodetune_drift{check="sysctl.vm.dirty_ratio"} 0' in res["_output"]
    assert '+nodetune_drift{check="sysctl.vm.dirty_ratio"} 1' in res["_output"]
    rc, res = adhoc("nodetune.instinct.verify", args)
    assert rc == 0 and res["changed"] is True and 'nodetune_drift{check="sysctl.vm.dirty_ratio"} 1' in \
        textfile.read_text()
    rc, res = adhoc("nodetune.instinct.verify", args, check=True)
    assert rc == 0 and res["changed"] is False


def test_revert_in_check_mode_shows_what_it_would_restore(tmp_path: Path) -> None:
    """Issue 25 item 8: revert's --check --diff showed no diff. The module now returns, for each journal entry, the
    node's current value and the baseline it would restore, grouped and bounded like the apply's diff, and writes
    nothing; nodetune_full_diff (the module's full_diff) gives every value."""
    dest = tmp_path / "node"
    simnode.build(SPEC, str(dest))
    rc, res = adhoc("nodetune.instinct.tune", {"root": str(dest), "areas": AREAS})
    assert rc == 0 and res["changed"]
    tuned = tree_digest(dest)
    rc, res = adhoc("nodetune.instinct.tune", {"root": str(dest), "state": "reverted"}, check=True, diff=True)
    assert rc == 0 and res["changed"] and tree_digest(dest) == tuned
    diff = res["_output"].split("+++ after: node (journal baseline)\n", 1)[1].split("\nlocalhost | ", 1)[0]
    assert len(diff.splitlines()) + 2 <= 200
    assert "-/sys/devices/system/cpu/cpu{16-31}/online (16 values) = 0" in diff
    assert "+/sys/devices/system/cpu/cpu{16-31}/online (16 values) = 1" in diff
    assert "-/proc/sys/kernel/numa_balancing = 0\n+/proc/sys/kernel/numa_balancing = 1" in diff
    assert "+/etc/sysctl.d/90-nodetune-sysctl.conf = <absent>" in diff
    rc, res = adhoc("nodetune.instinct.tune", {"root": str(dest), "state": "reverted", "full_diff": True},
                    check=True, diff=True)
    assert rc == 0 and "+/sys/devices/system/cpu/cpu17/online = 1" in res["_output"]
    assert tree_digest(dest) == tuned


def test_module_refuses_bad_variables_by_name(tuned: Path) -> None:
    rc, res = adhoc("nodetune.instinct.verify", {"root": str(tuned), "bios": {"nodetune_bios_smt": "of"},
                                                 "health": {"nodetune_health_gpu_power_max_w": "lots"}})
    assert rc != 0
    assert "nodetune_bios_smt='of' is not valid" in res["msg"]
    assert "nodetune_health_gpu_power_max_w='lots' is not valid" in res["msg"]
    rc, res = adhoc("nodetune.instinct.verify", {"root": str(tuned), "waivers": [{"id": "cpu.governor"}]})
    assert rc != 0 and "waiver #1 has no reason" in res["msg"]


def test_tune_with_bios_policy_fail_refuses_before_any_write(tmp_path: Path) -> None:
    spec = json.loads(json.dumps(SPEC))
    spec["kernel"]["cmdline"] = "BOOT_IMAGE=/vmlinuz root=/dev/sda ro amd_iommu=on iommu=pt pci=realloc=off"
    dest = tmp_path / "node"
    simnode.build(spec, str(dest))
    before = tree_digest(dest)
    rc, res = adhoc("nodetune.instinct.tune", {"root": str(dest), "areas": AREAS,
                                               "bios": {"nodetune_bios_policy": "fail"}})
    assert rc != 0
    assert "nothing was written" in res["msg"] and "bios.iommu[amd_iommu]" in res["msg"]
    assert [f["id"] for f in res["bios"]] == ["bios.iommu"]
    assert tree_digest(dest) == before
    rc, res = adhoc("nodetune.instinct.tune", {"root": str(dest), "areas": AREAS,
                                               "bios": {"nodetune_bios_policy": "warn"}}, check=True)
    assert rc == 0 and res["changed"]
    assert [f["target"] for f in res["bios"]] == ["amd_iommu"]
    assert "BIOS-level check: bios.iommu[amd_iommu]" in res["_output"]  # the warning
    assert tree_digest(dest) == before


# ------------------------------------------------------------------------------------------------ tune + verify
def test_tune_with_verify_audits_the_node_it_just_tuned_in_the_same_call(tmp_path: Path) -> None:
    """site.yml's one call per node: the audit after a changing apply sees the node as written (rediscovered:
    siblings offline), equals what the verify module reports on its own, and a bad waiver is refused before any
    write."""
    dest = tmp_path / "node"
    simnode.build(SPEC, str(dest))
    before = tree_digest(dest)
    verify_options = {"node_name": "mini300x-01", "health": {},
                      "waivers": [{"id": "bios.smt", "reason": "lab", "expires": "2999-12-31"}]}

    rc, res = adhoc("nodetune.instinct.tune", {"root": str(dest), "areas": AREAS,
                                               "verify": dict(verify_options, waivers=[{"id": "bios.smt"}])})
    assert rc != 0 and "nothing was written" in res["msg"] and "has no reason" in res["msg"]
    assert tree_digest(dest) == before

    rc, res = adhoc("nodetune.instinct.tune", {"root": str(dest), "areas": AREAS, "verify": verify_options},
                    check=True)
    assert rc == 0 and res["changed"] and tree_digest(dest) == before
    # check mode audits the untouched node: everything the apply would change is drift
    would_change = {(a["id"], a["target"]) for a in res["actions"]}
    # through the action plugin the audit's findings come back as one JSON text (cheap for Ansible to carry)
    assert isinstance(res["verify"]["findings"], str) and "findings" not in res["verify"]["report"]
    reported = {(f["id"], f["target"]) for f in json.loads(res["verify"]["findings"])
                if f["status"] == "drift" and f["source"] == "setting"}
    assert ("cpu.governor", "cpu1") in reported and ("cpu.governor", "cpu1") in would_change
    assert {i for i, _ in reported} == {i for i, _ in would_change}

    rc, res = adhoc("nodetune.instinct.tune", {"root": str(dest), "areas": AREAS, "verify": verify_options})
    assert rc == 0 and res["changed"]
    audit = dict(res["verify"], findings=json.loads(res["verify"]["findings"]))
    assert audit["changed"] is False and audit["report"]["node"] == "mini300x-01"
    assert [f for f in audit["findings"] if f["source"] == "setting" and f["status"] == "drift"] == []
    online = (dest / "sys/devices/system/cpu/cpu16/online").read_text().strip()
    assert online == "0"  # the sibling of cpu0 went offline, and the audit passed on that node
    rc, alone = adhoc("nodetune.instinct.verify", {"root": str(dest), "areas": AREAS, **verify_options})
    assert rc == 0
    key = ("id", "target", "status", "expected", "actual")
    assert [tuple(f[k] for k in key) for f in audit["findings"]] == [tuple(f[k] for k in key)
                                                                     for f in alone["findings"]]


def test_an_audit_that_fails_after_the_apply_says_the_apply_stands(tmp_path: Path, monkeypatch, capsys) -> None:
    """The writes are made and journaled before the audit: if the audit cannot run, the failure must not claim
    that nothing was written, and it carries the apply's own result (changed, actions)."""
    from ansible.module_utils.testing import patch_module_args
    from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import SettingError
    from ansible_collections.nodetune.instinct.plugins.modules import tune as tune_module

    dest = tmp_path / "node"
    simnode.build(SPEC, str(dest))

    def broken_audit(*_args, **_kwargs):
        raise SettingError(["the node could not be planned again"])

    monkeypatch.setattr(tune_module, "audit_after_apply", broken_audit)
    with patch_module_args({"root": str(dest), "areas": AREAS, "verify": {}}), pytest.raises(SystemExit) as exited:
        tune_module.main()
    assert exited.value.code == 1
    res = json.loads(capsys.readouterr().out)
    assert res["failed"] and res["changed"] and res["actions"]
    assert res["msg"].startswith(f"nodetune applied the tuning ({len(res['actions'])} change(s), journaled)")
    assert "the node could not be planned again" in res["msg"] and "nothing was written" not in res["msg"]
    assert (dest / "var/lib/nodetune/journal.json").exists()
