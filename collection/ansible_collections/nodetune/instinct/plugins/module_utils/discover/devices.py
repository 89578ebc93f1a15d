# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""PCI devices, GPUs (PCI + KFD), network interfaces, InfiniBand HCAs and block devices.

Every device is reached the way the kernel links it: ``/sys/bus/pci/devices/<BDF>``,
``/sys/class/{net,infiniband,block,nvme}/<name>`` are symlinks into ``/sys/devices``, and the PCI
address a netdev or a disk belongs to is the last ``dddd:bb:dd.f`` component of that resolved path.
Each link is resolved once (inside the root) and the resolved directory is reused for all attribute
reads, which keeps discovery of a 300-function server in the tens of milliseconds.
"""

from __future__ import annotations

import os

from ansible_collections.nodetune.instinct.plugins.module_utils.discover.cpu import (
    cpulist_or_none,
    cpumask_or_none,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.structure import (
    are_bools,
    are_int_lists,
    are_ints_or_none,
    are_lists_of,
    are_strs,
    are_strs_or_none,
    is_record,
    same_length,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import (
    number_after,
    number_before_unit,
    parse_choice,
    parse_int,
    parse_key_value,
    parse_link_speed,
    split_number_pair,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError, Root

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: they are postponed, so typing is never imported at run time
    from typing import Any, Dict, List, Optional, Set, Tuple

PCI_DIR = "sys/bus/pci/devices"
NET_DIR = "sys/class/net"
IB_DIR = "sys/class/infiniband"
NVME_CLASS_DIR = "sys/class/nvme"
KFD_NODES_DIR = "sys/class/kfd/kfd/topology/nodes"

_BDF_LENGTH = len("0000:00:00.0")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_FUNCTIONS = frozenset("01234567")
_PCI_ATTRS = ("vendor", "device", "class", "numa_node", "local_cpulist", "local_cpus", "current_link_speed",
              "max_link_speed", "current_link_width", "max_link_width", "resource")
# Of those, what a run with the PCI structure from the store reads afresh (with each function's driver link).
_PCI_LINK_NOW = ("current_link_speed", "current_link_width")
_SKIP_BLOCK_PREFIXES = ("loop", "ram", "dm-", "zram", "md", "nbd", "sr", "fd")

VENDOR_AMD = "0x1002"
VENDOR_NVIDIA = "0x10de"
# PCI base class + subclass of GPUs: VGA, 3D controller, display controller, processing accelerator
# (MI300X enumerates as 0x1200 "processing accelerator", MI200 as 0x0380 "display controller").
_GPU_CLASSES = ("0x0300", "0x0302", "0x0380", "0x1200")
# pci.ids names of AMD Instinct devices (device id -> marketing name); unknown ids leave ``name`` null.
AMD_GPU_NAMES = {
    "0x66a1": "MI50/MI60",
    "0x738c": "MI100",
    "0x7408": "MI250X",
    "0x740c": "MI250X/MI250",
    "0x740f": "MI210",
    "0x74a0": "MI300A",
    "0x74a1": "MI300X",
    "0x74a5": "MI325X",
    "0x74b5": "MI300X VF",
}
KFD_LINK_PCIE = 2
KFD_LINK_XGMI = 11

_WRITE_BITS = 0o222


def resolved(root: Root, rel: str) -> Optional[str]:
    """``rel`` with its links resolved inside the root, or None for an entry that cannot be resolved (a link
    loop in a damaged tree): that one device is skipped, the rest of its class is still discovered."""
    try:
        return root.inner(rel)
    except NodeFileError:
        return None


# ----------------------------------------------------------------------------------- names (no regular expressions:
# see parse.py; tests/core/test_parse_matchers.py checks each against the pattern in its docstring)
def is_bdf_at(text: str, start: int) -> bool:
    """A PCI address (``[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\\.[0-7]``) at ``text[start:]``."""
    chunk = text[start:start + _BDF_LENGTH]
    return (len(chunk) == _BDF_LENGTH and chunk[4] == ":" and chunk[7] == ":" and chunk[10] == "."
            and chunk[11] in _FUNCTIONS and _HEX_DIGITS.issuperset(chunk[0:4] + chunk[5:7] + chunk[8:10]))


def bdfs_in(text: str, first_only: bool = False) -> List[str]:
    """The PCI addresses in ``text``, left to right, not overlapping (what ``findall`` of the pattern gives).

    Every address has a ':' four characters in, so only those places are tried."""
    found: List[str] = []
    colon = text.find(":", 4)
    while colon >= 0:
        start = colon - 4
        chunk = text[start:start + _BDF_LENGTH]  # is_bdf_at(text, start), inline: IRQ names pass here by thousands
        if (len(chunk) == _BDF_LENGTH and chunk[7] == ":" and chunk[10] == "." and chunk[11] in _FUNCTIONS
                and _HEX_DIGITS.issuperset(chunk[0:4] + chunk[5:7] + chunk[8:10])):
            found.append(chunk)
            if first_only:
                break
            colon = text.find(":", start + _BDF_LENGTH + 4)
        else:
            colon = text.find(":", colon + 1)
    return found


def first_bdf(text: str) -> Optional[str]:
    """The first PCI address in ``text`` (as the pattern's ``search``), else None."""
    found = bdfs_in(text, first_only=True)
    return found[0] if found else None


def is_nvme_controller(name: str) -> bool:
    """``nvme0`` (``^nvme\\d+$``)."""
    return number_after(name, "nvme") is not None


def is_nvme_hidden_path(name: str) -> bool:
    """``nvme0c1n2`` (``^nvme\\d+c\\d+n\\d+$``): a multipath controller's hidden view of a namespace."""
    if not name.startswith("nvme"):
        return False
    body = name[4:-1] if name.endswith("\n") else name[4:]  # "$" also matches before a final newline
    controller, c_sep, rest = body.partition("c")
    path, n_sep, namespace = rest.partition("n")
    return bool(c_sep and n_sep) and controller.isdecimal() and path.isdecimal() and namespace.isdecimal()


def last_bdf(path: str) -> Optional[str]:
    """The PCI function a resolved sysfs path hangs under (the deepest BDF component), lower-case."""
    if "/virtual/" in path:
        return None
    found = bdfs_in(path)
    return found[-1].lower() if found else None


# --------------------------------------------------------------------------------------------- PCI
def _link(texts: Dict[str, Optional[str]]) -> Dict[str, Any]:
    return {
        "current_speed": texts.get("current_link_speed"),
        "max_speed": texts.get("max_link_speed"),
        "current_gts": parse_link_speed(texts.get("current_link_speed")),
        "max_gts": parse_link_speed(texts.get("max_link_speed")),
        "current_width": parse_int(texts.get("current_link_width")),
        "max_width": parse_int(texts.get("max_link_width")),
    }


def _bars(text: Optional[str]) -> Tuple[Optional[bool], Optional[int]]:
    """(any 64-bit memory BAR at >= 4 GiB, size of the largest BAR) from the ``resource`` file.

    Lines 0-5 of ``resource`` are the BARs (start, end, flags); IORESOURCE_MEM = 0x200 and
    IORESOURCE_MEM_64 = 0x100000 (include/linux/ioport.h). This is what "Above 4G decoding" buys.
    """
    if text is None:
        return None, None
    above = False
    largest = 0
    for line in text.splitlines()[:6]:
        fields = line.split()
        if len(fields) != 3:
            continue
        try:
            start, end, flags = (int(f, 16) for f in fields)
        except ValueError:
            continue
        if end <= start:
            continue
        largest = max(largest, end - start + 1)
        if flags & 0x200 and flags & 0x100000 and start >= 1 << 32:
            above = True
    return above, (largest or None)


def read_pci_devices(root: Root, warnings: List[str], store: Any = None, online: Optional[str] = None
                     ) -> Tuple[List[Dict[str, Any]], Dict[str, str]]:
    """All PCI functions, and ``{bdf: resolved sysfs dir}`` for later joins (GPUs, NICs, disks).

    Each function's ids, locality, BARs and the attributes it has are structure: taken from ``store`` where the bus's
    entries (names and inode numbers), the functions' drivers and NUMA nodes and the ``online`` CPUs are the same. A
    hot-plugged or replaced function is a new entry in /sys/bus/pci/devices, a new inode even at the same address
    (kernfs never reuses an inode number, fs/kernfs/dir.c); its ids, BARs and capabilities are read once when it is
    added (drivers/pci/probe.c), and its local_cpulist is its NUMA node's CPUs (pci-sysfs.c: cpumask_of_node, which
    on x86 drops offline CPUs). The driver, the NUMA node, link speeds, ASPM flags and MSI vectors are read afresh.
    """
    listing = _bus_entries(root) if store is not None else None
    bound: List[List[Optional[str]]] = []

    def still_bound(value: Any) -> bool:
        """The rest of the evidence, read at the kept functions' directories: each one's driver and NUMA node."""
        if not _valid_pci(value):
            return False
        bound[:] = _bindings(root, value["reals"])
        return bound == value["bound"]

    known = store.known("pci", [listing, online], still_bound) if listing is not None else None
    if known is not None:
        link_now = _read_grouped(root, known["reals"], known["link_now"])
    else:
        known, link_now = _pci_structure(root)
        bound = known["bound"]
        if listing is not None:
            store.learn("pci", [listing, online], known)
    warnings.extend(known["warnings"])
    return _pci_values(root, known, bound, link_now)


def _bus_entries(root: Root) -> List[List[Any]]:
    """``[name, inode]`` of each PCI address in /sys/bus/pci/devices, by name (the inodes come with the listing)."""
    try:
        with os.scandir(root.real(PCI_DIR)) as entries:
            return sorted([entry.name, entry.inode()] for entry in entries if is_bdf_at(entry.name, 0))
    except (OSError, NodeFileError):
        return []


def _bindings(root: Root, reals: List[str]) -> List[List[Optional[str]]]:
    """``[driver, numa_node text]`` of each function, read afresh (a driver link exists while it is bound)."""
    nodes = root.read_attrs_many(reals, ("numa_node",))
    return [[driver, texts[0]] for driver, (texts, _mode) in zip(root.readlink_names_many(reals, "driver"), nodes)]


def _pci_structure(root: Root) -> Tuple[Dict[str, Any], List[Dict[str, Optional[str]]]]:
    """The fixed part of every PCI function (see read_pci_devices), in columns sorted by address, and the current
    link attributes read with it."""
    found: List[Tuple[str, str, Set[str]]] = []  # (bdf, resolved directory, its entries)
    for name in root.listdir(PCI_DIR):
        if not is_bdf_at(name, 0):
            continue
        real = resolved(root, PCI_DIR + "/" + name)
        if real is not None:
            found.append((name.lower(), real, set(root.listdir(real))))
    found.sort(key=lambda device: device[0])
    warnings: List[str] = []
    columns: Dict[str, List[Any]] = {key: [] for key in _PCI_COLUMNS}
    columns["warnings"] = warnings
    columns["bound"] = bound = []
    link_now: List[Dict[str, Optional[str]]] = []
    for bdf, real, entries, texts in _with_attributes(root, found):
        local = cpulist_or_none(texts.get("local_cpulist"), real + "/local_cpulist", warnings)
        if local is None:
            local = cpumask_or_none(texts.get("local_cpus"), real + "/local_cpus", warnings)
        above_4g, bar_max = _bars(texts.get("resource"))
        for key, value in (("bdfs", bdf), ("reals", real), ("vendor", texts.get("vendor")),
                           ("device", texts.get("device")), ("class", texts.get("class")), ("local_cpus", local),
                           ("max_link_speed", texts.get("max_link_speed")),
                           ("max_link_width", texts.get("max_link_width")),
                           ("link_now", [a for a in _PCI_LINK_NOW if a in entries]), ("aspm_flags", "link" in entries),
                           ("bars_above_4g", above_4g), ("bar_bytes_max", bar_max)):
            columns[key].append(value)
        bound.append([root.readlink_name(real + "/driver") if "driver" in entries else None, texts.get("numa_node")])
        link_now.append({name: texts[name] for name in _PCI_LINK_NOW if name in texts})
    return columns, link_now


_PCI_COLUMNS = ("bdfs", "reals", "vendor", "device", "class", "local_cpus", "max_link_speed", "max_link_width",
                "link_now", "aspm_flags", "bars_above_4g", "bar_bytes_max")


def _valid_pci(value: Any) -> bool:
    texts = are_strs_or_none
    return (is_record(value, {
        "bdfs": are_strs, "reals": are_strs, "vendor": texts, "device": texts, "class": texts,
        "local_cpus": lambda v: are_int_lists(v, allow_none=True), "max_link_speed": texts, "max_link_width": texts,
        "link_now": lambda v: are_lists_of(v, lambda names: are_strs(names) and set(names) <= set(_PCI_LINK_NOW)),
        "aspm_flags": are_bools, "bars_above_4g": lambda v: are_bools(v, allow_none=True),
        "bar_bytes_max": are_ints_or_none, "warnings": are_strs,
        "bound": lambda v: are_lists_of(v, lambda pair: texts(pair) and len(pair) == 2)})
        and same_length(*(value[key] for key in _PCI_COLUMNS + ("bound",)))
        and all(real.rpartition("/")[2].lower() == bdf for real, bdf in zip(value["reals"], value["bdfs"])))


def _pci_values(root: Root, columns: Dict[str, Any], bound: List[List[Optional[str]]],
                link_now: List[Dict[str, Optional[str]]]) -> Tuple[List[Dict[str, Any]], Dict[str, str]]:
    """The PCI functions as they are now: the structure with the driver, NUMA node and current link attributes read
    afresh (``bound``, ``link_now``), and the ASPM flags and MSI vectors read here."""
    reals = columns["reals"]
    flagged = [index for index, has in enumerate(columns["aspm_flags"]) if has]
    flags = dict(zip(flagged, root.read_attrs_many([reals[index] + "/link" for index in flagged],
                                                   ("l0s_aspm", "l1_aspm"))))
    vectors = root.listdir_many(reals, "msi_irqs")
    devices: List[Dict[str, Any]] = []
    dirs: Dict[str, str] = {}
    for index, bdf in enumerate(columns["bdfs"]):
        real = reals[index]
        aspm = None
        if index in flags:
            l0s, l1 = flags[index][0]
            if l0s is not None or l1 is not None:
                aspm = {"l0s": _flag(l0s), "l1": _flag(l1)}
        texts = dict(link_now[index], max_link_speed=columns["max_link_speed"][index],
                     max_link_width=columns["max_link_width"][index])
        driver, numa_text = bound[index]
        devices.append({
            "bdf": bdf,
            "vendor": columns["vendor"][index],
            "device": columns["device"][index],
            "class": columns["class"][index],
            "driver": driver,
            "numa_node": parse_int(numa_text),
            "local_cpus": columns["local_cpus"][index],
            "link": _link(texts),
            "aspm": aspm,
            "msi_irqs": sorted(int(n) for n in vectors[index] if n.isdigit()),
            "bars_above_4g": columns["bars_above_4g"][index],
            "bar_bytes_max": columns["bar_bytes_max"][index],
        })
        dirs[bdf] = real
    return devices, dirs


def _read_grouped(root: Root, dirs: List[str], names_of: List[List[str]]) -> List[Dict[str, Optional[str]]]:
    """``{attribute: text}`` of the attributes named for each directory, read in one batch per set of names
    (devices of one kind have the same set): many directories read at once cost less per file."""
    groups: Dict[Tuple[str, ...], List[int]] = {}
    for index, names in enumerate(names_of):
        groups.setdefault(tuple(names), []).append(index)
    texts: List[Dict[str, Optional[str]]] = [{} for _dir in dirs]
    for names, members in groups.items():
        batch = root.read_attrs_many([dirs[index] for index in members], names)
        for index, (values, _mode) in zip(members, batch):
            texts[index] = dict(zip(names, values))
    return texts


def _with_attributes(root: Root, found: List[Tuple[str, str, Set[str]]]
                     ) -> List[Tuple[str, str, Set[str], Dict[str, Optional[str]]]]:
    """Each device with ``{attribute: text}`` of the attributes its directory holds."""
    names_of = [[a for a in _PCI_ATTRS if a in entries] for _bdf, _real, entries in found]
    texts = _read_grouped(root, [real for _bdf, real, _entries in found], names_of)
    return [(bdf, real, entries, texts[index]) for index, (bdf, real, entries) in enumerate(found)]


def _flag(text: Optional[str]) -> Optional[bool]:
    if text is None:
        return None
    return text.strip() == "1"


# --------------------------------------------------------------------------------------------- KFD
def read_kfd(root: Root) -> Optional[Dict[int, Dict[str, Any]]]:
    """KFD topology nodes ``{id: {"props": {...}, "gpu_id": int|None, "links": [(type, node_to)]}}``.

    None where the node has no KFD (no amdgpu driver loaded, or no AMD GPU at all).
    """
    if not root.isdir(KFD_NODES_DIR):
        return None
    nodes: Dict[int, Dict[str, Any]] = {}
    for name in root.listdir(KFD_NODES_DIR):
        if not name.isdigit():
            continue
        rel = KFD_NODES_DIR + "/" + name
        texts = root.read_attrs(rel, ("properties", "gpu_id"))
        links: List[Tuple[int, int]] = []
        link_dirs = ["%s/io_links/%s" % (rel, link) for link in root.subdirs(rel + "/io_links")]
        for link_texts, _mode in root.read_attrs_many(link_dirs, ("properties",)):
            props = parse_key_value(link_texts[0])
            link_type, node_to = parse_int(props.get("type")), parse_int(props.get("node_to"))
            if link_type is not None and node_to is not None:
                links.append((link_type, node_to))
        nodes[int(name)] = {"props": parse_key_value(texts["properties"]), "gpu_id": parse_int(texts["gpu_id"]),
                            "links": sorted(links)}
    return nodes


def _kfd_is_gpu(node: Dict[str, Any]) -> bool:
    props = node["props"]
    return (parse_int(props.get("simd_count")) or 0) > 0 or (node["gpu_id"] or 0) > 0


def _location_bdf(props: Dict[str, str]) -> Optional[str]:
    """GPU PCI address of a KFD node: domain:(location_id>>8):((location_id>>3)&0x1f).(location_id&7)."""
    location = parse_int(props.get("location_id"))
    if location is None:
        return None
    domain = parse_int(props.get("domain")) or 0
    return "%04x:%02x:%02x.%x" % (domain, (location >> 8) & 0xff, (location >> 3) & 0x1f, location & 7)


def _physical_bdf(raw: str, pci: Dict[str, Dict[str, Any]]) -> str:
    """The PCI function a KFD node lives on.

    In partition (CPX) mode amdgpu ORs the partition number into the low bits of ``location_id``
    (kfd_topology.c), so partitions show up as functions .1-.7 that do not exist on the bus: they
    belong to function 0 of the same device.
    """
    if raw in pci:
        return raw
    return raw[:-1] + "0"


def _kfd_numa_map(kfd: Dict[int, Dict[str, Any]], numa_nodes: List[Dict[str, Any]],
                  warnings: List[str]) -> Dict[int, int]:
    """KFD CPU node index -> Linux NUMA node id.

    KFD numbers its CPU nodes 0..n-1 in proximity-domain order, which is not guaranteed to be the Linux
    node id (sparse or CPU-less nodes shift it): pair them with the CPU-bearing Linux nodes in order.
    """
    cpu_nodes = sorted(i for i, node in kfd.items() if not _kfd_is_gpu(node))
    linux = [n["id"] for n in numa_nodes if n["has_cpus"]]
    if len(linux) == len(cpu_nodes):
        return dict(zip(cpu_nodes, linux))
    if not numa_nodes:
        warnings.append("no /sys/devices/system/node: KFD CPU node indexes used as NUMA node ids")
        return {i: i for i in cpu_nodes}
    warnings.append("KFD has %d CPU nodes but Linux has %d NUMA nodes with CPUs: GPU NUMA nodes from KFD "
                    "links are unknown" % (len(cpu_nodes), len(linux)))
    return {}


def _gpu_vendor(dev: Dict[str, Any]) -> Optional[str]:
    class_code = dev.get("class") or ""
    if not class_code.startswith(_GPU_CLASSES):
        return None
    if dev.get("vendor") == VENDOR_AMD:
        return "amd"
    if dev.get("vendor") == VENDOR_NVIDIA and not class_code.startswith("0x1200"):
        return "nvidia"
    return None


def _new_gpu(bdf: str, vendor: str, device: Optional[str], pci_dev: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    return {
        "bdf": bdf,
        "vendor": vendor,
        "device": device,
        "name": AMD_GPU_NAMES.get(device or "") if vendor == "amd" else None,
        "numa_node": pci_dev["numa_node"] if pci_dev and pci_dev["numa_node"] is not None else -1,
        "local_cpus": pci_dev["local_cpus"] if pci_dev else None,
        "driver": pci_dev["driver"] if pci_dev else None,
        "drm_card": None,
        "render_node": None,
        "kfd_nodes": [],
        "partitions": 1,
        "gpu_ids": [],
        "hive_id": None,
        "xgmi_peers": [],
        "hwmon": None,
        "link": pci_dev["link"] if pci_dev else _link({}),
    }


def read_gpus(root: Root, pci_devices: List[Dict[str, Any]], pci_dirs: Dict[str, str],
              kfd: Optional[Dict[int, Dict[str, Any]]], numa_nodes: List[Dict[str, Any]],
              warnings: List[str]) -> List[Dict[str, Any]]:
    pci = {dev["bdf"]: dev for dev in pci_devices}
    gpus: Dict[str, Dict[str, Any]] = {}
    for dev in pci_devices:
        vendor = _gpu_vendor(dev)
        if vendor:
            gpus[dev["bdf"]] = _new_gpu(dev["bdf"], vendor, dev["device"], dev)
    if kfd:
        _join_kfd(kfd, pci, gpus, numa_nodes, warnings)
    for bdf, gpu in gpus.items():
        real = pci_dirs.get(bdf)
        if real is None:
            continue
        for entry in root.listdir(real + "/drm"):
            if entry.startswith("card") and entry[4:].isdigit():
                gpu["drm_card"] = entry
            elif entry.startswith("renderD"):
                gpu["render_node"] = entry
        hwmons = root.listdir(real + "/hwmon")
        if hwmons:
            gpu["hwmon"] = real + "/hwmon/" + hwmons[0]
    return [gpus[bdf] for bdf in sorted(gpus)]


def _join_kfd(kfd: Dict[int, Dict[str, Any]], pci: Dict[str, Dict[str, Any]], gpus: Dict[str, Dict[str, Any]],
              numa_nodes: List[Dict[str, Any]], warnings: List[str]) -> None:
    bdf_of: Dict[int, str] = {}
    for node_id in sorted(kfd):
        node = kfd[node_id]
        if not _kfd_is_gpu(node):
            continue
        raw = _location_bdf(node["props"])
        if raw is None:
            warnings.append("KFD node %d has no location_id: not matched to a PCI device" % node_id)
            continue
        bdf_of[node_id] = _physical_bdf(raw, pci)
    numa_of_kfd_cpu = _kfd_numa_map(kfd, numa_nodes, warnings) if bdf_of else {}
    for node_id, bdf in sorted(bdf_of.items()):
        node = kfd[node_id]
        gpu = gpus.get(bdf)
        if gpu is None:
            device_id = parse_int(node["props"].get("device_id"))
            gpu = _new_gpu(bdf, "amd", "0x%04x" % device_id if device_id else None, pci.get(bdf))
            gpus[bdf] = gpu
        gpu["kfd_nodes"].append(node_id)
        if node["gpu_id"]:
            gpu["gpu_ids"].append(node["gpu_id"])
        hive = parse_int(node["props"].get("hive_id"))
        if hive:
            gpu["hive_id"] = hive
        for link_type, node_to in node["links"]:
            if link_type == KFD_LINK_XGMI and node_to in bdf_of and bdf_of[node_to] != bdf:
                if bdf_of[node_to] not in gpu["xgmi_peers"]:
                    gpu["xgmi_peers"].append(bdf_of[node_to])
            elif (link_type == KFD_LINK_PCIE and node_to in numa_of_kfd_cpu and node_to not in bdf_of
                  and gpu["numa_node"] in (None, -1)):
                gpu["numa_node"] = numa_of_kfd_cpu[node_to]
    for gpu in gpus.values():
        gpu["xgmi_peers"].sort()
        if gpu["kfd_nodes"]:
            gpu["partitions"] = len(gpu["kfd_nodes"])


# --------------------------------------------------------------------------------------------- network
def _numa_of(bdf: Optional[str], pci: Dict[str, Dict[str, Any]]) -> Optional[int]:
    if bdf and bdf in pci:
        return pci[bdf]["numa_node"]
    return None


def read_nics(root: Root, pci: Dict[str, Dict[str, Any]]) -> List[Dict[str, Any]]:
    nics: List[Dict[str, Any]] = []
    for name in root.listdir(NET_DIR):
        if name == "lo":
            continue
        real = resolved(root, NET_DIR + "/" + name)
        entries = set(root.listdir(real)) if real is not None else set()
        if real is None or not entries:
            continue
        texts = root.read_attrs(real, [a for a in ("mtu", "type", "operstate", "mode", "dev_port", "dev_id",
                                                   "speed") if a in entries])
        bdf = last_bdf(real) if "device" in entries else None
        net_type = texts.get("type")
        ib_device = None
        ib_port = None
        if "device" in entries:
            hcas = root.listdir(real + "/device/infiniband")
            ib_device = hcas[0] if hcas else None
        if ib_device is not None or net_type == "32":
            port_index = parse_int(texts.get("dev_port"))
            if port_index is None:
                port_index = parse_int(texts.get("dev_id"))  # kernels before dev_port (IPoIB on mlx4)
            ib_port = port_index + 1 if port_index is not None else None
        speed = parse_int(texts.get("speed"))
        nics.append({
            "name": name,
            "bdf": bdf,
            "driver": root.readlink_name(real + "/device/driver") if "device" in entries else None,
            "numa_node": _numa_of(bdf, pci),
            "mtu": parse_int(texts.get("mtu")),
            "type": {"32": "infiniband", "1": "ether"}.get(net_type or "", net_type),
            "operstate": texts.get("operstate"),
            "ipoib_mode": texts.get("mode") if texts.get("mode") in ("datagram", "connected") else None,
            "ib_device": ib_device,
            "ib_port": ib_port,
            "speed_mbps": speed if speed is not None and speed >= 0 else None,
        })
    nics.sort(key=lambda n: n["name"])
    return nics


def _state_word(text: Optional[str]) -> Optional[str]:
    """``"4: ACTIVE"`` -> ``"ACTIVE"``; ``"5: LinkUp"`` -> ``"LinkUp"``."""
    if text is None:
        return None
    return text.split(":", 1)[1].strip() if ":" in text else text.strip()


def read_ib_devices(root: Root, pci: Dict[str, Dict[str, Any]], nics: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    devices: List[Dict[str, Any]] = []
    for name in root.listdir(IB_DIR):
        real = resolved(root, IB_DIR + "/" + name)
        if real is None:
            continue
        entries = set(root.listdir(real))
        texts = root.read_attrs(real, [a for a in ("fw_ver", "node_guid") if a in entries])
        bdf = last_bdf(real)
        ports = []
        for port in sorted((p for p in root.listdir(real + "/ports") if p.isdigit()), key=int):
            attrs = root.read_attrs("%s/ports/%s" % (real, port), ("state", "phys_state", "rate", "link_layer"))
            rate_number = number_before_unit(attrs["rate"] or "", "Gb/sec")
            ports.append({
                "port": int(port),
                "state": _state_word(attrs["state"]),
                "phys_state": _state_word(attrs["phys_state"]),
                "rate": attrs["rate"],
                "rate_gbps": float(rate_number) if rate_number is not None else None,
                "link_layer": attrs["link_layer"],
            })
        netdevs = set(root.listdir(real + "/device/net")) if "device" in entries else set()
        netdevs.update(n["name"] for n in nics if n["ib_device"] == name)
        devices.append({
            "name": name,
            "bdf": bdf,
            "numa_node": _numa_of(bdf, pci),
            "fw_ver": texts.get("fw_ver"),
            "node_guid": texts.get("node_guid"),
            "ports": ports,
            "netdevs": sorted(netdevs),
        })
    devices.sort(key=lambda d: d["name"])
    return devices


# --------------------------------------------------------------------------------------------- block
def _block_names(root: Root) -> List[str]:
    """Whole disks from ``/sys/class/block`` and ``/sys/block`` (some captures only have one of them)."""
    names = set(root.listdir("sys/block"))
    for name in root.listdir("sys/class/block"):
        if name not in names and not root.exists("sys/class/block/%s/partition" % name):
            names.add(name)
    return sorted(n for n in names if not n.startswith(_SKIP_BLOCK_PREFIXES) and not is_nvme_hidden_path(n))


def nvme_controllers(root: Root) -> Dict[str, Optional[str]]:
    """``{"nvme0": "0000:41:00.0"}`` from ``/sys/class/nvme`` (None for fabrics controllers)."""
    controllers: Dict[str, Optional[str]] = {}
    for name in root.listdir(NVME_CLASS_DIR):
        if is_nvme_controller(name):
            real = resolved(root, NVME_CLASS_DIR + "/" + name)
            controllers[name] = last_bdf(real) if real is not None else None
    return controllers


def read_block_devices(root: Root, pci: Dict[str, Dict[str, Any]],
                       controllers: Dict[str, Optional[str]]) -> List[Dict[str, Any]]:
    devices: List[Dict[str, Any]] = []
    for name in _block_names(root):
        rel = ("sys/block/" if root.exists("sys/block/" + name) else "sys/class/block/") + name
        real = resolved(root, rel)
        if real is None or "/virtual/" in real:
            continue
        entries = set(root.listdir(real))
        nvme = split_number_pair(name, "nvme", "n")
        controller = None
        if nvme is not None:
            parts = [p for p in real.split("/") if is_nvme_controller(p)]
            controller = parts[-1] if parts else "nvme" + nvme[0]
        bdf = last_bdf(real)
        if bdf is None and controller:
            bdf = controllers.get(controller)
        numa = _numa_of(bdf, pci)
        if numa is None and controller:
            numa = parse_int(root.read("%s/%s/numa_node" % (NVME_CLASS_DIR, controller)))
        queue = root.read_attrs(real + "/queue", ("scheduler", "nr_requests", "rotational", "read_ahead_kb",
                                                  "max_hw_sectors_kb")) if "queue" in entries else {}
        active, available = parse_choice(queue.get("scheduler"))
        rotational = queue.get("rotational")
        devices.append({
            "name": name,
            "kind": "nvme" if nvme else "disk",
            "controller": controller,
            "bdf": bdf,
            "numa_node": numa,
            "scheduler": active,
            "schedulers": available,
            "nr_requests": parse_int(queue.get("nr_requests")),
            "hw_queues": sum(1 for q in root.listdir(real + "/mq") if q.isdigit()) if "mq" in entries else None,
            "rotational": None if rotational is None else rotational == "1",
            "read_ahead_kb": parse_int(queue.get("read_ahead_kb")),
            "max_hw_sectors_kb": parse_int(queue.get("max_hw_sectors_kb")),
        })
    return devices


def is_read_only_mode(mode: Optional[int]) -> bool:
    return mode is not None and not mode & _WRITE_BITS


# AMD GPU PCI device ids -> the platform whose BIOS guide applies. MI210/MI250/MI250X are one generation (CDNA2,
# "MI200" guide); MI300X, MI325X and the MI300X virtual function follow the MI300X guide. MI300A (APU) has its own
# guide with different NPS/IOMMU advice: not mapped, so its platform checks need explicit variables.
PLATFORM_BY_DEVICE = {
    "0x7408": "mi250",
    "0x740c": "mi250",
    "0x740f": "mi250",
    "0x74a1": "mi300x",
    "0x74a5": "mi300x",
    "0x74b5": "mi300x",
}


def detect_platform(topology: Dict[str, Any]) -> Tuple[Optional[str], str]:
    """(platform or None, evidence) from the AMD GPUs' PCI device ids; the most common platform wins."""
    counts: Dict[str, int] = {}
    devices: Dict[str, int] = {}
    for gpu in topology.get("gpus") or []:
        if gpu.get("vendor") != "amd":
            continue
        device = str(gpu.get("device") or "").lower()
        devices[device] = devices.get(device, 0) + 1
        platform = PLATFORM_BY_DEVICE.get(device)
        if platform:
            counts[platform] = counts.get(platform, 0) + 1
    evidence = ", ".join("%d x %s" % (n, d or "unknown") for d, n in sorted(devices.items())) or "no AMD GPU"
    if not counts:
        return None, evidence
    best = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[0][0]
    return best, evidence
