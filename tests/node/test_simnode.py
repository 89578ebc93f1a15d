"""Simulated nodes (module_utils/simnode/): trees that look real to nodetune and to an independent reader.

The expectations here come from the specs and from how the kernel lays things out (sibling numbering N and
N+cores, NPS quadrants, 32-bit mask words, mlx5/NVMe vector placement), never from the generator's own tables.
``lstopo --input`` (hwloc) is the independent oracle for CPUs, NUMA nodes, caches and PCI locality.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import parse_cpulist, parse_cpumask
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests import realdata
from tests.support.specs import small_spec
from tests.support.trees import runtime_tree_digest as tree_digest

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "inventories" / "lab" / "specs"
CORES = {"EPYC 7763": 64, "EPYC 9654": 96}  # AMD's data sheets
LAB = ("mi250", "mi300x")


# ------------------------------------------------------------------------------------------------ helpers
def raw_spec(name: str) -> dict:
    return yaml.safe_load((SPECS / f"{name}.yml").read_text())


def layout(spec: dict) -> dict:
    """CPU numbering and NUMA membership as the kernel shows them on EPYC, computed from the raw spec."""
    cpu = spec["cpu"]
    sockets = cpu["sockets"]
    cores = cpu.get("cores_per_socket", CORES[cpu["model"]])
    threads = 2 if cpu.get("smt", "on") in ("on", True) else 1
    nps = spec.get("numa", {}).get("per_socket", 1)
    nodes: dict[int, set[int]] = {}
    package: dict[int, set[int]] = {}
    for t in range(threads):
        for s in range(sockets):
            for c in range(cores):
                cid = t * sockets * cores + s * cores + c  # siblings are N and N + sockets*cores
                nodes.setdefault(s * nps + c // (cores // nps), set()).add(cid)
                package.setdefault(s, set()).add(cid)
    return {"cpus": sockets * cores * threads, "cores": sockets * cores, "sockets": sockets, "nodes": nodes,
            "packages": package}


def read(root: Path, rel: str) -> str:
    return (root / rel).read_text()


def interrupts(root: Path) -> tuple[list[str], dict[int, dict]]:
    lines = read(root, "proc/interrupts").splitlines()
    header = lines[0].split()
    rows = {}
    for line in lines[1:]:
        head, _, rest = line.partition(":")
        if not head.strip().isdigit():
            continue
        fields = rest.split()
        counts = fields[:len(header)]
        tail = fields[len(header):]
        rows[int(head)] = {"counts": counts, "chip": tail[0], "name": " ".join(tail[2:]), "fields": len(fields)}
    return header, rows


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """Both lab nodes, built once per module; value: name -> (root, seconds the build took).

    Built in memory (/dev/shm) where the host has it, like the kernel's own sysfs: a 384-CPU node is ~39,000
    small files, which a busy disk turns from one second into many.
    """
    scratch = _memory_scratch() or tmp_path_factory.mktemp("lab")
    built = {}
    try:
        for name in LAB:
            dest = scratch / name
            start = time.perf_counter()
            simnode.build(simnode.load_spec(str(SPECS / f"{name}.yml")), str(dest))
            built[name] = (dest, time.perf_counter() - start)
        yield built
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _memory_scratch() -> Path | None:
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)) or shutil.disk_usage(shm).free < 2 << 30:
        return None
    return Path(tempfile.mkdtemp(prefix="nodetune-simnode-test-", dir=shm))


@pytest.fixture
def scratch(tmp_path):
    """A per-test folder for trees, in memory where possible (see ``lab``)."""
    memory = _memory_scratch()
    if memory is None:
        yield tmp_path
        return
    try:
        yield memory
    finally:
        shutil.rmtree(memory, ignore_errors=True)


@pytest.fixture
def tiny(scratch):
    dest = scratch / "tiny"
    simnode.build(small_spec(), str(dest))
    return dest


def lstopo_xml(root: Path) -> ET.Element:
    if shutil.which("lstopo") is None:
        pytest.skip("lstopo (hwloc) is not installed: apt-get install hwloc to compare simulated nodes with it")
    done = subprocess.run(["lstopo", "--input", str(root), "--of", "xml", "--whole-io", "--filter", "osdev:all"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return ET.fromstring(done.stdout)


def hwloc_set(text: str) -> set[int]:
    """hwloc bitmap text ('0xffffffff,,0x0000000f': 32-bit words, most significant first, empty = 0)."""
    value = 0
    for word in text.split(","):
        value = (value << 32) | (int(word, 16) if word else 0)
    return {bit for bit in range(value.bit_length()) if value >> bit & 1}


# ------------------------------------------------------------------------------------------------ lstopo agrees
@pytest.mark.parametrize("name", LAB)
def test_lstopo_sees_the_cpus_numa_nodes_and_caches_of_the_spec(lab, name):
    root, _ = lab[name]
    spec = raw_spec(name)
    expected = layout(spec)
    xml = lstopo_xml(root)
    objects = list(xml.iter("object"))
    pus = {int(o.get("os_index")) for o in objects if o.get("type") == "PU"}
    assert pus == set(range(expected["cpus"]))
    assert len([o for o in objects if o.get("type") == "Core"]) == expected["cores"]
    packages = {int(o.get("os_index")): hwloc_set(o.get("cpuset")) for o in objects if o.get("type") == "Package"}
    assert packages == expected["packages"]
    numa = {int(o.get("os_index")): hwloc_set(o.get("cpuset")) for o in objects if o.get("type") == "NUMANode"}
    assert numa == expected["nodes"]
    # EPYC shares one L3 per 8-core CCX/CCD
    l3 = [o for o in objects if o.get("type") == "L3Cache"]
    assert len(l3) == expected["cores"] // 8
    assert all(len(hwloc_set(o.get("cpuset"))) == 8 * (expected["cpus"] // expected["cores"]) for o in l3)


@pytest.mark.parametrize("name", LAB)
def test_lstopo_places_every_gpu_nic_and_nvme_under_its_numa_node(lab, name):
    root, _ = lab[name]
    spec = raw_spec(name)
    xml = lstopo_xml(root)
    parent = {child: node for node in xml.iter() for child in node}
    by_bdf = {o.get("pci_busid"): o for o in xml.iter("object") if o.get("type") == "PCIDev"}

    def locality(obj):
        node = parent[obj]
        while node.get("nodeset") is None:
            node = parent[node]
        return hwloc_set(node.get("nodeset"))

    def os_devices(obj):
        return {o.get("name") for o in obj.iter("object") if o.get("type") == "OSDev"}

    classes = {"gpus": ("0380", "1200"), "nics": ("0207", "0200"), "nvme": ("0108",)}
    checked = 0
    for kind, devices in (("gpus", spec["gpus"]), ("nics", spec["nics"]), ("nvme", spec["nvme"])):
        for dev in devices:
            obj = by_bdf.get(dev["bdf"])
            assert obj is not None, f"lstopo does not see {kind} {dev['bdf']}"
            assert locality(obj) == {dev["numa_node"]}, f"{dev['bdf']} is not under NUMA node {dev['numa_node']}"
            assert obj.get("pci_type").split()[0] in classes[kind]
            if kind == "nics":
                assert dev["name"] in os_devices(obj)
            checked += 1
    assert checked == len(spec["gpus"]) + len(spec["nics"]) + len(spec["nvme"])
    # each NVMe controller carries its namespace, each IB NIC its HCA, each GPU its DRM nodes
    assert all(any(n.startswith("nvme") for n in os_devices(by_bdf[d["bdf"]])) for d in spec["nvme"])
    assert all(any(n.startswith("mlx5_") for n in os_devices(by_bdf[d["bdf"]]))
               for d in spec["nics"] if d["model"].startswith("ConnectX"))
    assert all(any(n.startswith("card") for n in os_devices(by_bdf[d["bdf"]])) for d in spec["gpus"])


@pytest.mark.parametrize(("name", "gbps"), [("mi250", 31.5), ("mi300x", 63.0)])
def test_lstopo_reads_gpu_link_speed_from_config_space(lab, name, gbps):
    """PCIe Gen4 x16 carries ~31.5 GB/s, Gen5 x16 ~63 GB/s (128b/130b): hwloc reads it from config space."""
    root, _ = lab[name]
    xml = lstopo_xml(root)
    gpus = {d["bdf"] for d in raw_spec(name)["gpus"]}
    speeds = [float(o.get("pci_link_speed")) for o in xml.iter("object") if o.get("pci_busid") in gpus]
    assert len(speeds) == len(gpus) and all(abs(s - gbps) < 0.1 for s in speeds)


# ------------------------------------------------------------------------------------------------ discovery agrees
@pytest.mark.parametrize("name", LAB)
def test_discover_finds_what_the_spec_describes(lab, name):
    topology = pytest.importorskip("ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology")
    root, _ = lab[name]
    spec = raw_spec(name)
    expected = layout(spec)
    topo = topology.discover(str(root))
    assert topo["warnings"] == []
    assert topo["absent"] == []
    assert len(topo["cpus"]) == expected["cpus"]
    assert {n["id"]: set(n["cpus"]) for n in topo["numa_nodes"]} == expected["nodes"]
    assert {g["bdf"]: g["numa_node"] for g in topo["gpus"]} == {g["bdf"]: g["numa_node"] for g in spec["gpus"]}
    assert all(len(g["xgmi_peers"]) == len(spec["gpus"]) - 1 for g in topo["gpus"])
    assert {n["name"]: (n["bdf"], n["numa_node"]) for n in topo["nics"]} == \
        {n["name"]: (n["bdf"], n["numa_node"]) for n in spec["nics"]}
    ib = [n for n in spec["nics"] if n["model"].startswith("ConnectX")]
    assert len(topo["ib_devices"]) == len(ib)
    nvme = sorted((b["bdf"], b["numa_node"]) for b in topo["block_devices"] if b["kind"] == "nvme")
    assert nvme == sorted((d["bdf"], d["numa_node"]) for d in spec["nvme"])
    kinds: dict[str, int] = {}
    for irq in topo["irqs"]:
        kinds[irq["kind"]] = kinds.get(irq["kind"], 0) + 1
    queues = sum(b["hw_queues"] for b in topo["block_devices"] if b["kind"] == "nvme")
    assert kinds["nvme_queue"] == queues and kinds["nvme_admin"] == len(spec["nvme"])
    mlx5_comp = [i for i in topo["irqs"] if i["kind"] == "nic_comp" and i["name"].startswith("mlx5_comp")]
    assert len(mlx5_comp) == 63 * len(ib) and kinds["nic_async"] == len(ib)  # mlx5: min(CPUs, 63) per function
    assert kinds["gpu"] == len(spec["gpus"])
    assert all(i["managed"] for i in topo["irqs"] if i["kind"] == "nvme_queue")
    assert not any(i["managed"] for i in topo["irqs"] if i["kind"] == "nic_comp")


# ------------------------------------------------------------------------------------------------ kernel file shapes
def test_cpu_tree_has_the_kernel_shape(lab):
    root, _ = lab["mi250"]
    cpu = root / "sys/devices/system/cpu"
    assert not (cpu / "cpu0/online").exists()  # x86 >= 6.5: CPU0 is not hotpluggable
    assert read(root, "sys/devices/system/cpu/cpu1/online") == "1\n"
    assert read(root, "sys/devices/system/cpu/cpu0/topology/thread_siblings_list") == "0,128\n"
    assert read(root, "sys/devices/system/cpu/cpu200/topology/physical_package_id") == "1\n"
    assert read(root, "sys/devices/system/cpu/online") == "0-255\n"
    assert read(root, "sys/devices/system/cpu/smt/control") == "on\n"
    assert read(root, "sys/devices/system/cpu/cpu7/cpufreq/scaling_governor") == "schedutil\n"
    assert read(root, "sys/devices/system/cpu/cpu7/cpufreq/scaling_driver") == "acpi-cpufreq\n"
    assert not (cpu / "amd_pstate").exists()
    names = [read(root, f"sys/devices/system/cpu/cpu9/cpuidle/state{i}/name").strip() for i in range(3)]
    assert names == ["POLL", "C1", "C2"]
    assert os.path.realpath(cpu / "cpu20/node1") == str((root / "sys/devices/system/node/node1").resolve())
    assert read(root, "sys/devices/system/node/node1/cpulist") == "16-31,144-159\n"
    assert read(root, "sys/devices/system/node/node0/distance").split() == ["10", "12", "12", "12", "32", "32", "32",
                                                                             "32"]
    assert read(root, "sys/devices/system/cpu/isolated") == "\n"


def test_amd_pstate_epp_node(lab):
    root, _ = lab["mi300x"]
    assert read(root, "sys/devices/system/cpu/amd_pstate/status") == "active\n"
    policy = "sys/devices/system/cpu/cpu383/cpufreq/"
    assert read(root, policy + "scaling_driver") == "amd-pstate-epp\n"
    assert read(root, policy + "scaling_available_governors").split() == ["performance", "powersave"]
    assert read(root, policy + "scaling_governor") == "powersave\n"
    assert read(root, policy + "energy_performance_preference") == "balance_performance\n"
    assert "balance_power" in read(root, policy + "energy_performance_available_preferences").split()


def test_masks_use_the_kernel_word_format(scratch):
    """112 CPUs (2x28 cores, SMT): a real Ice Lake capture prints cpu1's siblings {1,57} as below."""
    spec = small_spec(cpu__cores_per_socket=28, cpu__cores_per_l3=28, gpus=[], nics=[], nvme=[])
    simnode.build(spec, str(scratch / "n"))
    text = read(scratch / "n", "sys/devices/system/cpu/cpu1/topology/thread_siblings").strip()
    assert text == "0000,00000000,02000000,00000002"
    if realdata.real_available():
        real = realdata.capture_root("nto") / "sys/devices/system/cpu/cpu1/topology/thread_siblings"
        assert real.read_text().strip() == text


