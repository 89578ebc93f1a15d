# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""CPU, SMT, NUMA, cpufreq and cpuidle discovery (``/sys/devices/system/{cpu,node}``).

Real captures disagree on almost every file: some have no global ``cpu/online`` list, old kernels have no
``die_id``, util-linux dumps have only ``nodeN/cpumap``, node ids can be sparse and nodes can be CPU-less.
Each reader below therefore falls back to the next source the kernel offers and reports ``None`` (never a
guess) when none exists; the caller collects what is missing into ``absent``/``warnings``.
"""

from __future__ import annotations

from ansible_collections.nodetune.instinct.plugins.module_utils.discover.structure import (
    are_bools,
    are_int_lists,
    are_ints,
    are_ints_or_none,
    are_strs,
    is_int,
    is_record,
    same_length,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import (
    ParseError,
    format_cpulist,
    leading_decimal,
    number_after,
    parse_cpulist,
    parse_cpumask,
    parse_int,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: they are postponed, so typing is never imported at run time
    from typing import Any, Callable, Dict, List, Optional, Tuple

CPU_DIR = "sys/devices/system/cpu"
NODE_DIR = "sys/devices/system/node"
CPU_LIST_NAMES = ("online", "offline", "possible", "present", "isolated", "nohz_full")
SMT_CONTROL_VALUES = ("on", "off", "forceoff", "notsupported", "notimplemented")

_CPU_NAME = "cpu"  # directory names: the prefix, then the number (cpu12, node1, policy0, state3)
_NODE_NAME = "node"
_POLICY_NAME = "policy"
_STATE_NAME = "state"
_TOPOLOGY_FILES = ("core_id", "physical_package_id", "die_id", "thread_siblings_list")
_MEMTOTAL = "MemTotal:"


def numbered(names: List[str], prefix: str) -> List[Tuple[int, str]]:
    """``[(n, name)]`` for the directory entries named ``prefix`` + a number, sorted numerically."""
    found = []
    for name in names:
        number = number_after(name, prefix)
        if number is not None:
            found.append((number, name))
    found.sort()
    return found


def memtotal_kb(meminfo: str) -> Optional[int]:
    """The first ``MemTotal: <n> kB`` of a node's meminfo (``Node 0 MemTotal:  263856268 kB``), else None
    (``MemTotal:\\s+(\\d+)\\s*kB``, searched)."""
    start = meminfo.find(_MEMTOTAL)
    while start >= 0:
        after = meminfo[start + len(_MEMTOTAL):]
        rest = after.lstrip()
        digits = leading_decimal(rest)
        if digits and len(rest) < len(after) and rest[len(digits):].lstrip().startswith("kB"):
            return int(digits)
        start = meminfo.find(_MEMTOTAL, start + 1)
    return None


# Kernels print "(null)" for an unset cpumask (nohz_full without the boot option on older kernels).
_EMPTY_MASK_TEXTS = ("", "(null)")


# Memoised parses (a dict, not functools.lru_cache: importing functools is a measurable share of each
# `nodetune discover` start). Bounded, because module_utils also run in long-lived controller processes.
_MEMO_LIMIT = 4096
_CPULIST_MEMO: Dict[str, Tuple[int, ...]] = {}
_CPUMASK_MEMO: Dict[str, Tuple[int, ...]] = {}


def _memoised(memo: Dict[str, Tuple[int, ...]], parse: Callable[[str], List[int]], text: str) -> Tuple[int, ...]:
    cpus = memo.get(text)
    if cpus is None:
        cpus = tuple(parse(text))
        if len(memo) < _MEMO_LIMIT:
            memo[text] = cpus
    return cpus


def _cpulist_cached(text: str) -> Tuple[int, ...]:
    return _memoised(_CPULIST_MEMO, parse_cpulist, text)


def _cpumask_cached(text: str) -> Tuple[int, ...]:
    return _memoised(_CPUMASK_MEMO, parse_cpumask, text)


def cpulist_or_none(text: Optional[str], what: str, warnings: List[str]) -> Optional[List[int]]:
    """A cpulist file's CPUs; None where the file is absent; a warning (not a crash) on garbage.

    Thousands of IRQs carry the same few affinity strings, so parses are memoised.
    """
    if text is None:
        return None
    if text in _EMPTY_MASK_TEXTS:
        return []
    try:
        return list(_cpulist_cached(text))
    except ParseError:
        try:
            parse_cpulist(text, what)
        except ParseError as exc:  # re-raised with the file name in the message
            warnings.append(str(exc))
        return None


def cpumask_or_none(text: Optional[str], what: str, warnings: List[str]) -> Optional[List[int]]:
    if text is None:
        return None
    if text in _EMPTY_MASK_TEXTS:
        return []
    try:
        return list(_cpumask_cached(text))
    except ParseError:
        try:
            parse_cpumask(text, what)
        except ParseError as exc:
            warnings.append(str(exc))
        return None


# --------------------------------------------------------------------------------------------- cpu lists
def read_cpu_lists(root: Root, warnings: List[str]) -> Dict[str, Optional[List[int]]]:
    texts = root.read_attrs(CPU_DIR, CPU_LIST_NAMES)
    return {name: cpulist_or_none(texts[name], "%s/%s" % (CPU_DIR, name), warnings) for name in CPU_LIST_NAMES}


# --------------------------------------------------------------------------------------------- NUMA
def _distance_ids(root: Root, node_ids: List[int], width: int) -> Optional[List[int]]:
    """Node ids that label the columns of ``nodeN/distance``.

    The kernel prints one column per *online* node in id order; that is the node directories themselves
    unless a capture kept fewer directories than the kernel had online nodes.
    """
    if width == len(node_ids):
        return node_ids
    for name in ("online", "possible"):
        text = root.read(NODE_DIR + "/" + name)
        if text:
            try:
                ids = parse_cpulist(text, "%s/%s" % (NODE_DIR, name))
            except ParseError:
                continue
            if len(ids) == width:
                return ids
    return None


def read_numa_nodes(root: Root, warnings: List[str]) -> List[Dict[str, Any]]:
    nodes: List[Dict[str, Any]] = []
    for node_id, name in numbered(root.listdir(NODE_DIR), _NODE_NAME):
        rel = NODE_DIR + "/" + name
        texts = root.read_attrs(rel, ("cpulist", "cpumap", "distance", "meminfo"))
        cpus = cpulist_or_none(texts["cpulist"], rel + "/cpulist", warnings)
        if cpus is None:
            cpus = cpumask_or_none(texts["cpumap"], rel + "/cpumap", warnings)
        if cpus is None:
            warnings.append("%s has neither cpulist nor cpumap: its CPUs are unknown" % rel)
            cpus = []
        memory_kb = None
        if texts["meminfo"]:
            memory_kb = memtotal_kb(texts["meminfo"])
        nodes.append({"id": node_id, "cpus": cpus, "distances": texts["distance"], "memory_kb": memory_kb,
                      "has_cpus": bool(cpus)})
    node_ids = [node["id"] for node in nodes]
    for node in nodes:
        node["distances"] = _parse_distances(root, node["id"], node["distances"], node_ids, warnings)
    return nodes


def _parse_distances(root: Root, node_id: int, text: Optional[str], node_ids: List[int],
                     warnings: List[str]) -> Dict[str, int]:
    if not text:
        return {}
    try:
        values = [int(v) for v in text.split()]
    except ValueError:
        warnings.append("%s/node%d/distance %r is not a list of numbers" % (NODE_DIR, node_id, text))
        return {}
    ids = _distance_ids(root, node_ids, len(values))
    if ids is None:
        warnings.append("%s/node%d/distance has %d columns but %d nodes exist: distances not labelled"
                        % (NODE_DIR, node_id, len(values), len(node_ids)))
        return {}
    return {str(i): v for i, v in zip(ids, values)}


# --------------------------------------------------------------------------------------------- CPUs
def online_evidence(cpu_lists: Dict[str, Optional[List[int]]]) -> Optional[List[Optional[str]]]:
    """The CPU sets a cached CPU structure was read under (``online``, ``possible``, ``present``, as cpulists); None
    where the kernel gives no global ``online`` list: each CPU's online state then is its own file, which a cache
    would have to read anyway.

    Why they suffice (with the boot, see structure.BOOT_ID): a CPU's directory, its topology ids and whether it can be
    offlined are fixed when it is registered (drivers/base/cpu.c register_cpu, for each present CPU; physical hotplug
    changes ``present``); what else the kernel shows per CPU follows the online set: thread_siblings_list drops offline
    siblings (arch/x86/kernel/smpboot.c remove_siblinginfo), an offline CPU has no cache/ directory, and a cpufreq
    policy's affected_cpus are its online CPUs (drivers/cpufreq/cpufreq.c cpufreq_offline)."""
    if cpu_lists["online"] is None:
        return None
    return [None if cpu_lists[name] is None else format_cpulist(cpu_lists[name] or [])
            for name in ("online", "possible", "present")]


