# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What the simulated hardware and software is, by model: CPUs (flags, caches, clocks), the platforms' host PCI
functions, GPUs, NICs, NVMe drives, cpufreq governors and idle states, the kernel's sysctl defaults, OS families
and PCIe rates by generation. The spec (spec.py) names these models; the machine and the emitters read them."""

from __future__ import annotations

from typing import Any, Dict


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