def test_interrupts_table_and_irq_files(lab):
    root, _ = lab["mi300x"]
    header, rows = interrupts(root)
    assert header == [f"CPU{c}" for c in range(384)]
    assert all(len(r["counts"]) == 384 and all(c.isdigit() for c in r["counts"]) for r in rows.values())
    names = {r["name"]: irq for irq, r in rows.items()}
    assert "mlx5_async0@pci:0000:03:00.0" in names and "mlx5_comp62@pci:0000:03:00.0" in names
    assert "mlx5_comp63@pci:0000:03:00.0" not in names
    for index in range(8):
        controller = f"nvme{index}"
        queues = [irq for name, irq in names.items() if name.startswith(controller + "q") and name != controller + "q0"]
        disk = root / f"sys/block/{controller}n1"
        assert len(queues) == len(os.listdir(disk / "mq"))  # one hardware queue per vector
        bdf = os.path.basename(os.path.realpath(root / f"sys/class/nvme/{controller}/device"))
        msi = {int(n) for n in os.listdir(root / f"sys/bus/pci/devices/{bdf}/msi_irqs")}
        assert msi == set(queues) | {names[controller + "q0"]}
    nvme_q1 = root / "proc/irq" / str(names["nvme0q1"])
    mlx5 = root / "proc/irq" / str(names["mlx5_comp0@pci:0000:03:00.0"])
    assert stat.S_IMODE((nvme_q1 / "smp_affinity").stat().st_mode) == 0o444  # managed, kernel >= 6.12
    assert stat.S_IMODE((nvme_q1 / "smp_affinity_list").stat().st_mode) == 0o444
    assert stat.S_IMODE((mlx5 / "smp_affinity").stat().st_mode) == 0o644
    assert stat.S_IMODE((mlx5 / "smp_affinity_list").stat().st_mode) == 0o644
    for irq_dir in (nvme_q1, mlx5):
        cpus = parse_cpulist(read(irq_dir, "smp_affinity_list"))
        assert parse_cpumask(read(irq_dir, "smp_affinity")) == cpus
        assert read(irq_dir, "smp_affinity").count(",") == 384 // 32 - 1
        assert int(read(irq_dir, "effective_affinity_list")) in cpus