def read_cpus(root: Root, cpu_lists: Dict[str, Optional[List[int]]], numa_nodes: List[Dict[str, Any]],
              warnings: List[str], store: Any = None) -> List[Dict[str, Any]]:
    """One entry per ``cpuN`` directory: its structure from ``store`` where it was read under the same
    :func:`online_evidence`, else read afresh (and given to ``store``); its online state and NUMA node afresh.

    A CPU's NUMA node is taken from the node cpulists already read (the kernel's own truth, one read per
    node); only a CPU that no node lists costs a listing of its directory for the ``nodeN`` link.
    """
    evidence = online_evidence(cpu_lists) if store is not None else None
    structure = store.known("cpus", evidence, _valid_cpu_structure) if evidence is not None else None
    online_texts: List[Optional[str]] = []
    if structure is None:
        structure, online_texts = _cpu_structure(root, numa_nodes)
        if evidence is not None:
            store.learn("cpus", evidence, structure)
    warnings.extend(structure["warnings"])
    return _cpu_values(root, structure, online_texts, cpu_lists, numa_nodes, warnings)


def _cpu_structure(root: Root, numa_nodes: List[Dict[str, Any]]) -> Tuple[Dict[str, Any], List[Optional[str]]]:
    """What does not change while the online set stays (see online_evidence), in columns, and each CPU's ``online``
    file (a value: read here because its presence is structure, used only where there is no global list)."""
    root.subdirs(CPU_DIR)  # resolves every plain cpuN directory at once (see Root.subdirs)
    cpu_dirs = numbered(root.listdir(CPU_DIR), _CPU_NAME)
    online_files = root.read_attrs_many([CPU_DIR + "/" + name for _cpu, name in cpu_dirs], ("online",))
    topologies = root.read_attrs_many(
        ["%s/%s/topology" % (CPU_DIR, name) for _cpu, name in cpu_dirs], _TOPOLOGY_FILES)
    listed = set(cpu for node in numa_nodes for cpu in node["cpus"])
    warnings: List[str] = []
    columns: Dict[str, Any] = {"ids": [], "names": [], "hotpluggable": [], "core_id": [], "package": [], "die": [],
                               "thread_siblings": [], "node_links": {}, "warnings": warnings}
    for (cpu_id, name), (topo_texts, _mode) in zip(cpu_dirs, topologies):
        rel = CPU_DIR + "/" + name
        topo = dict(zip(_TOPOLOGY_FILES, topo_texts))
        siblings = cpulist_or_none(topo.get("thread_siblings_list"), rel + "/topology/thread_siblings_list",
                                   warnings)
        if siblings is None and topo.get("thread_siblings_list") is None:  # kernels before the _list files
            mask = root.read(rel + "/topology/thread_siblings")
            siblings = cpumask_or_none(mask, rel + "/topology/thread_siblings", warnings)
        if numa_nodes and cpu_id not in listed:
            columns["node_links"][str(cpu_id)] = _node_link(root, rel)
        columns["ids"].append(cpu_id)
        columns["names"].append(name)
        columns["core_id"].append(parse_int(topo.get("core_id")))
        columns["package"].append(parse_int(topo.get("physical_package_id")))
        columns["die"].append(parse_int(topo.get("die_id")))
        columns["thread_siblings"].append(siblings)
    online_texts = [texts[0] for texts, _mode in online_files]
    columns["hotpluggable"] = [text is not None for text in online_texts]
    return columns, online_texts


