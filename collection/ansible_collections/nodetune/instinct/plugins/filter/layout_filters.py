# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Jinja2 filters over CPU lists, masks, the Topology fact and the Layout.

Thin wrappers: the parsing lives in module_utils/parse.py and the planning in module_utils/plan/layout.py, so
that a playbook, the CLI and the modules on the nodes compute the same thing. Each filter is documented in
the YAML file of its name next to this one (``ansible-doc -t filter nodetune.instinct.<name>``).
Errors become AnsibleFilterError with the planner's message, which names the bad value and what is valid.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ansible.errors import AnsibleFilterError

from ansible_collections.nodetune.instinct.plugins.module_utils.plan import layout as _layout
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import (
    ParseError,
    format_cpulist,
    format_cpumask,
    parse_cpulist,
    parse_cpumask,
)


def _cpus(value: Any, filter_name: str) -> List[int]:
    """A cpulist string or a list of CPU ids (ints or digit strings) -> sorted unique ints."""
    if value is None:
        return []
    if isinstance(value, str):
        try:
            return parse_cpulist(value)
        except ParseError as exc:
            raise AnsibleFilterError("%s: %s" % (filter_name, exc)) from None
    if isinstance(value, (list, tuple, set, frozenset)):
        out = set()
        for item in value:
            if isinstance(item, bool):
                item = None
            elif isinstance(item, str) and item.strip().isdigit():
                item = int(item.strip())
            if not isinstance(item, int) or item < 0:
                raise AnsibleFilterError("%s: %r is not a CPU id (expected integers >= 0, or a cpulist string such "
                                         "as '0-3,8')" % (filter_name, item))
            out.add(item)
        return sorted(out)
    raise AnsibleFilterError("%s: expected a cpulist string such as '0-3,8' or a list of CPU ids, not %s"
                             % (filter_name, type(value).__name__))


def cpulist_expand(value: Any) -> List[int]:
    return _cpus(value, "cpulist_expand")


def cpulist_compress(value: Any) -> str:
    return format_cpulist(_cpus(value, "cpulist_compress"))


def cpulist(value: Any) -> str:
    return format_cpulist(_cpus(value, "cpulist"))


def cpumask_to_cpulist(mask: Any) -> str:
    try:
        return format_cpulist(parse_cpumask(mask))
    except ParseError as exc:
        raise AnsibleFilterError("cpumask_to_cpulist: %s" % exc) from None


def cpulist_to_cpumask(value: Any, nr_cpus: Optional[int] = None) -> str:
    if nr_cpus is not None and (isinstance(nr_cpus, bool) or not isinstance(nr_cpus, int) or nr_cpus < 1):
        raise AnsibleFilterError("cpulist_to_cpumask: nr_cpus=%r is not valid: expected an integer >= 1" % (nr_cpus,))
    try:
        return format_cpumask(_cpus(value, "cpulist_to_cpumask"), nr_cpus)
    except ParseError as exc:
        raise AnsibleFilterError("cpulist_to_cpumask: %s" % exc) from None


def _topology(value: Any, filter_name: str) -> Dict[str, Any]:
    if not isinstance(value, dict) or "cpus" not in value:
        raise AnsibleFilterError("%s: expected the topology fact (ansible_facts.nodetune_topology, a mapping with "
                                 "'cpus'), not %s" % (filter_name, type(value).__name__))
    return value


def _planned(func: Any, filter_name: str, topology: Any, policy: Any) -> Any:
    try:
        return func(_topology(topology, filter_name), policy)
    except _layout.LayoutError as exc:
        raise AnsibleFilterError("%s: %s" % (filter_name, exc)) from None


def smt_siblings(topology: Any) -> List[List[int]]:
    try:
        return _layout.smt_sibling_groups(_topology(topology, "smt_siblings"))
    except _layout.LayoutError as exc:
        raise AnsibleFilterError("smt_siblings: %s" % exc) from None


def numa_layout(topology: Any, policy: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    return _planned(_layout.numa_layout, "numa_layout", topology, policy)


def irq_layout(topology: Any, policy: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    return _planned(_layout.irq_layout, "irq_layout", topology, policy)


def node_layout(topology: Any, policy: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    return _planned(_layout.plan, "node_layout", topology, policy)


class FilterModule(object):
    """nodetune.instinct CPU list and layout filters."""

    def filters(self) -> Dict[str, Any]:
        return {
            "cpulist": cpulist,
            "cpulist_expand": cpulist_expand,
            "cpulist_compress": cpulist_compress,
            "cpumask_to_cpulist": cpumask_to_cpulist,
            "cpulist_to_cpumask": cpulist_to_cpumask,
            "smt_siblings": smt_siblings,
            "numa_layout": numa_layout,
            "irq_layout": irq_layout,
            "node_layout": node_layout,
        }
