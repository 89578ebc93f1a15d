# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""amdgpu's binary ``gpu_metrics`` sysfs file for simulated GPUs.

The kernel returns the SMU driver's table as it is (amdgpu_pm.c, ``amdgpu_get_gpu_metrics``): one of the structs
``gpu_metrics_v<format>_<content>`` of drivers/gpu/drm/amd/include/kgd_pp_interface.h. The tables here are laid
out by ctypes, which aligns fields as the C compiler does, from the kernel's field lists below; the core's reader
(health.py) computes its offsets on its own, so the two check each other. ``smu_cmn_init_soft_gpu_metrics``
(smu_cmn.c) fills the whole table with 0xFF before the driver sets the fields it has: every field set by neither
reads as all ones.

- MI250 (aldebaran_ppt.c, ``aldebaran_get_gpu_metrics``): v1.3, no xGMI fields at all.
- MI300X (smu_v13_0_6_ppt.c, ``smu_v13_0_6_get_gpu_metrics``): v1.7 (kernel patch "drm/amd/pm: Add gpu_metrics_v1_7",
  "to acquire xgmi link status"), whose ``xgmi_link_status[i]`` is ``amdgpu_get_xgmi_link_status(adev, i)``
  (amdgpu_xgmi.c): 1 where the link's PCS state is L0, 0 where it is not, left at 0xFFFF where the port is
  disabled (-ENOLINK).

