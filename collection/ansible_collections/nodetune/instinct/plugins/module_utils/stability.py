# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Read-only stability checks that ride with the health checks (issue 15): what the seeds' stability checklist and
AMD's guides name, each with its source.

- ``health.pcie_acs``: PCIe Access Control Services off on every bridge between a GPU or NIC and its root port
  (the ACS extended capability, id 0x000D, control register at +6 of the ``config`` file: PCIe Base Spec 7.7.11).
  AMD's multi-node RCCL guides disable it (``setpci ... ECAP_ACS+0x6.w=0000``): with P2P request redirect on,
  GPU<->NIC traffic under one switch detours through the root complex. Reading past the first 64 bytes of config
  space takes root; where the extended space cannot be read the finding is unsupported.
- ``health.xgmi_links``: every GPU of an xGMI hive has an xGMI link to every other GPU of the hive (KFD topology
  ``io_links`` of type 11, ``hive_id``: Documentation/gpu/amdgpu/ and ROCm's "xGMI" topology docs; a missing peer
  is a link that did not train, and RCCL falls back to PCIe for it).
- ``health.gpu_ras``: amdgpu RAS error counters, ``ras/<block>_err_count`` (``ue: N`` / ``ce: N``) of each GPU's
  PCI device (Documentation/gpu/amdgpu/ras.rst); any uncorrectable error is drift, correctable ones are shown.
