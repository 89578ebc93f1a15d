"""The gpu area (issue 26 item 3): performance determinism, power cap, compute and memory partitions.

The simulated node answers the writes as amdgpu does (simkernel: the level, pp_od_clk_voltage's one command per write
and its commit, power1_cap's bounds, the partitions' EINVAL/EBUSY and the memory partition's pending request that a
reboot applies), so that these tests exercise what a real MI300X node would answer.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils import rootfs
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine
from ansible_collections.nodetune.instinct.plugins.module_utils.apply.node import load
from ansible_collections.nodetune.instinct.plugins.module_utils.audit.verify import setting_findings
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_check, rules
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import (
    OD_SCLK_SECTIONS,
    clock_levels,
    od_clock_command,
    od_range,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import journal
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import SettingError
from ansible_collections.nodetune.lab.plugins.module_utils import simkernel, simnode

from tests.support.specs import small_spec
from tests.support.trees import runtime_tree_digest as tree_digest

pytestmark = pytest.mark.usefixtures("simulated_kernel")  # applies to simulated nodes in-process

GPU = "0000:05:00.0"
OTHER = "0000:85:00.0"
DETERMINISM = {"gpu": {"nodetune_gpu_perf_determinism": True}}


class Recorder(simkernel.SimKernel):
    """The simulated kernel, remembering every write(2) it answered (path relative to the root, value)."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str]] = []

    def write(self, root: Any, rel: str, value: str) -> None:
        simkernel.write(root, rel, value)
        self.writes.append((rel, value))


@pytest.fixture
def recorder():
    backend = Recorder()
    rootfs.use_backend(backend)
    try:
        yield backend
    finally:
        rootfs.use_backend(simkernel.BACKEND)


def mi300x(tmp_path: Path) -> Path:
    dest = tmp_path / "node"
    simnode.build(small_spec(), str(dest))
    return dest


def attr(root: Path, name: str, bdf: str = GPU) -> str:
    return (root / "sys/bus/pci/devices" / bdf / name).read_text()


def cap(root: Path, bdf: str = GPU) -> str:
    hwmon = next((root / "sys/bus/pci/devices" / bdf / "hwmon").iterdir())
    return (hwmon / "power1_cap").read_text().strip()


