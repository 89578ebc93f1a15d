"""The Layout as tables, one per NUMA node, and a summary: ``nodetune plan --root`` prints them for its node and
``nodetune plan -i`` (render.print_plan) for each node of a fleet. Rich on a terminal, imported only there; plain
tab-separated lines otherwise (never wrapped nor truncated)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ansible_collections.nodetune.instinct.plugins.module_utils.parse import format_cpulist


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
