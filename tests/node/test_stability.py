"""The read-only stability checks of issue 15 (stability.py) on simulated nodes: healthy as built, then each broken
the way it breaks on a real node (an xGMI link that did not train, RAS errors, IB port errors, memlock limits gone,
another performance level or power cap)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import health
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.support.specs import AUDIT_SPEC as SPEC
from tests.support.trees import runtime_tree_digest

NEW = ("pcie_acs", "xgmi_links", "gpu_ras", "ib_counters", "memlock", "gpu_perf_level", "gpu_power_cap")


@pytest.fixture
def root(fresh_tree: Callable[[Any], Path]) -> Path:
    """A node of the test's own: built again in memory, which costs less than copying a built one."""
    return fresh_tree(SPEC)


def run(root: Path, **config: object) -> list:
    variables = {"nodetune_health_checks": list(NEW)}
    variables.update(("nodetune_health_" + k, v) for k, v in config.items())
    return [f.to_dict() for f in health.check(Root(str(root)), discover(str(root)), variables)]


def statuses(found: list, check: str) -> dict:
    return {f["target"]: f["status"] for f in found if f["id"] == "health." + check}


def gpu_dir(root: Path, index: int = 0) -> Path:
    return root / "sys/bus/pci/devices" / SPEC["gpus"][index]["bdf"]


def test_a_fresh_node_is_healthy(root: Path) -> None:
    found = run(root)
    assert [f for f in found if f["status"] == "drift"] == []
    assert set(statuses(found, "xgmi_links")) == {g["bdf"] for g in SPEC["gpus"]}
    assert set(statuses(found, "gpu_ras").values()) == {"ok"}
    assert set(statuses(found, "pcie_acs")) == {g["bdf"] for g in SPEC["gpus"]} | {n["bdf"] for n in SPEC["nics"]}
    assert set(statuses(found, "pcie_acs").values()) == {"ok"}
    assert len(statuses(found, "ib_counters")) == 2 and set(statuses(found, "ib_counters").values()) == {"ok"}
    assert statuses(found, "memlock") == {"limits.d": "ok", "systemd": "ok"}
    assert statuses(found, "gpu_perf_level") == {"-": "not_applicable"}  # nothing declared
    assert statuses(found, "gpu_power_cap") == {"-": "not_applicable"}


def test_uncorrectable_ras_errors_are_drift(root: Path) -> None:
    (gpu_dir(root) / "ras/umc_err_count").write_text("ue: 2\nce: 5\n")
    found = run(root)
    bdf = SPEC["gpus"][0]["bdf"]
    assert statuses(found, "gpu_ras")[bdf] == "drift"
    assert [f["actual"] for f in found if f["id"] == "health.gpu_ras" and f["target"] == bdf] == [
        "2 uncorrectable, 5 correctable"]


def test_ib_port_errors_above_the_threshold_are_drift(root: Path) -> None:
    hca = sorted((root / "sys/class/infiniband").iterdir())[0]
    (hca / "ports/1/counters/symbol_error").write_text("12\n")
    assert statuses(run(root), "ib_counters")[hca.name + "/1"] == "drift"
    assert statuses(run(root, ib_counter_max={"symbol_error": 20}), "ib_counters")[hca.name + "/1"] == "ok"


@pytest.mark.parametrize("counter, tolerated, flagged", [
    ("symbol_error", 10, 11), ("link_downed", 10, 11), ("port_rcv_errors", 10, 11), ("port_xmit_discards", 100, 101),
])
def test_default_ib_thresholds_tolerate_a_few_errors(root: Path, counter: str, tolerated: int, flagged: int) -> None:
    """The defaults are infiniband-diags' error_thresholds: a fabric with a few errors since the counters were
    cleared verifies ok, a count above the threshold is drift and names the counter."""
    port = sorted((root / "sys/class/infiniband").iterdir())[0] / "ports/1/counters"
    target = port.parent.parent.parent.name + "/1"
    (port / counter).write_text(f"{tolerated}\n")
    assert statuses(run(root), "ib_counters")[target] == "ok"
    (port / counter).write_text(f"{flagged}\n")
    found = [f for f in run(root) if f["id"] == "health.ib_counters" and f["target"] == target]
    assert found[0]["status"] == "drift" and f"({counter})" in found[0]["remedy"]
    assert f"{counter} <= {tolerated}" in found[0]["expected"]