def apply(root: Path, areas: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    state = load(str(root), areas)
    return engine.apply(state.root, state.settings, services=state.services, **kwargs)


def gpu_drift(root: Path, areas: dict[str, Any]) -> list[Any]:
    state = load(str(root), areas)
    return [f for f in setting_findings(state.root, state.settings, state.services)
            if f.id.startswith("gpu.") and f.status != "ok"]


def refused(root: Path, areas: dict[str, Any]) -> str:
    with pytest.raises(SettingError) as caught:
        load(str(root), areas)
    return str(caught.value)


# ------------------------------------------------------------------------------------------------ parsers
OD_NEW = "OD_SCLK:\n0: 500Mhz\n1: 1900Mhz\nOD_MCLK:\n0: 900Mhz\n1: 1300Mhz\n"
# the older print_clk_levels of smu_v13_0_6 / aldebaran: a GFXCLK header, the deep-sleep line, the current clock
OD_OLD = "GFXCLK:\nS: 100Mhz *\n0: 500Mhz\n1: 1650Mhz *\n2: 1700Mhz\nMCLK:\n0: 1600Mhz *\n"
OD_RANGED = "OD_SCLK:\n0: 500Mhz\n1: 2100Mhz\nOD_RANGE:\nSCLK:     500Mhz       2100Mhz\nMCLK:     900Mhz 1300Mhz\n"


def test_pp_od_clk_voltage_reads_as_the_command_that_sets_its_maximum() -> None:
    assert clock_levels(OD_NEW, OD_SCLK_SECTIONS) == [(0, 500), (1, 1900)]
    assert clock_levels(OD_OLD, OD_SCLK_SECTIONS) == [(0, 500), (1, 1650), (2, 1700)]
    assert clock_levels("0: 500Mhz \n1: 2100Mhz *\n") == [(0, 500), (1, 2100)]
    assert od_range(OD_RANGED) == (500, 2100) and od_range(OD_NEW) is None
    for text, command in ((OD_NEW, "s 1 1900"), (OD_OLD, "s 1 1700"), ("s 1 1900", "s 1 1900"),
                          ("s  1   1900\n", "s 1 1900")):
        assert od_clock_command(text) == command
        # verify and the node programs compare it by this rule (node_programs/rules.py)
        assert rules.normalize("od_clock", text) == command


# ------------------------------------------------------------------------------------------------ the simulated driver
def test_the_simulated_amdgpu_refuses_what_amdgpu_refuses(tmp_path: Path) -> None:
    root = mi300x(tmp_path)
    node = simkernel.sim_root(str(root))
    dev = f"sys/bus/pci/devices/{GPU}/"
    hwmon = f"sys/bus/pci/devices/{GPU}/hwmon/{next((root / dev / 'hwmon').iterdir()).name}/"

    def errno_of(rel: str, value: str) -> int:
        with pytest.raises(OSError) as caught:
            simkernel.write(node, rel, value)
        return caught.value.errno

    # pp_od_clk_voltage only in manual or perf_determinism (smu_v13_0_6_usr_edit_dpm_table)
    assert errno_of(dev + "pp_od_clk_voltage", "s 1 1900") == errno.EINVAL
    assert errno_of(dev + "power_dpm_force_performance_level", "high") == errno.EINVAL  # SMU 13.0.6 levels
    simkernel.write(node, dev + "power_dpm_force_performance_level", "perf_determinism")
    assert errno_of(dev + "pp_od_clk_voltage", "s 1 2500") == errno.EINVAL  # above the GFX table
    assert errno_of(dev + "pp_od_clk_voltage", "s 1 1900\nc") == errno.EINVAL  # one command per write
    simkernel.write(node, dev + "pp_od_clk_voltage", "s 1 1900")
    assert od_clock_command(attr(root, "pp_od_clk_voltage")) == "s 1 2100"  # not before the commit
    simkernel.write(node, dev + "pp_od_clk_voltage", "c")
    assert od_clock_command(attr(root, "pp_od_clk_voltage")) == "s 1 1900"
    simkernel.write(node, dev + "power_dpm_force_performance_level", "auto")  # leaving it resets the clock
    assert od_clock_command(attr(root, "pp_od_clk_voltage")) == "s 1 2100"
    # power1_cap: microwatts within [power1_cap_min, power1_cap_max], truncated to watts
    assert errno_of(hwmon + "power1_cap", "800000000") == errno.EINVAL
    assert errno_of(hwmon + "power1_cap", "7e8") == errno.EINVAL
    simkernel.write(node, hwmon + "power1_cap", "650500000")
    assert cap(root) == "650000000"
    # compute partition: not available -> EINVAL, a KFD process open -> EBUSY
    assert errno_of(dev + "current_compute_partition", "TPX") == errno.EINVAL
    simnode.start_kfd_process(str(root), 4242, [GPU])
    assert errno_of(dev + "current_compute_partition", "CPX") == errno.EBUSY
    simkernel.write(node, dev + "current_compute_partition", "spx")  # the current mode: nothing to do
    assert simnode.stop_kfd_process(str(root), 4242)
    simkernel.write(node, dev + "current_compute_partition", "cpx")
    assert attr(root, "current_compute_partition") == "CPX\n"
    # memory partition: a request, the current mode stays until the driver reloads
    assert errno_of(dev + "current_memory_partition", "NPS2") == errno.EINVAL
    simkernel.write(node, dev + "current_memory_partition", "NPS4")
    assert attr(root, "current_memory_partition") == "NPS1\n"
    assert simkernel.nps_request(node) == "NPS4"


# ------------------------------------------------------------------------------------------ performance determinism
def test_determinism_is_written_as_rocm_smi_sets_it_and_verified(tmp_path: Path, recorder: Recorder) -> None:
    root = mi300x(tmp_path)
    result = apply(root, DETERMINISM)
    dev = f"sys/bus/pci/devices/{GPU}/"
    mine = [w for w in recorder.writes if w[0].startswith(dev)]
    # rsmi_perf_determinism_mode_set: the level, then "s 1 <clock>", then the commit; 1900 MHz is MI300X's
    assert mine == [(dev + "power_dpm_force_performance_level", "perf_determinism"),
                    (dev + "pp_od_clk_voltage", "s 1 1900"), (dev + "pp_od_clk_voltage", "c")]
    assert attr(root, "power_dpm_force_performance_level") == "perf_determinism\n"
    assert od_clock_command(attr(root, "pp_od_clk_voltage", OTHER)) == "s 1 1900"
    assert not result["reboot_required"] and not result["unconfirmed"]
    assert gpu_drift(root, DETERMINISM) == []
    recorder.writes.clear()
    again = apply(root, DETERMINISM)
    assert (again["changed"], recorder.writes) == (False, [])
    # a clock moved by hand is drift, reported on the clock's own check id
    simkernel.write(simkernel.sim_root(str(root)), dev + "pp_od_clk_voltage", "s 1 1700")
    simkernel.write(simkernel.sim_root(str(root)), dev + "pp_od_clk_voltage", "c")
    assert [(f.id, f.target, f.expected, f.actual) for f in gpu_drift(root, DETERMINISM)] == [
        ("gpu.determinism_clock", GPU, "s 1 1900", "s 1 1700")]


def test_entering_determinism_at_the_clock_the_table_shows_still_commits_it(tmp_path: Path,
                                                                            recorder: Recorder) -> None:
    """In auto the OD table already reads the table's maximum; amdgpu enters determinism only on a commit
    (smu_v13_0_6_set_performance_level returns without telling the SMU), so the clock is committed anyway."""
    root = mi300x(tmp_path)
    areas = {"gpu": {"nodetune_gpu_perf_determinism": True, "nodetune_gpu_perf_determinism_mhz": 2100}}
    state = load(str(root), areas)
    planned = [(a.setting.id, a.before, a.after) for a in engine.plan_actions(state.root, state.settings)
               if a.setting.target == GPU and a.setting.id.startswith("gpu.")]
    assert planned == [("gpu.perf_level", "auto", "perf_determinism"),
                       ("gpu.determinism_clock", "s 1 2100", "s 1 2100")]
    engine.apply(state.root, state.settings, services=state.services)
    dev = f"sys/bus/pci/devices/{GPU}/"
    assert [w for w in recorder.writes if w[0] == dev + "pp_od_clk_voltage"] == [
        (dev + "pp_od_clk_voltage", "s 1 2100"), (dev + "pp_od_clk_voltage", "c")]
    recorder.writes.clear()
    assert apply(root, areas)["changed"] is False and recorder.writes == []


def test_revert_puts_the_level_back_first_and_an_earlier_determinism_clock_back(tmp_path: Path) -> None:
    root = mi300x(tmp_path)
    node = simkernel.sim_root(str(root))
    other = f"sys/bus/pci/devices/{OTHER}/"
    # the second GPU already ran in determinism at 1700 MHz before nodetune
    for value in ("perf_determinism",):
        simkernel.write(node, other + "power_dpm_force_performance_level", value)
    for value in ("s 1 1700", "c"):
        simkernel.write(node, other + "pp_od_clk_voltage", value)
    apply(root, DETERMINISM)
    assert od_clock_command(attr(root, "pp_od_clk_voltage", OTHER)) == "s 1 1900"
    od = f"sys/bus/pci/devices/{OTHER}/pp_od_clk_voltage"
    journal = json.loads((root / engine.JOURNAL).read_text())["baseline"]
    assert journal[od] == {"kind": "attr", "restore": "s 1 1700", "order": journal[od]["order"], "compare": "od_clock"}
    plan = engine.revert(load(str(root), {}).root, check_mode=True)
    changes = dict((c["key"], (c["before"], c["after"])) for c in plan["changes"])
    assert changes[od] == ("s 1 1900", "s 1 1700")
    engine.revert(load(str(root), {}).root)
    # the first GPU: auto again, which put the clock back by itself; the second: its own 1700 MHz again
    assert attr(root, "power_dpm_force_performance_level") == "auto\n"
    assert od_clock_command(attr(root, "pp_od_clk_voltage")) == "s 1 2100"
    assert attr(root, "power_dpm_force_performance_level", OTHER) == "perf_determinism\n"
    assert od_clock_command(attr(root, "pp_od_clk_voltage", OTHER)) == "s 1 1700"
    assert not (root / engine.JOURNAL).exists()


def test_a_journal_naming_an_unknown_command_attribute_is_refused(tmp_path: Path) -> None:
    problems = engine.journal_problems({"version": journal.JOURNAL_VERSION, "baseline": {
        "sys/x/pp_od_clk_voltage": {"kind": "attr", "restore": "s 1 1700", "compare": "exact"}}})
    assert problems and "compare 'exact' is not one of od_clock" in problems[0]


# ------------------------------------------------------------------------------------------------ power cap
def test_the_power_cap_is_written_in_microwatts_and_reverted(tmp_path: Path) -> None:
    root = mi300x(tmp_path)
    areas = {"gpu": {"nodetune_gpu_power_cap_w": 650}}
    check = apply(root, areas, check_mode=True)
    assert [(a["id"], a["before"], a["after"]) for a in check["actions"] if a["target"] == GPU] == [
        ("gpu.power_cap", "750000000", "650000000")]
    assert cap(root) == "750000000"  # check mode writes nothing
    apply(root, areas)
    assert (cap(root), cap(root, OTHER)) == ("650000000", "650000000")
    assert gpu_drift(root, areas) == [] and apply(root, areas)["changed"] is False
    engine.revert(load(str(root), {}).root)
    assert cap(root) == "750000000"


# ------------------------------------------------------------------------------------------------ bad values
def test_bad_values_are_refused_before_any_write_naming_what_is_valid(tmp_path: Path) -> None:
    root = mi300x(tmp_path)
    before = tree_digest(root)
    message = refused(root, {"gpu": {"nodetune_gpu_perf_determinism": True, "nodetune_gpu_perf_determinism_mhz": 2500}})
    assert "nodetune_gpu_perf_determinism_mhz=2500" in message and "500 to 2100 MHz" in message
    message = refused(root, {"gpu": {"nodetune_gpu_power_cap_w": 800}})
    assert "nodetune_gpu_power_cap_w=800" in message and "0 to 750 W" in message
    message = refused(root, {"gpu": {"nodetune_gpu_compute_partition": "TPX", "nodetune_gpu_partition_allowed": True}})
    assert "nodetune_gpu_compute_partition=TPX" in message and "SPX, DPX, QPX, CPX" in message
    message = refused(root, {"gpu": {"nodetune_gpu_memory_partition": "NPS2", "nodetune_gpu_partition_allowed": True}})
    assert "nodetune_gpu_memory_partition=NPS2" in message and "NPS1, NPS4" in message
    message = refused(root, {"gpu": {"nodetune_gpu_compute_partition": "XPX"}})
    assert "nodetune_gpu_compute_partition='XPX'" in message and "SPX, DPX, TPX, QPX, CPX" in message
    message = refused(root, {"gpu": {"nodetune_gpu_perf_determinism_mhz": 1900}})
    assert "nodetune_gpu_perf_determinism is false" in message
    message = refused(root, {"gpu": {"nodetune_gpu_compute_partition": "CPX"}})
    assert "nodetune_gpu_partition_allowed" in message and f"{GPU} SPX -> CPX" in message
    message = refused(root, {"gpu": {"nodetune_gpu_power_cap": 700}})
    assert "nodetune_gpu_power_cap is not a setting of the gpu area" in message
    assert tree_digest(root) == before


def test_a_model_without_a_validated_clock_needs_one_and_mi250_takes_its_partitions_nowhere(tmp_path: Path) -> None:
    dest = tmp_path / "mi250"
    simnode.build(small_spec(gpus=[{"model": "MI250", "bdf": "0000:05:00.0", "package": 0, "switch": "s0"},
                                   {"model": "MI250", "bdf": "0000:08:00.0", "package": 0, "switch": "s0"}]),
                  str(dest))
    message = refused(dest, DETERMINISM)
    assert "set nodetune_gpu_perf_determinism_mhz for 0000:05:00.0" in message and "MI300X: 1900 MHz" in message
    message = refused(dest, {"gpu": {"nodetune_gpu_compute_partition": "CPX", "nodetune_gpu_partition_allowed": True}})
    assert "has no current_compute_partition" in message and "MI300-series" in message
    areas = {"gpu": {"nodetune_gpu_perf_determinism": True, "nodetune_gpu_perf_determinism_mhz": 1600}}
    apply(dest, areas)
    assert od_clock_command(attr(dest, "pp_od_clk_voltage")) == "s 1 1600"
    assert gpu_drift(dest, areas) == []


# ------------------------------------------------------------------------------------------------ partitions
def test_a_compute_partition_switch_is_refused_while_kfd_processes_are_open(tmp_path: Path) -> None:
    root = mi300x(tmp_path)
    areas = {"gpu": {"nodetune_gpu_compute_partition": "CPX", "nodetune_gpu_partition_allowed": True}}
    simnode.start_kfd_process(str(root), 4242, [GPU])
    simnode.start_kfd_process(str(root), 5151, [OTHER])
    before = tree_digest(root)
    message = refused(root, areas)
    assert "pid 4242 (uses this GPU), 5151" in message and "EBUSY" in message and GPU in message
    assert tree_digest(root) == before
    simnode.stop_kfd_process(str(root), 4242)
    simnode.stop_kfd_process(str(root), 5151)
    result = apply(root, areas)
    assert all(a["disruptive"] for a in result["actions"] if a["id"] == "gpu.compute_partition")
    assert (attr(root, "current_compute_partition"), attr(root, "current_compute_partition", OTHER)) == ("CPX\n",
                                                                                                      "CPX\n")
    assert gpu_drift(root, areas) == [] and apply(root, areas)["changed"] is False
    engine.revert(load(str(root), {}).root)
    assert attr(root, "current_compute_partition") == "SPX\n"


def test_a_memory_partition_is_a_request_that_the_next_driver_load_applies(tmp_path: Path) -> None:
    # 8 cores per NUMA node: after the reboot each GPU is 4 QPX partitions, 4 KFD nodes and so 4 ranks to lay out
    root = tmp_path / "node"
    simnode.build(small_spec(cpu__cores_per_socket=16), str(root))
    areas = {"gpu": {"nodetune_gpu_memory_partition": "NPS4", "nodetune_gpu_partition_allowed": True}}
    first = apply(root, areas)
    assert first["reboot_required"] is True
    assert [(u["target"], u["expected"], u["actual"]) for u in first["unconfirmed"]] == [
        (GPU, "NPS4", "NPS1"), (OTHER, "NPS4", "NPS1")]
    assert attr(root, "current_memory_partition") == "NPS1\n"
    # pending: verified at the current mode, nothing written again, and said so
    state = load(str(root), areas)
    assert any("NPS4 was requested by an earlier run" in w for w in state.context.warnings)
    assert gpu_drift(root, areas) == [] and apply(root, areas)["changed"] is False
    # asking for the current mode again cannot withdraw the request: said so
    back = {"gpu": dict(areas["gpu"], nodetune_gpu_memory_partition="NPS1")}
    warnings = load(str(root), back).context.warnings
    assert any("NPS4, requested by an earlier run, is still pending" in w for w in warnings)
    simnode.reboot(str(root))
    assert attr(root, "current_memory_partition") == "NPS4\n"
    assert attr(root, "available_compute_partition") == "QPX, CPX\n"
    assert attr(root, "current_compute_partition") == "QPX\n"  # SPX is not valid in NPS4: amdgpu's auto mode
    # in place now: verified at NPS4, and the checker's expectation follows once
    assert gpu_drift(root, areas) == []
    assert [a["id"] for a in apply(root, areas)["actions"]] == ["check.expected"]
    assert apply(root, areas)["changed"] is False
    # revert asks for the original mode back, again as a request the next driver load applies
    engine.revert(load(str(root), {}).root)
    assert attr(root, "current_memory_partition") == "NPS4\n"
    simnode.reboot(str(root))
    assert attr(root, "current_memory_partition") == "NPS1\n"


def test_nodetune_check_expects_the_gpu_settings_apply_wrote(tmp_path: Path) -> None:
    root = mi300x(tmp_path)
    areas = {"gpu": {"nodetune_gpu_perf_determinism": True, "nodetune_gpu_power_cap_w": 700,
                     "nodetune_gpu_memory_partition": "NPS4", "nodetune_gpu_partition_allowed": True}}
    apply(root, areas)
    entries = json.loads((root / "etc/nodetune/check.d/gpu.json").read_text())["settings"]
    assert node_check.check_settings(str(root), entries) == []
    simkernel.write(simkernel.sim_root(str(root)), f"sys/bus/pci/devices/{GPU}/power_dpm_force_performance_level",
                    "auto")
    assert [(i, t) for i, t, _want, _have in node_check.check_settings(str(root), entries)] == [
        ("gpu.perf_level", GPU), ("gpu.determinism_clock", GPU)]


def test_the_health_checks_of_the_level_and_cap_are_the_gpu_areas_where_it_sets_them(tmp_path: Path) -> None:
    from ansible_collections.nodetune.instinct.plugins.module_utils.audit import stability

    root = mi300x(tmp_path)
    areas = {"gpu": {"nodetune_gpu_perf_determinism": True, "nodetune_gpu_power_cap_w": 700}}
    apply(root, areas)
    state = load(str(root), areas)
    # health's own declaration (auto, 750 W) would call the tuned GPUs drift: the gpu area's Settings decide
    alone = stability.check_gpu_perf_level(state.root, state.topology, "auto")
    assert {f.status for f in alone} == {"drift"}
    level = stability.check("gpu_perf_level", state.root, state.topology,
                            {"gpu_perf_level": "auto", "gpu_power_cap_w": 750.0}, areas)
    power = stability.check("gpu_power_cap", state.root, state.topology,
                            {"gpu_perf_level": "auto", "gpu_power_cap_w": 750.0}, areas)
    assert [(f.status, "gpu.perf_level" in f.remedy) for f in level] == [("not_applicable", True)]
    assert [(f.status, "gpu.power_cap" in f.remedy) for f in power] == [("not_applicable", True)]
    assert gpu_drift(root, areas) == []