def _node_link(root: Root, rel: str) -> Optional[int]:
    """The NUMA node of a CPU's ``nodeN`` link (drivers/base/node.c register_cpu_under_node: fixed while it runs)."""
    for entry in root.listdir(rel):
        node = number_after(entry, _NODE_NAME)
        if node is not None:
            return node
    return None


def _valid_cpu_structure(columns: Any) -> bool:
    return (is_record(columns, {"ids": are_ints, "names": are_strs, "hotpluggable": are_bools,
                                "core_id": are_ints_or_none, "package": are_ints_or_none, "die": are_ints_or_none,
                                "thread_siblings": lambda v: are_int_lists(v, allow_none=True),
                                "node_links": lambda v: isinstance(v, dict) and are_ints_or_none(list(v.values())),
                                "warnings": are_strs})
            and same_length(*(columns[key] for key in ("ids", "names", "hotpluggable", "core_id", "package", "die",
                                                       "thread_siblings")))
            and all(number_after(name, _CPU_NAME) == cpu for cpu, name in zip(columns["ids"], columns["names"])))


def _cpu_values(root: Root, columns: Dict[str, Any], online_texts: List[Optional[str]],
                cpu_lists: Dict[str, Optional[List[int]]], numa_nodes: List[Dict[str, Any]],
                warnings: List[str]) -> List[Dict[str, Any]]:
    """The CPU entries: the structure's fields, with each CPU's online state and NUMA node as the node is now."""
    online_set = set(cpu_lists["online"]) if cpu_lists["online"] is not None else None
    node_of: Dict[int, int] = {}
    for node in numa_nodes:
        for cpu in node["cpus"]:
            node_of.setdefault(cpu, node["id"])
    links = columns["node_links"]
    cpus: List[Dict[str, Any]] = []
    for index, cpu_id in enumerate(columns["ids"]):
        hotpluggable = columns["hotpluggable"][index]
        if online_set is not None:
            online = cpu_id in online_set
        elif hotpluggable:
            online = online_texts[index] == "1"
        else:
            online = True  # no file anywhere: the kernel cannot offline it (CPU0 on x86 >= 6.5)
        numa_node = node_of.get(cpu_id)
        if numa_node is None and numa_nodes:
            key = str(cpu_id)
            numa_node = links[key] if key in links else _node_link(root, CPU_DIR + "/" + columns["names"][index])
        cpus.append({
            "id": cpu_id,
            "online": online,
            "hotpluggable": hotpluggable,
            "core_id": columns["core_id"][index],
            "package": columns["package"][index],
            "die": columns["die"][index],
            "numa_node": numa_node,
            "thread_siblings": columns["thread_siblings"][index],
        })
    if cpus and cpu_lists["online"] is None:
        warnings.append("%s/online is absent: online state taken from cpuN/online files" % CPU_DIR)
    return cpus


