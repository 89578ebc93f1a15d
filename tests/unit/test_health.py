"""Health findings (module_utils/health.py): hwmon units, thresholds, IB ports, NVMe links."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils import health
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.instinct.plugins.module_utils.topology import discover

from tests import realdata
from tests.unit.hwtree import Tree

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
    found = run(node)
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
