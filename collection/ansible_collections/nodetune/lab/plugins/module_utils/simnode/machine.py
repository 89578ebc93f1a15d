# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The machine a spec describes, derived before any file is written: CPU numbering, siblings, NUMA nodes and
caches (:class:`_Cpus`), the PCI functions below each root complex (:class:`_Pci`), the IRQs each device gets at
probe (:class:`_Irq`), all held by :class:`_Machine` together with the persistent state the boot read."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.parse import format_cpumask
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.catalogue import (
    CPU_MODELS,
    GPU_MODELS,
    NIC_MODELS,
    NVME_MODELS,
    PLATFORMS,
    _GEN_BY_GTS,
)
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.spec import (
    _attachments,
    _bus,
    _parse_version,
    _rc_node,
    _root_complex_layout,
)


def _link_state(link: Optional[Dict[str, Any]], model_link: Tuple[int, int]) -> Dict[str, int]:
    """Spec link (current GT/s and width) plus the model's maximum, as PCIe generations."""
    if not link:
        return {"gen": model_link[0], "width": model_link[1], "max_gen": model_link[0], "max_width": model_link[1]}
    return {"gen": _GEN_BY_GTS[float(link["speed"])], "width": int(link["width"]), "max_gen": model_link[0],
            "max_width": model_link[1]}


def _model_link(member: Dict[str, Any], kind: str) -> Tuple[int, int]:
    catalogue = {"gpu": GPU_MODELS, "nic": NIC_MODELS, "nvme": NVME_MODELS}.get(kind)
    return catalogue[member["model"]]["link"] if catalogue else (1, 1)


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
