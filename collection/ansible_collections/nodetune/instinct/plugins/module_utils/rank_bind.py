# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""nodetune-bind: run one local rank of a training job on its GPU's CPUs and memory node.

    nodetune-bind [--table FILE] [--rank N] [--keep-env NAMES] [--dry-run] [--quiet] -- COMMAND [ARG...]

The rank is ``--rank``, else the first of LOCAL_RANK (torchrun), SLURM_LOCALID (srun),
OMPI_COMM_WORLD_LOCAL_RANK (Open MPI) and MPI_LOCALRANKID (MPICH) that is set. The rank's entry in the rank
table (``/etc/nodetune/ranks.json``, written by nodetune's rocm_env area from the node's Layout) gives its CPUs
(the cores of its GPU's NUMA node that no other rank and no NIC IRQ uses), its NUMA node and its environment
(OMP_NUM_THREADS, HSA_OVERRIDE_CPU_AFFINITY_DEBUG=0 so that ROCr's helper threads stay on those CPUs, and the
node's NIC lists for RCCL: the same on every rank, and a value the job already set wins). The launcher sets the
CPU affinity itself (inherited across exec) and removes GOMP_CPU_AFFINITY from the command's environment (unless
--keep-env names it): libgomp binds the initial thread to the first CPU of that list, which would put the whole
rank, and everything it forks, on one CPU. It binds memory
with ``numactl --membind`` where numactl is installed, and execs COMMAND directly: no shell, so
arguments reach the program exactly as given.

Examples:
    torchrun --nproc_per_node 8 --no-python nodetune-bind -- python train.py
    srun --ntasks-per-node 8 --cpu-bind=none nodetune-bind -- python train.py

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
def table_text(ranks: List[Dict[str, Any]]) -> str:
    """The rank table file (the rocm_env area writes it; :func:`load_table` reads it): stable JSON."""
    table = {"version": TABLE_VERSION, "generator": "nodetune rocm_env area (from the node's Layout)",
             "ranks": sorted(ranks, key=lambda entry: entry["rank"])}
    return json.dumps(table, indent=1, sort_keys=True) + "\n"


def load_table(path: str) -> List[Dict[str, Any]]:
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
    return ranks


def _entry_ok(entry: Any) -> bool:
    return (isinstance(entry, dict) and _is_int(entry.get("rank"))
            and isinstance(entry.get("cpus"), list) and bool(entry["cpus"]) and all(_is_int(c) for c in entry["cpus"])
            and (entry.get("numa_node") is None or _is_int(entry["numa_node"]))
            and isinstance(entry.get("env"), dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in entry["env"].items()))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_digits(text: str) -> bool:
    """ASCII 0-9 only: str.isdigit() also takes other scripts' digits ('\u0663' is not rank 3)."""
    return bool(text) and all("0" <= c <= "9" for c in text)


# ------------------------------------------------------------------------------------------------ planning
def local_rank(environ: Dict[str, str], explicit: Optional[int] = None) -> Tuple[int, str]:
    """(rank, where it came from)."""
    if explicit is not None:
        return explicit, "--rank"
    for name in RANK_VARIABLES:
        value = environ.get(name)
        if value is None or value == "":
            continue
        if not _is_digits(value):
            raise BindError("%s=%r is not a local rank (expected 0, 1, 2, ...)" % (name, value))
        return int(value), name
    raise BindError("no local rank: none of %s is set; start it through torchrun (--no-python nodetune-bind -- ...), "
                    "srun or mpirun, or pass --rank N" % ", ".join(RANK_VARIABLES), EXIT_USAGE)


def plan(ranks: List[Dict[str, Any]], rank: int, source: str, environ: Dict[str, str], command: List[str],
         keep: Iterable[str] = (), which: Callable[..., Optional[str]] = shutil.which,
         table: str = DEFAULT_TABLE) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """What to run: (the plan, printable as JSON; the complete environment of the command)."""
    by_rank = dict((entry["rank"], entry) for entry in ranks)
    if rank not in by_rank:
        known = sorted(by_rank)
        plural = "" if len(known) == 1 else "s"
        raise BindError("%s=%d, but this node's rank table %s has %d rank%s (%s): more processes per node than GPU "
                        "ranks, or a table from another node?"
                        % (source, rank, table, len(known), plural, _ranges(known) or "none"))
    entry = by_rank[rank]
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
    numa_node = entry.get("numa_node")
    numactl = which("numactl", path=env.get("PATH", os.defpath)) if numa_node is not None else None
    argv = list(command)
    if numactl:
        argv = [numactl, "--membind=%d" % numa_node, "--"] + argv
    result = {"rank": rank, "rank_from": source, "gpu": entry.get("gpu"), "numa_node": numa_node,
              "cpus": sorted(entry["cpus"]), "cpulist": _ranges(entry["cpus"]), "env": changed, "unset": removed,
              "membind": numa_node if numactl else None, "argv": argv}
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
                        help="local rank (default: %s, the first that is set)" % ", ".join(RANK_VARIABLES))
    parser.add_argument("--keep-env", action="append", default=[], metavar="NAMES",
                        help="comma list of variables whose value in the caller's environment wins over the rank "
                             "table's (e.g. OMP_NUM_THREADS)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print what would run (JSON: CPUs, memory node, environment, argv) and exit")
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
        rank, source = local_rank(environ, args.rank)
        result, env = plan(load_table(table), rank, source, environ, command, keep, which, table)
        if args.dry_run:
            sys.stdout.write(json.dumps(result, indent=1, sort_keys=True) + "\n")
            return 0
        path = program(result["argv"], env, which)
        if result["numa_node"] is not None and result["membind"] is None:
            warn("numactl not found: memory is not bound to NUMA node %d (the kernel's first-touch policy usually "
                 "keeps it there, since the rank runs on that node's CPUs); install numactl to bind it"
                 % result["numa_node"])
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
