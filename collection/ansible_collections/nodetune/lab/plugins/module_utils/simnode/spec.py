# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The spec of a simulated node: validation and normalisation (:func:`load_spec`), the faults it may carry, and
the PCI placement rules every device address is checked against.

A spec (:func:`load_spec`) is small: sockets and cores, SMT, NPS, cpufreq driver and governor, and the GPUs, NICs
and NVMe drives with their PCI addresses. Each device's NUMA node follows from its bus: EPYC has four root
complexes (IOHCs) per socket, each owning an equal share of the 256 buses, and NPS decides which NUMA node each
IOHC belongs to; a ``numa_node`` written in the spec is checked against that.

Spec (YAML or a dict; every key optional unless marked; unknown keys are errors)::

    name, hostname            host name (default simnode; hostname defaults to name)
    platform: {vendor, product}                 DMI strings
    os: {family: Debian|RedHat, pretty_name}    irqbalance config in etc/default or etc/sysconfig
    kernel: {release, cmdline}  release >= 6.12: managed IRQ affinity files are 0444; >= 6.2: per-device MSI chips;
                                cmdline isolcpus=/nohz_full= fill cpu/isolated and cpu/nohz_full;
                                pci=disable_acs_redir=<dev>[;<dev>] clears ACS RR/CR/EC on those ports at boot
    cpu:
      model: EPYC 7763 | EPYC 9654   (fills the fields below; each can be overridden)
      sockets, cores_per_socket, threads_per_core (1|2), cores_per_l3, cache_kb {l1d,l1i,l2,l3}, mhz {min,base,max}
      smt: on | off (nosmt: siblings present, offline) | forceoff | notsupported (BIOS off: one thread per core)
      numbering: split (siblings N and N+cores, as on EPYC) | adjacent (2k, 2k+1) | interleaved (the sockets
                 take turns: CPU 2k on socket 0, 2k+1 on socket 1, as Intel servers and AMD's "round robin" MADT
                 core enumeration number them; hwloc's and Slurm's core order then differs from Linux's)
      caches: true | false       (false leaves out cpuN/cache/, read only by hwloc, for faster builds)
      cpufreq: {driver: acpi-cpufreq | amd-pstate | amd-pstate-epp | none, governor, epp, amd_pstate_mode, boost}
      cpuidle: {driver: acpi_idle | none, states: [POLL, C1, C2]}
    numa: {per_socket: 1|2|4 (NPS), distance_same_socket: 12, distance_remote: 32}
    memory_gb, iommu (bool; on: the kernel enables ACS SV/RR/CR/UF on root and switch downstream ports at boot),
    irqbalance: {installed, enabled}
    sysctl: {"vm.dirty_ratio": 40, ...}       overrides of the kernel defaults in SYSCTL_DEFAULTS
    bmc_vga: true | false | "<bdf>"           the BMC's ASPEED VGA (card0), on the last free bus of root complex 0
    gpus: [{model: MI250|MI300X, bdf (required), numa_node, switch, package, link {speed, width}, aspm {l0s, l1},
            temp_c, power_w, hwmon_limits (MI300X: false = an amdgpu before Linux 6.7's hwmon limit files)}]
    nics: [{name (required), model: ConnectX-6|ConnectX-7|BCM57416, bdf (required), numa_node, switch,
            mode: datagram|connected, mtu, ib_mtu, bcast_mtu (the SM's broadcast-group IB MTU, default ib_mtu:
            caps the datagram-mode MTU at bcast_mtu - 4), rate, state, comp_vectors (mlx5, default 63),
            comp_vectors_at_boot (mlx5 on kernel >= 6.5, default all: how many completion vectors exist after
            boot; :func:`use_comp_vectors` creates the others, as their first user does), irq_vectors (Ethernet),
            enhanced_ipoib, link, aspm}]
    nvme: [{model: P5800X|PM1733|CM7-R, bdf (required), numa_node, switch, max_queues, size_gb, link, aspm}]
    faults: {pcie_acs: false, xgmi_link_down: false, gpu_ras_uncorrectable: 0, ib_symbol_errors: 0,
             memlock: unlimited|KiB, gpu_perf_level: auto, gpu_power_cap_w: null (the model's cap),
             compute_partition: SPX, memory_partition: NPS1}
                              what verify's health/inventory checks read; healthy by default, each breaks one;
                              :func:`inject_faults` breaks a built (and tuned) node in place

PCI addresses decide placement: with S sockets there are 4*S root complexes of 256/(4*S) buses each (socket s
owns complexes 4s..4s+3; with NPS4 each is its own NUMA node). A device's ``numa_node`` is checked against its bus
(-1 simulates firmware that reports none). Devices naming the same ``switch`` sit behind one PCIe switch below one
root port: their buses must leave room for the switch's own two buses (first device bus >= root bus + 3). Names
follow probe (BDF) order: mlx5_N, nvmeN, cardN (card0 is the BMC VGA), renderD128+N, KFD nodes after the CPU nodes.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ansible_collections.nodetune.lab.plugins.module_utils.simnode.catalogue import (
    CPU_MODELS,
    CPUFREQ_GOVERNORS,
    CPUIDLE_STATES,
    EPP_VALUES,
    GPU_MODELS,
    NIC_MODELS,
    NVME_MODELS,
    OS_FAMILIES,
    SYSCTL_DEFAULTS,
    _GEN_BY_GTS,
    _GTS_BY_GEN,
    _SYSCTL_VECTORS,
)


# mlx5 allocates completion vectors on first use since this release (commit f14c1a14e632, "net/mlx5: Allocate
# completion EQs dynamically"); before, all at probe
LATE_COMP_VECTORS = (6, 5)


class SpecError(ValueError):
    """The spec is not valid; the message names each bad field, its value and what is valid."""


_BDF = re.compile(r"^(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-1][0-9a-fA-F])\.([0-7])$")
_NETDEV = re.compile(r"^[a-z][a-z0-9_.-]{0,14}$")
_HOSTNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,62}$")
_SYSCTL_KEY = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)+$")


# ============================================================================================ spec validation
class _Checker(object):
    """Collects every problem of a spec, so a user fixes them all in one round."""

    def __init__(self) -> None:
        self.errors: List[str] = []

    def bad(self, where: str, value: Any, valid: str) -> None:
        self.errors.append("spec %s: %s is not valid: %s" % (where, _show(value), valid))

    def keys(self, where: str, data: Any, allowed: Iterable[str]) -> Dict[str, Any]:
        allowed = list(allowed)
        if data is None:
            return {}
        if not isinstance(data, dict):
            self.bad(where, data, "expected a mapping with keys %s" % ", ".join(allowed))
            return {}
        for key in data:
            if key not in allowed:
                self.errors.append("spec %s: unknown key %s (valid: %s)"
                                   % (where or "top level", _show(key), ", ".join(allowed)))
        return data

    def integer(self, where: str, value: Any, low: int, high: int) -> Optional[int]:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, str) and re.match(r"^-?\d+$", value.strip()):
                value = int(value)
            else:
                self.bad(where, value, "expected an integer from %d to %d" % (low, high))
                return None
        if not low <= value <= high:
            self.bad(where, value, "expected an integer from %d to %d" % (low, high))
            return None
        return value

    def choice(self, where: str, value: Any, options: Iterable[str]) -> Optional[str]:
        options = list(options)
        if value not in options:
            self.bad(where, value, "expected one of %s" % ", ".join(options))
            return None
        return value

    def boolean(self, where: str, value: Any) -> Optional[bool]:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("yes", "true", "on", "no", "false", "off"):
            return value.lower() in ("yes", "true", "on")
        self.bad(where, value, "expected true or false")
        return None

    def text(self, where: str, value: Any, pattern: Optional[Any] = None, hint: str = "") -> Optional[str]:
        if not isinstance(value, str) or not value or "\n" in value or "\x00" in value:
            self.bad(where, value, "expected a one-line, non-empty string" + (" (%s)" % hint if hint else ""))
            return None
        if pattern is not None and not pattern.match(value):
            self.bad(where, value, hint or "does not match %s" % pattern.pattern)
            return None
        return value


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _bdf(check: _Checker, where: str, value: Any) -> Optional[str]:
    if not isinstance(value, str) or not _BDF.match(value.strip()):
        check.bad(where, value, "expected a PCI address such as '0000:41:00.0' (domain:bus:device.function, "
                                "device 00-1f, function 0-7)")
        return None
    match = _BDF.match(value.strip())
    domain = (match.group(1) or "0000").lower()
    if domain != "0000":
        check.bad(where, value, "simulated nodes use PCI domain 0000 only")
        return None
    return "%s:%s:%s.%s" % (domain, match.group(2).lower(), match.group(3).lower(), match.group(4))


def _link(check: _Checker, where: str, raw: Any, default: Tuple[int, int]) -> Dict[str, Any]:
    """Current link speed (GT/s) and width; the device's maximum comes from its model."""
    data = check.keys(where, raw, ("speed", "width"))
    speed = data.get("speed", _GTS_BY_GEN[default[0]])
    width = data.get("width", default[1])
    gen = default[0]
    try:
        gts = float(speed)
        gen = _GEN_BY_GTS[gts]
    except (TypeError, ValueError, KeyError):
        check.bad(where + ".speed", speed, "expected a PCIe rate in GT/s: %s"
                  % ", ".join("%g" % v for v in sorted(_GEN_BY_GTS)))
    else:
        if gen > default[0]:
            check.bad(where + ".speed", speed, "the device's maximum is %g GT/s" % _GTS_BY_GEN[default[0]])
            gen = default[0]
    if width not in (1, 2, 4, 8, 16) or isinstance(width, bool):
        check.bad(where + ".width", width, "expected a lane count 1, 2, 4, 8 or 16")
        width = default[1]
    elif width > default[1]:
        check.bad(where + ".width", width, "the device's maximum is x%d" % default[1])
        width = default[1]
    return {"speed": _GTS_BY_GEN[gen], "width": width}


def _aspm(check: _Checker, where: str, raw: Any, default_l1: bool = False) -> Dict[str, bool]:
    data = check.keys(where, raw, ("l0s", "l1"))
    l0s = check.boolean(where + ".l0s", data.get("l0s", False))
    l1 = check.boolean(where + ".l1", data.get("l1", default_l1))
    return {"l0s": bool(l0s), "l1": bool(l1)}


def _parse_version(release: str) -> Tuple[int, int]:
    match = re.match(r"^(\d+)\.(\d+)", release)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def _normalize(raw: Dict[str, Any]) -> Dict[str, Any]:
    check = _Checker()
    top = check.keys("", raw, ("name", "hostname", "platform", "os", "kernel", "cpu", "numa", "memory_gb", "iommu",
                               "irqbalance", "sysctl", "bmc_vga", "gpus", "nics", "nvme", "faults"))
    spec: Dict[str, Any] = {}
    spec["name"] = check.text("name", top.get("name", "simnode"), _HOSTNAME,
                              "letters, digits, '.' and '-' (a host name)") or "simnode"
    spec["hostname"] = check.text("hostname", top.get("hostname", spec["name"]), _HOSTNAME,
                                  "letters, digits, '.' and '-'") or spec["name"]

    platform = check.keys("platform", top.get("platform"), ("vendor", "product"))
    spec["platform"] = {"vendor": check.text("platform.vendor", platform.get("vendor", "Supermicro")) or "",
                        "product": check.text("platform.product", platform.get("product", "Super Server")) or ""}

    osd = check.keys("os", top.get("os"), ("family", "pretty_name"))
    family = check.choice("os.family", osd.get("family", "Debian"), sorted(OS_FAMILIES)) or "Debian"
    spec["os"] = {"family": family,
                  "pretty_name": check.text("os.pretty_name",
                                            osd.get("pretty_name", OS_FAMILIES[family]["pretty_name"])) or ""}

    kernel = check.keys("kernel", top.get("kernel"), ("release", "cmdline"))
    release = check.text("kernel.release", kernel.get("release", OS_FAMILIES[family]["release"]),
                         re.compile(r"^\d+\.\d+[0-9A-Za-z._+~-]*$"),
                         "a kernel release such as '6.8.0-60-generic'") or OS_FAMILIES[family]["release"]
    default_cmdline = "BOOT_IMAGE=/vmlinuz-%s root=/dev/mapper/vg0-root ro" % release
    cmdline = kernel.get("cmdline", default_cmdline)
    if not isinstance(cmdline, str) or "\n" in cmdline:
        check.bad("kernel.cmdline", cmdline, "expected a one-line string")
        cmdline = default_cmdline
    spec["kernel"] = {"release": release, "cmdline": cmdline.strip()}

    spec["cpu"] = _normalize_cpu(check, top.get("cpu"))
    cpu = spec["cpu"]

    numa = check.keys("numa", top.get("numa"), ("per_socket", "distance_same_socket", "distance_remote"))
    per_socket = check.integer("numa.per_socket", numa.get("per_socket", 1), 1, 4)
    if per_socket is not None and per_socket not in (1, 2, 4):
        check.bad("numa.per_socket", per_socket, "EPYC offers NPS1, NPS2 or NPS4: expected 1, 2 or 4")
        per_socket = None
    per_socket = per_socket or 1
    if cpu["cores_per_socket"] % per_socket:
        check.bad("numa.per_socket", per_socket, "cores_per_socket %d must divide evenly into %d NUMA nodes"
                  % (cpu["cores_per_socket"], per_socket))
        per_socket = 1
    spec["numa"] = {
        "per_socket": per_socket,
        "distance_same_socket": check.integer("numa.distance_same_socket", numa.get("distance_same_socket", 12),
                                              11, 254) or 12,
        "distance_remote": check.integer("numa.distance_remote", numa.get("distance_remote", 32), 11, 254) or 32,
    }
    spec["memory_gb"] = check.integer("memory_gb", top.get("memory_gb", 512), 1, 65536) or 512
    spec["iommu"] = check.boolean("iommu", top.get("iommu", True))
    irqb = check.keys("irqbalance", top.get("irqbalance"), ("installed", "enabled"))
    installed = check.boolean("irqbalance.installed", irqb.get("installed", True))
    enabled = check.boolean("irqbalance.enabled", irqb.get("enabled", bool(installed)))
    if enabled and not installed:
        check.bad("irqbalance.enabled", True, "irqbalance cannot be enabled when it is not installed")
        enabled = False
    spec["irqbalance"] = {"installed": bool(installed), "enabled": bool(enabled)}

    sysctl_raw = check.keys("sysctl", top.get("sysctl"), SYSCTL_DEFAULTS)
    sysctl: Dict[str, str] = {}
    for key, value in sorted(sysctl_raw.items()):
        if key not in SYSCTL_DEFAULTS:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, str)) or str(value).strip() == "":
            check.bad("sysctl.%s" % key, value, "expected a number or a string of numbers")
            continue
        text = str(value).strip()
        if key in _SYSCTL_VECTORS:
            parts = text.split()
            if len(parts) != 3 or not all(p.isdigit() for p in parts):
                check.bad("sysctl.%s" % key, value, "expected three numbers 'min default max'")
                continue
            text = "\t".join(parts)
        elif not re.match(r"^\d+$", text):
            check.bad("sysctl.%s" % key, value, "expected a non-negative integer")
            continue
        sysctl[key] = text
    # The kernel holds one form of each writeback limit (mm/page-writeback.c: writing one zeroes the other)
    for ratio, size in (("vm.dirty_ratio", "vm.dirty_bytes"),
                        ("vm.dirty_background_ratio", "vm.dirty_background_bytes")):
        if sysctl.get(size, "0") != "0":
            if sysctl.get(ratio, "0") != "0":
                check.bad("sysctl.%s" % ratio, sysctl[ratio], "%s is set too, and the kernel holds one form of the "
                          "limit (writing one zeroes the other): give %s: 0 or leave it out" % (size, ratio))
            sysctl[ratio] = "0"
    spec["sysctl"] = sysctl

    root_complexes = 4 * cpu["sockets"]
    spec["gpus"] = _normalize_list(check, "gpus", top.get("gpus"), _normalize_gpu)
    spec["nics"] = _normalize_list(check, "nics", top.get("nics"), _normalize_nic)
    spec["nvme"] = _normalize_list(check, "nvme", top.get("nvme"), _normalize_nvme)
    for index, nic in enumerate(spec["nics"]):
        at_boot = nic.get("comp_vectors_at_boot")
        if at_boot is not None and at_boot < nic["comp_vectors"] and _parse_version(release) < LATE_COMP_VECTORS:
            check.bad("nics[%d].comp_vectors_at_boot" % index, at_boot, "kernel %s creates every mlx5 completion "
                      "vector at probe; only Linux 6.5 and later create them on first use (commit f14c1a14e632): "
                      "give kernel.release 6.5 or later, or leave comp_vectors_at_boot out" % release)

    spec["faults"] = _normalize_faults(check, top.get("faults"))
    vga = top.get("bmc_vga", True)
    if isinstance(vga, bool):
        spec["bmc_vga"] = vga
    else:
        spec["bmc_vga"] = _bdf(check, "bmc_vga", vga) or False

    if not check.errors:
        _check_devices(check, spec, root_complexes)
    if check.errors:
        raise SpecError("simulated node spec is not valid:\n  - " + "\n  - ".join(check.errors))
    return spec


