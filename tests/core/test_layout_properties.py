"""Properties of the layout planner over generated topologies (tests/support/topogen.py).

Each property is checked against the generator's own truth (``_truth``: the real cores, the node of each
device), not against a re-computation of the planner's logic.
"""

from __future__ import annotations

import copy
import json
import os

from ansible_collections.nodetune.instinct.plugins.module_utils.parse import format_cpulist
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import LayoutError, plan
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import topogen

# NODETUNE_HYPOTHESIS_EXAMPLES=2000 for a deeper run than the default suite's.
SETTINGS = settings(max_examples=int(os.environ.get("NODETUNE_HYPOTHESIS_EXAMPLES", "60")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

policies = st.fixed_dictionaries({
    "housekeeping": st.integers(0, 2),
    "smt": st.sampled_from(["keep", "offline_siblings", "control_off"]),
    "irq_cores": st.sampled_from(["auto", "auto", 0, 2]),
    "irqbalance": st.sampled_from(["disable", "ban"]),
    "too_few_cores": st.sampled_from(["error", "share"]),
})


def truth_node_cpus(topo: dict) -> dict[int, set[int]]:
    nodes: dict[int, set[int]] = {}
    for node in topo["numa_nodes"]:
        nodes[node["id"]] = set(node["cpus"])
    return nodes


def primaries(topo: dict) -> set[int]:
    """The lowest online thread of every true core."""
    online = set(topo["cpu_lists"]["online"])
    return {min(t for t in core if t in online) for core in topo["_truth"]["cores"] if any(t in online for t in core)}


def ranks_per_node(topo: dict) -> dict[int, int]:
    counts: dict[int, int] = {}
    for bdf, node in topo["_truth"]["device_node"].items():
        if bdf in topo["_truth"]["partitions"]:
            counts[node] = counts.get(node, 0) + topo["_truth"]["partitions"][bdf]
    return counts


def too_few_cores(topo: dict, housekeeping: int) -> bool:
    cores_per_node = len(topo["_truth"]["cores"]) // len(topo["_truth"]["cpu_node_ids"])
    free = cores_per_node - min(housekeeping, cores_per_node)
    return any(count > free for count in ranks_per_node(topo).values())


def plan_checked(topo: dict, policy: dict) -> dict | None:
    """plan(), asserting that it refuses exactly the nodes that really have too few cores."""
    expected_error = policy["too_few_cores"] == "error" and too_few_cores(topo, policy["housekeeping"])
    try:
        layout = plan(topo, policy)
    except LayoutError as exc:
        assert expected_error, f"unexpected LayoutError on {topogen.describe(topo)}: {exc}"
        assert "too_few_cores" in str(exc) and "NUMA node" in str(exc)
        return None
    assert not expected_error, f"a node has more ranks than free cores, yet no error: {topogen.describe(topo)}"
    return layout


@SETTINGS
@given(topogen.topologies(), policies)
def test_rank_sets_are_numa_local_disjoint_and_even(topo, policy):
    layout = plan_checked(topo, policy)
    if layout is None:
        return
    truth = topo["_truth"]
    node_cpus = truth_node_cpus(topo)
    assert len(layout["ranks"]) == sum(truth["partitions"].values())
    seen: dict[int, int] = {}
    sizes: dict[int, set[int]] = {}
    prim = primaries(topo)
    for rank in layout["ranks"]:
        node = truth["device_node"][rank["gpu"]]
        assert rank["numa_node"] == node
        assert rank["cpus"], rank
        assert set(rank["cpus"]) <= node_cpus[node], (rank, node)
        assert set(rank["cpus"]) <= prim, "rank CPUs must be primary threads"
        assert not set(rank["cpus"]) & set(layout["housekeeping"]) or rank["shared"]
        assert "GOMP_CPU_AFFINITY" not in rank["env"], "libgomp would pin the rank to its first CPU"
        assert f"--preferred={node}" in rank["numactl"]
        assert f"--physcpubind={format_cpulist(rank['cpus'])}" in rank["numactl"]
        if not rank["shared"]:
            assert rank["env"]["OMP_NUM_THREADS"] == str(len(rank["cpus"]))
            for cpu in rank["cpus"]:
                assert cpu not in seen, f"CPU {cpu} in ranks {seen.get(cpu)} and {rank['rank']}"
                seen[cpu] = rank["rank"]
            sizes.setdefault(node, set()).add(len(rank["cpus"]))
    for node, node_sizes in sizes.items():
        assert len(node_sizes) == 1, f"uneven rank sets on node {node}: {node_sizes}"


@SETTINGS
@given(topogen.topologies(), policies)
def test_nic_irqs_go_to_online_local_primary_threads(topo, policy):
    layout = plan_checked(topo, policy)
    if layout is None:
        return
    truth = topo["_truth"]
    prim = primaries(topo)
    comp = {i["irq"]: i for i in topo["irqs"] if i["kind"] == "nic_comp"}
    placed = {e["irq"]: e for e in layout["irq_affinity"]}
    assert set(placed) == set(comp), "every completion vector is placed, nothing else"
    rank_cpus = {c for r in layout["ranks"] for c in r["cpus"]}
    numa = {n["node"]: n for n in layout["numa"]}
    per_nic: dict[str, list[int]] = {}
    for irq, entry in placed.items():
        device = comp[irq]["device"]
        assert entry["device"] == device
        [cpu] = entry["cpus"]
        assert cpu in truth["device_cpus"][device], f"IRQ {irq} of {device} on non-local CPU {cpu}"
        assert cpu in prim, f"IRQ {irq} on CPU {cpu}, which is not a primary thread"
        assert cpu not in layout["smt_offline"]
        if numa[entry["numa_node"]]["irq_mode"] == "reserved":
            assert cpu not in rank_cpus, f"IRQ {irq} on rank CPU {cpu} though IRQ cores were reserved"
        if numa[entry["numa_node"]]["irq_mode"] != "housekeeping":
            assert cpu not in layout["housekeeping"]
        per_nic.setdefault(device, []).append(cpu)
    for device, cpus in per_nic.items():
        node = truth["device_node"][device]
        pool = len(numa[node]["irq_cpus"])
        assert len(set(cpus)) == min(len(cpus), pool), f"{device}: vectors not one per core over {pool} cores"
    for irq in topo["irqs"]:
        if irq["kind"] == "nvme_queue":
            [managed] = [m for m in layout["managed_irqs"] if m["irq"] == irq["irq"]]
            assert managed["cpus"] == irq["effective_affinity_list"]
        if irq["kind"] in ("nic_async", "nvme_queue", "nvme_admin", "other"):
            assert irq["irq"] not in placed
    if policy["irqbalance"] == "ban":
        banned = set(layout["irqbalance"]["banned_cpulist"])
        assert set(layout["nic_irq_cpus"]) <= banned <= set(topo["cpu_lists"]["online"])
        gpu_placed = [e["irq"] for e in layout["gpu_irq_affinity"]]
        assert layout["irqbalance"]["banned_irqs"] == sorted(list(placed) + gpu_placed)


@SETTINGS
@given(topogen.topologies(), policies)
def test_each_gpu_vector_goes_to_a_core_of_its_own_rank(topo, policy):
    layout = plan_checked(topo, policy)
    if layout is None:
        return
    truth = topo["_truth"]
    node_cpus = truth_node_cpus(topo)
    prim = primaries(topo)
    vectors = {i["irq"]: i for i in topo["irqs"] if i["kind"] == "gpu"}
    assert len(vectors) == len(topo["gpus"]), "the generator gives each GPU its amdgpu vector"
    placed = {e["irq"]: e for e in layout["gpu_irq_affinity"]}
    assert set(placed) == set(vectors), "every GPU vector is placed, nothing else"
    first_rank = {}
    for rank in layout["ranks"]:
        first_rank.setdefault(rank["gpu"], rank)
    for irq, entry in placed.items():
        device = vectors[irq]["device"]
        rank = first_rank[device]
        [cpu] = entry["cpus"]
        assert entry["device"] == device and entry["rank"] == rank["rank"]
        assert cpu in rank["cpus"], f"GPU {device}'s vector on CPU {cpu}, outside its rank {rank['cpus']}"
        assert cpu in node_cpus[truth["device_node"][device]] and cpu in prim
        assert cpu not in layout["smt_offline"]
    # one GPU per core while the node's rank cores last (shared ranks draw on one pool)
    by_node: dict[int, list[int]] = {}
    for entry in placed.values():
        by_node.setdefault(entry["numa_node"], []).append(entry["cpus"][0])
    for node, cpus in by_node.items():
        pool = {c for r in layout["ranks"] if r["numa_node"] == node for c in r["cpus"]}
        assert len(set(cpus)) == min(len(cpus), len(pool)), f"node {node}: GPU vectors pile on {cpus}"


@SETTINGS
@given(topogen.topologies(max_gpus=4), st.sampled_from(["offline_siblings", "control_off"]))
def test_smt_keeps_exactly_one_online_thread_per_core_and_never_cpu0(topo, smt):
    layout = plan(topo, {"smt": smt, "too_few_cores": "share"})
    offline = set(layout["smt_offline"])
    assert 0 not in offline
    online = set(topo["cpu_lists"]["online"])
    smt_on = topo["smt"]["control"] == "on"
    if smt == "control_off" and smt_on:
        assert layout["smt_control"] == "off" and not offline
        return
    assert offline <= {c["id"] for c in topo["cpus"]}
    for core in topo["_truth"]["cores"]:
        remaining = [t for t in core if t in online and t not in offline]
        assert len(remaining) == 1, f"core {core} keeps {remaining} online (offline plan {sorted(offline)})"
        assert remaining[0] == min(t for t in core if t in online)
    if topo["smt"]["threads_per_core"] == 1:
        assert not offline and layout["smt_control"] is None


@SETTINGS
@given(topogen.topologies(), policies, st.integers(0, 2**16))
def test_deterministic_and_independent_of_input_order(topo, policy, seed):
    try:
        first = plan(topo, policy)
    except LayoutError as exc:
        try:
            plan(topogen.shuffled(topo, seed), policy)
        except LayoutError as again:
            assert str(again) == str(exc)
            return
        raise AssertionError("the shuffled topology planned, the original did not") from None
    again = plan(topo, policy)
    shuffled = plan(topogen.shuffled(topo, seed), policy)
    assert json.dumps(first) == json.dumps(again)
    assert json.dumps(first) == json.dumps(shuffled)


@SETTINGS
@given(topogen.topologies(max_gpus=6))
def test_rank_threads_all_adds_only_the_siblings_of_rank_cores(topo):
    layout = plan(topo, {"rank_threads": "all", "too_few_cores": "share"})
    online = set(topo["cpu_lists"]["online"])
    core_of = {t: tuple(core) for core in topo["_truth"]["cores"] for t in core}
    for rank in layout["ranks"]:
        cores = {core_of[c] for c in rank["cpus"]}
        assert set(rank["cpus"]) == {t for core in cores for t in core if t in online}
        assert rank["env"]["OMP_NUM_THREADS"] == str(len(cores)) or rank["shared"]


@SETTINGS
@given(topogen.topologies(), st.integers(0, 2))
def test_by_default_no_core_carries_more_than_its_share_of_its_nodes_nic_vectors(topo, housekeeping):
    """Issue 14.2: like mlnx-tools' set_irq_affinity_bynode.sh, the default spreads the completion vectors of each
    NUMA node round-robin over the node's cores: no core carries more than
    ceil(vectors of the node / (its cores - housekeeping cores)) where the node's NICs have as many vectors each.
    Each NIC starts at its own place and goes on by vector number (issue 24.7: so that a vector created later moves
    none), so NICs with unequal counts may overlap: then no core carries more than one vector of each NIC per
    round, sum of ceil(vectors of the NIC / free cores)."""
    layout = plan_checked(topo, {"housekeeping": housekeeping, "too_few_cores": "share"})
    if layout is None:
        return
    truth = topo["_truth"]
    node_of_cpu = {cpu: node for node, cpus in truth_node_cpus(topo).items() for cpu in cpus}
    cores_of_node: dict[int, int] = {}
    for core in truth["cores"]:
        node = node_of_cpu[core[0]]
        cores_of_node[node] = cores_of_node.get(node, 0) + 1
    vectors: dict[int, int] = {}
    per_nic: dict[int, dict[str, int]] = {}
    load: dict[int, int] = {}
    for irq in topo["irqs"]:
        if irq["kind"] == "nic_comp":
            node = truth["device_node"][irq["device"]]
            vectors[node] = vectors.get(node, 0) + 1
            nics = per_nic.setdefault(node, {})
            nics[irq["device"]] = nics.get(irq["device"], 0) + 1
    for entry in layout["irq_affinity"]:
        [cpu] = entry["cpus"]
        load[cpu] = load.get(cpu, 0) + 1
    for cpu, count in load.items():
        node = node_of_cpu[cpu]
        free = cores_of_node[node] - min(housekeeping, cores_of_node[node])
        if free == 0:  # only housekeeping cores: nowhere else to go
            continue
        counts = list(per_nic[node].values())
        bound = -(-vectors[node] // free) if len(set(counts)) == 1 else sum(-(-n // free) for n in counts)
        assert count <= bound, (f"CPU {cpu} carries {count} of node {node}'s {vectors[node]} vectors ({counts} per "
                                f"NIC); the bound over {free} cores is {bound}")


def without_vectors(topo: dict, keep: list[bool]) -> dict:
    """The node as it is before some completion vectors exist (mlx5 creates them on first use, Linux 6.5+): the
    NIC vectors whose ``keep`` flag is false are gone; the async vectors, created at probe, stay."""
    out = copy.deepcopy(topo)
    comp = iter(keep)
    out["irqs"] = [irq for irq in out["irqs"] if irq["kind"] != "nic_comp" or next(comp)]
    return out


@SETTINGS
@given(topogen.topologies(), policies, st.data())
def test_a_vectors_cpu_does_not_depend_on_which_other_vectors_exist(topo, policy, data):
    """Issue 24.7: the CPU planned for a completion vector is the same whether all of the node's vectors exist or
    any subset does, so a vector created later moves none already pinned; the rank cores do not change either."""
    layout = plan_checked(topo, policy)
    if layout is None:
        return
    count = sum(1 for irq in topo["irqs"] if irq["kind"] == "nic_comp")
    some = without_vectors(topo, data.draw(st.lists(st.booleans(), min_size=count, max_size=count), label="keep"))
    partial = plan(some, policy)
    full = {e["irq"]: e["cpus"] for e in layout["irq_affinity"]}
    assert set(e["irq"] for e in partial["irq_affinity"]) <= set(full)
    for entry in partial["irq_affinity"]:
        assert entry["cpus"] == full[entry["irq"]], (entry["name"], entry["cpus"], full[entry["irq"]])
    assert [r["cpus"] for r in partial["ranks"]] == [r["cpus"] for r in layout["ranks"]]