def online_cpus_text(cpus: List[Dict[str, Any]]) -> str:
    """The online CPUs as a cpulist: what the L3 domains and the cpufreq policies' CPUs of a running node follow (see
    online_evidence)."""
    return format_cpulist(cpu["id"] for cpu in cpus if cpu["online"])


def read_l3_domains(root: Root, cpus: List[Dict[str, Any]], warnings: List[str], store: Any = None) -> List[List[int]]:
    """The CPU sets that share a level-3 cache (``cpuN/cache/index3/shared_cpu_list``: an EPYC CCX/CCD).

    One read per domain, not per CPU: a CPU already listed in a domain read before is skipped. Offline CPUs
    have no cache directory (the kernel drops them from the masks), so only online CPUs are read. Returns []
    where the kernel shows no L3 (``index3`` absent, or not level 3). Structure only: taken from ``store`` where the
    online CPUs are the same (the cache topology is fixed per boot, drivers/base/cacheinfo.c).
    """
    evidence = online_cpus_text(cpus) if store is not None else None
    known = store.known("l3_domains", evidence, _valid_l3) if store is not None else None
    if known is None:
        found: List[str] = []
        known = {"domains": _l3_domains(root, cpus, found), "warnings": found}
        if store is not None:
            store.learn("l3_domains", evidence, known)
    warnings.extend(known["warnings"])
    return known["domains"]