def test_managed_nvme_vectors_partition_the_cpus_node_by_node(lab):
    root, _ = lab["mi250"]
    _, rows = interrupts(root)
    node_of = {}
    for node, cpus in layout(raw_spec("mi250"))["nodes"].items():
        node_of.update({c: node for c in cpus})
    masks = [parse_cpulist(read(root, f"proc/irq/{irq}/smp_affinity_list"))
             for irq, r in rows.items() if r["name"].startswith("nvme3q") and r["name"] != "nvme3q0"]
    seen = [c for mask in masks for c in mask]
    assert sorted(seen) == list(range(256))  # every CPU exactly once
    assert all(len({node_of[c] for c in mask}) == 1 for mask in masks)  # a vector never spans NUMA nodes
    assert all(len(mask) == 4 for mask in masks)  # 256 CPUs over 64 queues
    hctx0 = read(root, "sys/block/nvme3n1/mq/0/cpu_list").replace(",", " ").split()
    assert sorted(int(c) for c in hctx0) == sorted(masks[0])


def test_mlx5_completion_vectors_start_on_the_hca_numa_node(lab):
    root, _ = lab["mi250"]
    _, rows = interrupts(root)
    node1 = layout(raw_spec("mi250"))["nodes"][1]  # ib0 shares a switch with GPU package 0 on NUMA node 1
    comp = {int(r["name"].split("@")[0][len("mlx5_comp"):]): irq for irq, r in rows.items()
            if r["name"].startswith("mlx5_comp") and r["name"].endswith("@pci:0000:23:00.0")}
    assert len(comp) == 63
    first = [parse_cpulist(read(root, f"proc/irq/{comp[i]}/smp_affinity_list")) for i in range(len(node1))]
    assert all(len(cpus) == 1 for cpus in first)
    assert {cpus[0] for cpus in first} == node1


