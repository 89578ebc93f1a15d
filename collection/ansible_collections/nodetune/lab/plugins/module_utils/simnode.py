# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Simulated nodes: directory trees shaped like a real node's /sys, /proc and a little of /etc.

Every test, Molecule scenario and the default lab inventory run against such trees instead of a real machine, so
they must look like what a kernel really shows - to nodetune and to an independent reader (``lstopo --input``
builds the same CPUs, NUMA nodes and PCI locality from them). The generator therefore lays out the kernel's own
file shapes: PCI functions under ``sys/devices/pci0000:XX/<root port>/[<switch>/]<device>`` with relative
``sys/bus/pci/devices`` links, a binary ``config`` space (hwloc reads bridge bus ranges and link speeds from it),
kernel hex masks in 32-bit words, ``/proc/interrupts`` with one column per online CPU, managed NVMe vectors
spread the way ``group_cpus_evenly()`` does, mlx5 completion vectors placed with ``cpumask_local_spread()``.

A spec (:func:`load_spec`) is small: sockets and cores, SMT, NPS, cpufreq driver and governor, and the GPUs, NICs
and NVMe drives with their PCI addresses. Each device's NUMA node follows from its bus: EPYC has four root
complexes (IOHCs) per socket, each owning an equal share of the 256 buses, and NPS decides which NUMA node each
IOHC belongs to; a ``numa_node`` written in the spec is checked against that.

Runtime and persistent state are kept apart as on a real machine: ``sys/``, ``proc/`` and ``run/`` are runtime
(:func:`reboot` puts every file there back to its boot value), ``etc/``, ``usr/`` and ``var/`` persist. A reboot
also does what the boot itself does with persistent files: systemd-sysctl applies ``etc/sysctl.d``, udev applies
``ATTR{}`` assignments of ``etc/udev/rules.d`` to block devices, ``options nvme`` in ``etc/modprobe.d`` sets the
NVMe queue count and depth at driver load, and irqbalance runs iff it is enabled.

Simulated service state (the representation ``simservices.py`` reads and writes):
``usr/lib/systemd/system/irqbalance.service`` = installed; the symlink
``etc/systemd/system/multi-user.target.wants/irqbalance.service`` = enabled; the link
``run/systemd/units/invocation:irqbalance.service`` (as systemd keeps it) = running, together with a
``proc/<pid>/{comm,cmdline}`` process entry. A role stops it by removing the ``run/`` link (and may remove the
process entry) and disables it by removing the ``wants`` link; the next :func:`reboot` starts it again iff the
``wants`` link exists. Any other enabled service (a ``slurmd.service`` a test installs) is started at boot too, with
a ``proc/<pid>/limits`` carrying the limit systemd gave it, and the manager's loaded limits are kept in
``run/systemd/.nodetune-sim-manager.json`` (simservices.py: daemon-reload, daemon-reexec, restart).

The boot loader (simbootloader.py): a Debian-family node has ``/etc/default/grub``, ``/boot/grub/grub.cfg`` and
``update-grub``/``grub-mkconfig`` stand-ins, a RHEL-family node BootLoaderSpec entries (the kernel's and a rescue
entry) and ``grubby``; the lab's backend runs those tools' effects on the files. :func:`reboot` boots the default
entry, so ``/proc/cmdline`` (and what the boot derives from it: ``isolcpus=``, ACS, the IOMMU groups' type) follows
what the boot loader was given; while the entry is as built, the spec's ``kernel.cmdline`` as it is.

The tree's root holds ``.nodetune-simnode.json`` (the normalised spec), for this module only. ``simkernel.py``
emulates the kernel side effects of writes for a Root given its backend explicitly (the lab says so; the marker
never does).

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

import fnmatch
import json
import os
import re
import shutil
import stat
import struct
import tempfile
import zlib
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ansible_collections.nodetune.lab.plugins.module_utils.simkernel import (
    KFD_PROC,
    NPS_REQUEST,
    dirty_write,
    od_clk_text,
    sim_root,
)
from ansible_collections.nodetune.lab.plugins.module_utils.simboot import run_boot_restore
from ansible_collections.nodetune.lab.plugins.module_utils import simbootloader
from ansible_collections.nodetune.lab.plugins.module_utils import simservices
from ansible_collections.nodetune.lab.plugins.module_utils import simmetrics
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.irq import parse_interrupts
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import (
    ParseError,
    format_cpulist,
    format_cpumask,
    parse_cpulist,
)

MARKER = ".nodetune-simnode.json"
GENERATOR = "nodetune.simnode"
GENERATOR_VERSION = 7  # bump whenever the trees change shape: present-state rebuilds older trees
RUNTIME_DIRS = ("sys", "proc", "run")
# mlx5 allocates completion vectors on first use since this release (commit f14c1a14e632, "net/mlx5: Allocate
# completion EQs dynamically"); before, all at probe
LATE_COMP_VECTORS = (6, 5)
PERSISTENT_DIRS = ("etc", "usr", "var")


class SpecError(ValueError):
    """The spec is not valid; the message names each bad field, its value and what is valid."""


class SimNodeError(Exception):
    """A tree cannot be built, rebooted or removed at that destination (the message says why)."""


# ============================================================================================ catalogues
# Values a real machine of that kind shows; every one can be overridden in the spec.
ZEN3_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall "
    "nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid extd_apicid aperfmperf rapl "
    "pni pclmulqdq monitor ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand lahf_lm "
    "cmp_legacy svm extapic cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw ibs skinit wdt tce topoext "
    "perfctr_core perfctr_nb bpext perfctr_llc mwaitx cpb cat_l3 cdp_l3 invpcid_single hw_pstate ssbd mba ibrs ibpb "
    "stibp vmmcall fsgsbase bmi1 avx2 smep bmi2 erms invpcid cqm rdt_a rdseed adx smap clflushopt clwb sha_ni "
    "xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local clzero irperf xsaveerptr rdpru "
    "wbnoinvd amd_ppin brs arat npt lbrv svm_lock nrip_save tsc_scale vmcb_clean flushbyasid decodeassists "
    "pausefilter pfthreshold v_vmsave_vmload vgif v_spec_ctrl umip pku ospke vaes vpclmulqdq rdpid overflow_recov "
    "succor smca fsrm")
ZEN4_FLAGS = ZEN3_FLAGS.replace(
    " sha_ni ", " avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl sha_ni ").replace(
    " xsaves ", " xsaves avx512_bf16 ").replace(
    " vpclmulqdq ", " avx512vbmi avx512_vbmi2 gfni vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq la57 ")

CPU_MODELS: Dict[str, Dict[str, Any]] = {
    "EPYC 7763": {
        "model_name": "AMD EPYC 7763 64-Core Processor", "family": 25, "model_id": 1, "stepping": 1,
        "microcode": "0xa0011d5", "cores_per_socket": 64, "cores_per_l3": 8, "platform": "milan",
        "cache_kb": {"l1d": 32, "l1i": 32, "l2": 512, "l3": 32768},
        "mhz": {"min": 1500, "base": 2450, "max": 3529},
    },
    "EPYC 9654": {
        "model_name": "AMD EPYC 9654 96-Core Processor", "family": 25, "model_id": 17, "stepping": 1,
        "microcode": "0xa101148", "cores_per_socket": 96, "cores_per_l3": 8, "platform": "genoa",
        "cache_kb": {"l1d": 32, "l1i": 32, "l2": 1024, "l3": 32768},
        "mhz": {"min": 1500, "base": 2400, "max": 3707},
    },
}

# AMD host-side PCI functions per platform: root complex, IOMMU, dummy host bridge, GPP bridge (root port),
# and the PCIe switch typically found on GPU baseboards of that generation (vendor, device, gen).
PLATFORMS: Dict[str, Dict[str, Any]] = {
    "milan": {"root_complex": 0x1480, "iommu": 0x1481, "dummy": 0x1482, "root_port": 0x1483,
              "switch": (0x1000, 0xc010, 4)},
    "genoa": {"root_complex": 0x14a4, "iommu": 0x149e, "dummy": 0x149f, "root_port": 0x14ab,
              "switch": (0x1000, 0xc030, 5)},
}

IB_ERROR_COUNTERS = ("symbol_error", "link_downed", "port_rcv_errors", "port_xmit_discards")
GPU_MODELS: Dict[str, Dict[str, Any]] = {
    # MI250: one OAM package = two GCDs, each its own PCI function, KFD node and DRM card.
    "MI250": {"device": 0x740c, "class": 0x038000, "subsystem": 0x0b0c, "product": "AMD Instinct MI250",
              "gfx": "gfx90a", "gfx_target_version": 90010, "simd_count": 416, "array_count": 8,
              "cu_per_simd_array": 13, "num_xcc": 1, "vram_gib": 64, "link": (4, 16), "gcds_per_package": 2,
              "fcompute_mhz": 1700, "power_cap_w": 500, "idle_power_w": 90, "idle_temp_c": 38},
    # MI300X enumerates as a processing accelerator (class 0x1200), one function per OAM in SPX mode.
    "MI300X": {"device": 0x74a1, "class": 0x120000, "subsystem": 0x74a1, "product": "AMD Instinct MI300X",
               "gfx": "gfx942", "gfx_target_version": 90402, "simd_count": 1216, "array_count": 32,
               "cu_per_simd_array": 10, "num_xcc": 8, "vram_gib": 192, "link": (5, 16), "gcds_per_package": 1,
               "fcompute_mhz": 2100, "power_cap_w": 750, "idle_power_w": 140, "idle_temp_c": 40},
}

NIC_MODELS: Dict[str, Dict[str, Any]] = {
    "ConnectX-6": {"vendor": 0x15b3, "device": 0x101b, "class": 0x020700, "subsystem": 0x0007, "driver": "mlx5_core",
                   "kind": "ib", "hca_type": "MT4123", "fw_ver": "20.39.1002", "board_id": "MT_0000000222",
                   "rate": "200 Gb/sec (4X HDR)", "link": (4, 16)},
    "ConnectX-7": {"vendor": 0x15b3, "device": 0x1021, "class": 0x020700, "subsystem": 0x0041, "driver": "mlx5_core",
                   "kind": "ib", "hca_type": "MT4129", "fw_ver": "28.39.1002", "board_id": "MT_0000000838",
                   "rate": "400 Gb/sec (4X NDR)", "link": (5, 16)},
    "BCM57416": {"vendor": 0x14e4, "device": 0x16d8, "class": 0x020000, "subsystem": 0x4163, "driver": "bnxt_en",
                 "kind": "ether", "speed_mbps": 10000, "link": (3, 8)},
}

NVME_MODELS: Dict[str, Dict[str, Any]] = {
    "P5800X": {"vendor": 0x8086, "device": 0x4140, "subsystem": 0x4008, "model": "INTEL SSDPF21Q800GB",
               "firmware": "L0310200", "size_gb": 800, "max_queues": 64, "max_hw_sectors_kb": 128, "link": (4, 4)},
    "PM1733": {"vendor": 0x144d, "device": 0xa824, "subsystem": 0xa801, "model": "SAMSUNG MZWLJ3T8HBLS-00007",
               "firmware": "EPK9GB5Q", "size_gb": 3840, "max_queues": 64, "max_hw_sectors_kb": 512, "link": (4, 4)},
    "CM7-R": {"vendor": 0x1e0f, "device": 0x0013, "subsystem": 0x0001, "model": "KIOXIA KCMYXRUG3T84",
              "firmware": "0104", "size_gb": 3840, "max_queues": 64, "max_hw_sectors_kb": 512, "link": (5, 4)},
}

CPUFREQ_GOVERNORS = {
    "acpi-cpufreq": ["conservative", "ondemand", "userspace", "powersave", "performance", "schedutil"],
    "amd-pstate": ["conservative", "ondemand", "userspace", "powersave", "performance", "schedutil"],
    "amd-pstate-epp": ["performance", "powersave"],
}
EPP_VALUES = ["default", "performance", "balance_performance", "balance_power", "power"]
CPUIDLE_STATES = {  # name -> (desc, latency us, residency us)
    "POLL": ("CPUIDLE CORE POLL IDLE", 0, 0),
    "C1": ("ACPI FFH MWAIT 0x0", 1, 2),
    "C2": ("ACPI IOPORT 0x814", 400, 800),
    "C3": ("ACPI IOPORT 0x815", 1000, 2000),
}

# Kernel defaults of the sysctls nodetune reads or tunes (values as the kernel prints them).
SYSCTL_DEFAULTS: Dict[str, str] = {
    "vm.dirty_ratio": "20",
    "vm.dirty_background_ratio": "10",
    "vm.dirty_bytes": "0",
    "vm.dirty_background_bytes": "0",
    "vm.swappiness": "60",
    "vm.zone_reclaim_mode": "0",
    "vm.nr_hugepages": "0",
    "kernel.numa_balancing": "1",
    "net.core.rmem_max": "212992",
    "net.core.wmem_max": "212992",
    "net.core.rmem_default": "212992",
    "net.core.wmem_default": "212992",
    "net.core.netdev_max_backlog": "1000",
    "net.core.somaxconn": "4096",
    "net.ipv4.tcp_rmem": "4096\t131072\t6291456",
    "net.ipv4.tcp_wmem": "4096\t16384\t4194304",
    "net.ipv4.neigh.default.gc_thresh1": "128",
    "net.ipv4.neigh.default.gc_thresh2": "512",
    "net.ipv4.neigh.default.gc_thresh3": "1024",
    "fs.pipe-max-size": "1048576",  # stored rounded up to a power of two pages (simkernel)
    "kernel.sched_rr_timeslice_ms": "100",  # 0 resets it to this default (simkernel)
}
_SYSCTL_VECTORS = ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem")

OS_FAMILIES = {
    "Debian": {"pretty_name": "Ubuntu 24.04.3 LTS", "release": "6.8.0-60-generic",
               "irqbalance_config": "etc/default/irqbalance"},
    "RedHat": {"pretty_name": "Red Hat Enterprise Linux 9.6 (Plow)", "release": "5.14.0-570.12.1.el9_6.x86_64",
               "irqbalance_config": "etc/sysconfig/irqbalance"},
}

_GTS_BY_GEN = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
_GEN_BY_GTS = dict((v, k) for k, v in _GTS_BY_GEN.items())
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


def _link_state(link: Optional[Dict[str, Any]], model_link: Tuple[int, int]) -> Dict[str, int]:
    """Spec link (current GT/s and width) plus the model's maximum, as PCIe generations."""
    if not link:
        return {"gen": model_link[0], "width": model_link[1], "max_gen": model_link[0], "max_width": model_link[1]}
    return {"gen": _GEN_BY_GTS[float(link["speed"])], "width": int(link["width"]), "max_gen": model_link[0],
            "max_width": model_link[1]}


def _model_link(member: Dict[str, Any], kind: str) -> Tuple[int, int]:
    catalogue = {"gpu": GPU_MODELS, "nic": NIC_MODELS, "nvme": NVME_MODELS}.get(kind)
    return catalogue[member["model"]]["link"] if catalogue else (1, 1)


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


