"""Health findings (module_utils/audit/health.py): hwmon units, thresholds, xGMI link state, IB ports, NVMe links."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import health
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.lab.plugins.module_utils import simmetrics, simnode

from tests import realdata
from tests.support.hwtree import Tree

ACTIVE = ("4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)")


def tree(tmp_path: Path) -> Tree:
    node = Tree(tmp_path)
    node.cpus(packages=1, cores_per_node=2, threads=1)
    return node


def run(node: Tree, config: dict | None = None) -> dict:
    topology = discover(str(node.root))
    out = {}
    for finding in health.check(Root(str(node.root)), topology, config or {}):
        assert (finding.id, finding.target) not in out
        assert finding.source == "health"
        out[(finding.id, finding.target)] = finding
    return out


def test_hwmon_units_and_the_hottest_sensor(tmp_path: Path) -> None:
    node = tree(tmp_path)
    # millidegrees and microwatts, as hwmon's sysfs interface defines them
    node.gpu("0000:11:00.0", hwmon={"temp1_input": "45000", "temp1_label": "edge", "temp2_input": "86500",
                                    "temp2_label": "junction", "temp3_input": "60000", "temp3_label": "mem",
                                    "power1_average": "310250000"})
    node.gpu("0000:12:00.0", hwmon={"temp1_input": "84999", "power1_input": "299000000"})
    found = run(node, {"nodetune_health_gpu_temp_max_c": 85})
    hot = found[("health.gpu_temp", "0000:11:00.0")]
    assert (hot.status, hot.actual) == ("drift", "86.5 C (junction)")
    assert found[("health.gpu_temp", "0000:12:00.0")].status == "ok"
    assert found[("health.gpu_temp", "0000:12:00.0")].actual == "85.0 C (temp1)"
    power = found[("health.gpu_power", "0000:11:00.0")]
    # no power1_cap: the fixed fallback (750 W, the largest Instinct board power) applies
    assert (power.status, power.actual, power.expected) == ("ok", "310.2 W (power1_average)",
                                                            "<= 750 W (fixed: no power1_cap)")
    fallback = found[("health.gpu_power", "0000:12:00.0")]
    assert (fallback.status, fallback.actual) == ("ok", "299.0 W (power1_input)")
    assert run(node, {"nodetune_health_gpu_power_max_w": 300})[("health.gpu_power", "0000:11:00.0")].status == "drift"


def test_each_sensor_is_compared_with_its_own_hwmon_limit(tmp_path: Path) -> None:
    """Issue 14.6: a junction at 95 C is normal under load (its own limit is far above); a memory sensor within
    the margin of its temp3_crit is not."""
    node = tree(tmp_path)
    node.gpu("0000:11:00.0", hwmon={"temp1_input": "60000", "temp1_label": "edge", "temp1_crit": "100000",
                                    "temp2_input": "95000", "temp2_label": "junction", "temp2_crit": "110000",
                                    "temp3_input": "80000", "temp3_label": "mem", "temp3_crit": "95000"})
    node.gpu("0000:12:00.0", hwmon={"temp2_input": "70000", "temp2_label": "junction", "temp2_crit": "110000",
                                    "temp3_input": "91000", "temp3_label": "mem", "temp3_crit": "95000"})
    node.gpu("0000:13:00.0", hwmon={"temp2_input": "101000", "temp2_label": "junction", "temp2_emergency": "105000"})
    found = run(node)
    busy = found[("health.gpu_temp", "0000:11:00.0")]
    assert busy.status == "ok", busy.to_dict() if hasattr(busy, "to_dict") else busy
    hot_memory = found[("health.gpu_temp", "0000:12:00.0")]
    assert (hot_memory.status, hot_memory.actual) == ("drift", "91.0 C (mem)")
    assert hot_memory.expected == "< 90 C (mem, temp3_crit 95 C - 5)"
    # no crit, only the emergency (shutdown) limit: that one, with the same margin
    assert found[("health.gpu_temp", "0000:13:00.0")].status == "drift"
    assert run(node, {"nodetune_health_gpu_temp_margin_c": 0})[("health.gpu_temp", "0000:12:00.0")].status == "ok"


def test_power_is_compared_with_the_boards_own_cap(tmp_path: Path) -> None:
    """Issue 14.6: 700 W is normal on a 750 W MI300X; 560 W is not on a 500 W MI250."""
    node = tree(tmp_path)
    node.gpu("0000:11:00.0", hwmon={"power1_input": "700000000", "power1_cap": "750000000"})
    node.gpu("0000:12:00.0", hwmon={"power1_average": "560000000", "power1_cap": "500000000"})
    node.gpu("0000:13:00.0", hwmon={"power1_average": "520000000", "power1_cap": "500000000"})
    found = run(node)
    assert found[("health.gpu_power", "0000:11:00.0")].status == "ok"
    over = found[("health.gpu_power", "0000:12:00.0")]
    assert (over.status, over.expected) == ("drift", "<= 525 W (power1_cap 500 W + 5%)")
    assert "power1_cap 500 W" in over.remedy
    assert found[("health.gpu_power", "0000:13:00.0")].status == "ok"  # within the documented 5 % margin


def test_the_fixed_fallbacks_are_configurable(tmp_path: Path) -> None:
    node = tree(tmp_path)
    node.gpu("0000:11:00.0", hwmon={"temp2_input": "95000", "power1_input": "700000000"})
    found = run(node, {"nodetune_health_gpu_temp_max_c": 100, "nodetune_health_gpu_power_max_w": 720})
    assert found[("health.gpu_temp", "0000:11:00.0")].status == "ok"
    assert found[("health.gpu_power", "0000:11:00.0")].status == "ok"
    assert found[("health.gpu_power", "0000:11:00.0")].expected == "<= 720 W (fixed: no power1_cap)"


def test_gpu_without_hwmon_is_unsupported_and_no_gpu_is_not_applicable(tmp_path: Path) -> None:
    node = tree(tmp_path / "a")
    node.gpu("0000:11:00.0")
    found = run(node)
    assert found[("health.gpu_temp", "0000:11:00.0")].status == "unsupported"
    assert found[("health.gpu_power", "0000:11:00.0")].status == "unsupported"
    empty = run(tree(tmp_path / "b"))
    assert empty[("health.gpu_temp", "-")].status == "not_applicable"
    assert empty[("health.ib_port", "-")].status == "not_applicable"
    assert empty[("health.pcie_link", "-")].status == "not_applicable"


def test_ib_ports_must_be_active_and_fast_enough(tmp_path: Path) -> None:
    node = tree(tmp_path)
    node.ib("mlx5_0", "0000:21:00.0", {1: ACTIVE, 2: ("1: DOWN", "2: Polling", "10 Gb/sec (4X SDR)")})
    node.ib("mlx5_1", "0000:22:00.0", {1: ("4: ACTIVE", "5: LinkUp", "50 Gb/sec (1X HDR)")})
    node.ib("mlx5_2", "0000:23:00.0", {1: ("2: INIT", "5: LinkUp", "200 Gb/sec (4X HDR)")})
    found = run(node)
    assert found[("health.ib_port", "mlx5_0/1")].status == "ok"
    down = found[("health.ib_port", "mlx5_0/2")]
    assert down.status == "drift" and "DOWN" in down.remedy and "Polling" in down.remedy
    assert found[("health.ib_port", "mlx5_1/1")].status == "ok"  # no minimum rate asked
    init = found[("health.ib_port", "mlx5_2/1")]
    assert init.status == "drift" and "subnet manager" in init.remedy
    with_min = run(node, {"nodetune_health_ib_rate_min_gbps": 200})
    slow = with_min[("health.ib_port", "mlx5_1/1")]
    assert slow.status == "drift" and "50 Gb/sec (1X HDR)" in slow.remedy
    assert with_min[("health.ib_port", "mlx5_0/1")].status == "ok"


def test_nvme_links_below_max_use_the_shared_link_logic(tmp_path: Path) -> None:
    node = tree(tmp_path)
    node.nvme("nvme0n1", "0000:31:00.0", ("16.0 GT/s PCIe", "16.0 GT/s PCIe", 4, 4))
    node.nvme("nvme1n1", "0000:32:00.0", ("16.0 GT/s PCIe", "16.0 GT/s PCIe", 2, 4))
    node.gpu("0000:11:00.0", link=("16.0 GT/s PCIe", "32.0 GT/s PCIe", 16, 16))
    found = run(node)
    assert found[("health.pcie_link", "0000:31:00.0")].status == "ok"
    narrow = found[("health.pcie_link", "0000:32:00.0")]
    assert (narrow.status, narrow.severity) == ("drift", "high")
    # GPU links belong to bios.pcie_link: health does not report them twice
    assert ("health.pcie_link", "0000:11:00.0") not in found


def test_checks_can_be_chosen_and_disabled(tmp_path: Path) -> None:
    node = tree(tmp_path)
    node.ib("mlx5_0", "0000:21:00.0", {1: ACTIVE})
    assert {k[0] for k in run(node, {"nodetune_health_checks": ["ib_port"]})} == {"health.ib_port"}
    assert run(node, {"nodetune_health_enabled": False}) == {}


@pytest.mark.parametrize(("config", "message"), [
    ({"nodetune_health_gpu_temp_max_c": "hot"}, "nodetune_health_gpu_temp_max_c='hot' is not valid"),
    ({"nodetune_health_gpu_power_max_w": -5}, "greater than 0"),
    ({"nodetune_health_gpu_power_max_w": True}, "expected watts"),
    ({"nodetune_health_gpu_temp_margin_c": -1}, "nodetune_health_gpu_temp_margin_c=-1 is not valid"),
    ({"nodetune_health_gpu_power_margin_pct": "lots"}, "expected a percentage from 0 to below 100"),
    ({"nodetune_health_checks": ["gpu_fan"]}, "unknown check 'gpu_fan'"),
    ({"nodetune_health_gpu_temp_c": 90}, "nodetune_health_gpu_temp_c is not a setting of the health area"),
])
def test_invalid_thresholds_are_named(config: dict, message: str) -> None:
    with pytest.raises(health.HealthConfigError) as caught:
        health.validate_config(config)
    assert message in str(caught.value)


@pytest.mark.real_fixtures
def test_real_connectx3_port_is_active() -> None:
    root = realdata.capture_root("hwloc-e5")  # ConnectX-3 FDR port 1 ACTIVE, plus a port-less scif0
    found = {(f.id, f.target): f for f in health.check(Root(str(root)), discover(str(root)), {})}
    port = found[("health.ib_port", "mlx4_0/1")]
    assert port.status == "ok" and "56 Gb/sec" in port.actual
    assert not [k for k in found if k[1].startswith("scif0")]


# ---------------------------------------------------------------------------------------------- GPU temperature limits
def lab_node(tmp_path: Path, model: str, gpus: int = 3, **extra: object) -> Path:
    """A small simulated node (simnode) with ``gpus`` GPUs of one model in one xGMI hive."""
    bdfs = ["0000:05:00.0", "0000:85:00.0", "0000:86:00.0", "0000:87:00.0"][:gpus]
    spec = {"name": "h1-" + model.lower(),
            "cpu": {"model": "EPYC 9654", "sockets": 2, "cores_per_socket": 8, "threads_per_core": 1, "caches": False},
            "gpus": [dict({"model": model, "bdf": bdf}, **extra) for bdf in bdfs]}
    dest = tmp_path / spec["name"]
    simnode.build(spec, str(dest))
    return dest


def checked(root: Path, *checks: str) -> dict:
    found = health.check(Root(str(root)), discover(str(root)), {"nodetune_health_checks": list(checks)})
    return {(f.id, f.target): f for f in found}


def test_mi300x_without_limit_files_is_unsupported_not_85c(tmp_path: Path) -> None:
    """Issue 24.5: before Linux 6.7 amdgpu shows an MI300X no tempN_crit/tempN_emergency (and never temp1). A junction
    at 96 C and HBM at 94 C are normal under load: no fixed 85 C fallback may call them drift."""
    root = lab_node(tmp_path, "MI300X", temp_c=92, hwmon_limits=False)
    hwmon = next((root / "sys/bus/pci/devices/0000:05:00.0/hwmon").iterdir())
    assert not list(hwmon.glob("temp1_*")) and not list(hwmon.glob("temp*_crit")) and (hwmon / "temp2_input").exists()
    found = checked(root, "gpu_temp")
    finding = found[("health.gpu_temp", "0000:05:00.0")]
    assert finding.status == "unsupported"
    assert finding.actual == "96.0 C (junction), 94.0 C (mem)"
    assert "nodetune_health_gpu_temp_max_c" in finding.remedy
    # the same GPU with a driver from Linux 6.7 on: its own limits (temp2_crit, temp3_crit) decide
    newer = checked(lab_node(tmp_path / "new", "MI300X", temp_c=92), "gpu_temp")
    judged = newer[("health.gpu_temp", "0000:05:00.0")]
    assert judged.status == "drift" and judged.expected == "< 90 C (mem, temp3_crit 95 C - 5)"
    assert judged.actual == "94.0 C (mem)"
    with pytest.raises(simnode.SpecError, match=r"gpus\[0\]\.hwmon_limits: 'old' is not valid: expected true or false"):
        lab_node(tmp_path / "bad", "MI300X", hwmon_limits="old")


def test_a_sensor_without_a_limit_is_judged_only_against_a_declared_limit(tmp_path: Path) -> None:
    node = tree(tmp_path)
    node.gpu("0000:11:00.0", hwmon={"temp2_input": "96000", "temp2_label": "junction",
                                    "temp3_input": "70000", "temp3_label": "mem", "temp3_crit": "95000"})
    node.gpu("0000:12:00.0", hwmon={"temp2_input": "96000", "temp2_label": "junction"})
    found = run(node)
    mixed = found[("health.gpu_temp", "0000:11:00.0")]
    assert mixed.status == "ok" and mixed.expected == "< 90 C (mem, temp3_crit 95 C - 5); no limit file: junction"
    assert found[("health.gpu_temp", "0000:12:00.0")].status == "unsupported"
    declared = run(node, {"nodetune_health_gpu_temp_max_c": 95})
    assert declared[("health.gpu_temp", "0000:12:00.0")].status == "drift"
    assert declared[("health.gpu_temp", "0000:12:00.0")].expected == (
        "< 95 C (junction, nodetune_health_gpu_temp_max_c 95 C)")
    assert declared[("health.gpu_temp", "0000:11:00.0")].status == "drift"  # the junction now has a limit too


# ------------------------------------------------------------------------------------------------ xGMI link state
def test_gpu_metrics_layouts_match_the_kernel_structs() -> None:
    """Offsets by hand from kgd_pp_interface.h (x86-64 natural alignment), and the lab's tables, which ctypes lays
    out from the kernel's full field lists: the reader's own layout agrees with both."""
    offsets = {minor: health.struct_offsets(fields)[0] for minor, fields in health.GPU_METRICS_V1_FIELDS.items()}
    assert {minor: o["xgmi_link_width"][0] for minor, o in offsets.items()} == {4: 52, 5: 116, 6: 140, 7: 72, 8: 72}
    assert offsets[7]["xgmi_link_status"] == (264, "H", 8)
    assert "xgmi_link_status" not in offsets[6]
    table = simmetrics.mi300x_table(60, 50, 400, [1, 1, 0, 1, 1, 2, 1, 0xFFFF])
    assert len(table) == 2208 and struct.unpack_from("<HBB", table) == (2208, 1, 7)
    parsed, why = health.parse_gpu_metrics(table)
    assert why == "" and parsed == {"revision": "v1.7", "xgmi_link_width": 16, "xgmi_link_speed": 32,
                                    "xgmi_link_status": [1, 1, 0, 1, 1, 2, 1, 0xFFFF]}
    older, why = health.parse_gpu_metrics(simmetrics.mi250_table(40, 44, 42, 90))
    assert why == "" and older == {"revision": "v1.3", "xgmi_link_width": None, "xgmi_link_speed": None,
                                   "xgmi_link_status": None}


@pytest.mark.parametrize(("data", "why"), [
    (b"", "shorter than its header"),
    (struct.pack("<HBB", 120, 2, 1) + bytes(116), "v2.1 is not a discrete GPU's table"),
    (struct.pack("<HBB", 4000, 1, 9) + bytes(3996), "v1.9 has a layout this version of nodetune does not know"),
    (simmetrics.mi300x_table(60, 50, 400, [1] * 8)[:200], "too short for its own layout (280)"),
])
def test_unreadable_gpu_metrics_says_why(data: bytes, why: str) -> None:
    parsed, reason = health.parse_gpu_metrics(data)
    assert parsed is None and why in reason


def test_a_down_xgmi_link_keeps_its_kfd_io_link_and_is_drift(tmp_path: Path) -> None:
    """Issue 24.2: kfd_crat.c lists an io_link to every hive member, trained or not; the lab's xgmi_link_down shows
    the link as amdgpu does (xgmi_link_status 0 in MI300X's gpu_metrics, on both ends)."""
    healthy = lab_node(tmp_path / "a", "MI300X")
    for gpu in discover(str(healthy))["gpus"]:
        assert len(gpu["xgmi_peers"]) == 2
    found = checked(healthy, "xgmi_links")
    assert {f.status for f in found.values()} == {"ok"}
    assert found[("health.xgmi_links", "0000:05:00.0")].actual == (
        "2 up, 0 down, 6 not connected; x16 at 32 Gb/s; 0 uncorrectable, 0 correctable xGMI errors")

    broken = lab_node(tmp_path / "b", "MI300X")
    simnode.inject_faults(str(broken), {"xgmi_link_down": True})
    topology = discover(str(broken))
    assert all(len(gpu["xgmi_peers"]) == 2 for gpu in topology["gpus"])  # the KFD still lists the link
    found = checked(broken, "xgmi_links")
    assert {k[1]: f.status for k, f in found.items()} == {
        "0000:05:00.0": "drift", "0000:85:00.0": "drift", "0000:86:00.0": "ok"}
    down = found[("health.xgmi_links", "0000:05:00.0")]
    assert down.actual.startswith("1 up, 1 down (port 0), 6 not connected") and "not in L0" in down.remedy
    assert "virtual function" not in down.remedy  # another port is up: not the all-down case


def test_mi250_down_link_shows_as_xgmi_ras_errors_not_as_gpu_ras(tmp_path: Path) -> None:
    """MI250's gpu_metrics (v1.3) has no xGMI field: the RAS counter is the state there is, reported once."""
    root = lab_node(tmp_path, "MI250", gpus=2)
    simnode.inject_faults(str(root), {"xgmi_link_down": True})
    found = checked(root, "xgmi_links", "gpu_ras")
    link = found[("health.xgmi_links", "0000:05:00.0")]
    assert link.status == "drift" and "gpu_metrics v1.3 has no per-port xGMI state" in link.expected
    assert "1 uncorrectable xGMI link error " in link.remedy
    assert {f.status for k, f in found.items() if k[0] == "health.gpu_ras"} == {"ok"}
    simnode.inject_faults(str(root), {"xgmi_link_down": False})
    assert {f.status for f in checked(root, "xgmi_links").values()} == {"ok"}


def test_xgmi_states_a_virtual_function_or_an_all_down_gpu_reports(tmp_path: Path) -> None:
    root = lab_node(tmp_path, "MI300X", gpus=2)
    metrics = root / "sys/bus/pci/devices/0000:05:00.0/gpu_metrics"
    metrics.chmod(0o644)
    metrics.write_bytes(simmetrics.mi300x_table(60, 50, 400, [2] * 8))  # AMDGPU_XGMI_LINK_NA: a virtual function
    found = checked(root, "xgmi_links")[("health.xgmi_links", "0000:05:00.0")]
    assert found.status == "ok" and "reports no port's state" in found.expected  # the RAS counter still reads 0
    (root / "sys/bus/pci/devices/0000:05:00.0/ras/xgmi_wafl_err_count").unlink()
    found = checked(root, "xgmi_links")[("health.xgmi_links", "0000:05:00.0")]
    assert found.status == "unsupported" and "io_links cannot tell" in found.remedy
    metrics.write_bytes(simmetrics.mi300x_table(60, 50, 400, [0] + [0xFFFF] * 7))
    found = checked(root, "xgmi_links")[("health.xgmi_links", "0000:05:00.0")]
    assert found.status == "drift" and "virtual function on a kernel without AMDGPU_XGMI_LINK_NA" in found.remedy


@pytest.mark.real_fixtures
def test_real_mi300x_kfd_lists_every_partition_link_and_tells_no_state() -> None:
    """The real 8 x MI300X CPX capture: each of the 63 partitions has an xGMI io_link to all 62 others (kfd_crat.c
    lists them whatever their state); with no gpu_metrics and no RAS files there, nothing is known: unsupported,
    never ok or drift."""
    root = realdata.kfd_root()
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    partitions = [n for n in nodes.iterdir() if "simd_count 152" in (n / "properties").read_text()]
    assert len(partitions) == 63
    for node in partitions:
        types = [(link / "properties").read_text().split("\n", 1)[0] for link in (node / "io_links").iterdir()]
        assert types.count("type 11") == 62
    found = checked(root, "xgmi_links")
    assert len(found) == 8 and {f.status for f in found.values()} == {"unsupported"}