- ``health.ib_counters``: InfiniBand port error counters ``ports/N/counters/{symbol_error, link_downed,
  port_rcv_errors, port_xmit_discards}`` (Documentation/ABI/stable/sysfs-class-infiniband) above
  ``nodetune_health_ib_counter_max`` (default: infiniband-diags' error_thresholds, 10/10/10/100).
- ``health.memlock``: RDMA registers (pins) memory, so the max locked memory must be unlimited for jobs: the
  ``memlock`` entries for ``*`` of /etc/security/limits.conf and limits.d/*.conf (limits.conf(5): soft and hard) and
  systemd's ``DefaultLimitMEMLOCK`` in system.conf / system.conf.d (systemd-system.conf(5)), for services such as
  slurmd that start jobs. AMD's RCCL/multi-node guides ask for ``ulimit -l unlimited``.
- ``health.gpu_perf_level``: amdgpu ``power_dpm_force_performance_level`` against
  ``nodetune_health_gpu_perf_level`` (Documentation/gpu/amdgpu/thermal.rst).
- ``health.gpu_power_cap``: hwmon ``power1_cap`` (microwatts) against ``nodetune_health_gpu_power_cap_w``
  (Documentation/gpu/amdgpu/thermal.rst, hwmon sysfs-interface).

Never writes.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils import areas
from ansible_collections.nodetune.instinct.plugins.module_utils.finding import (
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
EXT_CAP_START = 0x100
IB_COUNTERS = ("symbol_error", "link_downed", "port_rcv_errors", "port_xmit_discards")
# Declared once, with its source (infiniband-diags' error_thresholds), in areas.py.
DEFAULT_IB_COUNTER_MAX = dict(areas.defaults("verify")["nodetune_health_ib_counter_max"])
PERF_LEVELS = ("auto", "low", "high", "manual", "profile_standard", "profile_min_sclk", "profile_min_mclk",
               "profile_peak", "perf_determinism")
UNLIMITED = ("unlimited", "infinity", "-1")


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
def check_xgmi_links(topology: Dict[str, Any]) -> List[Finding]:
    hives: Dict[Any, List[str]] = {}
    for gpu in topology.get("gpus") or []:
        if gpu.get("hive_id"):
            hives.setdefault(gpu["hive_id"], []).append(gpu["bdf"])
    if not hives:
        return [_na("xgmi_links", "no GPU in an xGMI hive on this node")]
    findings = []
    for gpu in topology.get("gpus") or []:
        if not gpu.get("hive_id"):
            continue
        others = sorted(set(hives[gpu["hive_id"]]) - {gpu["bdf"]})
        missing = sorted(set(others) - set(gpu.get("xgmi_peers") or []))
        findings.append(Finding(
            _id("xgmi_links"), gpu["bdf"], "%d xGMI peers" % len(others),
            "%d xGMI peers%s" % (len(others) - len(missing), " (missing: %s)" % ", ".join(missing) if missing else ""),
            DRIFT if missing else OK, severity="high", source=SOURCE,
            remedy="an xGMI link to these GPUs is missing (not trained): RCCL goes over PCIe for them; check "
                   "amd-smi xgmi and dmesg, then reset or service the GPU" if missing else ""))
    return findings


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


def check_pcie_acs(root: Root, topology: Dict[str, Any]) -> List[Finding]:
    devices = [("GPU", g["bdf"]) for g in topology.get("gpus") or []]
    devices += [("NIC", n["bdf"]) for n in topology.get("ib_devices") or [] if n.get("bdf")]
    if not devices:
        return [_na("pcie_acs", "no GPU or RDMA NIC on this node")]
    findings = []
    for kind, bdf in devices:
        enabled, unreadable = [], []
        for bridge in _bridges(root, bdf):
            config = read_config(root, bridge)
            control = acs_control(config)
            if control is None:
                unreadable.append(bridge)
            elif control:
                enabled.append("%s (0x%04x)" % (bridge, control))
        if unreadable and not enabled:
            findings.append(Finding(_id("pcie_acs"), bdf, "ACS off on the path", "-", UNSUPPORTED, severity="info",
                                    source=SOURCE, remedy="the extended config space of %s cannot be read "
                                                          "(verify as root)" % ", ".join(unreadable)))
            continue
        findings.append(Finding(
            _id("pcie_acs"), bdf, "ACS off on the path", "on at " + ", ".join(enabled) if enabled else "off",
            DRIFT if enabled else OK, severity="medium", source=SOURCE,
            remedy="%s peer traffic detours through the root complex: disable ACS (BIOS option, or setpci -s BDF "
                   "ECAP_ACS+0x6.w=0000 at boot, as AMD's multi-node guides do)" % kind if enabled else ""))
    return findings


def _ras_counts(root: Root, bdf: str) -> Optional[Tuple[int, int]]:
    ras = _pci(bdf) + "/ras"
    names = [n for n in root.listdir(ras) if n.endswith("_err_count")]
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


def _limits_files(root: Root) -> List[str]:
    names = sorted(n for n in root.listdir("etc/security/limits.d") if n.endswith(".conf"))
    return ["etc/security/limits.conf"] + ["etc/security/limits.d/" + n for n in names]


def memlock_limits(root: Root) -> Dict[str, Optional[str]]:
    """The ``*`` domain's soft and hard memlock, the last line read winning (pam_limits reads limits.conf, then
    limits.d/*.conf in order)."""
    found: Dict[str, Optional[str]] = {"soft": None, "hard": None}
    for path in _limits_files(root):
        for line in (root.read(path) or "").splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) == 4 and words[0] == "*" and words[2] == "memlock":
                for kind in (("soft", "hard") if words[1] == "-" else (words[1],)):
                    if kind in found:
                        found[kind] = words[3]
    return found


def systemd_memlock(root: Root) -> Optional[str]:
    value = None
    dirs = ["usr/lib/systemd/system.conf.d", "etc/systemd/system.conf.d", "run/systemd/system.conf.d"]
    files = ["etc/systemd/system.conf"] + sorted(
        d + "/" + n for d in dirs for n in root.listdir(d) if n.endswith(".conf"))
    for path in files:
        for line in (root.read(path) or "").splitlines():
            key, sep, rest = line.strip().partition("=")
            if sep and key.strip() == "DefaultLimitMEMLOCK":
                value = rest.strip()
    return value


def check_memlock(root: Root, topology: Dict[str, Any]) -> List[Finding]:
    if not topology.get("ib_devices"):
        return [_na("memlock", "no RDMA device on this node")]
    limits = memlock_limits(root)
    good = all(v in UNLIMITED for v in limits.values())
    findings = [Finding(
        _id("memlock"), "limits.d", "* soft/hard memlock unlimited",
        "soft %s, hard %s" % (limits["soft"] or "unset", limits["hard"] or "unset"), OK if good else DRIFT,
        severity="medium", source=SOURCE,
        remedy="" if good else "RDMA pins job memory: add '* soft memlock unlimited' and '* hard memlock unlimited' "
                               "to /etc/security/limits.d/ (AMD's RCCL guides: ulimit -l unlimited)")]
    systemd = systemd_memlock(root)
    good = systemd in UNLIMITED
    findings.append(Finding(
        _id("memlock"), "systemd", "DefaultLimitMEMLOCK=infinity", systemd or "unset (systemd's 8 MiB)",
        OK if good else DRIFT, severity="medium", source=SOURCE,
        remedy="" if good else "services that start jobs (slurmd) inherit systemd's limit: set "
                               "DefaultLimitMEMLOCK=infinity in /etc/systemd/system.conf.d/ (or LimitMEMLOCK="
                               "infinity in the unit) and run systemctl daemon-reexec"))
    return findings


def check_gpu_perf_level(root: Root, topology: Dict[str, Any], wanted: Optional[str]) -> List[Finding]:
    gpus = [g for g in topology.get("gpus") or [] if g.get("vendor") == "amd"]
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


def check_gpu_power_cap(root: Root, topology: Dict[str, Any], wanted_w: Optional[float]) -> List[Finding]:
    gpus = [g for g in topology.get("gpus") or [] if g.get("vendor") == "amd"]
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


def check(name: str, root: Root, topology: Dict[str, Any], cfg: Dict[str, Any]) -> List[Finding]:
    """One of :data:`CHECKS` with the validated health config."""
    if name == "pcie_acs":
        return check_pcie_acs(root, topology)
    if name == "xgmi_links":
        return check_xgmi_links(topology)
    if name == "gpu_ras":
        return check_gpu_ras(root, topology)
    if name == "ib_counters":
        return check_ib_counters(root, topology, cfg["ib_counter_max"])
    if name == "memlock":
        return check_memlock(root, topology)
    if name == "gpu_perf_level":
        return check_gpu_perf_level(root, topology, cfg["gpu_perf_level"])
    if name == "gpu_power_cap":
        return check_gpu_power_cap(root, topology, cfg["gpu_power_cap_w"])
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
