"""Discovery of the real captures in ../shared/fixtures/real, checked against INDEPENDENT oracles.

Oracles: hwloc's expected XML and console output shipped with the captures, ``lstopo --input`` run now,
util-linux's expected lscpu output, knit's irqaff.json, the facts stated in the ROCm capture's SOURCE.md,
and the 1,152-CPU /proc/interrupts header. The oracle parsers here (hwloc cpusets, lscpu's ``a-b:step``
lists) are written for the tests and share no code with discovery.
Everything skips with a clear reason where ../shared is absent (see tests/realdata.py).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import ABSENT_NAMES, discover

from tests import realdata

pytestmark = pytest.mark.real_fixtures

ALL_CAPTURES = sorted(realdata.CAPTURES) + ["rocm-kfd", "pcp-interrupts", "prometheus"]
TOP_KEYS = {"schema", "root", "cpus", "cpu_lists", "smt", "numa_nodes", "pci_devices", "gpus", "nics", "ib_devices",
            "block_devices", "irqs", "cpufreq", "cpuidle", "kernel", "iommu", "pcie_aspm", "irqbalance", "sysctl",
            "absent", "warnings", "l3_domains"}
_cache: dict[str, dict] = {}


def root_of(name: str) -> Path:
    if name == "rocm-kfd":
        return realdata.kfd_root()
    if name == "pcp-interrupts":
        return realdata.pcp_interrupts_root()
    if name == "prometheus":
        return realdata.prometheus_root()
    return realdata.capture_root(name)


def topo(name: str) -> dict:
    if name not in _cache:
        _cache[name] = discover(str(root_of(name)))
    return _cache[name]


# ------------------------------------------------------------------------------------------- independent oracles
def hwloc_cpuset(text: str) -> set[int]:
    """hwloc's cpuset string: comma-separated 32-bit hex words, most significant first, each ``0x``-prefixed,
    empty words meaning zero (``0x000000fc,,0x00fc0000``)."""
    value = 0
    for word in text.split(","):
        word = word[2:] if word.startswith("0x") else word
        value = (value << 32) | (int(word, 16) if word else 0)
    return {bit for bit in range(value.bit_length()) if value >> bit & 1}


def lscpu_list(text: str) -> set[int]:
    """lscpu's CPU lists: ``0-5,48-53`` and its stride form ``0-62:2`` (start-end:step)."""
    cpus: set[int] = set()
    for item in text.split(","):
        span, _, step = item.partition(":")
        low, _, high = span.partition("-")
        cpus.update(range(int(low), int(high or low) + 1, int(step or 1)))
    return cpus


class Hwloc:
    """What hwloc saw: PUs, NUMA node cpusets (by os_index), and the cpuset each PCI device hangs under."""

    def __init__(self, xml_text: str) -> None:
        tree = ET.fromstring(xml_text)
        parent = {child: node for node in tree.iter() for child in node}
        self.pus: set[int] = set()
        self.numa: dict[int, set[int]] = {}
        self.pci_locality: dict[str, set[int]] = {}
        self.machine: set[int] = set()
        self.l3: set[frozenset[int]] = set()  # cpusets of the level-3 caches (hwloc 2: L3Cache; 1.x: Cache depth 3)
        for obj in tree.iter("object"):
            kind = obj.get("type")
            if kind == "L3Cache" or (kind == "Cache" and obj.get("depth") == "3"):
                self.l3.add(frozenset(hwloc_cpuset(obj.get("cpuset", ""))))
            if kind == "Machine":
                self.machine = hwloc_cpuset(obj.get("cpuset", ""))
            elif kind == "PU":
                self.pus.add(int(obj.get("os_index", "-1")))
            elif kind == "NUMANode":
                self.numa[int(obj.get("os_index", "-1"))] = hwloc_cpuset(obj.get("cpuset", ""))
            elif kind == "PCIDev":
                up = parent[obj]
                while up.get("cpuset") is None:
                    up = parent[up]
                self.pci_locality[obj.get("pci_busid", "").lower()] = hwloc_cpuset(up.get("cpuset", ""))


