# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The layout planner: from a discovered Topology to the NUMA, IRQ and SMT layout of one node.

``plan(topology, policy)`` is pure (no I/O) and deterministic: the same node gives the same Layout whatever
the order of the lists in the Topology, so that apply and verify, on the node or on the controller, agree.
The decisions follow docs/layout.md (and DOMAIN.md, which is the truth behind it):

- cores are built from ``thread_siblings`` (the kernel's word), never from a fixed numbering pattern;
- the thread kept online on a core is its lowest online thread, so CPU0 is never offlined;
- every GPU, GCD or partition gets a disjoint, evenly sized set of whole cores on its own NUMA node,
  away from housekeeping cores (and from reserved NIC IRQ cores where policy irq_cores reserves some);
- NIC completion vectors go round-robin, one per core, over primary threads of the NIC's own node (by default
  every non-housekeeping core, rank cores included);
- each GPU's amdgpu vector goes to a core of its own rank, one GPU per core;
- kernel-managed IRQs (NVMe queues) are never placed, only reported with where the kernel put them.

Every decision carries a ``reason`` so that a person can see why an IRQ landed on a CPU.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Set, Tuple, Union

from ansible_collections.nodetune.instinct.plugins.module_utils.parse import (
    ParseError,
    ascii_int,
    format_cpulist,
    is_digits,
    parse_cpulist,
)

LAYOUT_SCHEMA = 1
SUPPORTED_TOPOLOGY_SCHEMAS = (1,)


class LayoutError(ValueError):
    """The node cannot be laid out as asked (e.g. more GPU ranks than cores on a NUMA node)."""


class PolicyError(LayoutError):
    """A policy setting is not valid; the message names the setting, the value and what is valid."""


# ---------------------------------------------------------------------------------------------------------
# Policy
# ---------------------------------------------------------------------------------------------------------

SMT_MODES = ("keep", "offline_siblings", "control_off")
IRQ_PLACEMENTS = ("local_cores", "leave")
IRQBALANCE_MODES = ("disable", "ban")
RANK_MODES = ("per_partition", "per_gcd", "per_device")
RANK_THREADS = ("primary", "all")
TOO_FEW_CORES = ("error", "share")


class Policy(NamedTuple):
    """A validated policy. ``housekeeping`` is an int (cores per NUMA node) or a sorted list of CPUs."""

    housekeeping: Union[int, List[int]] = 1
    smt: str = "keep"
    irq_placement: str = "local_cores"
    # 0: NIC completion vectors spread over every non-housekeeping core of their node, rank cores included, as
    # mlnx-tools' set_irq_affinity_bynode.sh does; "auto"/N keep them off rank cores on reserved cores instead.
    irq_cores: Union[str, int] = 0
    irqbalance: str = "disable"
    ranks: str = "per_partition"
    cores_per_rank: Optional[int] = None
    rank_threads: str = "primary"
    too_few_cores: str = "error"
    omp_threads: Optional[int] = None

    def as_dict(self) -> Dict[str, Any]:
        data = dict(self._asdict())
        if isinstance(self.housekeeping, list):
            data["housekeeping"] = list(self.housekeeping)
        return data


POLICY_SETTINGS = Policy._fields


def _describe(value: Any) -> str:
    return repr(value)


