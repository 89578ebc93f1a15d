"""``nodetune plan --root DIR [--json] [--policy FILE]``: the node's Layout (docs/layout.md).

Discovers the node under ROOT (read-only) and runs the layout planner on it; ``--topology FILE`` plans from a
saved ``nodetune discover --json`` instead. ``--json`` prints the Layout with its documented, stable keys; the
default view is a table per NUMA node (``rich``, imported only for that view).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ansible_collections.nodetune.instinct.plugins.module_utils.parse import format_cpulist
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import LayoutError, PolicyError, plan
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError

EXIT_OK = 0
EXIT_FAILURE = 1


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "plan",
        help="compute the node's NUMA, IRQ and SMT layout (per-GPU CPU sets, NIC IRQ pinning, SMT siblings)",
        description="Discover the node under ROOT (read-only) and compute its layout: housekeeping CPUs, the SMT "
                    "siblings to offline, one disjoint CPU set per GPU rank with its environment, and where each NIC "
                    "completion IRQ goes. Nothing is written.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--root", default="/", metavar="DIR",
                        help="the node's root file system: '/' (default) or a captured/simulated node tree")
    source.add_argument("--topology", metavar="FILE",
                        help="plan from a saved Topology (the output of 'nodetune discover --json') instead")
    source.add_argument("-i", "--inventory", metavar="INVENTORY",
                        help="plan the nodes of an Ansible inventory with its variables (playbooks/plan.yml)")
    parser.add_argument("-l", "--limit", metavar="PATTERN", help="with -i: only these hosts")
    parser.add_argument("--policy", metavar="FILE",
                        help="layout policy, a YAML or JSON mapping of settings (docs/layout.md); defaults otherwise")
    parser.add_argument("--json", action="store_true", help="print the Layout as JSON (docs/layout.md)")
    parser.set_defaults(func=run)
    return parser


class CommandError(Exception):
    """A user-facing failure: printed as one line, exit status 1."""


def load_mapping(path: str, what: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CommandError(f"cannot read the {what} file {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise CommandError(f"the {what} file {path} is neither JSON nor YAML: {exc}") from None
    if data is None and what == "policy":
        return {}
    if not isinstance(data, dict):
        raise CommandError(f"the {what} file {path} must hold a mapping, not {type(data).__name__}")
    return data


def load_topology(args: argparse.Namespace) -> dict[str, Any]:
    if args.topology:
        return load_mapping(args.topology, "topology")
    from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover

    try:
        return discover(args.root)
    except NodeFileError as exc:
        raise CommandError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    if args.inventory:
        from nodetune.commands._shared import run_fleet

        return run_fleet("plan", args)
    try:
        policy = load_mapping(args.policy, "policy") if args.policy else None
        topology = load_topology(args)
        layout = plan(topology, policy)
    except PolicyError as exc:
        print(f"nodetune plan: policy error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except (CommandError, LayoutError) as exc:
        print(f"nodetune plan: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:  # a bug must not greet the operator with a traceback
        if os.environ.get("NODETUNE_DEBUG"):
            raise
        print(f"nodetune plan: error: planning failed unexpectedly ({type(exc).__name__}: {exc}); "
              "set NODETUNE_DEBUG=1 for the traceback and please report it", file=sys.stderr)
        return EXIT_FAILURE
    try:
        if args.json:
            sys.stdout.write(json.dumps(layout, indent=2) + "\n")
        else:
            print_tables(layout)
        sys.stdout.flush()
    except BrokenPipeError:  # `nodetune plan --json | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK


# --------------------------------------------------------------------------------------------- human view
def _cpulist(cpus: Iterable[int]) -> str:
    return format_cpulist(cpus) or "-"


def node_rows(layout: dict[str, Any], node: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(role, CPUs, detail) rows of one NUMA node's table; separate from rendering so tests can read them."""
    rows: list[tuple[str, str, str]] = []
    if node["housekeeping"]:
        rows.append(("housekeeping", _cpulist(node["housekeeping"]), "OS, daemons, IRQs that are not pinned"))
    ranks = {r["rank"]: r for r in layout["ranks"]}
    for index in node["ranks"]:
        rank = ranks[index]
        gpu = rank["gpu"]
        if rank["partitions"] > 1:
            gpu += f" partition {rank['partition']}/{rank['partitions']}"
        if rank["name"]:
            gpu += f" ({rank['name']})"
        nics = ",".join(rank["netdevs"] + rank["hcas"]) or "no NIC"
        detail = f"GPU {gpu}; OMP_NUM_THREADS={rank['env']['OMP_NUM_THREADS']}; nearest NICs {nics}"
        if rank["shared"]:
            detail += "; SHARED (too few cores)"
        rows.append((f"rank {index}", _cpulist(rank["cpus"]), detail))
    if node["irq_cpus"]:
        vectors: dict[str, int] = {}
        for entry in layout["irq_affinity"]:
            if entry["numa_node"] == node["node"]:
                vectors[entry["device"]] = vectors.get(entry["device"], 0) + 1
        detail = "; ".join(f"{dev}: {count} vectors" for dev, count in sorted(vectors.items()))
        rows.append((f"NIC IRQs ({node['irq_mode']})", _cpulist(node["irq_cpus"]), detail or "-"))
    if node["spare"]:
        rows.append(("spare", _cpulist(node["spare"]), "not assigned (remainder of the even split)"))
    if node["smt_offline"]:
        rows.append(("SMT offline", _cpulist(node["smt_offline"]), "secondary threads taken offline"))
    return rows