def _valid_l3(value: Any) -> bool:
    return is_record(value, {"domains": are_int_lists, "warnings": are_strs})


def _l3_domains(root: Root, cpus: List[Dict[str, Any]], warnings: List[str]) -> List[List[int]]:
    domains: List[List[int]] = []
    seen = set()  # type: set
    for cpu in cpus:
        if not cpu.get("online") or cpu["id"] in seen:
            continue
        rel = "%s/cpu%d/cache/index3" % (CPU_DIR, cpu["id"])
        texts = root.read_attrs(rel, ("level", "shared_cpu_list", "shared_cpu_map"))
        if texts["level"] != "3":
            continue
        shared = cpulist_or_none(texts["shared_cpu_list"], rel + "/shared_cpu_list", warnings)
        if shared is None and texts["shared_cpu_list"] is None:
            shared = cpumask_or_none(texts["shared_cpu_map"], rel + "/shared_cpu_map", warnings)
        if not shared:
            continue
        if cpu["id"] not in shared:
            shared = sorted(set(shared) | {cpu["id"]})
        seen.update(shared)
        domains.append(sorted(shared))
    return sorted(domains)


def read_smt(root: Root, cpus: List[Dict[str, Any]], warnings: List[str]) -> Dict[str, Any]:
    texts = root.read_attrs(CPU_DIR + "/smt", ("control", "active"))
    control = texts["control"]
    if control is not None and control not in SMT_CONTROL_VALUES:
        warnings.append("%s/smt/control reads %r, not one of %s" % (CPU_DIR, control, ", ".join(SMT_CONTROL_VALUES)))
    active = None
    if texts["active"] in ("0", "1"):
        active = texts["active"] == "1"
    widths = [len(cpu["thread_siblings"]) for cpu in cpus if cpu["thread_siblings"]]
    return {"control": control, "active": active, "threads_per_core": max(widths) if widths else None}


# --------------------------------------------------------------------------------------------- cpufreq
# Per policy: which CPUs it governs (structure) and their state (values). The kernel has ONE cpufreq driver (a
# global), so the driver's name and the lists of what it accepts are the same in every policy: they are read from the
# first policy that has them, not from all of them (a 384-CPU node has 384 policies: 1,152 files saved).
_POLICY_FILES = ("scaling_governor", "energy_performance_preference")
_DRIVER_FILES = ("scaling_driver", "scaling_available_governors", "energy_performance_available_preferences")


def _cpufreq_sources(root: Root, cpus: List[Dict[str, Any]],
                     policies: List[Tuple[int, str]]) -> List[Tuple[str, Optional[List[int]]]]:
    """Directories holding cpufreq attributes, with the CPUs each one governs when known up front.

    Kernels >= 4.x expose ``cpu/cpufreq/policyN`` (one per frequency domain); older ones only
    ``cpuN/cpufreq``. Reading policies avoids resolving one ``cpuN/cpufreq`` symlink per CPU.
    """
    if policies:
        return [(CPU_DIR + "/cpufreq/" + name, None) for _policy, name in policies]
    sources: List[Tuple[str, Optional[List[int]]]] = []
    for cpu in cpus:
        rel = "%s/cpu%d/cpufreq" % (CPU_DIR, cpu["id"])
        if not cpu["online"]:
            continue
        if not root.isdir(rel):
            if not sources:
                break  # a cpufreq driver covers every CPU or none: no need to probe the other CPUs
            continue
        sources.append((rel, [cpu["id"]]))
    return sources