def test_an_ib_threshold_given_keeps_the_other_defaults(root: Path) -> None:
    port = sorted((root / "sys/class/infiniband").iterdir())[0] / "ports/1/counters"
    (port / "port_xmit_discards").write_text("60\n")
    (port / "symbol_error").write_text("1\n")
    found = run(root, ib_counter_max={"symbol_error": 0})
    drift = [f for f in found if f["id"] == "health.ib_counters" and f["status"] == "drift"]
    assert len(drift) == 1 and "(symbol_error)" in drift[0]["remedy"]  # 60 discards stay under the default 100


def test_memlock_limits_gone_are_drift(root: Path) -> None:
    (root / "etc/security/limits.d/90-memlock.conf").write_text("* hard memlock 65536\n")
    (root / "etc/systemd/system.conf.d/90-memlock.conf").unlink()
    found = run(root)
    assert statuses(found, "memlock") == {"limits.d": "drift", "systemd": "drift"}
    assert [f["actual"] for f in found if f["target"] == "limits.d"] == ["soft unset, hard 65536"]


def test_perf_level_and_power_cap_against_the_declared_values(root: Path) -> None:
    hwmon = next((gpu_dir(root) / "hwmon").iterdir())
    cap_w = int((hwmon / "power1_cap").read_text()) / 1e6
    found = run(root, gpu_perf_level="auto", gpu_power_cap_w=cap_w)
    assert set(statuses(found, "gpu_perf_level").values()) == {"ok"}
    assert set(statuses(found, "gpu_power_cap").values()) == {"ok"}
    (gpu_dir(root) / "power_dpm_force_performance_level").write_text("manual\n")
    (hwmon / "power1_cap").write_text(str(int((cap_w - 100) * 1e6)))
    found = run(root, gpu_perf_level="auto", gpu_power_cap_w=cap_w)
    bdf = SPEC["gpus"][0]["bdf"]
    assert statuses(found, "gpu_perf_level")[bdf] == "drift" and statuses(found, "gpu_power_cap")[bdf] == "drift"


@pytest.mark.parametrize("config, words", [
    ({"nodetune_health_ib_counter_max": {"symbol_errors": 1}}, ["unknown counter 'symbol_errors'", "symbol_error"]),
    ({"nodetune_health_ib_counter_max": {"link_downed": "many"}},
     ["nodetune_health_ib_counter_max.link_downed='many'", "whole number of errors, 0 or more"]),
    ({"nodetune_health_ib_counter_max": {"port_xmit_discards": -5}},
     ["nodetune_health_ib_counter_max.port_xmit_discards=-5", "0 or more (default 100)"]),
    ({"nodetune_health_ib_counter_max": [10]}, ["nodetune_health_ib_counter_max=[10]", "port_xmit_discards"]),
    ({"nodetune_health_gpu_perf_level": "turbo"}, ["nodetune_health_gpu_perf_level='turbo'", "perf_determinism"]),
    ({"nodetune_health_gpu_power_cap_w": "lots"}, ["nodetune_health_gpu_power_cap_w='lots'", "watts"]),
    ({"nodetune_health_checks": ["xgmi"]}, ["unknown check 'xgmi'", "xgmi_links"]),
])
def test_bad_thresholds_are_refused(config: dict, words: list) -> None:
    with pytest.raises(health.HealthConfigError) as caught:
        health.validate_config(config)
    for word in words:
        assert word in str(caught.value)