# ============================================================================================ the machine
class _Cpus(object):
    """CPU numbering, siblings, NUMA nodes and caches derived from the spec."""

    def __init__(self, spec: Dict[str, Any]) -> None:
        cpu = spec["cpu"]
        self.sockets = cpu["sockets"]
        self.cores = cpu["cores_per_socket"]
        self.threads = 1 if cpu["smt"] == "notsupported" else cpu["threads_per_core"]
        self.nps = spec["numa"]["per_socket"]
        self.count = self.sockets * self.cores * self.threads
        self.nr = self.count
        self.socket: List[int] = [0] * self.count
        self.core: List[int] = [0] * self.count
        self.thread: List[int] = [0] * self.count
        self.node: List[int] = [0] * self.count
        self.l3: List[int] = [0] * self.count
        self.core_cpus: Dict[Tuple[int, int], List[int]] = {}
        cores_per_node = self.cores // self.nps
        l3_per_socket = self.cores // cpu["cores_per_l3"]
        for t in range(self.threads):
            for s in range(self.sockets):
                for c in range(self.cores):
                    if cpu["numbering"] == "split":
                        cid = t * self.sockets * self.cores + s * self.cores + c
                    elif cpu["numbering"] == "interleaved":
                        cid = (t * self.cores + c) * self.sockets + s
                    else:
                        cid = (s * self.cores + c) * self.threads + t
                    self.socket[cid], self.core[cid], self.thread[cid] = s, c, t
                    self.node[cid] = s * self.nps + c // cores_per_node
                    self.l3[cid] = s * l3_per_socket + c // cpu["cores_per_l3"]
                    self.core_cpus.setdefault((s, c), []).append(cid)
        for key in self.core_cpus:
            self.core_cpus[key].sort()
        self.nodes = self.sockets * self.nps
        self.node_cpus: List[List[int]] = [[] for _node in range(self.nodes)]
        for cid in range(self.count):
            self.node_cpus[self.node[cid]].append(cid)
        smt = cpu["smt"]
        self.online = [c for c in range(self.count) if smt in ("on", "notsupported") or self.thread[c] == 0]
        self.online_set = set(self.online)
        self.package_cpus = [[c for c in range(self.count) if self.socket[c] == s] for s in range(self.sockets)]
        self.l3_cpus: Dict[int, List[int]] = {}
        for cid in range(self.count):
            self.l3_cpus.setdefault(self.l3[cid], []).append(cid)
        distance_same = spec["numa"]["distance_same_socket"]
        distance_remote = spec["numa"]["distance_remote"]
        self.distance = [[10 if a == b else (distance_same if a // self.nps == b // self.nps else distance_remote)
                          for b in range(self.nodes)] for a in range(self.nodes)]
        self._mask_cache: Dict[Tuple[int, ...], str] = {}
        self._spread: Dict[int, List[int]] = {}
        self._groups: Dict[int, List[List[int]]] = {}

    def siblings(self, cid: int) -> List[int]:
        return self.core_cpus[(self.socket[cid], self.core[cid])]

    def online_only(self, members: List[int]) -> List[int]:
        if len(self.online) == self.count:
            return members
        key = ("online",) + tuple(members)
        cached = self._mask_cache.get(key)  # type: ignore[arg-type]
        if cached is None:
            cached = [c for c in members if c in self.online_set]
            self._mask_cache[key] = cached  # type: ignore[index]
        return cached  # type: ignore[return-value]

    def mask(self, cpus: Iterable[int]) -> str:
        """Kernel ``%*pb`` bitmap: 32-bit words, the top one only as wide as nr_cpu_ids needs."""
        key = tuple(cpus)
        text = self._mask_cache.get(key)
        if text is None:
            text = format_cpumask(key, nr_cpus=self.nr)
            rest = self.nr % 32
            if rest:
                head, sep, tail = text.partition(",")
                text = head[-((rest + 3) // 4):] + sep + tail
            self._mask_cache[key] = text
        return text

    def local_spread(self, node: int) -> List[int]:
        """Online CPUs in ``cpumask_local_spread()`` order: the node's own, then nodes by distance."""
        order = self._spread.get(node)
        if order is None:
            if node < 0:
                node = 0
            nodes = sorted(range(self.nodes), key=lambda n: (self.distance[node][n], n))
            order = [c for n in nodes for c in self.node_cpus[n] if c in self.online_set]
            self._spread[node] = order
        return order

    def group_evenly(self, groups: int) -> List[List[int]]:
        """CPU groups as the kernel's ``group_cpus_evenly()`` builds them for managed IRQ vectors."""
        cached = self._groups.get(groups)
        if cached is None:
            cached = self._group_evenly(groups)
            self._groups[groups] = cached
        return cached

    def _group_evenly(self, groups: int) -> List[List[int]]:
        nodes = [n for n in range(self.nodes) if self.node_cpus[n]]
        groups = max(1, min(groups, self.count))
        masks: List[List[int]] = [[] for _group in range(groups)]
        if groups <= len(nodes):
            for index, n in enumerate(nodes):
                masks[index % groups].extend(self.node_cpus[n])
            return [sorted(m) for m in masks]
        remaining_cpus = self.count
        remaining_groups = groups
        per_node: Dict[int, int] = {}
        for n in sorted(nodes, key=lambda x: (len(self.node_cpus[x]), x)):
            ncpus = len(self.node_cpus[n])
            share = max(1, remaining_groups * ncpus // remaining_cpus)
            per_node[n] = share
            remaining_cpus -= ncpus
            remaining_groups -= share
        current = 0
        for n in nodes:
            free = list(self.node_cpus[n])  # ascending ids: cpumask_first() order
            taken = set()
            ncpus = len(free)
            extra = ncpus - per_node[n] * (ncpus // per_node[n])
            for _group in range(per_node[n]):
                want = ncpus // per_node[n]
                if extra:
                    want += 1
                    extra -= 1
                if current >= groups:
                    current = 0
                group = masks[current]
                for first in free:
                    if want <= 0:
                        break
                    if first in taken:
                        continue
                    taken.add(first)
                    group.append(first)
                    want -= 1
                    for sib in self.siblings(first):  # siblings join their core's group first
                        if want <= 0:
                            break
                        if sib not in taken and self.node[sib] == n:
                            taken.add(sib)
                            group.append(sib)
                            want -= 1
                current += 1
        return [sorted(m) for m in masks]


class _Pci(object):
    """One PCI function of the simulated machine."""

    def __init__(self, bdf: str, vendor: int, device: int, cls: int, kind: str, path: str, node: int,
                 driver: Optional[str] = None, subsystem: Tuple[int, int] = (0, 0), revision: int = 0) -> None:
        self.bdf = bdf
        self.vendor = vendor
        self.device = device
        self.cls = cls
        self.kind = kind
        self.path = path  # relative, e.g. sys/devices/pci0000:20/0000:20:01.1/0000:21:00.0
        self.node = node
        self.driver = driver
        self.subsystem = subsystem
        self.revision = revision
        self.bridge: Optional[Tuple[int, int, int]] = None  # primary, secondary, subordinate bus
        self.pcie_type: Optional[int] = None  # 0 endpoint, 4 root port, 5 switch up, 6 switch down
        self.link: Optional[Dict[str, Any]] = None
        self.aspm: Optional[Dict[str, bool]] = None
        self.bars: List[Tuple[int, int, int]] = []  # start, end, flags
        self.msi: List[int] = []
        self.msi_kind = "msix"
        self.spec: Optional[Dict[str, Any]] = None
        self.multifunction = False


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


class _Irq(object):
    __slots__ = ("number", "chip", "hwirq", "flow", "name", "bdf", "affinity", "effective", "managed", "node",
                 "hint", "count")

    def __init__(self, number: int, chip: str, hwirq: str, name: str, bdf: Optional[str], affinity: List[int],
                 effective: int, managed: bool, node: int, hint: Optional[List[int]] = None,
                 flow: str = "edge") -> None:
        self.number = number
        self.chip = chip
        self.hwirq = hwirq
        self.flow = flow
        self.name = name
        self.bdf = bdf
        self.affinity = affinity
        self.effective = effective
        self.managed = managed
        self.node = node
        self.hint = hint
        self.count = 0


class _Machine(object):
    """Everything derived from a spec (plus the persistent state read at boot), before any file is written."""

    FIRST_DYNAMIC_IRQ = 32  # below: the legacy (ISA/IO-APIC) numbers

    def __init__(self, spec: Dict[str, Any], boot: Dict[str, Any]) -> None:
        self.spec = spec
        self.boot = boot
        self.cpus = _Cpus(spec)
        self.release = spec["kernel"]["release"]
        self.version = _parse_version(self.release)
        self.platform = PLATFORMS[CPU_MODELS[spec["cpu"]["model"]]["platform"]]
        self.ir = "IR-" if spec["iommu"] else ""
        self.pci: Dict[str, _Pci] = {}
        self.root_complexes: List[Tuple[int, int]] = []  # (bus, node)
        self.irqs: List[_Irq] = []
        self._next_irq = self.FIRST_DYNAMIC_IRQ
        self._eff_rr: Dict[int, int] = {}
        self._build_pci()
        self._number_devices()
        self._build_irqs()

    # ---------------------------------------------------------------- PCI
    def _add(self, dev: _Pci) -> _Pci:
        self.pci[dev.bdf] = dev
        return dev

    def _build_pci(self) -> None:
        spec = self.spec
        count, span = _root_complex_layout(spec)
        plat = self.platform
        mmio = 0x10000000000  # 1 TiB: 64-bit windows start here, one 2 TiB window per root complex
        groups = _attachments(spec)
        by_rc: Dict[int, List[Dict[str, Any]]] = {}
        for group in groups:
            by_rc.setdefault(group["rc"], []).append(group)
        for rc in range(count):
            bus = rc * span
            node = _rc_node(spec, rc)
            self.root_complexes.append((bus, node))
            host = "sys/devices/pci0000:%02x" % bus
            self._add(_Pci("0000:%02x:00.0" % bus, 0x1022, plat["root_complex"], 0x060000, "root_complex",
                           host + "/0000:%02x:00.0" % bus, node, subsystem=(0x1022, plat["root_complex"])))
            if spec["iommu"]:
                self._add(_Pci("0000:%02x:00.2" % bus, 0x1022, plat["iommu"], 0x080600, "iommu",
                               host + "/0000:%02x:00.2" % bus, node, subsystem=(0x1022, plat["iommu"])))
            window = mmio + rc * 0x20000000000
            for port, group in enumerate(sorted(by_rc.get(rc, []), key=lambda g: g["low"])):
                dev_no = 1 + 2 * (port // 7)
                fn = 1 + port % 7
                dummy = "0000:%02x:%02x.0" % (bus, dev_no)
                if dummy not in self.pci:
                    self._add(_Pci(dummy, 0x1022, plat["dummy"], 0x060000, "dummy", host + "/" + dummy, node))
                self.pci[dummy].multifunction = True
                rp_bdf = "0000:%02x:%02x.%d" % (bus, dev_no, fn)
                rp = self._add(_Pci(rp_bdf, 0x1022, plat["root_port"], 0x060400, "root_port", host + "/" + rp_bdf,
                                    node, driver="pcieport", subsystem=(0x1022, 0x1453)))
                rp.bridge = (bus, group["low"], group["high"])
                rp.pcie_type = 4
                rp.multifunction = True
                first = group["members"][0]
                if group["switch"]:
                    vendor, device, gen = plat["switch"]
                    up_bdf = "0000:%02x:00.0" % group["low"]
                    rp.link = {"gen": gen, "width": 16, "max_gen": gen, "max_width": 16}
                    up = self._add(_Pci(up_bdf, vendor, device, 0x060400, "switch_up", rp.path + "/" + up_bdf, node,
                                        driver="pcieport", subsystem=(vendor, 0x0000), revision=0xb0))
                    up.bridge = (group["low"], group["low"] + 1, group["high"])
                    up.pcie_type = 5
                    up.link = dict(rp.link)
                    parent_of: Dict[int, str] = {}
                    for index, ep_bus in enumerate(group["buses"]):
                        down_bdf = "0000:%02x:%02x.0" % (group["low"] + 1, index)
                        down = self._add(_Pci(down_bdf, vendor, device, 0x060400, "switch_down",
                                              up.path + "/" + down_bdf, node, driver="pcieport",
                                              subsystem=(vendor, 0x0000), revision=0xb0))
                        down.bridge = (group["low"] + 1, ep_bus, ep_bus)
                        down.pcie_type = 6
                        parent_of[ep_bus] = down.path
                        member = [m for m in group["members"] if _bus(m[1]["bdf"]) == ep_bus][0]
                        down.link = _link_state(member[1].get("link"), _model_link(member[1], member[2]))
                else:
                    rp.link = _link_state(first[1].get("link"), _model_link(first[1], first[2]))
                    parent_of = {group["buses"][0]: rp.path}
                for _where, member, kind in group["members"]:
                    parent = parent_of[_bus(member["bdf"])]
                    dev = self._endpoint(member, kind, parent + "/" + member["bdf"], node, window)
                    window += 0x10000000000 // 16
                    self._add(dev)
        slots: Dict[str, List[_Pci]] = {}
        for dev in self.pci.values():
            slots.setdefault(dev.bdf[:10], []).append(dev)
        for members in slots.values():
            if len(members) > 1:
                for dev in members:
                    dev.multifunction = True

    def _endpoint(self, member: Dict[str, Any], kind: str, path: str, node: int, window: int) -> _Pci:
        node = member["numa_node"] if member.get("numa_node") == -1 else node
        if kind == "gpu":
            model = GPU_MODELS[member["model"]]
            dev = _Pci(member["bdf"], 0x1002, model["device"], model["class"], "gpu", path, node, driver="amdgpu",
                       subsystem=(0x1002, model["subsystem"]))
            vram = model["vram_gib"] << 30
            dev.bars = [(window, window + vram - 1, 0x14220c),
                        (window + vram, window + vram + (2 << 20) - 1, 0x14220c),
                        (0, 0, 0), (0, 0, 0),
                        (0xf0000000 + (_bus(member["bdf"]) << 20), 0xf0000000 + (_bus(member["bdf"]) << 20) + 0x7ffff,
                         0x40200)]
        elif kind == "nic":
            model = NIC_MODELS[member["model"]]
            dev = _Pci(member["bdf"], model["vendor"], model["device"], model["class"], "nic", path, node,
                       driver=model["driver"], subsystem=(model["vendor"], model["subsystem"]))
            dev.bars = [(window, window + (32 << 20) - 1, 0x14220c)]
        elif kind == "nvme":
            model = NVME_MODELS[member["model"]]
            dev = _Pci(member["bdf"], model["vendor"], model["device"], 0x010802, "nvme", path, node, driver="nvme",
                       subsystem=(model["vendor"], model["subsystem"]))
            low = 0xe0000000 + (_bus(member["bdf"]) << 16)
            dev.bars = [(low, low + 0x3fff, 0x140204)]
        else:  # the BMC's VGA
            dev = _Pci(member["bdf"], 0x1a03, 0x2000, 0x030000, "vga", path, node, driver="ast",
                       subsystem=(0x15d9, 0x1b95), revision=0x52)
            dev.bars = [(0xc0000000, 0xc3ffffff, 0x40200), (0xc4000000, 0xc403ffff, 0x40200)]
            dev.link = {"gen": 1, "width": 1, "max_gen": 1, "max_width": 1}
            dev.msi_kind = "msi"
        dev.pcie_type = 0
        if kind != "vga":
            dev.link = _link_state(member["link"], _model_link(member, kind))
            dev.aspm = dict(member["aspm"])
        dev.spec = member
        return dev

    def _number_devices(self) -> None:
        """Kernel names in probe order (BDF order): mlx5_N, nvmeN, cardN, renderD(128+N), KFD nodes."""
        ordered = sorted(self.pci.values(), key=lambda d: d.bdf)
        self.gpus = [d for d in ordered if d.kind == "gpu"]
        self.nics = [d for d in ordered if d.kind == "nic"]
        self.nvmes = [d for d in ordered if d.kind == "nvme"]
        self.vga = [d for d in ordered if d.kind == "vga"]
        self.ib_nics = [d for d in self.nics if NIC_MODELS[d.spec["model"]]["kind"] == "ib"]
        self.ib_name = dict((d.bdf, "mlx5_%d" % i) for i, d in enumerate(self.ib_nics))
        self.nvme_name = dict((d.bdf, "nvme%d" % i) for i, d in enumerate(self.nvmes))
        first_card = len(self.vga)
        self.card = dict((d.bdf, first_card + i) for i, d in enumerate(self.gpus))
        if self.vga:
            self.card[self.vga[0].bdf] = 0
        self.kfd_first_gpu = self.cpus.nodes

    # ---------------------------------------------------------------- IRQs
    def _new_irq(self) -> int:
        number = self._next_irq
        self._next_irq += 1
        return number

    def _effective(self, node: int, mask: List[int]) -> int:
        """The x86 vector allocator puts a non-managed IRQ on a CPU of the device's node when it can."""
        allowed = set(mask)
        spread = self.cpus.local_spread(node)
        if len(allowed) != self.cpus.count:
            spread = [c for c in spread if c in allowed]
        local = [c for c in spread if self.cpus.node[c] == (node if node >= 0 else 0)] or spread
        index = self._eff_rr.get(node, 0)
        self._eff_rr[node] = index + 1
        return local[index % len(local)]

    def _chip(self, dev: _Pci, index: int, kind: Optional[str] = None) -> Tuple[str, str]:
        msi = "MSIX" if (kind or dev.msi_kind) == "msix" else "MSI"
        if self.version >= (6, 2):
            return "%sPCI-%s-%s" % (self.ir, msi, dev.bdf), str(index)
        bus, slot, fn = int(dev.bdf[5:7], 16), int(dev.bdf[8:10], 16), int(dev.bdf[11])
        return "%sPCI-MSI" % self.ir, str((bus << 19) | (slot << 14) | (fn << 11) | index)

    def _build_irqs(self) -> None:
        cpus = self.cpus
        everyone = list(range(cpus.count))
        legacy = [(0, "2", "timer"), (4, "4", "ttyS0"), (8, "8", "rtc0"), (9, "9", "acpi")]
        for number, hwirq, name in legacy:
            flow = "fasteoi" if name == "acpi" else "edge"
            self.irqs.append(_Irq(number, "IR-IO-APIC" if self.ir else "IO-APIC", hwirq, name, None, everyone,
                                  cpus.online[0], False, 0, flow=flow))
        nvme_params = self.boot.get("nvme", {})
        for dev in sorted(self.pci.values(), key=lambda d: d.bdf):
            if dev.kind == "iommu":
                irq = self._new_irq()
                chip, hwirq = ("PCI-MSI-%s" % dev.bdf, "0") if self.version >= (6, 2) else ("PCI-MSI", "0")
                self._attach(dev, _Irq(irq, chip, hwirq, "AMD-Vi%d" % (len([d for d in self.pci.values()
                                                                           if d.kind == "iommu" and d.bdf < dev.bdf])),
                                       dev.bdf, everyone, self._effective(dev.node, everyone), False, dev.node),
                             "msi")
            elif dev.kind in ("root_port", "switch_down"):
                chip, hwirq = self._chip(dev, 0, "msi")
                self._attach(dev, _Irq(self._new_irq(), chip, hwirq, "PCIe PME, aerdrv", dev.bdf, everyone,
                                       self._effective(dev.node, everyone), False, dev.node), "msi")
            elif dev.kind == "nvme":
                self._nvme_irqs(dev, nvme_params)
            elif dev.kind == "nic":
                self._nic_irqs(dev)
            elif dev.kind == "gpu":
                chip, hwirq = self._chip(dev, 0)
                self._attach(dev, _Irq(self._new_irq(), chip, hwirq, "amdgpu", dev.bdf, everyone,
                                       self._effective(dev.node, everyone), False, dev.node), "msix")
        for irq in self.irqs:
            irq.count = 1000 + (irq.number * 7919) % 900000

    def _attach(self, dev: _Pci, irq: _Irq, kind: str) -> None:
        self.irqs.append(irq)
        dev.msi.append(irq.number)
        dev.msi_kind = kind

    def nvme_queues(self, dev: _Pci) -> Dict[str, int]:
        """Hardware queues at driver load: write/poll queue options, bounded by the controller."""
        params = self.boot.get("nvme", {})
        write = params.get("write_queues", 0)
        poll = params.get("poll_queues", 0)
        total = min(self.cpus.count + write + poll, dev.spec["max_queues"])
        poll = min(poll, max(total - 1, 0))
        irq_queues = total - poll
        write = min(write, max(irq_queues - 1, 0))
        depth = params.get("io_queue_depth", 1024)
        return {"total": total, "irq": irq_queues, "write": write, "poll": poll, "tags": min(depth, 4096) - 1}

    def _nvme_irqs(self, dev: _Pci, params: Dict[str, int]) -> None:
        cpus = self.cpus
        queues = self.nvme_queues(dev)
        name = self.nvme_name[dev.bdf]
        everyone = list(range(cpus.count))
        chip, hwirq = self._chip(dev, 0)
        self._attach(dev, _Irq(self._new_irq(), chip, hwirq, "%sq0" % name, dev.bdf, everyone,
                               self._effective(dev.node, everyone), False, dev.node), "msix")
        sets = [queues["irq"]] if not queues["write"] else [queues["write"], queues["irq"] - queues["write"]]
        masks: List[List[int]] = []
        for size in sets:
            masks.extend(cpus.group_evenly(size))
        dev_queue_masks = []
        for index, mask in enumerate(masks, start=1):
            chip, hwirq = self._chip(dev, index)
            online = [c for c in mask if c in cpus.online_set] or cpus.online
            self._attach(dev, _Irq(self._new_irq(), chip, hwirq, "%sq%d" % (name, index), dev.bdf, mask, online[0],
                                   True, cpus.node[mask[0]] if mask else dev.node), "msix")
            dev_queue_masks.append(mask)
        for mask in cpus.group_evenly(queues["poll"]) if queues["poll"] else []:
            dev_queue_masks.append(mask)
        dev.queue_masks = dev_queue_masks  # type: ignore[attr-defined]

    def _nic_irqs(self, dev: _Pci) -> None:
        cpus = self.cpus
        spec = dev.spec
        everyone = list(range(cpus.count))
        spread = cpus.local_spread(dev.node)
        if NIC_MODELS[spec["model"]]["kind"] == "ib":
            # mlx5: one async (control) vector, then completion vectors placed with cpumask_local_spread().
            chip, hwirq = self._chip(dev, 0)
            self._attach(dev, _Irq(self._new_irq(), chip, hwirq, "mlx5_async0@pci:%s" % dev.bdf, dev.bdf, everyone,
                                   self._effective(dev.node, everyone), False, dev.node), "msix")
            count = min(spec["comp_vectors"], len(cpus.online))
            # Linux >= 6.5 creates a vector when its first user asks for it (mlx5_comp_eqn_get(), eq.c): after boot
            # only those the interface and the RDMA core opened exist; use_comp_vectors() creates the others
            count = min(count, spec.get("comp_vectors_at_boot", count))
            for index in range(count):
                cpu = spread[index % len(spread)]
                chip, hwirq = self._chip(dev, index + 1)
                self._attach(dev, _Irq(self._new_irq(), chip, hwirq, "mlx5_comp%d@pci:%s" % (index, dev.bdf),
                                       dev.bdf, [cpu], cpu, False, dev.node, hint=[cpu]), "msix")
        else:
            count = min(spec["irq_vectors"], len(cpus.online))
            for index in range(count):
                cpu = spread[index % len(spread)]
                chip, hwirq = self._chip(dev, index)
                self._attach(dev, _Irq(self._new_irq(), chip, hwirq, "%s-TxRx-%d" % (spec["name"], index), dev.bdf,
                                       [cpu], cpu, False, dev.node, hint=[cpu]), "msix")


# ============================================================================================ the tree model
class _Tree(object):
    """Files, links and directories to create, relative to the node root, in memory first.

    Building the whole model before touching the disk lets :func:`reboot` compare and restore exactly, and keeps
    the write loop tight (one open/write/close per file).
    """

    def __init__(self) -> None:
        self.files: Dict[str, Tuple[bytes, int]] = {}
        self.links: Dict[str, str] = {}
        self.dirs: set = set()

    def _ensure(self, directory: str) -> None:
        while directory and directory not in self.dirs:
            self.dirs.add(directory)
            directory = directory.rpartition("/")[0]

    def dir(self, path: str) -> None:
        self._ensure(path)

    def f(self, path: str, value: Any, mode: int = 0o444) -> None:
        """An attribute: text plus the newline the kernel prints."""
        self.files[path] = (("%s\n" % (value,)).encode("utf-8"), mode)
        self._ensure(path.rpartition("/")[0])

    def raw(self, path: str, data: bytes, mode: int = 0o444) -> None:
        self.files[path] = (data, mode)
        self._ensure(path.rpartition("/")[0])

    def link(self, path: str, target: str) -> None:
        """A symlink to ``target`` (relative to the root), written relative the way sysfs does."""
        self.links[path] = _kernel_relative(path, target)
        self._ensure(path.rpartition("/")[0])

    def abslink(self, path: str, target: str) -> None:
        """A symlink written exactly as given (absolute, or relative as a tool such as systemctl makes it)."""
        self.links[path] = target
        self._ensure(path.rpartition("/")[0])


def _kernel_relative(link: str, target: str) -> str:
    """sysfs writes links up to the target's parent, then down: ``../../../0000:82:00.0``."""
    target_parent, _sep, name = target.rpartition("/")
    rel = os.path.relpath(target_parent or ".", link.rpartition("/")[0] or ".")
    return name if rel == "." else rel + "/" + name


# ============================================================================================ generation
def _generate(spec: Dict[str, Any], boot: Dict[str, Any]) -> Tuple[_Tree, _Machine]:
    machine = _Machine(spec, boot)
    tree = _Tree()
    _emit_cpus(tree, machine)
    _emit_nodes(tree, machine)
    _emit_pci(tree, machine)
    _emit_gpus(tree, machine)
    _emit_nics(tree, machine)
    _emit_nvme(tree, machine)
    _emit_irqs(tree, machine)
    _emit_proc(tree, machine)
    _emit_misc_sys(tree, machine)
    _emit_run(tree, machine)
    _apply_boot_config(tree, machine)
    return tree, machine


def _emit_cpus(tree: _Tree, m: _Machine) -> None:
    spec = m.spec
    cpu = spec["cpu"]
    cpus = m.cpus
    base = "sys/devices/system/cpu"
    everyone = format_cpulist(range(cpus.count))
    tree.f(base + "/possible", everyone)
    tree.f(base + "/present", everyone)
    tree.f(base + "/online", format_cpulist(cpus.online))
    tree.f(base + "/offline", format_cpulist(sorted(set(range(cpus.count)) - cpus.online_set)))
    tree.f(base + "/kernel_max", 8191)
    isolated, nohz = _isolation(spec["kernel"]["cmdline"], cpus.count)
    tree.f(base + "/isolated", format_cpulist(isolated))
    tree.f(base + "/nohz_full", format_cpulist(nohz) if nohz else "(null)")
    smt = cpu["smt"]
    tree.f(base + "/smt/control", smt, 0o644)
    tree.f(base + "/smt/active", 1 if smt == "on" else 0)
    freq = cpu["cpufreq"]
    driver = freq["driver"]
    if driver.startswith("amd-pstate"):
        tree.f(base + "/amd_pstate/status", freq["amd_pstate_mode"], 0o644)
        tree.f(base + "/amd_pstate/prefcore", "enabled")
    if driver == "acpi-cpufreq":
        tree.f(base + "/cpufreq/boost", 1 if freq["boost"] else 0, 0o644)
    idle = cpu["cpuidle"]
    if idle["driver"] != "none":
        tree.f(base + "/cpuidle/current_driver", idle["driver"])
        tree.f(base + "/cpuidle/current_governor", "menu", 0o644)
        tree.f(base + "/cpuidle/current_governor_ro", "menu")
        tree.f(base + "/cpuidle/available_governors", "ladder menu teo")
    cache = cpu["cache_kb"]
    mhz = cpu["mhz"]
    cache_levels = (("index0", 1, "Data", "%dK" % cache["l1d"]), ("index1", 1, "Instruction", "%dK" % cache["l1i"]),
                    ("index2", 2, "Unified", "%dK" % cache["l2"]), ("index3", 3, "Unified", "%dK" % cache["l3"]))
    governors = " ".join(CPUFREQ_GOVERNORS.get(driver, []))
    idle_states = [(index, name) + CPUIDLE_STATES[name] for index, name in enumerate(idle["states"])]
    khz = (mhz["min"] * 1000, mhz["base"] * 1000, mhz["max"] * 1000)
    for cid in range(cpus.count):
        d = "%s/cpu%d" % (base, cid)
        online = cid in cpus.online_set
        if cid:
            tree.f(d + "/online", 1 if online else 0, 0o644)
        tree.link("%s/node%d" % (d, cpus.node[cid]), "sys/devices/system/node/node%d" % cpus.node[cid])
        if online:
            t = d + "/topology"
            # The kernel drops offline CPUs from sibling, package and cache masks (remove_siblinginfo), so on a
            # node booted with nosmt every online CPU reports itself as its only thread.
            sibs = cpus.online_only(cpus.siblings(cid))
            pkg = cpus.online_only(cpus.package_cpus[cpus.socket[cid]])
            tree.f(t + "/physical_package_id", cpus.socket[cid])
            tree.f(t + "/core_id", cpus.core[cid])
            tree.f(t + "/die_id", 0)
            # The classic names only (kernels also show core_cpus/package_cpus/die_cpus aliases): every reader,
            # hwloc included, falls back to these, and a 384-CPU tree stays small enough to build in a second.
            tree.f(t + "/thread_siblings", cpus.mask(sibs))
            tree.f(t + "/thread_siblings_list", _list_cached(cpus, sibs))
            tree.f(t + "/core_siblings", cpus.mask(pkg))
            tree.f(t + "/core_siblings_list", _list_cached(cpus, pkg))
            for index, level, kind, size in cache_levels if cpu["caches"] else ():
                c = "%s/cache/%s" % (d, index)
                shared = sibs if level < 3 else cpus.online_only(cpus.l3_cpus[cpus.l3[cid]])
                tree.f(c + "/level", level)
                tree.f(c + "/type", kind)
                tree.f(c + "/size", size)
                tree.f(c + "/shared_cpu_map", cpus.mask(shared))
                tree.f(c + "/shared_cpu_list", _list_cached(cpus, shared))
        if driver != "none":
            p = "%s/cpufreq/policy%d" % (base, cid)
            if online:
                tree.link(d + "/cpufreq", p)
            tree.f(p + "/affected_cpus", cid)
            tree.f(p + "/related_cpus", cid)
            tree.f(p + "/scaling_driver", driver)
            tree.f(p + "/scaling_available_governors", governors)
            tree.f(p + "/scaling_governor", freq["governor"], 0o644)
            if driver == "acpi-cpufreq":
                tree.f(p + "/cpuinfo_min_freq", khz[0])
                tree.f(p + "/cpuinfo_max_freq", khz[1])
                tree.f(p + "/scaling_min_freq", khz[0], 0o644)
                tree.f(p + "/scaling_max_freq", khz[1], 0o644)
            else:
                low = 400000 if driver == "amd-pstate-epp" else khz[0]
                tree.f(p + "/cpuinfo_min_freq", low)
                tree.f(p + "/cpuinfo_max_freq", khz[2])
                tree.f(p + "/scaling_min_freq", low, 0o644)
                tree.f(p + "/scaling_max_freq", khz[2], 0o644)
                tree.f(p + "/amd_pstate_max_freq", khz[2])
            tree.f(p + "/scaling_cur_freq", khz[0] + (cid * 7919) % (khz[1] - khz[0] + 1))
            if driver == "amd-pstate-epp":
                tree.f(p + "/energy_performance_preference", freq["epp"], 0o644)
                tree.f(p + "/energy_performance_available_preferences", " ".join(EPP_VALUES))
        if idle_states and online:
            for index, name, desc, latency, _residency in idle_states:
                s = "%s/cpuidle/state%d" % (d, index)
                tree.f(s + "/name", name)
                tree.f(s + "/desc", desc)
                tree.f(s + "/latency", latency)
                tree.f(s + "/disable", 0, 0o644)


def _list_cached(cpus: _Cpus, members: List[int]) -> str:
    key = ("list",) + tuple(members)
    text = cpus._mask_cache.get(key)  # type: ignore[arg-type]
    if text is None:
        text = format_cpulist(members)
        cpus._mask_cache[key] = text  # type: ignore[index]
    return text


def _isolation(cmdline: str, count: int) -> Tuple[List[int], List[int]]:
    """isolcpus= and nohz_full= of the command line, as the kernel reports them."""
    isolated: List[int] = []
    nohz: List[int] = []
    for token in cmdline.split():
        key, _sep, value = token.partition("=")
        try:
            if key == "isolcpus":
                parts = value.split(",")
                while parts and re.match(r"^[a-z_]+$", parts[0]):
                    parts.pop(0)
                isolated = [c for c in parse_cpulist(",".join(parts)) if c < count]
            elif key == "nohz_full":
                nohz = [c for c in parse_cpulist(value) if c < count]
        except ParseError:
            continue
    return isolated, nohz


def _emit_nodes(tree: _Tree, m: _Machine) -> None:
    cpus = m.cpus
    base = "sys/devices/system/node"
    nodes = format_cpulist(range(cpus.nodes))
    for name in ("possible", "online", "has_cpu", "has_memory", "has_normal_memory"):
        tree.f("%s/%s" % (base, name), nodes)
    per_node_kb = m.spec["memory_gb"] * 1024 * 1024 // cpus.nodes
    total_kb = per_node_kb * 99 // 100
    for n in range(cpus.nodes):
        d = "%s/node%d" % (base, n)
        members = cpus.node_cpus[n]
        tree.f(d + "/cpulist", format_cpulist(members))
        tree.f(d + "/cpumap", cpus.mask(members))
        tree.f(d + "/distance", " ".join(str(x) for x in cpus.distance[n]))
        free = total_kb * 9 // 10
        lines = [("MemTotal:", total_kb), ("MemFree:", free), ("MemUsed:", total_kb - free),
                 ("Active:", total_kb // 40), ("Inactive:", total_kb // 30), ("FilePages:", total_kb // 25),
                 ("AnonPages:", total_kb // 50), ("Shmem:", total_kb // 2000), ("KernelStack:", 30000),
                 ("PageTables:", 20000), ("Slab:", total_kb // 200), ("AnonHugePages:", total_kb // 100)]
        text = "".join("Node %d %-15s %8d kB\n" % (n, k, v) for k, v in lines)
        text += "Node %d HugePages_Total:     0\nNode %d HugePages_Free:      0\nNode %d HugePages_Surp:      0\n" \
            % (n, n, n)
        tree.raw(d + "/meminfo", text.encode())
        for size in ("2048kB", "1048576kB"):
            h = "%s/hugepages/hugepages-%s" % (d, size)
            tree.f(h + "/nr_hugepages", 0, 0o644)
            tree.f(h + "/free_hugepages", 0)
            tree.f(h + "/surplus_hugepages", 0)
        for cid in members:
            tree.link("%s/cpu%d" % (d, cid), "sys/devices/system/cpu/cpu%d" % cid)


def _config_space(dev: _Pci, acs_control: int = 0) -> bytes:
    """The first 256 bytes of config space: header, bridge bus numbers, PCIe capability with the link."""
    cfg = bytearray(256)
    header = 1 if dev.bridge else 0
    struct.pack_into("<HHHH", cfg, 0, dev.vendor, dev.device, 0x0406 if dev.kind != "root_complex" else 0x0000,
                     0x0010)
    cfg[8] = dev.revision
    cfg[9] = dev.cls & 0xff
    cfg[10] = (dev.cls >> 8) & 0xff
    cfg[11] = (dev.cls >> 16) & 0xff
    cfg[12] = 0x10
    cfg[14] = header | (0x80 if dev.multifunction else 0)
    if dev.bridge:
        cfg[0x18], cfg[0x19], cfg[0x1a] = dev.bridge
    else:
        struct.pack_into("<HH", cfg, 0x2c, dev.subsystem[0], dev.subsystem[1])
    if dev.pcie_type is not None:
        cfg[0x34] = 0x40
        cfg[0x40] = 0x10  # PCI Express capability, last in the list
        struct.pack_into("<H", cfg, 0x42, 0x0002 | (dev.pcie_type << 4))
        link = dev.link or {"gen": 1, "width": 1, "max_gen": 1, "max_width": 1}
        struct.pack_into("<I", cfg, 0x4c, link["max_gen"] | (link["max_width"] << 4) | (3 << 10))
        aspm = dev.aspm or {}
        struct.pack_into("<H", cfg, 0x50, (1 if aspm.get("l0s") else 0) | (2 if aspm.get("l1") else 0))
        struct.pack_into("<H", cfg, 0x52, link["gen"] | (link["width"] << 4))
    if dev.pcie_type in (4, 6):  # root and switch downstream ports carry ACS (health.pcie_acs)
        cfg += _acs_capability(acs_control)
    return bytes(cfg)


ACS_CAP_ID = 0x000D
ACS_CAPABILITY = 0x001d  # what the simulated ports can do: SV, RR, CR, UF (include/uapi/linux/pci_regs.h PCI_ACS_*)
_ACS_STD = 0x01 | 0x04 | 0x08 | 0x10  # pci_std_enable_acs(): SV, RR, CR, UF where capable
_ACS_REDIRECT = 0x04 | 0x08 | 0x20  # RR, CR, EC: what pci=disable_acs_redir= clears


def _acs_capability(control: int = 0) -> bytearray:
    """Extended config space (0x100-0xfff) with the ACS capability first and last: :data:`ACS_CAPABILITY`, and the
    control register the boot left (:func:`_boot_acs_control`)."""
    ext = bytearray(4096 - 256)
    struct.pack_into("<I", ext, 0, ACS_CAP_ID | (1 << 16))  # id, version 1, next 0
    struct.pack_into("<HH", ext, 4, ACS_CAPABILITY, control)  # capability, control
    return ext


def _boot_acs_control(m: "_Machine", dev: _Pci) -> int:
    """A port's ACS control after boot, as drivers/pci/pci.c pci_enable_acs() leaves it: the firmware's (0 here),
    plus SV/RR/CR/UF when an IOMMU driver asked for ACS (pci_std_enable_acs(); the AMD IOMMU driver asks whenever
    the firmware's IVRS table is there: drivers/iommu/amd/init.c detect_ivrs() -> pci_request_acs()), minus RR/CR/EC
    on the devices ``pci=disable_acs_redir=`` names, which the kernel applies with or without an IOMMU. The fault
    ``pcie_acs`` is the end state whatever its cause (firmware, a boot script, a kernel without the parameter):
    every capability on."""
    if dev.pcie_type not in (4, 6):
        return 0
    if m.spec["faults"]["pcie_acs"]:
        return ACS_CAPABILITY
    control = ACS_CAPABILITY & _ACS_STD if m.spec["iommu"] else 0
    if any(_pci_dev_matches(dev, spec) for spec in _acs_redir_devices(m.spec["kernel"]["cmdline"])):
        control &= ~_ACS_REDIRECT
    return control


def _acs_redir_devices(cmdline: str) -> List[str]:
    """The device list of the last ``pci=...,disable_acs_redir=<dev>[;<dev>...]`` (drivers/pci/pci.c pci_setup():
    options are ','-separated, a later one replaces an earlier one)."""
    found: List[str] = []
    for word in cmdline.split():
        if word.startswith("pci="):
            for option in word[4:].split(","):
                if option.startswith("disable_acs_redir="):
                    found = [d for d in option[len("disable_acs_redir="):].split(";") if d]
    return found


def _pci_dev_matches(dev: _Pci, spec: str) -> bool:
    """drivers/pci/pci.c pci_dev_str_match(): ``pci:<vendor>:<device>[:<subvendor>:<subdevice>]`` (hex, 0 matches
    any subsystem id) or a path ``[<domain>:]<bus>:<dev>.<fn>[/<dev>.<fn>]*`` from the root bus down."""
    if spec.startswith("pci:"):
        try:
            ids = [int(part, 16) for part in spec[4:].split(":")]
        except ValueError:
            return False
        if len(ids) not in (2, 4) or (ids[0], ids[1]) != (dev.vendor, dev.device):
            return False
        return len(ids) == 2 or all(want in (0, have) for want, have in zip(ids[2:], dev.subsystem))
    chain = [part for part in dev.path.split("/") if re.match(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", part)]
    steps = spec.lower().split("/")
    if len(steps) != len(chain):
        return False
    first = steps[0] if steps[0].count(":") == 2 else "0000:" + steps[0]
    return first == chain[0] and all(step == bdf.split(":")[2] for step, bdf in zip(steps[1:], chain[1:]))


def _speed_text(m: _Machine, gen: int) -> str:
    gts = _GTS_BY_GEN[gen]
    if m.version < (5, 7):
        return "%g GT/s" % gts
    return "%.1f GT/s PCIe" % gts


def _emit_pci(tree: _Tree, m: _Machine) -> None:
    cpus = m.cpus
    everyone = list(range(cpus.count))
    groups = {}
    ordered = sorted(m.pci.values(), key=lambda d: d.bdf)
    for group_id, dev in enumerate(ordered):
        groups[dev.bdf] = group_id
    iommus = dict((rc[0], index) for index, rc in enumerate(m.root_complexes))
    span = _root_complex_layout(m.spec)[1]
    for bus, node in m.root_complexes:
        host = "sys/devices/pci0000:%02x" % bus
        tree.f(host + "/uevent", "")
        tree.f(host + "/pci_bus/0000:%02x/cpuaffinity" % bus, cpus.mask(cpus.node_cpus[node]))
        tree.f(host + "/pci_bus/0000:%02x/cpulistaffinity" % bus, format_cpulist(cpus.node_cpus[node]))
    for dev in ordered:
        p = dev.path
        local = cpus.node_cpus[dev.node] if dev.node >= 0 else everyone
        tree.f(p + "/vendor", "0x%04x" % dev.vendor)
        tree.f(p + "/device", "0x%04x" % dev.device)
        tree.f(p + "/subsystem_vendor", "0x%04x" % dev.subsystem[0])
        tree.f(p + "/subsystem_device", "0x%04x" % dev.subsystem[1])
        tree.f(p + "/class", "0x%06x" % dev.cls)
        tree.f(p + "/revision", "0x%02x" % dev.revision)
        tree.raw(p + "/config", _config_space(dev, _boot_acs_control(m, dev)), 0o644)
        tree.f(p + "/numa_node", dev.node, 0o644)
        tree.f(p + "/local_cpus", cpus.mask(local))
        tree.f(p + "/local_cpulist", _list_cached(cpus, local))
        tree.f(p + "/irq", dev.msi[0] if dev.msi and dev.msi_kind == "msi" else 0)
        tree.f(p + "/enable", 1, 0o644)
        tree.f(p + "/msi_bus", 1, 0o644)
        tree.f(p + "/modalias", "pci:v%08Xd%08Xsv%08Xsd%08Xbc%02Xsc%02Xi%02X" % (
            dev.vendor, dev.device, dev.subsystem[0], dev.subsystem[1], dev.cls >> 16, (dev.cls >> 8) & 0xff,
            dev.cls & 0xff))
        uevent = ["PCI_CLASS=%X" % dev.cls, "PCI_ID=%04X:%04X" % (dev.vendor, dev.device),
                  "PCI_SUBSYS_ID=%04X:%04X" % dev.subsystem, "PCI_SLOT_NAME=%s" % dev.bdf]
        if dev.driver:
            uevent.insert(0, "DRIVER=%s" % dev.driver)
            tree.link(p + "/driver", "sys/bus/pci/drivers/%s" % dev.driver)
            tree.link("sys/bus/pci/drivers/%s/%s" % (dev.driver, dev.bdf), p)
        tree.f(p + "/uevent", "\n".join(uevent))
        tree.link(p + "/subsystem", "sys/bus/pci")
        tree.link("sys/bus/pci/devices/%s" % dev.bdf, p)
        resource = []
        lines = 17 if dev.bridge else 13
        for index in range(lines):
            start, end, flags = dev.bars[index] if index < len(dev.bars) else (0, 0, 0)
            resource.append("0x%016x 0x%016x 0x%016x" % (start, end, flags))
        tree.f(p + "/resource", "\n".join(resource))
        if dev.bridge:
            tree.f(p + "/secondary_bus_number", dev.bridge[1])
            tree.f(p + "/subordinate_bus_number", dev.bridge[2])
        if dev.link is not None and dev.kind not in ("root_complex", "iommu", "dummy"):
            tree.f(p + "/current_link_speed", _speed_text(m, dev.link["gen"]))
            tree.f(p + "/current_link_width", dev.link["width"])
            tree.f(p + "/max_link_speed", _speed_text(m, dev.link["max_gen"]))
            tree.f(p + "/max_link_width", dev.link["max_width"])
        if dev.aspm is not None:
            tree.f(p + "/link/l0s_aspm", 1 if dev.aspm["l0s"] else 0, 0o644)
            tree.f(p + "/link/l1_aspm", 1 if dev.aspm["l1"] else 0, 0o644)
            tree.f(p + "/link/clkpm", 0, 0o644)
        for irq in dev.msi:
            tree.f("%s/msi_irqs/%d" % (p, irq), dev.msi_kind)
        if m.spec["iommu"]:
            group = groups[dev.bdf]
            g = "sys/kernel/iommu_groups/%d" % group
            tree.link("%s/devices/%s" % (g, dev.bdf), p)
            tree.f(g + "/type", "identity" if "iommu=pt" in m.spec["kernel"]["cmdline"].split() else "DMA-FQ",
                   0o644)
            tree.f(g + "/reserved_regions", "0x00000000fee00000 0x00000000feefffff msi")
            tree.link(p + "/iommu_group", g)
            rc_bus = (_bus(dev.bdf) // span) * span
            ivhd = "ivhd%d" % iommus[rc_bus]
            iommu_dev = "sys/devices/pci0000:%02x/0000:%02x:00.2" % (rc_bus, rc_bus)
            if dev.kind == "iommu":
                tree.f("%s/iommu/%s/amd-iommu/cap" % (p, ivhd), "0x00190064")
                tree.f("%s/iommu/%s/amd-iommu/features" % (p, ivhd), "25bf732fa2295afe:53d")
                tree.link("sys/class/iommu/%s" % ivhd, "%s/iommu/%s" % (p, ivhd))
            else:
                tree.link(p + "/iommu", "%s/iommu/%s" % (iommu_dev, ivhd))
    if m.vga:
        vga = m.vga[0]
        tree.f(vga.path + "/boot_vga", 1)
        _emit_drm_card(tree, vga.path, 0, None)


def _emit_drm_card(tree: _Tree, path: str, card: int, render: Optional[int]) -> None:
    c = "%s/drm/card%d" % (path, card)
    tree.f(c + "/dev", "226:%d" % card)
    tree.f(c + "/uevent", "MAJOR=226\nMINOR=%d\nDEVNAME=dri/card%d\nDEVTYPE=drm_minor" % (card, card))
    tree.link(c + "/device", path)
    tree.link(c + "/subsystem", "sys/class/drm")
    tree.link("sys/class/drm/card%d" % card, c)
    if render is not None:
        r = "%s/drm/renderD%d" % (path, render)
        tree.f(r + "/dev", "226:%d" % render)
        tree.f(r + "/uevent", "MAJOR=226\nMINOR=%d\nDEVNAME=dri/renderD%d\nDEVTYPE=drm_minor" % (render, render))
        tree.link(r + "/device", path)
        tree.link(r + "/subsystem", "sys/class/drm")
        tree.link("sys/class/drm/renderD%d" % render, r)


def _stable(text: str, bits: int = 32) -> int:
    """A deterministic number from a name (ids, GUIDs, serials): rebuilds are byte-identical."""
    value = zlib.crc32(text.encode())
    if bits > 32:
        value = (value << 32) | zlib.crc32((text + "#").encode())
    return value & ((1 << bits) - 1)


def _emit_gpus(tree: _Tree, m: _Machine) -> None:
    if not m.gpus:
        return
    cpus = m.cpus
    spec = m.spec
    tree.f("sys/class/drm/version", "drm 1.1.0 20060810")
    kfd = "sys/devices/virtual/kfd/kfd/topology"
    tree.link("sys/class/kfd/kfd", "sys/devices/virtual/kfd/kfd")
    tree.f("sys/devices/virtual/kfd/kfd/dev", "235:0")
    tree.dir("sys/devices/virtual/kfd/kfd/proc")  # one <pid>/ per process that opened /dev/kfd (start_kfd_process)
    tree.f(kfd + "/generation_id", 1)
    tree.f(kfd + "/system_properties", "platform_oem %d\nplatform_id %d\nplatform_rev 2"
           % (_stable(spec["platform"]["vendor"], 62), _stable(spec["platform"]["product"], 46)))
    hive = _stable(spec["hostname"] + "/xgmi-hive", 63) or 1
    # One KFD node and one DRM device per partition (XCP) of a partitioned MI300: partition 0 is the PCI device's own,
    # the others amdgpu_xcp.<n> platform devices (amdxcp/amdgpu_xcp_drv.c), all created at probe, so their minors
    # follow probe order; KFD ORs the partition into location_id and gives each node its own drm_render_minor
    # (kfd_topology.c; "drm/amdkfd: Store drm node minor number for kfd nodes").
    parts = dict((gpu.bdf, partition_count(spec, gpu.spec["model"])) for gpu in m.gpus)
    gpu_nodes: Dict[str, List[int]] = {}
    minors: Dict[Tuple[str, int], Tuple[int, int]] = {}  # (bdf, partition) -> (card, render)
    next_node, next_card, next_render = m.kfd_first_gpu, (min(m.card[g.bdf] for g in m.gpus)), 128
    for gpu in m.gpus:
        gpu_nodes[gpu.bdf] = list(range(next_node, next_node + parts[gpu.bdf]))
        next_node += parts[gpu.bdf]
        for partition in range(parts[gpu.bdf]):
            minors[(gpu.bdf, partition)] = (next_card, next_render)
            next_card, next_render = next_card + 1, next_render + 1
    gpu_ids = {}  # partition 0 keeps the id an unpartitioned GPU has
    for gpu in m.gpus:
        for partition in range(parts[gpu.bdf]):
            name = spec["hostname"] + gpu.bdf + ("/%d" % partition if partition else "")
            gpu_ids[(gpu.bdf, partition)] = _stable(name, 16) | 0x1000
    xcp_index = 0
    links_of: Dict[int, List[Dict[str, int]]] = {}
    for n in range(cpus.nodes):
        links_of[n] = [{"type": 1, "to": other, "weight": cpus.distance[n][other]} for other in range(cpus.nodes)
                       if other != n]
    for index, gpu in enumerate(m.gpus):
        model = GPU_MODELS[gpu.spec["model"]]
        count = parts[gpu.bdf]
        cpu_node = gpu.node if gpu.node >= 0 else 0
        bus, slot, fn = int(gpu.bdf[5:7], 16), int(gpu.bdf[8:10], 16), int(gpu.bdf[11])
        for partition, node in enumerate(gpu_nodes[gpu.bdf]):
            links = [{"type": 2, "to": cpu_node, "weight": 20}]
            links_of[cpu_node].append({"type": 2, "to": node, "weight": 20})
            for other in m.gpus:
                same_package = (gpu.spec["package"] is not None and gpu.spec["package"] >= 0
                                and gpu.spec["package"] == other.spec["package"])
                for peer in gpu_nodes[other.bdf]:
                    if peer != node:
                        links.append({"type": 11, "to": peer, "weight": 15 if other is gpu or same_package or
                                      model["gcds_per_package"] == 1 else 30})
            links_of[node] = links
            card, render = minors[(gpu.bdf, partition)]
            props = [
                ("cpu_cores_count", 0), ("simd_count", model["simd_count"] // count), ("mem_banks_count", 1),
                ("caches_count", 0), ("io_links_count", len(links)), ("p2p_links_count", len(links) - 1),
                ("cpu_core_id_base", 0), ("simd_id_base", 2147487744 + (node - m.kfd_first_gpu) * 0x100),
                ("max_waves_per_simd", 8), ("lds_size_in_kb", 64), ("gds_size_in_kb", 0), ("num_gws", 64),
                ("wave_front_size", 64), ("array_count", model["array_count"] // count),
                ("simd_arrays_per_engine", 1), ("cu_per_simd_array", model["cu_per_simd_array"]), ("simd_per_cu", 4),
                ("max_slots_scratch_cu", 32), ("gfx_target_version", model["gfx_target_version"]),
                ("vendor_id", 4098), ("device_id", gpu.device),
                ("location_id", (bus << 8) | (slot << 3) | fn | (partition if count > 1 else 0)), ("domain", 0),
                ("drm_render_minor", render), ("hive_id", hive), ("num_sdma_engines", 2),
                ("num_sdma_xgmi_engines", 6), ("num_sdma_queues_per_engine", 8), ("num_cp_queues", 24),
                ("max_engine_clk_fcompute", model["fcompute_mhz"]), ("local_mem_size", model["vram_gib"] << 30),
                ("fw_version", 177), ("capability", 2893521536), ("debug_prop", 1511), ("sdma_fw_version", 24),
                ("unique_id", _stable(spec["hostname"] + "/uid/" + gpu.bdf, 64)),
                ("num_xcc", model["num_xcc"] // count), ("max_engine_clk_ccompute", spec["cpu"]["mhz"]["max"]),
            ]
            _emit_kfd_node(tree, kfd, node, props, links, model["gfx"], gpu_ids[(gpu.bdf, partition)])
            if partition == 0:
                _emit_drm_card(tree, gpu.path, card, render)
            else:
                xcp = "sys/devices/platform/amdgpu_xcp.%d" % xcp_index
                xcp_index += 1
                tree.f(xcp + "/uevent", "DRIVER=amdgpu_xcp_drv\nMODALIAS=platform:amdgpu_xcp")
                _emit_drm_card(tree, xcp, card, render)
        p = gpu.path
        tree.f(p + "/product_name", model["product"])
        tree.f(p + "/serial_number", "%016X" % _stable(spec["hostname"] + "/sn/" + gpu.bdf, 64))
        tree.f(p + "/unique_id", "%016x" % _stable(spec["hostname"] + "/uid/" + gpu.bdf, 64))
        tree.f(p + "/vbios_version", "113-D65209-073" if gpu.spec["model"] == "MI250" else "113-M3000100-102")
        tree.f(p + "/mem_info_vram_total", model["vram_gib"] << 30)
        tree.f(p + "/mem_info_vram_used", 12 << 20)
        tree.f(p + "/gpu_busy_percent", 0)
        tree.f(p + "/power_dpm_force_performance_level", spec["faults"]["gpu_perf_level"], 0o644)
        _emit_gpu_clocks(tree, p, model)
        link_down = spec["faults"]["xgmi_link_down"] and gpu in m.gpus[:2] and len(m.gpus) > 1
        mi300 = gpu.spec["model"].startswith(("MI300", "MI325"))
        for block in ("umc", "gfx", "xgmi_wafl"):  # amdgpu RAS error counters
            ue = spec["faults"]["gpu_ras_uncorrectable"] if block == "umc" and index == 0 else 0
            if block == "xgmi_wafl" and link_down and not mi300:
                ue = 1  # PCS errors count as uncorrectable (amdgpu_xgmi.c, amdgpu_xgmi_query_pcs_error_status)
            tree.f(p + "/ras/%s_err_count" % block, "ue: %d\nce: 0" % ue)
        temp_c, power_w = gpu.spec["temp_c"], gpu.spec["power_w"]
        if mi300:
            # one xGMI port per hive peer, the rest not connected (0xFFFF); the simulation's port order
            peers = [other for other in m.gpus if other is not gpu][:simmetrics.NUM_XGMI_LINKS]
            down = set(m.gpus[:2]) if link_down else set()
            status = [simmetrics.XGMI_LINK_INACTIVE if {gpu, other} <= down else simmetrics.XGMI_LINK_ACTIVE
                      for other in peers]
            status += [simmetrics.NOT_FILLED] * (simmetrics.NUM_XGMI_LINKS - len(status))
            tree.raw(p + "/gpu_metrics", simmetrics.mi300x_table(temp_c + 4, temp_c + 2, power_w, status))
        else:
            tree.raw(p + "/gpu_metrics", simmetrics.mi250_table(temp_c, temp_c + 4, temp_c + 2, power_w))
        if gpu.spec["model"].startswith(("MI300", "MI325")):  # amdgpu's partition modes (issue 15's inventory)
            tree.f(p + "/current_compute_partition", spec["faults"]["compute_partition"], 0o644)
            tree.f(p + "/current_memory_partition", spec["faults"]["memory_partition"], 0o644)
            tree.f(p + "/available_memory_partition", ", ".join(MEMORY_PARTITIONS))
            tree.f(p + "/available_compute_partition",
                   ", ".join(compute_partitions(spec["faults"]["memory_partition"], model["num_xcc"])))
        h = "%s/hwmon/hwmon%d" % (p, index)  # one hwmon per GPU, in probe order
        tree.f(h + "/name", "amdgpu")
        # amdgpu's per-sensor limits (Documentation/gpu/amdgpu/thermal.rst: tempN_crit, tempN_emergency); the
        # values are the simulation's, of the right kind, not a vendor's table. MI300X (GC 9.4.3) never shows the
        # edge sensor, and its limit files only from Linux 6.7 (commits df7a2808528f, 9cff0879aefe; amdgpu_pm.c,
        # hwmon_attributes_visible): hwmon_limits false is an older driver
        sensors = [(2, "junction", temp_c + 4, (105, 110)), (3, "mem", temp_c + 2, (95, 100))]
        if not mi300:
            sensors.insert(0, (1, "edge", temp_c, (100, 105)))
        for sensor, label, value, limits in sensors:
            tree.f("%s/temp%d_input" % (h, sensor), value * 1000)
            tree.f("%s/temp%d_label" % (h, sensor), label)
            if not mi300 or gpu.spec["hwmon_limits"]:
                tree.f("%s/temp%d_crit" % (h, sensor), limits[0] * 1000)
                tree.f("%s/temp%d_emergency" % (h, sensor), limits[1] * 1000)
        tree.f(h + "/power1_average", gpu.spec["power_w"] * 1000000)
        cap_w = spec["faults"]["gpu_power_cap_w"] if index == 0 else None
        tree.f(h + "/power1_cap", (cap_w or model["power_cap_w"]) * 1000000, 0o644)
        tree.f(h + "/power1_cap_max", model["power_cap_w"] * 1000000)
        tree.f(h + "/power1_cap_min", 0)  # smu_v13_0_6_get_power_limit, aldebaran: no lower limit
        tree.link(h + "/device", p)
        tree.link(h + "/subsystem", "sys/class/hwmon")
        tree.link("sys/class/hwmon/hwmon%d" % index, h)
    for n in range(cpus.nodes):
        members = cpus.node_cpus[n]
        props = [
            ("cpu_cores_count", len(set((cpus.socket[c], cpus.core[c]) for c in members))), ("simd_count", 0),
            ("mem_banks_count", 1), ("caches_count", 0), ("io_links_count", len(links_of[n])),
            ("p2p_links_count", 0), ("cpu_core_id_base", members[0] if members else 0), ("simd_id_base", 0),
            ("max_waves_per_simd", 0), ("lds_size_in_kb", 0), ("gds_size_in_kb", 0), ("num_gws", 0),
            ("wave_front_size", 0), ("array_count", 0), ("simd_arrays_per_engine", 0), ("cu_per_simd_array", 0),
            ("simd_per_cu", 0), ("max_slots_scratch_cu", 0), ("gfx_target_version", 0), ("vendor_id", 0),
            ("device_id", 0), ("location_id", 0), ("domain", 0), ("drm_render_minor", 0), ("hive_id", 0),
            ("num_sdma_engines", 0), ("num_sdma_xgmi_engines", 0), ("num_sdma_queues_per_engine", 0),
            ("num_cp_queues", 0), ("max_engine_clk_ccompute", spec["cpu"]["mhz"]["max"]),
        ]
        _emit_kfd_node(tree, kfd, n, props, links_of[n], "", 0)


# amdgpu's GFX clock files. The simulation's DPM table runs from GFX_MIN_MHZ to the model's peak engine clock;
# pp_od_clk_voltage as Linux 6.x's emit_clk_levels prints it for SMU 13.0.6 and aldebaran: OD_SCLK (the current soft
# minimum and maximum) and OD_MCLK, no OD_RANGE. simkernel keeps them when the level and OD commands are written.
GFX_MIN_MHZ = 500
MEMORY_PARTITIONS = ("NPS1", "NPS4")  # MI300X's supported_nps_modes (available_memory_partition)


def _emit_gpu_clocks(tree: _Tree, path: str, model: Dict[str, Any]) -> None:
    tree.f(path + "/pp_dpm_sclk", "0: %dMhz \n1: %dMhz *" % (GFX_MIN_MHZ, model["fcompute_mhz"]))
    tree.raw(path + "/pp_od_clk_voltage", od_clk_text(GFX_MIN_MHZ, model["fcompute_mhz"]).encode(), 0o644)


# partitions (XCPs) of each compute partition mode; CPX: one per XCC (aqua_vanjaram.c, __aqua_vanjaram_get_num_xcp)
PARTITIONS = {"SPX": 1, "DPX": 2, "TPX": 3, "QPX": 4}


def partition_count(spec: Dict[str, Any], model_name: str) -> int:
    """How many partitions amdgpu makes of a GPU of ``model_name`` in the spec's compute partition mode (1 for GPUs
    without partitions: MI250's GCDs are PCI functions of their own)."""
    if not model_name.startswith(("MI300", "MI325")):
        return 1
    mode = spec["faults"]["compute_partition"]
    return GPU_MODELS[model_name]["num_xcc"] if mode == "CPX" else PARTITIONS.get(mode, 1)


def compute_partitions(memory_partition: str, num_xcc: int) -> List[str]:
    """The compute partitions amdgpu offers in a memory partition (aqua_vanjaram.c, __aqua_vanjaram_is_valid_mode:
    SPX in NPS1 only, DPX with at most two memory partitions, QPX with two XCCs or more per partition, CPX where
    the XCCs divide evenly among the memory partitions)."""
    parts = int(memory_partition[3:]) if memory_partition[3:].isdigit() else 1
    valid = {"SPX": parts == 1, "DPX": parts <= 2 and num_xcc % 4 == 0,
             "TPX": parts in (1, 3) and num_xcc % 3 == 0, "QPX": parts in (1, 4) and num_xcc // 4 >= 2,
             "CPX": num_xcc > 1 and parts in (1, 4) and num_xcc % parts == 0}
    return [mode for mode in ("SPX", "DPX", "TPX", "QPX", "CPX") if valid[mode]]


def _emit_kfd_node(tree: _Tree, kfd: str, node: int, props: List[Tuple[str, int]], links: List[Dict[str, int]],
                   name: str, gpu_id: int) -> None:
    d = "%s/nodes/%d" % (kfd, node)
    tree.raw(d + "/properties", "".join("%s %d\n" % kv for kv in props).encode())
    tree.f(d + "/name", name)
    tree.f(d + "/gpu_id", gpu_id)
    for index, link in enumerate(links):
        bandwidth = 64000 if link["type"] == 2 else (50000 if link["type"] == 11 else 0)
        text = ("type %d\nversion_major 0\nversion_minor 0\nnode_from %d\nnode_to %d\nweight %d\nmin_latency 0\n"
                "max_latency 0\nmin_bandwidth %d\nmax_bandwidth %d\nrecommended_transfer_size 0\n"
                "recommended_sdma_engine_id_mask 3\nflags 1\n"
                % (link["type"], node, link["to"], link["weight"], bandwidth if link["type"] == 11 else 0,
                   bandwidth))
        tree.raw("%s/io_links/%d/properties" % (d, index), text.encode())


def _guid(seed: str) -> str:
    value = _stable(seed, 64)
    value = (0x0c42a103 << 32) | (value & 0xffffffff)  # Mellanox OUI 0c:42:a1
    text = "%016x" % value
    return ":".join(text[i:i + 4] for i in range(0, 16, 4))


def _emit_nics(tree: _Tree, m: _Machine) -> None:
    spec = m.spec
    tree.f("sys/devices/virtual/net/lo/mtu", 65536, 0o644)
    tree.f("sys/devices/virtual/net/lo/type", 772)
    tree.f("sys/devices/virtual/net/lo/operstate", "unknown")
    tree.f("sys/devices/virtual/net/lo/ifindex", 1)
    tree.f("sys/devices/virtual/net/lo/address", "00:00:00:00:00:00")
    tree.link("sys/class/net/lo", "sys/devices/virtual/net/lo")
    ifindex = 2
    for nic in sorted(m.nics, key=lambda d: (NIC_MODELS[d.spec["model"]]["kind"] != "ether", d.bdf)):
        cfg = nic.spec
        name = cfg["name"]
        n = "%s/net/%s" % (nic.path, name)
        tree.f(n + "/ifindex", ifindex)
        tree.f(n + "/iflink", ifindex)
        tree.f(n + "/mtu", cfg["mtu"], 0o644)
        tree.f(n + "/tx_queue_len", 1000 if NIC_MODELS[cfg["model"]]["kind"] == "ether" else 256, 0o644)
        tree.f(n + "/carrier", 1 if cfg["state"] in ("ACTIVE", "up") else 0)
        tree.f(n + "/operstate", "up" if cfg["state"] in ("ACTIVE", "up") else "down")
        tree.f(n + "/dev_id", "0x0")
        tree.f(n + "/dev_port", 0)
        tree.f(n + "/uevent", "INTERFACE=%s\nIFINDEX=%d" % (name, ifindex))
        tree.link(n + "/device", nic.path)
        tree.link(n + "/subsystem", "sys/class/net")
        tree.link("sys/class/net/%s" % name, n)
        if NIC_MODELS[cfg["model"]]["kind"] == "ib":
            guid = _guid(spec["hostname"] + nic.bdf)
            port_guid = guid.replace(":", "")
            address = "00:00:10:29:fe:80:00:00:00:00:00:00:" + ":".join(port_guid[i:i + 2] for i in range(0, 16, 2))
            tree.f(n + "/type", 32)
            tree.f(n + "/mode", cfg["mode"], 0o644)
            tree.f(n + "/addr_len", 20)
            tree.f(n + "/address", address)
            tree.f(n + "/broadcast", "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff")
            tree.f(n + "/pkey", "0xffff")
            tree.f(n + "/umcast", 0, 0o644)
            rate = re.match(r"^(\d+)", cfg["rate"])
            tree.f(n + "/speed", int(rate.group(1)) * 1000 if rate and cfg["state"] == "ACTIVE" else -1)
            hca = m.ib_name[nic.bdf]
            i = "%s/infiniband/%s" % (nic.path, hca)
            model = NIC_MODELS[cfg["model"]]
            tree.f(i + "/node_guid", guid)
            tree.f(i + "/sys_image_guid", guid)
            tree.f(i + "/fw_ver", model["fw_ver"])
            tree.f(i + "/hca_type", model["hca_type"])
            tree.f(i + "/board_id", model["board_id"])
            tree.f(i + "/hw_rev", "0x0")
            tree.f(i + "/node_type", "1: CA")
            tree.f(i + "/node_desc", "%s %s" % (spec["hostname"], hca), 0o644)
            tree.link(i + "/device", nic.path)
            tree.link(i + "/subsystem", "sys/class/infiniband")
            tree.link("sys/class/infiniband/%s" % hca, i)
            port = i + "/ports/1"
            states = {"ACTIVE": ("4: ACTIVE", "5: LinkUp"), "DOWN": ("1: DOWN", "3: Disabled"),
                      "INIT": ("2: INIT", "5: LinkUp"), "ARMED": ("3: ARMED", "5: LinkUp")}
            tree.f(port + "/state", states[cfg["state"]][0])
            tree.f(port + "/phys_state", states[cfg["state"]][1])
            tree.f(port + "/rate", cfg["rate"])
            tree.f(port + "/link_layer", "InfiniBand")
            tree.f(port + "/lid", "0x%x" % (0x10 + m.ib_nics.index(nic)))
            tree.f(port + "/sm_lid", "0x1")
            tree.f(port + "/sm_sl", 0)
            for counter in IB_ERROR_COUNTERS:  # healthy: no errors since the counters were cleared
                errors = spec["faults"]["ib_symbol_errors"] if counter == "symbol_error" and nic is m.ib_nics[0] else 0
                tree.f(port + "/counters/" + counter, errors)
            tree.f(port + "/lid_mask_count", 0)
            tree.f(port + "/cap_mask", "0xa651e848")
            tree.f(port + "/gids/0", "fe80:0000:0000:0000:" + guid)
            tree.f(port + "/pkeys/0", "0xffff")
            tree.f("%s/infiniband_verbs/uverbs%d/ibdev" % (nic.path, m.ib_nics.index(nic)), hca)
        else:
            mac = "3c:ec:ef:%02x:%02x:%02x" % tuple(_stable(spec["hostname"] + nic.bdf).to_bytes(4, "big")[1:])
            tree.f(n + "/type", 1)
            tree.f(n + "/addr_len", 6)
            tree.f(n + "/address", mac)
            tree.f(n + "/broadcast", "ff:ff:ff:ff:ff:ff")
            tree.f(n + "/speed", NIC_MODELS[cfg["model"]]["speed_mbps"] if cfg["state"] == "up" else -1)
            tree.f(n + "/duplex", "full")
        ifindex += 1


def _emit_nvme(tree: _Tree, m: _Machine) -> None:
    spec = m.spec
    for index, dev in enumerate(m.nvmes):
        cfg = dev.spec
        model = NVME_MODELS[cfg["model"]]
        name = m.nvme_name[dev.bdf]
        queues = m.nvme_queues(dev)
        c = "%s/nvme/%s" % (dev.path, name)
        tree.f(c + "/model", "%-40s" % model["model"])
        tree.f(c + "/serial", "%-20s" % ("S%dNE0%07X" % (index, _stable(spec["hostname"] + dev.bdf, 28))))
        tree.f(c + "/firmware_rev", "%-8s" % model["firmware"])
        tree.f(c + "/transport", "pcie")
        tree.f(c + "/address", dev.bdf)
        tree.f(c + "/state", "live")
        tree.f(c + "/cntlid", 0)
        tree.f(c + "/numa_node", dev.node)
        tree.f(c + "/queue_count", queues["total"] + 1)
        tree.f(c + "/sqsize", queues["tags"])
        tree.f(c + "/dev", "240:%d" % index)
        nqn = "nqn.2014.08.org.nvmexpress:%04x%04x%s" % (
            model["vendor"], model["subsystem"], model["model"].replace(" ", ""))
        tree.f(c + "/subsysnqn", nqn)
        tree.link(c + "/device", dev.path)
        tree.link(c + "/subsystem", "sys/class/nvme")
        tree.link("sys/class/nvme/%s" % name, c)
        disk = "%sn1" % name
        b = "%s/%s" % (c, disk)
        sectors = cfg["size_gb"] * 1000000000 // 512
        tree.f(b + "/dev", "259:%d" % index)
        tree.f(b + "/size", sectors)
        tree.f(b + "/ro", 0)
        tree.f(b + "/removable", 0)
        tree.f(b + "/range", 0)
        tree.f(b + "/uevent", "MAJOR=259\nMINOR=%d\nDEVNAME=%s\nDEVTYPE=disk\nDISKSEQ=%d" % (index, disk, index + 1))
        tree.link(b + "/device", c)
        tree.link(b + "/subsystem", "sys/class/block")
        q = b + "/queue"
        tree.f(q + "/scheduler", "[none] mq-deadline kyber bfq", 0o644)
        tree.f(q + "/nr_requests", queues["tags"], 0o644)
        tree.f(q + "/rotational", 0, 0o644)
        tree.f(q + "/read_ahead_kb", 128, 0o644)
        tree.f(q + "/max_hw_sectors_kb", model["max_hw_sectors_kb"])
        tree.f(q + "/max_sectors_kb", model["max_hw_sectors_kb"], 0o644)
        tree.f(q + "/logical_block_size", 512)
        tree.f(q + "/physical_block_size", 512)
        tree.f(q + "/hw_sector_size", 512)
        tree.f(q + "/nomerges", 0, 0o644)
        tree.f(q + "/rq_affinity", 1, 0o644)
        tree.f(q + "/add_random", 0, 0o644)
        tree.f(q + "/iostats", 1, 0o644)
        tree.f(q + "/io_poll", 1 if queues["poll"] else 0, 0o644)
        tree.f(q + "/write_cache", "write back", 0o644)
        tree.f(q + "/wbt_lat_usec", 2000, 0o644)
        for hctx, mask in enumerate(dev.queue_masks):  # type: ignore[attr-defined]
            h = "%s/mq/%d" % (b, hctx)
            tree.f(h + "/cpu_list", ", ".join(str(c) for c in mask))
            tree.f(h + "/nr_tags", queues["tags"])
            tree.f(h + "/nr_reserved_tags", 0)
        tree.link("sys/block/%s" % disk, b)
        tree.link("sys/class/block/%s" % disk, b)


def _interrupts_row(prec: int, number: int, counts: str, chip: str, hwirq: str, flow: str, name: str) -> str:
    """One IRQ's row of /proc/interrupts (kernel/irq/proc.c, show_interrupts())."""
    return "%*d: %s %8s %*s-%-8s  %s" % (prec, number, counts, chip, prec, hwirq, flow, name)


def _emit_irqs(tree: _Tree, m: _Machine) -> None:
    cpus = m.cpus
    managed_mode = 0o444 if m.version >= (6, 12) else 0o644
    everyone = list(range(cpus.count))
    tree.f("proc/irq/default_smp_affinity", cpus.mask(everyone), 0o644)
    for irq in m.irqs:
        d = "proc/irq/%d" % irq.number
        mode = managed_mode if irq.managed else 0o644
        tree.f(d + "/smp_affinity", cpus.mask(irq.affinity), mode)
        tree.f(d + "/smp_affinity_list", _list_cached(cpus, irq.affinity), mode)
        tree.f(d + "/effective_affinity", cpus.mask([irq.effective]))
        tree.f(d + "/effective_affinity_list", irq.effective)
        tree.f(d + "/node", irq.node if irq.node >= 0 else 0)
        if irq.name and "/" not in irq.name:  # register_handler_proc(): one directory per named action
            tree.dir(d + "/" + irq.name)
    # /proc/interrupts: one column per online CPU; the count lands on the effective CPU.
    online = cpus.online
    column = dict((cpu, index) for index, cpu in enumerate(online))
    # show_interrupts(): the number column is as wide as nr_irqs needs (x86 sizes it by CPU count).
    nr_irqs = max([irq.number + 1 for irq in m.irqs] + [256 + 8 * cpus.count])
    prec, limit = 3, 1000
    while prec < 10 and limit <= nr_irqs:
        prec += 1
        limit *= 10
    zero = "%10d " % 0
    lines = [" " * (prec + 8) + "".join("CPU%-8d" % c for c in online)]
    for irq in sorted(m.irqs, key=lambda i: i.number):
        where = column.get(irq.effective, 0)
        counts = zero * where + "%10d " % irq.count + zero * (len(online) - where - 1)
        lines.append(_interrupts_row(prec, irq.number, counts, irq.chip, irq.hwirq, irq.flow, irq.name))
    arch = [("NMI", "Non-maskable interrupts", 1), ("LOC", "Local timer interrupts", 1000),
            ("SPU", "Spurious interrupts", 0), ("PMI", "Performance monitoring interrupts", 1),
            ("IWI", "IRQ work interrupts", 0), ("RTR", "APIC ICR read retries", 0),
            ("RES", "Rescheduling interrupts", 50), ("CAL", "Function call interrupts", 20),
            ("TLB", "TLB shootdowns", 10), ("TRM", "Thermal event interrupts", 0),
            ("THR", "Threshold APIC interrupts", 0), ("DFR", "Deferred Error APIC interrupts", 0),
            ("MCE", "Machine check exceptions", 0), ("MCP", "Machine check polls", 3)]
    for label, text, scale in arch:
        counts = "".join("%10d " % (scale * (1000 + (cpu * 37) % 500)) for cpu in online) if scale else \
            zero * len(online)
        lines.append("%*s: %s  %s" % (prec, label, counts, text))
    lines.append("%s: %10d" % ("ERR".rjust(prec), 0))
    lines.append("%s: %10d" % ("MIS".rjust(prec), 0))
    for label, text in (("PIN", "Posted-interrupt notification event"), ("NPI", "Nested posted-interrupt event"),
                        ("PIW", "Posted-interrupt wakeup event")):
        lines.append("%*s: %s  %s" % (prec, label, zero * len(online), text))
    tree.raw("proc/interrupts", ("\n".join(lines) + "\n").encode())


def _emit_proc(tree: _Tree, m: _Machine) -> None:
    spec = m.spec
    cpus = m.cpus
    cpu = spec["cpu"]
    tree.f("proc/cmdline", spec["kernel"]["cmdline"])
    tree.f("proc/version", "Linux version %s (nodetune-simnode@%s) (gcc (GCC) 13.3.0, GNU ld 2.42) #1 SMP "
                           "PREEMPT_DYNAMIC" % (m.release, spec["hostname"]))
    values = dict(SYSCTL_DEFAULTS)
    values.update(spec["sysctl"])
    for key, value in values.items():
        tree.f("proc/sys/" + key.replace(".", "/"), value, 0o644)
    tree.f("proc/sys/kernel/osrelease", m.release)
    tree.f("proc/sys/kernel/hostname", spec["hostname"], 0o644)
    tree.f("proc/sys/kernel/pid_max", max(32768, 1024 * cpus.count), 0o644)
    total_kb = spec["memory_gb"] * 1024 * 1024 * 99 // 100
    meminfo = [("MemTotal:", total_kb), ("MemFree:", total_kb * 9 // 10), ("MemAvailable:", total_kb * 19 // 20),
               ("Buffers:", 812345), ("Cached:", total_kb // 25), ("SwapCached:", 0), ("SwapTotal:", 8388604),
               ("SwapFree:", 8388604), ("Dirty:", 312), ("Writeback:", 0), ("AnonPages:", total_kb // 50),
               ("Shmem:", total_kb // 2000), ("Slab:", total_kb // 200), ("HugePages_Total:", 0),
               ("HugePages_Free:", 0), ("Hugepagesize:", 2048)]
    tree.raw("proc/meminfo", "".join("%-16s%8d kB\n" % kv if not kv[0].startswith("HugePages_")
                                     else "%-16s%8d\n" % kv for kv in meminfo).encode())
    flags = ZEN4_FLAGS if cpu["model_id"] >= 0x10 else ZEN3_FLAGS
    bogomips = "%.2f" % (cpu["mhz"]["base"] * 2 * 0.9984)
    apic_bits = 1
    while (1 << apic_bits) < cpus.cores * cpus.threads:
        apic_bits += 1
    blocks = []
    for cid in cpus.online:
        apic = (cpus.socket[cid] << apic_bits) | (cpus.core[cid] * cpus.threads + cpus.thread[cid])
        blocks.append(
            "processor\t: %d\nvendor_id\t: AuthenticAMD\ncpu family\t: %d\nmodel\t\t: %d\nmodel name\t: %s\n"
            "stepping\t: %d\nmicrocode\t: %s\ncpu MHz\t\t: %d.000\ncache size\t: %d KB\nphysical id\t: %d\n"
            "siblings\t: %d\ncore id\t\t: %d\ncpu cores\t: %d\napicid\t\t: %d\ninitial apicid\t: %d\nfpu\t\t: yes\n"
            "fpu_exception\t: yes\ncpuid level\t: 16\nwp\t\t: yes\nflags\t\t: %s\n"
            "bugs\t\t: sysret_ss_attrs spectre_v1 spectre_v2 spec_store_bypass srso\nbogomips\t: %s\n"
            "TLB size\t: 2560 4K pages\nclflush size\t: 64\ncache_alignment\t: 64\n"
            "address sizes\t: 52 bits physical, 57 bits virtual\n"
            "power management: ts ttp tsc_freq hwpstate cpb eff_freq_ro [13] [14]\n\n"
            % (cid, cpu["family"], cpu["model_id"], cpu["model_name"], cpu["stepping"], cpu["microcode"],
               cpu["mhz"]["base"], cpu["cache_kb"]["l2"], cpus.socket[cid],
               len([c for c in cpus.package_cpus[cpus.socket[cid]] if c in cpus.online_set]), cpus.core[cid],
               cpus.cores, apic, apic, flags, bogomips))
    tree.raw("proc/cpuinfo", "".join(blocks).encode())
    if m.boot.get("irqbalance_running"):
        pid = 1000 + _stable(spec["hostname"] + "irqbalance") % 3000
        tree.f("proc/%d/comm" % pid, "irqbalance")
        tree.raw("proc/%d/cmdline" % pid, b"/usr/sbin/irqbalance\x00--foreground\x00")
        tree.f("proc/%d/status" % pid, "Name:\tirqbalance\nState:\tS (sleeping)\nPid:\t%d\nPPid:\t1" % pid)
    # the other services systemd started at boot, each with the limits it gave their process (simservices.py)
    for unit, loaded in sorted(((m.boot.get("systemd") or {}).get("units") or {}).items()):
        for name, text in simservices.process_files(unit, loaded["MainPID"], loaded["LimitMEMLOCK"]).items():
            tree.raw("proc/%d/%s" % (loaded["MainPID"], name), text.encode(), 0o444)


def _emit_misc_sys(tree: _Tree, m: _Machine) -> None:
    spec = m.spec
    tree.f("sys/module/pcie_aspm/parameters/policy", "[default] performance powersave powersupersave", 0o644)
    params = m.boot.get("nvme", {})
    tree.f("sys/module/nvme/parameters/io_queue_depth", params.get("io_queue_depth", 1024))
    tree.f("sys/module/nvme/parameters/write_queues", params.get("write_queues", 0))
    tree.f("sys/module/nvme/parameters/poll_queues", params.get("poll_queues", 0))
    tree.f("sys/module/nvme_core/parameters/multipath", "N")
    tree.f("sys/module/nvme_core/parameters/io_timeout", 30, 0o644)
    if m.gpus:
        tree.f("sys/module/amdgpu/parameters/ppfeaturemask", "0xfff7bfff")
        tree.f("sys/module/amdgpu/version", "")
    if m.ib_nics:
        tree.f("sys/module/ib_ipoib/parameters/send_queue_size", 256)
        tree.f("sys/module/ib_ipoib/parameters/recv_queue_size", 512)
        tree.f("sys/module/mlx5_core/version", "")
    tree.f("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never", 0o644)
    tree.f("sys/kernel/mm/transparent_hugepage/defrag", "always defer defer+madvise [madvise] never", 0o644)
    dmi = "sys/devices/virtual/dmi/id"
    tree.f(dmi + "/sys_vendor", spec["platform"]["vendor"])
    tree.f(dmi + "/product_name", spec["platform"]["product"])
    tree.f(dmi + "/board_vendor", spec["platform"]["vendor"])
    tree.f(dmi + "/bios_vendor", "American Megatrends International, LLC.")
    tree.f(dmi + "/bios_version", "2.7")
    # the board's UUID, readable by root only as on a real node: from the host name, so two nodes differ
    uuid = "%016x%016x" % (_stable(spec["hostname"] + "/product_uuid", 64), _stable(spec["hostname"] + "/uuid", 64))
    tree.f(dmi + "/product_uuid", "-".join((uuid[:8], uuid[8:12], uuid[12:16], uuid[16:20], uuid[20:])), 0o400)
    tree.link("sys/class/dmi/id", dmi)


def _emit_run(tree: _Tree, m: _Machine) -> None:
    tree.dir("run/systemd/units")
    if m.boot.get("irqbalance_running"):
        invocation = "%032x" % _stable(m.spec["hostname"] + "/invocation", 64)
        tree.abslink("run/systemd/units/invocation:irqbalance.service", invocation)
    for unit in m.boot.get("timers", []):  # the id simservices.SimServices.invocation_id gives a started unit
        tree.abslink("run/systemd/units/invocation:" + unit,
                     "%032x" % _stable("%s/invocation/%s" % (m.spec["hostname"], unit), 64))
    manager = m.boot.get("systemd")
    if manager is not None:  # the limits the manager loaded at boot (simservices.MANAGER_STATE)
        for unit in sorted(manager["units"]):
            tree.abslink("run/systemd/units/invocation:" + unit,
                         "%032x" % _stable("%s/invocation/%s" % (m.spec["hostname"], unit), 64))
        tree.raw(simservices.MANAGER_STATE, (json.dumps(manager, sort_keys=True, indent=1) + "\n").encode(), 0o644)


# ============================================================================================ persistent files
_IRQBALANCE_UNIT = """[Unit]
Description=irqbalance daemon
Documentation=man:irqbalance(1)
Documentation=https://github.com/Irqbalance/irqbalance
ConditionVirtualization=!container
ConditionCPUs=>1

[Service]
EnvironmentFile=-%s
ExecStart=/usr/sbin/irqbalance $IRQBALANCE_ARGS
ReadOnlyPaths=/
ReadWritePaths=/proc/irq
RestrictAddressFamilies=AF_UNIX AF_NETLINK
RestrictRealtime=yes

[Install]
WantedBy=multi-user.target
"""

_IRQBALANCE_DEFAULT = """# irqbalance is a daemon process that distributes interrupts across
# CPUs on SMP systems. The default is to rebalance once every 10
# seconds. This is the environment file that is specified to systemd via the
# EnvironmentFile key in the service unit file (or via whatever method the init
# system you're using has).
#
# IRQBALANCE_ONESHOT
#    After starting, wait for ten seconds, then look at the interrupt
#    load and balance it once; after balancing exit and do not change
#    it again.
#
#IRQBALANCE_ONESHOT=

#
# IRQBALANCE_BANNED_CPULIST
#    The CPUs listed here (a cpulist such as 0-3,8) will not have any IRQs
#    assigned to them on rebalance.
#
#IRQBALANCE_BANNED_CPULIST=

#
# IRQBALANCE_ARGS
#    Append any args here to the irqbalance daemon as documented in the man
#    page.
#
#IRQBALANCE_ARGS=
"""


def _persistent_files(spec: Dict[str, Any]) -> _Tree:
    """etc/, usr/ and var/ of a freshly installed node (only written by build, kept by reboot)."""
    tree = _Tree()
    osd = spec["os"]
    family = osd["family"]
    version = re.search(r"(\d+(?:\.\d+)?)", osd["pretty_name"])
    os_id = "ubuntu" if "ubuntu" in osd["pretty_name"].lower() else ("debian" if family == "Debian" else "rhel")
    tree.f("etc/os-release", 'NAME="%s"\nPRETTY_NAME="%s"\nID=%s\nID_LIKE=%s\nVERSION_ID="%s"'
           % (osd["pretty_name"].split(" ")[0], osd["pretty_name"], os_id, "debian" if family == "Debian" else "fedora",
              version.group(1) if version else ""), 0o644)
    tree.f("etc/hostname", spec["hostname"], 0o644)
    # systemd's machine id, from the host name: two simulated nodes are two machines (the journal is bound to it)
    tree.f("etc/machine-id", "%016x%016x" % (_stable(spec["hostname"] + "/machine-id", 64),
                                             _stable(spec["hostname"] + "/machine-id/2", 64)), 0o444)
    # RDMA may lock all memory (health.memlock): the healthy default of an HPC image
    memlock = spec["faults"]["memlock"]
    tree.f("etc/security/limits.d/90-memlock.conf", "* soft memlock %s\n* hard memlock %s\n" % (memlock, memlock),
           0o644)
    tree.f("etc/systemd/system.conf.d/90-memlock.conf", "[Manager]\nDefaultLimitMEMLOCK=%s\n"
           % ("infinity" if memlock == "unlimited" else "%dK" % memlock), 0o644)
    cmdline = spec["kernel"]["cmdline"]
    extra = " ".join(t for t in cmdline.split() if not t.startswith(("BOOT_IMAGE=", "root=")) and t != "ro")
    tree.f("etc/default/grub", 'GRUB_DEFAULT=0\nGRUB_TIMEOUT=5\nGRUB_DISTRIBUTOR="%s"\nGRUB_CMDLINE_LINUX_DEFAULT=""\n'
           'GRUB_CMDLINE_LINUX="%s"' % (osd["pretty_name"].split(" ")[0], extra), 0o644)
    # the boot loader: GRUB (Debian) or BootLoaderSpec entries with grubby (RHEL), simbootloader.py; this replaces
    # the /etc/default/grub above with one whose words GRUB's parser would misread are quoted
    machine_id = "%016x%016x" % (_stable(spec["hostname"] + "/machine-id", 64),
                                 _stable(spec["hostname"] + "/machine-id/2", 64))
    for path, text in simbootloader.boot_files(spec, family, machine_id).items():
        tree.raw(path, text.encode("utf-8"), 0o444 if path == simbootloader.GRUB_CFG else 0o644)
    tree.f("etc/sysctl.conf", "# /etc/sysctl.conf - Configuration file for setting system variables\n"
                              "# See sysctl.d(5) for information.", 0o644)
    tree.abslink("etc/sysctl.d/99-sysctl.conf", "../sysctl.conf")
    tree.dir("etc/modprobe.d")
    tree.dir("etc/udev/rules.d")
    tree.dir("etc/systemd/system/multi-user.target.wants")
    tree.dir("var/lib")
    tree.dir("var/log")
    if spec["irqbalance"]["installed"]:
        config = OS_FAMILIES[family]["irqbalance_config"]
        tree.f(config, _IRQBALANCE_DEFAULT.rstrip("\n"), 0o644)
        tree.f("usr/lib/systemd/system/irqbalance.service", _IRQBALANCE_UNIT.rstrip("\n") % ("/" + config), 0o644)
        tree.f("usr/sbin/irqbalance", "# simulated node: stands in for the irqbalance binary (not executable)",
               0o644)
        if spec["irqbalance"]["enabled"]:
            tree.abslink("etc/systemd/system/multi-user.target.wants/irqbalance.service",
                         "/usr/lib/systemd/system/irqbalance.service")
    return tree


# ============================================================================================ boot-time effects
def _read_boot_state(dest: str) -> Dict[str, Any]:
    """What the persistent files under ``dest`` make the next boot do (modprobe options, irqbalance, ...)."""
    state: Dict[str, Any] = {"notes": []}
    state["irqbalance_running"] = os.path.lexists(
        os.path.join(dest, "etc/systemd/system/multi-user.target.wants/irqbalance.service")) and \
        os.path.exists(os.path.join(dest, "usr/lib/systemd/system/irqbalance.service"))
    state["nvme"] = _modprobe_nvme(dest, state["notes"])
    state["sysctl"] = _sysctl_d(dest, state["notes"])
    state["udev"] = _udev_rules(dest, state["notes"])
    # systemd reads its default limits and starts the enabled services (simservices.boot_state)
    state["systemd"] = _boot_systemd(lambda rel: _read_text_or_none(os.path.join(dest, rel)),
                                     lambda rel: sorted(os.listdir(os.path.join(dest, rel)))
                                     if os.path.isdir(os.path.join(dest, rel)) else [])
    # systemd starts the enabled timers at boot (timers.target); the simulation's services (simservices.py) link
    # every enabled unit into multi-user.target.wants
    state["timers"] = sorted(set(
        name for wants in ("etc/systemd/system/multi-user.target.wants", "etc/systemd/system/timers.target.wants")
        for name in (os.listdir(os.path.join(dest, wants)) if os.path.isdir(os.path.join(dest, wants)) else [])
        if name.endswith(".timer") and any(os.path.isfile(os.path.join(dest, units, name))
                                           for units in ("etc/systemd/system", "usr/lib/systemd/system"))))
    return state


def _read_text_or_none(path: str) -> Optional[str]:
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _boot_systemd(read: Any, listdir: Any) -> Dict[str, Any]:
    """The manager's state after boot from the persistent files as ``read``/``listdir`` see them."""
    wants = "etc/systemd/system/multi-user.target.wants"
    return simservices.boot_state(read, listdir, (read("etc/hostname") or "").strip(), listdir(wants))


def _tree_reader(tree: _Tree) -> Tuple[Any, Any]:
    """``read``/``listdir`` over a tree still in memory (a build's persistent files)."""
    def read(rel: str) -> Optional[str]:
        entry = tree.files.get(rel)
        return entry[0].decode("utf-8", "replace") if entry is not None else None

    def listdir(rel: str) -> List[str]:
        prefix = rel.rstrip("/") + "/"
        return sorted(set(p[len(prefix):].split("/")[0] for p in list(tree.files) + list(tree.links)
                          if p.startswith(prefix)))
    return read, listdir


def _conf_files(dest: str, directories: Iterable[str], suffix: str) -> List[str]:
    """Config files by name, /etc overriding /run and /usr/lib (the systemd drop-in rule), in lexical order."""
    chosen: Dict[str, str] = {}
    for directory in directories:
        full = os.path.join(dest, directory)
        try:
            names = os.listdir(full)
        except OSError:
            continue
        for name in names:
            if name.endswith(suffix) and name not in chosen:
                chosen[name] = os.path.join(full, name)
    return [chosen[name] for name in sorted(chosen)]


def _read_text(path: str) -> str:
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def _modprobe_nvme(dest: str, notes: List[str]) -> Dict[str, int]:
    params: Dict[str, int] = {}
    limits = {"io_queue_depth": (2, 4095), "write_queues": (0, 1024), "poll_queues": (0, 1024)}
    for path in _conf_files(dest, ("etc/modprobe.d", "run/modprobe.d", "usr/lib/modprobe.d"), ".conf"):
        for line in _read_text(path).splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) < 3 or words[0] != "options" or words[1] != "nvme":
                continue
            for word in words[2:]:
                key, _sep, value = word.partition("=")
                if key in limits and re.match(r"^\d+$", value):
                    low, high = limits[key]
                    if low <= int(value) <= high:
                        params[key] = int(value)
                    else:
                        notes.append("%s: nvme %s=%s is out of range %d-%d; the driver ignores it"
                                     % (os.path.relpath(path, dest), key, value, low, high))
                else:
                    notes.append("%s: nvme option %s is not simulated" % (os.path.relpath(path, dest), word))
    return params


def _sysctl_d(dest: str, notes: List[str]) -> List[Tuple[str, Optional[str], str]]:
    """systemd-sysctl's writes at boot, ``(key as a /proc/sys path or glob, value, file)`` in its order
    (src/sysctl/sysctl.c, parse_file()/apply_all(): one entry per key in an ordered map, a later assignment with
    another value moves the key to the end, one with the same value leaves it in place). A ``-key`` line without a
    value (None) only keeps globs off that key."""
    options: Dict[str, Tuple[Optional[str], str]] = {}
    dirs = ("etc/sysctl.d", "run/sysctl.d", "usr/local/lib/sysctl.d", "usr/lib/sysctl.d", "lib/sysctl.d")
    for path in _conf_files(dest, dirs, ".conf"):
        for line in _read_text(path).splitlines():
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            key, sep, value = line.partition("=")
            if not sep and not line.startswith("-"):
                continue
            key = key.strip().lstrip("-").strip()
            if "." in key and ("/" not in key or key.index(".") < key.index("/")):
                key = key.translate(str.maketrans("./", "/."))  # sysctl_normalize(): dotted form to a path
            wanted = value.strip() if sep else None
            if key in options and options[key][0] == wanted:
                continue
            options.pop(key, None)
            options[key] = (wanted, os.path.relpath(path, dest))
    return [(key, value, source) for key, (value, source) in options.items()]


def _udev_rules(dest: str, notes: List[str]) -> List[Tuple[str, List[Tuple[str, str, str]], List[Tuple[str, str]]]]:
    """Rules that set block device attributes: (file, [(key, op, value) matches], [(attr, value) assignments])."""
    rules = []
    for path in _conf_files(dest, ("etc/udev/rules.d", "run/udev/rules.d", "usr/lib/udev/rules.d"), ".rules"):
        text = _read_text(path).replace("\\\n", " ")
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            matches: List[Tuple[str, str, str]] = []
            assigns: List[Tuple[str, str]] = []
            for part in re.finditer(r'([A-Za-z_]+(?:\{[^}]*\})?)\s*(==|!=|\+=|:=|=)\s*"([^"]*)"', line):
                key, op, value = part.groups()
                if op in ("==", "!="):
                    matches.append((key, op, value))
                elif key.startswith("ATTR{") and op in ("=", ":="):
                    assigns.append((key[5:-1], value))
            if assigns:
                rules.append((os.path.relpath(path, dest), matches, assigns))
    return rules


def _udev_match(pattern: str, value: str) -> bool:
    return any(fnmatch.fnmatchcase(value, alternative) for alternative in pattern.split("|"))


def _apply_boot_config(tree: _Tree, m: _Machine) -> None:
    """systemd-sysctl and udev at boot: sysctl.d values and block ATTR{} assignments onto the fresh tree."""
    notes = m.boot.setdefault("notes", [])
    applied = m.boot.setdefault("applied", [])
    writes = m.boot.get("sysctl", [])
    explicit = set(key for key, _value, _source in writes if not any(c in key for c in "*?["))
    for key, value, source in writes:
        if value is None:
            continue
        if not any(c in key for c in "*?["):
            _boot_sysctl(tree, "proc/sys/" + key, value, source, notes, applied)
            continue
        # a glob: every matching sysctl no file names explicitly, in glob(3)'s sorted order
        for path in sorted(p for p in tree.files if p.startswith("proc/sys/") and p[9:] not in explicit
                           and _glob_path(key, p[9:])):
            _boot_sysctl(tree, path, value, source, notes, applied)
    for source, matches, assigns in m.boot.get("udev", []):
        for nvme in m.nvmes:
            disk = "%sn1" % m.nvme_name[nvme.bdf]
            base = "%s/nvme/%s/%s" % (nvme.path, m.nvme_name[nvme.bdf], disk)
            if not _udev_rule_matches(matches, disk, tree, base):
                continue
            for attr, value in assigns:
                path = "%s/%s" % (base, attr)
                if path not in tree.files:
                    notes.append("%s: ATTR{%s} does not exist on %s; skipped" % (source, attr, disk))
                    continue
                _udev_write(tree, base, attr, value)
                applied.append("udev %s: %s ATTR{%s}=%s" % (source, disk, attr, value))


def _glob_path(pattern: str, path: str) -> bool:
    parts, names = pattern.split("/"), path.split("/")
    return len(parts) == len(names) and all(fnmatch.fnmatchcase(n, p) for n, p in zip(names, parts))


def _boot_sysctl(tree: _Tree, path: str, value: str, source: str, notes: List[str], applied: List[str]) -> None:
    """One sysctl write of systemd-sysctl at boot, answered as the kernel answers it: a vm.dirty_* limit zeroes
    the other form of its pair (simkernel.dirty_write), so the replay ends with one form of each pair."""
    key = path[9:].translate(str.maketrans("./", "/."))
    value = " ".join(value.split())
    if path not in tree.files:
        notes.append("sysctl %s is not simulated on this node; skipped" % key)
        return
    try:
        files = dirty_write(lambda rel: tree.files[rel][0].decode() if rel in tree.files else None, path, value)
    except OSError as exc:
        notes.append("%s: sysctl %s=%s refused: %s" % (source, key, value, exc.strerror))
        return
    if files is None:
        files = [(path, (value.replace(" ", "\t") if key in _SYSCTL_VECTORS else value) + "\n")]
    for rel, text in files:
        tree.files[rel] = (text.encode(), tree.files[rel][1])
    applied.append("sysctl %s=%s" % (key, value))


def _udev_rule_matches(matches: List[Tuple[str, str, str]], disk: str, tree: _Tree, base: str) -> bool:
    for key, op, value in matches:
        if key == "ACTION":
            ok = _udev_match(value, "add")
        elif key == "SUBSYSTEM":
            ok = _udev_match(value, "block")
        elif key == "KERNEL":
            ok = _udev_match(value, disk)
        elif key in ("ENV{DEVTYPE}",):
            ok = _udev_match(value, "disk")
        elif key.startswith("ATTR{"):
            current = tree.files.get("%s/%s" % (base, key[5:-1]))
            ok = current is not None and _udev_match(value, current[0].decode().strip())
        else:
            return False  # a match key the simulation does not know: the rule is not applied
        if (op == "==") != ok:
            return False
    return True


def _udev_write(tree: _Tree, base: str, attr: str, value: str) -> None:
    """The kernel's answer to a udev ATTR write, for the block queue attributes udev rules set."""
    path = "%s/%s" % (base, attr)
    data, mode = tree.files[path]
    current = data.decode().strip()
    if attr == "queue/scheduler" and "[" in current:
        options = [o.strip("[]") for o in current.split()]
        if value in options:
            tree.files[path] = ((" ".join("[%s]" % o if o == value else o for o in options) + "\n").encode(), mode)
            tags = int(tree.files[base + "/mq/0/nr_tags"][0]) if base + "/mq/0/nr_tags" in tree.files else 1023
            depth = tags if value == "none" else 2 * min(tags, 128)
            tree.files[base + "/queue/nr_requests"] = (("%d\n" % depth).encode(), 0o644)
        return
    if attr == "queue/nr_requests" and value.isdigit():
        scheduler = tree.files[base + "/queue/scheduler"][0].decode()
        limit = int(tree.files[base + "/mq/0/nr_tags"][0]) if "[none]" in scheduler else 2048
        if int(value) > limit:
            return  # EINVAL: the rule fails and the value stays
        value = str(max(int(value), 4))
    tree.files[path] = ((value + "\n").encode(), mode)


# ============================================================================================ writing
def _write_tree(tree: _Tree, base: str) -> int:
    """Create every directory, file and link of ``tree`` below ``base`` (which exists and is empty)."""
    mkdir = os.mkdir
    for directory in sorted(tree.dirs):
        mkdir(base + "/" + directory, 0o755)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    umask = os.umask(0o022)
    os.umask(umask)
    fix_modes = bool(umask & 0o644)
    opener = os.open
    writer = os.write
    closer = os.close
    for path, (data, mode) in tree.files.items():
        fd = opener(base + "/" + path, flags, mode)
        try:
            if data:
                writer(fd, data)
            if fix_modes:
                os.fchmod(fd, mode)
        finally:
            closer(fd)
    for path, target in tree.links.items():
        os.symlink(target, base + "/" + path)
    return len(tree.files) + len(tree.links) + len(tree.dirs)


def _is_empty_dir(path: str) -> bool:
    try:
        return not os.listdir(path)
    except OSError:
        return False


def read_marker(dest: str) -> Optional[Dict[str, Any]]:
    """The marker of a simulated tree at ``dest`` (its spec and generator), or None where there is none."""
    try:
        with open(os.path.join(dest, MARKER), "r", encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("generator") != GENERATOR or not isinstance(data.get("spec"), dict):
        return None
    return data


def is_simnode(dest: str) -> bool:
    return read_marker(dest) is not None


def _check_dest(dest: Any, must_exist: bool = False) -> str:
    if not isinstance(dest, str) or not dest.strip():
        raise SimNodeError("dest must be a non-empty path, got %r" % (dest,))
    if "\x00" in dest:
        raise SimNodeError("dest %r contains a NUL byte" % dest)
    real = os.path.realpath(os.path.expanduser(dest))
    if real == "/" or real == os.path.realpath(os.sep):
        raise SimNodeError("dest %r is the real root file system; a simulated node must live in its own "
                           "directory (e.g. ./lab/<host>)" % dest)
    if must_exist and not os.path.isdir(real):
        raise SimNodeError("dest %s is not a simulated node: the directory does not exist" % dest)
    if os.path.exists(real) and not os.path.isdir(real):
        raise SimNodeError("dest %s exists and is not a directory" % dest)
    return real


def _marker_bytes(spec: Dict[str, Any]) -> bytes:
    return (json.dumps({"generator": GENERATOR, "version": GENERATOR_VERSION, "spec": spec}, indent=1,
                       sort_keys=True) + "\n").encode()


def build(spec: Any, dest: str) -> Dict[str, Any]:
    """Build the whole simulated node at ``dest`` (replacing an earlier simulated tree there).

    Refuses ``/`` and any existing non-empty directory that is not a simulated node (no marker), so that a
    wrong path can never wipe real data. The tree is built next to ``dest`` and moved into place, so a failed
    build leaves the old tree (or nothing) behind, never half a node.
    """
    spec = load_spec(spec)
    real = _check_dest(dest)
    if os.path.isdir(real) and not _is_empty_dir(real) and not is_simnode(real):
        raise SimNodeError("dest %s is a non-empty directory that is not a simulated node (no %s); refusing to "
                           "replace it - choose an empty or new directory" % (dest, MARKER))
    parent = os.path.dirname(real)
    try:
        os.makedirs(parent, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".%s.simnode-" % os.path.basename(real), dir=parent)
    except OSError as exc:
        raise SimNodeError("cannot create %s: %s" % (dest, exc.strerror or exc)) from None
    try:
        os.chmod(staging, 0o755)
        persistent = _persistent_files(spec)
        boot = {"irqbalance_running": spec["irqbalance"]["enabled"], "nvme": {}, "sysctl": [], "udev": [],
                "systemd": _boot_systemd(*_tree_reader(persistent))}
        tree, machine = _generate(spec, boot)
        tree.files.update(persistent.files)
        tree.links.update(persistent.links)
        tree.dirs.update(persistent.dirs)
        tree.raw(MARKER, _marker_bytes(spec), 0o644)
        entries = _write_tree(tree, staging)
        _swap_into_place(staging, real)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {"dest": real, "entries": entries, "summary": summary(spec, machine)}


def _swap_into_place(staging: str, real: str) -> None:
    old = None
    if os.path.isdir(real):
        if _is_empty_dir(real):
            os.rmdir(real)
        else:
            old = tempfile.mkdtemp(prefix=".%s.old-" % os.path.basename(real), dir=os.path.dirname(real))
            os.rmdir(old)
            os.rename(real, old)
    os.rename(staging, real)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def remove(dest: str) -> bool:
    """Delete a simulated tree; refuses anything without the marker. Returns False where nothing was there."""
    real = _check_dest(dest)
    if not os.path.exists(real):
        return False
    if not is_simnode(real):
        if _is_empty_dir(real):
            os.rmdir(real)
            return True
        raise SimNodeError("dest %s is not a simulated node (no %s); refusing to delete it" % (dest, MARKER))
    shutil.rmtree(real)
    return True


def summary(spec: Dict[str, Any], machine: Optional[_Machine] = None) -> Dict[str, Any]:
    """Counts a caller can check discovery against (CPUs, NUMA nodes, devices, IRQs)."""
    machine = machine or _Machine(spec, {"irqbalance_running": spec["irqbalance"]["enabled"]})
    cpus = machine.cpus
    return {
        "cpus": cpus.count,
        "cpus_online": len(cpus.online),
        "sockets": cpus.sockets,
        "numa_nodes": cpus.nodes,
        "gpus": len(machine.gpus),
        "nics": len(machine.nics),
        "ib_devices": len(machine.ib_nics),
        "nvme": len(machine.nvmes),
        "irqs": len(machine.irqs),
        "pci_devices": len(machine.pci),
    }


def plan(spec: Any) -> Dict[str, Any]:
    """The normalised spec and its summary, without writing anything (check mode)."""
    spec = load_spec(spec)
    return {"spec": spec, "summary": summary(spec)}


# ============================================================================================ reboot
def reboot(dest: str, check_only: bool = False) -> Dict[str, Any]:
    """Simulate a reboot: every runtime file under sys/, proc/ and run/ back to its boot value.

    Persistent files (etc/, usr/, var/) are kept, and they act the way they would at a real boot: sysctl.d
    values, udev ATTR{} rules for block devices, ``options nvme`` from modprobe.d, irqbalance running iff
    enabled; then the enabled nodetune-restore unit replays the runtime tuning (simboot.py), and the enabled
    timers run (nodetune-irq-repin.timer: simboot.run_irq_repin() is one of its runs). Mlx5 completion vectors
    created since boot (use_comp_vectors) are gone again. Returns what differed (``changed``: paths set back,
    created or removed) and what the boot applied; with ``check_only`` nothing is written.
    """
    real = _check_dest(dest, must_exist=True)
    marker = read_marker(real)
    if marker is None:
        raise SimNodeError("dest %s is not a simulated node (no valid %s); nothing to reboot" % (dest, MARKER))
    try:
        spec = load_spec(marker["spec"])
    except SpecError as exc:
        raise SimNodeError("the spec stored in %s/%s is no longer valid: %s" % (dest, MARKER, exc)) from None
    spec = _with_firmware(real, spec, check_only)
    boot = _read_boot_state(real)
    # the kernel boots with its boot loader's default entry (the spec's command line while that is unchanged)
    spec = dict(spec, kernel=dict(spec["kernel"], cmdline=simbootloader.booted_cmdline(real, spec)))
    tree = _generate(spec, boot)[0]
    changes = _sync_runtime(tree, real, check_only)
    restore = {"ran": False, "applied": 0, "pinned": [], "failed": [], "pending": []}
    if not check_only:
        # systemd then starts the enabled units: nodetune-restore replays the runtime tuning (simboot.py).
        restore = run_boot_restore(sim_root(real))
    return {"dest": real, "changed": changes, "applied": boot.get("applied", []), "notes": boot.get("notes", []),
            "check_only": check_only, "boot_restore": restore}


def _sync_runtime(tree: _Tree, real: str, check_only: bool) -> List[str]:
    """Make sys/, proc/ and run/ under ``real`` exactly the model's; returns the paths that differed."""
    changes: List[str] = []
    seen_dirs = set()
    for top in RUNTIME_DIRS:
        base = os.path.join(real, top)
        if not os.path.isdir(base) or os.path.islink(base):
            continue
        stack = [top]
        while stack:
            rel_dir = stack.pop()
            seen_dirs.add(rel_dir)
            try:
                entries = list(os.scandir(os.path.join(real, rel_dir)))
            except OSError:
                continue
            for entry in entries:
                rel = rel_dir + "/" + entry.name
                if entry.is_symlink():
                    target = tree.links.get(rel)
                    if target is None or os.readlink(entry.path) != target:
                        changes.append(rel)
                        if not check_only:
                            os.unlink(entry.path)
                elif entry.is_dir():
                    if rel in tree.dirs:
                        stack.append(rel)
                    else:
                        changes.append(rel + "/")
                        if not check_only:
                            shutil.rmtree(entry.path)
                else:
                    wanted = tree.files.get(rel)
                    if wanted is None:
                        changes.append(rel)
                        if not check_only:
                            os.unlink(entry.path)
                        continue
                    try:
                        mode = stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode)
                        with open(entry.path, "rb") as handle:
                            data = handle.read()
                    except OSError:
                        data, mode = None, -1
                    if data != wanted[0] or mode != wanted[1]:
                        changes.append(rel)
                        if not check_only:
                            os.chmod(entry.path, 0o644)
                            with open(entry.path, "wb") as handle:
                                handle.write(wanted[0])
                            os.chmod(entry.path, wanted[1])
    runtime = tuple(t + "/" for t in RUNTIME_DIRS)
    for directory in sorted(d for d in tree.dirs if d.startswith(runtime) or d in RUNTIME_DIRS):
        if directory not in seen_dirs and not os.path.isdir(os.path.join(real, directory)):
            changes.append(directory + "/")
            if not check_only:
                os.makedirs(os.path.join(real, directory), 0o755, exist_ok=True)
    for path, (data, mode) in tree.files.items():
        if path.startswith(runtime) and not os.path.lexists(os.path.join(real, path)):
            changes.append(path)
            if not check_only:
                fd = os.open(os.path.join(real, path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
                try:
                    os.write(fd, data)
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)
    for path, target in tree.links.items():
        if path.startswith(runtime) and not os.path.lexists(os.path.join(real, path)):
            changes.append(path)
            if not check_only:
                os.symlink(target, os.path.join(real, path))
    return sorted(set(changes))


# ============================================================================================ GPU firmware, KFD
FIRMWARE = ".nodetune-simnode-firmware.json"  # what the GPUs' firmware keeps across reboots: the memory partition


def _with_firmware(real: str, spec: Dict[str, Any], check_only: bool) -> Dict[str, Any]:
    """``spec`` as the GPUs come up at this boot. A memory partition requested since the last boot (simkernel's NPS
    request) is handed to the firmware when amdgpu unloads (amdgpu_gmc_prepare_nps_mode_change) and is the mode
    from this boot on; a compute partition the new memory partition does not allow falls back to the one amdgpu
    picks for it (aqua_vanjaram.c, __aqua_vanjaram_get_auto_mode)."""
    firmware: Dict[str, Any] = {}
    try:
        with open(os.path.join(real, FIRMWARE), encoding="utf-8") as handle:
            firmware = dict(json.load(handle))
    except (OSError, ValueError):
        firmware = {}
    request_path = os.path.join(real, NPS_REQUEST)
    if os.path.isfile(request_path) and not os.path.islink(request_path):
        with open(request_path, encoding="utf-8") as handle:
            request = handle.read().strip()
        if request in ("NPS1", "NPS2", "NPS4", "NPS8"):
            firmware["memory_partition"] = request
            if not check_only:
                with open(os.path.join(real, FIRMWARE), "w", encoding="utf-8") as handle:
                    json.dump(firmware, handle)
    if not firmware.get("memory_partition"):
        return spec
    faults = dict(spec["faults"], memory_partition=firmware["memory_partition"])
    xcc = max([GPU_MODELS[g["model"]]["num_xcc"] for g in spec.get("gpus") or []] or [1])
    if faults["compute_partition"] not in compute_partitions(faults["memory_partition"], xcc):
        parts = int(faults["memory_partition"][3:])
        faults["compute_partition"] = ("SPX" if parts == 1 else "CPX" if parts == xcc else
                                       "QPX" if parts * 2 == xcc else "DPX")
    return dict(spec, faults=faults)


def start_kfd_process(dest: str, pid: int, bdfs: Iterable[str] = ()) -> str:
    """A process that opened /dev/kfd, as a ROCm program does: ``sys/class/kfd/kfd/proc/<pid>/`` with a
    ``vram_<gpu_id>`` file per GPU it uses (kfd_process.c, kfd_procfs_add_sysfs_files). It lasts until
    :func:`stop_kfd_process` or a reboot. Returns the folder (relative to the root)."""
    real = _check_dest(dest, must_exist=True)
    topology = os.path.join(real, "sys/devices/virtual/kfd/kfd/topology/nodes")
    ids = {}
    for node in os.listdir(topology):
        props = {}
        with open(os.path.join(topology, node, "properties"), encoding="utf-8") as handle:
            for line in handle:
                key, _sep, value = line.partition(" ")
                props[key] = int(value)
        location = props.get("location_id", 0)
        bdf = "%04x:%02x:%02x.0" % (props.get("domain", 0), location >> 8, (location >> 3) & 0x1f)
        with open(os.path.join(topology, node, "gpu_id"), encoding="utf-8") as handle:
            ids.setdefault(bdf, []).append(handle.read().strip())
    folder = "%s/%d" % (KFD_PROC, int(pid))
    os.makedirs(os.path.join(real, folder), exist_ok=True)
    with open(os.path.join(real, folder, "pasid"), "w", encoding="utf-8") as handle:
        handle.write("%d\n" % (0x8000 + int(pid) % 0x8000))
    for bdf in bdfs:
        if bdf not in ids:
            raise SimNodeError("no KFD GPU at %s (GPUs: %s)" % (bdf, ", ".join(sorted(ids))))
        for gpu_id in ids[bdf]:
            with open(os.path.join(real, folder, "vram_" + gpu_id), "w", encoding="utf-8") as handle:
                handle.write("0\n")
    return folder


def stop_kfd_process(dest: str, pid: int) -> bool:
    """The process closed /dev/kfd: its proc folder goes. False where there was none."""
    real = _check_dest(dest, must_exist=True)
    folder = os.path.join(real, KFD_PROC, str(int(pid)))
    if not os.path.isdir(folder):
        return False
    shutil.rmtree(folder)
    return True


# ============================================================================================ late mlx5 vectors
def use_comp_vectors(dest: str, nic: str, vectors: Optional[Iterable[int]] = None) -> Dict[str, Any]:
    """A user of mlx5 NIC ``nic`` (its name or PCI address) asks for completion ``vectors`` (default: all of them),
    as an RDMA job creating completion queues or an interface opening its channels does.

    Since Linux 6.5 (commit f14c1a14e632, "net/mlx5: Allocate completion EQs dynamically") the driver creates a
    completion vector's IRQ only then: mlx5_comp_eqn_get() -> create_comp_eq() -> comp_irq_request_pci()
    (drivers/net/ethernet/mellanox/mlx5/core/eq.c) -> mlx5_irq_alloc() (pci_irq.c), which takes a free MSI-X
    table entry and IRQ number (pci_msix_alloc_irq_at(), MSI_ANY_INDEX: the lowest free ones), names the action
    ``mlx5_comp<N>@pci:<BDF>`` and sets the driver's default affinity, the one CPU mlx5_cpumask_default_spread()
    picks: the vector's place in the online CPUs ordered by NUMA distance from the device (CPU 0 past the end).
    Each new IRQ gets its /proc/irq/N files and /N/<name>/ folder, its msi_irqs entry and its /proc/interrupts
    row. Vectors that exist are left as they are; a reboot removes the created ones again (runtime state).
    Returns the IRQs created (``irq``, ``name``, ``cpu``) and the names that existed already.
    """
    real = _check_dest(dest, must_exist=True)
    marker = read_marker(real)
    if marker is None:
        raise SimNodeError("dest %s is not a simulated node (no valid %s); nothing to use" % (dest, MARKER))
    spec = load_spec(marker["spec"])
    m = _Machine(spec, _read_boot_state(real))
    mlx5 = [d for d in sorted(m.pci.values(), key=lambda d: d.bdf)
            if d.kind == "nic" and NIC_MODELS[d.spec["model"]]["kind"] == "ib"]
    dev = next((d for d in mlx5 if nic in (d.spec["name"], d.bdf)), None)
    if dev is None:
        raise SpecError("nic %s is not valid: expected the name or PCI address of one of this node's mlx5 NICs "
                        "(%s)" % (_show(nic), ", ".join("%s %s" % (d.spec["name"], d.bdf) for d in mlx5) or "none"))
    count = min(dev.spec["comp_vectors"], len(m.cpus.online))
    wanted = list(range(count)) if vectors is None else list(vectors)
    bad = [v for v in wanted if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < count]
    if bad:
        # mlx5_comp_eqn_get() refuses an index >= max_comp_eqs (EINVAL)
        raise SpecError("vectors %s are not valid for %s: it has completion vectors 0-%d" % (
            _show(bad), dev.spec["name"], count - 1))
    interrupts = os.path.join(real, "proc/interrupts")
    lines = _read_text(interrupts).splitlines()
    cpu_ids, rows = parse_interrupts("\n".join(lines))
    existing = dict((row["name"], row["irq"]) for row in rows if isinstance(row["irq"], int))
    used = set(existing.values()) | set(int(n) for n in os.listdir(os.path.join(real, "proc/irq")) if n.isdigit())
    chip = m._chip(dev, 0)[0]
    indices = set(int(row["hwirq"]) for row in rows if row["chip"] == chip and (row["hwirq"] or "").isdigit())
    online = parse_cpulist(_read_text(os.path.join(real, "sys/devices/system/cpu/online")).strip())
    spread = [c for c in m.cpus.local_spread(dev.node) if c in online]
    prec = len(lines[1].partition(":")[0]) if len(lines) > 1 else 3
    tree = _Tree()
    created: List[Dict[str, Any]] = []
    already: List[str] = []
    for vector in wanted:
        name = "mlx5_comp%d@pci:%s" % (vector, dev.bdf)
        if name in existing:
            already.append(name)
            continue
        number = next(n for n in range(m.FIRST_DYNAMIC_IRQ, 1 << 20) if n not in used)
        index = next(i for i in range(1, 1 << 11) if i not in indices)  # entry 0 is the async vector's, at probe
        used.add(number)
        indices.add(index)
        existing[name] = number
        cpu = spread[vector] if vector < len(spread) else 0
        d = "proc/irq/%d" % number
        tree.f(d + "/smp_affinity", m.cpus.mask([cpu]), 0o644)
        tree.f(d + "/smp_affinity_list", cpu, 0o644)
        tree.f(d + "/effective_affinity", m.cpus.mask([cpu]))
        tree.f(d + "/effective_affinity_list", cpu)
        tree.f(d + "/node", dev.node if dev.node >= 0 else 0)
        tree.dir(d + "/" + name)
        tree.f("%s/msi_irqs/%d" % (dev.path, number), "msix")
        row = _interrupts_row(prec, number, ("%10d " % 0) * len(cpu_ids), chip, str(index), "edge", name)
        at = next((i for i, line in enumerate(lines[1:], 1)
                   if not line.partition(":")[0].strip().isdigit() or int(line.partition(":")[0]) > number),
                  len(lines))
        lines.insert(at, row)
        created.append({"irq": number, "name": name, "cpu": cpu})
    for directory in sorted(tree.dirs):
        os.makedirs(os.path.join(real, directory), 0o755, exist_ok=True)
    for path, (data, mode) in tree.files.items():
        full = os.path.join(real, path)
        with open(full, "wb") as handle:
            handle.write(data)
        os.chmod(full, mode)
    if created:
        mode = stat.S_IMODE(os.stat(interrupts).st_mode)
        os.chmod(interrupts, 0o644)
        with open(interrupts, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        os.chmod(interrupts, mode)
    return {"dest": real, "nic": dev.spec["name"], "created": created, "existing": already}


# ============================================================================================ faults in place
def _model_tree(spec: Dict[str, Any], real: str) -> _Tree:
    """Every file the generator makes for ``spec`` (runtime at the node's current boot state, and persistent)."""
    tree = _generate(spec, _read_boot_state(real))[0]
    persistent = _persistent_files(spec)
    tree.files.update(persistent.files)
    tree.links.update(persistent.links)
    tree.dirs.update(persistent.dirs)
    return tree


def inject_faults(dest: str, faults: Dict[str, Any]) -> Dict[str, Any]:
    """Break a built node in place, the way the spec's ``faults`` (:data:`FAULT_DEFAULTS`) would have at build.

    Only the paths whose content the faults decide are written (the difference between the trees generated with
    the old and the new faults), so whatever else changed on the node (tuning applied, other drift) stays as it
    is. The stored spec takes the new faults: a reboot keeps them, as a bad link or a RAS error outlives a reboot.
    Returns the paths written and removed; a bad fault raises SpecError naming it, before anything is written.
    """
    real = _check_dest(dest, must_exist=True)
    marker = read_marker(real)
    if marker is None:
        raise SimNodeError("dest %s is not a simulated node (no valid %s); nothing to break" % (dest, MARKER))
    old = load_spec(marker["spec"])
    if not isinstance(faults, dict):
        raise SpecError("simulated node spec is not valid:\n  - spec faults: %s is not valid: expected a mapping "
                        "with keys %s" % (_show(faults), ", ".join(FAULT_DEFAULTS)))
    new = load_spec(dict(old, faults=dict(old["faults"], **faults)))
    before, after = _model_tree(old, real), _model_tree(new, real)
    written = sorted(p for p, data in after.files.items() if before.files.get(p) != data)
    removed = sorted(p for p in before.files if p not in after.files)
    for path in removed:
        os.unlink(os.path.join(real, path))
    for directory in sorted(before.dirs - after.dirs, key=len, reverse=True):  # deepest first
        full = os.path.join(real, directory)
        if os.path.isdir(full) and not os.listdir(full):
            os.rmdir(full)
    for path in written:
        data, mode = after.files[path]
        full = os.path.join(real, path)
        os.makedirs(os.path.dirname(full), 0o755, exist_ok=True)
        if os.path.lexists(full):
            os.chmod(full, 0o644)
        with open(full, "wb") as handle:
            handle.write(data)
        os.chmod(full, mode)
    with open(os.path.join(real, MARKER), "wb") as handle:
        handle.write(_marker_bytes(new))
    return {"dest": real, "faults": new["faults"], "written": written, "removed": removed}


# ============================================================================================ module helpers
def state_of(dest: str, spec: Optional[Dict[str, Any]] = None) -> str:
    """``absent``, ``foreign`` (non-empty, not ours), ``current`` (same spec and generator) or ``stale``.

    Raises SimNodeError for destinations that can never hold a simulated node (``/``, a file).
    """
    real = _check_dest(dest)
    if not os.path.exists(real) or _is_empty_dir(real):
        return "absent"
    marker = read_marker(real)
    if marker is None:
        return "foreign"
    if spec is not None and (marker.get("version") != GENERATOR_VERSION or marker["spec"] != spec):
        return "stale"
    return "current"