def test_kfd_topology_matches_the_gpus(lab):
    root, _ = lab["mi250"]
    spec = raw_spec("mi250")
    base = root / "sys/class/kfd/kfd/topology/nodes"
    props = {}
    for node in os.listdir(base):
        props[int(node)] = dict(line.split() for line in (base / node / "properties").read_text().splitlines())
    gpu_nodes = {n: p for n, p in props.items() if int(p["simd_count"]) > 0}
    assert len(props) - len(gpu_nodes) == 8  # one KFD CPU node per NUMA node (NPS4)
    bdfs = {}
    for node, p in gpu_nodes.items():
        loc = int(p["location_id"])
        bdfs[node] = f"{int(p['domain']):04x}:{loc >> 8:02x}:{(loc >> 3) & 0x1f:02x}.{loc & 7}"
        assert int(p["device_id"]) == 0x740c
        assert int((base / str(node) / "gpu_id").read_text()) != 0
    assert sorted(bdfs.values()) == sorted(g["bdf"] for g in spec["gpus"])
    assert len({p["hive_id"] for p in gpu_nodes.values()}) == 1
    package = {g["bdf"]: g["package"] for g in spec["gpus"]}
    numa = {g["bdf"]: g["numa_node"] for g in spec["gpus"]}
    for node in gpu_nodes:
        links = [dict(line.split() for line in (p / "properties").read_text().splitlines())
                 for p in (base / str(node) / "io_links").iterdir()]
        xgmi = [link for link in links if link["type"] == "11"]
        pcie = [link for link in links if link["type"] == "2"]
        assert len(xgmi) == 7 and len(pcie) == 1 and int(pcie[0]["node_to"]) == numa[bdfs[node]]
        same = [int(x["weight"]) for x in xgmi if package[bdfs[int(x["node_to"])]] == package[bdfs[node]]]
        other = [int(x["weight"]) for x in xgmi if package[bdfs[int(x["node_to"])]] != package[bdfs[node]]]
        assert len(same) == 1 and max(same) < min(other)  # the other GCD of the package is the closest peer


def test_gpu_pci_bars_drm_and_hwmon(lab):
    root, _ = lab["mi300x"]
    dev = root / "sys/bus/pci/devices/0000:05:00.0"
    assert read(dev, "class") == "0x120000\n" and read(dev, "vendor") == "0x1002\n"
    start = int(read(dev, "resource").split()[0], 16)
    assert start >= 1 << 32  # Above 4G decoding: the VRAM BAR is mapped high
    assert read(dev, "current_link_speed") == "32.0 GT/s PCIe\n" and read(dev, "max_link_width") == "16\n"
    assert read(dev, "numa_node") == "0\n"
    assert os.path.basename(os.readlink(dev / "driver")) == "amdgpu"
    card = root / "sys/class/drm/card1/device"
    assert os.path.realpath(card) == os.path.realpath(dev)
    hwmon = next((dev / "hwmon").iterdir())
    assert 20000 <= int(read(hwmon, "temp2_input")) <= 100000  # millidegrees
    assert 10 ** 6 <= int(read(hwmon, "power1_average")) <= 1000 * 10 ** 6  # microwatts
    # amdgpu_pm.c never shows an MI300X's (GC 9.4.3) edge sensor; its limits from 6.7 on (the spec runs 6.12)
    assert not list(hwmon.glob("temp1_*")) and read(hwmon, "temp2_label") == "junction\n"
    assert {p.name for p in hwmon.glob("temp*_[ce][rm]*")} == {"temp2_crit", "temp2_emergency", "temp3_crit",
                                                                "temp3_emergency"}
    # gpu_metrics: the binary table amdgpu returns, v1.7 on MI300X (smu_v13_0_6), v1.3 on MI250 (aldebaran)
    assert (dev / "gpu_metrics").read_bytes()[:4] == (2208).to_bytes(2, "little") + bytes([1, 7])
    mi250 = lab["mi250"][0] / "sys/bus/pci/devices/0000:26:00.0"
    assert (mi250 / "gpu_metrics").read_bytes()[:4] == (120).to_bytes(2, "little") + bytes([1, 3])
    assert read(next((mi250 / "hwmon").iterdir()), "temp1_label") == "edge\n"
    assert read(mi250, "ras/xgmi_wafl_err_count") == "ue: 0\nce: 0\n"


def test_infiniband_and_ethernet(lab):
    root, _ = lab["mi250"]
    net = root / "sys/class/net/ib0"
    assert read(net, "type") == "32\n" and read(net, "mode") == "datagram\n" and read(net, "mtu") == "2044\n"
    assert read(net, "operstate") == "up\n" and read(net, "dev_port") == "0\n"
    assert os.path.basename(os.path.realpath(net / "device")) == "0000:23:00.0"
    assert read(net, "device/vendor") == "0x15b3\n" and read(net, "device/device") == "0x101b\n"
    port = root / "sys/class/infiniband/mlx5_0/ports/1"
    assert read(port, "state") == "4: ACTIVE\n" and read(port, "phys_state") == "5: LinkUp\n"
    assert read(port, "rate") == "200 Gb/sec (4X HDR)\n" and read(port, "link_layer") == "InfiniBand\n"
    assert os.path.realpath(root / "sys/class/infiniband/mlx5_0/device") == os.path.realpath(net / "device")
    eno = root / "sys/class/net/eno1"
    assert read(eno, "type") == "1\n" and read(eno, "device/numa_node") == "0\n"
    ndr, _ = lab["mi300x"]
    assert read(ndr, "sys/class/infiniband/mlx5_7/ports/1/rate") == "400 Gb/sec (4X NDR)\n"