def test_acs_on_a_bridge_above_a_gpu_is_drift(root: Path) -> None:
    """ACS turned on at the root port above the first GPU (as a BIOS default would): the GPU and the NIC under the
    same switch drift, the other side of the machine does not."""
    import struct

    gpu = SPEC["gpus"][0]["bdf"]
    real = (root / "sys/bus/pci/devices" / gpu).resolve()
    port = real.parent.parent.parent  # GPU <- switch downstream <- switch upstream <- root port
    bridge = port / "config"
    data = bytearray(bridge.read_bytes())
    assert len(data) == 4096
    struct.pack_into("<H", data, 0x106, 0x001d)
    bridge.write_bytes(bytes(data))
    found = run(root)
    acs = statuses(found, "pcie_acs")
    assert acs[gpu] == "drift" and acs[SPEC["gpus"][1]["bdf"]] == "ok"
    assert acs[SPEC["nics"][0]["bdf"]] == "drift"  # same switch as the GPU
    actual = [f["actual"] for f in found if f["id"] == "health.pcie_acs" and f["target"] == gpu][0]
    assert actual == f"on at {port.name} (0x001d)"


def test_acs_unreadable_config_space_is_unsupported(root: Path) -> None:
    """Unprivileged reads of config space stop at 64 bytes: no verdict, and it says why."""
    for link in (root / "sys/bus/pci/devices").iterdir():
        config = link.resolve() / "config"
        if config.exists():
            config.write_bytes(config.read_bytes()[:64])
    found = run(root)
    assert set(statuses(found, "pcie_acs").values()) == {"unsupported"}
    assert "verify as root" in [f["remedy"] for f in found if f["id"] == "health.pcie_acs"][0]


FAULTS = [  # spec option, the finding it breaks, the variables that check needs
    ({"pcie_acs": True}, "health.pcie_acs", {}),
    ({"xgmi_link_down": True}, "health.xgmi_links", {}),
    ({"gpu_ras_uncorrectable": 3}, "health.gpu_ras", {}),
    ({"ib_symbol_errors": 50}, "health.ib_counters", {}),
    ({"memlock": 65536}, "health.memlock", {}),
    ({"gpu_perf_level": "manual"}, "health.gpu_perf_level", {"gpu_perf_level": "auto"}),
    ({"gpu_power_cap_w": 600}, "health.gpu_power_cap", {"gpu_power_cap_w": 750}),
]


@pytest.mark.parametrize("faults, broken, config", FAULTS, ids=[f[1] for f in FAULTS])
def test_each_spec_fault_breaks_its_check(tmp_path: Path, faults: dict, broken: str, config: dict) -> None:
    spec = dict(SPEC, faults=faults)
    dest = tmp_path / "node"
    simnode.build(spec, str(dest))
    drift = {f["id"] for f in run(dest, **config) if f["status"] == "drift"}
    assert drift == {broken}


def test_partition_faults_break_the_inventory(tmp_path: Path) -> None:
    from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_check

    dest = tmp_path / "node"
    simnode.build(dict(SPEC, faults={"compute_partition": "CPX", "memory_partition": "NPS4"}), str(dest))
    facts = node_check.read_facts(str(dest))
    assert (facts["compute_partition"], facts["memory_partition"]) == (["CPX"], ["NPS4"])


def test_bad_faults_are_refused() -> None:
    with pytest.raises(simnode.SpecError) as caught:
        simnode.load_spec(dict(SPEC, faults={"pcie_acs": "maybe", "gpu_perf_level": "turbo", "fan": 1}))
    text = str(caught.value)
    assert "faults.pcie_acs" in text and "faults.gpu_perf_level" in text and "unknown key 'fan'" in text


ALL_FAULTS = dict(kv for faults, _id, _cfg in FAULTS for kv in faults.items())
DECLARED = {"gpu_perf_level": "auto", "gpu_power_cap_w": 750}  # the simulated MI300X boards as built


def drifting(root: Path) -> set:
    return {(f["id"], f["target"]) for f in run(root, **DECLARED) if f["status"] == "drift"}