# What the health and inventory checks of verify read (issue 15), healthy by default; each key breaks one.
FAULT_DEFAULTS: Dict[str, Any] = {
    "pcie_acs": False,  # true: ACS redirect on at every root and switch downstream port, whatever the boot did
    # true: the xGMI link between the first two GPUs is down, as amdgpu shows it: port state 0 in MI300X's
    # gpu_metrics xgmi_link_status, uncorrectable xgmi_wafl RAS errors on MI250 (whose gpu_metrics has no xGMI
    # field); KFD keeps listing the link, as kfd_crat.c lists one to every hive member
    "xgmi_link_down": False,
    "gpu_ras_uncorrectable": 0,  # uncorrectable errors in the first GPU's umc_err_count
    "ib_symbol_errors": 0,  # symbol_error count of the first RDMA port
    "memlock": "unlimited",  # or KiB: limits.d and systemd's DefaultLimitMEMLOCK
    "gpu_perf_level": "auto",  # power_dpm_force_performance_level of every GPU
    "gpu_power_cap_w": None,  # watts: the first GPU's hwmon power1_cap (None: the model's cap)
    "compute_partition": "SPX",  # MI300-series current_compute_partition
    "memory_partition": "NPS1",  # MI300-series current_memory_partition
}
_PERF_LEVELS = ("auto", "low", "high", "manual", "profile_standard", "profile_peak", "perf_determinism")


