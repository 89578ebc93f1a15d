# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Topology discovery: one plain, JSON-serialisable dict describing a node (docs/topology.md, schema 1).

``discover(root)`` is the single entry point shared by the ``topology_facts`` module, the ``nodetune
discover`` CLI and the Python API. It only reads, through a :class:`Root`, so it is safe against ``/`` and
against any captured or simulated tree. A missing subsystem is normal (a VM has no GPU, IB or NVMe): its
list is empty and its name is in ``absent``; what could not be read is in ``warnings``; nothing but an
unusable root is fatal.
"""

from __future__ import annotations


from ansible_collections.nodetune.instinct.plugins.module_utils.discover.cpu import (
    CPU_DIR,
    CPU_LIST_NAMES,
    online_cpus_text,
    read_cpufreq,
    read_cpuidle,
    read_cpu_lists,
    read_cpus,
    read_l3_domains,
    read_numa_nodes,
    read_smt,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.devices import (
    nvme_controllers,
    read_block_devices,
    read_gpus,
    read_ib_devices,
    read_kfd,
    read_nics,
    read_pci_devices,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.irq import read_irqs
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.system import (
    read_iommu,
    read_irqbalance,
    read_kernel,
    read_pcie_aspm,
    read_sysctls,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import ParseError
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError, Root, RootError

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: they are postponed, so typing is never imported at run time
    from typing import Any, Callable, Dict, List, Optional, Union

SCHEMA = 1
_NO_CPUFREQ: Dict[str, Any] = {"driver": None, "governors": {}, "available_governors": [], "amd_pstate_status": None,
                               "epp": None, "available_epp": None, "boost": None}
_NO_IRQBALANCE = {"installed": False, "enabled": False, "config_file": None, "banned_cpulist": None}
# Every name ``absent`` can hold (docs/topology.md).
ABSENT_NAMES = ("cpus", "cpufreq", "cpuidle", "numa", "pci", "gpus", "infiniband", "nics", "nvme", "irqs", "kfd",
                "smt_control")


def _open_root(root: Union[Root, str]) -> Root:
    node = root if isinstance(root, Root) else Root(root)
    if not node.isdir("sys") and not node.isdir("proc"):
        raise RootError("nodetune_root %r does not look like a node's root file system: it has neither sys/ nor "
                        "proc/ (point it at '/' or at a captured or simulated node tree)" % node.path, node.path)
    return node


def _guarded(section: str, warnings: List[str], default: Any, read: Callable[..., Any], *args: Any) -> Any:
    """Run one section reader; a damaged tree (a link loop, an unreadable directory) costs that section,
    reported in ``warnings``, never the whole discovery."""
    try:
        return read(*args)
    except (NodeFileError, ParseError, OSError) as exc:
        warnings.append("%s: could not be read (%s)" % (section, exc))
        return default


def discover(root: Union[Root, str] = "/", irq_counts: bool = True, structure: Any = None,
             values: bool = True) -> Dict[str, Any]:
    """Read the node under ``root`` and return its Topology.

    ``irq_counts=False`` leaves each IRQ's ``counts_total`` None instead of summing its /proc/interrupts row: the
    tune and verify modules' discovery (node.load), which never read it (discover_irq.parse_interrupts).
    ``structure``: a structure.StructureStore; the node's structure is taken from it where the evidence each section
    reads afresh says it is unchanged, and what is read afresh is given to it. The Topology is the same either way.
    ``values=False``: the node's structure, without the current values that only the Settings and checks of a run
    read, each where it uses it (docs/topology.md, "Structure and current values"): the governors and EPP
    (``cpufreq.governors``, ``cpufreq.epp``), the idle states' ``disabled_cpus`` and the IRQs' ``smp_affinity_list``
    and ``effective_affinity_list`` are None; ``irq.read_affinities`` reads those of the IRQs a caller needs.

    Raises :class:`RootError` (a ``NodeFileError``) only when ``root`` is unusable.
    """
    node = _open_root(root)
    warnings: List[str] = []
    w = warnings

    empty_lists: Dict[str, Optional[List[int]]] = {name: None for name in CPU_LIST_NAMES}
    cpu_lists = _guarded("cpu_lists", w, empty_lists, read_cpu_lists, node, w)
    numa_nodes = _guarded("numa_nodes", w, [], read_numa_nodes, node, w)
    cpus = _guarded("cpus", w, [], read_cpus, node, cpu_lists, numa_nodes, w, structure)
    smt = _guarded("smt", w, {"control": None, "active": None, "threads_per_core": None}, read_smt, node, cpus, w)
    cpufreq = _guarded("cpufreq", w, dict(_NO_CPUFREQ), read_cpufreq, node, cpus, w, structure, values)
    cpuidle = _guarded("cpuidle", w, {"driver": None, "states": []}, read_cpuidle, node, cpus, structure, values)
    l3_domains = _guarded("l3_domains", w, [], read_l3_domains, node, cpus, w, structure)

    online = online_cpus_text(cpus) if structure is not None else None
    pci_devices, pci_dirs = _guarded("pci_devices", w, ([], {}), read_pci_devices, node, w, structure, online)
    pci = {dev["bdf"]: dev for dev in pci_devices}
    kfd = _guarded("kfd", w, None, read_kfd, node)
    gpus = _guarded("gpus", w, [], read_gpus, node, pci_devices, pci_dirs, kfd, numa_nodes, w)
    nics = _guarded("nics", w, [], read_nics, node, pci)
    ib_devices = _guarded("ib_devices", w, [], read_ib_devices, node, pci, nics)
    controllers = _guarded("nvme", w, {}, nvme_controllers, node)
    block_devices = _guarded("block_devices", w, [], read_block_devices, node, pci, controllers)

    kernel = _guarded("kernel", w, {"cmdline": None, "release": None}, read_kernel, node)
    irqs = _guarded("irqs", w, None, read_irqs, node, pci_devices, [gpu["bdf"] for gpu in gpus], controllers,
                    {nic["name"]: nic["bdf"] for nic in nics}, kernel["release"], w, irq_counts, structure, values)

    present = {
        "cpus": bool(cpus),
        "cpufreq": cpufreq["driver"] is not None or bool(cpufreq["governors"]),
        "cpuidle": bool(cpuidle["states"]),
        "numa": bool(numa_nodes),
        "pci": bool(pci_devices),
        "gpus": bool(gpus),
        "infiniband": bool(ib_devices),
        "nics": bool(nics),
        "nvme": any(dev["kind"] == "nvme" for dev in block_devices),
        "irqs": bool(irqs),
        "kfd": kfd is not None,
        "smt_control": smt["control"] is not None,
    }
    return {
        "schema": SCHEMA,
        "root": node.path,
        "cpus": cpus,
        "cpu_lists": cpu_lists,
        "l3_domains": l3_domains,
        "smt": smt,
        "numa_nodes": numa_nodes,
        "pci_devices": pci_devices,
        "gpus": gpus,
        "nics": nics,
        "ib_devices": ib_devices,
        "block_devices": block_devices,
        "irqs": irqs or [],
        "cpufreq": cpufreq,
        "cpuidle": cpuidle,
        "kernel": kernel,
        "iommu": _guarded("iommu", w, {"present": False, "devices": [], "groups": 0}, read_iommu, node),
        "pcie_aspm": _guarded("pcie_aspm", w, {"policy": None, "available": []}, read_pcie_aspm, node),
        "irqbalance": _guarded("irqbalance", w, dict(_NO_IRQBALANCE), read_irqbalance, node, w),
        "sysctl": _guarded("sysctl", w, {}, read_sysctls, node),
        "absent": [name for name in ABSENT_NAMES if not present[name]],
        "warnings": warnings,
    }


__all__ = ["discover", "SCHEMA", "ABSENT_NAMES", "CPU_DIR"]