def test_faults_injected_in_place_break_each_check_and_keep_the_rest(root: Path) -> None:
    """simnode.inject_faults (what the Molecule drift scenario uses) on a node that was changed after it was built:
    every check breaks on the expected targets only, the other change stays, a reboot keeps the faults, and the
    healthy defaults repair them."""
    governor = root / "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor"
    governor.write_text("performance\n")
    gpus = sorted(g["bdf"] for g in SPEC["gpus"])
    rdma = sorted(n["bdf"] for n in SPEC["nics"])  # both ConnectX-7
    hca = sorted(p.name for p in (root / "sys/class/infiniband").iterdir())[0]
    assert drifting(root) == set()

    result = simnode.inject_faults(str(root), ALL_FAULTS)

    assert drifting(root) == (
        {("health.pcie_acs", bdf) for bdf in gpus + rdma}
        | {("health.xgmi_links", bdf) for bdf in gpus[:2]}
        | {("health.gpu_perf_level", bdf) for bdf in gpus}
        | {("health.gpu_ras", gpus[0]), ("health.gpu_power_cap", gpus[0]), ("health.ib_counters", hca + "/1"),
           ("health.memlock", "limits.d"), ("health.memlock", "systemd")})
    assert governor.read_text() == "performance\n"  # only the files the faults decide were written
    assert all(p.startswith(("sys/", "etc/")) for p in result["written"] + result["removed"])
    assert simnode.read_marker(str(root))["spec"]["faults"]["gpu_power_cap_w"] == 600
    simnode.reboot(str(root))
    assert ("health.xgmi_links", gpus[0]) in drifting(root)  # a link that did not train stays down

    simnode.inject_faults(str(root), dict(simnode.FAULT_DEFAULTS))
    assert drifting(root) == set()


def test_a_compute_partition_injected_in_place_is_the_node_built_with_it(
        root: Path, fresh_tree: Callable[[Any], Path]) -> None:
    """Its DRM cards are numbered again: the files and the /sys/class/drm links (which inject_faults left as they
    were) are those of a node built in that partition."""
    result = simnode.inject_faults(str(root), {"compute_partition": "CPX"})
    assert any(path.startswith("sys/class/drm/") for path in result["written"])
    expected = fresh_tree(dict(SPEC, faults=dict(SPEC.get("faults") or {}, compute_partition="CPX")))
    assert runtime_tree_digest(root) == runtime_tree_digest(expected)


def test_faults_injected_after_a_memory_partition_reboot_fit_the_partition_booted(
        root: Path, fresh_tree: Callable[[Any], Path]) -> None:
    """After a reboot into another memory partition (an NPS request the GPUs' firmware took), the GPUs came up in it
    and in the compute partition amdgpu picks for it: a fault is injected into that boot, as a node built with
    those partitions has it, not into the built spec's (whose files the node no longer has: the unlink failed)."""
    from ansible_collections.nodetune.lab.plugins.module_utils.simkernel import NPS_REQUEST

    request = root / NPS_REQUEST
    request.parent.mkdir(parents=True, exist_ok=True)
    request.write_text("NPS4\n")
    simnode.reboot(str(root))
    simnode.inject_faults(str(root), {"compute_partition": "CPX"})
    faults = dict(SPEC.get("faults") or {}, memory_partition="NPS4", compute_partition="CPX")
    expected = fresh_tree(dict(SPEC, faults=faults))
    assert runtime_tree_digest(root, ("sys",)) == runtime_tree_digest(expected, ("sys",))


def test_bad_injected_faults_are_refused_before_any_write(root: Path) -> None:
    before = (root / simnode.MARKER).read_bytes()
    with pytest.raises(simnode.SpecError) as caught:
        simnode.inject_faults(str(root), {"gpu_power_cap_w": "lots", "pcie_acs": True})
    assert "faults.gpu_power_cap_w" in str(caught.value) and "integer from 1 to 2000" in str(caught.value)
    assert (root / simnode.MARKER).read_bytes() == before
    assert drifting(root) == set()