def _normalize_faults(check: _Checker, raw: Any) -> Dict[str, Any]:
    data = check.keys("faults", raw, FAULT_DEFAULTS)
    out = dict(FAULT_DEFAULTS)
    for key in ("pcie_acs", "xgmi_link_down"):
        if key in data:
            out[key] = check.boolean("faults." + key, data[key])
    for key in ("gpu_ras_uncorrectable", "ib_symbol_errors"):
        if key in data:
            out[key] = check.integer("faults." + key, data[key], 0, 1 << 31)
    if "memlock" in data and data["memlock"] != "unlimited":
        out["memlock"] = check.integer("faults.memlock", data["memlock"], 0, 1 << 40)
    if data.get("gpu_power_cap_w") is not None:
        out["gpu_power_cap_w"] = check.integer("faults.gpu_power_cap_w", data["gpu_power_cap_w"], 1, 2000)
    if "gpu_perf_level" in data:
        out["gpu_perf_level"] = check.choice("faults.gpu_perf_level", data["gpu_perf_level"], _PERF_LEVELS)
    for key, modes in (("compute_partition", ("SPX", "DPX", "QPX", "CPX")), ("memory_partition", ("NPS1", "NPS4"))):
        if key in data:
            out[key] = check.choice("faults." + key, data[key], modes)
    return out


