# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Read-only stability checks that ride with the health checks (issue 15): what the seeds' stability checklist and
AMD's guides name, each with its source.

- ``health.pcie_acs``: no PCIe ACS P2P redirect on any bridge between a GPU or NIC and its root port (the ACS
  extended capability, id 0x000D, control register at +6 of the ``config`` file: PCIe Base Spec 7.7.11). AMD's
  multi-node RCCL guides disable ACS (``setpci ... ECAP_ACS+0x6.w=0000``): with P2P redirect on, GPU<->NIC traffic
  under one switch detours through the root complex. Only Request Redirect, Completion Redirect and Egress Control
  (bits 2, 3, 5) redirect peer traffic; they are the bits ``pci=disable_acs_redir=`` clears (drivers/pci/pci.c),
  so Source Validation and Upstream Forwarding alone are ok. With the IOMMU on the kernel sets SV/RR/CR/UF on every
  downstream port at each boot (drivers/iommu/amd/init.c ``detect_ivrs()`` -> ``pci_request_acs()``; drivers/pci/
  pci.c ``pci_enable_acs()`` -> ``pci_std_enable_acs()``), so the remedy is then the kernel parameter, not the
  BIOS. Reading past the first 64 bytes of config space takes root; where the extended space cannot be read the
  finding is unsupported.
- ``health.xgmi_links``: listed here, run by health.py (``check_xgmi_links``): amdgpu's per-port xGMI state and
  xGMI RAS errors, since the KFD topology lists a link to every hive member whether it trained or not.
- ``health.gpu_ras``: amdgpu RAS error counters, ``ras/<block>_err_count`` (``ue: N`` / ``ce: N``) of each GPU's
  PCI device (Documentation/gpu/amdgpu/ras.rst); any uncorrectable error is drift, correctable ones are shown.
  ``xgmi_wafl`` (xGMI link errors) is left to ``health.xgmi_links``, so that a bad link is one finding.
