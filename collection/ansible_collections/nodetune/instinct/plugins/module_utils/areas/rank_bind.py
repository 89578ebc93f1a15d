# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""nodetune-bind: run one local rank of a training job on its GPU's CPUs and memory node.

    nodetune-bind [--table FILE] [--rank N] [--memory-policy POLICY] [--keep-env NAMES] [--dry-run] [--quiet]
                  -- COMMAND [ARG...]

The GPU is the one the process will use. Where ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES (or CUDA_VISIBLE_DEVICES)
or Slurm's SLURM_STEP_GPUS name the GPUs the process sees, they decide, read as ROCr and HIP read them (below); a
process that sees several GPUs is bound to device LOCAL_RANK of its list where its local rank is within the list
(what torchrun and DDP select), else to the first (HIP device 0). Otherwise the local rank decides: ``--rank``,
else the first of LOCAL_RANK (torchrun), SLURM_LOCALID (srun), OMPI_COMM_WORLD_LOCAL_RANK (Open MPI) and
MPI_LOCALRANKID (MPICH) that is set; rank i is ROCr's device i. A local rank whose GPU differs from the one the
variables give is warned about. The rank table (``/etc/nodetune/ranks.json``, written by nodetune's rocm_env area
from the node's Layout) gives each GPU's rank: its CPUs (the cores of its GPU's NUMA node that no other rank and no
NIC IRQ uses), its NUMA node and its environment (OMP_NUM_THREADS, HSA_OVERRIDE_CPU_AFFINITY_DEBUG=0 so that ROCr's
helper threads stay on those CPUs, and the node's NIC lists for RCCL: the same on every rank, and a value the job
already set wins). The launcher sets the CPU affinity itself (inherited across exec) and removes GOMP_CPU_AFFINITY
from the command's environment (unless --keep-env names it): libgomp binds the initial thread to the first CPU of
that list, which would put the whole rank, and everything it forks, on one CPU. It sets the memory policy with
numactl where numactl is installed (the table's nodetune_rocm_bind_memory_policy, or --memory-policy):
``preferred`` (the default: the rank's node first, the other nodes when it is full), ``membind`` (that node only:
an allocation fails when it is full), ``interleave`` (over the NUMA nodes of the rank's socket) or ``none``, and
execs COMMAND directly: no shell, so arguments reach the program exactly as given.

Examples:
    torchrun --nproc_per_node 8 --no-python nodetune-bind -- python train.py
    srun --ntasks-per-node 8 --cpu-bind=none nodetune-bind -- python train.py
    srun --ntasks-per-node 8 --gpus-per-task 1 --cpu-bind=none nodetune-bind -- python train.py

This file is both a module of the nodetune collection (``nodetune bind`` runs it) and, rendered by nodetune, the
standalone ``/usr/local/bin/nodetune-bind`` on each node: it imports the standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the launcher starts before every training process, keep imports few
    from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

DEFAULT_TABLE = "/etc/nodetune/ranks.json"  # the rendered launcher names its node's table here
TABLE_ENV = "NODETUNE_RANKS_FILE"
TABLE_VERSION = 1
RANK_VARIABLES = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
# What names the GPUs a process sees. ROCr filters the KFD GPU nodes by ROCR_VISIBLE_DEVICES (set, even empty);
# HIP then indexes what ROCr exposes with HIP_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES (ROCm/clr,
# rocclr/device/rocm/rocdevice.cpp, Device::init). GPU_DEVICE_ORDINAL is OpenCL's there, not HIP's: not read.
ROCR_VISIBLE = "ROCR_VISIBLE_DEVICES"
HIP_VISIBLE = ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
# Slurm's node indexes of the GPUs of the step (of the job, in the batch script), listed in the order, and in the
# number, of the entries it puts in ROCR_VISIBLE_DEVICES (src/plugins/gres/common/gres_common.c,
# common_gres_set_env / gres_common_gpu_set_env).
SLURM_GPUS = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS")
MEMORY_POLICIES = ("preferred", "membind", "interleave", "none")
# preferred never fails an allocation because the rank's node is full (mm/mempolicy.c: "preferred: Try a specific
# node first before normal fallback"; "bind: Only allocate memory on a specific set of nodes, no fallback"): on an
# MI250 host in NPS4 a node holds an eighth of the memory.
DEFAULT_MEMORY_POLICY = "preferred"
NUMACTL_OPTIONS = {"preferred": "--preferred=%s", "membind": "--membind=%s", "interleave": "--interleave=%s"}
# Variables that narrow a rank's CPU set once libgomp loads: its start-up binds the initial thread to the first
# place (libgomp/config/linux/affinity.c), and GOMP_CPU_AFFINITY makes every place one CPU.
NARROWING_VARIABLES = ("GOMP_CPU_AFFINITY",)
# Node-wide defaults, not per-rank values: a value the job set wins (RCCL needs every rank of a node to see the
# same NICs, and the job may have chosen them on purpose).
JOB_WINS = ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME")
PROG = "nodetune-bind"
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 127


class BindError(Exception):
    """A user-facing failure: one line on stderr and an exit status, never a traceback."""

    def __init__(self, message: str, status: int = EXIT_FAILURE) -> None:
        super(BindError, self).__init__(message)
        self.status = status


# ------------------------------------------------------------------------------------------------ the table
def table_text(ranks: List[Dict[str, Any]], devices: Optional[List[Dict[str, Any]]] = None,
               memory_policy: Optional[str] = None) -> str:
    """The rank table file (the rocm_env area writes it; :func:`read_table` reads it): stable JSON.

    ``devices``: ROCr's GPU list in ROCr's order (index, PCI address, UUID, the rank that serves it), what
    ROCR_VISIBLE_DEVICES indexes; without it rank i is device i. ``memory_policy``: one of MEMORY_POLICIES."""
    table = {"version": TABLE_VERSION, "generator": "nodetune rocm_env area (from the node's Layout)",
             "ranks": sorted(ranks, key=lambda entry: entry["rank"])}  # type: Dict[str, Any]
    if devices is not None:
        table["devices"] = sorted(devices, key=lambda device: device["index"])
    if memory_policy is not None:
        table["memory_policy"] = memory_policy
    return json.dumps(table, indent=1, sort_keys=True) + "\n"


def read_table(path: str) -> Dict[str, Any]:
    """The whole table, checked: ranks, and where present devices and memory_policy."""
    try:
        with open(path) as handle:
            text = handle.read()
    except (IOError, OSError) as exc:
        if not os.path.exists(path):
            raise BindError("no rank table at %s: run nodetune's apply (rocm_env area) on this node to write it, "
                            "or pass --table FILE" % path) from None
        raise BindError("cannot read the rank table %s: %s" % (path, exc.strerror or exc)) from None
    try:
        table = json.loads(text)
    except ValueError as exc:
        raise BindError("the rank table %s is not valid JSON (%s): run nodetune's apply to rewrite it"
                        % (path, exc)) from None
    if not isinstance(table, dict) or table.get("version") != TABLE_VERSION:
        raise BindError("the rank table %s has version %r; this launcher reads version %d"
                        % (path, table.get("version") if isinstance(table, dict) else None, TABLE_VERSION))
    ranks = table.get("ranks")
    if not isinstance(ranks, list) or not all(_entry_ok(entry) for entry in ranks):
        raise BindError("the rank table %s is malformed (each rank needs rank, cpus and env): run nodetune's apply "
                        "to rewrite it" % path)
    devices = table.get("devices")
    if devices is not None and not (isinstance(devices, list) and all(
            _device_ok(device, index) for index, device in enumerate(devices))):
        raise BindError("the rank table %s is malformed (devices: one entry per GPU, index 0, 1, 2, ... with its gpu, "
                        "uuid and rank): run nodetune's apply to rewrite it" % path)
    policy = table.get("memory_policy", DEFAULT_MEMORY_POLICY)
    if policy not in MEMORY_POLICIES:
        raise BindError("the rank table %s has memory_policy %r: expected one of %s; run nodetune's apply to rewrite "
                        "it" % (path, policy, ", ".join(MEMORY_POLICIES)))
    return table


def load_table(path: str) -> List[Dict[str, Any]]:
    """The table's ranks (:func:`read_table` for the whole table)."""
    return read_table(path)["ranks"]


def _device_ok(device: Any, index: int) -> bool:
    return (isinstance(device, dict) and device.get("index") == index and _is_int(device["index"])
            and (device.get("rank") is None or _is_int(device["rank"]))
            and all(device.get(key) is None or isinstance(device[key], str) for key in ("gpu", "uuid")))


def _entry_ok(entry: Any) -> bool:
    return (isinstance(entry, dict) and _is_int(entry.get("rank"))
            and isinstance(entry.get("cpus"), list) and bool(entry["cpus"]) and all(_is_int(c) for c in entry["cpus"])
            and (entry.get("numa_node") is None or _is_int(entry["numa_node"]))
            and (entry.get("interleave_nodes") is None or (isinstance(entry["interleave_nodes"], list)
                                                           and all(_is_int(n) for n in entry["interleave_nodes"])))
            and isinstance(entry.get("env"), dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in entry["env"].items()))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_digits(text: str) -> bool:
    """ASCII 0-9 only: str.isdigit() also takes other scripts' digits ('\u0663' is not rank 3)."""
    return bool(text) and all("0" <= c <= "9" for c in text)


# ------------------------------------------------------------------------------------------------ planning
def local_rank(environ: Dict[str, str], explicit: Optional[int] = None,
               required: bool = True) -> Tuple[Optional[int], Optional[str]]:
    """(rank, where it came from); (None, None) when none is set and ``required`` is false."""
    if explicit is not None:
        return explicit, "--rank"
    for name in RANK_VARIABLES:
        value = environ.get(name)
        if value is None or value == "":
            continue
        if not _is_digits(value):
            raise BindError("%s=%r is not a local rank (expected 0, 1, 2, ...)" % (name, value))
        return int(value), name
    if not required:
        return None, None
    raise BindError("no local rank: none of %s is set, and no GPU is named by %s; start it through torchrun "
                    "(--no-python nodetune-bind -- ...), srun or mpirun, or pass --rank N"
                    % (", ".join(RANK_VARIABLES), ", ".join((ROCR_VISIBLE,) + HIP_VISIBLE + SLURM_GPUS)), EXIT_USAGE)


def names_gpus(environ: Dict[str, str]) -> bool:
    """Whether a variable names the GPUs the process sees (ROCR_VISIBLE_DEVICES counts even empty: ROCr does)."""
    return ROCR_VISIBLE in environ or any(environ.get(name) for name in HIP_VISIBLE + SLURM_GPUS)


def node_devices(table: Dict[str, Any]) -> List[Dict[str, Any]]:
    """ROCr's GPUs in ROCr's order: the table's devices, or for a table without them rank i as device i."""
    devices = table.get("devices")
    if devices is not None:
        return devices
    ranks = sorted(table.get("ranks") or [], key=lambda entry: entry["rank"])
    return [{"index": index, "gpu": entry.get("gpu"), "uuid": None, "rank": entry["rank"]}
            for index, entry in enumerate(ranks)]


def _strtol(token: str) -> Optional[int]:
    """C's strtol(token, &end, 0) where the whole token must be read: 0x hex, leading-0 octal, decimal, a sign."""
    match = re.match(r"^([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)$", token)
    if not match:
        return None
    body = match.group(2)
    value = int(body, 16) if body[:2] in ("0x", "0X") else int(body, 8) if body.startswith("0") else int(body)
    return -value if match.group(1) == "-" else value


def rocr_filter(devices: List[Dict[str, Any]], value: str) -> List[Dict[str, Any]]:
    """The GPUs ROCr exposes for ROCR_VISIBLE_DEVICES=value, in the list's order, as ROCr reads it
    (ROCR-Runtime, runtime/hsa-runtime/core/runtime/amd_filter_device.cpp, RvdFilter): comma-separated entries,
    trimmed and upper-cased, at most as many as there are GPUs; an entry starting with G is a UUID prefix
    ("GPU-" and 16 hex digits of the KFD unique_id, 5 to 20 characters) that must match exactly one GPU, any
    other a strtol index; the first entry that matches nothing, is out of range or repeats ends the list. An
    empty value hides every GPU."""
    tokens = value.split(",")
    if tokens and tokens[-1] == "":  # std::getline yields no entry after a trailing comma
        tokens.pop()
    chosen = []  # type: List[int]
    for token in tokens[:len(devices)]:
        token = token.strip().upper()
        if not token:  # ROCr reads an empty entry as an error (token.at(0))
            break
        if token[0] == "G":
            matches = [i for i, device in enumerate(devices)
                       if device.get("uuid") and device["uuid"].upper().startswith(token)]
            # one match only: CPX partitions share their GPU's unique_id, so its UUID names none of them
            index = matches[0] if len(matches) == 1 and 5 <= len(token) <= 20 else None
        else:
            index = _strtol(token)
        if index is None or not 0 <= index < len(devices) or index in chosen:
            break
        chosen.append(index)
    return [devices[i] for i in chosen]


def hip_filter(devices: List[Dict[str, Any]], value: str) -> List[Dict[str, Any]]:
    """The GPUs HIP uses for HIP_VISIBLE_DEVICES (or CUDA_VISIBLE_DEVICES)=value, indexes into what ROCr exposes,
    as HIP reads it (ROCm/clr, rocclr/device/rocm/rocdevice.cpp, Device::init): comma-separated entries; one that
    contains "GPU-" names the first GPU whose UUID contains it (case-sensitive: ROCr's UUIDs are lower-case hex);
    an index must be written exactly as a decimal number; the first bad or out-of-range entry ends the list, a
    repeated one is skipped."""
    chosen = []  # type: List[int]
    position = 0
    while True:
        end = value.find(",", position)
        token = value[position:] if end < 0 else value[position:end]
        if "GPU-" in token:  # ROCr's UUID of a GPU without a unique_id is GPU-XX (amd_gpu_agent.cc)
            found = [i for i, device in enumerate(devices) if token in (device.get("uuid") or "GPU-XX")]
            token = str(found[0]) if found else token
        index = int(token) if _is_digits(token) else -1
        if index < 0 or index >= len(devices) or token != str(index):
            break
        if index not in chosen:
            chosen.append(index)
        position = (len(value) if end < 0 else end) + 1
        if position >= len(value):
            break
    return [devices[i] for i in chosen]


def _slurm_gpus(environ: Dict[str, str], devices: List[Dict[str, Any]],
                warnings: List[str]) -> Tuple[Optional[str], Optional[List[int]]]:
    for name in SLURM_GPUS:
        value = environ.get(name)
        if not value:
            continue
        entries = value.split(",")
        if not all(_is_digits(entry) for entry in entries):
            warnings.append("%s=%r is not a list of GPU indexes: not followed" % (name, value))
            return None, None
        indexes = [int(entry) for entry in entries]
        if max(indexes) >= len(devices):
            warnings.append("%s=%s names GPU %d, but the rank table lists %d GPUs: not followed (a table from another "
                            "node, or gres.conf lists GPUs that nodetune did not find?)"
                            % (name, value, max(indexes), len(devices)))
            return None, None
        return name, indexes
    return None, None


def visible_gpus(devices: List[Dict[str, Any]], environ: Dict[str, str]
                 ) -> Tuple[Optional[List[Dict[str, Any]]], List[str], List[str]]:
    """(the GPUs the process will see, in its own order, or None when no variable narrows them; the variables
    that decided; warnings).

    Slurm pairs SLURM_STEP_GPUS (node indexes) with ROCR_VISIBLE_DEVICES entry by entry. Where its device cgroup
    (ConstrainDevices=yes) hides the other GPUs, ROCr enumerates the job's GPUs only and Slurm writes 0, 1, ... in
    ROCR_VISIBLE_DEVICES (gres.c, gres_use_local_device_index): indexes that are not all the step's own but all
    below its GPU count are read within SLURM_STEP_GPUS. SLURM_STEP_GPUS alone names the GPUs Slurm gave the job."""
    warnings = []  # type: List[str]
    decided = []  # type: List[str]
    slurm_name, slurm = _slurm_gpus(environ, devices, warnings)
    seen = None  # type: Optional[List[Dict[str, Any]]]
    rocr = environ.get(ROCR_VISIBLE)
    if rocr is not None:
        base = devices
        numbers = [_strtol(t.strip()) for t in rocr.split(",") if t.strip() and t.strip()[0] not in "gG"]
        if slurm and slurm_name and numbers and None not in numbers and not all(n in slurm for n in numbers) \
                and all(0 <= n < len(slurm) for n in numbers):
            base = [devices[i] for i in sorted(slurm)]
            decided.append(slurm_name)
        decided.append(ROCR_VISIBLE)
        seen = rocr_filter(base, rocr)
    elif slurm is not None and slurm_name is not None:
        seen = [devices[i] for i in slurm]
        decided.append(slurm_name)
    hip = next((name for name in HIP_VISIBLE if environ.get(name)), None)  # an empty value is no list to HIP
    if hip is not None:
        seen = hip_filter(devices if seen is None else seen, environ[hip])
        decided.append(hip)
    return seen, decided, warnings


def _describe(entry: Dict[str, Any]) -> str:
    return "GPU %s (CPUs %s, NUMA node %s)" % (entry.get("gpu"), _ranges(entry["cpus"]), entry.get("numa_node"))


def choose(ranks: List[Dict[str, Any]], devices: List[Dict[str, Any]], rank: Optional[int], source: Optional[str],
           environ: Dict[str, str], table: str = DEFAULT_TABLE) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The rank entry to bind to, and how it was chosen (gpu_from, visible_gpus, warnings)."""
    by_rank = dict((entry["rank"], entry) for entry in ranks)
    seen, decided, warnings = visible_gpus(devices, environ)
    how = {"gpu_from": None, "visible_gpus": None, "warnings": warnings}  # type: Dict[str, Any]
    if seen is not None:
        how["visible_gpus"] = [device.get("gpu") for device in seen]
        values = " ".join("%s=%s" % (name, environ.get(name, "")) for name in decided)
        if not seen:
            warnings.append("with %s this process sees no GPU (HIP finds none): bound by its local rank instead"
                            % values)
        else:
            if len(seen) > 1 and rank is not None and rank < len(seen):
                device, which = seen[rank], "its device %d (its local rank) of the %d it sees" % (rank, len(seen))
            elif len(seen) > 1:
                device, which = seen[0], "the first of the %d it sees" % len(seen)
            else:
                device, which = seen[0], "the only GPU it sees"
            target = by_rank.get(device.get("rank")) if device.get("rank") is not None else None
            if target is None:
                warnings.append("with %s this process uses GPU %s, which no rank of the table %s serves: bound by its "
                                "local rank instead" % (values, device.get("gpu"), table))
            else:
                how["gpu_from"] = " and ".join(decided)
                mine = by_rank.get(rank) if rank is not None else None
                if mine is not None and mine is not target:
                    warnings.append("%s=%d is %s, but with %s this process uses %s, %s: bound to that GPU's CPUs "
                                    "and memory" % (source, rank, _describe(mine), values, _describe(target), which))
                return target, how
    if rank is None:
        raise BindError("no local rank: none of %s is set, and the GPU variables name no GPU this table serves (%s); "
                        "start it through torchrun (--no-python nodetune-bind -- ...), srun or mpirun, or pass "
                        "--rank N" % (", ".join(RANK_VARIABLES), "; ".join(warnings)), EXIT_USAGE)
    if rank not in by_rank:
        known = sorted(by_rank)
        plural = "" if len(known) == 1 else "s"
        raise BindError("%s=%d, but this node's rank table %s has %d rank%s (%s): more processes per node than GPU "
                        "ranks, or a table from another node?"
                        % (source, rank, table, len(known), plural, _ranges(known) or "none"))
    return by_rank[rank], how


def memory_nodes(entry: Dict[str, Any], policy: str) -> List[int]:
    """The NUMA nodes the memory policy names for a rank (none where the rank's node is unknown)."""
    if policy == "none" or entry.get("numa_node") is None:
        return []
    if policy == "interleave":
        return sorted(entry.get("interleave_nodes") or [entry["numa_node"]])
    return [entry["numa_node"]]


def plan(ranks: List[Dict[str, Any]], rank: Optional[int], source: Optional[str], environ: Dict[str, str],
         command: List[str], keep: Iterable[str] = (), which: Callable[..., Optional[str]] = shutil.which,
         table: str = DEFAULT_TABLE, devices: Optional[List[Dict[str, Any]]] = None,
         memory_policy: str = DEFAULT_MEMORY_POLICY) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """What to run: (the plan, printable as JSON; the complete environment of the command)."""
    if devices is None:
        devices = node_devices({"ranks": ranks})
    entry, how = choose(ranks, devices, rank, source, environ, table)
    keep = set(keep)
    env = dict(environ)
    changed = {}
    for name, value in sorted(entry["env"].items()):
        if name in environ and (name in keep or name in JOB_WINS):
            continue
        env[name] = value
        changed[name] = value
    removed = sorted(name for name in NARROWING_VARIABLES if name in env and name not in keep)
    for name in removed:  # from the caller, or a rank table written by an older nodetune
        del env[name]
        changed.pop(name, None)
    nodes = memory_nodes(entry, memory_policy)
    numactl = which("numactl", path=env.get("PATH", os.defpath)) if nodes else None
    argv = list(command)
    if numactl:
        argv = [numactl, NUMACTL_OPTIONS[memory_policy] % _ranges(nodes), "--"] + argv
    result = {"rank": entry["rank"], "rank_from": source, "local_rank": rank, "gpu": entry.get("gpu"),
              "gpu_from": how["gpu_from"], "visible_gpus": how["visible_gpus"], "numa_node": entry.get("numa_node"),
              "cpus": sorted(entry["cpus"]), "cpulist": _ranges(entry["cpus"]), "env": changed, "unset": removed,
              "memory_policy": memory_policy, "memory_nodes": nodes, "numactl": numactl, "argv": argv,
              "warnings": how["warnings"]}
    return result, env


def program(argv: List[str], env: Dict[str, str], which: Callable[..., Optional[str]] = shutil.which) -> str:
    """The file to exec for argv[0], looked up on the command's PATH (the launcher never uses a shell)."""
    name = argv[0]
    if "/" in name:
        return name
    found = which(name, path=env.get("PATH", os.defpath))
    if not found:
        raise BindError("command not found: %r (PATH=%s)" % (name, env.get("PATH", "")), EXIT_NOT_FOUND)
    return found


def _ranges(cpus: Iterable[int]) -> str:
    """'8-29,104' (a stdlib-only copy of a cpulist formatter: this file runs without the collection)."""
    runs = []  # type: List[List[int]]
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else "%d-%d" % (a, b) for a, b in runs)


# ------------------------------------------------------------------------------------------------ running
def bind_cpus(cpus: List[int], warn: Callable[[str], None],
              setaffinity: Callable[..., None] = os.sched_setaffinity,
              getaffinity: Callable[..., Any] = os.sched_getaffinity) -> None:
    wanted = set(cpus)
    try:
        setaffinity(0, wanted)
    except OSError as exc:
        allowed = getaffinity(0)
        raise BindError("cannot bind to CPUs %s (%s): this process may only run on CPUs %s (a cpuset from Slurm, "
                        "cgroups or taskset?); give the job whole nodes (--exclusive) and start it with "
                        "srun --cpu-bind=none" % (_ranges(wanted), exc.strerror or exc, _ranges(allowed))) from None
    bound = set(getaffinity(0))
    if bound != wanted:
        warn("bound to CPUs %s only: %s are not allowed to this process (cpuset)"
             % (_ranges(bound), _ranges(wanted - bound)))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The launcher's options (shared by the standalone script and ``nodetune bind``)."""
    parser.add_argument("--table", metavar="FILE",
                        help="rank table (default: $%s, else %s)" % (TABLE_ENV, DEFAULT_TABLE))
    parser.add_argument("--rank", type=_rank_arg, metavar="N",
                        help="local rank (default: %s, the first that is set); where %s name the process's GPUs, the "
                             "GPU it uses decides" % (", ".join(RANK_VARIABLES),
                                                      "/".join((ROCR_VISIBLE,) + HIP_VISIBLE + SLURM_GPUS[:1])))
    parser.add_argument("--memory-policy", choices=MEMORY_POLICIES, metavar="POLICY",
                        help="NUMA memory policy through numactl: %s (default: the rank table's, else %s; "
                             "membind fails allocations once the rank's node is full)"
                             % (", ".join(MEMORY_POLICIES), DEFAULT_MEMORY_POLICY))
    parser.add_argument("--keep-env", action="append", default=[], metavar="NAMES",
                        help="comma list of variables whose value in the caller's environment wins over the rank "
                             "table's (e.g. OMP_NUM_THREADS)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print what would run (JSON: GPU, CPUs, memory policy, environment, argv) and exit")
    parser.add_argument("--quiet", action="store_true", help="no warnings on stderr")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARG...]",
                        help="the program to run and its arguments")


def _rank_arg(text: str) -> int:
    if not _is_digits(text):
        raise argparse.ArgumentTypeError("%r is not a local rank (expected 0, 1, 2, ...)" % text)
    return int(text)


def run(args: argparse.Namespace, environ: Optional[Dict[str, str]] = None,
        execve: Callable[..., None] = os.execve, which: Callable[..., Optional[str]] = shutil.which) -> int:
    """Bind and exec (returns only on error, or after --dry-run)."""
    environ = dict(os.environ if environ is None else environ)

    def warn(message: str) -> None:
        if not args.quiet:
            sys.stderr.write("%s: %s\n" % (PROG, message))

    try:
        command = list(args.command)
        if command and command[0] == "--":
            command = command[1:]
        if not command:
            raise BindError("nothing to run: give the command after '--', e.g. %s -- python train.py" % PROG,
                            EXIT_USAGE)
        keep = [name for group in args.keep_env for name in group.split(",") if name]
        table = args.table or environ.get(TABLE_ENV) or DEFAULT_TABLE
        rank, source = local_rank(environ, args.rank, required=not names_gpus(environ))
        whole = read_table(table)
        policy = args.memory_policy or whole.get("memory_policy", DEFAULT_MEMORY_POLICY)
        result, env = plan(whole["ranks"], rank, source, environ, command, keep, which, table,
                           devices=node_devices(whole), memory_policy=policy)
        for message in result["warnings"]:
            warn(message)
        if args.dry_run:
            sys.stdout.write(json.dumps(result, indent=1, sort_keys=True) + "\n")
            return 0
        path = program(result["argv"], env, which)
        if result["memory_nodes"] and result["numactl"] is None:
            warn("numactl not found: memory policy %s on NUMA node %s not set (the kernel's first-touch policy "
                 "usually keeps memory on the rank's node, since it runs on that node's CPUs); install numactl to "
                 "set it" % (policy, _ranges(result["memory_nodes"])))
        for name in result["unset"]:
            warn("%s removed from the environment: libgomp would bind the rank's first thread, and all it forks, "
                 "to its first CPU instead of CPUs %s (--keep-env %s keeps it)" % (name, result["cpulist"], name))
        bind_cpus(result["cpus"], warn)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            execve(path, result["argv"], env)
        except OSError as exc:
            raise BindError("cannot run %s: %s" % (path, exc.strerror or exc), EXIT_NOT_FOUND) from None
        return 0  # only reached with a test double for execve
    except BindError as exc:
        sys.stderr.write("%s: error: %s\n" % (PROG, exc))
        return exc.status


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Run one local rank of a training job on its GPU's CPUs and NUMA memory node, "
                               "with its environment, from the node's rank table (written by nodetune).")
    add_arguments(parser)
    return run(parser.parse_args(sys.argv[1:] if argv is None else argv))


# ------------------------------------------------------------------------------------------------ rendering
_TABLE_LINE = re.compile(r"^DEFAULT_TABLE = .*$", re.MULTILINE)


def script_text(table_path: str, shebang: str) -> str:
    """This very file as the node's standalone launcher, naming ``table_path`` as its default table and run by the
    ``shebang`` line (interpreter.shebang)."""
    source = _own_source()
    line = "DEFAULT_TABLE = %s  # the rendered launcher names its node's table here" % json.dumps(table_path)
    return shebang + _TABLE_LINE.sub(lambda _match: line, source, count=1)


def _own_source() -> str:
    # Inside an Ansible module this file is imported from a zip archive: ask the loader, not the file system.
    loader = globals().get("__loader__")
    get_source = getattr(loader, "get_source", None)
    if get_source is not None:
        text = get_source(__name__)
        if text:
            return text
    with open(__file__) as handle:
        return handle.read()


if __name__ == "__main__":
    raise SystemExit(main())