def _normalize_cpu(check: _Checker, raw: Any) -> Dict[str, Any]:
    data = check.keys("cpu", raw, ("model", "model_name", "family", "model_id", "stepping", "microcode", "sockets",
                                   "cores_per_socket", "threads_per_core", "smt", "numbering", "cores_per_l3", "caches",
                                   "cache_kb", "mhz", "cpufreq", "cpuidle"))
    model = check.choice("cpu.model", data.get("model", "EPYC 7763"), sorted(CPU_MODELS)) or "EPYC 7763"
    base = CPU_MODELS[model]
    cpu: Dict[str, Any] = {"model": model}
    cpu["model_name"] = check.text("cpu.model_name", data.get("model_name", base["model_name"])) or ""
    cpu["family"] = check.integer("cpu.family", data.get("family", base["family"]), 0, 255) or 0
    cpu["model_id"] = check.integer("cpu.model_id", data.get("model_id", base["model_id"]), 0, 255) or 0
    cpu["stepping"] = check.integer("cpu.stepping", data.get("stepping", base["stepping"]), 0, 15) or 0
    cpu["microcode"] = check.text("cpu.microcode", data.get("microcode", base["microcode"]),
                                  re.compile(r"^0x[0-9a-f]+$"), "hex such as '0xa0011d5'") or "0x0"
    cpu["sockets"] = check.integer("cpu.sockets", data.get("sockets", 2), 1, 8) or 1
    cpu["cores_per_socket"] = check.integer("cpu.cores_per_socket",
                                            data.get("cores_per_socket", base["cores_per_socket"]), 1, 512) or 1
    threads = check.integer("cpu.threads_per_core", data.get("threads_per_core", 2), 1, 2) or 2
    smt = data.get("smt", "on" if threads == 2 else "notsupported")
    if smt is True:
        smt = "on"
    elif smt is False:
        smt = "off"
    smt = check.choice("cpu.smt", smt, ("on", "off", "forceoff", "notsupported")) or "on"
    if threads == 1 and smt != "notsupported":
        check.bad("cpu.smt", smt, "with threads_per_core 1 the kernel reports SMT as 'notsupported'")
        smt = "notsupported"
    cpu["threads_per_core"] = threads
    cpu["smt"] = smt
    cpu["numbering"] = check.choice("cpu.numbering", data.get("numbering", "split"),
                                    ("split", "adjacent", "interleaved")) or "split"
    cores_per_l3 = check.integer("cpu.cores_per_l3", data.get("cores_per_l3", base["cores_per_l3"]), 1, 512) or 1
    if cpu["cores_per_socket"] % cores_per_l3:
        check.bad("cpu.cores_per_l3", cores_per_l3, "must divide cores_per_socket %d" % cpu["cores_per_socket"])
        cores_per_l3 = cpu["cores_per_socket"]
    cpu["cores_per_l3"] = cores_per_l3
    # cpuN/cache/ is read by hwloc, not by nodetune: a quarter of a big node's files, so it can be left out.
    cpu["caches"] = bool(check.boolean("cpu.caches", data.get("caches", True)))
    total = cpu["sockets"] * cpu["cores_per_socket"] * (1 if smt == "notsupported" else threads)
    if total > 8192:
        check.bad("cpu", total, "at most 8192 CPUs (CONFIG_NR_CPUS of distribution kernels)")
    cache = check.keys("cpu.cache_kb", data.get("cache_kb"), ("l1d", "l1i", "l2", "l3"))
    cpu["cache_kb"] = dict((k, check.integer("cpu.cache_kb." + k, cache.get(k, base["cache_kb"][k]), 1, 1 << 22)
                            or base["cache_kb"][k]) for k in ("l1d", "l1i", "l2", "l3"))
    mhz = check.keys("cpu.mhz", data.get("mhz"), ("min", "base", "max"))
    cpu["mhz"] = dict((k, check.integer("cpu.mhz." + k, mhz.get(k, base["mhz"][k]), 100, 10000) or base["mhz"][k])
                      for k in ("min", "base", "max"))
    if not cpu["mhz"]["min"] <= cpu["mhz"]["base"] <= cpu["mhz"]["max"]:
        check.bad("cpu.mhz", cpu["mhz"], "expected min <= base <= max")

    freq = check.keys("cpu.cpufreq", data.get("cpufreq"), ("driver", "governor", "epp", "amd_pstate_mode", "boost"))
    driver = check.choice("cpu.cpufreq.driver", freq.get("driver", "acpi-cpufreq"),
                          sorted(CPUFREQ_GOVERNORS) + ["none"]) or "acpi-cpufreq"
    governors = CPUFREQ_GOVERNORS.get(driver, [])
    default_gov = "powersave" if driver == "amd-pstate-epp" else "schedutil"
    governor = freq.get("governor", default_gov if governors else None)
    if driver != "none":
        governor = check.choice("cpu.cpufreq.governor", governor, governors) or default_gov
    elif freq.get("governor") is not None:
        check.bad("cpu.cpufreq.governor", governor, "a node without a cpufreq driver has no governor")
    mode = freq.get("amd_pstate_mode")
    if driver == "amd-pstate-epp":
        mode = check.choice("cpu.cpufreq.amd_pstate_mode", mode or "active", ("active",)) or "active"
    elif driver == "amd-pstate":
        mode = check.choice("cpu.cpufreq.amd_pstate_mode", mode or "passive", ("passive", "guided")) or "passive"
    elif mode is not None:
        check.bad("cpu.cpufreq.amd_pstate_mode", mode, "only the amd-pstate drivers have a mode")
        mode = None
    epp = freq.get("epp")
    if driver == "amd-pstate-epp":
        if governor == "performance":
            if epp not in (None, "performance"):
                check.bad("cpu.cpufreq.epp", epp, "in amd-pstate active mode the performance governor locks EPP "
                                                  "to 'performance'")
            epp = "performance"
        else:
            epp = check.choice("cpu.cpufreq.epp", epp or "balance_performance", EPP_VALUES[1:]) \
                or "balance_performance"
    elif epp is not None:
        check.bad("cpu.cpufreq.epp", epp, "only amd-pstate-epp (active mode) has an energy performance preference")
        epp = None
    boost = check.boolean("cpu.cpufreq.boost", freq.get("boost", True))
    cpu["cpufreq"] = {"driver": driver, "governor": governor if driver != "none" else None,
                      "epp": epp, "amd_pstate_mode": mode, "boost": bool(boost)}

    idle = check.keys("cpu.cpuidle", data.get("cpuidle"), ("driver", "states"))
    idle_driver = check.choice("cpu.cpuidle.driver", idle.get("driver", "acpi_idle"), ("acpi_idle", "none")) \
        or "acpi_idle"
    states = idle.get("states", ["POLL", "C1", "C2"])
    if idle_driver == "none":
        states = []
    elif not isinstance(states, list) or not states or any(s not in CPUIDLE_STATES for s in states) \
            or len(set(states)) != len(states):
        check.bad("cpu.cpuidle.states", states, "expected a list of distinct names from %s, e.g. [POLL, C1, C2]"
                  % ", ".join(CPUIDLE_STATES))
        states = ["POLL", "C1", "C2"]
    cpu["cpuidle"] = {"driver": idle_driver, "states": list(states) if idle_driver != "none" else []}
    return cpu


