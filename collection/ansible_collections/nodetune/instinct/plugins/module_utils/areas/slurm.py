# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The slurm area: a gres.conf fragment from the planned layout, and read-only checks of the limits jobs get.

gres.conf (``slurm.gres``): one ``Name=gpu Type=<model> File=/dev/dri/renderD<N> Cores=<list>`` line per GPU, GCD
or partition, in KFD order (HIP's device order). ``File`` is the render node of that partition: KFD gives every
node its DRM render minor (``drm_render_minor`` in ``topology/nodes/<n>/properties``; for a partition, that of
its own amdgpu_xcp DRM device since "drm/amdkfd: Store drm node minor number for kfd nodes", Linux 6.5), the
number Slurm's own AMD autodetection writes as ``/dev/dri/renderD<minor>`` (src/plugins/gpu/rsmi/gpu_rsmi.c,
rsmi_dev_drm_render_minor_get). ``Cores`` are the rank's cores (or its NUMA node's) as **Slurm's core indexes**:
gres.conf(5), Cores: "a logical core index must be specified instead of the physical core index ... This numbering
coincides with the logical core number (Core L#) seen in "lstopo -l" command output"; slurmd converts them back to
Linux CPUs through hwloc (src/common/gres.c, xcpuinfo_abs_to_mac). hwloc numbers objects of one type in the order
of a depth-first walk of its tree, children sorted by their first CPU (hwloc's documentation, "Terms and
Definitions": logical index), so a core's index follows its package, NUMA node, die and caches, not its Linux
number: on a two-socket Xeon whose CPUs alternate between the sockets, Linux CPU 1 is on the second package and
its core comes after every core of the first.

The read-only checks (``slurm.propagate_limits``, ``slurm.slurmd_memlock``, ``slurm.gres_include``) only read, and
only where the files exist: slurm.conf's PropagateResourceLimits (its default, ALL, carries the submitting shell's
memlock limit into every task: Slurm FAQ "memlock"), slurmd.service's LimitMEMLOCK from its unit file and drop-ins
in systemd's order (area_limits.unit_memlock: whoever wrote them), and whether the site's gres.conf includes the
fragment.
"""

from __future__ import annotations

import posixpath
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.plan import owned_paths
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import limits as area_limits
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import (
    choices,
    role_variables,
    CPU_DIR,
    Context,
    describe,
    unknown_keys,
    want_bool,
    want_str,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.devices import KFD_NODES_DIR
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import DRIFT, OK, Finding
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import (
    ParseError,
    format_cpulist,
    is_digits,
    parse_cpulist,
    parse_key_value,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import CONTENT, FILE, Setting

# The area's declaration: its role (ROLE), variables as an Ansible argument spec, check ids and docs; its
# role's files are generated from it (scripts/gen_role_docs.py) and declarations.py collects every area's.
ROLE = "slurm"
DECLARATION = {
    'kind': 'area',
    'order': 76,  # one file of its own, independent of the other areas' settings
    'builder': 'slurm',
    'setting_area': 'slurm',
    'finding_prefix': 'slurm',
    'check_ids': ['slurm.gres', 'slurm.gres_include', 'slurm.propagate_limits', 'slurm.slurmd_memlock'],
    'galaxy_tags': ['slurm', 'gpu'],
    'severity': 'medium',
    'short_description': "Slurm gets the layout: a gres.conf fragment with each GPU's cores, and job limit checks "
                         '(opt-in)',
    'description': [
        (
            'Writes a gres.conf fragment (C(nodetune_slurm_gres_path), which the site includes from its '
            'gres.conf with C(Include <path>)) with one C(Name=gpu Type=<model> File=/dev/dri/renderD<N> '
            "Cores=<list>) line per GPU, GCD or partition, the cores being the GPU's rank cores from the layout "
            "(or its NUMA node's). C(Cores=) are Slurm's core indexes, which are hwloc's logical core indexes "
            '(gres.conf(5): "a logical core index must be specified instead of the physical core index"), not '
            'Linux CPU numbers: nodetune converts them. C(File=) is the render node KFD names for each partition '
            '(C(drm_render_minor)).'
        ),
        (
            'Read-only checks, where the files exist: C(slurm.propagate_limits) (slurm.conf\'s '
            "C(PropagateResourceLimits) default ALL carries a login node's small memlock limit into every job), "
            "C(slurm.slurmd_memlock) (slurmd.service's effective C(LimitMEMLOCK) from its unit file and "
            'drop-ins) and C(slurm.gres_include) (whether gres.conf includes the fragment).'
        ),
        (
            'Off by default. slurmd reads the file at its next start or C(scontrol reconfigure): nodetune '
            'restarts nothing. Revert puts back what was there. See docs/slurm.md.'
        ),
    ],
    'variables': {
        'nodetune_slurm_enabled': {
            'type': 'bool',
            'default': False,
            'description': [
                'Tune this area (opt-in). When false the area is left exactly as it is.',
            ],
        },
        'nodetune_slurm_gres': {
            'type': 'str',
            'default': 'auto',
            'choices': ['auto', 'always', 'never'],
            'description': [
                (
                    'C(auto) writes the gres.conf fragment where the node has a slurm.conf (in C(/etc/slurm) or '
                    'C(/etc/slurm-llnl)) and AMD GPUs; C(always) wherever it has AMD GPUs; C(never) writes none '
                    "(sites that leave gres.conf to Slurm's C(AutoDetect=rsmi)). The read-only checks run "
                    'either way.'
                ),
            ],
        },
        'nodetune_slurm_gres_path': {
            'type': 'str',
            'default': '/etc/slurm/nodetune-gres.conf',
            'description': [
                (
                    'The file nodetune owns and writes. Slurm reads only the gres.conf beside slurm.conf: add '
                    "C(Include /etc/slurm/nodetune-gres.conf) to it (verify reports C(slurm.gres_include) until "
                    'then), or point this at that gres.conf to let nodetune own all of it. An absolute path '
                    "without spaces, quotes, C(#) or C(=) (Slurm's Include takes one word)."
                ),
                (
                    "In Slurm's configuration folders, C(/etc/slurm) or C(/etc/slurm-llnl) (and their subfolders), "
                    'unless C(nodetune_slurm_gres_path_anywhere) is true. Refused before anything is written: '
                    "nodetune's own files and folders (C(/var/lib/nodetune), C(/etc/nodetune), C(nodetune-*) "
                    'programs and units, a file another area writes), a link, a directory, a special file, and an '
                    'existing file nodetune did not create, unless it is a C(gres.conf).'
                ),
            ],
        },
        'nodetune_slurm_gres_path_anywhere': {
            'type': 'bool',
            'default': False,
            'description': [
                (
                    "Let C(nodetune_slurm_gres_path) name a file outside Slurm's configuration folders (a Slurm "
                    'built with another C(--sysconfdir), such as C(/usr/local/etc/slurm)). nodetune\'s own files '
                    'and the other refusals stay.'
                ),
            ],
        },
        'nodetune_slurm_gres_type': {
            'type': 'str',
            'default': 'auto',
            'description': [
                (
                    "The gres C(Type=), which slurm.conf's C(Gres=gpu:<type>:<count>) must name. C(auto): the "
                    "GPU's model lower case, other characters as C(_) (C(mi300x), C(mi250x_mi250)). Letters, "
                    "digits, C(_), C(.) and C(-) only."
                ),
            ],
        },
        'nodetune_slurm_gres_cores': {
            'type': 'str',
            'default': 'rank',
            'choices': ['rank', 'numa'],
            'description': [
                (
                    "C(rank): each GPU's C(Cores=) are its rank's cores from the layout (disjoint from "
                    'housekeeping and from the other GPUs). C(numa): every core of its NUMA node.'
                ),
            ],
        },
    },
}

AREA = "slurm"
VARIABLES = role_variables(ROLE, DECLARATION)
GRES_ID, PROPAGATE_ID, MEMLOCK_ID, INCLUDE_ID = ("slurm.gres", "slurm.propagate_limits", "slurm.slurmd_memlock",
                                                 "slurm.gres_include")
CHECK_IDS = (GRES_ID, PROPAGATE_ID, MEMLOCK_ID, INCLUDE_ID)
GRES_MODES = choices(DECLARATION, "nodetune_slurm_gres")
CORE_MODES = choices(DECLARATION, "nodetune_slurm_gres_cores")
DEFAULT_PATH = "/etc/slurm/nodetune-gres.conf"
# Where Slurm's packages put slurm.conf (SLURM_CONF's default is /etc/slurm/slurm.conf; Debian before Slurm 20.11
# and Ubuntu before 22.04 used /etc/slurm-llnl); gres.conf lives beside it (gres.conf(5): "The file will always be
# located in the same directory as slurm.conf")
CONF_DIRS = ("etc/slurm", "etc/slurm-llnl")
SLURMD_UNIT = "slurmd.service"
# slurm.conf(5), PropagateResourceLimits: the limits a job can carry from the submit host
RLIMITS = ("AS", "CORE", "CPU", "DATA", "FSIZE", "MEMLOCK", "NOFILE", "NPROC", "RSS", "STACK")
# characters of a gres Type that Slurm's gres parser and slurm.conf's Gres=gpu:<type>:<count> both take as one word
_TYPE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_PATH_BAD = frozenset(" \t\r\n\x00#\"'=")
OWN_HEADER = "# Managed by nodetune (slurm area)"
HEADER = (OWN_HEADER + ": the GPU layout for Slurm; changes are overwritten.\n"
          "# Read it from gres.conf with: Include %s\n"
          "# Cores= are Slurm's core indexes (hwloc's logical Core L#, gres.conf(5) Cores), not Linux CPU numbers.\n")


class _Problem(ValueError):
    """The node cannot be described to Slurm (a GPU without a render node): refused before any write."""


# ------------------------------------------------------------------------------------------------ hwloc's order
def _online(topology: Dict[str, Any]) -> Set[int]:
    return set(c["id"] for c in topology.get("cpus") or [] if c.get("online"))


def _cores(topology: Dict[str, Any]) -> Dict[int, Tuple[int, ...]]:
    """Online CPU -> the online threads of its core, by CPU number. A core is the CPU's ``thread_siblings`` that have
    its ``core_id``: AMD family 15h (Bulldozer) lists the two cores of a compute unit as thread siblings with two
    core ids, and hwloc makes each its own core then (topology-linux.c, look_sysfscpu: threadwithcoreid)."""
    online = _online(topology)
    core_id = dict((c["id"], c.get("core_id")) for c in topology.get("cpus") or [])
    out: Dict[int, Tuple[int, ...]] = {}
    for cpu in sorted(topology.get("cpus") or [], key=lambda c: c["id"]):
        if cpu["id"] not in online:
            continue
        siblings = [s for s in (cpu.get("thread_siblings") or [cpu["id"]]) if s in online]
        same = [s for s in siblings if core_id.get(s) == cpu.get("core_id")]
        out[cpu["id"]] = tuple(sorted(set(same) | {cpu["id"]}))
    return out


def cache_sets(root: Any, topology: Dict[str, Any]) -> List[List[int]]:
    """Every distinct CPU cache's CPU set (``cpuN/cache/index*/shared_cpu_list`` of each core's first online
    thread): hwloc makes an object of each, so they order cores too (an L2 that two Bulldozer cores share, an L3
    per EPYC CCX)."""
    online = _online(topology)
    seen_cores: Set[Tuple[int, ...]] = set()
    out: Dict[Tuple[int, ...], None] = {}
    for cpu, core in _cores(topology).items():
        if core in seen_cores:
            continue
        seen_cores.add(core)
        base = "%s/cpu%d/cache" % (CPU_DIR, cpu)
        for index in root.listdir(base):
            if not index.startswith("index"):
                continue
            try:
                shared = parse_cpulist(root.read(base + "/" + index + "/shared_cpu_list") or "")
            except ParseError:
                continue
            members = tuple(sorted(set(shared) & online))
            if len(members) > 1:
                out.setdefault(members, None)
    return [list(s) for s in out]


def logical_cores(topology: Dict[str, Any], caches: Iterable[Sequence[int]] = ()) -> Dict[int, int]:
    """Linux CPU -> Slurm's core index (hwloc's logical core index) for every online CPU.

    hwloc builds one tree of the CPU sets it finds (packages, NUMA nodes, dies, caches, cores), each object under the
    smallest one that contains it, siblings sorted by their first CPU, and numbers the cores in a depth-first walk
    (offline CPUs are not in it). That order is: compare two cores at the first of their enclosing sets that differs,
    by that set's lowest CPU. A set that crosses another (neither inside the other) cannot be in a tree: like hwloc,
    the one met later is left out (packages first, then NUMA nodes, dies, caches)."""
    online = _online(topology)
    cpus = [c for c in topology.get("cpus") or [] if c["id"] in online]
    cores = dict((core, None) for core in _cores(topology).values())
    candidates: List[frozenset] = []
    by_package: Dict[Any, Set[int]] = {}
    by_die: Dict[Any, Set[int]] = {}
    for cpu in cpus:
        by_package.setdefault(cpu.get("package"), set()).add(cpu["id"])
        by_die.setdefault((cpu.get("package"), cpu.get("die")), set()).add(cpu["id"])
    candidates += [frozenset(s) for _k, s in sorted(by_package.items(), key=lambda kv: min(kv[1]))]
    candidates += [frozenset(set(n.get("cpus") or []) & online) for n in topology.get("numa_nodes") or []]
    candidates += [frozenset(s) for _k, s in sorted(by_die.items(), key=lambda kv: min(kv[1]))]
    candidates += [frozenset(set(s) & online) for s in topology.get("l3_domains") or []]
    candidates += [frozenset(set(s) & online) for s in caches]
    accepted: List[frozenset] = []
    for group in candidates:
        if not group or group in accepted:
            continue
        if any(group & other and not (group <= other or other <= group) for other in accepted):
            continue
        accepted.append(group)

    def key(core: Tuple[int, ...]) -> Tuple[int, ...]:
        members = set(core)
        chain = [g for g in accepted if members <= g and len(g) > len(members)]
        chain.sort(key=len, reverse=True)
        return tuple(min(g) for g in chain) + (min(core),)

    index: Dict[int, int] = {}
    for position, core in enumerate(sorted(cores, key=key)):
        for cpu in core:
            index[cpu] = position
    return index


def slurm_cores(cpus: Iterable[int], index: Dict[int, int]) -> List[int]:
    """The Slurm core indexes of the cores that hold ``cpus`` (offline CPUs have none)."""
    return sorted(set(index[c] for c in cpus if c in index))


# ------------------------------------------------------------------------------------------------ render nodes
def render_minors(root: Any, gpu: Dict[str, Any]) -> List[int]:
    """The DRM render minor of each KFD node (partition) of ``gpu``, in KFD order; the PCI device's own
    ``drm/renderD<N>`` where KFD has none (amdgpu without KFD: one partition)."""
    out = []
    for node in gpu.get("kfd_nodes") or []:
        props = parse_key_value(root.read("%s/%d/properties" % (KFD_NODES_DIR, node)) or "")
        minor = props.get("drm_render_minor", "")
        if not is_digits(minor) or int(minor) == 0:
            raise _Problem("GPU %s: KFD node %d has no drm_render_minor (a kernel older than Linux 4.15?)"
                           % (gpu.get("bdf"), node))
        out.append(int(minor))
    if not out and gpu.get("render_node") and is_digits(str(gpu["render_node"])[len("renderD"):]):
        out.append(int(str(gpu["render_node"])[len("renderD"):]))
    return out


def gres_type(gpu: Dict[str, Any]) -> str:
    """Slurm's gres Type for a GPU: its model name lower case, other characters as ``_`` (``MI300X`` -> ``mi300x``,
    ``MI250X/MI250`` -> ``mi250x_mi250``), as Slurm's autodetection lowers and underscores a device name
    (gpu_common_underscorify_tolower)."""
    name = str(gpu.get("name") or gpu.get("device") or "gpu")
    out = "".join(ch.lower() if ch.isalnum() and ch.isascii() else "_" for ch in name)
    return "_".join(part for part in out.split("_") if part) or "gpu"


# ------------------------------------------------------------------------------------------------ the file
def gres_text(root: Any, topology: Dict[str, Any], layout: Dict[str, Any], path: str, type_name: Optional[str],
              cores_mode: str) -> str:
    """The gres.conf fragment for this node's GPUs and layout (raises _Problem where a GPU has no render node)."""
    index = logical_cores(topology, cache_sets(root, topology))
    numa_cpus = dict((n["id"], n.get("cpus") or []) for n in topology.get("numa_nodes") or [])
    ranks = layout.get("ranks") or []
    rank_of = dict(((r["gpu"], r.get("partition") or 0), r) for r in ranks)
    entries = []
    for gpu in topology.get("gpus") or []:
        if gpu.get("vendor") != "amd":
            continue
        minors = render_minors(root, gpu)
        if not minors:
            raise _Problem("GPU %s has no render node (no KFD node and no drm/renderD<N> under its PCI device): is "
                           "amdgpu loaded?" % gpu.get("bdf"))
        for partition, minor in enumerate(minors):
            rank = rank_of.get((gpu["bdf"], partition)) or rank_of.get((gpu["bdf"], 0))  # per_device: one rank
            cpus: List[int] = []
            where = "no rank planned"
            if rank is not None:
                if cores_mode == "numa" and rank.get("numa_node") is not None:
                    cpus = list(numa_cpus.get(rank["numa_node"], []))
                    where = "rank %d, NUMA node %s" % (rank["rank"], rank["numa_node"])
                else:
                    cpus = list(rank.get("cpus") or [])
                    where = "rank %d" % rank["rank"]
            cores = slurm_cores(cpus, index)
            comment = "# GPU %s partition %d (%s): Linux CPUs %s" % (
                gpu["bdf"], partition, where, format_cpulist(sorted(cpus)) if cpus else "none (any core)")
            line = "Name=gpu Type=%s File=/dev/dri/renderD%d" % (type_name or gres_type(gpu), minor)
            if cores:
                line += " Cores=%s" % format_cpulist(cores)
            entries.append((minor, comment, line))
    entries.sort()
    body = "".join("%s\n%s\n" % (comment, line) for _minor, comment, line in entries)
    return HEADER % path + body


