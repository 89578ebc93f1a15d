# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The ROCm/RCCL environment area: names something really reads, the articles' scenarios, per-rank binding.

What a node gets, from lowest to highest precedence:

1. a scenario profile (``nodetune_rocm_profile``: the articles' parameter matrix with real names),
2. node-specific values from the Layout (``nodetune_rocm_layout_env``: ``NCCL_IB_HCA`` / ``NCCL_SOCKET_IFNAME``
   listing the node's usable NICs), added only when the area writes anything at all,
3. the user's own ``nodetune_rocm_env``,

each value checked against the catalogue (rocm_catalog.py), and written to three files: ``/etc/rccl.conf``
(RCCL reads its KEY=VALUE lines verbatim and never lets them override the environment; NCCL_*/RCCL_* names
only), a login-shell profile script (single-quoted values) and an environment file for systemd's
EnvironmentFile= and Slurm job scripts (double-quoted values with ``\\ " $ ``` escaped, the form both systemd
and a POSIX shell read the same way). A wrong name from the articles is refused (or kept with a warning under
the ``warn`` policy) with the real name to use. Separately, when the Layout has GPU ranks, the rank table
(``/etc/nodetune/ranks.json``) and the ``nodetune-bind`` launcher that reads it (rank_bind.py) are written.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils import interpreter
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import owned_paths
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import rank_bind
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import rocm_catalog as catalog
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import (
    choices,
    role_variables,
    Context,
    describe,
    unknown_keys,
    want_bool,
    want_list,
    want_str,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import (
    format_cpulist,
    parse_int,
    parse_key_value,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import FILE, Setting

# The area's declaration: its role (ROLE), variables as an Ansible argument spec, check ids and docs; its
# role's files are generated from it (scripts/gen_role_docs.py) and declarations.py collects every area's.
ROLE = "rocm_env"
DECLARATION = {
    'kind': 'area',
    'order': 70,
    'builder': 'rocm_env',
    'setting_area': 'rocm_env',
    'finding_prefix': 'rocm',
    'check_ids': ['rocm.env', 'rocm.ranks', 'rocm.bind'],
    'galaxy_tags': ['rocm', 'rccl'],
    'severity': 'medium',
    'short_description': (
        'RCCL/ROCr/PyTorch environment with real names, the '
        "articles' scenario profiles, per-rank binding"
    ),
    'description': [
        (
            "The environment is built from a scenario profile (C(nodetune_rocm_profile)), then this node's "
            'NIC lists from its Layout (C(nodetune_rocm_layout_env)), then your own C(nodetune_rocm_env) on '
            "top, every value checked against nodetune's catalogue of what RCCL, ROCr, HIP and PyTorch "
            'really read (docs/rocm.md). It is written to C(/etc/rccl.conf) (RCCL reads its KEY=VALUE lines '
            'verbatim and never lets them override the environment; C(NCCL_*)/C(RCCL_*) names only), a '
            "login-shell profile script (single-quoted values) and an environment file for systemd's "
            'C(EnvironmentFile=) and Slurm job scripts (double-quoted values). No profile and no variables -'
            ' no env file.'
        ),
        (
            'Names from the articles that nothing reads are refused with the real name (C(RCCL_ALGO) -> '
            'C(NCCL_ALGO), C(RCCL_BUFFSIZE) -> C(NCCL_BUFFSIZE), C(RCCL_DEBUG) -> C(NCCL_DEBUG)...), or with'
            ' why they have no effect (C(NCCL_TIMEOUT): the collective timeout is set in code, '
            'C(init_process_group(timeout=...)); C(HSA_AMD_ENABLE_ASYNC_IO), C(AMD_ZSTD_ACCELERATION)...; '
            'C(HCCL_OVER_OFI) belongs to Habana Gaudi). Values RCCL would misread are refused too '
            '(C(NCCL_BUFFSIZE=4M) reads as 4 bytes, C(NCCL_NET_GDR_LEVEL=phb) is ignored: the level names '
            'are case-sensitive).'
        ),
        (
            'Where the Layout has GPU ranks, the rank table (C(/etc/nodetune/ranks.json)) and the launcher '
            'C(nodetune-bind) are written: C(nodetune-bind -- python train.py) reads LOCAL_RANK (or '
            "SLURM_LOCALID) and runs the command on its GPU's CPUs and NUMA memory node, with its "
            "OMP_NUM_THREADS and the node's NIC lists (the same on every rank; a value the job set wins)."
        ),
    ],
    'variables': {
        'nodetune_rocm_env_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                'Tune this area. When false the area is left exactly as it is.',
            ],
        },
        'nodetune_rocm_profile': {
            'type': 'str',
            'default': 'none',
            'choices': [
                'none',
                'single_node_small',
                'single_node_large',
                'multi_node',
                'mixed_precision',
                'multi_node_stable',
            ],
            'description': [
                (
                    'A scenario from the articles, with the names RCCL reads - C(single_node_small) (< 1B '
                    'parameters): C(NCCL_PROTO=LL), C(NCCL_BUFFSIZE=1048576); C(single_node_large) (1-10B): '
                    'C(NCCL_PROTO=LL128), C(NCCL_ALGO=Tree), C(NCCL_BUFFSIZE=4194304); C(multi_node) (> '
                    '10B): C(NCCL_PROTO=LL128), C(NCCL_ALGO=Ring), C(NCCL_BUFFSIZE=8388608); '
                    'C(mixed_precision) (FP16/FP8): C(NCCL_PROTO=Simple), C(NCCL_ALGO=Ring), '
                    "C(NCCL_BUFFSIZE=2097152); C(multi_node_stable) (the third article's deadlock fix): "
                    'C(NCCL_ALGO=Ring), C(NCCL_BUFFSIZE=8388608), C(NCCL_DEBUG=WARN). C(none) sets nothing.'
                ),
                (
                    'LL128 is used by RCCL only on topologies on its list unless '
                    'C(RCCL_LL128_FORCE_ENABLE=1) is set: the run warns about it and does not set it for '
                    'you.'
                ),
            ],
        },
        'nodetune_rocm_env': {
            'type': 'dict',
            'default': {},
            'description': [
                (
                    "Your variables, name to value, on top of the profile and the Layout's values, for "
                    'example C({NCCL_MIN_NCHANNELS: 112, NCCL_DEBUG: WARN}). Names must be in the catalogue '
                    '(docs/rocm.md); values are checked (lists, enums, plain decimal integers, 0/1 flags; a '
                    'YAML C(true) for a flag is written as 1) and must be single lines.'
                ),
            ],
        },
        'nodetune_rocm_env_policy': {
            'type': 'str',
            'default': 'error',
            'choices': ['error', 'warn'],
            'description': [
                (
                    'What a wrong or unknown name gets - C(error) refuses the run, C(warn) keeps it with a '
                    'warning. Invalid values are refused either way.'
                ),
            ],
        },
        'nodetune_rocm_layout_env': {
            'type': 'list',
            'elements': 'str',
            'default': ['NCCL_IB_HCA', 'NCCL_SOCKET_IFNAME'],
            'description': [
                (
                    "Which NIC lists to take from this node's Layout (every usable HCA and fabric netdev, "
                    'exact-match C(=) lists), into the env files when they are written, and the same '
                    'lists into every rank of the rank table (RCCL needs all ranks of a node to see the same '
                    'NICs; nodetune-bind never overrides a value the job set). A name you set in '
                    'C(nodetune_rocm_env) wins '
                    "over the Layout's. Drop C(NCCL_SOCKET_IFNAME) where the IPoIB interfaces carry no IP "
                    "address (RCCL's bootstrap needs one)."
                ),
            ],
        },
        'nodetune_rocm_bind': {
            'type': 'bool',
            'default': True,
            'description': [
                (
                    'Write the rank table and the C(nodetune-bind) '
                    'launcher where the Layout has GPU ranks.'
                ),
            ],
        },
        'nodetune_rocm_bind_memory_policy': {
            'type': 'str',
            'default': 'preferred',
            'choices': list(rank_bind.MEMORY_POLICIES),  # what nodetune-bind takes (rank_bind.py)
            'description': [
                (
                    "The NUMA memory policy C(nodetune-bind) gives each rank (C(numactl), where installed; a job "
                    'overrides it with C(--memory-policy)) - C(preferred): memory from the NUMA node of the '
                    "rank's GPU first, from the other nodes when it is full, never an out-of-memory kill for that; "
                    'C(membind): from that node only (an allocation fails once it is full: on an MI250 host in '
                    'NPS4 a node holds an eighth of the memory); C(interleave): spread over the NUMA nodes of the '
                    "rank's socket; C(none): the kernel's default (first touch)."
                ),
            ],
        },
        'nodetune_rocm_profile_file': {
            'type': 'str',
            'default': '/etc/profile.d/nodetune-rocm.sh',
            'description': [
                "The login-shell profile script (C(export NAME='value') lines).",
                (
                    'Refused when it names an existing file nodetune did not create (other than this default), '
                    'a directory or a link; a new file may be created only in /etc, /etc/nodetune/..., '
                    '/etc/profile.d, /etc/default, /etc/sysconfig, /usr/local/bin, /usr/local/sbin, '
                    '/usr/local/etc/... or /opt/<dir>/...'
                ),
            ],
        },
        'nodetune_rocm_rccl_conf_file': {
            'type': 'str',
            'default': '/etc/rccl.conf',
            'description': [
                (
                    'The RCCL configuration file (C(NAME=value) lines, '
                    'C(NCCL_*) and C(RCCL_*) names only).'
                ),
                (
                    'Refused when it names an existing file nodetune did not create (other than this default), '
                    'a directory or a link; a new file may be created only in /etc, /etc/nodetune/..., '
                    '/etc/profile.d, /etc/default, /etc/sysconfig, /usr/local/bin, /usr/local/sbin, '
                    '/usr/local/etc/... or /opt/<dir>/...'
                ),
            ],
        },
        'nodetune_rocm_env_file': {
            'type': 'str',
            'default': '/etc/nodetune/rocm.env',
            'description': [
                (
                    'The environment file (C(NAME="value") lines) for systemd\'s C(EnvironmentFile=) and '
                    'Slurm job scripts (C(set -a; . /etc/nodetune/rocm.env; set +a)).'
                ),
                (
                    'Refused when it names an existing file nodetune did not create (other than this default), '
                    'a directory or a link; a new file may be created only in /etc, /etc/nodetune/..., '
                    '/etc/profile.d, /etc/default, /etc/sysconfig, /usr/local/bin, /usr/local/sbin, '
                    '/usr/local/etc/... or /opt/<dir>/...'
                ),
            ],
        },
        'nodetune_rocm_ranks_file': {
            'type': 'str',
            'default': '/etc/nodetune/ranks.json',
            'description': [
                (
                    'The rank table C(nodetune-bind) reads (one entry '
                    'per local rank, from the Layout).'
                ),
                (
                    'Refused when it names an existing file nodetune did not create (other than this default), '
                    'a directory or a link; a new file may be created only in /etc, /etc/nodetune/..., '
                    '/etc/profile.d, /etc/default, /etc/sysconfig, /usr/local/bin, /usr/local/sbin, '
                    '/usr/local/etc/... or /opt/<dir>/...'
                ),
            ],
        },
        'nodetune_rocm_bind_file': {
            'type': 'str',
            'default': '/usr/local/bin/nodetune-bind',
            'description': [
                (
                    'The launcher (a standalone Python 3 script,'
                    ' standard library only).'
                ),
                (
                    'Refused when it names an existing file nodetune did not create (other than this default), '
                    'a directory or a link; a new file may be created only in /etc, /etc/nodetune/..., '
                    '/etc/profile.d, /etc/default, /etc/sysconfig, /usr/local/bin, /usr/local/sbin, '
                    '/usr/local/etc/... or /opt/<dir>/...'
                ),
            ],
        },
    },
}

AREA = "rocm_env"
VARIABLES = role_variables(ROLE, DECLARATION)
PATH_VARIABLES = (
    ("nodetune_rocm_profile_file", "etc/profile.d/nodetune-rocm.sh"),
    ("nodetune_rocm_rccl_conf_file", "etc/rccl.conf"),
    ("nodetune_rocm_env_file", "etc/nodetune/rocm.env"),
    ("nodetune_rocm_ranks_file", "etc/nodetune/ranks.json"),
    ("nodetune_rocm_bind_file", "usr/local/bin/nodetune-bind"),
)
LAYOUT_NAMES = ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME")  # what the Layout's node-wide nccl_env offers
RANK_CPU_NAMES = ("OMP_NUM_THREADS",)  # no GOMP_CPU_AFFINITY: it pins a rank to one CPU (docs/rocm.md)
# Without this ROCr starts its helper threads on every CPU, whatever the rank's affinity (ROCr's default is 1).
RANK_EXTRA_ENV = {"HSA_OVERRIDE_CPU_AFFINITY_DEBUG": "0"}
WRONG_NAMES = catalog.WRONG_NAMES
NO_EFFECT_WHY = catalog.NO_EFFECT_WHY
# No '=' in here: RCCL would read a comment line holding one as a variable.
HEADER = "# Managed by nodetune (rocm_env area). Local changes are reported as drift and overwritten.\n"
KFD_NODES = "sys/class/kfd/kfd/topology/nodes"
_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


# ------------------------------------------------------------------------------------------------ quoting
def shell_quote(value: str) -> str:
    """POSIX single quotes: nothing inside is special; a quote itself is closed, escaped and reopened."""
    return "'" + value.replace("'", "'\"'\"'") + "'"


def env_file_quote(value: str) -> str:
    """Double quotes with \\ " $ ` escaped: systemd's EnvironmentFile= and sh read it as the same text."""
    return '"' + re.sub(r'([\\"$`])', r"\\\1", value) + '"'


# ------------------------------------------------------------------------------------------------ checking
def check_names(ctx: Context, env: Dict[Any, Any], policy: str) -> Dict[str, str]:
    """The user's variables, checked against the catalogue; refused ones are reported (all of them)."""
    good: Dict[str, str] = {}
    for name in sorted(env, key=str):
        value = env[name]
        if not isinstance(name, str) or not _NAME.match(name):
            ctx.error("nodetune_rocm_env key %s is not an environment variable name (A-Z, 0-9, _)" % describe(name))
            continue
        where = "nodetune_rocm_env['%s']=%s" % (name, describe(value))
        try:
            text = catalog.check_value(name, value)
        except catalog.Problem as problem:  # for any name: no value that breaks a file is ever kept
            ctx.error("%s is not valid: %s" % (where, problem))
            continue
        wrong = catalog.wrong_name_message(name)
        if wrong is None and catalog.is_known(name):
            good[name] = text
            continue
        message = "nodetune_rocm_env: " + (wrong or catalog.unknown_name_message(name))
        hint = catalog.value_hint(name, text)
        if hint:
            message += "; " + hint
        if policy == "warn":
            ctx.warn(message + " (kept because nodetune_rocm_env_policy is 'warn')")
            good[name] = text
        else:
            ctx.error(message)
    return good


def file_path(ctx: Context, config: Dict[str, Any], name: str, default: str) -> str:
    """A file the area writes: an absolute, normalised path (it is written inside nodetune_root)."""
    value = want_str(ctx, config, name)
    if value is None:
        return "/" + default
    parts = value.split("/")
    if not value.startswith("/") or ".." in parts or "." in parts or "" in parts[1:] \
            or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value):  # a newline would split the env file
        ctx.error("%s=%s is not valid: expected an absolute, normalised file path such as '/%s' (no '..', '.' "
                  "or '//'; nodetune writes it inside nodetune_root)" % (name, describe(value), default))
        return "/" + default
    return value


def refuse_foreign_paths(ctx: Context, config: Dict[str, Any], settings: List[Setting]) -> None:
    """Every file the area would write must be nodetune's own or a new file in a documented folder."""
    variable_of = dict(("/" + default, name) for name, default in PATH_VARIABLES)
    variable_of.update((str(config[name]), name) for name, _default in PATH_VARIABLES if config.get(name))
    defaults = set(default for _name, default in PATH_VARIABLES)
    for setting in settings:
        # The documented default files are nodetune's by design (a site's /etc/rccl.conf is journaled and put back
        # by revert); any other path must be a file nodetune created or a new one in the documented folders.
        problem = owned_paths.path_problem(ctx.root, setting.path, default=setting.path in defaults)
        if problem:
            name = variable_of.get("/" + setting.path, "the %s file" % setting.target)
            ctx.error("%s=%s is not valid: %s" % (name, describe("/" + setting.path), problem))


def layout_names(ctx: Context, config: Dict[str, Any]) -> List[str]:
    names = want_list(ctx, config, "nodetune_rocm_layout_env") if "nodetune_rocm_layout_env" in config \
        else list(LAYOUT_NAMES)
    bad = [n for n in names if n not in LAYOUT_NAMES]
    if bad:
        ctx.error("nodetune_rocm_layout_env=%s is not valid: the Layout offers %s only"
                  % (describe(names), ", ".join(LAYOUT_NAMES)))
        return []
    return [str(n) for n in names]


def node_values(ctx: Context, names: List[str], user: Dict[str, str]) -> Dict[str, str]:
    """The Layout's node-wide NIC lists for the names asked, unless the user set them."""
    nccl = ctx.layout.get("nccl_env") or {}
    values = {}
    for name in names:
        if name in user or name not in nccl:
            continue
        try:
            values[name] = catalog.check_value(name, nccl[name])
        except catalog.Problem as problem:  # an interface name the kernel allows but RCCL's syntax does not
            ctx.warn("rocm_env: the Layout's %s=%r is left out: %s" % (name, nccl[name], problem))
    return values


def profile_values(ctx: Context, config: Dict[str, Any]) -> Tuple[str, Dict[str, str]]:
    name = want_str(ctx, config, "nodetune_rocm_profile", sorted(catalog.PROFILES)) or "none"
    return name, dict(catalog.PROFILES[name].env)


# ------------------------------------------------------------------------------------------------ rendering
def render(env: Dict[str, str], origin: str) -> Tuple[str, str, str]:
    """(profile script, rccl.conf, environment file) for the final variables."""
    head = HEADER + "# " + origin + "\n"
    names = sorted(env)
    script = head + "".join("export %s=%s\n" % (k, shell_quote(env[k])) for k in names)
    rccl = head + "".join("%s=%s\n" % (k, env[k]) for k in names if catalog.in_conf_file(k))
    plain = head + "".join("%s=%s\n" % (k, env_file_quote(env[k])) for k in names)
    return script, rccl, plain


def origin_line(profile: str, node: Dict[str, str], user: Dict[str, str]) -> str:
    parts = ["scenario profile %s" % profile]
    if node:
        parts.append("from this node's Layout: %s" % ", ".join(sorted(node)))
    if user:
        parts.append("nodetune_rocm_env: %s" % ", ".join(sorted(user)))
    return "; ".join(parts)


def socket_nodes(ctx: Context, numa_node: Any) -> List[int]:
    """The NUMA nodes with CPUs on the socket of ``numa_node`` (what the interleave memory policy spreads over)."""
    packages: Dict[int, set] = {}
    for cpu in ctx.topology.get("cpus") or []:
        if cpu.get("numa_node") is not None and cpu.get("package") is not None:
            packages.setdefault(cpu["numa_node"], set()).add(cpu["package"])
    home = packages.get(numa_node)
    if not home:
        return [numa_node] if isinstance(numa_node, int) else []
    return sorted(node for node, where in packages.items() if where & home)


def rank_entries(ctx: Context, nics: Dict[str, str], user: Dict[str, str],
                 memory_policy: str = rank_bind.DEFAULT_MEMORY_POLICY) -> List[Dict[str, Any]]:
    """The rank table from the Layout: CPUs, NUMA node and environment of each local rank.

    ``nics``: the node-wide NIC lists, the same for every rank: RCCL builds a node's rings from the NICs each
    rank sees, so per-rank lists break them (NVIDIA/nccl#1478); nodetune-bind lets the job's own value win.
    A variable the user set node-wide in nodetune_rocm_env is left out of the ranks (theirs applies).
    ``numactl``: the command line that binds the rank by hand the way nodetune-bind does, with ``memory_policy``."""
    entries = []
    for rank in ctx.layout.get("ranks") or []:
        # RANK_CPU_NAMES only: a Layout saved by an older nodetune still carries per-rank NIC lists
        env = dict((key, str(value)) for key, value in (rank.get("env") or {}).items()
                   if key in RANK_CPU_NAMES and key not in user)
        env.update(nics)
        for key, value in RANK_EXTRA_ENV.items():
            if key not in user:
                env[key] = value
        entry = {"rank": rank["rank"], "gpu": rank.get("gpu"), "partition": rank.get("partition"),
                 "kfd_node": rank.get("kfd_node"), "numa_node": rank.get("numa_node"), "cpus": sorted(rank["cpus"]),
                 "cpulist": format_cpulist(rank["cpus"]), "env": env}
        entry["interleave_nodes"] = [] if entry["numa_node"] is None else socket_nodes(ctx, entry["numa_node"])
        numactl = ["--physcpubind=%s" % entry["cpulist"]]
        nodes = rank_bind.memory_nodes(entry, memory_policy)
        if nodes:
            numactl.append(rank_bind.NUMACTL_OPTIONS[memory_policy] % format_cpulist(nodes))
        entry["numactl"] = numactl
        entries.append(entry)
    return entries


def kfd_uuid(ctx: Context, node: int) -> Any:
    """ROCr's UUID of a KFD GPU node: "GPU-" and the node's unique_id in 16 lower-case hex digits
    (ROCR-Runtime amd_gpu_agent.cc, HSA_AMD_AGENT_INFO_UUID); None where the unique_id is 0 or missing. KFD prints
    it in decimal (kfd_topology.c, sysfs_show_64bit_prop)."""
    props = parse_key_value(ctx.root.read("%s/%d/properties" % (KFD_NODES, node)))
    value = parse_int(props.get("unique_id"))
    return "GPU-%016x" % value if value else None


def rocr_devices(ctx: Context, entries: List[Dict[str, Any]]) -> Any:
    """ROCr's GPU list, in ROCr's order: every KFD GPU node by node id, what ROCR_VISIBLE_DEVICES indexes
    (amd_filter_device.cpp, BuildDeviceUuidList), each with its UUID and the rank whose CPUs and memory serve it
    (its own partition's rank, else its GPU's first). None where the node has no KFD topology (no ROCr either):
    nodetune-bind then takes rank i as device i."""
    nodes = []
    for gpu in ctx.topology.get("gpus") or []:
        if gpu.get("vendor") == "amd":
            nodes += [(node, gpu["bdf"], part) for part, node in enumerate(gpu.get("kfd_nodes") or [])]
    if not nodes:
        return None
    by_unit = dict(((e["gpu"], e.get("partition") or 0), e["rank"]) for e in entries)
    by_gpu: Dict[Any, int] = {}
    for entry in sorted(entries, key=lambda e: e["rank"]):
        by_gpu.setdefault(entry["gpu"], entry["rank"])
    devices = []
    for index, (node, bdf, part) in enumerate(sorted(nodes)):
        rank = by_unit.get((bdf, part), by_gpu.get(bdf))
        devices.append({"index": index, "kfd_node": node, "gpu": bdf, "partition": part,
                        "uuid": kfd_uuid(ctx, node), "rank": rank})
    return devices


def build(ctx: Context, config: Dict[str, Any]) -> List[Setting]:
    unknown_keys(ctx, config, VARIABLES, AREA)
    errors_before = len(ctx.errors)
    policy = want_str(ctx, config, "nodetune_rocm_env_policy",
                      choices(DECLARATION, "nodetune_rocm_env_policy")) or "error"
    profile, profile_env = profile_values(ctx, config)
    names = layout_names(ctx, config)
    bind = want_bool(ctx, config, "nodetune_rocm_bind", True)
    memory_policy = want_str(ctx, config, "nodetune_rocm_bind_memory_policy",
                             rank_bind.MEMORY_POLICIES) or rank_bind.DEFAULT_MEMORY_POLICY
    paths = dict((name, file_path(ctx, config, name, default)) for name, default in PATH_VARIABLES)
    env = config.get("nodetune_rocm_env")
    if env is None:
        env = {}
    if not isinstance(env, dict):
        ctx.error("nodetune_rocm_env=%s is not valid: expected a mapping of variable name to value" % describe(env))
        return []
    user = check_names(ctx, env, policy)
    nics = node_values(ctx, names, user) if (profile_env or env or (bind and ctx.layout.get("ranks"))) else {}
    node = nics if (profile_env or env) else {}
    final = dict(profile_env)
    final.update(node)
    final.update(user)
    errors, warnings = catalog.combination_problems(final)
    for message in errors:
        ctx.error("nodetune_rocm_env (with profile %s): %s" % (profile, message))
    for message in warnings:
        ctx.warn("rocm_env: " + message)
    topo = final.get("NCCL_TOPO_FILE")
    if topo and not ctx.root.exists(topo.lstrip("/")):
        ctx.warn("rocm_env: NCCL_TOPO_FILE=%s does not exist on this node (yet); RCCL detects the topology itself "
                 "when it cannot read the file" % topo)
    if len(ctx.errors) > errors_before:
        return []
    settings = []
    if final:
        script, rccl, plain = render(final, origin_line(profile, node, user))
        settings += [
            Setting("rocm.env", "profile", paths["nodetune_rocm_profile_file"], script, kind=FILE,
                    compare="content", area=AREA, runtime=False,
                    reason="login shells get the tuned RCCL/HSA environment"),
            Setting("rocm.env", "rccl.conf", paths["nodetune_rocm_rccl_conf_file"], rccl, kind=FILE,
                    compare="content", area=AREA, runtime=False,
                    reason="RCCL reads /etc/rccl.conf for processes started without the profile"),
            Setting("rocm.env", "env_file", paths["nodetune_rocm_env_file"], plain, kind=FILE, compare="content",
                    area=AREA, runtime=False, reason="EnvironmentFile= for systemd units; sourced by Slurm jobs"),
        ]
    settings += bind_settings(ctx, bind, nics, user, paths, memory_policy)
    refuse_foreign_paths(ctx, config, settings)
    if len(ctx.errors) > errors_before:
        return []
    return settings


def bind_settings(ctx: Context, bind: bool, nics: Dict[str, str], user: Dict[str, str],
                  paths: Dict[str, str], memory_policy: str = rank_bind.DEFAULT_MEMORY_POLICY) -> List[Setting]:
    if not bind:
        return []
    entries = rank_entries(ctx, nics, user, memory_policy)
    if not entries:
        ctx.notes.append("rocm_env: the Layout has no GPU ranks, so no rank table and no nodetune-bind launcher")
        return []
    table = paths["nodetune_rocm_ranks_file"]
    return [
        Setting("rocm.ranks", "table", table, rank_bind.table_text(entries, rocr_devices(ctx, entries), memory_policy),
                kind=FILE, compare="content",
                area=AREA, runtime=False,
                reason="nodetune-bind reads each local rank's CPUs, memory node and environment here"),
        Setting("rocm.bind", "launcher", paths["nodetune_rocm_bind_file"],
                rank_bind.script_text(table, interpreter.shebang(root=ctx.root)), kind=FILE, compare="content",
                area=AREA, runtime=False, mode=0o755,
                reason="runs each local rank on its GPU's CPUs and memory node: nodetune-bind -- python train.py"),
    ]