def test_nvme_block_queue(lab):
    root, _ = lab["mi250"]
    queue = root / "sys/block/nvme0n1/queue"
    assert read(queue, "scheduler") == "[none] mq-deadline kyber bfq\n"
    assert read(queue, "nr_requests") == "1023\n" and read(queue, "rotational") == "0\n"
    assert int(read(queue, "read_ahead_kb")) > 0 and int(read(queue, "max_hw_sectors_kb")) > 0
    assert not (queue / "nr_queues").exists()  # the seed's knob does not exist
    assert os.path.realpath(root / "sys/block/nvme0n1/device") == os.path.realpath(root / "sys/class/nvme/nvme0")
    assert read(root, "sys/class/nvme/nvme0/device/class") == "0x010802\n"


def test_links_are_relative_and_stay_inside_the_tree(lab):
    root, _ = lab["mi250"]
    real_root = str(root.resolve())
    count = 0
    for dirpath, _dirs, files in os.walk(root / "sys"):
        for name in files + _dirs:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                target = os.readlink(path)
                assert not target.startswith("/"), path
                assert os.path.realpath(path).startswith(real_root + os.sep), path
                assert os.path.exists(path), f"dangling link {path} -> {target}"
                count += 1
    assert count > 1000
    link = os.readlink(root / "sys/bus/pci/devices/0000:23:00.0")
    assert link.startswith("../../../devices/pci0000:20/")


def test_system_files_and_kernel_defaults(lab):
    root, _ = lab["mi300x"]
    assert read(root, "proc/sys/vm/dirty_ratio") == "20\n" and read(root, "proc/sys/vm/dirty_bytes") == "0\n"
    assert read(root, "proc/sys/vm/dirty_background_ratio") == "10\n"
    assert read(root, "proc/sys/kernel/numa_balancing") == "1\n"
    assert read(root, "proc/sys/net/core/rmem_max") == "212992\n"
    assert read(root, "proc/sys/net/ipv4/tcp_rmem") == "4096\t131072\t6291456\n"
    thresholds = [int(read(root, f"proc/sys/net/ipv4/neigh/default/gc_thresh{i}")) for i in (1, 2, 3)]
    assert thresholds == [128, 512, 1024]
    assert read(root, "proc/sys/kernel/osrelease") == "6.12.0-55.9.1.el10_0.x86_64\n"
    assert "amd_iommu=on iommu=pt" in read(root, "proc/cmdline")
    assert read(root, "sys/module/pcie_aspm/parameters/policy") == "[default] performance powersave powersupersave\n"
    assert len(os.listdir(root / "sys/class/iommu")) == 8 and len(os.listdir(root / "sys/kernel/iommu_groups")) > 50
    assert read(root, "proc/cpuinfo").count("processor\t:") == 384
    assert "model name\t: AMD EPYC 9654 96-Core Processor" in read(root, "proc/cpuinfo")


@pytest.mark.parametrize(("name", "config"), [("mi250", "etc/default/irqbalance"),
                                              ("mi300x", "etc/sysconfig/irqbalance")])
def test_irqbalance_installed_enabled_and_running(lab, name, config):
    root, _ = lab[name]
    assert "IRQBALANCE_BANNED_CPULIST" in read(root, config)
    assert (root / "usr/lib/systemd/system/irqbalance.service").is_file()
    wants = root / "etc/systemd/system/multi-user.target.wants/irqbalance.service"
    assert os.readlink(wants) == "/usr/lib/systemd/system/irqbalance.service"
    assert os.path.lexists(root / "run/systemd/units/invocation:irqbalance.service")
    comms = [p / "comm" for p in (root / "proc").iterdir() if p.name.isdigit()]
    assert [c.read_text() for c in comms] == ["irqbalance\n"]


def test_services_layer_reads_the_simulated_irqbalance(tiny):
    services = pytest.importorskip("ansible_collections.nodetune.lab.plugins.module_utils.simservices")
    rootfs = pytest.importorskip("ansible_collections.nodetune.instinct.plugins.module_utils.rootfs")
    sim = services.SimServices(rootfs.Root(str(tiny)))
    assert sim.installed("irqbalance.service")
    assert sim.state("irqbalance.service") == {"enabled": "yes", "active": "yes"}


UNIT = "irqbalance.service"


def test_a_masked_unit_is_not_enabled_as_systemd_says(scratch):
    """systemd.unit(5): an empty unit file or a link to /dev/null in /etc/systemd/system (or /run) masks the unit,
    and ``systemctl is-enabled`` says ``masked`` even with its wants link in place; nodetune-check reads it so."""
    services = pytest.importorskip("ansible_collections.nodetune.lab.plugins.module_utils.simservices")
    rootfs = pytest.importorskip("ansible_collections.nodetune.instinct.plugins.module_utils.rootfs")
    from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_check

    simnode.build(small_spec(), str(scratch / "n"))
    root = scratch / "n"
    sim = services.SimServices(rootfs.Root(str(root)))
    assert sim.state("irqbalance.service")["enabled"] == "yes"
    unit = root / "etc/systemd/system/irqbalance.service"
    unit.write_text("")
    assert sim.state("irqbalance.service")["enabled"] == "no" == node_check.unit_enabled(str(root), UNIT)
    unit.unlink()
    (root / "run/systemd/system").mkdir(parents=True, exist_ok=True)
    (root / "run/systemd/system/irqbalance.service").symlink_to("/dev/null")
    assert sim.state("irqbalance.service")["enabled"] == "no" == node_check.unit_enabled(str(root), UNIT)
    (root / "run/systemd/system/irqbalance.service").unlink()
    assert sim.state("irqbalance.service")["enabled"] == "yes"


