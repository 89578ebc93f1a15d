"""The planner on real captures (../shared/fixtures/real, via tests/realdata.py; skipped where absent).

The captures have no GPUs, but they have the real shapes the planner must survive: sparse NUMA ids,
CPU-less nodes, cpumap-only nodes, SMT sibling numberings, and (knit) real ConnectX-4 Lx mlx5 vectors.
"""

from __future__ import annotations

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import plan

from tests import realdata

pytestmark = pytest.mark.real_fixtures

_topologies: dict[str, dict] = {}


def discovered(name: str) -> dict:
    if name not in _topologies:
        from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover

        _topologies[name] = discover(str(realdata.capture_root(name)))
    return _topologies[name]


@pytest.mark.parametrize("name", sorted(realdata.CAPTURES))
@pytest.mark.parametrize("policy", [{}, {"smt": "offline_siblings", "irqbalance": "ban", "housekeeping": 2}])
def test_every_capture_plans_with_its_invariants(name, policy):
    topo = discovered(name)
    layout = plan(topo, policy)
    cpus = {c["id"]: c for c in topo["cpus"]}
    online = {c for c, cpu in cpus.items() if cpu["online"]}
    assert 0 not in layout["smt_offline"]
    assert set(layout["smt_offline"]) <= set(cpus)
    # every core (as the kernel's thread_siblings say) keeps exactly one online thread
    offline = set(layout["smt_offline"])
    for cpu in topo["cpus"]:
        siblings = [s for s in (cpu["thread_siblings"] or []) if s in online]
        hotpluggable = all(cpus[s]["hotpluggable"] for s in siblings if s != min(siblings, default=0))
        if siblings and policy.get("smt") == "offline_siblings" and hotpluggable:
            assert [s for s in siblings if s not in offline] == [min(siblings)]
    housekeeping = set(layout["housekeeping"])
    for entry in layout["irq_affinity"]:
        [cpu] = entry["cpus"]
        assert cpu in online and cpu not in offline and cpu not in housekeeping
    nodes_with_cpus = [n["id"] for n in topo["numa_nodes"] if n["cpus"]]
    assert [n["node"] for n in layout["numa"] if not n["memory_only"]] == (nodes_with_cpus or [0])


def test_knit_mlx5_completion_vectors_go_to_their_numa_node():
    topo = discovered("knit")
    layout = plan(topo)
    node_of = {c["id"]: c["numa_node"] for c in topo["cpus"]}
    mlx5 = [e for e in layout["irq_affinity"] if e["name"].startswith("mlx5_comp")]
    assert len(mlx5) == 126  # 2 ConnectX-4 Lx ports x 63 completion vectors
    assert {e["device"] for e in mlx5} == {"0000:19:00.0", "0000:19:00.1"}
    # both ports sit on NUMA node 0 (even CPUs on this Dell); their IRQs go there, primary threads only
    assert {node_of[e["cpus"][0]] for e in mlx5} == {0}
    assert all(e["cpus"][0] < 52 for e in mlx5)
    assert 0 not in {e["cpus"][0] for e in mlx5}  # CPU0's core is housekeeping
    # one vector per core: all 25 non-housekeeping cores of node 0 take some
    assert len({e["cpus"][0] for e in mlx5}) == 25
    async_vectors = [e for e in layout["irq_left_alone"] if e["name"].startswith("mlx5_async")]
    assert len(async_vectors) == 2
    nvme = [m for m in layout["managed_irqs"] if m["name"].startswith("nvme0q")]
    assert nvme and all(m["cpus"] and m["source"] == "effective_affinity_list" for m in nvme)


def test_knit_managed_irqs_report_where_the_kernel_put_them():
    root = realdata.capture_root("knit")
    layout = plan(discovered("knit"))
    for entry in layout["managed_irqs"][:8]:
        text = (root / "proc" / "irq" / str(entry["irq"]) / "effective_affinity_list").read_text().strip()
        assert entry["cpus"] == [int(x) for x in text.split(",")] or "-" in text