def slurm_conf(root: Any) -> Optional[str]:
    """slurm.conf's path relative to the root, where the node has one."""
    for directory in CONF_DIRS:
        if root.exists(directory + "/slurm.conf"):
            return directory + "/slurm.conf"
    return None


def _path(ctx: Context, config: Dict[str, Any]) -> Optional[str]:
    name = "nodetune_slurm_gres_path"
    value = config.get(name, DEFAULT_PATH)
    anywhere = want_bool(ctx, config, "nodetune_slurm_gres_path_anywhere", False)
    text = value if isinstance(value, str) else ""
    normal = posixpath.normpath(text) if text.startswith("/") else ""
    if (not normal or normal != text or text.endswith("/") or normal == "/" or _PATH_BAD & set(text)
            or posixpath.basename(normal) == "slurm.conf"):
        ctx.error("%s=%s is not valid: expected an absolute, normalised file path without spaces, quotes, '#' or "
                  "'=' (Slurm's Include line takes it as one word), not slurm.conf itself, e.g. %s"
                  % (name, describe(value), DEFAULT_PATH))
        return None
    rel = normal[1:]
    problem = (owned_paths.kind_problem(ctx.root, rel)
               or owned_paths.own_file_problem(ctx.root, rel, OWN_HEADER, posixpath.basename(DEFAULT_PATH))
               or _place_problem(ctx.root, rel, anywhere))
    if problem:
        ctx.error("%s=%s is not valid: %s; expected a new file, nodetune's fragment or a gres.conf in /%s (elsewhere "
                  "with nodetune_slurm_gres_path_anywhere: true), e.g. %s"
                  % (name, describe(value), problem, " or /".join(CONF_DIRS), DEFAULT_PATH))
        return None
    return normal


