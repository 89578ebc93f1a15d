"""The tune and verify modules' discovery leaves the IRQ counts out (issue 28 item 4: discovery's share of a no-op
run). Summing a /proc/interrupts row's per-CPU count columns (one "%10u " column per online CPU, kernel/irq/proc.c
show_interrupts) was most of the parse: 4.6 MB of counts on the lab MI300X node, 14 MB at 1,152 CPUs. Nothing the
modules plan or check reads ``counts_total``; ``nodetune discover`` and topology_facts still give it.
"""

from __future__ import annotations

from pathlib import Path

from ansible_collections.nodetune.instinct.plugins.module_utils.apply import node
from ansible_collections.nodetune.instinct.plugins.module_utils.discover import topology
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.irq import parse_interrupts
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.support.lab_vars import AREAS
from tests.support.specs import AUDIT_SPEC as SPEC


def without_counts(topo: dict) -> dict:
    return {**topo, "irqs": [{k: v for k, v in irq.items() if k != "counts_total"} for irq in topo["irqs"]]}


def test_the_modules_discovery_leaves_only_the_irq_counts_out(tmp_path: Path) -> None:
    simnode.build(SPEC, str(tmp_path / "node"))
    root = str(tmp_path / "node")
    full = topology.discover(root)
    lean = topology.discover(root, irq_counts=False)
    assert any(irq["counts_total"] for irq in full["irqs"])  # the simulated kernel counts interrupts
    assert [irq["counts_total"] for irq in lean["irqs"]] == [None] * len(full["irqs"])
    assert without_counts(lean) == without_counts(full)
    state = node.load(root, AREAS, {})
    assert state.topology["irqs"] and all(irq["counts_total"] is None for irq in state.topology["irqs"])
    # (node.load discovers without current values as well: tests/node/test_topology_values.py)
    assert without_counts(state.topology)["irqs"] == [
        dict(irq, smp_affinity_list=mine["smp_affinity_list"], effective_affinity_list=mine["effective_affinity_list"])
        for irq, mine in zip(without_counts(full)["irqs"], state.topology["irqs"], strict=True)]


def test_rows_that_are_not_fixed_width_keep_their_counts() -> None:
    text = ("           CPU0       CPU1\n"
            "  24:          5          7  IR-PCI-MSIX-0000:41:00.0    0-edge      mlx5_comp0@pci:0000:41:00.0\n"
            " NMI:          1          2   Non-maskable interrupts\n"
            " ERR:          3\n")
    full, lean = parse_interrupts(text)[1], parse_interrupts(text, counts=False)[1]
    assert [row["counts_total"] for row in full] == [12, 3, 3]
    assert [row["counts_total"] for row in lean] == [None, 3, 3]
    assert [(r["irq"], r["chip"], r["hwirq"], r["name"]) for r in lean] == [
        (r["irq"], r["chip"], r["hwirq"], r["name"]) for r in full]
