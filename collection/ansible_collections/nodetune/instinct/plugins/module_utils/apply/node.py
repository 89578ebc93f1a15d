# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""One node, end to end, in one process: discover -> plan -> desired Settings.

The tune and verify modules both start here, so that a whole site.yml costs one module call per node for apply and
verify together (fleet cost is dominated by module round trips: the tune module audits in the same process), and so
that apply and verify compute the desired state with the very same code from the very same inputs.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Callable, Dict, List, Optional

from ansible_collections.nodetune.instinct.plugins.module_utils.plan import journal as journal_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import inventory as inventory_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import layout as layout_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import services as services_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import Context
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import Setting, SettingError
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.irq import read_affinities
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.structure import StructureStore
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.tuning import desired_settings


class NodeState(object):
    """The discovered Topology, the planned Layout and the desired Settings of one node."""

    def __init__(self, root: Root, topology: Dict[str, Any], layout: Dict[str, Any], context: Context,
                 settings: List[Setting], structure: Optional[StructureStore] = None) -> None:
        self.root = root
        self.topology = topology
        self.layout = layout
        self.context = context
        self.settings = settings
        self.structure = structure  # where the node's structure was taken from and kept (discover/structure.py)
        # the Settings' current values as the apply's plan read them (engine.apply ``readings``), for the audit of a
        # run that wrote nothing: set by the caller that knows nothing was written since, else None
        self.readings: Optional[Dict[int, Optional[str]]] = None

    @property
    def services(self) -> Any:
        return self.context.services


def policy_mapping(policy: Any) -> Dict[str, Any]:
    """``nodetune_layout_policy`` as a mapping. A JSON object given as text is read as one; a ``key=value`` string
    is refused: Ansible's dict coercion would turn ``housekeeping=1`` into a policy nobody wrote as a mapping."""
    if policy is None or policy == "":
        return {}
    if isinstance(policy, str) and policy.lstrip().startswith("{"):
        with contextlib.suppress(ValueError):
            policy = json.loads(policy)
    if not isinstance(policy, dict):
        raise SettingError(["nodetune_layout_policy=%r is not valid: expected a mapping such as {housekeeping: 1, "
                            "ranks: per_gcd} (valid settings: %s), not %s"
                            % (policy, ", ".join(layout_mod.POLICY_SETTINGS), type(policy).__name__)])
    return policy


def layout_policy(areas: Dict[str, Any], policy: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The planner policy, with the SMT and irqbalance choices taken from the area variables (one source)."""
    merged = dict(policy_mapping(policy))
    smt = (areas.get("smt") or {})
    if smt.get("nodetune_smt_enabled", True) is not False and smt.get("nodetune_smt_policy"):
        merged["smt"] = smt["nodetune_smt_policy"]
    irq = (areas.get("irq_affinity") or {})
    mode = irq.get("nodetune_irqbalance_mode")
    if irq.get("nodetune_irq_affinity_enabled", True) is not False and mode in layout_mod.IRQBALANCE_MODES:
        merged["irqbalance"] = mode
    return merged


def load(root_path: str, areas: Dict[str, Any], policy: Optional[Dict[str, Any]] = None,
         run_command: Optional[Callable] = None, persist: bool = True,
         expected_inventory: Optional[Dict[str, Any]] = None, persist_boot: bool = True,
         learned_inventory: Optional[Dict[str, Any]] = None, structure: Optional[StructureStore] = None) -> NodeState:
    """Discover, plan and build the desired Settings; raises SettingError/PolicyError on bad input.
    ``expected_inventory``: the declared ``nodetune_inventory_expected`` (raw), for the node-local checker;
    ``learned_inventory``: the expectation the fleet report learned from the group majority (raw), for it too;
    ``structure``: the node's structure store (the modules': the same Topology, with less read afresh)."""
    expected = inventory_mod.validate(expected_inventory)  # refused before discovery, and before any write
    learned = inventory_mod.validate_learned(learned_inventory)
    root = Root(root_path)
    root.check_node()
    # The node's structure: each current value is read where it is used (the Settings read theirs when they are
    # compared), and the IRQ counts by nothing planned or checked.
    topology = discover(root, irq_counts=False, structure=structure, values=False)
    try:
        layout = layout_mod.plan(topology, layout_policy(areas or {}, policy))
    except layout_mod.LayoutError as exc:
        raise SettingError([str(exc)]) from None
    read_placed_affinities(root, topology, layout)
    context = Context(root, topology, layout, services_mod.for_root(root, run_command),
                      journal_or_empty(root))
    settings = desired_settings(context, areas or {}, persist=persist, expected_inventory=expected,
                                persist_boot=persist_boot, learned_inventory=learned)
    return NodeState(root, topology, layout, context, settings, structure)


def read_placed_affinities(root: Root, topology: Dict[str, Any], layout: Dict[str, Any]) -> None:
    """The current values verify reads of the IRQs the Layout places (verify.layout_findings): where the kernel
    delivers each (effective_affinity_list), and, for one delivered outside its planned CPUs, what was asked
    (smp_affinity_list: asked and not moved yet is pending, not drift)."""
    planned = dict((entry["irq"], set(entry["cpus"])) for entry in layout.get("irq_affinity") or [])
    placed = [irq for irq in topology["irqs"] if irq["irq"] in planned]
    read_affinities(root, placed, topology["warnings"], ("effective_affinity_list",))
    outside = [irq for irq in placed if irq["effective_affinity_list"] is not None
               and not set(irq["effective_affinity_list"]) <= planned[irq["irq"]]]
    read_affinities(root, outside, topology["warnings"], ("smp_affinity_list",))


def with_managed_cpus(state: NodeState) -> Dict[str, Any]:
    """The Layout with where the kernel put each managed IRQ, their affinity files read now (a Topology discovered
    without values has none): what a module returns as its whole Layout (``return_layout``)."""
    by_number = dict((irq["irq"], irq) for irq in state.topology["irqs"])
    entries = state.layout.get("managed_irqs") or []
    read_affinities(state.root, [by_number[e["irq"]] for e in entries if e["irq"] in by_number],
                    state.topology["warnings"])
    for entry in entries:
        entry["cpus"], entry["source"] = layout_mod.managed_cpus(by_number.get(entry["irq"]) or {})
    return state.layout


def journal_or_empty(root: Root) -> Dict[str, Any]:
    """The node's journal for the builders (Context.journal); an empty one where it does not validate: apply
    refuses such a journal itself, before any write."""
    try:
        return journal_mod.load_journal(root)
    except journal_mod.JournalError:
        return {}


def layout_summary(layout: Dict[str, Any]) -> Dict[str, Any]:
    """The small part of the Layout worth printing per node in a fleet run."""
    return {
        "smt_control": layout.get("smt_control"),
        "smt_offline": len(layout.get("smt_offline") or []),
        "housekeeping": layout.get("housekeeping"),
        "ranks": len(layout.get("ranks") or []),
        "nic_irqs_pinned": len(layout.get("irq_affinity") or []),
        "managed_irqs": len(layout.get("managed_irqs") or []),
        "irqbalance": (layout.get("irqbalance") or {}).get("mode"),
    }