def _place_problem(root: Any, rel: str, anywhere: bool) -> Optional[str]:
    """Why the fragment may not be written at ``rel``: outside Slurm's folders (unless ``anywhere``), or over a file
    that is neither nodetune's nor a gres.conf (slurm.conf's gres.conf is one to take over: docs/slurm.md)."""
    if not anywhere and not any(rel.startswith(folder + "/") for folder in CONF_DIRS):
        return "it is outside Slurm's configuration folders"
    if not root.exists(rel) or posixpath.basename(rel) == "gres.conf":
        return None
    if rel in owned_paths.created_by_nodetune(root) or owned_paths.carries_marker(root, rel, (OWN_HEADER,)):
        return None
    return "the file exists and nodetune did not create it"


def _type(ctx: Context, config: Dict[str, Any]) -> Optional[str]:
    name = "nodetune_slurm_gres_type"
    value = config.get(name, "auto")
    if value == "auto":
        return None
    if not isinstance(value, str) or not value or not _TYPE_CHARS.issuperset(value):
        ctx.error("%s=%s is not valid: expected 'auto' (the GPU's model, e.g. mi300x) or the Type that slurm.conf's "
                  "Gres=gpu:<type>:<count> names: letters, digits, '_', '.' and '-' (no ':', ',', '=' or spaces)"
                  % (name, describe(value)))
    return value