def _normalize_list(check: _Checker, name: str, raw: Any, one) -> List[Dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        check.bad(name, raw, "expected a list of mappings")
        return []
    return [one(check, "%s[%d]" % (name, index), item) for index, item in enumerate(raw)]


def _numa_field(check: _Checker, where: str, data: Dict[str, Any]) -> Optional[int]:
    if "numa_node" not in data or data["numa_node"] is None:
        return None
    return check.integer(where + ".numa_node", data["numa_node"], -1, 63)


def _switch_field(check: _Checker, where: str, data: Dict[str, Any]) -> Optional[str]:
    value = data.get("switch")
    if value is None:
        return None
    return check.text(where + ".switch", str(value), re.compile(r"^[A-Za-z0-9_.-]{1,32}$"),
                      "a short name shared by the devices behind one PCIe switch")


def _normalize_gpu(check: _Checker, where: str, raw: Any) -> Dict[str, Any]:
    data = check.keys(where, raw, ("model", "bdf", "numa_node", "switch", "package", "link", "aspm", "temp_c",
                                   "power_w", "hwmon_limits"))
    model = check.choice(where + ".model", data.get("model", "MI300X"), sorted(GPU_MODELS)) or "MI300X"
    base = GPU_MODELS[model]
    return {
        "model": model,
        "bdf": _bdf(check, where + ".bdf", data.get("bdf")),
        "numa_node": _numa_field(check, where, data),
        "switch": _switch_field(check, where, data),
        "package": check.integer(where + ".package", data.get("package", -1), -1, 255),
        "link": _link(check, where + ".link", data.get("link"), base["link"]),
        "aspm": _aspm(check, where + ".aspm", data.get("aspm")),
        "temp_c": check.integer(where + ".temp_c", data.get("temp_c", base["idle_temp_c"]), 0, 125),
        "power_w": check.integer(where + ".power_w", data.get("power_w", base["idle_power_w"]), 0, 1500),
        # MI300X: amdgpu shows tempN_crit/tempN_emergency from Linux 6.7 (or a driver with those commits backported)
        "hwmon_limits": check.boolean(where + ".hwmon_limits", data.get("hwmon_limits", True)),
    }


def _normalize_nic(check: _Checker, where: str, raw: Any) -> Dict[str, Any]:
    data = check.keys(where, raw, ("name", "model", "bdf", "numa_node", "switch", "mode", "mtu", "ib_mtu", "rate",
                                   "state", "comp_vectors", "irq_vectors", "enhanced_ipoib", "link", "aspm",
                                   "bcast_mtu", "comp_vectors_at_boot"))
    model = check.choice(where + ".model", data.get("model", "ConnectX-7"), sorted(NIC_MODELS)) or "ConnectX-7"
    base = NIC_MODELS[model]
    nic: Dict[str, Any] = {
        "model": model,
        "name": check.text(where + ".name", data.get("name"), _NETDEV,
                           "a network interface name such as 'ib0' (lower-case letters, digits, '_.-', "
                           "at most 15 characters)"),
        "bdf": _bdf(check, where + ".bdf", data.get("bdf")),
        "numa_node": _numa_field(check, where, data),
        "switch": _switch_field(check, where, data),
        "link": _link(check, where + ".link", data.get("link"), base["link"]),
        "aspm": _aspm(check, where + ".aspm", data.get("aspm")),
    }
    if base["kind"] == "ib":
        for key in ("irq_vectors",):
            if key in data:
                check.bad(where + "." + key, data[key], "%s uses comp_vectors" % model)
        enhanced = check.boolean(where + ".enhanced_ipoib", data.get("enhanced_ipoib", True))
        mode = check.choice(where + ".mode", data.get("mode", "datagram"), ("datagram", "connected")) or "datagram"
        if mode == "connected" and enhanced:
            check.bad(where + ".mode", mode, "%s uses Enhanced IPoIB, which is datagram only "
                                             "(set enhanced_ipoib: false to simulate an older stack)" % model)
            mode = "datagram"
        ib_mtu = check.choice(where + ".ib_mtu", data.get("ib_mtu", 4096), (256, 512, 1024, 2048, 4096)) or 4096
        limit = ib_mtu - 4 if mode == "datagram" else 65520
        mtu = check.integer(where + ".mtu", data.get("mtu", 2044), 68, 65520)
        if mtu is not None and mtu > limit:
            check.bad(where + ".mtu", mtu, "IPoIB %s mode allows at most %d (%s)" % (
                mode, limit, "IB MTU %d minus the 4-byte IPoIB header" % ib_mtu if mode == "datagram"
                else "the connected-mode maximum"))
        bcast_mtu = _broadcast_group_mtu(check, where, data, ib_mtu, mode, mtu)
        state = check.choice(where + ".state", data.get("state", "ACTIVE"), ("ACTIVE", "DOWN", "INIT", "ARMED"))
        nic.update({"bcast_mtu": bcast_mtu})
        nic.update({"mode": mode, "ib_mtu": ib_mtu, "mtu": mtu or 2044, "enhanced_ipoib": bool(enhanced),
                    "rate": check.text(where + ".rate", data.get("rate", base["rate"])) or base["rate"],
                    "state": state or "ACTIVE",
                    "comp_vectors": check.integer(where + ".comp_vectors", data.get("comp_vectors", 63), 1, 256)
                    or 63})
        if "comp_vectors_at_boot" in data:  # kept out of the spec when not given: older trees' specs stay equal
            at_boot = check.integer(where + ".comp_vectors_at_boot", data["comp_vectors_at_boot"], 0,
                                    nic["comp_vectors"])
            if at_boot is not None:
                nic["comp_vectors_at_boot"] = at_boot
    else:
        for key in ("mode", "ib_mtu", "rate", "comp_vectors", "enhanced_ipoib", "comp_vectors_at_boot"):
            if key in data:
                check.bad(where + "." + key, data[key], "%s is an Ethernet NIC; %s applies to InfiniBand only"
                          % (model, key))
        nic.update({"mtu": check.integer(where + ".mtu", data.get("mtu", 1500), 68, 9216) or 1500,
                    "state": check.choice(where + ".state", data.get("state", "up"), ("up", "down")) or "up",
                    "irq_vectors": check.integer(where + ".irq_vectors", data.get("irq_vectors", 8), 1, 256) or 8})
    return nic


def _broadcast_group_mtu(check: _Checker, where: str, data: Dict[str, Any], ib_mtu: int, mode: str,
                         mtu: Optional[int]) -> int:
    """The partition broadcast group's IB MTU (the subnet manager's choice): at most the port's, and a
    datagram-mode interface cannot be above it minus the IPoIB header (the kernel would have capped it)."""
    value = check.choice(where + ".bcast_mtu", data.get("bcast_mtu", ib_mtu), (256, 512, 1024, 2048, 4096)) or ib_mtu
    if value > ib_mtu:
        check.bad(where + ".bcast_mtu", value, "at most the port's ib_mtu %d" % ib_mtu)
    elif mode == "datagram" and mtu is not None and mtu > value - 4:
        check.bad(where + ".mtu", mtu, "at most %d: the kernel caps a datagram-mode MTU at the broadcast group's "
                                       "MTU (bcast_mtu %d) minus 4" % (value - 4, value))
    return value


def _normalize_nvme(check: _Checker, where: str, raw: Any) -> Dict[str, Any]:
    data = check.keys(where, raw, ("model", "bdf", "numa_node", "switch", "max_queues", "size_gb", "link", "aspm"))
    model = check.choice(where + ".model", data.get("model", "PM1733"), sorted(NVME_MODELS)) or "PM1733"
    base = NVME_MODELS[model]
    return {
        "model": model,
        "bdf": _bdf(check, where + ".bdf", data.get("bdf")),
        "numa_node": _numa_field(check, where, data),
        "switch": _switch_field(check, where, data),
        "max_queues": check.integer(where + ".max_queues", data.get("max_queues", base["max_queues"]), 1, 1024)
        or base["max_queues"],
        "size_gb": check.integer(where + ".size_gb", data.get("size_gb", base["size_gb"]), 1, 1 << 20)
        or base["size_gb"],
        "link": _link(check, where + ".link", data.get("link"), base["link"]),
        "aspm": _aspm(check, where + ".aspm", data.get("aspm")),
    }


def _bus(bdf: str) -> int:
    return int(bdf[5:7], 16)


def _root_complex_layout(spec: Dict[str, Any]) -> Tuple[int, int]:
    count = 4 * spec["cpu"]["sockets"]
    return count, 256 // count


def _rc_node(spec: Dict[str, Any], rc: int) -> int:
    nps = spec["numa"]["per_socket"]
    return (rc // 4) * nps + (rc % 4) * nps // 4


def _check_devices(check: _Checker, spec: Dict[str, Any], root_complexes: int) -> None:
    """Addresses unique, NUMA nodes consistent with the buses, switches inside one root complex, no overlaps."""
    count, span = _root_complex_layout(spec)
    devices = [("gpus[%d]" % i, d) for i, d in enumerate(spec["gpus"])] + \
              [("nics[%d]" % i, d) for i, d in enumerate(spec["nics"])] + \
              [("nvme[%d]" % i, d) for i, d in enumerate(spec["nvme"])]
    seen: Dict[str, str] = {}
    names: Dict[str, str] = {}
    for where, dev in devices:
        bdf = dev["bdf"]
        if bdf in seen:
            check.bad(where + ".bdf", bdf, "already used by %s" % seen[bdf])
        seen[bdf] = where
        bus = _bus(bdf)
        rc = bus // span
        if bus % span == 0:
            check.bad(where + ".bdf", bdf, "bus 0x%02x is a root bus (root complex 0000:%02x); put devices on "
                                           "buses 0x%02x-0x%02x behind it" % (bus, bus, bus + 1, bus + span - 1))
        node = _rc_node(spec, rc)
        if dev["numa_node"] is not None and dev["numa_node"] not in (node, -1):
            lo = [r * span for r in range(count) if _rc_node(spec, r) == dev["numa_node"]]
            hint = (", e.g. bus 0x%02x-0x%02x" % (lo[0] + 1, lo[0] + span - 1)) if lo else \
                " (this node has NUMA nodes 0-%d)" % (spec["cpu"]["sockets"] * spec["numa"]["per_socket"] - 1)
            check.bad(where + ".numa_node", dev["numa_node"],
                      "bus 0x%02x belongs to root complex 0000:%02x, which is on NUMA node %d with %d NUMA node(s) "
                      "per socket; use numa_node %d or a bus of node %d%s"
                      % (bus, rc * span, node, spec["numa"]["per_socket"], node, dev["numa_node"], hint))
        name = dev.get("name")
        if name:
            if name in names or name == "lo":
                check.bad(where + ".name", name, "already used by %s" % names.get(name, "the loopback device"))
            names[name] = where
    vga = spec["bmc_vga"]
    if isinstance(vga, str):
        if vga in seen:
            check.bad("bmc_vga", vga, "already used by %s" % seen[vga])
        elif _bus(vga) % span == 0:
            check.bad("bmc_vga", vga, "a root bus cannot hold the BMC VGA device")
    packages: Dict[int, List[str]] = {}
    for index, gpu in enumerate(spec["gpus"]):
        if gpu["package"] is not None and gpu["package"] >= 0:
            packages.setdefault(gpu["package"], []).append("gpus[%d]" % index)
            limit = GPU_MODELS[gpu["model"]]["gcds_per_package"]
            if len(packages[gpu["package"]]) > limit:
                check.bad("gpus[%d].package" % index, gpu["package"],
                          "a %s package holds at most %d GPU function(s)" % (gpu["model"], limit))
    if check.errors:
        return
    try:
        _attachments(spec)
    except SpecError as exc:
        check.errors.append(str(exc))


def _attachments(spec: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Group endpoints into root-port attachments (a switch, or one slot) and check that bus ranges fit."""
    count, span = _root_complex_layout(spec)
    endpoints: List[Tuple[str, Dict[str, Any], str]] = []
    for index, gpu in enumerate(spec["gpus"]):
        endpoints.append(("gpus[%d]" % index, gpu, "gpu"))
    for index, nic in enumerate(spec["nics"]):
        endpoints.append(("nics[%d]" % index, nic, "nic"))
    for index, nvme in enumerate(spec["nvme"]):
        endpoints.append(("nvme[%d]" % index, nvme, "nvme"))
    groups: Dict[Tuple[int, str], Dict[str, Any]] = {}
    for where, dev, kind in endpoints:
        bus = _bus(dev["bdf"])
        rc = bus // span
        key = (rc, "switch:" + dev["switch"]) if dev["switch"] else (rc, "slot:%02x" % bus)
        if dev["switch"]:
            for (other_rc, other_key), group in groups.items():
                if other_key == key[1] and other_rc != rc:
                    raise SpecError("spec %s.switch: %r is not valid: its devices sit in different root complexes "
                                    "(%s is on bus 0x%02x, %s on bus 0x%02x); a switch hangs below one root port"
                                    % (where, dev["switch"], where, bus, group["members"][0][0],
                                       _bus(group["members"][0][1]["bdf"])))
        group = groups.setdefault(key, {"rc": rc, "switch": dev["switch"], "members": []})
        group["members"].append((where, dev, kind))
    vga = spec["bmc_vga"]
    used_buses = set(_bus(member[1]["bdf"]) for member in endpoints)
    if vga is True:
        # The BMC's VGA sits on root complex 0, on the highest bus nobody else uses.
        bus = span - 1
        while bus > 0 and bus in used_buses:
            bus -= 1
        vga = "0000:%02x:00.0" % bus
    if vga:
        spec_vga = {"bdf": vga, "switch": None, "numa_node": None}
        groups[(_bus(vga) // span, "slot:%02x" % _bus(vga))] = {
            "rc": _bus(vga) // span, "switch": None, "members": [("bmc_vga", spec_vga, "vga")]}
    result = []
    for (rc, _key), group in sorted(groups.items(), key=lambda kv: (kv[1]["rc"], min(_bus(m[1]["bdf"])
                                                                                     for m in kv[1]["members"]))):
        buses = sorted(set(_bus(m[1]["bdf"]) for m in group["members"]))
        base = rc * span
        if group["switch"]:
            upstream = buses[0] - 2
            if upstream <= base:
                raise SpecError("spec %s.bdf: %r is not valid: behind switch %r the first device bus must be at "
                                "least 0x%02x (root bus 0x%02x, then the switch's upstream and downstream port "
                                "buses)" % (group["members"][0][0], group["members"][0][1]["bdf"], group["switch"],
                                            base + 3, base))
            low = upstream
        else:
            if len(buses) != 1:
                raise SpecError("internal: slot group with several buses")
            low = buses[0]
        group.update({"low": low, "high": buses[-1], "buses": buses})
        result.append(group)
    by_rc: Dict[int, List[Dict[str, Any]]] = {}
    for group in result:
        by_rc.setdefault(group["rc"], []).append(group)
    for rc, groups_in_rc in by_rc.items():
        groups_in_rc.sort(key=lambda g: g["low"])
        for before, after in zip(groups_in_rc, groups_in_rc[1:]):
            if after["low"] <= before["high"]:
                raise SpecError("spec %s.bdf: %r is not valid: bus 0x%02x falls inside the bus range 0x%02x-0x%02x "
                                "already taken below root complex 0000:%02x by %s; pick another bus or put both "
                                "devices behind the same switch"
                                % (after["members"][0][0], after["members"][0][1]["bdf"], after["low"],
                                   before["low"], before["high"], rc * span, before["members"][0][0]))
        if len(groups_in_rc) > 56:
            raise SpecError("spec: root complex 0000:%02x has more than 56 root ports" % (rc * span))
    return result


# ============================================================================================ loading
def load_spec(source: Any) -> Dict[str, Any]:
    """A validated, normalised spec (every default filled in) from a dict or a YAML/JSON file path.

    Raises SpecError naming each bad field. YAML files need PyYAML (present wherever Ansible runs on the
    controller); the generator itself needs only the standard library.
    """
    if isinstance(source, dict):
        raw = source
    elif isinstance(source, str):
        raw = _read_spec_file(source)
    else:
        raise SpecError("simulated node spec: expected a mapping or a file path, got %s" % type(source).__name__)
    if not isinstance(raw, dict):
        raise SpecError("simulated node spec: the top level must be a mapping, got %s" % type(raw).__name__)
    return _normalize(raw)


def _read_spec_file(path: str) -> Any:
    try:
        with open(path, "r", encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise SpecError("simulated node spec file %s cannot be read: %s" % (path, exc.strerror or exc)) from None
    if path.endswith(".json"):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise SpecError("simulated node spec file %s is not valid JSON: %s" % (path, exc)) from None
    try:
        import yaml  # noqa: PLC0415 - optional, only for YAML spec files
    except ImportError:
        raise SpecError("simulated node spec file %s is YAML, which needs PyYAML on this host; pass the spec as "
                        "a mapping (spec:) or as a .json file instead" % path) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError("simulated node spec file %s is not valid YAML: %s" % (path, exc)) from None