# ------------------------------------------------------------------------------------------------ spec options
def test_smt_off_at_boot_keeps_siblings_present_but_offline(scratch):
    simnode.build(small_spec(cpu__smt="off"), str(scratch / "n"))
    root = scratch / "n"
    assert read(root, "sys/devices/system/cpu/smt/control") == "off\n"
    assert read(root, "sys/devices/system/cpu/smt/active") == "0\n"
    assert read(root, "sys/devices/system/cpu/online") == "0-15\n"
    assert read(root, "sys/devices/system/cpu/offline") == "16-31\n"
    assert read(root, "sys/devices/system/cpu/cpu16/online") == "0\n"
    assert not (root / "sys/devices/system/cpu/cpu16/topology").exists()  # offline CPUs lose topology/
    assert read(root, "sys/devices/system/cpu/cpu0/topology/thread_siblings_list") == "0\n"  # 16 is offline
    assert read(root, "sys/devices/system/cpu/cpu0/topology/core_siblings_list") == "0-7\n"
    assert os.path.islink(root / "sys/devices/system/cpu/cpu16/node0")  # the node link stays
    header, rows = interrupts(root)
    assert header == [f"CPU{c}" for c in range(16)]  # one column per *online* CPU
    assert read(root, "proc/cpuinfo").count("processor\t:") == 16


def test_smt_disabled_in_bios_halves_the_cpus(scratch):
    simnode.build(small_spec(cpu__smt="notsupported", cpu__threads_per_core=1), str(scratch / "n"))
    root = scratch / "n"
    assert read(root, "sys/devices/system/cpu/smt/control") == "notsupported\n"
    assert read(root, "sys/devices/system/cpu/possible") == "0-15\n"
    assert read(root, "sys/devices/system/cpu/cpu3/topology/thread_siblings_list") == "3\n"


def test_older_kernel_keeps_managed_irq_files_writable_and_global_msi_chip(scratch):
    simnode.build(small_spec(kernel__release="5.15.0-76-generic"), str(scratch / "n"))
    root = scratch / "n"
    _, rows = interrupts(root)
    q1 = next(irq for irq, r in rows.items() if r["name"] == "nvme0q1")
    assert stat.S_IMODE((root / f"proc/irq/{q1}/smp_affinity").stat().st_mode) == 0o644  # EIO on write instead
    assert rows[q1]["chip"] == "IR-PCI-MSI"
    assert read(root, "sys/bus/pci/devices/0000:05:00.0/current_link_speed") == "32.0 GT/s PCIe\n"


def test_spec_sysctls_cmdline_isolation_and_adjacent_numbering(scratch):
    spec = small_spec(sysctl={"vm.dirty_ratio": 40, "net.ipv4.tcp_rmem": "4096 87380 16777216"},
                      kernel__cmdline="BOOT_IMAGE=/vmlinuz ro isolcpus=managed_irq,domain,4-7 nohz_full=4-7",
                      cpu__numbering="adjacent")
    simnode.build(spec, str(scratch / "n"))
    root = scratch / "n"
    assert read(root, "proc/sys/vm/dirty_ratio") == "40\n"
    assert read(root, "proc/sys/net/ipv4/tcp_rmem") == "4096\t87380\t16777216\n"
    assert read(root, "sys/devices/system/cpu/isolated") == "4-7\n"
    assert read(root, "sys/devices/system/cpu/nohz_full") == "4-7\n"
    assert read(root, "sys/devices/system/cpu/cpu0/topology/thread_siblings_list") == "0-1\n"


def test_caches_can_be_left_out_without_changing_the_topology(scratch):
    simnode.build(small_spec(cpu__caches=False), str(scratch / "n"))
    root = scratch / "n"
    assert not (root / "sys/devices/system/cpu/cpu0/cache").exists()
    xml = lstopo_xml(root)
    objects = list(xml.iter("object"))
    assert len([o for o in objects if o.get("type") == "PU"]) == 32
    assert {int(o.get("os_index")): hwloc_set(o.get("cpuset")) for o in objects if o.get("type") == "NUMANode"} == \
        layout(small_spec())["nodes"]
    assert not [o for o in objects if o.get("type", "").endswith("Cache")]


def test_pci_numa_unknown_device(scratch):
    spec = small_spec()
    spec["nvme"][0]["numa_node"] = -1  # firmware without proximity information
    simnode.build(spec, str(scratch / "n"))
    dev = scratch / "n/sys/bus/pci/devices/0000:41:00.0"
    assert read(dev, "numa_node") == "-1\n"
    assert read(dev, "local_cpulist") == "0-31\n"


# ------------------------------------------------------------------------------------------------ validation
@pytest.mark.parametrize(("changes", "expected"), [
    ({"cpu__sockets": 0}, ["cpu.sockets", "0", "expected an integer from 1 to 8"]),
    ({"cpu__socket": 2}, ["cpu", "unknown key 'socket'", "sockets"]),
    ({"numa__per_socket": 3}, ["numa.per_socket", "3", "NPS1, NPS2 or NPS4"]),
    ({"cpu__cpufreq": {"driver": "amd-pstate-epp", "governor": "schedutil"}},
     ["cpu.cpufreq.governor", "'schedutil'", "performance, powersave"]),
    ({"cpu__cpufreq": {"driver": "amd-pstate-epp", "governor": "performance", "epp": "power"}},
     ["cpu.cpufreq.epp", "'power'", "locks EPP"]),
    ({"cpu__cpufreq": {"driver": "acpi-cpufreq", "epp": "power"}}, ["cpu.cpufreq.epp", "amd-pstate-epp"]),
    ({"os__family": "Arch"}, ["os.family", "'Arch'", "Debian, RedHat"]),
    ({"sysctl": {"vm.dirty_ratoi": 10}}, ["sysctl", "unknown key 'vm.dirty_ratoi'", "vm.dirty_ratio"]),
    ({"sysctl": {"vm.dirty_ratio": "lots"}}, ["sysctl.vm.dirty_ratio", "'lots'", "non-negative integer"]),
    ({"cpu__smt": "maybe"}, ["cpu.smt", "'maybe'", "on, off, forceoff, notsupported"]),
])
def test_spec_errors_name_field_value_and_what_is_valid(changes, expected):
    with pytest.raises(simnode.SpecError) as caught:
        simnode.load_spec(small_spec(**changes))
    message = str(caught.value)
    for part in expected:
        assert part in message, message