def build(ctx: Context, config: Dict[str, Any]) -> List[Setting]:
    unknown_keys(ctx, config, VARIABLES, AREA)
    mode = want_str(ctx, config, "nodetune_slurm_gres", GRES_MODES) or "auto"
    path = _path(ctx, config)
    type_name = _type(ctx, config)
    cores_mode = want_str(ctx, config, "nodetune_slurm_gres_cores", CORE_MODES) or "rank"
    if ctx.errors or path is None or mode == "never":
        if mode == "never":
            ctx.notes.append("slurm: nodetune_slurm_gres is never: no gres.conf fragment (e.g. AutoDetect=rsmi)")
        return []
    if not any(g.get("vendor") == "amd" for g in ctx.topology.get("gpus") or []):
        ctx.notes.append("slurm: no AMD GPU on this node; no gres.conf fragment")
        return []
    if mode == "auto" and slurm_conf(ctx.root) is None:
        ctx.notes.append("slurm: no slurm.conf in /%s: Slurm is not set up on this node, so no gres.conf fragment "
                         "(nodetune_slurm_gres: always writes it anyway)" % " or /".join(CONF_DIRS))
        return []
    try:
        text = gres_text(ctx.root, ctx.topology, ctx.layout, path, type_name, cores_mode)
    except _Problem as exc:
        ctx.error("slurm: %s; no gres.conf fragment can name it (set nodetune_slurm_gres: never to leave gres.conf "
                  "to Slurm's AutoDetect)" % exc)
        return []
    return [Setting(GRES_ID, path, path, text, kind=FILE, compare=CONTENT, area=AREA,
                    reason="slurmd reads it at its next start or 'scontrol reconfigure'; nodetune restarts nothing")]