def lstopo_xml(root: Path) -> str:
    if shutil.which("lstopo") is None:
        pytest.skip("lstopo (Debian package hwloc) is not installed: the lstopo oracle cannot run")
    result = subprocess.run(["lstopo", "--input-format", "fsroot", "--input", str(root), "--of", "xml", "-"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def check_against_hwloc(t: dict, hw: Hwloc) -> int:
    """CPU count, NUMA cpusets, L3 domains and PCI locality agree with hwloc; returns how many PCI devices were
    compared."""
    online = {c["id"] for c in t["cpus"] if c["online"]}
    assert hw.pus, "hwloc saw no PUs: the oracle is empty"
    assert online == hw.pus
    assert {frozenset(d) for d in t["l3_domains"]} == hw.l3, "L3 domains (cache/index3/shared_cpu_list)"
    ours = {n["id"]: set(n["cpus"]) for n in t["numa_nodes"]}
    assert set(ours) == set(hw.numa)
    for node_id, cpus in ours.items():
        if cpus:  # hwloc gives a CPU-less node the cpuset of the object it attaches to, not an empty one
            assert hw.numa[node_id] == cpus, f"NUMA node {node_id}"
    # hwloc hangs a PCI device under the smallest object covering its local CPUs: a NUMA node, a package,
    # or the machine (also where it has no locality information, e.g. captures without local_cpus masks).
    packages: dict[int, set[int]] = {}
    for cpu in t["cpus"]:
        if cpu["package"] is not None and cpu["online"]:
            packages.setdefault(cpu["package"], set()).add(cpu["id"])
    candidates = sorted([c for c in ours.values() if c] + list(packages.values()) + [online], key=len)
    compared = 0
    for dev in t["pci_devices"]:
        where = hw.pci_locality.get(dev["bdf"])
        if where is None or not dev["local_cpus"]:
            continue
        local = set(dev["local_cpus"]) & online
        assert local <= where, dev["bdf"]
        if where != hw.machine:
            expected = next(c for c in candidates if local <= c)
            assert where == expected, dev["bdf"]
            compared += 1
    return compared


# ------------------------------------------------------------------------------------------- every capture
@pytest.mark.parametrize("name", ALL_CAPTURES)
def test_every_capture_discovers_without_error(name: str) -> None:
    t = topo(name)
    assert set(t) == TOP_KEYS
    assert t["schema"] == 1
    assert set(t["absent"]) <= set(ABSENT_NAMES)
    lists = {"cpus": t["cpus"], "numa": t["numa_nodes"], "pci": t["pci_devices"], "gpus": t["gpus"],
             "infiniband": t["ib_devices"], "nics": t["nics"], "irqs": t["irqs"]}
    for absent_name, items in lists.items():
        assert (absent_name in t["absent"]) == (not items), absent_name
    text = json.dumps(t, sort_keys=False)
    assert json.dumps(discover(str(root_of(name)))) == text  # deterministic, byte-identical JSON
    for key, items in (("cpus", "id"), ("pci_devices", "bdf"), ("irqs", "irq"), ("numa_nodes", "id")):
        values = [item[items] for item in t[key]]
        assert values == sorted(values), key


# ------------------------------------------------------------------------------------------- hwloc shipped oracles
def test_hwloc_e5_matches_hwlocs_expected_xml() -> None:
    xml_text = realdata.real_file("hwloc-2s-e5-ib-nvme/32em64t-2n8c+dax+nvme+mic+dimms.xml").read_text()
    t = topo("hwloc-e5")
    compared = check_against_hwloc(t, Hwloc(xml_text))
    assert compared >= 30  # the capture's NIC, HCA, NVMe, Phi and chipset functions
    by_bdf = {d["bdf"]: d for d in t["pci_devices"]}
    assert by_bdf["0000:00:02.0"]["numa_node"] == -1  # the NVMe: kept as the kernel's "unknown"
    assert by_bdf["0000:82:00.0"]["numa_node"] == 1  # ConnectX-3 on node1 (SOURCE.md)


def test_hwloc_opteron_matches_hwlocs_expected_console() -> None:
    console = realdata.real_file("hwloc-opteron6276-4s-8n/64amd64-4s2n4ca2co.console").read_text()
    numa: dict[int, set[int]] = {}
    current = None
    for line in console.splitlines():
        node = re.search(r"NUMANode L#\d+ \(P#(\d+)", line)
        if node:
            current = int(node.group(1))
            numa[current] = set()
        pu = re.search(r"PU L#\d+ \(P#(\d+)\)", line)
        if pu and current is not None:
            numa[current].add(int(pu.group(1)))
    t = topo("hwloc-opteron")
    assert len(numa) == 8 and sum(len(c) for c in numa.values()) == 64
    assert {n["id"]: set(n["cpus"]) for n in t["numa_nodes"]} == numa
    assert len([c for c in t["cpus"] if c["online"]]) == 64
    node0 = next(n for n in t["numa_nodes"] if n["id"] == 0)
    assert node0["distances"] == {"0": 10, "1": 16, "2": 16, "3": 22, "4": 16, "5": 22, "6": 16, "7": 22}


# ------------------------------------------------------------------------------------------- lstopo at test time
LSTOPO_CAPTURES = ["knit", "nto", "hwloc-e5", "hwloc-opteron", "utillinux-epyc7451", "utillinux-x7550", "nri-4s",
                   "nri-server", "nri-desktop"]


@pytest.mark.parametrize("name", LSTOPO_CAPTURES)
def test_capture_agrees_with_lstopo(name: str) -> None:
    root = root_of(name)
    hw = Hwloc(lstopo_xml(root))
    check_against_hwloc(topo(name), hw)


def test_l3_domains_are_really_compared_on_captures_that_carry_caches() -> None:
    """Issue 14.3: the captures with cpuN/cache/ give non-empty L3 domains, equal to hwloc's L3 caches."""
    compared = []
    for name in LSTOPO_CAPTURES:
        hw = Hwloc(lstopo_xml(root_of(name)))
        if hw.l3:
            assert {frozenset(d) for d in topo(name)["l3_domains"]} == hw.l3, name
            compared.append(name)
    assert len(compared) >= 2, compared


def test_lstopo_pci_locality_is_really_compared_on_the_e5_capture() -> None:
    compared = check_against_hwloc(topo("hwloc-e5"), Hwloc(lstopo_xml(root_of("hwloc-e5"))))
    assert compared >= 5


# ------------------------------------------------------------------------------------------- lscpu
def lscpu_expected(rel: str) -> tuple[dict[str, str], list[tuple[int, int, int, int]]]:
    text = realdata.real_file(rel).read_text()
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith("#") and key not in fields:
            fields[key.strip()] = value.strip()
    sections = text.split("# CPU,Core,Socket,Node")
    rows = []
    for line in sections[-1].splitlines()[1:]:  # the last section uses physical ids (lscpu -p --physical)
        if line and not line.startswith("#"):
            cpu, core, socket, node = (int(v) for v in line.split(",")[:4])
            rows.append((cpu, core, socket, node))
    return fields, rows


@pytest.mark.parametrize(("name", "rel"), [
    ("utillinux-epyc7451", "utillinux-epyc7451-2s-8n/lscpu-x86_64-epyc_7451.expected"),
    ("utillinux-x7550", "utillinux-x7550-4s-sparse-nodes/lscpu-x86_64-64cpu.expected"),
])
def test_capture_agrees_with_lscpu(name: str, rel: str) -> None:
    fields, rows = lscpu_expected(rel)
    t = topo(name)
    cpus = [c for c in t["cpus"] if c["online"]]
    assert len(cpus) == int(fields["CPU(s)"])
    assert {c["id"] for c in cpus} == lscpu_list(fields["On-line CPU(s) list"])
    packages = {c["package"] for c in cpus}
    cores = {(c["package"], c["core_id"]) for c in cpus}
    assert len(packages) == int(fields["Socket(s)"])
    assert len(cores) // len(packages) == int(fields["Core(s) per socket"])
    assert t["smt"]["threads_per_core"] == int(fields["Thread(s) per core"])
    expected_nodes = {int(re.search(r"\d+", k).group()): lscpu_list(v)  # type: ignore[union-attr]
                      for k, v in fields.items() if re.fullmatch(r"NUMA node\d+ CPU\(s\)", k)}
    assert len(expected_nodes) == int(fields["NUMA node(s)"])
    assert {n["id"]: set(n["cpus"]) for n in t["numa_nodes"]} == expected_nodes
    ours = {c["id"]: c for c in cpus}
    assert {r[0] for r in rows} == set(ours)
    for cpu, core, socket, node in rows:
        assert (ours[cpu]["package"], ours[cpu]["core_id"], ours[cpu]["numa_node"]) == (socket, core, node), cpu


# ------------------------------------------------------------------------------------------- IRQs
def test_knit_irq_affinities_match_knits_irqaff() -> None:
    expected = {item["irq"]: item["affinity"]
                for item in json.loads(realdata.real_file("knit-dell-2s-cx4lx-xxv710/irqaff.json").read_text())}
    irqs = {i["irq"]: i for i in topo("knit")["irqs"]}
    common = set(irqs) & set(expected)
    assert len(common) >= 1100  # all numbered /proc/interrupts rows that have a /proc/irq/N directory
    for number in common:
        assert irqs[number]["smp_affinity_list"] == sorted(expected[number]), number


def test_knit_mlx5_vectors_are_owned_and_classified() -> None:
    irqs = topo("knit")["irqs"]
    mlx5 = [i for i in irqs if i["name"].startswith("mlx5_")]
    assert mlx5, "knit's /proc/interrupts lists mlx5 vectors (SOURCE.md)"
    for irq in mlx5:
        assert irq["device"] == re.search(r"@pci:(\S+)", irq["name"]).group(1)  # type: ignore[union-attr]
        assert irq["kind"] == ("nic_async" if "async" in irq["name"] else "nic_comp")
    nvme = [i for i in irqs if re.fullmatch(r"nvme\d+q\d+", i["name"])]
    assert nvme and all(i["managed"] is (not i["name"].endswith("q0")) for i in nvme)


def test_nto_irq_owners_come_from_the_chip_bdf() -> None:
    irqs = topo("nto")["irqs"]
    bdfs = {d["bdf"] for d in topo("nto")["pci_devices"]}
    with_chip_bdf = [i for i in irqs if i["chip"] and re.search(r"\d{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d", i["chip"])]
    assert len(with_chip_bdf) > 1000
    for irq in with_chip_bdf:
        assert irq["device"] in bdfs and irq["device"] in irq["chip"]


def test_pcp_interrupts_with_1152_cpu_columns() -> None:
    from ansible_collections.nodetune.instinct.plugins.module_utils.discover.irq import parse_interrupts

    text = realdata.read_bz2_text(realdata.PCP_INTERRUPTS)
    cpu_ids, rows = parse_interrupts(text)
    header = text.splitlines()[0].split()
    assert len(header) == 1152 and cpu_ids == list(range(1152))
    numbered = [r for r in rows if isinstance(r["irq"], int)]
    assert len(numbered) == 1034  # 1,057 lines - header - 22 summary rows (SOURCE.md and the file itself)
    assert all(r["ncounts"] == 1152 for r in numbered)
    lpfc = [r for r in numbered if r["name"].startswith("lpfc:")]
    assert len(lpfc) == 568 and all(r["chip"] == "IR-PCI-MSI" for r in lpfc)
    timer = next(r for r in numbered if r["irq"] == 0)
    first = text.splitlines()[1]
    assert timer["counts_total"] == sum(int(v) for v in first.split()[1:1153])
    t = topo("pcp-interrupts")
    assert len(t["irqs"]) == 1034 and "cpus" in t["absent"]


# ------------------------------------------------------------------------------------------- ROCm KFD
def test_rocm_kfd_capture_gives_eight_mi300x_with_63_partitions() -> None:
    t = topo("rocm-kfd")
    gpus = t["gpus"]
    # SOURCE.md: 8 MI300X in CPX mode, buses 05, 27, 47, 65 on CPU node 0 and 85, a7, c7, e5 on CPU node 1,
    # partitions as functions .0-.7 of one device, 63 partitions because bus e5 has only 7.
    assert [g["bdf"] for g in gpus] == [f"0000:{b}:00.0" for b in ("05", "27", "47", "65", "85", "a7", "c7", "e5")]
    assert {g["bdf"][5:7]: g["numa_node"] for g in gpus} == {"05": 0, "27": 0, "47": 0, "65": 0, "85": 1, "a7": 1,
                                                              "c7": 1, "e5": 1}
    assert sum(g["partitions"] for g in gpus) == 63
    assert [g["partitions"] for g in gpus] == [8] * 7 + [7]
    assert all(g["vendor"] == "amd" and g["device"] == "0x74a1" and g["name"] == "MI300X" for g in gpus)
    assert len({g["hive_id"] for g in gpus}) == 1 and gpus[0]["hive_id"]
    for gpu in gpus:  # one xGMI hive: every GPU reaches the seven others
        assert gpu["xgmi_peers"] == sorted(g["bdf"] for g in gpus if g is not gpu)
    assert "kfd" not in t["absent"] and "pci" in t["absent"]


def test_prometheus_composite_ib_and_block_files() -> None:
    t = topo("prometheus")
    ports = {(d["name"], p["port"]): p for d in t["ib_devices"] for p in d["ports"]}
    assert ports[("mlx5_0", 1)]["state"] == "ACTIVE"  # "4: ACTIVE" (SOURCE.md)
    assert ports[("mlx5_0", 1)]["rate_gbps"] == 25.0  # "25 Gb/sec (1X EDR)"
    sda = next(b for b in t["block_devices"] if b["name"] == "sda")
    assert sda["scheduler"] in sda["schedulers"] and sda["kind"] == "disk"