- ``health.ib_counters``: InfiniBand port error counters ``ports/N/counters/{symbol_error, link_downed,
  port_rcv_errors, port_xmit_discards}`` (Documentation/ABI/stable/sysfs-class-infiniband) above
  ``nodetune_health_ib_counter_max`` (default: infiniband-diags' error_thresholds, 10/10/10/100).
- ``health.memlock``: RDMA registers (pins) memory, so the max locked memory must be unlimited for jobs: the
  ``memlock`` that pam_limits sets for ``*`` from /etc/security/limits.conf and limits.d/*.conf (limits.conf(5): soft
  and hard, the later line winning) and systemd's ``DefaultLimitMEMLOCK`` from system.conf / system.conf.d
  (systemd-system.conf(5)), for services such as slurmd that start jobs, read as the limits area reads them
  (areas/limits.py). AMD's RCCL/multi-node guides ask for ``ulimit -l unlimited``. With the limits area on, its
  findings are the check.
- ``health.gpu_perf_level``: amdgpu ``power_dpm_force_performance_level`` against
  ``nodetune_health_gpu_perf_level`` (Documentation/gpu/amdgpu/thermal.rst).
- ``health.gpu_power_cap``: hwmon ``power1_cap`` (microwatts) against ``nodetune_health_gpu_power_cap_w``
  (Documentation/gpu/amdgpu/thermal.rst, hwmon sysfs-interface).
  Where the gpu area sets the level (performance determinism) or the cap, its findings (``gpu.*``, the Settings
  apply writes) are these checks.

Never writes.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.areas import gpu as area_gpu
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import limits as area_limits
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import (
    DRIFT,
    NOT_APPLICABLE,
    OK,
    UNSUPPORTED,
    Finding,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError, Root

SOURCE = "health"
CHECKS = ("pcie_acs", "xgmi_links", "gpu_ras", "ib_counters", "memlock", "gpu_perf_level", "gpu_power_cap")
ACS_CAP_ID = 0x000D  # PCIe extended capability id of Access Control Services
# ACS control bits (include/uapi/linux/pci_regs.h, PCI_ACS_*)
ACS_BITS = (("SV", 0x01), ("TB", 0x02), ("RR", 0x04), ("CR", 0x08), ("UF", 0x10), ("EC", 0x20), ("DT", 0x40))
# P2P Request Redirect, P2P Completion Redirect, P2P Egress Control: the bits that send peer traffic to the root
# complex, and the ones pci=disable_acs_redir= clears (drivers/pci/pci.c, pci_enable_acs())
ACS_REDIRECT = 0x04 | 0x08 | 0x20
EXT_CAP_START = 0x100
IB_COUNTERS = ("symbol_error", "link_downed", "port_rcv_errors", "port_xmit_discards")
# Declared once, with its source (infiniband-diags' error_thresholds), in the verify role's declaration
# (areas/declarations.py).
DEFAULT_IB_COUNTER_MAX = dict(areas.defaults("verify")["nodetune_health_ib_counter_max"])
PERF_LEVELS = ("auto", "low", "high", "manual", "profile_standard", "profile_min_sclk", "profile_min_mclk",
               "profile_peak", "perf_determinism")


def _id(check: str) -> str:
    return "health." + check


def _na(check: str, why: str) -> Finding:
    return Finding(_id(check), "-", "-", "-", NOT_APPLICABLE, severity="info", remedy=why, source=SOURCE)


def _pci(bdf: str) -> str:
    return "sys/bus/pci/devices/" + bdf


def _int(text: Optional[str]) -> Optional[int]:
    try:
        return int((text or "").split()[0])
    except (ValueError, IndexError):
        return None


# ------------------------------------------------------------------------------------------------ checks
def _bridges(root: Root, bdf: str) -> List[str]:
    """The PCI functions above ``bdf`` up to its root port, nearest first (its sysfs path's parents)."""
    try:
        path = root.inner("sys/bus/pci/devices/" + bdf)
    except NodeFileError:  # a damaged link: no path, no bridges to check
        return []
    parts = path.split("/")
    return [p for p in reversed(parts[:-1]) if len(p) == 12 and p.count(":") == 2 and "." in p]


def read_config(root: Root, bdf: str) -> bytes:
    """A function's config space as this user may read it (64 bytes unprivileged, 4096 as root); empty where
    unreadable."""
    try:
        with open(root.real("sys/bus/pci/devices/%s/config" % bdf), "rb") as handle:
            return handle.read(4096)
    except (IOError, OSError, NodeFileError):
        return b""


def acs_control(config: bytes) -> Optional[int]:
    """The ACS control register from a function's config space, 0 where it has no ACS capability, None where the
    extended space was not readable (not root, or a conventional PCI function)."""
    if len(config) < 256:  # an unprivileged read stops at 64 bytes
        return None
    if len(config) < EXT_CAP_START + 4:  # conventional config space only: no ACS
        return 0
    offset = EXT_CAP_START
    for _hop in range(64):  # a list that loops is malformed: give up rather than spin
        header = int.from_bytes(config[offset:offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return 0
        if header & 0xFFFF == ACS_CAP_ID:
            return int.from_bytes(config[offset + 6:offset + 8], "little") if len(config) >= offset + 8 else None
        offset = (header >> 20) & 0xFFC
        if offset < EXT_CAP_START or offset + 4 > len(config):
            return 0
    return 0


def acs_names(control: int) -> str:
    """``0x001d`` -> ``"SV RR CR UF"``."""
    return " ".join(name for name, bit in ACS_BITS if control & bit)


def _acs_remedy(root: Root, kind: str, bridges: List[str], iommu: bool) -> str:
    """How to turn the redirect off where it is on, for the bridges that have it (their vendor:device ids make the
    kernel parameter, whose device list is ';'-separated: Documentation/admin-guide/kernel-parameters.txt)."""
    ids = []
    for bridge in bridges:
        vendor, device = [(root.read(_pci(bridge) + "/" + f) or "").replace("0x", "") for f in ("vendor", "device")]
        name = "pci:%s:%s" % (vendor, device) if vendor and device else bridge  # the kernel takes a BDF too
        if name not in ids:
            ids.append(name)
    param = "pci=disable_acs_redir=" + ";".join(ids)
    why = ("the IOMMU is on, so the kernel sets ACS SV/RR/CR/UF on every downstream port at each boot "
           "(pci_request_acs() from the IOMMU driver, pci_std_enable_acs()), whatever the BIOS says, and a setpci "
           "lasts until the next boot" if iommu else "the firmware left it on")
    return ("%s peer traffic detours through the root complex; %s: add %s to the kernel command line (it clears "
            "only RR/CR/EC, and the kernel applies it with or without the IOMMU), or clear those bits from a boot "
            "unit with setpci -s BDF ECAP_ACS+0x6.w=0000:%04x, or ECAP_ACS+0x6.w=0000 as AMD's multi-node guides do"
            % (kind, why, param, ACS_REDIRECT))


def check_pcie_acs(root: Root, topology: Dict[str, Any]) -> List[Finding]:
    devices = [("GPU", g["bdf"]) for g in topology.get("gpus") or []]
    devices += [("NIC", n["bdf"]) for n in topology.get("ib_devices") or [] if n.get("bdf")]
    if not devices:
        return [_na("pcie_acs", "no GPU or RDMA NIC on this node")]
    iommu = bool((topology.get("iommu") or {}).get("present"))
    expected = "no ACS P2P redirect (RR/CR/EC) on the path"
    findings = []
    for kind, bdf in devices:
        redirect, kept, unreadable, bridges = [], [], [], []
        for bridge in _bridges(root, bdf):
            config = read_config(root, bridge)
            control = acs_control(config)
            if control is None:
                unreadable.append(bridge)
            elif control & ACS_REDIRECT:
                redirect.append("%s (0x%04x)" % (bridge, control))
                bridges.append(bridge)
            elif control:  # Source Validation, Upstream Forwarding, ...: isolation without redirect
                kept.append("%s (0x%04x: %s)" % (bridge, control, acs_names(control)))
        if unreadable and not redirect:
            findings.append(Finding(_id("pcie_acs"), bdf, expected, "-", UNSUPPORTED, severity="info",
                                    source=SOURCE, remedy="the extended config space of %s cannot be read "
                                                          "(verify as root)" % ", ".join(unreadable)))
            continue
        actual = "on at " + ", ".join(redirect) if redirect else "off"
        if kept and not redirect:
            actual += " (no redirect bit at %s)" % ", ".join(kept)
        findings.append(Finding(
            _id("pcie_acs"), bdf, expected, actual, DRIFT if redirect else OK, severity="medium", source=SOURCE,
            remedy=_acs_remedy(root, kind, bridges, iommu) if redirect else ""))
    return findings


def _ras_counts(root: Root, bdf: str) -> Optional[Tuple[int, int]]:
    ras = _pci(bdf) + "/ras"
    names = [n for n in root.listdir(ras) if n.endswith("_err_count") and n != "xgmi_wafl_err_count"]
    if not names:
        return None
    ue = ce = 0
    for name in names:
        for line in (root.read("%s/%s" % (ras, name)) or "").splitlines():
            key, _sep, value = line.partition(":")
            number = _int(value) or 0
            if key.strip() == "ue":
                ue += number
            elif key.strip() == "ce":
                ce += number
    return ue, ce


def check_gpu_ras(root: Root, topology: Dict[str, Any]) -> List[Finding]:
    gpus = [g for g in topology.get("gpus") or [] if g.get("vendor") == "amd"]
    if not gpus:
        return [_na("gpu_ras", "no AMD GPU on this node")]
    findings = []
    for gpu in gpus:
        counts = _ras_counts(root, gpu["bdf"])
        if counts is None:
            findings.append(Finding(_id("gpu_ras"), gpu["bdf"], "-", "-", UNSUPPORTED, severity="info",
                                    source=SOURCE, remedy="no ras/*_err_count for this GPU (RAS not enabled)"))
            continue
        ue, ce = counts
        findings.append(Finding(
            _id("gpu_ras"), gpu["bdf"], "0 uncorrectable", "%d uncorrectable, %d correctable" % (ue, ce),
            DRIFT if ue else OK, severity="high", source=SOURCE,
            remedy="uncorrectable memory/GPU errors: drain the node, check amd-smi metric --ecc and dmesg, and "
                   "have the GPU serviced" if ue else ""))
    return findings


def check_ib_counters(root: Root, topology: Dict[str, Any], limits: Dict[str, int]) -> List[Finding]:
    ports = [(dev["name"], port["port"]) for dev in topology.get("ib_devices") or []
             for port in dev.get("ports") or []]
    if not ports:
        return [_na("ib_counters", "no InfiniBand/RDMA port on this node")]
    findings = []
    for hca, port in ports:
        base = "sys/class/infiniband/%s/ports/%s/counters" % (hca, port)
        values = dict((name, _int(root.read("%s/%s" % (base, name)))) for name in sorted(limits))
        readable = dict((k, v) for k, v in values.items() if v is not None)
        if not readable:
            findings.append(Finding(_id("ib_counters"), "%s/%s" % (hca, port), "-", "-", UNSUPPORTED,
                                    severity="info", source=SOURCE, remedy="no port error counters readable"))
            continue
        over = sorted(k for k, v in readable.items() if v > limits[k])
        findings.append(Finding(
            _id("ib_counters"), "%s/%s" % (hca, port), ", ".join("%s <= %d" % (k, limits[k]) for k in sorted(readable)),
            ", ".join("%s %d" % (k, readable[k]) for k in sorted(readable)), DRIFT if over else OK,
            severity="medium", source=SOURCE,
            remedy="port errors above nodetune_health_ib_counter_max (%s): check the cable and transceiver "
                   "(mlxlink, ibqueryerrors); clear the counters (perfquery -x -R) after the repair"
                   % ", ".join(over) if over else ""))
    return findings


def check_memlock(root: Root, topology: Dict[str, Any], areas: Optional[Dict[str, Any]] = None) -> List[Finding]:
    """The ``*`` domain's memlock as pam_limits sets it and systemd's DefaultLimitMEMLOCK as the manager reads it,
    read by the limits area's own readers (areas/limits.py: the same files, the same rules); where that area is on,
    its findings (``limits.*``) are this check."""
    if area_limits.enabled(areas):
        return [_na("memlock", "the limits area is on: limits.pam, limits.systemd, limits.unit and limits.effective "
                               "check the memlock limits (files and what is in effect) against "
                               "nodetune_limits_memlock")]
    if not topology.get("ib_devices"):
        return [_na("memlock", "no RDMA device on this node")]
    found = area_limits.pam_limit(root, "*", "memlock")
    soft, hard = [found[k][0] if found.get(k) else None for k in ("soft", "hard")]
    good = soft == hard == area_limits.INFINITY
    where = sorted(set(found[k][1] for k in ("soft", "hard") if found.get(k)))
    shown = ["unset" if v is None else "unlimited" if v == area_limits.INFINITY else "%d" % (v // 1024)
             for v in (soft, hard)]  # as limits.conf writes it: KiB
    actual = "soft %s, hard %s" % tuple(shown)
    if "none" in found:
        actual = "no limits ('* -' at %s)" % found["none"][1]
    findings = [Finding(
        _id("memlock"), "limits.d", "* soft/hard memlock unlimited", actual, OK if good else DRIFT,
        severity="medium", source=SOURCE,
        remedy="" if good else "%sRDMA pins job memory: add '* soft memlock unlimited' and '* hard memlock unlimited' "
                               "to /etc/security/limits.d/ as the last file read (AMD's RCCL guides: ulimit -l "
                               "unlimited), or turn the limits area on (nodetune_limits_enabled)"
                               % ("set at %s; " % ", ".join(where) if where else ""))]
    configured = area_limits.manager_memlock(root)
    value = area_limits.systemd_limit(configured[0]) if configured else None
    good = value == (area_limits.INFINITY, area_limits.INFINITY)
    findings.append(Finding(
        _id("memlock"), "systemd", "DefaultLimitMEMLOCK=infinity",
        "%s (%s)" % configured if configured else "unset (systemd's 8M)", OK if good else DRIFT, severity="medium",
        source=SOURCE,
        remedy="" if good else "services that start jobs (slurmd) inherit systemd's limit: set "
                               "DefaultLimitMEMLOCK=infinity in /etc/systemd/system.conf.d/ (or LimitMEMLOCK="
                               "infinity in the unit), run systemctl daemon-reload and restart those services; the "
                               "limits area does it (nodetune_limits_enabled, nodetune_limits_units)"))
    return findings


def check_gpu_perf_level(root: Root, topology: Dict[str, Any], wanted: Optional[str],
                         areas: Optional[Dict[str, Any]] = None) -> List[Finding]:
    gpus = [g for g in topology.get("gpus") or [] if g.get("vendor") == "amd"]
    owner = area_gpu.takes_over(areas, "perf_level")
    if owner:
        return [_na("gpu_perf_level", owner)]
    if wanted is None:
        return [_na("gpu_perf_level", "nodetune_health_gpu_perf_level is not set")]
    if not gpus:
        return [_na("gpu_perf_level", "no AMD GPU on this node")]
    findings = []
    for gpu in gpus:
        actual = root.read(_pci(gpu["bdf"]) + "/power_dpm_force_performance_level")
        findings.append(Finding(
            _id("gpu_perf_level"), gpu["bdf"], wanted, actual or "unreadable", OK if actual == wanted else DRIFT,
            severity="medium", source=SOURCE,
            remedy="" if actual == wanted else "set it (amd-smi set --perf-level, or echo %s > "
                                               "power_dpm_force_performance_level)" % wanted))
    return findings


def check_gpu_power_cap(root: Root, topology: Dict[str, Any], wanted_w: Optional[float],
                        areas: Optional[Dict[str, Any]] = None) -> List[Finding]:
    gpus = [g for g in topology.get("gpus") or [] if g.get("vendor") == "amd"]
    owner = area_gpu.takes_over(areas, "power_cap")
    if owner:
        return [_na("gpu_power_cap", owner)]
    if wanted_w is None:
        return [_na("gpu_power_cap", "nodetune_health_gpu_power_cap_w is not set")]
    if not gpus:
        return [_na("gpu_power_cap", "no AMD GPU on this node")]
    findings = []
    for gpu in gpus:
        microwatts = _int(root.read(gpu["hwmon"] + "/power1_cap")) if gpu.get("hwmon") else None
        if microwatts is None:
            findings.append(Finding(_id("gpu_power_cap"), gpu["bdf"], "%g W" % wanted_w, "-", UNSUPPORTED,
                                    severity="info", source=SOURCE, remedy="no hwmon power1_cap for this GPU"))
            continue
        watts = microwatts / 1e6
        good = abs(watts - wanted_w) < 1.0
        findings.append(Finding(
            _id("gpu_power_cap"), gpu["bdf"], "%g W" % wanted_w, "%g W" % watts, OK if good else DRIFT,
            severity="medium", source=SOURCE,
            remedy="" if good else "set the cap (amd-smi set --power-cap %g) or fix the declaration" % wanted_w))
    return findings


def check(name: str, root: Root, topology: Dict[str, Any], cfg: Dict[str, Any],
          areas: Optional[Dict[str, Any]] = None) -> List[Finding]:
    """One of :data:`CHECKS` with the validated health config (``xgmi_links``: health.check_xgmi_links); ``areas``:
    the areas of the run, where the limits area takes over ``memlock`` and the gpu area ``gpu_perf_level`` and
    ``gpu_power_cap``."""
    if name == "pcie_acs":
        return check_pcie_acs(root, topology)
    if name == "gpu_ras":
        return check_gpu_ras(root, topology)
    if name == "ib_counters":
        return check_ib_counters(root, topology, cfg["ib_counter_max"])
    if name == "memlock":
        return check_memlock(root, topology, areas)
    if name == "gpu_perf_level":
        return check_gpu_perf_level(root, topology, cfg["gpu_perf_level"], areas)
    if name == "gpu_power_cap":
        return check_gpu_power_cap(root, topology, cfg["gpu_power_cap_w"], areas)
    raise ValueError("unknown stability check %r" % name)


# ------------------------------------------------------------------------------------------------ variables
def validate(ctx: Any, config: Dict[str, Any], out: Dict[str, Any]) -> None:
    """Add the stability checks' settings to the health config ``out``; errors go to ``ctx.error``."""
    limits = dict(DEFAULT_IB_COUNTER_MAX)
    given = config.get("nodetune_health_ib_counter_max")
    if given is not None:
        if not isinstance(given, dict):
            ctx.error("nodetune_health_ib_counter_max=%r is not valid: expected a mapping of %s to a whole number"
                      % (given, ", ".join(IB_COUNTERS)))
        else:
            for key, value in given.items():
                if key not in IB_COUNTERS:
                    ctx.error("nodetune_health_ib_counter_max has unknown counter %r: valid counters are %s"
                              % (key, ", ".join(IB_COUNTERS)))
                elif isinstance(value, bool) or not str(value).strip().isdigit():
                    ctx.error("nodetune_health_ib_counter_max.%s=%r is not valid: expected a whole number of "
                              "errors, 0 or more (default %d)" % (key, value, DEFAULT_IB_COUNTER_MAX[key]))
                else:
                    limits[key] = int(str(value).strip())
    out["ib_counter_max"] = limits
    level = config.get("nodetune_health_gpu_perf_level")
    if level is not None and level not in PERF_LEVELS:
        ctx.error("nodetune_health_gpu_perf_level=%r is not valid: expected one of %s (or null)"
                  % (level, ", ".join(PERF_LEVELS)))
        level = None
    out["gpu_perf_level"] = level
    cap = config.get("nodetune_health_gpu_power_cap_w")
    out["gpu_power_cap_w"] = None
    if cap is not None:
        text = str(cap).strip()
        if not isinstance(cap, bool) and text.replace(".", "", 1).isdigit() and float(text) > 0:
            out["gpu_power_cap_w"] = float(text)
        else:
            ctx.error("nodetune_health_gpu_power_cap_w=%r is not valid: expected watts greater than 0 (or null)"
                      % (cap,))
