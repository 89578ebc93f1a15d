# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The emitters of the devices: every PCI function (config space with the ACS the boot left, IOMMU groups, MSI
vectors), the GPUs (DRM cards, KFD topology, hwmon, metrics, partitions), the NICs (netdev, InfiniBand ports)
and the NVMe drives (controller, namespace, block queue). Each writes what the kernel shows for a
:class:`_Machine` into a :class:`_Tree`."""

from __future__ import annotations

import re
import struct
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.parse import format_cpulist
from ansible_collections.nodetune.lab.plugins.module_utils import simmetrics
from ansible_collections.nodetune.lab.plugins.module_utils.simkernel import od_clk_text
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.catalogue import (
    GPU_MODELS,
    IB_ERROR_COUNTERS,
    NIC_MODELS,
    NVME_MODELS,
    _GTS_BY_GEN,
)
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.emit_system import _list_cached
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.machine import _Machine, _Pci
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.spec import _bus, _root_complex_layout
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.tree import _stable, _Tree


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