@pytest.mark.parametrize(("section", "index", "update", "expected"), [
    ("gpus", 0, {"bdf": "05:00"}, ["gpus[0].bdf", "'05:00'", "domain:bus:device.function"]),
    ("gpus", 0, {"numa_node": 3}, ["gpus[0].numa_node", "bus 0x05", "NUMA node 0"]),
    ("gpus", 0, {"model": "MI100"}, ["gpus[0].model", "'MI100'", "MI250, MI300X"]),
    ("nics", 0, {"mtu": 4096}, ["nics[0].mtu", "4096", "at most 4092", "4-byte IPoIB header"]),
    ("nics", 0, {"mode": "connected"}, ["nics[0].mode", "'connected'", "datagram only"]),
    ("nics", 0, {"name": "ib0; rm -rf /"}, ["nics[0].name", "network interface name"]),
    ("nics", 2, {"rate": "10 Gb/sec"}, ["nics[2].rate", "InfiniBand only"]),
    ("nvme", 0, {"bdf": "0000:04:00.0"}, ["nvme[0].bdf", "falls inside the bus range 0x01-0x05"]),
    ("nvme", 0, {"bdf": "0000:40:00.0"}, ["nvme[0].bdf", "root bus"]),
    ("nvme", 1, {"bdf": "0000:05:00.0"}, ["nvme[1].bdf", "already used by gpus[0]"]),
    ("nvme", 0, {"link": {"speed": 64}}, ["nvme[0].link.speed", "maximum is 32 GT/s"]),
])
def test_device_errors_name_field_value_and_what_is_valid(section, index, update, expected):
    spec = small_spec()
    spec[section][index].update(update)
    with pytest.raises(simnode.SpecError) as caught:
        simnode.load_spec(spec)
    message = str(caught.value)
    for part in expected:
        assert part in message, message


def test_spec_reports_every_error_at_once_and_rejects_non_mappings(tmp_path):
    with pytest.raises(simnode.SpecError) as caught:
        simnode.load_spec(small_spec(cpu__sockets=99, memory_gb=-1, name="bad name"))
    assert str(caught.value).count("\n  - ") == 3
    with pytest.raises(simnode.SpecError, match="top level must be a mapping"):
        simnode.load_spec(str(_write(tmp_path / "list.yml", "- a\n- b\n")))
    with pytest.raises(simnode.SpecError, match="cannot be read"):
        simnode.load_spec(str(tmp_path / "missing.yml"))
    with pytest.raises(simnode.SpecError, match="not valid YAML"):
        simnode.load_spec(str(_write(tmp_path / "bad.yml", "cpu: [unclosed\n")))
    with pytest.raises(simnode.SpecError, match="expected a mapping or a file path"):
        simnode.load_spec(42)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", LAB)
def test_lab_specs_are_valid_and_normalisation_is_stable(name):
    spec = simnode.load_spec(str(SPECS / f"{name}.yml"))
    assert simnode.load_spec(spec) == spec  # the marker's spec reloads to itself (reboot, idempotence)


# ------------------------------------------------------------------------------------------------ build safety
def test_build_refuses_the_real_root_and_foreign_directories(scratch):
    with pytest.raises(simnode.SimNodeError, match="real root"):
        simnode.build(small_spec(), "/")
    with pytest.raises(simnode.SimNodeError, match="real root"):
        simnode.build(small_spec(), "/tmp/../")
    foreign = scratch / "home"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("precious")
    with pytest.raises(simnode.SimNodeError, match="not a simulated node"):
        simnode.build(small_spec(), str(foreign))
    assert os.listdir(foreign) == ["thesis.tex"]
    file_dest = scratch / "file"
    file_dest.write_text("x")
    with pytest.raises(simnode.SimNodeError, match="not a directory"):
        simnode.build(small_spec(), str(file_dest))
    with pytest.raises(simnode.SimNodeError, match="refusing to delete"):
        simnode.remove(str(foreign))
    assert sorted(os.listdir(scratch)) == ["file", "home"]  # no staging leftovers


def test_build_accepts_empty_dirs_and_replaces_only_simulated_trees(scratch):
    empty = scratch / "empty"
    empty.mkdir()
    simnode.build(small_spec(), str(empty))
    assert simnode.read_marker(str(empty))["spec"] == simnode.load_spec(small_spec())
    (empty / "etc/extra.conf").write_text("from a role")
    simnode.build(small_spec(name="tiny2"), str(empty))
    assert not (empty / "etc/extra.conf").exists()
    assert read(empty, "etc/hostname") == "tiny2\n"
    with pytest.raises(simnode.SpecError):
        simnode.build(small_spec(cpu__sockets=0), str(empty))
    assert read(empty, "etc/hostname") == "tiny2\n"  # a failed build leaves the old tree
    assert sorted(os.listdir(scratch)) == ["empty"]
    assert simnode.remove(str(empty)) is True and not empty.exists()
    assert simnode.remove(str(empty)) is False


def test_builds_are_deterministic(scratch):
    simnode.build(small_spec(), str(scratch / "a"))
    simnode.build(small_spec(), str(scratch / "b"))
    tops = ("sys", "proc", "run", "etc", "usr", "var")
    assert tree_digest(scratch / "a", tops) == tree_digest(scratch / "b", tops)


def test_build_speed_of_the_384_cpu_node_is_reported(lab, record_property, capsys):
    root, seconds = lab["mi300x"]
    entries = sum(len(dirs) + len(files) for _, dirs, files in os.walk(root))
    record_property("simnode_build_seconds_384_cpus", round(seconds, 3))
    record_property("simnode_entries_384_cpus", entries)
    with capsys.disabled():
        print(f"\nsimnode: built the 384-CPU MI300X node ({entries} entries) in {seconds:.2f} s")
    assert entries > 10000


# ------------------------------------------------------------------------------------------------ reboot
BOOT_ID = "proc/sys/kernel/random/boot_id"
UUID4 = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\n"


def without_boot_id(digest: dict) -> dict:
    return {path: value for path, value in digest.items() if path != BOOT_ID}