def summary_lines(layout: dict[str, Any]) -> list[tuple[str, str]]:
    if layout["smt_control"] == "off":
        smt = "smt/control=off"
    elif layout["smt_offline"]:
        smt = f"offline {_cpulist(layout['smt_offline'])}"
    else:
        smt = "no change"
    irqbalance = layout["irqbalance"]
    if irqbalance["mode"] == "ban":
        banned = _cpulist(irqbalance["banned_cpulist"] or [])
        balance = (f"ban: IRQBALANCE_BANNED_CPULIST={banned}, {len(irqbalance['banned_irqs'])} IRQs banned by name "
                   "(--policyscript)")
    else:
        balance = "stop and disable"
    if irqbalance["installed"] is False:
        balance += " (not installed)"
    return [
        ("SMT", smt),
        ("housekeeping", _cpulist(layout["housekeeping"])),
        ("ranks", str(len(layout["ranks"]))),
        ("NIC IRQs pinned", f"{len(layout['irq_affinity'])} on CPUs {_cpulist(layout['nic_irq_cpus'])}"),
        ("managed IRQs", f"{len(layout['managed_irqs'])} (verify only, never written)"),
        ("IRQs left alone", f"{len(layout['irq_left_alone'])} (NIC async/control vectors, unknown devices)"),
        ("irqbalance", balance),
    ]


def print_tables(layout: dict[str, Any]) -> None:
    """Rich tables on a terminal; plain tab-separated lines otherwise (never wrapped nor truncated)."""
    import sys

    if not sys.stdout.isatty():
        _print_plain(layout)
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for node in layout["numa"]:
        if node["memory_only"]:
            console.print(f"[bold]NUMA node {node['node']}[/bold]: memory only (no CPUs)")
            continue
        package = node["package"] if node["package"] is not None else "?"
        title = (f"NUMA node {node['node']} (package {package}, {node['cores']} cores, online after plan "
                 f"{_cpulist(node['cpus'])})")
        table = Table(title=title, title_justify="left")
        table.add_column("role", no_wrap=True)
        table.add_column("CPUs")
        table.add_column("detail")
        for row in node_rows(layout, node):
            table.add_row(*row)
        console.print(table)
    summary = Table(show_header=False, box=None)
    summary.add_column(style="bold")
    summary.add_column()
    for label, text in summary_lines(layout):
        summary.add_row(label, text)
    console.print(summary)
    for warning in layout["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)


def _print_plain(layout: dict[str, Any]) -> None:
    lines: list[str] = []
    for node in layout["numa"]:
        if node["memory_only"]:
            lines.append(f"# NUMA node {node['node']}: memory only (no CPUs)")
            continue
        package = node["package"] if node["package"] is not None else "?"
        lines.append(f"# NUMA node {node['node']} (package {package}, {node['cores']} cores, online after plan "
                     f"{_cpulist(node['cpus'])})")
        lines.append("role\tCPUs\tdetail")
        lines.extend("\t".join(row) for row in node_rows(layout, node))
    lines.extend(f"{label}\t{text}" for label, text in summary_lines(layout))
    lines.extend(f"warning: {warning}" for warning in layout["warnings"])
    print("\n".join(lines))
