"""Generated Topology dicts (docs/topology.md, schema 1) for planner tests and the scaling benchmark.

``build(spec)`` is a plain, deterministic builder; ``topologies()`` is the hypothesis strategy that draws
specs over the shapes real nodes have: 1-8 NUMA nodes with sparse ids, memory-only nodes, SMT on/off with
both sibling numberings (``N, N+cores`` and ``2k, 2k+1``), sparse CPU numbering, siblings already offline
(without topology, as a real kernel shows them), GPUs with partitions sharing one BDF, NICs with
``numa_node`` -1 (local_cpus set), mlx5 completion/async vectors and managed NVMe queues.

Every topology carries the generator's own truth under ``_truth`` (ignored by the planner): the true
cores, the node of each device, the partition count. Tests check the Layout against that truth, never
against a re-computation of the planner's own logic.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field

from ansible_collections.nodetune.instinct.plugins.module_utils.parse import format_cpulist
from hypothesis import strategies as st


@dataclass
class GpuSpec:
    node: int  # index into the CPU nodes of the spec
    partitions: int = 1
    unknown_numa: bool = False  # numa_node -1, local_cpus set to the true node's CPUs


@dataclass
class NicSpec:
    node: int
    comp_vectors: int = 8
    unknown_numa: bool = False
    ib: bool = True


@dataclass
class NvmeSpec:
    node: int
    queues: int = 4


@dataclass
class Spec:
    cpu_nodes: int = 2
    memory_nodes: int = 0  # memory-only (CPU-less) nodes, appended after the CPU nodes
    sparse_node_ids: bool = False
    cores_per_node: int = 4
    threads: int = 2  # 1 = SMT off / not supported
    sibling_style: str = "offset"  # "offset": N and N+cores; "adjacent": 2k and 2k+1
    cpu_gap: int = 0  # unused CPU ids between NUMA nodes (sparse CPU numbering)
    offline_siblings: tuple[int, ...] = ()  # indices of cores whose secondary thread is already offline
    sockets: int = 1
    gpus: list[GpuSpec] = field(default_factory=list)
    nics: list[NicSpec] = field(default_factory=list)
    nvmes: list[NvmeSpec] = field(default_factory=list)
    other_irqs: int = 3


def _node_ids(spec: Spec) -> list[int]:
    total = spec.cpu_nodes + spec.memory_nodes
    if not spec.sparse_node_ids:
        return list(range(total))
    return [0] + [2 * i + 1 for i in range(1, total)]  # 0, 3, 5, 7, ...


def _cores(spec: Spec) -> list[list[int]]:
    """Thread ids of every core, core-major in node order."""
    per_node = spec.cores_per_node
    total_cores = spec.cpu_nodes * per_node
    cores = []
    for index in range(total_cores):
        node = index // per_node
        shift = node * spec.cpu_gap
        if spec.threads == 1:
            cores.append([index + shift])
        elif spec.sibling_style == "adjacent":
            cores.append([2 * index + 2 * shift, 2 * index + 2 * shift + 1])
        else:
            span = total_cores + spec.cpu_nodes * spec.cpu_gap
            cores.append([index + shift, index + shift + span])
    return cores


def build(spec: Spec) -> dict:
    node_ids = _node_ids(spec)
    cpu_node_ids = node_ids[: spec.cpu_nodes]
    cores = _cores(spec)
    per_node = spec.cores_per_node
    offline = set()
    if spec.threads > 1:
        for core_index in spec.offline_siblings:
            if 0 <= core_index < len(cores):
                offline.update(cores[core_index][1:])
    cpu_entries = []
    node_cpus: dict[int, list[int]] = {n: [] for n in node_ids}
    for core_index, threads in enumerate(cores):
        node = cpu_node_ids[core_index // per_node]
        package = (core_index // per_node) * spec.sockets // spec.cpu_nodes
        online_threads = [t for t in threads if t not in offline]
        for thread in threads:
            node_cpus[node].append(thread)
            is_online = thread not in offline
            cpu_entries.append({
                "id": thread,
                "online": is_online,
                "hotpluggable": thread != 0,
                "core_id": core_index % per_node if is_online else None,
                "package": package if is_online else None,
                "die": package if is_online else None,
                "numa_node": node if is_online else None,
                # a real kernel drops offline siblings from thread_siblings_list
                "thread_siblings": online_threads if is_online else None,
            })
    all_ids = sorted(c["id"] for c in cpu_entries)
    online_ids = sorted(c["id"] for c in cpu_entries if c["online"])
    numa_nodes = []
    for node in node_ids:
        distances = {str(other): (10 if other == node else 21 + abs(node_ids.index(other) - node_ids.index(node)))
                     for other in node_ids}
        cpus = sorted(node_cpus[node])
        numa_nodes.append({"id": node, "cpus": cpus, "distances": distances, "memory_kb": 1 << 20,
                           "has_cpus": bool(cpus)})
    truth = {"cores": [list(t) for t in cores], "device_node": {}, "device_cpus": {}, "partitions": {},
             "cpu_node_ids": cpu_node_ids}
    topo = {
        "schema": 1,
        "root": "/generated",
        "cpus": sorted(cpu_entries, key=lambda c: c["id"]),
        "cpu_lists": {"online": online_ids, "offline": sorted(offline), "possible": all_ids, "present": all_ids,
                      "isolated": [], "nohz_full": None},
        "smt": {"control": "on" if spec.threads > 1 else "notsupported",
                "active": spec.threads > 1 and len(offline) < len(cores), "threads_per_core": spec.threads},
        "numa_nodes": numa_nodes,
        "pci_devices": [], "gpus": [], "nics": [], "ib_devices": [], "block_devices": [], "irqs": [],
        "cpufreq": {}, "cpuidle": {}, "kernel": {"cmdline": None, "release": "6.8.0"},
        "iommu": {"present": True, "devices": [], "groups": 0}, "pcie_aspm": {"policy": None, "available": []},
        "irqbalance": {"installed": True, "config_file": "etc/default/irqbalance", "banned_cpulist": None},
        "sysctl": {}, "absent": [], "warnings": [],
        "_truth": truth,
    }
    if spec.threads > 1 and offline and len(offline) == len(cores):
        topo["smt"]["control"] = "off"
    _add_devices(topo, spec, cpu_node_ids, node_cpus)
    return topo


def _pci(topo: dict, bdf: str, vendor: str, device: str, klass: str, driver: str, numa: int, local: list[int]) -> None:
    topo["pci_devices"].append({
        "bdf": bdf, "vendor": vendor, "device": device, "class": klass, "driver": driver, "numa_node": numa,
        "local_cpus": local, "link": {}, "aspm": None, "msi_irqs": [], "bars_above_4g": None, "bar_bytes_max": None,
    })


def _add_devices(topo: dict, spec: Spec, cpu_node_ids: list[int], node_cpus: dict[int, list[int]]) -> None:
    truth = topo["_truth"]
    irq_number = [24]

    def add_irq(name: str, kind: str, device: str | None, managed: bool | None, cpus: list[int] | None) -> None:
        topo["irqs"].append({
            "irq": irq_number[0], "chip": "IR-PCI-MSIX", "hwirq": str(irq_number[0]), "name": name, "device": device,
            "counts_total": 0, "smp_affinity_list": cpus, "effective_affinity_list": cpus[:1] if cpus else cpus,
            "node": None, "managed": managed, "kind": kind,
        })
        irq_number[0] += 1

    online_ids = topo["cpu_lists"]["online"]
    for i in range(spec.other_irqs):
        add_irq(f"timer{i}" if i else "timer", "other", None, None, list(online_ids))
    kfd = 1
    for i, gpu in enumerate(spec.gpus):
        node = cpu_node_ids[gpu.node % len(cpu_node_ids)]
        bdf = "0000:%02x:00.0" % (0x10 + i)
        local = sorted(node_cpus[node])
        numa = -1 if gpu.unknown_numa else node
        _pci(topo, bdf, "0x1002", "0x74a1", "0x038000", "amdgpu", numa, local)
        kfd_nodes = list(range(kfd, kfd + gpu.partitions))
        kfd += gpu.partitions
        topo["gpus"].append({
            "bdf": bdf, "vendor": "amd", "device": "0x74a1", "name": "MI300X", "numa_node": numa, "local_cpus": local,
            "driver": "amdgpu", "drm_card": f"card{i}", "render_node": f"renderD{128 + i}",
            "kfd_nodes": kfd_nodes, "partitions": gpu.partitions, "gpu_ids": [1000 + k for k in kfd_nodes],
            "hive_id": 7, "xgmi_peers": [], "hwmon": None, "link": {},
        })
        truth["device_node"][bdf] = node
        truth["device_cpus"][bdf] = local
        truth["partitions"][bdf] = gpu.partitions
    for i, nic in enumerate(spec.nics):
        node = cpu_node_ids[nic.node % len(cpu_node_ids)]
        bdf = "0000:%02x:00.0" % (0x80 + i)
        local = sorted(node_cpus[node])
        numa = -1 if nic.unknown_numa else node
        _pci(topo, bdf, "0x15b3", "0x101b", "0x020700" if nic.ib else "0x020000", "mlx5_core", numa, local)
        netdev = f"ib{i}" if nic.ib else f"eth{i}"
        hca = f"mlx5_{i}"
        topo["nics"].append({
            "name": netdev, "bdf": bdf, "driver": "mlx5_core", "numa_node": numa, "mtu": 4092 if nic.ib else 9000,
            "type": "infiniband" if nic.ib else "ether", "operstate": "up",
            "ipoib_mode": "datagram" if nic.ib else None,
            "ib_device": hca, "ib_port": 1, "speed_mbps": 200000,
        })
        topo["ib_devices"].append({
            "name": hca, "bdf": bdf, "numa_node": numa, "fw_ver": "20.31.1014", "node_guid": f"0000:0000:0000:{i:04x}",
            "ports": [{"port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "rate": "200 Gb/sec (4X HDR)",
                       "rate_gbps": 200.0, "link_layer": "InfiniBand" if nic.ib else "Ethernet"}],
            "netdevs": [netdev],
        })
        truth["device_node"][bdf] = node
        truth["device_cpus"][bdf] = local
        add_irq(f"mlx5_async0@pci:{bdf}", "nic_async", bdf, None, list(online_ids))
        for vector in range(nic.comp_vectors):
            add_irq(f"mlx5_comp{vector}@pci:{bdf}", "nic_comp", bdf, None, list(online_ids))
    for i, nvme in enumerate(spec.nvmes):
        node = cpu_node_ids[nvme.node % len(cpu_node_ids)]
        bdf = "0000:%02x:00.0" % (0xc0 + i)
        _pci(topo, bdf, "0x144d", "0xa80a", "0x010802", "nvme", node, sorted(node_cpus[node]))
        topo["block_devices"].append({"name": f"nvme{i}n1", "kind": "nvme", "controller": f"nvme{i}", "bdf": bdf,
                                      "numa_node": node, "scheduler": "none", "schedulers": ["none", "mq-deadline"],
                                      "nr_requests": 1023, "hw_queues": nvme.queues, "rotational": False,
                                      "read_ahead_kb": 128, "max_hw_sectors_kb": 512})
        add_irq(f"nvme{i}q0", "nvme_admin", bdf, False, [0])
        online = online_ids
        for q in range(1, nvme.queues + 1):
            spread = [online[(q - 1) % len(online)]] if online else []
            add_irq(f"nvme{i}q{q}", "nvme_queue", bdf, True, spread)
    # amdgpu_irq_init(): one vector per GPU PCI function, named "amdgpu", not managed; numbered last so that the
    # other devices' IRQ numbers are those of the generator before GPU vectors existed
    for gpu in topo["gpus"]:
        add_irq("amdgpu", "gpu", gpu["bdf"], None, list(online_ids))


def shuffled(topology: dict, seed: int) -> dict:
    """The same node with every list (and the distance tables) in another order: the planner must not care."""
    rng = random.Random(seed)
    topo = copy.deepcopy(topology)
    for key in ("cpus", "numa_nodes", "pci_devices", "gpus", "nics", "ib_devices", "block_devices", "irqs"):
        rng.shuffle(topo[key])
    for cpu in topo["cpus"]:
        if cpu.get("thread_siblings"):
            rng.shuffle(cpu["thread_siblings"])
    for node in topo["numa_nodes"]:
        rng.shuffle(node["cpus"])
        items = list(node["distances"].items())
        rng.shuffle(items)
        node["distances"] = dict(items)
    for gpu in topo["gpus"]:
        rng.shuffle(gpu["kfd_nodes"])
    return topo


# ---------------------------------------------------------------------------------------------------------
# hypothesis
# ---------------------------------------------------------------------------------------------------------


@st.composite
def specs(draw, max_gpus: int = 16) -> Spec:
    cpu_nodes = draw(st.integers(1, 8))
    memory_nodes = draw(st.integers(0, min(2, 8 - cpu_nodes)))
    threads = draw(st.sampled_from([1, 2]))
    cores_per_node = draw(st.integers(1, 12))
    total_cores = cpu_nodes * cores_per_node
    offline = ()
    if threads == 2 and draw(st.booleans()):
        offline = tuple(sorted(draw(st.sets(st.integers(1, max(1, total_cores - 1)), max_size=4))))
    gpus = draw(st.lists(st.builds(GpuSpec, node=st.integers(0, cpu_nodes - 1),
                                   partitions=st.sampled_from([1, 1, 1, 2, 4]), unknown_numa=st.booleans()),
                         max_size=max_gpus))
    nics = draw(st.lists(st.builds(NicSpec, node=st.integers(0, cpu_nodes - 1), comp_vectors=st.integers(0, 24),
                                   unknown_numa=st.booleans(), ib=st.booleans()), max_size=6))
    nvmes = draw(st.lists(st.builds(NvmeSpec, node=st.integers(0, cpu_nodes - 1), queues=st.integers(1, 8)),
                          max_size=3))
    return Spec(
        cpu_nodes=cpu_nodes, memory_nodes=memory_nodes, sparse_node_ids=draw(st.booleans()),
        cores_per_node=cores_per_node, threads=threads, sibling_style=draw(st.sampled_from(["offset", "adjacent"])),
        cpu_gap=draw(st.sampled_from([0, 0, 3, 16])), offline_siblings=offline,
        sockets=draw(st.integers(1, cpu_nodes)), gpus=gpus, nics=nics, nvmes=nvmes,
    )


def topologies(max_gpus: int = 16):
    return specs(max_gpus=max_gpus).map(build)


def describe(topology: dict) -> str:
    """One line for failure messages."""
    truth = topology["_truth"]
    cpus = format_cpulist(c["id"] for c in topology["cpus"])
    return (f"nodes={truth['cpu_node_ids']} cores={len(truth['cores'])} cpus={cpus} gpus={len(topology['gpus'])} "
            f"nics={len(topology['nics'])}")
