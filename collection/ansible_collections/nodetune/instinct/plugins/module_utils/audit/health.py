# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Health findings that ride along with verify: GPU temperature and power, xGMI links, IB ports, NVMe PCIe links.

Not settings nodetune owns, but the things an operator wants to see in the same report: a hot or power-hungry GPU,
an xGMI link that is down, an InfiniBand port that is down or trained at a lower rate, an NVMe drive whose link came
up narrower or slower than it can run.

GPU thresholds come from each device's own hwmon limits (amdgpu, Documentation/gpu/amdgpu/thermal.rst):
``tempN_crit`` (the sensor's critical maximum, where the firmware throttles hard) else ``tempN_emergency`` (where
the ASIC shuts down), per sensor (edge, junction and memory have different limits: comparing the hottest one with
one number misreads a normal junction temperature), minus ``nodetune_health_gpu_temp_margin_c`` (5 C). A sensor
without either file is not judged (the finding is ``unsupported`` when no sensor of the GPU has one) unless
``nodetune_health_gpu_temp_max_c`` is set: amdgpu hides them on purpose, e.g. on MI300X (GC 9.4.3) every limit file
before Linux 6.7 (commits df7a2808528f "Add throttle limit for SMU v13.0.6" and 9cff0879aefe "Add GC v9.4.3
thermal limits to hwmon") and the edge sensor (temp1) always (amdgpu_pm.c, hwmon_attributes_visible), and a fixed
number would false-alarm on a junction or HBM temperature that is normal under load.
``power1_cap`` (the board's enforced power cap: 500 W on MI250, 750 W on MI300X) plus
``nodetune_health_gpu_power_margin_pct`` (5 %); the fixed ``nodetune_health_gpu_power_max_w`` applies only where a
device exposes no ``power1_cap``.

Units (Documentation/hwmon/sysfs-interface.rst): ``temp*_input`` in millidegrees Celsius, ``power1_average`` and
``power1_input`` in microwatts. The GPU's hwmon directory comes from the Topology (``gpus[].hwmon``).

xGMI links (``health.xgmi_links``): the KFD topology cannot tell a link's state, since kfd_crat.c
(``kfd_create_vcrat_image_gpu``) lists a type-11 io_link to every GPU of the hive whether the link trained or not.
The state comes from amdgpu instead, read-only (see :func:`check_xgmi_links`): the per-port
``xgmi_link_status`` of the binary ``gpu_metrics`` table (v1.7 and later, MI300 series) and the uncorrectable xGMI
errors of ``ras/xgmi_wafl_err_count``. ``xgmi_error`` is never read: its show function clears the error status
it reports (amdgpu_xgmi.c, ``amdgpu_xgmi_show_error`` writes the PIE status register back to 0).

Check ids: ``health.gpu_temp``, ``health.gpu_power``, ``health.ib_port``, ``health.pcie_link``,
``health.xgmi_links``. GPU and NIC links are checked by ``bios.pcie_link`` (bios.py); ``health.pcie_link`` covers
the NVMe drives with the same code.
"""

from __future__ import annotations

import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import stability
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import (
    Errors,
    describe,
    unknown_keys,
    want_bool,
    want_list,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.audit.bios import pcie_link_findings
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import (
    DRIFT,
    NOT_APPLICABLE,
    OK,
    UNSUPPORTED,
    Finding,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError, Root
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import SettingError

SOURCE = "health"
AREA = "health"
CHECKS = ("gpu_temp", "gpu_power", "ib_port", "pcie_link") + stability.CHECKS
DEFAULT_POWER_MAX_W = 750.0  # fallback only: a GPU without power1_cap (the largest Instinct OAM board power)
DEFAULT_TEMP_MARGIN_C = 5.0
DEFAULT_POWER_MARGIN_PCT = 5.0
# nodetune_inventory_* ride in the same mapping (inventory.py checks them)
VARIABLES = tuple(name for name in areas.ROLES["verify"]["variables"]
                  if name.startswith(("nodetune_health_", "nodetune_inventory_")) and name != "nodetune_health_enabled")


class HealthConfigError(SettingError):
    """The nodetune_health_* variables are invalid; ``errors`` lists every problem."""


_Errors = Errors


def _number(ctx: Any, config: Dict[str, Any], name: str, default: Optional[float], what: str) -> Optional[float]:
    value = config.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool):
        ctx.error("%s=%s is not valid: expected %s" % (name, describe(value), what))
        return default
    try:
        number = float(str(value).strip())
    except ValueError:
        ctx.error("%s=%s is not valid: expected %s" % (name, describe(value), what))
        return default
    if number <= 0:
        ctx.error("%s=%s is not valid: expected %s greater than 0" % (name, describe(value), what))
        return default
    return number


def _margin(ctx: Any, config: Dict[str, Any], name: str, default: float, what: str) -> float:
    value = config.get(name)
    if value is None:
        return default
    try:
        number = float(str(value).strip())
    except ValueError:
        number = -1.0
    if isinstance(value, bool) or number < 0 or number >= 100:
        ctx.error("%s=%s is not valid: expected %s from 0 to below 100" % (name, describe(value), what))
        return default
    return number


def validate_config(config: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The health thresholds, checked and with defaults; raises HealthConfigError listing every problem."""
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise HealthConfigError(["health must be a mapping of the nodetune_health_* variables, got %s"
                                 % describe(config)])
    ctx: Any = _Errors()  # area_common's validators only call ctx.error()
    unknown_keys(ctx, config, VARIABLES, AREA)
    out: Dict[str, Any] = {
        "enabled": want_bool(ctx, config, "nodetune_health_enabled", True),
        # no default: a sensor without a limit file is not judged unless the user names a limit for it
        "temp_max_c": _number(ctx, config, "nodetune_health_gpu_temp_max_c", None, "degrees Celsius (or null)"),
        "power_max_w": _number(ctx, config, "nodetune_health_gpu_power_max_w", DEFAULT_POWER_MAX_W, "watts"),
        "ib_rate_min_gbps": _number(ctx, config, "nodetune_health_ib_rate_min_gbps", None, "Gb/s (or null)"),
        "temp_margin_c": _margin(ctx, config, "nodetune_health_gpu_temp_margin_c", DEFAULT_TEMP_MARGIN_C,
                                 "degrees Celsius"),
        "power_margin_pct": _margin(ctx, config, "nodetune_health_gpu_power_margin_pct", DEFAULT_POWER_MARGIN_PCT,
                                    "a percentage"),
    }
    if out["power_max_w"] is None:
        out["power_max_w"] = DEFAULT_POWER_MAX_W
    stability.validate(ctx, config, out)
    if config.get("nodetune_health_checks") is None:
        out["checks"] = list(CHECKS)
    else:
        listed = want_list(ctx, config, "nodetune_health_checks")
        bad = [c for c in listed if c not in CHECKS]
        if bad:
            ctx.error("nodetune_health_checks has unknown check%s %s: valid checks are %s"
                      % ("s" if len(bad) > 1 else "", ", ".join(describe(c) for c in bad), ", ".join(CHECKS)))
        out["checks"] = [c for c in CHECKS if c in listed]
    if ctx.errors:
        raise HealthConfigError(ctx.errors)
    return out


def _na(check: str, why: str) -> Finding:
    return Finding("health." + check, "-", "-", "-", NOT_APPLICABLE, severity="info", remedy=why, source=SOURCE)


def _unsupported(check: str, target: str, why: str) -> Finding:
    return Finding("health." + check, target, "-", "-", UNSUPPORTED, severity="info", remedy=why, source=SOURCE)


def _read_number(root: Root, rel: str) -> Optional[int]:
    text = root.read(rel)
    if text is None:
        return None
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None


def _millidegrees(root: Root, rel: str) -> Optional[float]:
    value = _read_number(root, rel)
    return None if value is None else value / 1000.0


def gpu_sensors(root: Root, hwmon: str) -> List[Tuple[str, float, Optional[float], str]]:
    """(label, degrees C, the sensor's own limit in C or None, the limit's file) of every ``tempN_input``:
    ``tempN_crit``, else ``tempN_emergency``."""
    out = []
    for name in root.listdir(hwmon):
        if not (name.startswith("temp") and name.endswith("_input")):
            continue
        value = _millidegrees(root, "%s/%s" % (hwmon, name))
        if value is None:
            continue
        index = name[len("temp"):-len("_input")]
        label = root.read("%s/temp%s_label" % (hwmon, index)) or "temp%s" % index
        limit, source = None, ""
        for kind in ("crit", "emergency"):
            limit = _millidegrees(root, "%s/temp%s_%s" % (hwmon, index, kind))
            if limit is not None and limit > 0:
                source = "temp%s_%s" % (index, kind)
                break
            limit = None
        out.append((label, value, limit, source))
    return out


def gpu_power(root: Root, hwmon: str) -> Optional[Tuple[str, float]]:
    """(file, watts): ``power1_average`` (MI200) else ``power1_input`` (MI300X reports the current power)."""
    for name in ("power1_average", "power1_input"):
        microwatts = _read_number(root, "%s/%s" % (hwmon, name))
        if microwatts is not None:
            return name, microwatts / 1e6
    return None


def gpu_power_cap(root: Root, hwmon: str) -> Optional[float]:
    """The board's enforced power cap in watts (``power1_cap``, microwatts), None where absent or 0."""
    microwatts = _read_number(root, "%s/power1_cap" % hwmon)
    return microwatts / 1e6 if microwatts else None


def check_gpu_temp(root: Root, topology: Dict[str, Any], cfg: Dict[str, Any]) -> List[Finding]:
    gpus = topology.get("gpus") or []
    if not gpus:
        return [_na("gpu_temp", "no GPU on this node")]
    margin = cfg["temp_margin_c"]
    fixed = cfg["temp_max_c"]
    findings = []
    for gpu in gpus:
        hwmon = gpu.get("hwmon")
        sensors = gpu_sensors(root, hwmon) if hwmon else []
        if not sensors:
            findings.append(_unsupported(
                "gpu_temp", gpu["bdf"], "no hwmon temperature for this GPU (driver not loaded, or a virtual function)"))
            continue
        rows, unjudged = [], []
        for label, value, limit, source in sensors:
            if limit is not None:
                rows.append((limit - margin - value, label, value, limit - margin,
                             "%s %g C - %g" % (source, limit, margin)))
            elif fixed is not None:
                rows.append((fixed - value, label, value, fixed, "nodetune_health_gpu_temp_max_c %g C" % fixed))
            else:
                unjudged.append((label, value))
        if not rows:
            # amdgpu publishes no limit for these sensors (MI300X before Linux 6.7): no number to compare with
            findings.append(Finding(
                "health.gpu_temp", gpu["bdf"], "-", ", ".join("%.1f C (%s)" % (v, lb) for lb, v in unjudged),
                UNSUPPORTED, severity="info",
                source=SOURCE,
                remedy="no hwmon tempN_crit/tempN_emergency for this GPU's sensors (amdgpu publishes MI300X limits "
                       "from Linux 6.7): set nodetune_health_gpu_temp_max_c to compare them with a limit of your "
                       "own"))
            continue
        headroom, label, value, threshold, why = min(rows)
        good = headroom > 0
        expected = "< %g C (%s, %s)" % (threshold, label, why)
        if unjudged:
            expected += "; no limit file: %s" % ", ".join(lb for lb, _v in unjudged)
        findings.append(Finding(
            "health.gpu_temp", gpu["bdf"], expected, "%.1f C (%s)" % (value, label), OK if good else DRIFT,
            severity="high", source=SOURCE,
            remedy="" if good else "the GPU's %s sensor is within %g C of its own critical limit (or above "
                                   "nodetune_health_gpu_temp_max_c where it has none): the firmware throttles clocks "
                                   "there; check airflow, fan policy and inlet temperature" % (label, margin)))
    return findings


def check_gpu_power(root: Root, topology: Dict[str, Any], cfg: Dict[str, Any]) -> List[Finding]:
    gpus = topology.get("gpus") or []
    if not gpus:
        return [_na("gpu_power", "no GPU on this node")]
    margin = cfg["power_margin_pct"]
    findings = []
    for gpu in gpus:
        hwmon = gpu.get("hwmon")
        reading = gpu_power(root, hwmon) if hwmon else None
        if reading is None:
            findings.append(_unsupported(
                "gpu_power", gpu["bdf"],
                "no hwmon power1_average/power1_input for this GPU (on MI250 only one GCD of each OAM reports it)"))
            continue
        source, watts = reading
        cap = gpu_power_cap(root, hwmon)
        if cap is not None:
            limit = cap * (1 + margin / 100.0)
            expected = "<= %g W (power1_cap %g W + %g%%)" % (round(limit, 1), cap, margin)
            why = ("the GPU draws more than its own power cap allows (power1_cap %g W): the firmware should hold it "
                   "there, so check the cap and the power readings (a stale or wrong cap, a firmware problem)" % cap)
        else:
            limit = cfg["power_max_w"]
            expected = "<= %g W (fixed: no power1_cap)" % limit
            why = "the GPU draws more than the fixed %g W (it exposes no power1_cap to compare with)" % limit
        good = watts <= limit
        findings.append(Finding(
            "health.gpu_power", gpu["bdf"], expected, "%.1f W (%s)" % (watts, source),
            OK if good else DRIFT, severity="medium", source=SOURCE, remedy="" if good else why))
    return findings


# ------------------------------------------------------------------------------------------------ xGMI links
# amdgpu's sysfs gpu_metrics is the SMU driver's table as it is (amdgpu_pm.c, amdgpu_get_gpu_metrics): a struct
# gpu_metrics_v<format>_<content> of drivers/gpu/drm/amd/include/kgd_pp_interface.h, naturally aligned C, little
# endian, after struct metrics_table_header. The layouts are not append-only (v1.6 and v1.7 move fields), so each is
# the kernel's field list up to the last field read here, and a table is read only with its own header's revision.
_HEADER = (("structure_size", "H", 1), ("format_revision", "B", 1), ("content_revision", "B", 1))
_TEMPS_POWER = (("temperature_hotspot", "H", 1), ("temperature_mem", "H", 1), ("temperature_vrsoc", "H", 1),
                ("curr_socket_power", "H", 1), ("average_gfx_activity", "H", 1), ("average_umc_activity", "H", 1))
_RESIDENCIES = (("accumulation_counter", "I", 1), ("prochot_residency_acc", "I", 1), ("ppt_residency_acc", "I", 1),
                ("socket_thm_residency_acc", "I", 1), ("vr_thm_residency_acc", "I", 1),
                ("hbm_thm_residency_acc", "I", 1))
_LINKS = (("pcie_link_width", "H", 1), ("pcie_link_speed", "H", 1), ("xgmi_link_width", "H", 1),
          ("xgmi_link_speed", "H", 1))
_TO_LINK_STATUS = (("gfx_activity_acc", "I", 1), ("mem_activity_acc", "I", 1), ("pcie_bandwidth_acc", "Q", 1),
                   ("pcie_bandwidth_inst", "Q", 1), ("pcie_l0_to_recov_count_acc", "Q", 1),
                   ("pcie_replay_count_acc", "Q", 1), ("pcie_replay_rover_count_acc", "Q", 1),
                   ("pcie_nak_sent_count_acc", "I", 1), ("pcie_nak_rcvd_count_acc", "I", 1),
                   ("xgmi_read_data_acc", "Q", 8), ("xgmi_write_data_acc", "Q", 8), ("xgmi_link_status", "H", 8))
_VCN = (("vcn_activity", "H", 4),)
_JPEG = (("jpeg_activity", "H", 32),)
_ENERGY_CLOCK = (("energy_accumulator", "Q", 1), ("system_clock_counter", "Q", 1))
_THROTTLE_LOCK = (("throttle_status", "I", 1), ("gfxclk_lock_status", "I", 1))
_V1_7 = (_HEADER + _TEMPS_POWER + (("mem_max_bandwidth", "Q", 1),) + _ENERGY_CLOCK + _RESIDENCIES
         + (("gfxclk_lock_status", "I", 1),) + _LINKS + _TO_LINK_STATUS)
GPU_METRICS_V1_FIELDS: Dict[int, Tuple[Tuple[str, str, int], ...]] = {
    4: _HEADER + _TEMPS_POWER + _VCN + _ENERGY_CLOCK + _THROTTLE_LOCK + _LINKS,
    5: _HEADER + _TEMPS_POWER + _VCN + _JPEG + _ENERGY_CLOCK + _THROTTLE_LOCK + _LINKS,
    6: _HEADER + _TEMPS_POWER + _VCN + _JPEG + _ENERGY_CLOCK + _RESIDENCIES + _THROTTLE_LOCK + _LINKS,
    7: _V1_7,
    8: _V1_7,  # gpu_metrics_v1_8 differs from v1.7 only after num_partition (its xcp_stats)
}
XGMI_ID = "health.xgmi_links"
XGMI_LINK_INACTIVE, XGMI_LINK_ACTIVE, XGMI_LINK_NA = 0, 1, 2  # enum amdgpu_xgmi_link_status (kgd_pp_interface.h)
NOT_FILLED = 0xFFFF  # smu_cmn_init_soft_gpu_metrics sets the whole table to 0xFF before the driver fills it


def struct_offsets(fields: Sequence[Tuple[str, str, int]]) -> Tuple[Dict[str, Tuple[int, str, int]], int]:
    """{name: (offset, struct format, count)} and the end of the last field, as a C compiler lays the fields out
    on x86-64 (each at a multiple of its own size)."""
    out: Dict[str, Tuple[int, str, int]] = {}
    offset = 0
    for name, fmt, count in fields:
        size = struct.calcsize("<" + fmt)
        offset = (offset + size - 1) // size * size
        out[name] = (offset, fmt, count)
        offset += size * count
    return out, offset


def parse_gpu_metrics(data: bytes) -> Tuple[Optional[Dict[str, Any]], str]:
    """The xGMI fields of a gpu_metrics table: ({revision, xgmi_link_width, xgmi_link_speed, xgmi_link_status},
    "") with None for a field this revision does not declare, or (None, why) for a table that cannot be read."""
    if len(data) < 4:
        return None, "gpu_metrics is empty or shorter than its header"
    size, major, minor = struct.unpack_from("<HBB", data)
    revision = "v%d.%d" % (major, minor)
    out: Dict[str, Any] = {"revision": revision, "xgmi_link_width": None, "xgmi_link_speed": None,
                           "xgmi_link_status": None}
    if major != 1:
        return None, "gpu_metrics %s is not a discrete GPU's table (format 1)" % revision
    if minor < 4:
        return out, ""  # v1.0-v1.3 declare no xGMI field
    fields = GPU_METRICS_V1_FIELDS.get(minor)
    if fields is None:
        return None, "gpu_metrics %s has a layout this version of nodetune does not know" % revision
    offsets, end = struct_offsets(fields)
    if len(data) < end or size < end:
        return None, "gpu_metrics %s is %d bytes (header: %d), too short for its own layout (%d)" % (
            revision, len(data), size, end)
    for name in ("xgmi_link_width", "xgmi_link_speed", "xgmi_link_status"):
        if name in offsets:
            offset, fmt, count = offsets[name]
            values = list(struct.unpack_from("<%d%s" % (count, fmt), data, offset))
            out[name] = values if name == "xgmi_link_status" else (None if values[0] == NOT_FILLED else values[0])
    return out, ""


def read_gpu_metrics(root: Root, bdf: str) -> Tuple[Optional[Dict[str, Any]], str]:
    try:
        with open(root.real("sys/bus/pci/devices/%s/gpu_metrics" % bdf), "rb") as handle:
            data = handle.read(4096)
    except (IOError, OSError, NodeFileError):
        return None, "no readable gpu_metrics (amdgpu without SMU metrics, or not amdgpu)"
    return parse_gpu_metrics(data)


def xgmi_ras_counts(root: Root, bdf: str) -> Optional[Tuple[int, int]]:
    """(uncorrectable, correctable) of ras/xgmi_wafl_err_count, None where RAS does not cover the xGMI block.
    amdgpu counts xGMI/WAFL PCS errors (training, CRC, data loss, replay timeouts...) as uncorrectable
    (amdgpu_xgmi.c, amdgpu_xgmi_query_pcs_error_status)."""
    text = root.read("sys/bus/pci/devices/%s/ras/xgmi_wafl_err_count" % bdf)
    if text is None:
        return None
    counts = {}
    for line in text.splitlines():
        key, _sep, value = line.partition(":")
        words = value.split()
        if words and words[0].isdigit():
            counts[key.strip()] = int(words[0])
    if "ue" not in counts:
        return None
    return counts["ue"], counts.get("ce", 0)


def _link_words(status: Sequence[int]) -> Tuple[List[int], List[int], str]:
    """(ports up, ports down, a note on the others) of xgmi_link_status."""
    up = [i for i, v in enumerate(status) if v == XGMI_LINK_ACTIVE]
    down = [i for i, v in enumerate(status) if v == XGMI_LINK_INACTIVE]
    absent = sum(1 for v in status if v == NOT_FILLED)
    na = sum(1 for v in status if v == XGMI_LINK_NA)
    unknown = len(status) - len(up) - len(down) - absent - na
    note = "%d not connected" % absent + (", %d not available" % na if na else "") + (
        ", %d unknown" % unknown if unknown else "")
    return up, down, note


def check_xgmi_links(root: Root, topology: Dict[str, Any]) -> List[Finding]:
    """Every xGMI port of each hive member up, and no uncorrectable xGMI error.

    ``xgmi_link_status[i]`` is ``amdgpu_get_xgmi_link_status(adev, i)`` (amdgpu_xgmi.c; gpu_metrics v1.7 on,
    smu_v13_0_6/smu_v13_0_12): 1 where the port's PCS state is L0, 0 where it is not (a link down or retraining),
    2 on a virtual function, and left at 0xFFFF for a disabled port (-ENOLINK: nothing attached) or an XGMI IP
    without the state register (-EOPNOTSUPP). Older tables (MI250: v1.3; MI300X on older kernels: v1.3 to v1.6)
    have no per-port state; ``xgmi_link_width``/``xgmi_link_speed`` (v1.4 on, lanes and Gb/s) are shown but not
    judged: nothing documents what they should read. Where neither the state nor the RAS counter can be read, the
    finding is ``unsupported``.
    """
    gpus = [g for g in topology.get("gpus") or [] if g.get("hive_id")]
    if not gpus:
        return [_na("xgmi_links", "no GPU in an xGMI hive on this node")]
    hive_size: Dict[Any, int] = {}
    for gpu in gpus:
        hive_size[gpu["hive_id"]] = hive_size.get(gpu["hive_id"], 0) + 1
    findings = []
    for gpu in gpus:
        bdf = gpu["bdf"]
        peers = hive_size[gpu["hive_id"]] - 1
        metrics, why = read_gpu_metrics(root, bdf)
        ras = xgmi_ras_counts(root, bdf)
        status = metrics.get("xgmi_link_status") if metrics else None
        up, down, note = _link_words(status) if status is not None else ([], [], "")
        states = bool(up or down)
        if metrics and not states:
            why = ("gpu_metrics %s has no per-port xGMI state" % metrics["revision"] if status is None else
                   "gpu_metrics %s reports no port's state (a virtual function, or an XGMI IP without it)"
                   % metrics["revision"])
        parts = []
        if states:
            parts.append("%d up, %d down%s, %s" % (
                len(up), len(down), " (port %s)" % ", ".join(str(i) for i in down) if down else "", note))
        if metrics and metrics.get("xgmi_link_width") is not None and metrics.get("xgmi_link_speed") is not None:
            parts.append("x%d at %d Gb/s" % (metrics["xgmi_link_width"], metrics["xgmi_link_speed"]))
        if ras is not None:
            parts.append("%d uncorrectable, %d correctable xGMI errors" % ras)
        problems = []
        if down:
            problems.append("xGMI port%s %s of this GPU %s not in L0 (gpu_metrics xgmi_link_status 0): RCCL goes "
                            "over PCIe or another hop for that peer; check amd-smi xgmi --link-status and dmesg, then "
                            "reset or service the GPU or baseboard%s" % (
                                "s" if len(down) > 1 else "", ", ".join(str(i) for i in down),
                                "are" if len(down) > 1 else "is",
                                "" if up else " (every port reads down: a virtual function on a kernel without "
                                              "AMDGPU_XGMI_LINK_NA reports that too; waive it there)"))
        if ras is not None and ras[0]:
            problems.append("%d uncorrectable xGMI link error%s (ras/xgmi_wafl_err_count): a link failed "
                            "training, lost data or kept retrying; check dmesg for 'XGMI PCS' and have the GPU or "
                            "baseboard serviced" % (ras[0], "s" if ras[0] > 1 else ""))
        expected = "every xGMI port up, 0 uncorrectable xGMI errors (hive of %d)" % (peers + 1)
        if not states:
            expected = "0 uncorrectable xGMI errors (hive of %d; port state not readable: %s)" % (peers + 1, why)
        if not states and ras is None:
            findings.append(Finding(
                XGMI_ID, bdf, "-", "; ".join(parts) or "-", UNSUPPORTED, severity="info", source=SOURCE,
                remedy="no xGMI link state readable: %s, and no ras/xgmi_wafl_err_count (RAS off for xGMI). The KFD "
                       "io_links cannot tell: the kernel lists one to every hive member, trained or not" % why))
            continue
        findings.append(Finding(
            XGMI_ID, bdf, expected, "; ".join(parts), DRIFT if problems else OK, severity="high", source=SOURCE,
            remedy="; ".join(problems)))
    return findings


def check_ib_ports(topology: Dict[str, Any], cfg: Dict[str, Any]) -> List[Finding]:
    ports = [(dev["name"], port) for dev in topology.get("ib_devices") or [] for port in dev.get("ports") or []]
    if not ports:
        return [_na("ib_port", "no InfiniBand/RDMA port on this node")]
    minimum = cfg["ib_rate_min_gbps"]
    findings = []
    for hca, port in ports:
        state, phys, rate = port.get("state"), port.get("phys_state"), port.get("rate_gbps")
        problems = []
        if state != "ACTIVE":
            problems.append("port state is %s: check the cable and the subnet manager (a port stays INIT until the "
                            "SM configures it)" % (state or "unknown"))
        if phys is not None and phys != "LinkUp":
            problems.append("physical state is %s: no link (cable, transceiver, switch port)" % phys)
        if minimum is not None and (rate is None or rate < minimum):
            problems.append("rate %s is below nodetune_health_ib_rate_min_gbps=%g: a lane or speed downgrade "
                            "(cable, transceiver)" % (port.get("rate") or "unknown", minimum))
        expected = "ACTIVE, LinkUp" + (", >= %g Gb/sec" % minimum if minimum is not None else "")
        actual = "%s, %s, %s" % (state or "unknown", phys or "unknown", port.get("rate") or "unknown rate")
        findings.append(Finding(
            "health.ib_port", "%s/%s" % (hca, port.get("port")), expected, actual,
            DRIFT if problems else OK, severity="high", source=SOURCE,
            remedy="; ".join(problems) + ("; waive it (id health.ib_port) if the port is unused" if problems else "")))
    return findings


def nvme_devices(topology: Dict[str, Any]) -> List[Tuple[str, Dict[str, Any]]]:
    pci = dict((dev["bdf"], dev) for dev in topology.get("pci_devices") or [] if dev.get("bdf"))
    bdfs = sorted(set(b["bdf"] for b in topology.get("block_devices") or []
                      if b.get("kind") == "nvme" and b.get("bdf") in pci))
    return [("NVMe", pci[bdf]) for bdf in bdfs]


def check(root: Root, topology: Dict[str, Any], config: Optional[Dict[str, Any]],
          areas: Optional[Dict[str, Any]] = None) -> List[Finding]:
    """Every enabled health check of one node; raises HealthConfigError on invalid variables. Never writes.
    ``areas``: the run's areas ({area: {variable: value}}); with the limits area on, its findings are memlock's."""
    cfg = validate_config(config)
    if not cfg["enabled"]:
        return []
    findings: List[Finding] = []
    for name in cfg["checks"]:
        if name == "gpu_temp":
            findings += check_gpu_temp(root, topology, cfg)
        elif name == "gpu_power":
            findings += check_gpu_power(root, topology, cfg)
        elif name == "ib_port":
            findings += check_ib_ports(topology, cfg)
        elif name == "pcie_link":
            findings += pcie_link_findings(nvme_devices(topology), "health.pcie_link", SOURCE, "NVMe drive")
        elif name == "xgmi_links":
            findings += check_xgmi_links(root, topology)
        else:
            findings += stability.check(name, root, topology, cfg, areas)
    return findings