def read_cpufreq(root: Root, cpus: List[Dict[str, Any]], warnings: List[str], store: Any = None,
                 values: bool = True) -> Dict[str, Any]:
    """The cpufreq driver and each policy's governor and EPP, read afresh (``values=False``: governors and EPP are
    None, not read: the Settings that set them read them); which CPUs each policy governs from
    ``store`` where it was read under the same evidence: the online CPUs, the policy directories and the driver. A
    policy is created for its CPUs when the driver registers and kept while they go offline and back (cpufreq.c
    cpufreq_online/cpufreq_offline); a new driver (amd_pstate/status switched, a module loaded) may group them
    anew, and says its name in scaling_driver."""
    policies = numbered(root.subdirs(CPU_DIR + "/cpufreq"), _POLICY_NAME)
    evidence = cpufreq_evidence(root, cpus, policies) if store is not None and policies else None
    known = store.known("cpufreq", evidence, _valid_cpufreq) if evidence is not None else None
    if known is None:
        known = _cpufreq_structure(root, cpus, policies)
        if evidence is not None:
            store.learn("cpufreq", evidence, known)
    warnings.extend(known["warnings"])
    return _cpufreq_values(root, known["sources"], known["owned"], values)


def cpufreq_evidence(root: Root, cpus: List[Dict[str, Any]], policies: List[Tuple[int, str]]) -> List[Optional[str]]:
    """The online CPUs, the policy directories and the driver's name (from the first policy)."""
    return [online_cpus_text(cpus), format_cpulist(number for number, _name in policies),
            root.read("%s/cpufreq/%s/scaling_driver" % (CPU_DIR, policies[0][1]))]


def _cpufreq_structure(root: Root, cpus: List[Dict[str, Any]], policies: List[Tuple[int, str]]) -> Dict[str, Any]:
    online = {cpu["id"] for cpu in cpus if cpu["online"]}
    warnings: List[str] = []
    sources = _cpufreq_sources(root, cpus, policies)
    affected = root.read_attrs_many([rel for rel, _owned in sources], ("affected_cpus",))
    owned_lists: List[List[int]] = []
    for (rel, owned), ((affected_text,), _mode) in zip(sources, affected):
        if owned is None:
            related = affected_text or root.read(rel + "/related_cpus")
            owned = cpulist_or_none(related, rel + "/affected_cpus", warnings) or []
            owned = [c for c in owned if c in online] or owned
        owned_lists.append(owned)
    return {"sources": [rel for rel, _owned in sources], "owned": owned_lists, "warnings": warnings}


def _valid_cpufreq(value: Any) -> bool:
    return (is_record(value, {"sources": are_strs, "owned": are_int_lists, "warnings": are_strs})
            and same_length(value["sources"], value["owned"])
            and all(source.startswith(CPU_DIR + "/") for source in value["sources"]))


def _cpufreq_values(root: Root, sources: List[str], owned_lists: List[List[int]], values: bool = True
                    ) -> Dict[str, Any]:
    governors: Dict[str, List[int]] = {}
    epp: Dict[str, List[int]] = {}
    per_policy = root.read_attrs_many(sources, _POLICY_FILES) if values else []
    for owned, ((governor, preference), _mode) in zip(owned_lists, per_policy):
        if governor:
            governors.setdefault(governor, []).extend(owned)
        if preference:
            epp.setdefault(preference, []).extend(owned)
    driver_texts: Dict[str, Optional[str]] = dict.fromkeys(_DRIVER_FILES)
    for rel in sources:
        missing = [name for name in _DRIVER_FILES if not driver_texts[name]]
        if not missing:
            break
        driver_texts.update((k, v) for k, v in root.read_attrs(rel, missing).items() if v)
    available: List[str] = []
    for gov in (driver_texts["scaling_available_governors"] or "").split():
        if gov not in available:
            available.append(gov)
    preferences = driver_texts["energy_performance_available_preferences"]
    boost = parse_int(root.read(CPU_DIR + "/cpufreq/boost"))
    return {
        "driver": driver_texts["scaling_driver"] or None,
        "governors": {gov: sorted(set(c)) for gov, c in sorted(governors.items())} if values else None,
        "available_governors": available,
        "amd_pstate_status": root.read(CPU_DIR + "/amd_pstate/status"),
        "epp": {value: sorted(set(c)) for value, c in sorted(epp.items())} if epp and values else None,
        "available_epp": preferences.split() if preferences else None,
        "boost": boost,
    }