def _choice(setting: str, value: Any, valid: Tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in valid:
        raise PolicyError("policy setting '%s' = %s is not valid: expected one of %s"
                          % (setting, _describe(value), ", ".join("'%s'" % v for v in valid)))
    return value


def _count(setting: str, value: Any, minimum: int, allow_none: bool = False, extra: str = "") -> Optional[int]:
    """Integers may arrive as digit strings from templated Ansible variables; anything else is refused."""
    if value is None and allow_none:
        return None
    number = None  # type: Optional[int]
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and is_digits(value.strip()):
        number = int(value.strip())
    if number is None or number < minimum:
        valid = "an integer >= %d" % minimum
        if allow_none:
            valid += " or null"
        if extra:
            valid += " " + extra
        raise PolicyError("policy setting '%s' = %s is not valid: expected %s" % (setting, _describe(value), valid))
    return number


def _housekeeping(value: Any) -> Union[int, List[int]]:
    if isinstance(value, bool):
        raise PolicyError("policy setting 'housekeeping' = %r is not valid: expected an integer (physical cores "
                          "per NUMA node, e.g. 1) or a cpulist string such as '0,64' or a list of CPU ids" % value)
    if isinstance(value, int):
        if value < 0:
            raise PolicyError("policy setting 'housekeeping' = %d is not valid: the number of physical cores per "
                              "NUMA node must be >= 0" % value)
        return value
    if isinstance(value, str):
        try:
            cpus = parse_cpulist(value)
        except ParseError as exc:
            raise PolicyError("policy setting 'housekeeping': %s" % exc) from None
        if not cpus:
            raise PolicyError("policy setting 'housekeeping' = %r is not valid: the cpulist is empty (use 0 for "
                              "no housekeeping cores)" % value)
        return cpus
    if isinstance(value, (list, tuple)):
        cpus_set = set()
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                raise PolicyError("policy setting 'housekeeping' = %r is not valid: %r is not a CPU id "
                                  "(a list must hold integers >= 0)" % (list(value), item))
            cpus_set.add(item)
        if not cpus_set:
            raise PolicyError("policy setting 'housekeeping' = [] is not valid: the list is empty "
                              "(use 0 for no housekeeping cores)")
        return sorted(cpus_set)
    raise PolicyError("policy setting 'housekeeping' = %s is not valid: expected an integer (physical cores per "
                      "NUMA node), a cpulist string such as '0,64', or a list of CPU ids" % _describe(value))


def validate_policy(policy: Optional[Dict[str, Any]] = None) -> Policy:
    """Check every setting before any planning, so a typo is reported as such and not as a strange layout.

    ``None`` or ``{}`` gives the defaults. Unknown settings are refused (a misspelt key silently ignored
    would leave the default in place while the user believes otherwise).
    """
    if policy is None:
        return Policy()
    if isinstance(policy, Policy):
        return policy
    if not isinstance(policy, dict):
        raise PolicyError("the layout policy must be a mapping of settings (valid settings: %s), not %s"
                          % (", ".join(POLICY_SETTINGS), type(policy).__name__))
    unknown = sorted(str(k) for k in policy if k not in POLICY_SETTINGS)
    if unknown:
        raise PolicyError("unknown policy setting%s %s (valid settings: %s)"
                          % ("s" if len(unknown) > 1 else "", ", ".join("'%s'" % k for k in unknown),
                             ", ".join(POLICY_SETTINGS)))
    values = Policy()._asdict()
    values.update({k: v for k, v in policy.items() if v is not None or k in ("cores_per_rank", "omp_threads")})
    irq_cores = values["irq_cores"]
    if irq_cores != "auto":
        irq_cores = _count("irq_cores", irq_cores, 0, extra="or 'auto' (one reserved core per NIC on the node)")
    ranks = _choice("ranks", values["ranks"], RANK_MODES)
    result = Policy(
        housekeeping=_housekeeping(values["housekeeping"]),
        smt=_choice("smt", values["smt"], SMT_MODES),
        irq_placement=_choice("irq_placement", values["irq_placement"], IRQ_PLACEMENTS),
        irq_cores=irq_cores,
        irqbalance=_choice("irqbalance", values["irqbalance"], IRQBALANCE_MODES),
        ranks="per_partition" if ranks == "per_gcd" else ranks,
        cores_per_rank=_count("cores_per_rank", values["cores_per_rank"], 1, allow_none=True),
        rank_threads=_choice("rank_threads", values["rank_threads"], RANK_THREADS),
        too_few_cores=_choice("too_few_cores", values["too_few_cores"], TOO_FEW_CORES),
        omp_threads=_count("omp_threads", values["omp_threads"], 1, allow_none=True),
    )
    if result.rank_threads == "all" and result.smt != "keep":
        raise PolicyError("policy setting 'rank_threads' = 'all' is not valid with smt = %r: sibling threads are "
                          "taken offline, so ranks can only use primary threads (use rank_threads 'primary', or "
                          "smt 'keep')" % result.smt)
    return result


# ---------------------------------------------------------------------------------------------------------
# The node model: cores, NUMA nodes, device locality
# ---------------------------------------------------------------------------------------------------------


class _Core(object):
    """One physical core: its threads (all known, online or not), the online ones, the one kept online."""

    __slots__ = ("threads", "online", "kept", "node", "package", "l3")

    def __init__(self, threads: List[int], online: List[int], node: Optional[int], package: Optional[int]) -> None:
        self.threads = threads
        self.online = online
        self.kept = online[0] if online else None
        self.node = node
        self.package = package
        self.l3 = None  # type: Optional[int]  # index of its L3 domain (Topology l3_domains), None = unknown


class _Node(object):
    __slots__ = ("id", "cores", "package", "distances", "memory_only")

    def __init__(self, node_id: int) -> None:
        self.id = node_id
        self.cores = []  # type: List[_Core]
        self.package = None  # type: Optional[int]
        self.distances = {}  # type: Dict[int, int]
        self.memory_only = True


def _as_int(value: Any) -> Optional[int]:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    try:
        return ascii_int(str(value))
    except ParseError:
        return None


def _int_list(value: Any) -> List[int]:
    if not value:
        return []
    if isinstance(value, str):
        try:
            return parse_cpulist(value)
        except ParseError:
            return []
    out = []
    for item in value:
        number = _as_int(item)
        if number is not None:
            out.append(number)
    return sorted(set(out))


def _norm_bdf(bdf: Any) -> Optional[str]:
    return bdf.strip().lower() if isinstance(bdf, str) and bdf.strip() else None


class _Model(object):
    """Indexes of the Topology that the planner needs, built once so plan() stays linear in the node's size."""

    def __init__(self, topology: Dict[str, Any]) -> None:
        if not isinstance(topology, dict):
            raise LayoutError("the topology must be a mapping as returned by discovery (docs/topology.md), not %s"
                              % type(topology).__name__)
        schema = topology.get("schema", 1)
        if schema not in SUPPORTED_TOPOLOGY_SCHEMAS:
            raise LayoutError("topology schema %r is not supported by this planner (supported: %s)"
                              % (schema, ", ".join(str(s) for s in SUPPORTED_TOPOLOGY_SCHEMAS)))
        self.topology = topology
        self.warnings = []  # type: List[str]
        self.cpus = {}  # type: Dict[int, Dict[str, Any]]
        for cpu in topology.get("cpus") or []:
            cpu_id = _as_int(cpu.get("id"))
            if cpu_id is not None and cpu_id >= 0:
                self.cpus[cpu_id] = cpu
        self.online = self._online_cpus()
        self.nodes = self._nodes()
        self.cores = self._cores()
        lost = []
        for core in self.cores:
            if core.kept is not None and core.node is not None:
                self.nodes[core.node].cores.append(core)
            elif core.kept is not None:
                lost.extend(core.online)
        if lost:
            self.warnings.append("CPUs %s belong to no NUMA node in the topology: they are left out of the layout"
                                 % format_cpulist(lost))
        for node in self.nodes.values():
            node.cores.sort(key=lambda c: c.kept)
            packages = sorted(c.package for c in node.cores if c.package is not None)
            node.package = packages[0] if packages else None
            node.memory_only = not node.cores
        self.core_of = {}  # type: Dict[int, _Core]
        for core in self.cores:
            for cpu_id in core.threads:
                self.core_of[cpu_id] = core
        l3_of = {}  # type: Dict[int, int]
        for index, domain in enumerate(topology.get("l3_domains") or []):
            for cpu_id in _int_list(domain):
                l3_of.setdefault(cpu_id, index)
        for core in self.cores:
            core.l3 = next((l3_of[t] for t in core.threads if t in l3_of), None)
        self.pci = {}  # type: Dict[str, Dict[str, Any]]
        for dev in topology.get("pci_devices") or []:
            bdf = _norm_bdf(dev.get("bdf"))
            if bdf:
                self.pci[bdf] = dev

    def _online_cpus(self) -> Set[int]:
        listed = (self.topology.get("cpu_lists") or {}).get("online")
        listed_set = set(_int_list(listed)) if listed is not None else None
        online = set()
        for cpu_id, cpu in self.cpus.items():
            flag = cpu.get("online")
            if flag is None:
                flag = listed_set is None or cpu_id in listed_set
            if flag:
                online.add(cpu_id)
        return online

    def _nodes(self) -> Dict[int, _Node]:
        nodes = {}  # type: Dict[int, _Node]
        self.node_of_cpu = {}  # type: Dict[int, int]
        for entry in self.topology.get("numa_nodes") or []:
            node_id = _as_int(entry.get("id"))
            if node_id is None or node_id < 0:
                continue
            node = nodes.setdefault(node_id, _Node(node_id))
            for key, value in (entry.get("distances") or {}).items():
                other, dist = _as_int(key), _as_int(value)
                if other is not None and dist is not None:
                    node.distances[other] = dist
            for cpu_id in _int_list(entry.get("cpus")):
                self.node_of_cpu.setdefault(cpu_id, node_id)
        for cpu_id, cpu in self.cpus.items():
            node_id = _as_int(cpu.get("numa_node"))
            if node_id is not None and node_id >= 0:
                self.node_of_cpu[cpu_id] = node_id
                nodes.setdefault(node_id, _Node(node_id))
        if not nodes or not self.node_of_cpu:
            if self.cpus:
                self.warnings.append("the topology has no NUMA information: all CPUs are treated as NUMA node 0")
            nodes.setdefault(0, _Node(0))
            for cpu_id in self.cpus:
                self.node_of_cpu.setdefault(cpu_id, 0)
        return nodes

    def _cores(self) -> List[_Core]:
        """Union thread_siblings lists; CPUs without them join by (package, die, core_id), else stand alone."""
        parent = {cpu_id: cpu_id for cpu_id in self.cpus}

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        def union(a: int, b: int) -> None:
            ra, rb = find(a), find(b)
            if ra != rb:
                if ra < rb:
                    parent[rb] = ra
                else:
                    parent[ra] = rb

        key_rep = {}  # type: Dict[Tuple[Any, Any, Any], int]
        without_siblings = []
        for cpu_id in sorted(self.cpus):
            cpu = self.cpus[cpu_id]
            siblings = _int_list(cpu.get("thread_siblings"))
            key = (cpu.get("package"), cpu.get("die"), cpu.get("core_id"))
            has_key = key[0] is not None and key[2] is not None
            if siblings:
                for sib in siblings:
                    if sib in parent:
                        union(cpu_id, sib)
                if has_key:
                    key_rep.setdefault(key, cpu_id)
            elif has_key:
                without_siblings.append((cpu_id, key))
        for cpu_id, key in without_siblings:
            if key in key_rep:
                union(cpu_id, key_rep[key])
            else:
                key_rep[key] = cpu_id
        groups = {}  # type: Dict[int, List[int]]
        for cpu_id in sorted(self.cpus):
            groups.setdefault(find(cpu_id), []).append(cpu_id)
        cores = []
        for threads in groups.values():
            online = [t for t in threads if t in self.online]
            anchor = online[0] if online else threads[0]
            node = self.node_of_cpu.get(anchor)
            if node is None:
                node = next((self.node_of_cpu[t] for t in threads if t in self.node_of_cpu), None)
            package = None
            for t in ([anchor] + threads):
                package = _as_int(self.cpus[t].get("package"))
                if package is not None:
                    break
            cores.append(_Core(threads, online, node, package))
        cores.sort(key=lambda c: c.threads[0])
        return cores

    def cpu_nodes(self) -> List[_Node]:
        return [self.nodes[n] for n in sorted(self.nodes) if not self.nodes[n].memory_only]

    def nearest_cpu_node(self, node_id: int) -> Optional[int]:
        """The NUMA node with CPUs closest to ``node_id`` by the firmware's distance table (ties: lowest id)."""
        candidates = self.cpu_nodes()
        if not candidates:
            return None
        source = self.nodes.get(node_id)
        distances = source.distances if source is not None else {}
        return min(candidates, key=lambda n: (distances.get(n.id, 255), n.id)).id

    def locate(self, numa_node: Any, local_cpus: Any) -> Tuple[Optional[int], Optional[Set[int]], str]:
        """Where a device lives: (NUMA node with CPUs, CPUs it is restricted to or None, why).

        ``numa_node`` -1 means unknown (the kernel's word): then ``local_cpus`` decides.
        """
        node_id = _as_int(numa_node)
        if node_id is not None and node_id >= 0 and node_id in self.nodes:
            if not self.nodes[node_id].memory_only:
                return node_id, None, "numa_node %d" % node_id
            nearest = self.nearest_cpu_node(node_id)
            if nearest is not None:
                return nearest, None, ("numa_node %d has no online CPUs; nearest node with CPUs is %d"
                                       % (node_id, nearest))
        local = set(_int_list(local_cpus))
        if local:
            counts = {}  # type: Dict[int, int]
            for node in self.cpu_nodes():
                hits = sum(1 for core in node.cores if core.kept in local)
                if hits:
                    counts[node.id] = hits
            if counts:
                best = min(counts, key=lambda n: (-counts[n], n))
                what = "numa_node %s" % ("-1 (unknown)" if node_id is None or node_id < 0 else
                                         "%d (not a NUMA node here)" % node_id)
                return best, local, "%s: placed by local_cpus %s on node %d" % (what, format_cpulist(local), best)
        return None, None, "NUMA node unknown and no local_cpus"


# ---------------------------------------------------------------------------------------------------------
# SMT
# ---------------------------------------------------------------------------------------------------------

_SMT_ABSENT = ("notsupported", "forceoff")


class _SmtPlan(NamedTuple):
    offline: List[int]
    control: Optional[str]
    going_offline: Set[int]
    reason: str


def _plan_smt(model: _Model, policy: Policy, warnings: List[str]) -> _SmtPlan:
    smt = model.topology.get("smt") or {}
    control = smt.get("control")
    multi = [core for core in model.cores if len(core.online) > 1]
    siblings_known = [core for core in model.cores if core.kept is not None and len(core.threads) > 1]
    if policy.smt == "keep":
        return _SmtPlan([], None, set(), "policy smt 'keep': SMT siblings stay online")
    if policy.smt == "control_off" and control == "off" and not multi:
        return _SmtPlan([], "off", set(), "policy smt 'control_off': smt/control is already 'off'")
    if control in _SMT_ABSENT or (not multi and not siblings_known):
        return _SmtPlan([], None, set(), "SMT is %s on this node (smt/control %s): nothing to offline"
                        % ("not available" if control in _SMT_ABSENT else "already off", control))
    going = set()  # type: Set[int]
    for core in multi:
        going.update(t for t in core.online if t != core.kept)
    if policy.smt == "control_off":
        if control in ("on", "off"):
            return _SmtPlan([], "off", going,
                            "policy smt 'control_off': write 'off' to smt/control, which offlines every secondary "
                            "thread at once (%d CPUs) and keeps the lowest thread of each core" % len(going))
        warnings.append("smt 'control_off' asked but smt/control is %s: offlining siblings one CPU at a time instead"
                        % (control if control is not None else "absent"))
    offline = set()  # type: Set[int]
    stuck = []
    for core in siblings_known:
        for thread in core.threads:
            if thread == core.kept or thread == 0:
                continue
            cpu = model.cpus[thread]
            if thread in model.online and cpu.get("hotpluggable") is False:
                stuck.append(thread)
                continue
            offline.add(thread)
    if stuck:
        warnings.append("CPUs %s cannot be offlined one by one (no cpuN/online file): they stay online; "
                        "use smt 'control_off' where smt/control exists" % format_cpulist(stuck))
    going = set(c for c in offline if c in model.online)
    if not offline and stuck:
        return _SmtPlan([], None, going, "policy smt 'offline_siblings': no sibling thread can be offlined one CPU "
                                         "at a time on this node (see warnings)")
    return _SmtPlan(sorted(offline), None, going,
                    "policy smt 'offline_siblings': keep the lowest online thread of every core (from "
                    "thread_siblings), offline the other %d sibling threads" % len(offline))


# ---------------------------------------------------------------------------------------------------------
# Housekeeping
# ---------------------------------------------------------------------------------------------------------


def _plan_housekeeping(model: _Model, policy: Policy) -> Tuple[Set[int], str]:
    """Returns the ids (kept thread) of the housekeeping cores and the reason."""
    if isinstance(policy.housekeeping, int):
        count = policy.housekeeping
        chosen = set()  # type: Set[int]
        for node in model.cpu_nodes():
            chosen.update(core.kept for core in node.cores[:count])
        if count == 0:
            return chosen, "policy housekeeping 0: no cores are kept for the OS"
        return chosen, ("policy housekeeping %d: the first %s of every NUMA node (lowest CPU ids, so CPU0's core "
                        "on its node) %s left to the OS, daemons and unplaced IRQs"
                        % (count, "physical core" if count == 1 else "%d physical cores" % count,
                           "is" if count == 1 else "are"))
    chosen = set()
    for cpu_id in policy.housekeeping:
        if cpu_id not in model.cpus:
            raise PolicyError("policy setting 'housekeeping': CPU %d does not exist on this node (CPUs: %s)"
                              % (cpu_id, format_cpulist(model.cpus)))
        core = model.core_of.get(cpu_id)
        if cpu_id not in model.online or core is None or core.kept is None:
            raise PolicyError("policy setting 'housekeeping': CPU %d is offline on this node (online CPUs: %s)"
                              % (cpu_id, format_cpulist(model.online)))
        chosen.add(core.kept)
    return chosen, ("policy housekeeping %s: the physical cores holding these CPUs are left to the OS"
                    % format_cpulist(policy.housekeeping))


# ---------------------------------------------------------------------------------------------------------
# GPU rank units
# ---------------------------------------------------------------------------------------------------------


class _Unit(object):
    """One local rank: a GPU, a GCD (its own PCI function on MI250) or one partition of a partitioned GPU."""

    __slots__ = ("bdf", "partition", "partitions", "kfd_node", "name", "device_node", "home", "local", "where",
                 "cores", "shared")

    def __init__(self, bdf: str, partition: int, partitions: int, kfd_node: Optional[int], name: Any,
                 device_node: Optional[int]) -> None:
        self.bdf = bdf
        self.partition = partition
        self.partitions = partitions
        self.kfd_node = kfd_node
        self.name = name
        self.device_node = device_node
        self.home = None  # type: Optional[int]
        self.local = None  # type: Optional[Set[int]]
        self.where = ""
        self.cores = []  # type: List[_Core]
        self.shared = False


def _merged_gpus(model: _Model) -> List[Dict[str, Any]]:
    """One entry per BDF: partitions of a GPU share a BDF; merge duplicates so order cannot matter."""
    by_bdf = {}  # type: Dict[str, Dict[str, Any]]
    for gpu in model.topology.get("gpus") or []:
        bdf = _norm_bdf(gpu.get("bdf"))
        if bdf is None:
            continue
        kfd = _int_list(gpu.get("kfd_nodes"))
        parts = _as_int(gpu.get("partitions")) or 1
        entry = by_bdf.get(bdf)
        if entry is None:
            by_bdf[bdf] = {"bdf": bdf, "kfd_nodes": kfd, "partitions": parts, "name": gpu.get("name"),
                           "numa_node": gpu.get("numa_node"), "local_cpus": gpu.get("local_cpus")}
            continue
        entry["kfd_nodes"] = sorted(set(entry["kfd_nodes"]) | set(kfd))
        entry["partitions"] = max(entry["partitions"], parts)
        for key in ("name", "numa_node", "local_cpus"):
            if entry[key] is None and gpu.get(key) is not None:
                entry[key] = gpu.get(key)
    return [by_bdf[b] for b in sorted(by_bdf)]


def _rank_units(model: _Model, policy: Policy, warnings: List[str]) -> List[_Unit]:
    units = []  # type: List[_Unit]
    for gpu in _merged_gpus(model):
        kfd = gpu["kfd_nodes"]
        partitions = max(len(kfd), gpu["partitions"], 1)
        count = 1 if policy.ranks == "per_device" else partitions
        device_node = _as_int(gpu["numa_node"])
        home, local, where = model.locate(gpu["numa_node"], gpu["local_cpus"])
        for index in range(count):
            unit = _Unit(gpu["bdf"], index, partitions, kfd[index] if index < len(kfd) else None, gpu["name"],
                         device_node)
            unit.home, unit.local, unit.where = home, local, where
            units.append(unit)
    # Rank i is HIP device i: ROCr enumerates GPUs in KFD topology node order (BDF order where unknown).
    if units and all(u.kfd_node is not None for u in units):
        units.sort(key=lambda u: (u.kfd_node, u.bdf, u.partition))
    else:
        units.sort(key=lambda u: (u.bdf, u.partition))
    _place_unlocated(model, units, warnings)
    return units


def _place_unlocated(model: _Model, units: List[_Unit], warnings: List[str]) -> None:
    """GPUs whose NUMA node is unknown go to the node with the fewest ranks so far: balanced, not guessed."""
    lost = [u for u in units if u.home is None]
    nodes = model.cpu_nodes()
    if not lost or not nodes:
        return
    load = {n.id: 0 for n in nodes}
    for unit in units:
        if unit.home is not None:
            load[unit.home] += 1
    for unit in lost:
        target = min(load, key=lambda n: (load[n], n))
        load[target] += 1
        unit.home = target
        unit.where = "NUMA node unknown (numa_node -1, no local_cpus): balanced onto node %d" % target
    warnings.append("GPUs %s have no known NUMA node: their ranks were spread over the nodes with the fewest ranks"
                    % ", ".join(sorted(set(u.bdf for u in lost))))


# ---------------------------------------------------------------------------------------------------------
# IRQ classification
# ---------------------------------------------------------------------------------------------------------

_COMP_NAME = re.compile(r"^(?:mlx5_comp(\d+)|.+-TxRx-(\d+)|virtio\d+-(?:input|output)\.(\d+))(?:@|$)")
# Never completion vectors (discover_irq._kind): mlx5's event/command vectors, virtio's config-change vector
_ASYNC_NAME = re.compile(r"^(?:mlx5_(?:async|ctrl|pages|cmd)\w*|virtio\d+-config)(?:@|$)")
_NVME_QUEUE = re.compile(r"^nvme\d+q([1-9]\d*)$")
_PCI_IN_NAME = re.compile(r"@pci:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])")
_TRAILING_NUMBER = re.compile(r"(\d+)(?:@.*)?$")
_GPU_ACTION = "amdgpu"


class _Irq(object):
    __slots__ = ("irq", "name", "device", "index", "indexed", "entry")

    def __init__(self, entry: Dict[str, Any], irq: int, name: str, device: Optional[str]) -> None:
        self.entry = entry
        self.irq = irq
        self.name = name
        self.device = device
        self.index = irq
        self.indexed = False  # whether ``index`` is the driver's vector number, read from the name

    def vector_index(self) -> None:
        """The driver's vector number (mlx5_comp<N>, <dev>-TxRx-<N>): round-robin follows it, not IRQ numbers."""
        match = _COMP_NAME.match(self.name) or _TRAILING_NUMBER.search(self.name)
        number = next((g for g in match.groups() if g is not None), None) if match else None
        if number is not None:
            self.index = int(number)
            self.indexed = True


class _IrqSets(NamedTuple):
    comp: Dict[str, List[_Irq]]  # device BDF -> completion vectors in vector order
    comp_unknown: List[_Irq]  # completion vectors whose device is unknown
    control: List[_Irq]  # NIC async/control vectors: left alone
    managed: List[_Irq]
    gpu: Dict[str, List[_Irq]]  # GPU BDF -> its vectors (amdgpu: one per PCI function)
    gpu_unknown: List[_Irq]  # GPU vectors whose device is unknown


def _irq_class(entry: Dict[str, Any], name: str) -> Optional[str]:
    """'managed', 'comp', 'control' or None (not the planner's business). Discovery's ``kind`` first,
    then the names the kernel drivers use, so hand-built or older topologies work too."""
    kind = entry.get("kind")
    if entry.get("managed") is True or kind == "nvme_queue" or (name.startswith("nvme") and _NVME_QUEUE.match(name)):
        return "managed"
    # by name before the kind: a topology saved by an earlier discovery called virtio's config vector nic_comp
    if kind == "nic_async" or (name.startswith(("mlx5_", "virtio")) and _ASYNC_NAME.match(name)):
        return "control"
    if kind == "nic_comp" or name.startswith("mlx5_comp") or (kind is None and _COMP_NAME.match(name)):
        return "comp"
    # amdgpu_irq_init() (drivers/gpu/drm/amd/amdgpu/amdgpu_irq.c) allocates one vector per PCI function and
    # request_irq()s it under the driver's name, "amdgpu": not managed (no PCI_IRQ_AFFINITY), so it can be moved
    if kind == "gpu" or (kind is None and name == _GPU_ACTION):
        return "gpu"
    return None


def _classify_irqs(model: _Model) -> _IrqSets:
    comp = {}  # type: Dict[str, List[_Irq]]
    gpu = {}  # type: Dict[str, List[_Irq]]
    comp_unknown, control, managed = [], [], []  # type: List[_Irq], List[_Irq], List[_Irq]
    gpu_unknown = []  # type: List[_Irq]
    seen = set()  # type: Set[int]
    for entry in model.topology.get("irqs") or []:
        name = entry.get("name") or ""
        what = _irq_class(entry, name)
        if what is None:
            continue
        number = _as_int(entry.get("irq"))
        if number is None or number in seen:
            continue
        seen.add(number)
        device = _norm_bdf(entry.get("device"))
        if device is None:
            found = _PCI_IN_NAME.search(name)
            device = found.group(1).lower() if found else None
        irq = _Irq(entry, number, name, device)
        if what == "managed":
            managed.append(irq)
        elif what == "control":
            control.append(irq)
        elif what == "gpu":
            if device is None:
                gpu_unknown.append(irq)
            else:
                gpu.setdefault(device, []).append(irq)
        else:
            irq.vector_index()
            if device is None:
                comp_unknown.append(irq)
            else:
                comp.setdefault(device, []).append(irq)
    for vectors in comp.values():
        vectors.sort(key=lambda i: (i.index, i.irq))
    for vectors in gpu.values():
        vectors.sort(key=lambda i: i.irq)
    managed.sort(key=lambda i: i.irq)
    control.sort(key=lambda i: i.irq)
    comp_unknown.sort(key=lambda i: i.irq)
    gpu_unknown.sort(key=lambda i: i.irq)
    return _IrqSets(comp, comp_unknown, control, managed, gpu, gpu_unknown)


def _device_location(model: _Model, bdf: str) -> Tuple[Optional[int], Optional[Set[int]], str]:
    dev = model.pci.get(bdf)
    if dev is not None:
        return model.locate(dev.get("numa_node"), dev.get("local_cpus"))
    for collection in ("nics", "ib_devices"):
        for item in model.topology.get(collection) or []:
            if _norm_bdf(item.get("bdf")) == bdf:
                return model.locate(item.get("numa_node"), None)
    return None, None, "device %s is not in the PCI inventory" % bdf


# ---------------------------------------------------------------------------------------------------------
# Splitting each NUMA node: housekeeping | NIC IRQ cores | rank cores
# ---------------------------------------------------------------------------------------------------------


class _NodePlan(object):
    __slots__ = ("node", "housekeeping", "avail", "units", "per_rank", "irq_cores", "irq_mode", "spare",
                 "nic_devices", "shared", "reason")

    def __init__(self, node: _Node) -> None:
        self.node = node
        self.housekeeping = []  # type: List[_Core]
        self.avail = []  # type: List[_Core]
        self.units = []  # type: List[_Unit]
        self.per_rank = 0
        self.irq_cores = []  # type: List[_Core]
        self.irq_mode = "none"
        self.spare = []  # type: List[_Core]
        self.nic_devices = []  # type: List[str]
        self.shared = False
        self.reason = ""


def _irq_reservation(policy: Policy, nics_here: int) -> int:
    if policy.irq_placement == "leave" or nics_here == 0:
        return 0
    if policy.irq_cores == "auto":
        return nics_here
    return int(policy.irq_cores)


def _split_node(plan: _NodePlan, policy: Policy, warnings: List[str]) -> None:
    """Decide how many cores each rank gets, and which cores take NIC IRQs, on one NUMA node.

    Ranks get ``c`` cores each, evenly; the cores left over (at least the IRQ reservation when there is
    room) take the NIC completion IRQs, so they never land on rank cores when enough cores exist.
    """
    node_id = plan.node.id
    avail = plan.avail
    ranks = len(plan.units)
    reserve = _irq_reservation(policy, len(plan.nic_devices))
    has_irqs = bool(plan.nic_devices) and policy.irq_placement == "local_cores"
    if ranks == 0:
        plan.irq_cores = list(avail) if has_irqs else []
        plan.spare = [] if has_irqs else list(avail)
        plan.irq_mode = "all_cores" if has_irqs else "none"
        if has_irqs and not avail:
            plan.irq_cores, plan.irq_mode = list(plan.housekeeping), "housekeeping"
        return
    if policy.cores_per_rank is not None:
        per_rank = policy.cores_per_rank if ranks * policy.cores_per_rank <= len(avail) else 0
    elif len(avail) - reserve >= ranks:
        per_rank = (len(avail) - reserve) // ranks
    else:
        per_rank = len(avail) // ranks
    if per_rank == 0:
        need = ranks * (policy.cores_per_rank or 1)
        if policy.too_few_cores == "error":
            raise LayoutError(
                "NUMA node %d has %d physical core%s free after housekeeping for %d GPU rank%s (%s), which need "
                "%d: set the layout policy 'too_few_cores' to 'share' to let these ranks share the node's cores, "
                "lower 'housekeeping' or 'cores_per_rank', or use ranks 'per_device'"
                % (node_id, len(avail), "" if len(avail) == 1 else "s", ranks, "" if ranks == 1 else "s",
                   ", ".join(_unit_label(u) for u in plan.units), need))
        pool = avail if avail else plan.housekeeping
        for unit in plan.units:
            unit.cores = list(pool)
            unit.shared = True
        plan.shared = True
        plan.per_rank = len(pool)
        plan.irq_cores = list(pool) if has_irqs else []
        plan.irq_mode = ("shared" if avail else "housekeeping") if has_irqs else "none"
        warnings.append("NUMA node %d: %d core%s for %d ranks: policy too_few_cores 'share' binds every rank of "
                        "the node to all of them (%s)" % (node_id, len(pool), "" if len(pool) == 1 else "s",
                                                          ranks, _cores_cpulist(pool)))
        return
    plan.per_rank = per_rank
    leftover = len(avail) - ranks * per_rank
    _assign_rank_cores(plan, leftover, warnings)
    taken = set(id(c) for u in plan.units for c in u.cores)
    rest = [c for c in avail if id(c) not in taken]
    if not has_irqs:
        plan.spare = rest
        return
    if reserve == 0:
        plan.irq_cores, plan.irq_mode = list(avail), "spread"
    elif rest:
        plan.irq_cores, plan.irq_mode = rest, "reserved"
        if len(rest) < reserve:
            warnings.append("NUMA node %d: only %d core%s left for the IRQs of %d NIC%s (wanted %d) after %d ranks "
                            "x %d cores" % (node_id, len(rest), "" if len(rest) == 1 else "s",
                                            len(plan.nic_devices), "" if len(plan.nic_devices) == 1 else "s",
                                            reserve, ranks, per_rank))
    else:
        plan.irq_cores, plan.irq_mode = list(avail), "shared"
        warnings.append("NUMA node %d: no core left for NIC IRQs after %d ranks x %d cores: the NIC completion IRQs "
                        "share the rank cores (lower 'cores_per_rank' to keep them apart)" % (node_id, ranks, per_rank))


def _assign_rank_cores(plan: _NodePlan, leftover: int, warnings: List[str]) -> None:
    """Blocks of ``per_rank`` cores, each inside as few L3 domains as the counts allow.

    Ranks whose device is restricted to some CPUs (numa_node -1 with a narrow local_cpus) choose first,
    within their CPUs; the others then take blocks in rank order. A rank that fits in one L3 domain gets the
    domain with the fewest free cores that still holds it (so two ranks do not share a domain while another
    stays whole); a larger rank takes whole domains, then the best-fitting rest. Without cache information the
    node is one domain: contiguous blocks after the leftover cores, farthest from housekeeping.
    """
    free = list(plan.avail[leftover:]) + list(plan.avail[:leftover])
    sizes = {}  # type: Dict[Any, int]  # free cores of each L3 domain before any rank took one
    for core in free:
        sizes[core.l3] = sizes.get(core.l3, 0) + 1
    order = [u for u in plan.units if _restricted(u, plan)] + [u for u in plan.units if not _restricted(u, plan)]
    for unit in order:
        fits = [c for c in free if unit.local is None or c.kept in unit.local]
        if len(fits) < plan.per_rank:
            warnings.append("rank of GPU %s: fewer than %d free cores inside its local_cpus; using other cores of "
                            "NUMA node %d" % (_unit_label(unit), plan.per_rank, plan.node.id))
            fits = fits + [c for c in free if c not in fits]
        unit.cores = sorted(_l3_block(fits, plan.per_rank, sizes), key=lambda c: c.kept)
        chosen = set(id(c) for c in unit.cores)
        free = [c for c in free if id(c) not in chosen]


def _l3_block(candidates: List[_Core], count: int, sizes: Dict[Any, int]) -> List[_Core]:
    """``count`` cores of ``candidates`` (in their order of preference) spanning as few L3 domains as possible,
    preferring domains no other rank uses yet (``sizes``: each domain's free cores before any rank took one)."""
    domains = {}  # type: Dict[Any, List[_Core]]
    for core in candidates:
        domains.setdefault(core.l3, []).append(core)
    chosen = []  # type: List[_Core]
    need = count
    while need > 0 and domains:
        holding = [key for key in domains if len(domains[key]) >= need]
        if holding:  # best fit: an untouched domain with the fewest free cores that still holds the rest
            key = min(holding, key=lambda k: (len(domains[k]) < sizes.get(k, 0), len(domains[k]),
                                              _first_position(domains[k], candidates)))
        else:  # take a whole domain, the largest first
            key = max(domains, key=lambda k: (len(domains[k]), -_first_position(domains[k], candidates)))
        taken = domains.pop(key)[:need]
        chosen.extend(taken)
        need -= len(taken)
    return chosen


def _first_position(cores: List[_Core], order: List[_Core]) -> int:
    return order.index(cores[0])


def _restricted(unit: _Unit, plan: _NodePlan) -> bool:
    return unit.local is not None and any(c.kept not in unit.local for c in plan.avail)


def _unit_label(unit: _Unit) -> str:
    if unit.partitions > 1 and unit.kfd_node is not None:
        return "%s partition %d (KFD node %d)" % (unit.bdf, unit.partition, unit.kfd_node)
    if unit.partitions > 1:
        return "%s partition %d" % (unit.bdf, unit.partition)
    return unit.bdf


def _cores_cpulist(cores: Iterable[_Core]) -> str:
    return format_cpulist(c.kept for c in cores)


# ---------------------------------------------------------------------------------------------------------
# NCCL: the NICs nearest each GPU
# ---------------------------------------------------------------------------------------------------------

_DOWN_STATES = ("down", "lowerlayerdown", "notpresent")


class _Nearby(NamedTuple):
    netdevs: List[Tuple[str, Optional[int], Optional[int]]]  # (name, node, package)
    hcas: List[Tuple[str, Optional[int], Optional[int]]]


def _nearby_candidates(model: _Model) -> _Nearby:
    """The netdevs and HCAs NCCL may use: up, on a PCI device; netdevs of the RDMA fabric (IPoIB, or an
    Ethernet port of an HCA for RoCE) are preferred over plain Ethernet such as a management port."""
    netdevs = []
    fabric = set()
    for nic in sorted(model.topology.get("nics") or [], key=lambda n: str(n.get("name"))):
        name = nic.get("name")
        if not name or _norm_bdf(nic.get("bdf")) is None or nic.get("type") not in ("infiniband", "ether"):
            continue
        if str(nic.get("operstate") or "").lower() in _DOWN_STATES:
            continue
        bdf = _norm_bdf(nic.get("bdf"))
        dev = model.pci.get(bdf or "") or {}
        node = model.locate(nic.get("numa_node"), dev.get("local_cpus"))[0]
        netdevs.append((str(name), node, model.nodes[node].package if node is not None else None))
        if nic.get("type") == "infiniband" or nic.get("ib_device"):
            fabric.add(str(name))
    if fabric:
        netdevs = [entry for entry in netdevs if entry[0] in fabric]
    hcas = []
    for hca in sorted(model.topology.get("ib_devices") or [], key=lambda h: str(h.get("name"))):
        name = hca.get("name")
        if not name:
            continue
        states = [str(p.get("state") or "").upper() for p in hca.get("ports") or []]
        if states and all(s and s != "ACTIVE" for s in states):
            continue
        dev = model.pci.get(_norm_bdf(hca.get("bdf")) or "") or {}
        node = model.locate(hca.get("numa_node"), dev.get("local_cpus"))[0]
        hcas.append((str(name), node, model.nodes[node].package if node is not None else None))
    return _Nearby(netdevs, hcas)


def _nearest(items: List[Tuple[str, Optional[int], Optional[int]]], node: Optional[int],
             package: Optional[int]) -> Tuple[List[str], str]:
    same_node = [item[0] for item in items if node is not None and item[1] == node]
    if same_node:
        return same_node, "same NUMA node"
    same_package = [item[0] for item in items if package is not None and item[2] == package]
    if same_package:
        return same_package, "same socket"
    return [item[0] for item in items], "no NIC on the GPU's node or socket: all NICs"


def _nccl_list(names: List[str]) -> str:
    """'=' makes NCCL match names exactly: a plain 'mlx5_1' would also select mlx5_10, mlx5_11, ..."""
    return "=" + ",".join(names)


# ---------------------------------------------------------------------------------------------------------
# plan()
# ---------------------------------------------------------------------------------------------------------


def plan(topology: Dict[str, Any], policy: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The Layout of a node (docs/layout.md): pure, deterministic, JSON-serialisable.

    Raises PolicyError for a bad policy and LayoutError where the node cannot be laid out as asked.
    """
    pol = validate_policy(policy)
    model = _Model(topology)
    most = max(1, len(model.online))
    if pol.omp_threads is not None and pol.omp_threads > most:
        # more OpenMP threads than the node has CPUs only oversubscribes every rank's cores
        raise PolicyError("policy setting 'omp_threads' = %d is not valid: this node has %d online CPUs, so at most "
                          "%d (or null: one per core of the rank)" % (pol.omp_threads, len(model.online), most))
    warnings = list(model.warnings)
    smt = _plan_smt(model, pol, warnings)
    hk_ids, hk_reason = _plan_housekeeping(model, pol)
    irqs = _classify_irqs(model)
    units = _rank_units(model, pol, warnings)
    node_plans, device_home = _node_plans(model, pol, hk_ids, irqs, units, warnings)

    def stays_online(core: _Core) -> List[int]:
        return [t for t in core.online if t not in smt.going_offline]

    nearby = _nearby_candidates(model)
    ranks = _rank_entries(model, pol, units, stays_online, nearby, node_plans)
    irq_affinity, left_alone = _place_nic_irqs(model, pol, irqs, node_plans, device_home, warnings)
    irq_reason = _irq_load_reason(pol, node_plans, irq_affinity, warnings)
    nic_irq_cpus = sorted(set(cpu for entry in irq_affinity for cpu in entry["cpus"]))
    gpu_irq_affinity, gpu_left = _place_gpu_irqs(pol, irqs, units)
    if gpu_left:
        left_alone = sorted(left_alone + gpu_left, key=lambda e: e["irq"])
    housekeeping = sorted(t for n in node_plans.values() for c in n.housekeeping for t in stays_online(c))
    layout = {
        "schema": LAYOUT_SCHEMA,
        "policy": pol.as_dict(),
        "smt_control": smt.control,
        "smt_offline": smt.offline,
        "housekeeping": housekeeping,
        "ranks": ranks,
        "irq_affinity": irq_affinity,
        "nic_irq_cpus": nic_irq_cpus,
        "gpu_irq_affinity": gpu_irq_affinity,
        "managed_irqs": _managed_entries(irqs),
        "irq_left_alone": left_alone,
        "irqbalance": _plan_irqbalance(model, pol, irq_affinity + gpu_irq_affinity, stays_online),
        "nccl_env": _node_nccl_env(nearby),
        "numa": _numa_entries(model, node_plans, units, stays_online, smt),
        "reasons": {"smt": smt.reason, "housekeeping": hk_reason, "nic_irqs": irq_reason},
        "warnings": warnings,
    }
    return layout


_Location = Tuple[Optional[int], Optional[Set[int]], str]  # (NUMA node, CPUs it is restricted to, why)


def _node_plans(model: _Model, policy: Policy, hk_ids: Set[int], irqs: _IrqSets, units: List[_Unit],
                warnings: List[str]) -> Tuple[Dict[int, _NodePlan], Dict[str, _Location]]:
    plans = {node.id: _NodePlan(node) for node in model.cpu_nodes()}
    for node_plan in plans.values():
        node_plan.housekeeping = [c for c in node_plan.node.cores if c.kept in hk_ids]
        node_plan.avail = [c for c in node_plan.node.cores if c.kept not in hk_ids]
    for unit in units:
        if unit.home in plans:
            plans[unit.home].units.append(unit)
    device_home = {}
    # A NIC counts with its async vector alone: mlx5 creates that one at probe, its completion vectors on first use
    # (Linux 6.5+, commit f14c1a14e632), so the node's NICs, and each one's place among them, do not change then.
    for bdf in sorted(set(irqs.comp) | set(i.device for i in irqs.control if i.device is not None)):
        device_home[bdf] = _device_location(model, bdf)
        home = device_home[bdf][0]
        if home in plans:
            plans[home].nic_devices.append(bdf)
    for node_id in sorted(plans):
        _split_node(plans[node_id], policy, warnings)
    return plans, device_home


def _rank_entries(model: _Model, policy: Policy, units: List[_Unit], stays_online: Any,
                  nearby: _Nearby, plans: Dict[int, _NodePlan]) -> List[Dict[str, Any]]:
    entries = []
    for rank, unit in enumerate(units):
        node = model.nodes[unit.home] if unit.home is not None else None
        primaries = [c.kept for c in unit.cores]
        if policy.rank_threads == "all":
            cpus = sorted(t for c in unit.cores for t in stays_online(c))
        else:
            cpus = sorted(primaries)
        cpulist = format_cpulist(cpus)
        omp = policy.omp_threads or max(1, len(unit.cores) if not unit.shared else
                                        len(unit.cores) // max(1, _ranks_on(units, unit.home)))
        # No GOMP_CPU_AFFINITY: libgomp binds the initial thread to the first place of that list (one CPU), so
        # the whole rank and every process it forks would run on one CPU. The process affinity (nodetune-bind,
        # numactl) already holds the rank to its set, and libgomp sizes its team from that affinity.
        env = {"OMP_NUM_THREADS": str(omp)}
        package = node.package if node is not None else None
        netdevs, net_why = _nearest(nearby.netdevs, unit.home, package)
        hcas, hca_why = _nearest(nearby.hcas, unit.home, package)
        # No NCCL_IB_HCA / NCCL_SOCKET_IFNAME per rank: RCCL builds a node's rings from the NICs each rank sees,
        # so all ranks of a node must see the same ones (nccl_env, node-wide). netdevs/hcas only report the nearest.
        numactl = ["--physcpubind=%s" % cpulist]
        if unit.home is not None:
            numactl.append("--preferred=%d" % unit.home)  # never OOMs when the node is full (rank_bind)
        reason = "GPU %s (%s) -> NUMA node %s" % (_unit_label(unit), unit.where, unit.home)
        if unit.shared:
            reason += ": too few cores on the node, shares all of them with the node's other ranks (policy 'share')"
        else:
            node_plan = plans.get(unit.home) if unit.home is not None else None
            irq_spread = node_plan is not None and node_plan.irq_mode in ("spread", "shared")
            reason += ": %d whole core%s of its own, disjoint from housekeeping%s and other ranks%s" % (
                len(unit.cores), "" if len(unit.cores) == 1 else "s", "" if irq_spread else ", NIC IRQ cores",
                "; the node's NIC completion IRQs are spread over all its cores, these included" if irq_spread
                else "")
            l3 = set(c.l3 for c in unit.cores if c.l3 is not None)
            if l3:
                plural = "" if len(l3) == 1 else "s"
                reason += "; in %d L3 domain%s of its own where the counts allow" % (len(l3), plural)
        if netdevs or hcas:
            reason += "; nearest NICs: %s" % (net_why if netdevs else hca_why)
        entries.append({
            "rank": rank,
            "gpu": unit.bdf,
            "name": unit.name,
            "partition": unit.partition,
            "partitions": unit.partitions,
            "kfd_node": unit.kfd_node,
            "gpu_numa_node": unit.device_node,
            "numa_node": unit.home,
            "cpus": cpus,
            "cores": len(unit.cores),
            "shared": unit.shared,
            "netdevs": netdevs,
            "hcas": hcas,
            "env": env,
            "numactl": numactl,
            "reason": reason,
        })
    return entries


def _node_nccl_env(nearby: _Nearby) -> Dict[str, str]:
    """Node-wide NCCL NIC selection (every usable NIC): the one value for every rank of the node."""
    env = {}
    if nearby.netdevs:
        env["NCCL_SOCKET_IFNAME"] = _nccl_list([item[0] for item in nearby.netdevs])
    if nearby.hcas:
        env["NCCL_IB_HCA"] = _nccl_list([item[0] for item in nearby.hcas])
    return env


def _ranks_on(units: List[_Unit], node: Optional[int]) -> int:
    return sum(1 for u in units if u.home == node)


def _place_nic_irqs(model: _Model, policy: Policy, irqs: _IrqSets, plans: Dict[int, _NodePlan],
                    device_home: Dict[str, _Location],
                    warnings: List[str]) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    placed = []  # type: List[Dict[str, Any]]
    left = []  # type: List[Dict[str, Any]]
    for irq in irqs.control:
        left.append(_left(irq, "NIC async/control vector: it carries no data traffic and the driver keeps it "
                               "where it is"))
    for irq in irqs.comp_unknown:
        left.append(_left(irq, "NIC completion vector whose owning PCI device is unknown: no NUMA node to place it on"))
    if policy.irq_placement == "leave":
        for bdf in sorted(irqs.comp):
            for irq in irqs.comp[bdf]:
                left.append(_left(irq, "policy irq_placement 'leave'"))
        left.sort(key=lambda e: e["irq"])
        return placed, left
    for bdf in sorted(irqs.comp):
        home, local, where = device_home[bdf]
        node_plan = plans.get(home) if home is not None else None
        if node_plan is None or not node_plan.irq_cores:
            for irq in irqs.comp[bdf]:
                left.append(_left(irq, "NIC %s: %s: no local core to place it on" % (bdf, where)))
            continue
        pool = [c.kept for c in node_plan.irq_cores if local is None or c.kept in local]
        mode = node_plan.irq_mode
        if not pool:
            pool = [c.kept for c in node_plan.avail if c.kept in (local or ())] or \
                   [c.kept for c in node_plan.node.cores if c.kept in (local or ())]
            mode = "local_cpus"
            warnings.append("NIC %s: none of its node's IRQ cores is in its local_cpus: its IRQs go to its own "
                            "local cores instead" % bdf)
        why = _pool_reason(mode, node_plan.node.id, len(pool))
        # Each NIC of the node starts at its own place in the pool, spaced evenly, and goes on by vector number:
        # a vector's CPU depends on nothing but its number, its NIC's place and the pool, not on which other vectors
        # exist (mlx5 creates them on first use, Linux 6.5+), so a vector created later never moves those pinned.
        devices = node_plan.nic_devices
        start = devices.index(bdf) * len(pool) // len(devices)
        if len(devices) > 1:
            why += "; by vector number from CPU %d on: the node's %d NICs start evenly spaced" % (
                pool[start], len(devices))
        for irq, slot in zip(irqs.comp[bdf], _vector_slots(irqs.comp[bdf])):
            cpu = pool[(start + slot) % len(pool)]
            placed.append({
                "irq": irq.irq,
                "name": irq.name,
                "device": bdf,
                "numa_node": node_plan.node.id,
                "cpus": [cpu],
                "reason": "NIC %s completion vector %d (%s) -> CPU %d: %s" % (bdf, slot, where, cpu, why),
            })
    placed.sort(key=lambda e: e["irq"])
    left.sort(key=lambda e: e["irq"])
    return placed, left


def _vector_slots(vectors: List[_Irq]) -> List[int]:
    """Each vector's place in its NIC's round-robin (``vectors`` in vector order): the driver's vector number where
    every name carries a distinct one (mlx5_comp<N>, <dev>-TxRx-<N>); else its position among the NIC's vectors,
    which holds only while the same vectors exist."""
    if all(irq.indexed for irq in vectors) and len(set(irq.index for irq in vectors)) == len(vectors):
        return [irq.index for irq in vectors]
    return list(range(len(vectors)))


def _place_gpu_irqs(policy: Policy, irqs: _IrqSets,
                    units: List[_Unit]) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """Each GPU's vector on a core of its own rank: the first core of the GPU's first rank that no other GPU's
    vector took yet (ranks of one GPU, and shared ranks, hold the same cores), so on its GPU's NUMA node.

    The amdgpu handler runs on the CPU that takes the IRQ and hands the KFD event work (the signals a rank's threads
    wait on) to a CPU near it (kgd2kfd_interrupt(), drivers/gpu/drm/amd/amdkfd/kfd_device.c): an unbound high-priority
    workqueue since upstream 34db5a32617d, so a CPU sharing the IRQ CPU's L3 (unbound default affinity scope "cache",
    kernel/workqueue.c); before it, kfd_queue_work() took the next online CPU of the node, from a rank's first core
    its second. So the work stays in the rank's own cores or L3 domain, one GPU per core, where one housekeeping core
    would take every GPU of its node."""
    placed = []  # type: List[Dict[str, Any]]
    left = [_left(irq, "GPU vector whose owning PCI device is unknown: no rank or NUMA node to place it on")
            for irq in irqs.gpu_unknown]
    if policy.irq_placement == "leave":
        for bdf in sorted(irqs.gpu):
            left.extend(_left(irq, "policy irq_placement 'leave'") for irq in irqs.gpu[bdf])
        return placed, left
    first = {}  # type: Dict[str, Tuple[int, _Unit]]
    for rank, unit in enumerate(units):
        first.setdefault(unit.bdf, (rank, unit))
    taken = {}  # type: Dict[int, int]  # CPU -> GPU vectors placed on it
    for bdf in sorted(irqs.gpu):
        found = first.get(bdf)
        if found is None or not found[1].cores:
            why = "not in the Topology's GPUs" if found is None else "its rank has no cores"
            left.extend(_left(irq, "GPU %s: %s, so no rank core to place it on" % (bdf, why)) for irq in irqs.gpu[bdf])
            continue
        rank, unit = found
        pool = [c.kept for c in unit.cores]
        for irq in irqs.gpu[bdf]:
            cpu = min(pool, key=lambda c: (taken.get(c, 0), c))
            taken[cpu] = taken.get(cpu, 0) + 1
            placed.append({
                "irq": irq.irq,
                "name": irq.name,
                "device": bdf,
                "numa_node": unit.home,
                "rank": rank,
                "cpus": [cpu],
                "reason": "GPU %s vector (%s) -> CPU %d: a core of rank %d on NUMA node %s; the amdgpu handler "
                          "runs there and KFD's event work next to it, beside the rank they wake%s"
                          % (bdf, irq.name or "unnamed", cpu, rank, unit.home,
                             " (shared cores: one GPU per core while cores last)" if unit.shared else ""),
            })
    placed.sort(key=lambda e: e["irq"])
    return placed, left


def _irq_load_reason(policy: Policy, plans: Dict[int, _NodePlan], placed: List[Dict[str, Any]],
                     warnings: List[str]) -> str:
    """How many completion vectors each node's busiest core carries, against the spread bound
    ceil(vectors of the node / its non-housekeeping cores); where a reservation exceeds it, what was traded."""
    per_node = {}  # type: Dict[int, Dict[int, int]]
    for entry in placed:
        load = per_node.setdefault(entry["numa_node"], {})
        load[entry["cpus"][0]] = load.get(entry["cpus"][0], 0) + 1
    parts = []
    for node_id in sorted(per_node):
        plan = plans[node_id]
        vectors = sum(per_node[node_id].values())
        busiest = max(per_node[node_id].values())
        cores = len(plan.avail)
        bound = -(-vectors // cores) if cores else vectors
        text = "node %d: %d vectors, at most %d per core" % (node_id, vectors, busiest)
        if plan.irq_mode == "reserved" and busiest > bound:
            text += (" on %d reserved core%s kept off the rank cores (policy irq_cores %r); spread over the node's "
                     "%d non-housekeeping cores it would be at most %d per core, with each rank sharing its cores "
                     "with NIC interrupts" % (len(plan.irq_cores), "" if len(plan.irq_cores) == 1 else "s",
                                              policy.irq_cores, cores, bound))
            warnings.append("NUMA node %d: %d NIC completion vectors on %d reserved core%s, up to %d per core "
                            "(spread, the default, gives at most %d): the price of keeping them off rank cores"
                            % (node_id, vectors, len(plan.irq_cores), "" if len(plan.irq_cores) == 1 else "s",
                               busiest, bound))
        elif plan.irq_mode in ("spread", "all_cores", "shared"):
            text += " (bound ceil(%d / %d) = %d)" % (vectors, cores, bound)
            if busiest > bound:
                text += (": its NICs have unequal vector counts, and each goes on by vector number from its own "
                         "start, so that a vector the driver creates later moves none already pinned")
        parts.append(text)
    return "; ".join(parts) if parts else "no NIC completion vectors placed"


def _pool_reason(mode: str, node_id: int, size: int) -> str:
    """Kept short: it is repeated per IRQ; the CPUs of the pool are in the node's ``irq_cpus``."""
    base = "round-robin, one vector per core, primary threads only, over the %d IRQ core%s of node %d" % (
        size, "" if size == 1 else "s", node_id)
    return {
        "reserved": base + ", reserved away from the rank cores",
        "all_cores": base + ", every non-housekeeping core (no GPU ranks on this node)",
        "spread": (base + ", every non-housekeeping core of the node, rank cores included (the default, like "
                   "mlnx-tools' set_irq_affinity_bynode.sh)"),
        "shared": base + ", shared with rank cores: not enough cores to keep them apart",
        "housekeeping": base + ", the housekeeping cores: the node has no other core",
        "local_cpus": base + ", the device's local_cpus",
    }.get(mode, base)


def _left(irq: _Irq, reason: str) -> Dict[str, Any]:
    return {"irq": irq.irq, "name": irq.name, "device": irq.device, "reason": reason}


def managed_cpus(entry: Dict[str, Any]) -> Tuple[Optional[List[int]], Optional[str]]:
    """Where the kernel put a managed IRQ, and the Topology field that says so (None, None: neither was read)."""
    effective = entry.get("effective_affinity_list")
    requested = entry.get("smp_affinity_list")
    if effective is not None:
        return _int_list(effective), "effective_affinity_list"
    if requested is not None:
        return _int_list(requested), "smp_affinity_list"
    return None, None


def _managed_entries(irqs: _IrqSets) -> List[Dict[str, Any]]:
    entries = []
    for irq in irqs.managed:
        cpus, source = managed_cpus(irq.entry)
        entries.append({
            "irq": irq.irq,
            "name": irq.name,
            "device": irq.device,
            "cpus": cpus,
            "source": source,
            "reason": "kernel-managed IRQ (%s): the kernel spreads these over CPUs itself and refuses writes "
                      "(EIO, or EPERM since 6.12): verify only, never written" %
                      ("NVMe queue" if _NVME_QUEUE.match(irq.name) else "managed affinity"),
        })
    return entries


def _plan_irqbalance(model: _Model, policy: Policy, placed: List[Dict[str, Any]],
                     stays_online: Any) -> Dict[str, Any]:
    """``placed``: every pinned vector, NIC completion and GPU."""
    info = model.topology.get("irqbalance") or {}
    installed = info.get("installed")
    entry = {
        "mode": policy.irqbalance,
        "installed": installed,
        "config_file": info.get("config_file"),
        "banned_cpulist": None,
        "banned_irqs": [],
    }  # type: Dict[str, Any]
    if policy.irqbalance == "disable":
        entry["reason"] = ("policy irqbalance 'disable': irqbalance rewrites hand-set affinities at its next "
                           "rebalance, so it is stopped and disabled for the pinned layout to hold")
    else:
        banned = set()  # type: Set[int]
        for cpu in set(cpu for e in placed for cpu in e["cpus"]):
            core = model.core_of.get(cpu)
            banned.update(stays_online(core) if core is not None else [cpu])
        entry["banned_cpulist"] = sorted(banned)
        entry["banned_irqs"] = sorted(e["irq"] for e in placed)
        entry["reason"] = ("policy irqbalance 'ban': IRQBALANCE_BANNED_CPULIST holds the CPUs that take pinned NIC "
                           "and GPU IRQs (and their SMT siblings) so irqbalance adds nothing there, and the pinned "
                           "IRQs are banned so that irqbalance does not move them")
    if installed is False:
        entry["reason"] += " (irqbalance is not installed on this node: nothing to do)"
    return entry


def _numa_entries(model: _Model, plans: Dict[int, _NodePlan], units: List[_Unit], stays_online: Any,
                  smt: _SmtPlan) -> List[Dict[str, Any]]:
    rank_of = {id(u): i for i, u in enumerate(units)}
    entries = []
    for node_id in sorted(model.nodes):
        node = model.nodes[node_id]
        node_plan = plans.get(node_id)
        online = sorted(t for c in node.cores for t in stays_online(c))
        offline_here = sorted(t for c in node.cores for t in c.threads if t in smt.going_offline)
        entry = {
            "node": node_id,
            "package": node.package,
            "cores": len(node.cores),
            "cpus": online,
            "smt_offline": offline_here,
            "housekeeping": [],
            "ranks": [],
            "per_rank_cores": 0,
            "irq_cpus": [],
            "irq_mode": "none",
            "nic_devices": [],
            "spare": [],
            "memory_only": node.memory_only,
        }  # type: Dict[str, Any]
        if node_plan is not None:
            entry.update({
                "housekeeping": sorted(t for c in node_plan.housekeeping for t in stays_online(c)),
                "ranks": [rank_of[id(u)] for u in node_plan.units],
                "per_rank_cores": node_plan.per_rank,
                "irq_cpus": sorted(c.kept for c in node_plan.irq_cores),
                "irq_mode": node_plan.irq_mode,
                "nic_devices": list(node_plan.nic_devices),
                "spare": sorted(c.kept for c in node_plan.spare),
            })
        entries.append(entry)
    return entries


# ---------------------------------------------------------------------------------------------------------
# Small helpers shared with the filters
# ---------------------------------------------------------------------------------------------------------


def smt_sibling_groups(topology: Dict[str, Any]) -> List[List[int]]:
    """The CPUs of each physical core (thread groups), as the planner sees them, sorted by first CPU."""
    return [list(core.threads) for core in _Model(topology).cores]


def numa_layout(topology: Dict[str, Any], policy: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The CPU side of the Layout: SMT, housekeeping, ranks and the per-node split."""
    layout = plan(topology, policy)
    keys = ("schema", "policy", "smt_control", "smt_offline", "housekeeping", "ranks", "numa", "reasons", "warnings")
    return {k: layout[k] for k in keys}


def irq_layout(topology: Dict[str, Any], policy: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The IRQ side of the Layout: pinned NIC and GPU vectors, managed IRQs, vectors left alone, irqbalance."""
    layout = plan(topology, policy)
    keys = ("schema", "policy", "irq_affinity", "nic_irq_cpus", "gpu_irq_affinity", "managed_irqs", "irq_left_alone",
            "irqbalance", "warnings")
    return {k: layout[k] for k in keys}
