"""Discovery on small hand-built node trees: every documented field and edge case, with known answers.

The trees are written here file by file the way the kernel lays them out (symlinks from /sys/bus and
/sys/class into /sys/devices, procfs files), so each expected value below is a fact of the tree, not a
re-computation of discovery's logic.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import RootError

GPU = "0000:05:00.0"
GPU2 = "0000:27:00.0"
NVIDIA = "0000:41:00.0"
HCA = "0000:0c:00.0"
NVME = "0000:81:00.0"
PCI_PATHS = {  # BDF -> directory under sys/devices (behind a root port, as on a real server)
    GPU: "pci0000:00/0000:00:01.1/0000:05:00.0",
    GPU2: "pci0000:20/0000:20:01.1/0000:27:00.0",
    NVIDIA: "pci0000:40/0000:40:01.1/0000:41:00.0",
    HCA: "pci0000:00/0000:00:03.1/0000:0c:00.0",
    NVME: "pci0000:80/0000:80:01.1/0000:81:00.0",
}


def write(root: Path, rel: str, text: str, mode: int | None = None) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mode is not None:
        path.chmod(mode)


def link(root: Path, rel: str, target: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)


def pci_device(root: Path, bdf: str, attrs: dict[str, str], driver: str | None = None,
               msi: tuple[int, ...] = ()) -> str:
    rel = "sys/devices/" + PCI_PATHS[bdf]
    for name, value in attrs.items():
        write(root, f"{rel}/{name}", value + "\n")
    depth = rel.count("/") + 1
    link(root, f"sys/bus/pci/devices/{bdf}", "../../../devices/" + PCI_PATHS[bdf])
    if driver:
        (root / "sys/bus/pci/drivers" / driver).mkdir(parents=True, exist_ok=True)
        link(root, f"{rel}/driver", "../" * depth + f"sys/bus/pci/drivers/{driver}")
    for irq in msi:
        write(root, f"{rel}/msi_irqs/{irq}", "msix\n")
    return rel


def bar_lines(*bars: tuple[int, int, int]) -> str:
    rows = [f"0x{s:016x} 0x{e:016x} 0x{f:016x}" for s, e, f in bars]
    rows += ["0x0000000000000000 0x0000000000000000 0x0000000000000000"] * (13 - len(rows))
    return "\n".join(rows)


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """An 8-CPU, 2-socket, SMT node (siblings N/N+4) with CPU7 offline, NUMA nodes 0 and 2 with CPUs and a
    CPU-less node 3, two AMD GPUs (one with two KFD partitions), an NVIDIA GPU, a ConnectX HCA with IPoIB
    and an NVMe drive, on a 6.12 kernel."""
    r = tmp_path / "node"
    cpu = "sys/devices/system/cpu"
    write(r, f"{cpu}/online", "0-6\n")
    write(r, f"{cpu}/offline", "7\n")
    write(r, f"{cpu}/possible", "0-7\n")
    write(r, f"{cpu}/present", "0-7\n")
    write(r, f"{cpu}/isolated", "\n")
    write(r, f"{cpu}/nohz_full", "(null)\n")
    write(r, f"{cpu}/smt/control", "on\n")
    write(r, f"{cpu}/smt/active", "1\n")
    node_of = {0: 0, 1: 0, 4: 0, 5: 0, 2: 2, 3: 2, 6: 2, 7: 2}
    for c in range(8):
        if c:
            write(r, f"{cpu}/cpu{c}/online", "0\n" if c == 7 else "1\n")
        link(r, f"{cpu}/cpu{c}/node{node_of[c]}", f"../../node/node{node_of[c]}")
        if c == 7:
            continue  # an offline CPU has no topology directory on a real kernel
        write(r, f"{cpu}/cpu{c}/topology/core_id", f"{c % 4 % 2}\n")
        write(r, f"{cpu}/cpu{c}/topology/physical_package_id", f"{c % 4 // 2}\n")
        write(r, f"{cpu}/cpu{c}/topology/die_id", "0\n")
        write(r, f"{cpu}/cpu{c}/topology/thread_siblings_list", f"{c % 4},{c % 4 + 4}\n" if c != 3 else "3\n")
        for index, name in enumerate(("POLL", "C1", "C2")):
            write(r, f"{cpu}/cpu{c}/cpuidle/state{index}/name", name + "\n")
            write(r, f"{cpu}/cpu{c}/cpuidle/state{index}/disable", "1\n" if (index == 2 and c < 2) else "0\n")
    write(r, f"{cpu}/cpuidle/current_driver", "acpi_idle\n")
    for c in range(7):
        pol = f"{cpu}/cpufreq/policy{c}"
        write(r, f"{pol}/affected_cpus", f"{c}\n")
        write(r, f"{pol}/scaling_driver", "amd-pstate-epp\n")
        write(r, f"{pol}/scaling_governor", "performance\n" if c < 4 else "powersave\n")
        write(r, f"{pol}/scaling_available_governors", "performance powersave\n")
        write(r, f"{pol}/energy_performance_preference", "performance\n" if c < 4 else "balance_power\n")
        write(r, f"{pol}/energy_performance_available_preferences",
              "default performance balance_performance balance_power power\n")
    write(r, f"{cpu}/cpufreq/boost", "1\n")
    write(r, f"{cpu}/amd_pstate/status", "active\n")

    numa = "sys/devices/system/node"
    write(r, f"{numa}/online", "0,2-3\n")
    write(r, f"{numa}/node0/cpulist", "0-1,4-5\n")
    write(r, f"{numa}/node0/distance", "10 21 31\n")
    write(r, f"{numa}/node0/meminfo", "Node 0 MemTotal:       1048576 kB\nNode 0 MemFree:  1 kB\n")
    write(r, f"{numa}/node2/cpumap", "000000cc\n")  # util-linux style: cpumap only
    write(r, f"{numa}/node2/distance", "21 10 31\n")
    write(r, f"{numa}/node3/cpulist", "\n")
    write(r, f"{numa}/node3/distance", "31 31 10\n")
    write(r, f"{numa}/node3/meminfo", "Node 3 MemTotal:       2097152 kB\n")

    gpu_rel = pci_device(r, GPU, {
        "vendor": "0x1002", "device": "0x74a1", "class": "0x120000", "numa_node": "0", "local_cpulist": "0-1,4-5",
        "current_link_speed": "32.0 GT/s PCIe", "max_link_speed": "32.0 GT/s PCIe", "current_link_width": "16",
        "max_link_width": "16",
        "resource": bar_lines((0x20000000000, 0x23FFFFFFFFF, 0x14220C), (0xF0000000, 0xF07FFFFF, 0x40200)),
    }, driver="amdgpu", msi=(200,))
    (r / gpu_rel / "drm/card1").mkdir(parents=True)
    (r / gpu_rel / "drm/renderD128").mkdir(parents=True)
    (r / gpu_rel / "hwmon/hwmon3").mkdir(parents=True)
    write(r, f"{gpu_rel}/link/l0s_aspm", "0\n")
    write(r, f"{gpu_rel}/link/l1_aspm", "1\n")
    pci_device(r, GPU2, {"vendor": "0x1002", "device": "0x74a1", "class": "0x120000", "numa_node": "-1",
                         "current_link_speed": "16.0 GT/s PCIe", "max_link_speed": "32.0 GT/s PCIe",
                         "current_link_width": "8", "max_link_width": "16",
                         "resource": bar_lines((0xE0000000, 0xEFFFFFFF, 0x40200))}, driver="amdgpu")
    pci_device(r, NVIDIA, {"vendor": "0x10de", "device": "0x2335", "class": "0x030200", "numa_node": "2"},
               driver="nvidia", msi=(300,))
    hca = pci_device(r, HCA, {"vendor": "0x15b3", "device": "0x1021", "class": "0x020700", "numa_node": "0",
                              "local_cpulist": "0-1,4-5"}, driver="mlx5_core", msi=(100, 101, 102))
    nvme = pci_device(r, NVME, {"vendor": "0x144d", "device": "0xa80a", "class": "0x010802", "numa_node": "2"},
                      driver="nvme", msi=(120, 121))

    kfd = "sys/class/kfd/kfd/topology/nodes"
    write(r, f"{kfd}/0/properties", "cpu_cores_count 4\nsimd_count 0\nlocation_id 0\n")
    write(r, f"{kfd}/0/gpu_id", "0\n")
    write(r, f"{kfd}/1/properties", "cpu_cores_count 4\nsimd_count 0\nlocation_id 0\n")
    for kid, location, gpu_id, to_cpu, peers in ((2, 0x500, 1111, 0, (3, 4)), (3, 0x501, 2222, 0, (2, 4)),
                                                 (4, 0x2700, 3333, 1, (2, 3))):
        write(r, f"{kfd}/{kid}/properties",
              f"cpu_cores_count 0\nsimd_count 304\nvendor_id 4098\ndevice_id 29857\nlocation_id {location}\n"
              f"domain 0\nhive_id 77\n")
        write(r, f"{kfd}/{kid}/gpu_id", f"{gpu_id}\n")
        write(r, f"{kfd}/{kid}/io_links/0/properties", f"type 2\nnode_from {kid}\nnode_to {to_cpu}\n")
        for n, peer in enumerate(peers, start=1):
            write(r, f"{kfd}/{kid}/io_links/{n}/properties", f"type 11\nnode_from {kid}\nnode_to {peer}\n")

    write(r, f"{hca}/net/ib0/type", "32\n")
    write(r, f"{hca}/net/ib0/mtu", "4092\n")
    write(r, f"{hca}/net/ib0/mode", "datagram\n")
    write(r, f"{hca}/net/ib0/dev_port", "0\n")
    write(r, f"{hca}/net/ib0/operstate", "up\n")
    write(r, f"{hca}/net/ib0/speed", "400000\n")
    link(r, f"{hca}/net/ib0/device", "../../../0000:0c:00.0")
    link(r, "sys/class/net/ib0", "../../devices/" + PCI_PATHS[HCA] + "/net/ib0")
    write(r, "sys/devices/virtual/net/lo/mtu", "65536\n")
    link(r, "sys/class/net/lo", "../../devices/virtual/net/lo")
    write(r, "sys/devices/virtual/net/bond0/mtu", "9000\n")
    write(r, "sys/devices/virtual/net/bond0/type", "1\n")
    write(r, "sys/devices/virtual/net/bond0/speed", "-1\n")
    link(r, "sys/class/net/bond0", "../../devices/virtual/net/bond0")
    ib = f"{hca}/infiniband/mlx5_0"
    write(r, f"{ib}/fw_ver", "28.39.1002\n")
    write(r, f"{ib}/node_guid", "a088:c203:00ab:cdef\n")
    write(r, f"{ib}/ports/1/state", "4: ACTIVE\n")
    write(r, f"{ib}/ports/1/phys_state", "5: LinkUp\n")
    write(r, f"{ib}/ports/1/rate", "400 Gb/sec (4X NDR)\n")
    write(r, f"{ib}/ports/1/link_layer", "InfiniBand\n")
    link(r, f"{ib}/device", "../../../0000:0c:00.0")
    link(r, "sys/class/infiniband/mlx5_0", "../../devices/" + PCI_PATHS[HCA] + "/infiniband/mlx5_0")

    ns = f"{nvme}/nvme/nvme0/nvme0n1"
    write(r, f"{ns}/queue/scheduler", "[none] mq-deadline kyber\n")
    write(r, f"{ns}/queue/nr_requests", "1023\n")
    write(r, f"{ns}/queue/rotational", "0\n")
    write(r, f"{ns}/queue/read_ahead_kb", "128\n")
    write(r, f"{ns}/queue/max_hw_sectors_kb", "128\n")
    for q in range(4):
        (r / ns / f"mq/{q}").mkdir(parents=True)
    write(r, f"{ns}/nvme0n1p1/partition", "1\n")
    link(r, "sys/block/nvme0n1", "../devices/" + PCI_PATHS[NVME] + "/nvme/nvme0/nvme0n1")
    link(r, "sys/class/block/nvme0n1", "../../devices/" + PCI_PATHS[NVME] + "/nvme/nvme0/nvme0n1")
    link(r, "sys/class/block/nvme0n1p1", "../../devices/" + PCI_PATHS[NVME] + "/nvme/nvme0/nvme0n1/nvme0n1p1")
    link(r, "sys/class/nvme/nvme0", "../../devices/" + PCI_PATHS[NVME] + "/nvme/nvme0")
    write(r, "sys/devices/virtual/block/loop0/queue/scheduler", "none\n")
    link(r, "sys/block/loop0", "../devices/virtual/block/loop0")

    header = "".join(f"{'CPU' + str(c):>11}" for c in range(7))  # CPU7 is offline: no column

    def row(irq: int | str, counts: list[int], rest: str) -> str:
        label = f"{irq}:" if isinstance(irq, int) else f"{irq}:"
        return f"{label:>4}" + "".join(f" {n:10d}" for n in counts) + "  " + rest

    rows = [
        row(100, [1, 0, 0, 0, 0, 0, 0], "IR-PCI-MSIX-0000:0c:00.0    0-edge      mlx5_async0@pci:0000:0c:00.0"),
        row(101, [5, 5, 0, 0, 0, 0, 0], "IR-PCI-MSIX-0000:0c:00.0    1-edge      mlx5_comp0@pci:0000:0c:00.0"),
        row(102, [0, 0, 0, 0, 0, 0, 0], "IR-PCI-MSIX-0000:0c:00.0    2-edge      mlx5_comp1@pci:0000:0c:00.0"),
        row(120, [9, 0, 0, 0, 0, 0, 0], "IR-PCI-MSIX-0000:81:00.0    0-edge      nvme0q0"),
        row(121, [0, 7, 0, 0, 0, 0, 0], "IR-PCI-MSIX-0000:81:00.0    1-edge      nvme0q1"),
        row(200, [3, 0, 0, 0, 0, 0, 4], "IR-PCI-MSI    524288-edge      amdgpu"),
        row(300, [0, 0, 0, 0, 0, 0, 0], "IR-PCI-MSIX-0000:41:00.0    0-edge      nvidia"),
        row(9, [0, 0, 0, 0, 0, 0, 0], "IR-IO-APIC    9-fasteoi   acpi"),
        row("NMI", [1, 1, 1, 1, 1, 1, 1], "Non-maskable interrupts"),
        " ERR:          0",
    ]
    write(r, "proc/interrupts", header + "\n" + "\n".join(rows) + "\n")
    for irq, affinity, managed in ((100, "0-6", False), (101, "0", False), (102, "1", False), (120, "0-6", False),
                                   (121, "0-1", True), (200, "2", False), (300, "0-6", False), (9, "0-6", False)):
        mode = 0o444 if managed else 0o644
        write(r, f"proc/irq/{irq}/smp_affinity_list", affinity + "\n", mode)
        write(r, f"proc/irq/{irq}/effective_affinity_list", affinity.split("-")[0] + "\n", 0o444)
        write(r, f"proc/irq/{irq}/node", "0\n", 0o444)
    write(r, "proc/sys/kernel/osrelease", "6.12.9-nodetune\n")
    write(r, "proc/cmdline", "BOOT_IMAGE=/vmlinuz iommu=pt pci=realloc=off\n")
    write(r, "proc/sys/vm/dirty_ratio", "20\n")
    write(r, "proc/sys/vm/dirty_bytes", "0\n")
    write(r, "proc/sys/kernel/numa_balancing", "1\n")
    write(r, "proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t6291456\n")
    write(r, "proc/sys/net/ipv4/neigh/default/gc_thresh3", "1024\n")
    (r / "sys/class/iommu/ivhd0").mkdir(parents=True)
    for group in range(3):
        (r / f"sys/kernel/iommu_groups/{group}").mkdir(parents=True)
    write(r, "sys/module/pcie_aspm/parameters/policy", "[default] performance powersave powersupersave\n")
    write(r, "usr/sbin/irqbalance", "")
    write(r, "lib/systemd/system/irqbalance.service", "[Service]\n")
    link(r, "etc/systemd/system/multi-user.target.wants/irqbalance.service", "/lib/systemd/system/irqbalance.service")
    write(r, "etc/default/irqbalance", '# banned by nodetune\nIRQBALANCE_BANNED_CPULIST="0-1,4"\n')
    return r


@pytest.fixture
def topo(node: Path) -> dict:
    return discover(str(node))


# ------------------------------------------------------------------------------------------- CPUs and NUMA
def test_cpus(topo: dict) -> None:
    cpus = {c["id"]: c for c in topo["cpus"]}
    assert sorted(cpus) == list(range(8))
    assert [c["online"] for c in topo["cpus"]] == [True] * 7 + [False]
    assert cpus[0]["hotpluggable"] is False and cpus[1]["hotpluggable"] is True
    assert (cpus[5]["package"], cpus[5]["core_id"], cpus[5]["die"], cpus[5]["thread_siblings"]) == (0, 1, 0, [1, 5])
    assert cpus[7]["thread_siblings"] is None and cpus[7]["core_id"] is None and cpus[7]["numa_node"] == 2
    assert cpus[6]["numa_node"] == 2
    assert topo["cpu_lists"] == {"online": list(range(7)), "offline": [7], "possible": list(range(8)),
                                 "present": list(range(8)), "isolated": [], "nohz_full": []}
    assert topo["smt"] == {"control": "on", "active": True, "threads_per_core": 2}


def test_numa_nodes_sparse_cpumap_only_and_cpu_less(topo: dict) -> None:
    nodes = {n["id"]: n for n in topo["numa_nodes"]}
    assert sorted(nodes) == [0, 2, 3]
    assert nodes[0]["cpus"] == [0, 1, 4, 5] and nodes[0]["memory_kb"] == 1048576
    assert nodes[2]["cpus"] == [2, 3, 6, 7] and nodes[2]["memory_kb"] is None  # from cpumap 0xcc
    assert nodes[3] == {"id": 3, "cpus": [], "distances": {"0": 31, "2": 31, "3": 10}, "memory_kb": 2097152,
                        "has_cpus": False}
    assert nodes[0]["distances"] == {"0": 10, "2": 21, "3": 31}


def test_cpufreq_and_cpuidle(topo: dict) -> None:
    assert topo["cpufreq"] == {
        "driver": "amd-pstate-epp",
        "governors": {"performance": [0, 1, 2, 3], "powersave": [4, 5, 6]},
        "available_governors": ["performance", "powersave"],
        "amd_pstate_status": "active",
        "epp": {"balance_power": [4, 5, 6], "performance": [0, 1, 2, 3]},
        "available_epp": ["default", "performance", "balance_performance", "balance_power", "power"],
        "boost": 1,
    }
    assert topo["cpuidle"]["driver"] == "acpi_idle"
    states = {s["name"]: s for s in topo["cpuidle"]["states"]}
    assert [s["index"] for s in topo["cpuidle"]["states"]] == [0, 1, 2]
    assert states["C2"]["disabled_cpus"] == [0, 1] and states["C2"]["cpus_with_state"] == list(range(7))
    assert states["C1"]["disabled_cpus"] == []


# ------------------------------------------------------------------------------------------- PCI and GPUs
def test_pci_devices(topo: dict) -> None:
    pci = {d["bdf"]: d for d in topo["pci_devices"]}
    assert list(pci) == sorted([GPU, GPU2, NVIDIA, HCA, NVME])
    gpu = pci[GPU]
    assert (gpu["vendor"], gpu["device"], gpu["class"], gpu["driver"]) == ("0x1002", "0x74a1", "0x120000", "amdgpu")
    assert gpu["link"] == {"current_speed": "32.0 GT/s PCIe", "max_speed": "32.0 GT/s PCIe", "current_gts": 32.0,
                           "max_gts": 32.0, "current_width": 16, "max_width": 16}
    assert gpu["aspm"] == {"l0s": False, "l1": True}
    assert gpu["bars_above_4g"] is True and gpu["bar_bytes_max"] == 0x4000000000  # a 256 GiB BAR at 2 TiB
    assert gpu["local_cpus"] == [0, 1, 4, 5] and gpu["msi_irqs"] == [200]
    assert pci[GPU2]["numa_node"] == -1 and pci[GPU2]["bars_above_4g"] is False and pci[GPU2]["aspm"] is None
    assert pci[NVIDIA]["link"]["current_gts"] is None and pci[NVIDIA]["bars_above_4g"] is None
    assert pci[HCA]["msi_irqs"] == [100, 101, 102]


def test_gpus_from_pci_and_kfd(topo: dict) -> None:
    gpus = {g["bdf"]: g for g in topo["gpus"]}
    assert list(gpus) == [GPU, GPU2, NVIDIA]
    first = gpus[GPU]
    assert first["name"] == "MI300X" and first["vendor"] == "amd" and first["numa_node"] == 0
    assert first["kfd_nodes"] == [2, 3] and first["partitions"] == 2 and first["gpu_ids"] == [1111, 2222]
    assert first["hive_id"] == 77 and first["xgmi_peers"] == [GPU2]
    assert (first["drm_card"], first["render_node"]) == ("card1", "renderD128")
    assert first["hwmon"] == "sys/devices/" + PCI_PATHS[GPU] + "/hwmon/hwmon3"
    second = gpus[GPU2]
    # numa_node -1 on the PCI device: taken from its KFD PCIe link to KFD CPU node 1, which is the second
    # Linux node with CPUs (node 2), not Linux node 1 (which does not exist).
    assert second["numa_node"] == 2 and second["partitions"] == 1 and second["xgmi_peers"] == [GPU]
    assert second["link"]["current_width"] == 8 and second["link"]["max_width"] == 16
    nvidia = gpus[NVIDIA]
    assert (nvidia["vendor"], nvidia["numa_node"], nvidia["kfd_nodes"], nvidia["name"]) == ("nvidia", 2, [], None)


# ------------------------------------------------------------------------------------------- network and disks
def test_nics_and_ib(topo: dict) -> None:
    nics = {n["name"]: n for n in topo["nics"]}
    assert list(nics) == ["bond0", "ib0"]  # lo is skipped
    assert nics["ib0"] == {"name": "ib0", "bdf": HCA, "driver": "mlx5_core", "numa_node": 0, "mtu": 4092,
                           "type": "infiniband", "operstate": "up", "ipoib_mode": "datagram", "ib_device": "mlx5_0",
                           "ib_port": 1, "speed_mbps": 400000}
    assert nics["bond0"]["bdf"] is None and nics["bond0"]["speed_mbps"] is None and nics["bond0"]["type"] == "ether"
    (hca,) = topo["ib_devices"]
    assert (hca["name"], hca["bdf"], hca["numa_node"], hca["fw_ver"]) == ("mlx5_0", HCA, 0, "28.39.1002")
    assert hca["ports"] == [{"port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "rate": "400 Gb/sec (4X NDR)",
                             "rate_gbps": 400.0, "link_layer": "InfiniBand"}]
    assert hca["netdevs"] == ["ib0"]


def test_nvme_block_devices(topo: dict) -> None:
    assert topo["block_devices"] == [{
        "name": "nvme0n1", "kind": "nvme", "controller": "nvme0", "bdf": NVME, "numa_node": 2, "scheduler": "none",
        "schedulers": ["none", "mq-deadline", "kyber"], "nr_requests": 1023, "hw_queues": 4, "rotational": False,
        "read_ahead_kb": 128, "max_hw_sectors_kb": 128}]  # no loop0, no partition


# ------------------------------------------------------------------------------------------- IRQs
def test_irqs(topo: dict) -> None:
    irqs = {i["irq"]: i for i in topo["irqs"]}
    assert sorted(irqs) == [9, 100, 101, 102, 120, 121, 200, 300]  # NMI/ERR summary rows are not IRQs
    comp = irqs[101]
    assert comp == {"irq": 101, "chip": "IR-PCI-MSIX-0000:0c:00.0", "hwirq": "1", "name": "mlx5_comp0@pci:0000:0c:00.0",
                    "device": HCA, "counts_total": 10, "smp_affinity_list": [0], "effective_affinity_list": [0],
                    "node": 0, "managed": False, "kind": "nic_comp"}
    assert irqs[100]["kind"] == "nic_async"
    assert (irqs[120]["kind"], irqs[120]["managed"]) == ("nvme_admin", False)
    assert (irqs[121]["kind"], irqs[121]["managed"], irqs[121]["device"]) == ("nvme_queue", True, NVME)
    assert (irqs[200]["device"], irqs[200]["kind"], irqs[200]["counts_total"]) == (GPU, "gpu", 7)  # from msi_irqs
    assert (irqs[300]["device"], irqs[300]["kind"]) == (NVIDIA, "gpu")
    assert (irqs[9]["device"], irqs[9]["kind"], irqs[9]["hwirq"], irqs[9]["name"]) == (None, "other", "9", "acpi")
    assert irqs[9]["smp_affinity_list"] == list(range(7))


def test_managed_is_unknown_for_writable_files_before_6_12(node: Path) -> None:
    (node / "proc/sys/kernel/osrelease").write_text("5.14.0-427.el9\n")
    irqs = {i["irq"]: i for i in discover(str(node))["irqs"]}
    assert irqs[101]["managed"] is None  # writable file on an old kernel: may still refuse with EIO
    assert irqs[121]["managed"] is True  # 0444, and an NVMe I/O queue
    assert irqs[120]["managed"] is False  # the NVMe admin queue is never managed


def test_irq_affinity_mask_fallback_and_managed_by_mode(node: Path) -> None:
    irq = node / "proc/irq/102"
    (irq / "smp_affinity_list").unlink()
    (irq / "smp_affinity").write_text("00000000,00000060\n")
    (irq / "smp_affinity").chmod(0o444)
    irqs = {i["irq"]: i for i in discover(str(node))["irqs"]}
    assert irqs[102]["smp_affinity_list"] == [5, 6] and irqs[102]["managed"] is True


# ------------------------------------------------------------------------------------------- node-wide facts
def test_kernel_iommu_aspm_irqbalance_sysctl(topo: dict) -> None:
    assert topo["kernel"] == {"cmdline": "BOOT_IMAGE=/vmlinuz iommu=pt pci=realloc=off", "release": "6.12.9-nodetune"}
    assert topo["iommu"] == {"present": True, "devices": ["ivhd0"], "groups": 3}
    assert topo["pcie_aspm"] == {"policy": "default", "available": ["default", "performance", "powersave",
                                                                      "powersupersave"]}
    assert topo["irqbalance"] == {"installed": True, "enabled": True, "config_file": "etc/default/irqbalance",
                                  "banned_cpulist": [0, 1, 4]}
    assert topo["sysctl"] == {"vm.dirty_ratio": "20", "vm.dirty_bytes": "0", "kernel.numa_balancing": "1",
                              "net.ipv4.tcp_rmem": "4096\t131072\t6291456", "net.ipv4.neigh.default.gc_thresh3": "1024"}
    assert topo["absent"] == [] and topo["warnings"] == []


def test_the_topology_is_plain_json(topo: dict, node: Path) -> None:
    text = json.dumps(topo)
    assert json.loads(text) == topo
    assert json.dumps(discover(str(node))) == text


# ------------------------------------------------------------------------------------------- absence and garbage
def test_a_bare_vm_reports_everything_absent(tmp_path: Path) -> None:
    write(tmp_path, "sys/devices/system/cpu/online", "0-1\n")
    for c in range(2):
        write(tmp_path, f"sys/devices/system/cpu/cpu{c}/topology/core_id", f"{c}\n")
    write(tmp_path, "proc/interrupts",
          "           CPU0       CPU1\n  1:          9          0  IO-APIC   1-edge  i8042\n")
    topo = discover(str(tmp_path))
    assert [c["id"] for c in topo["cpus"]] == [0, 1]
    assert topo["absent"] == ["cpufreq", "cpuidle", "numa", "pci", "gpus", "infiniband", "nics", "nvme", "kfd",
                              "smt_control"]
    assert topo["irqs"][0]["name"] == "i8042" and topo["irqs"][0]["smp_affinity_list"] is None
    assert topo["gpus"] == [] and topo["smt"]["control"] is None


def test_garbage_files_become_warnings_not_crashes(node: Path) -> None:
    (node / "sys/devices/system/cpu/isolated").write_text("garbage!\n")
    (node / "sys/devices/system/node/node2/cpumap").write_text("zz,qq\n")
    (node / "sys/devices/system/node/node0/distance").write_text("ten twenty\n")
    (node / "proc/irq/101/smp_affinity_list").write_text("0-x\n")
    (node / "sys/devices/system/cpu/smt/control").write_text("maybe\n")
    (node / "sys/devices/" / PCI_PATHS[GPU] / "resource").write_bytes(b"\xff\xfe garbage")
    os.symlink("loop_b", node / "sys/class/net/loop_a")
    os.symlink("loop_a", node / "sys/class/net/loop_b")
    topo = discover(str(node))
    text = "\n".join(topo["warnings"])
    assert "sys/devices/system/cpu/isolated 'garbage!' is not valid" in text
    assert "node2/cpumap" in text and "node0/distance" in text and "proc/irq/101/smp_affinity_list" in text
    assert "smt/control reads 'maybe'" in text
    assert topo["cpu_lists"]["isolated"] is None
    assert {i["irq"]: i for i in topo["irqs"]}[101]["smp_affinity_list"] is None
    assert {d["bdf"]: d for d in topo["pci_devices"]}[GPU]["bars_above_4g"] is False
    assert [n["name"] for n in topo["nics"]] == ["bond0", "ib0"]  # the link loop reads as nothing


def test_interrupts_without_a_header_is_a_warning(node: Path) -> None:
    (node / "proc/interrupts").write_text("this is not /proc/interrupts\n")
    topo = discover(str(node))
    assert topo["irqs"] == [] and "irqs" in topo["absent"]
    assert any("CPU0 CPU1" in w for w in topo["warnings"])


def test_roots_that_are_not_nodes(tmp_path: Path) -> None:
    with pytest.raises(RootError, match="does not exist"):
        discover(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(RootError, match="neither sys/ nor proc/"):
        discover(str(tmp_path / "empty"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(RootError, match="not a directory"):
        discover(str(tmp_path / "file"))


def test_old_kernels_mask_only_siblings_and_no_global_online(tmp_path: Path) -> None:
    for c in range(4):
        mask = (1 << (c % 2)) | (4 << (c % 2))  # siblings N and N+2, as a hex mask (no _list file)
        write(tmp_path, f"sys/devices/system/cpu/cpu{c}/topology/thread_siblings", f"{mask:08x}\n")
        if c:
            write(tmp_path, f"sys/devices/system/cpu/cpu{c}/online", "0\n" if c == 3 else "1\n")
    topo = discover(str(tmp_path))
    assert [c["thread_siblings"] for c in topo["cpus"]] == [[0, 2], [1, 3], [0, 2], [1, 3]]
    assert [c["online"] for c in topo["cpus"]] == [True, True, True, False]  # cpu0: no file, cannot go offline
    assert topo["cpu_lists"]["online"] is None
    assert any("cpu/online is absent" in w for w in topo["warnings"])


def test_pci_attributes_are_read_in_one_batch_per_attribute_set(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Devices holding the same attribute files are read together (one shared directory opened, each file relative to
    it), with the same answers as one device at a time."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.discover import devices as discover_devices
    from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root

    expected = discover(str(node))["pci_devices"]
    batches = []
    real_batch = Root.read_attrs_many

    def spy(self: Root, rel_dirs: list[str], names: tuple[str, ...], mode_name: str | None = None) -> list:
        batches.append((list(rel_dirs), tuple(names)))
        return real_batch(self, rel_dirs, names, mode_name)

    monkeypatch.setattr(Root, "read_attrs_many", spy)
    devices, dirs = discover_devices.read_pci_devices(Root(str(node)), [])
    monkeypatch.undo()
    assert devices == expected
    attribute_batches = [(rel_dirs, names) for rel_dirs, names in batches if not rel_dirs[0].endswith("/link")]
    sets = {tuple(a for a in discover_devices._PCI_ATTRS if (node / d / a).exists()) for d in dirs.values()}
    assert len(attribute_batches) == len(sets) < len(dirs)
    assert sorted(d for rel_dirs, _names in attribute_batches for d in rel_dirs) == sorted(dirs.values())


def test_irq_texts_parsed_once_still_warn_per_file_and_give_separate_lists(node: Path) -> None:
    """IRQ affinity texts are parsed once per discovery: a bad one still warns for every file that holds it, and
    IRQs with the same text get lists of their own (a caller may change one)."""
    irqs = sorted(int(n) for n in os.listdir(node / "proc/irq") if n.isdigit())
    numbers, shared = irqs[:2], irqs[2:4]
    for number in shared:
        (node / f"proc/irq/{number}/smp_affinity_list").write_text("0-1\n")
    for number in numbers:
        (node / f"proc/irq/{number}/smp_affinity_list").write_text("0-x\n")
        (node / f"proc/irq/{number}/effective_affinity_list").write_text("1-y\n")
    topo = discover(str(node))
    for number in numbers:
        for name in ("smp_affinity_list", "effective_affinity_list"):
            assert sum(f"proc/irq/{number}/{name}" in w for w in topo["warnings"]) == 1, (number, name)
    same = [i["smp_affinity_list"] for i in topo["irqs"] if i["irq"] in shared]
    assert same == [[0, 1], [0, 1]] and same[0] is not same[1]