# --------------------------------------------------------------------------------------------- cpuidle
def read_cpuidle(root: Root, cpus: List[Dict[str, Any]], store: Any = None, values: bool = True) -> Dict[str, Any]:
    """Idle states per CPU. cpuidle registers every CPU or none, so a first online CPU without states
    ends the walk (a node without cpuidle costs one failed listing, not one per CPU).

    The state directories are listed with ``subdirs`` (their resolution comes free with the listing) and their
    ``disable`` files are read in one batch; a state's ``name`` is read from the first CPU that has it (the names
    belong to the cpuidle driver, one for the whole kernel): a 384-CPU node has ~1,150 of each.

    ``values=False``: the ``disable`` files are not read (each state's ``disabled_cpus`` is None: the Settings that
    set them read them), and which CPUs have which states is taken from ``store`` where the online CPUs, the driver
    and the first online CPU's state directories are the same (the driver registers each CPU's states when it comes
    online, drivers/cpuidle/cpuidle.c cpuidle_register_device)."""
    online = [cpu["id"] for cpu in cpus if cpu["online"]]
    driver = root.read(CPU_DIR + "/cpuidle/current_driver")
    evidence = None
    if not values and store is not None and online:
        first = root.subdirs("%s/cpu%d/cpuidle" % (CPU_DIR, online[0]))
        evidence = [format_cpulist(online), driver, first]
        known = store.known("cpuidle", evidence, _valid_cpuidle)
        if known is not None:
            return {"driver": driver, "states": [{"index": state["index"], "name": state["name"], "disabled_cpus": None,
                                                  "cpus_with_state": state["cpus_with_state"]} for state in known]}
    listed: List[Tuple[int, int, str]] = []  # (cpu, state index, state directory)
    for cpu_id in online:
        rel = "%s/cpu%d/cpuidle" % (CPU_DIR, cpu_id)
        found = numbered(root.subdirs(rel), _STATE_NAME)
        if not found and not listed:
            break
        listed.extend((cpu_id, index, rel + "/" + name) for index, name in found)
    states: Dict[int, Dict[str, Any]] = {}
    disables = root.read_attrs_many([path for _cpu, _index, path in listed], ("disable",)) if values else (
        [([None], None)] * len(listed))
    for (cpu_id, index, path), ((disable,), _mode) in zip(listed, disables):
        state = states.get(index)
        if state is None:
            state = states[index] = {"index": index, "name": None, "disabled_cpus": [] if values else None,
                                     "cpus_with_state": []}
        if state["name"] is None:
            state["name"] = root.read(path + "/name")
        state["cpus_with_state"].append(cpu_id)
        if disable == "1":
            state["disabled_cpus"].append(cpu_id)
    ordered = [states[i] for i in sorted(states)]
    if evidence is not None:
        store.learn("cpuidle", evidence, [{"index": state["index"], "name": state["name"],
                                           "cpus_with_state": state["cpus_with_state"]} for state in ordered])
    return {"driver": driver, "states": ordered}


def _valid_cpuidle(value: Any) -> bool:
    return isinstance(value, list) and all(
        is_record(state, {"index": is_int, "name": lambda name: name is None or isinstance(name, str),
                          "cpus_with_state": are_ints}) for state in value)
