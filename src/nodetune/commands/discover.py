"""``nodetune discover --root DIR [--json]``: the node's Topology, as JSON or as a short summary.

The ``--json`` path is meant to be scripted at fleet scale, so it imports nothing heavy: only the
standard library and the collection's discovery code. ``rich`` is imported lazily for the human view, argparse
only to build the parser (cli.py parses the plain ``--root DIR --json`` by hand), and not even ``json``: the
Topology is encoded by the C encoder that ``json.dumps`` itself uses (see :func:`encode_json`).
"""

from __future__ import annotations

import os
import sys

from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError

TYPE_CHECKING = False
if TYPE_CHECKING:  # keep typing (and argparse) out of the --json start-up path
    import argparse
    from collections.abc import Iterable
    from typing import Any

EXIT_OK = 0
EXIT_FAILURE = 1


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "discover",
        help="read a node's topology (CPUs, NUMA, GPUs, NICs, NVMe, IRQs) from sysfs/procfs",
        description="Read a node's topology from sysfs/procfs under ROOT (read-only).",
    )
    parser.add_argument("--root", default="/", metavar="DIR",
                        help="the node's root file system: '/' (default) or a captured/simulated node tree")
    parser.add_argument("--json", action="store_true", help="print the Topology as JSON (docs/topology.md)")
    parser.add_argument("-i", "--inventory", metavar="INVENTORY",
                        help="discover the nodes of an Ansible inventory instead (playbooks/discover.yml)")
    parser.add_argument("-l", "--limit", metavar="PATTERN", help="with -i: only these hosts")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    if args.inventory:
        from nodetune.commands._shared import run_fleet

        return run_fleet("discover", args)
    try:
        topology = _discover_without_gc(args.root)
    except NodeFileError as exc:
        print(f"nodetune discover: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:  # a bug must not greet the operator with a traceback
        if os.environ.get("NODETUNE_DEBUG"):
            raise
        print(f"nodetune discover: error: discovery of {args.root!r} failed unexpectedly ({type(exc).__name__}: "
              f"{exc}); set NODETUNE_DEBUG=1 for the traceback and please report it", file=sys.stderr)
        return EXIT_FAILURE
    if args.json:
        sys.stdout.write(encode_json(topology))
        sys.stdout.write("\n")
        return EXIT_OK
    print_summary(topology)
    return EXIT_OK


def _discover_without_gc(root: str) -> dict[str, Any]:
    """discover() with the cyclic garbage collector paused: a Topology is tens of thousands of small acyclic
    dicts and lists, whose allocation would otherwise start a few useless collections."""
    import gc

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return discover(root)
    finally:
        if was_enabled:
            gc.enable()


def encode_json(value: Any) -> str:
    """``json.dumps(value, separators=(",", ":"))``, the same text, without importing ``json``.

    ``json`` imports ``re`` (for its pure-Python fallbacks), and ``re`` brings ``enum`` and ``functools``: a large share
    of a discovery that lstopo does in a few times that (docs/benchmarks.md). ``json.dumps`` encodes with
    ``_json.make_encoder`` (CPython's C accelerator, called with exactly these arguments by
    ``JSONEncoder.iterencode``); where that is missing or takes other arguments, ``json.dumps`` itself runs.
    tests/node/test_discover_cli.py compares the two.
    """
    try:
        from _json import encode_basestring_ascii, make_encoder

        # (markers, default, encoder, indent, key_separator, item_separator, sort_keys, skipkeys, allow_nan)
        encoder = make_encoder({}, _not_serialisable, encode_basestring_ascii, None, ":", ",", False, False, True)
    except (ImportError, TypeError):
        import json

        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, str):  # JSONEncoder.encode's own shortcut
        return encode_basestring_ascii(value)
    return "".join(encoder(value, 0))


def _not_serialisable(value: Any) -> Any:
    """JSONEncoder.default: the same TypeError as json.dumps."""
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


# --------------------------------------------------------------------------------------------- summary
def _cpulist(cpus: Iterable[int]) -> str:
    from ansible_collections.nodetune.instinct.plugins.module_utils.parse import format_cpulist

    text = format_cpulist(cpus)
    return text if text else "-"


