# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Health findings that ride along with verify: GPU temperature and power, IB ports, NVMe PCIe links.

Not settings nodetune owns, but the things an operator wants to see in the same report: a hot or power-hungry GPU,
an InfiniBand port that is down or trained at a lower rate, an NVMe drive whose link came up narrower or slower than
it can run.

GPU thresholds come from each device's own hwmon limits (amdgpu, Documentation/gpu/amdgpu/thermal.rst):
``tempN_crit`` (the sensor's critical maximum, where the firmware throttles hard) else ``tempN_emergency`` (where
the ASIC shuts down), per sensor (edge, junction and memory have different limits: comparing the hottest one with
one number misreads a normal junction temperature), minus ``nodetune_health_gpu_temp_margin_c`` (5 C);
``power1_cap`` (the board's enforced power cap: 500 W on MI250, 750 W on MI300X) plus
``nodetune_health_gpu_power_margin_pct`` (5 %). The fixed ``nodetune_health_gpu_temp_max_c`` /
``nodetune_health_gpu_power_max_w`` apply only where a device exposes no such limit.

Units (Documentation/hwmon/sysfs-interface.rst): ``temp*_input`` in millidegrees Celsius, ``power1_average`` and
``power1_input`` in microwatts. The GPU's hwmon directory comes from the Topology (``gpus[].hwmon``).

Check ids: ``health.gpu_temp``, ``health.gpu_power``, ``health.ib_port``, ``health.pcie_link``. GPU and NIC links
are checked by ``bios.pcie_link`` (bios.py); ``health.pcie_link`` covers the NVMe drives with the same code.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils import areas, stability
from ansible_collections.nodetune.instinct.plugins.module_utils.area_common import (
    Errors,
    describe,
    unknown_keys,
    want_bool,
    want_list,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.bios import pcie_link_findings
from ansible_collections.nodetune.instinct.plugins.module_utils.finding import (
    DRIFT,
    NOT_APPLICABLE,
    OK,
    UNSUPPORTED,
    Finding,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.instinct.plugins.module_utils.setting import SettingError

SOURCE = "health"
AREA = "health"
CHECKS = ("gpu_temp", "gpu_power", "ib_port", "pcie_link") + stability.CHECKS
DEFAULT_TEMP_MAX_C = 85.0  # fallback only: a sensor without tempN_crit/tempN_emergency
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
        "temp_max_c": _number(ctx, config, "nodetune_health_gpu_temp_max_c", DEFAULT_TEMP_MAX_C, "degrees Celsius"),
        "power_max_w": _number(ctx, config, "nodetune_health_gpu_power_max_w", DEFAULT_POWER_MAX_W, "watts"),
        "ib_rate_min_gbps": _number(ctx, config, "nodetune_health_ib_rate_min_gbps", None, "Gb/s (or null)"),
        "temp_margin_c": _margin(ctx, config, "nodetune_health_gpu_temp_margin_c", DEFAULT_TEMP_MARGIN_C,
                                 "degrees Celsius"),
        "power_margin_pct": _margin(ctx, config, "nodetune_health_gpu_power_margin_pct", DEFAULT_POWER_MARGIN_PCT,
                                    "a percentage"),
    }
    if out["temp_max_c"] is None:
        out["temp_max_c"] = DEFAULT_TEMP_MAX_C
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
    findings = []
    for gpu in gpus:
        hwmon = gpu.get("hwmon")
        sensors = gpu_sensors(root, hwmon) if hwmon else []
        if not sensors:
            findings.append(_unsupported(
                "gpu_temp", gpu["bdf"], "no hwmon temperature for this GPU (driver not loaded, or a virtual function)"))
            continue
        rows = []
        for label, value, limit, source in sensors:
            if limit is not None:
                rows.append((limit - margin - value, label, value, limit - margin,
                             "%s %g C - %g" % (source, limit, margin)))
            else:
                rows.append((cfg["temp_max_c"] - value, label, value, cfg["temp_max_c"],
                             "fixed %g C: no limit file" % cfg["temp_max_c"]))
        headroom, label, value, threshold, why = min(rows)
        good = headroom > 0
        findings.append(Finding(
            "health.gpu_temp", gpu["bdf"], "< %g C (%s, %s)" % (threshold, label, why),
            "%.1f C (%s)" % (value, label), OK if good else DRIFT, severity="high", source=SOURCE,
            remedy="" if good else "the GPU's %s sensor is within %g C of its own critical limit (or above the "
                                   "fixed threshold where it has none): the firmware throttles clocks there; check "
                                   "airflow, fan policy and inlet temperature" % (label, margin)))
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


def check(root: Root, topology: Dict[str, Any], config: Optional[Dict[str, Any]]) -> List[Finding]:
    """Every enabled health check of one node; raises HealthConfigError on invalid variables. Never writes."""
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
        else:
            findings += stability.check(name, root, topology, cfg)
    return findings