def test_reboot_restores_runtime_files_and_keeps_persistent_ones(tiny, scratch):
    fresh = scratch / "fresh"
    simnode.build(small_spec(), str(fresh))
    cpu = tiny / "sys/devices/system/cpu"
    (cpu / "cpu3/cpufreq/scaling_governor").write_text("performance\n")
    (cpu / "cpu5/online").write_text("0\n")
    (tiny / "proc/sys/vm/dirty_ratio").write_text("5\n")
    (tiny / "sys/block/nvme0n1/queue/scheduler").write_text("none [mq-deadline] kyber bfq\n")
    _, rows = interrupts(tiny)
    comp = next(irq for irq, r in rows.items() if r["name"].startswith("mlx5_comp0@"))
    (tiny / f"proc/irq/{comp}/smp_affinity_list").write_text("7\n")
    os.unlink(tiny / "sys/devices/system/cpu/cpu2/cpuidle/state2/disable")
    (tiny / "sys/stray").write_text("left by a test")
    (tiny / "etc/nodetune.conf").write_text("kept\n")
    (tiny / "var/lib/nodetune").mkdir(parents=True)
    (tiny / "var/lib/nodetune/journal.json").write_text("{}")
    assert tree_digest(tiny) != tree_digest(fresh)

    preview = simnode.reboot(str(tiny), check_only=True)
    assert "proc/sys/vm/dirty_ratio" in preview["changed"] and "sys/stray" in preview["changed"]
    assert read(tiny, "proc/sys/vm/dirty_ratio") == "5\n"  # check_only wrote nothing

    boot_ids = [read(tiny, BOOT_ID)]
    result = simnode.reboot(str(tiny))
    assert set(preview["changed"]) == set(result["changed"])
    boot_ids.append(read(tiny, BOOT_ID))
    # the tree of a fresh build, but for the boot_id the kernel draws at every boot (drivers/char/random.c)
    assert without_boot_id(tree_digest(tiny)) == without_boot_id(tree_digest(fresh))
    assert read(tiny, "etc/nodetune.conf") == "kept\n"
    assert read(tiny, "var/lib/nodetune/journal.json") == "{}"
    assert simnode.reboot(str(tiny))["changed"] == []  # a second reboot finds nothing to reset
    boot_ids.append(read(tiny, BOOT_ID))
    assert len(set(boot_ids)) == 3 and read(fresh, BOOT_ID) == boot_ids[0]
    assert all(re.fullmatch(UUID4, b) for b in boot_ids)
    assert stat.S_IMODE(os.stat(tiny / BOOT_ID).st_mode) == 0o444


def test_the_boot_id_is_as_the_running_kernel_prints_it(tiny):
    """The simulated boot_id against this machine's (drivers/char/random.c: a version 4 UUID drawn once per boot,
    proc_do_uuid, in a 0444 file): the same mode and shape, the same on every read of one boot."""
    host = Path("/proc/sys/kernel/random/boot_id")
    if not host.is_file():
        pytest.skip("this machine has no /proc/sys/kernel/random/boot_id (not Linux, or /proc not mounted)")
    simulated = tiny / BOOT_ID
    assert stat.S_IMODE(os.stat(simulated).st_mode) == stat.S_IMODE(os.stat(host).st_mode) == 0o444
    assert re.fullmatch(UUID4, host.read_text()) and host.read_text() == host.read_text()
    assert re.fullmatch(UUID4, simulated.read_text())


def test_reboot_applies_what_the_boot_applies(tiny):
    (tiny / "etc/sysctl.d/90-nodetune.conf").write_text(
        "# nodetune\nvm.dirty_ratio = 30\nkernel/numa_balancing=0\n-net.core.no_such_key = 1\n")
    (tiny / "etc/udev/rules.d/60-nodetune-nvme.rules").write_text(
        'ACTION=="add|change", KERNEL=="nvme[0-9]*n[0-9]*", ATTR{queue/scheduler}="mq-deadline", '
        'ATTR{queue/nr_requests}="2048"\n')
    (tiny / "etc/modprobe.d/nvme.conf").write_text("options nvme poll_queues=2 io_queue_depth=2048\n")
    os.unlink(tiny / "etc/systemd/system/multi-user.target.wants/irqbalance.service")  # disabled, still running
    assert os.path.lexists(tiny / "run/systemd/units/invocation:irqbalance.service")

    result = simnode.reboot(str(tiny))
    assert read(tiny, "proc/sys/vm/dirty_ratio") == "30\n"
    assert read(tiny, "proc/sys/kernel/numa_balancing") == "0\n"
    assert any("no_such_key" in note for note in result["notes"])
    for disk in ("nvme0n1", "nvme1n1"):
        assert read(tiny, f"sys/block/{disk}/queue/scheduler") == "none [mq-deadline] kyber bfq\n"
        assert read(tiny, f"sys/block/{disk}/queue/nr_requests") == "2048\n"
        assert read(tiny, f"sys/block/{disk}/mq/0/nr_tags") == "2047\n"  # io_queue_depth 2048
    assert read(tiny, "sys/module/nvme/parameters/poll_queues") == "2\n"
    _, rows = interrupts(tiny)
    io_vectors = [r for r in rows.values() if r["name"].startswith("nvme1q") and r["name"] != "nvme1q0"]
    assert len(io_vectors) == 6  # max 8 queues, 2 of them polled (no IRQ)
    assert len(os.listdir(tiny / "sys/block/nvme1n1/mq")) == 8
    assert not os.path.lexists(tiny / "run/systemd/units/invocation:irqbalance.service")
    assert not [p for p in (tiny / "proc").iterdir() if p.name.isdigit()]


def test_reboot_refuses_what_is_not_a_simulated_node(scratch):
    with pytest.raises(simnode.SimNodeError, match="not a simulated node"):
        simnode.reboot(str(scratch))
    with pytest.raises(simnode.SimNodeError, match="does not exist"):
        simnode.reboot(str(scratch / "nowhere"))
    with pytest.raises(simnode.SimNodeError, match="real root"):
        simnode.reboot("/")