The values (temperatures, power, link width and rate) are the simulation's, of the kind and unit the kernel uses.
"""

from __future__ import annotations

import ctypes
from typing import Sequence

NUM_HBM_INSTANCES = 4
NUM_XGMI_LINKS = 8
MAX_GFX_CLKS = 8
MAX_CLKS = 4
NUM_VCN = 4
NUM_JPEG_ENG = 32
MAX_XCC = 8
NUM_XCP = 8

XGMI_LINK_INACTIVE = 0  # enum amdgpu_xgmi_link_status (kgd_pp_interface.h)
XGMI_LINK_ACTIVE = 1
NOT_FILLED = 0xFFFF  # a uint16_t field the driver left as smu_cmn_init_soft_gpu_metrics set it

_U8, _U16, _U32, _U64 = ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64


class MetricsTableHeader(ctypes.LittleEndianStructure):
    _fields_ = [("structure_size", _U16), ("format_revision", _U8), ("content_revision", _U8)]


class GpuMetricsV1_3(ctypes.LittleEndianStructure):
    _fields_ = [
        ("common_header", MetricsTableHeader),
        ("temperature_edge", _U16), ("temperature_hotspot", _U16), ("temperature_mem", _U16),
        ("temperature_vrgfx", _U16), ("temperature_vrsoc", _U16), ("temperature_vrmem", _U16),
        ("average_gfx_activity", _U16), ("average_umc_activity", _U16), ("average_mm_activity", _U16),
        ("average_socket_power", _U16), ("energy_accumulator", _U64), ("system_clock_counter", _U64),
        ("average_gfxclk_frequency", _U16), ("average_socclk_frequency", _U16), ("average_uclk_frequency", _U16),
        ("average_vclk0_frequency", _U16), ("average_dclk0_frequency", _U16), ("average_vclk1_frequency", _U16),
        ("average_dclk1_frequency", _U16),
        ("current_gfxclk", _U16), ("current_socclk", _U16), ("current_uclk", _U16), ("current_vclk0", _U16),
        ("current_dclk0", _U16), ("current_vclk1", _U16), ("current_dclk1", _U16),
        ("throttle_status", _U32), ("current_fan_speed", _U16), ("pcie_link_width", _U16), ("pcie_link_speed", _U16),
        ("padding", _U16), ("gfx_activity_acc", _U32), ("mem_activity_acc", _U32),
        ("temperature_hbm", _U16 * NUM_HBM_INSTANCES), ("firmware_timestamp", _U64),
        ("voltage_soc", _U16), ("voltage_gfx", _U16), ("voltage_mem", _U16), ("padding1", _U16),
        ("indep_throttle_status", _U64),
    ]


class XcpMetricsV1_1(ctypes.LittleEndianStructure):  # struct amdgpu_xcp_metrics_v1_1
    _fields_ = [
        ("gfx_busy_inst", _U32 * MAX_XCC), ("jpeg_busy", _U16 * NUM_JPEG_ENG), ("vcn_busy", _U16 * NUM_VCN),
        ("gfx_busy_acc", _U64 * MAX_XCC), ("gfx_below_host_limit_acc", _U64 * MAX_XCC),
    ]


class GpuMetricsV1_7(ctypes.LittleEndianStructure):
    _fields_ = [
        ("common_header", MetricsTableHeader),
        ("temperature_hotspot", _U16), ("temperature_mem", _U16), ("temperature_vrsoc", _U16),
        ("curr_socket_power", _U16), ("average_gfx_activity", _U16), ("average_umc_activity", _U16),
        ("mem_max_bandwidth", _U64), ("energy_accumulator", _U64), ("system_clock_counter", _U64),
        ("accumulation_counter", _U32), ("prochot_residency_acc", _U32), ("ppt_residency_acc", _U32),
        ("socket_thm_residency_acc", _U32), ("vr_thm_residency_acc", _U32), ("hbm_thm_residency_acc", _U32),
        ("gfxclk_lock_status", _U32), ("pcie_link_width", _U16), ("pcie_link_speed", _U16),
        ("xgmi_link_width", _U16), ("xgmi_link_speed", _U16), ("gfx_activity_acc", _U32), ("mem_activity_acc", _U32),
        ("pcie_bandwidth_acc", _U64), ("pcie_bandwidth_inst", _U64), ("pcie_l0_to_recov_count_acc", _U64),
        ("pcie_replay_count_acc", _U64), ("pcie_replay_rover_count_acc", _U64),
        ("pcie_nak_sent_count_acc", _U32), ("pcie_nak_rcvd_count_acc", _U32),
        ("xgmi_read_data_acc", _U64 * NUM_XGMI_LINKS), ("xgmi_write_data_acc", _U64 * NUM_XGMI_LINKS),
        ("xgmi_link_status", _U16 * NUM_XGMI_LINKS), ("padding", _U16), ("firmware_timestamp", _U64),
        ("current_gfxclk", _U16 * MAX_GFX_CLKS), ("current_socclk", _U16 * MAX_CLKS),
        ("current_vclk0", _U16 * MAX_CLKS), ("current_dclk0", _U16 * MAX_CLKS), ("current_uclk", _U16),
        ("num_partition", _U16), ("xcp_stats", XcpMetricsV1_1 * NUM_XCP),
        ("pcie_lc_perf_other_end_recovery", _U32),
    ]


def _blank(cls: type, content_revision: int) -> ctypes.Structure:
    """smu_cmn_init_soft_gpu_metrics: the table all 0xFF, then the header."""
    table = cls()
    ctypes.memset(ctypes.addressof(table), 0xFF, ctypes.sizeof(cls))
    table.common_header.structure_size = ctypes.sizeof(cls)
    table.common_header.format_revision = 1
    table.common_header.content_revision = content_revision
    return table


def mi250_table(temp_edge_c: int, temp_hotspot_c: int, temp_mem_c: int, power_w: int) -> bytes:
    """aldebaran's v1.3 table (temperatures in degrees Celsius, power in watts, as aldebaran_ppt.c fills them)."""
    table = _blank(GpuMetricsV1_3, 3)
    table.temperature_edge, table.temperature_hotspot, table.temperature_mem = temp_edge_c, temp_hotspot_c, temp_mem_c
    table.average_socket_power = power_w
    table.pcie_link_width, table.pcie_link_speed = 16, 160  # lanes, 0.1 GT/s
    return bytes(table)


def mi300x_table(temp_hotspot_c: int, temp_mem_c: int, power_w: int, link_status: Sequence[int]) -> bytes:
    """smu_v13_0_6's v1.7 table; ``link_status`` is xgmi_link_status[], one entry per xGMI port."""
    if len(link_status) != NUM_XGMI_LINKS:
        raise ValueError("xgmi_link_status has %d entries, expected %d" % (len(link_status), NUM_XGMI_LINKS))
    table = _blank(GpuMetricsV1_7, 7)
    table.temperature_hotspot, table.temperature_mem, table.curr_socket_power = temp_hotspot_c, temp_mem_c, power_w
    table.pcie_link_width, table.pcie_link_speed = 16, 320
    table.xgmi_link_width, table.xgmi_link_speed = 16, 32  # lanes, Gb/s
    table.num_partition = 1
    for index, status in enumerate(link_status):
        table.xgmi_link_status[index] = status
    return bytes(table)