# ------------------------------------------------------------------------------------------------ read-only checks
def conf_lines(root: Any, rel: str, seen: Optional[Set[str]] = None) -> List[Tuple[str, int, str]]:
    """(file, line number, text) of every line Slurm reads from ``rel``, ``Include`` files in their place (a relative
    Include is taken from the including file's directory), the Include lines themselves kept too; comments and
    blank lines left out."""
    seen = set() if seen is None else seen
    if rel in seen:
        return []
    seen.add(rel)
    out = []
    for number, line in enumerate((root.read(rel, strip=False) or "").splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        out.append(("/" + rel, number, text))
        target = included(rel, text)
        if target is not None:
            out += conf_lines(root, target.lstrip("/"), seen)
    return out


def included(rel: str, text: str) -> Optional[str]:
    """The absolute path an ``Include <file>`` line of ``rel`` names; None for another line."""
    words = text.split(None, 1)
    if len(words) != 2 or words[0].lower() != "include":
        return None
    target = words[1].strip().strip("\"'")
    return posixpath.normpath(target if target.startswith("/") else "/" + posixpath.join(posixpath.dirname(rel),
                                                                                         target))


def conf_value(lines: List[Tuple[str, int, str]], key: str) -> Optional[Tuple[str, str]]:
    """The last ``key=value`` (keys case-insensitive, as Slurm's parser takes them) with where it is."""
    found = None
    for path, number, text in lines:
        for word in text.split():
            name, sep, value = word.partition("=")
            if sep and name.lower() == key.lower():
                found = (value.strip("\"'"), "%s:%d" % (path, number))
    return found


def propagate_finding(root: Any, conf: str) -> Finding:
    lines = conf_lines(root, conf)
    limits = conf_value(lines, "PropagateResourceLimits")
    except_ = conf_value(lines, "PropagateResourceLimitsExcept")
    expected = "MEMLOCK not propagated (PropagateResourceLimitsExcept=MEMLOCK, or PropagateResourceLimits=NONE)"
    remedy = ("add 'PropagateResourceLimitsExcept=MEMLOCK' to slurm.conf (Slurm FAQ, memlock): by default srun and "
              "sbatch carry the submitting shell's locked-memory limit (often 64 KiB or 8 MiB on a login node) into "
              "every task, and RDMA registration then fails; the tasks keep slurmd's limit instead")
    if limits and except_:
        return Finding(PROPAGATE_ID, "/" + conf, expected, "both PropagateResourceLimits (%s) and "
                       "PropagateResourceLimitsExcept (%s) are set" % (limits[1], except_[1]), DRIFT, "medium",
                       remedy="slurm.conf(5) allows only one of them: keep PropagateResourceLimitsExcept=MEMLOCK",
                       source="setting")
    if except_:
        names = [w.strip().upper() for w in except_[0].split(",")]
        good = "MEMLOCK" in names or "ALL" in names
        return Finding(PROPAGATE_ID, "/" + conf, expected, "PropagateResourceLimitsExcept=%s (%s)" % except_,
                       OK if good else DRIFT, "medium", remedy="" if good else remedy, source="setting")
    value = limits[0] if limits else "ALL"
    names = [w.strip().upper() for w in value.split(",")]
    propagated = "ALL" in names or "MEMLOCK" in names
    actual = ("PropagateResourceLimits=%s (%s)" % limits) if limits else "unset: ALL, Slurm's default"
    return Finding(PROPAGATE_ID, "/" + conf, expected, actual, DRIFT if propagated else OK, "medium",
                   remedy=remedy if propagated else "", source="setting")


def memlock_finding(root: Any) -> Optional[Finding]:
    """slurmd's effective LimitMEMLOCK= from its unit file and drop-ins (systemd's order, whoever wrote them), or
    the manager's DefaultLimitMEMLOCK= where the unit sets none; None where slurmd.service is not installed."""
    fragment, configured = area_limits.unit_memlock(root, SLURMD_UNIT)
    if fragment is None:
        return None
    source = configured
    if configured is None:
        manager = area_limits.manager_memlock(root)
        source = (manager[0], manager[1] + " (DefaultLimitMEMLOCK)") if manager else ("8M", "systemd's default")
    value = area_limits.systemd_limit(source[0])
    good = value is not None and value[0] == area_limits.INFINITY and value[1] == area_limits.INFINITY
    return Finding(MEMLOCK_ID, SLURMD_UNIT, "LimitMEMLOCK=infinity", "LimitMEMLOCK=%s (%s)" % source,
                   OK if good else DRIFT, "medium", source="setting",
                   remedy="" if good else "tasks that do not carry a limit from the submit host keep slurmd's, and "
                                          "RDMA needs unlimited: set LimitMEMLOCK=infinity in a drop-in of %s (the "
                                          "limits area writes one: nodetune_limits_units), then daemon-reload and "
                                          "restart slurmd" % SLURMD_UNIT)


def include_finding(root: Any, conf: str, path: str) -> Optional[Finding]:
    """Whether the site's gres.conf reads nodetune's fragment (None where the fragment is gres.conf itself)."""
    gres = posixpath.join(posixpath.dirname(conf), "gres.conf")
    if "/" + gres == path:
        return None
    lines = conf_lines(root, gres) if root.exists(gres) else []
    where = [(p, n) for p, n, text in lines if included(p.lstrip("/"), text) == path]
    if where:
        return Finding(INCLUDE_ID, "/" + gres, "Include %s" % path, "included (%s:%d)" % where[0], OK, "low",
                       source="setting")
    return Finding(INCLUDE_ID, "/" + gres, "Include %s" % path,
                   "no Include of it" if root.exists(gres) else "no gres.conf", DRIFT, "low", source="setting",
                   remedy="Slurm reads only the gres.conf beside slurm.conf: add the line 'Include %s' to /%s, then "
                          "restart slurmd or run 'scontrol reconfigure'" % (path, gres))


def readonly_findings(root: Any, settings: List[Setting], areas: Optional[Dict[str, Any]]) -> List[Finding]:
    """The slurm area's read-only checks, where the area is on and the files exist."""
    config = (areas or {}).get(AREA)
    if not isinstance(config, dict) or config.get("nodetune_slurm_enabled", True) is False:
        return []
    findings: List[Finding] = []
    conf = slurm_conf(root)
    if conf is not None:
        findings.append(propagate_finding(root, conf))
        for setting in settings:
            if setting.id == GRES_ID:
                found = include_finding(root, conf, "/" + setting.path)
                if found is not None:
                    findings.append(found)
    memlock = memlock_finding(root)
    if memlock is not None:
        findings.append(memlock)
    return findings