def _count(number: Any, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _numa(node: Any) -> str:
    """A device's NUMA node; the kernel's -1 (and a virtual device's none) mean it has no locality to report."""
    return f"node {node}" if isinstance(node, int) and node >= 0 else "no NUMA node"


def summary_lines(topo: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, text) pairs of the human summary; kept separate from rendering so tests can read them."""
    cpus = topo["cpus"]
    online = [c["id"] for c in cpus if c["online"]]
    packages = {c["package"] for c in cpus if c["package"] is not None}
    cores = {(c["package"], c["die"], c["core_id"]) for c in cpus if c["core_id"] is not None}
    smt = topo["smt"]
    lines = [
        ("root", topo["root"]),
        ("CPUs", f"{len(online)} online of {len(cpus)} ({_cpulist(online)})" if cpus else "none found"),
        ("cores/sockets", f"{_count(len(cores), 'core')}, {_count(len(packages), 'socket')}, "
                          f"{_count(smt['threads_per_core'] or '?', 'thread')} per core, "
                          f"SMT control {smt['control'] or 'n/a'}"),
    ]
    nodes = topo["numa_nodes"]
    lines.append(("NUMA nodes", str(len(nodes)) if nodes else "none exposed"))
    for n in nodes:
        memory = f", {n['memory_kb'] // 1048576} GiB" if n["memory_kb"] else ""
        cpus_text = f"{len(n['cpus'])} CPUs: {_cpulist(n['cpus'])}" if n["has_cpus"] else "no CPUs (memory only)"
        lines.append((f"  node{n['id']}", cpus_text + memory))
    _section(lines, "GPUs", [
        f"{g['bdf']} {g['vendor']}" + (f" {g['name']}" if g["name"] else "") + f", {_numa(g['numa_node'])}"
        + (f", {g['partitions']} partitions" if g["partitions"] > 1 else "")
        + (f", {len(g['xgmi_peers'])} xGMI peers" if g["xgmi_peers"] else "") for g in topo["gpus"]])
    _section(lines, "NICs", [
        f"{n['name']} {n['type']}, mtu {n['mtu']}, {_numa(n['numa_node'])}"
        + (f", ipoib {n['ipoib_mode']}" if n["ipoib_mode"] else "") + (f", {n['bdf']}" if n["bdf"] else "")
        for n in topo["nics"]])
    _section(lines, "IB ports", [
        f"{d['name']}/{p['port']} {p['state']} {p['rate']} ({p['link_layer']})"
        for d in topo["ib_devices"] for p in d["ports"]])
    _section(lines, "NVMe", [
        f"{b['name']} {_numa(b['numa_node'])}, scheduler {b['scheduler']}, nr_requests {b['nr_requests']}, "
        + (f"{b['hw_queues']} hw queues" if b["hw_queues"] is not None else "hw queues unknown (no mq/)")
        for b in topo["block_devices"] if b["kind"] == "nvme"])
    irqs = topo["irqs"]
    if irqs:
        managed = sum(1 for i in irqs if i["managed"])
        nic = sum(1 for i in irqs if i["kind"] == "nic_comp")
        lines.append(("IRQs", f"{len(irqs)} ({nic} NIC completion, {managed} managed)"))
    lines.append(("absent", ", ".join(topo["absent"]) or "nothing"))
    if topo["warnings"]:
        lines.append(("warnings", f"{len(topo['warnings'])} (see --json)"))
    return lines


def _section(lines: list[tuple[str, str]], label: str, items: list[str]) -> None:
    """A count row, then one row per item (nothing at all for an empty section: ``absent`` says it)."""
    if items:
        lines.append((label, str(len(items))))
        lines.extend(("", item) for item in items)


def print_summary(topo: dict[str, Any]) -> None:
    """A rich table on a terminal; ``label: text`` lines otherwise (never wrapped nor truncated)."""
    import sys

    lines = summary_lines(topo)
    if not sys.stdout.isatty():
        for label, text in lines:
            print(f"{label + ':':<14} {text}" if label else f"{'':<14} {text}")
        return
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover - rich is a dependency, but plain text is fine too
        for label, text in lines:
            print(f"{label + ':':<14} {text}")
        return
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for label, text in lines:
        table.add_row(label, text)
    Console().print(table)
