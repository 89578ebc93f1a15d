"""Golden layouts of the lab's simulated MI250 and MI300X nodes (explained in docs/layout.md).

Each node is built from its spec in ``inventories/lab/specs`` with the simulated-node generator, discovered
like a real node, and planned with the default policy. The golden files hold a digest of the Layout (the
per-IRQ entries summarised per device) so that a change is readable in review. Regenerate after an intended
change with ``NODETUNE_UPDATE_GOLDEN=1`` and explain the difference in docs/layout.md.

Independently of the golden files, the spec's own facts are checked: each GPU's rank sits on the NUMA node
the spec gives the GPU, and each HCA's completion vectors on the node the spec gives the HCA.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import format_cpulist
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import plan

from tests.support import cache

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "inventories" / "lab" / "specs"
GOLDEN = Path(__file__).resolve().parents[1] / "support" / "golden"
NODES = ("mi250", "mi300x")


def compact(value):
    """Lists of CPU/IRQ ids as one string each, so the golden files read (and diff) line by line: a sorted set
    as a cpulist ("8-29"), an ordered sequence (vector -> CPU) as space-separated numbers."""
    if isinstance(value, dict):
        return {k: compact(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            if value == sorted(set(value)):
                return format_cpulist(value)
            return " ".join(str(v) for v in value)
        return [compact(v) for v in value]
    return value


def digest(layout: dict) -> dict:
    """The Layout with its per-IRQ lists summarised per device (vector -> CPU order kept)."""
    out = {k: v for k, v in layout.items()
           if k not in ("irq_affinity", "gpu_irq_affinity", "managed_irqs", "irq_left_alone")}
    pinned: dict[str, dict] = {}
    for entry in layout["irq_affinity"]:
        dev = pinned.setdefault(entry["device"], {"numa_node": entry["numa_node"], "irqs": [], "cpus": []})
        dev["irqs"].append(entry["irq"])
        dev["cpus"].extend(entry["cpus"])
    for dev in pinned.values():
        dev["irqs"] = format_cpulist(dev["irqs"])
    out["irq_affinity"] = pinned
    out["irq_affinity_reason_example"] = layout["irq_affinity"][0]["reason"] if layout["irq_affinity"] else None
    gpu_irqs = layout.get("gpu_irq_affinity") or []
    out["gpu_irq_affinity"] = {e["device"]: {"irq": e["irq"], "name": e["name"], "rank": e["rank"],
                                             "numa_node": e["numa_node"], "cpus": e["cpus"]} for e in gpu_irqs}
    out["gpu_irq_affinity_reason_example"] = gpu_irqs[0]["reason"] if gpu_irqs else None
    managed: dict[str, dict] = {}
    for entry in layout["managed_irqs"]:
        dev = managed.setdefault(str(entry["device"]), {"count": 0, "cpus": set()})
        dev["count"] += 1
        dev["cpus"].update(entry["cpus"] or [])
    out["managed_irqs"] = {k: {"count": v["count"], "cpus": format_cpulist(v["cpus"])} for k, v in managed.items()}
    out["irq_left_alone"] = [e["name"] for e in layout["irq_left_alone"]]
    return compact(out)


@pytest.fixture(scope="module")
def lab():
    missing = [n for n in NODES if not (SPECS / f"{n}.yml").is_file()]
    if missing:
        pytest.skip(f"lab specs missing: {', '.join(str(SPECS / (n + '.yml')) for n in missing)}")
    # about planning: the topologies discovered once per session (tests/support/cache.py)
    return {name: cache.topology(str(SPECS / f"{name}.yml")) for name in NODES}


@pytest.mark.parametrize("name", NODES)
def test_golden_layout(lab, name):
    got = json.loads(json.dumps(digest(plan(lab[name]))))
    path = GOLDEN / f"layout-{name}.json"
    if os.environ.get("NODETUNE_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert path.is_file(), f"{path} is missing: run with NODETUNE_UPDATE_GOLDEN=1 once and review it"
    want = json.loads(path.read_text())
    for key in sorted(set(want) | set(got)):
        assert got.get(key) == want.get(key), f"{name}: Layout key {key!r} differs from {path.name}"


@pytest.mark.parametrize("name", NODES)
def test_lab_layout_matches_the_spec(lab, name):
    spec = yaml.safe_load((SPECS / f"{name}.yml").read_text())
    topo = lab[name]
    layout = plan(topo)
    node_cpus = {n["id"]: set(n["cpus"]) for n in topo["numa_nodes"]}
    gpu_node = {g["bdf"]: g["numa_node"] for g in spec["gpus"]}
    assert sorted(r["gpu"] for r in layout["ranks"]) == sorted(gpu_node)
    for rank in layout["ranks"]:
        assert rank["numa_node"] == gpu_node[rank["gpu"]]
        assert set(rank["cpus"]) <= node_cpus[gpu_node[rank["gpu"]]]
    nic_node = {n["bdf"]: n["numa_node"] for n in spec["nics"]}
    for entry in layout["irq_affinity"]:
        assert entry["cpus"][0] in node_cpus[nic_node[entry["device"]]]
    hcas = {n["bdf"] for n in spec["nics"] if n["name"].startswith("ib")}
    assert hcas <= {e["device"] for e in layout["irq_affinity"]}
    # each GPU's amdgpu vector (one per PCI function) on a core of its own rank, on the GPU's node (issue 24.6)
    rank_of = {r["rank"]: r for r in layout["ranks"]}
    assert sorted(e["device"] for e in layout["gpu_irq_affinity"]) == sorted(gpu_node)
    for entry in layout["gpu_irq_affinity"]:
        rank = rank_of[entry["rank"]]
        assert entry["name"] == "amdgpu" and rank["gpu"] == entry["device"]
        assert entry["cpus"][0] in rank["cpus"] and entry["numa_node"] == gpu_node[entry["device"]]
    assert len({e["cpus"][0] for e in layout["gpu_irq_affinity"]}) == len(gpu_node), "two GPUs share a core"
    rank_cpus = [set(r["cpus"]) for r in layout["ranks"]]
    assert sum(map(len, rank_cpus)) == len(set().union(*rank_cpus)), "rank sets overlap"
    # NIC vectors spread over each node's non-housekeeping cores (issue 14.2): at most ceil(V / cores) per core
    # where the node's NICs have as many vectors each. Each NIC goes on by vector number from a start of its own
    # (issue 24.7: a vector created later moves no other), so NICs with unequal counts overlap (eno1's 8 beside
    # 63 on the MI300X node 0): then at most one vector of each NIC per core and round
    load: dict[int, int] = {}
    per_nic: dict[str, int] = {}
    for entry in layout["irq_affinity"]:
        load[entry["cpus"][0]] = load.get(entry["cpus"][0], 0) + 1
        per_nic[entry["device"]] = per_nic.get(entry["device"], 0) + 1
    for node in layout["numa"]:
        vectors = sum(load.get(cpu, 0) for cpu in node["cpus"])
        free = node["cores"] - len({c for c in node["housekeeping"]}) // (2 if spec["cpu"].get("smt") == "on" else 1)
        counts = [per_nic[bdf] for bdf in node["nic_devices"] if bdf in per_nic]
        bound = -(-vectors // free) if len(set(counts)) <= 1 else sum(-(-n // free) for n in counts)
        if vectors:
            assert max(load.get(cpu, 0) for cpu in node["cpus"]) <= bound, node["node"]
    # each rank inside whole L3 domains where the counts allow (issue 14.3): 8-core CCDs on both lab CPUs
    l3_of = {cpu: i for i, domain in enumerate(topo["l3_domains"]) for cpu in domain}
    assert l3_of, "the lab nodes model their L3 domains"
    for rank in layout["ranks"]:
        domains = {l3_of[cpu] for cpu in rank["cpus"]}
        assert len(domains) == -(-len(rank["cpus"]) // 8), (rank["rank"], rank["cpus"])
    owners: dict[int, set[int]] = {}
    for rank in layout["ranks"]:
        for cpu in rank["cpus"]:
            owners.setdefault(l3_of[cpu], set()).add(rank["rank"])
    assert all(len(ranks) == 1 for ranks in owners.values()), "two ranks share an L3 domain"
