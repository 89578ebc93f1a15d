"""Result tables of the ``nodetune`` CLI (rich), kept apart from the commands so tests can read the rows.

Fleets are large and so are nodes (a governor per CPU): rows are grouped per node by (id, before, after), and
numbered targets are compressed the way the kernel prints CPU lists (``cpu0-63``, ``cpu0-63/C2``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from typing import Any

from nodetune.api import Finding, NodeResult, RunResult, SettingChange

_NUMBERED = re.compile(r"^(\D*?)(\d+)(\D.*)?$")
STATUS_STYLE = {"ok": "green", "changed": "yellow", "drift": "yellow", "failed": "bold red", "unreachable": "bold red"}
MAX_GROUPS_PER_NODE = 25


def compress_targets(targets: Iterable[str]) -> str:
    """``cpu0, cpu1, cpu2, cpu7`` -> ``cpu0-2,7``; ``cpu1/C2, cpu2/C2`` -> ``cpu1-2/C2``; others listed."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.parse import format_cpulist

    numbered: dict[tuple[str, str], list[int]] = {}
    plain: list[str] = []
    for target in targets:
        match = _NUMBERED.match(target)
        if match:
            numbered.setdefault((match.group(1), match.group(3) or ""), []).append(int(match.group(2)))
        else:
            plain.append(target)
    parts = [f"{prefix}{format_cpulist(sorted(set(ids)))}{suffix}"
             for (prefix, suffix), ids in sorted(numbered.items())]
    return ", ".join(parts + sorted(set(plain)))


def change_groups(settings: Sequence[SettingChange], max_per_id: int = 3) -> list[tuple[str, str, str, str, int]]:
    """(id, targets, before, after, count) per distinct change, in apply order; an id with more than
    ``max_per_id`` distinct changes (one IRQ affinity per vector) is one row whose values read "N values"."""
    by_id: dict[str, dict[tuple[str, str], list[str]]] = {}
    for change in settings:
        before, after = _value(change, change.before), _value(change, change.after)
        by_id.setdefault(change.id, {}).setdefault((before, after), []).append(change.target)
    rows: list[tuple[str, str, str, str, int]] = []
    for setting_id, groups in by_id.items():
        if len(groups) <= max_per_id:
            rows.extend((setting_id, compress_targets(targets), before, after, len(targets))
                        for (before, after), targets in groups.items())
            continue
        targets = [t for group in groups.values() for t in group]
        befores = {before for before, _ in groups}
        afters = {after for _, after in groups}
        rows.append((setting_id, compress_targets(targets),
                     befores.pop() if len(befores) == 1 else f"{len(befores)} values",
                     afters.pop() if len(afters) == 1 else f"{len(afters)} values", len(targets)))
    return rows


def drift_groups(findings: Sequence[Finding]) -> list[tuple[str, str, str, str, str, int]]:
    """(id, targets, expected, actual, remedy, count) per distinct drift."""
    groups: dict[tuple[str, str, str], list[Finding]] = {}
    for finding in findings:
        if finding.status == "drift":
            groups.setdefault((finding.id, _short(finding.expected), _short(finding.actual)), []).append(finding)
    return [(key[0], compress_targets(f.target for f in items), key[1], key[2], items[0].remedy, len(items))
            for key, items in groups.items()]


def status_counts(node: NodeResult) -> dict[str, int]:
    counts = {"ok": 0, "drift": 0, "waived": 0, "not_applicable": 0, "unsupported": 0}
    for finding in node.findings:
        counts[finding.status] = counts.get(finding.status, 0) + 1
    return counts


def _value(change: SettingChange, value: str | None) -> str:
    """A file's content is shown by its size (the diff has the text); other values as they are."""
    if change.kind == "file" and value is not None:
        return f"<file, {len(value.encode())} bytes>"
    return _short(value)


def _short(value: Any, width: int = 48) -> str:
    text = "<absent>" if value is None else str(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"


def _status(node: NodeResult) -> str:
    style = STATUS_STYLE.get(node.status, "")
    return f"[{style}]{node.status}[/{style}]" if style else node.status


def _console() -> Any:
    from rich.console import Console

    return Console()


# --------------------------------------------------------------------------------------------- apply / revert
def print_apply(result: RunResult, *, show_diff: bool = False) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = _console()
    title = f"nodetune {result.operation}" + (" (check mode: nothing written)" if result.check else "")
    table = Table(title=title, title_justify="left")
    for column in ("node", "status", "changes" if result.operation == "apply" else "restored", "reboot", "message"):
        table.add_column(column, overflow="fold")
    for node in result.nodes.values():
        count = len(node.settings) if result.operation == "apply" else len(node.restored)
        note = node.message or "; ".join(node.notes[:2])
        table.add_row(node.host, _status(node), str(count), "yes" if node.reboot_required else "",
                      escape(_short(note, 200)))
    console.print(table)
    if result.operation == "apply" and any(n.settings for n in result.nodes.values()):
        changes = Table(title="changes" + (" that would be made" if result.check else ""), title_justify="left")
        for column in ("node", "setting", "targets", "before", "after"):
            changes.add_column(column, overflow="fold")
        for node in result.nodes.values():
            groups = change_groups(node.settings)
            for setting_id, targets, before, after, _count in groups[:MAX_GROUPS_PER_NODE]:
                changes.add_row(node.host, setting_id, escape(targets), escape(before), escape(after))
            if len(groups) > MAX_GROUPS_PER_NODE:
                changes.add_row(node.host, f"... {len(groups) - MAX_GROUPS_PER_NODE} more (--json for all)", "", "", "")
        console.print(changes)
    if show_diff:
        for node in result.nodes.values():
            if node.diff and (node.diff.get("before") or node.diff.get("after")):
                console.print(f"[bold]--- {node.host}[/bold]")
                console.print(escape(unified_diff(node)), highlight=False)
    _print_unconfirmed(console, result)


def unified_diff(node: NodeResult) -> str:
    diff = node.diff or {}
    lines = difflib.unified_diff(diff.get("before", "").splitlines(keepends=True),
                                 diff.get("after", "").splitlines(keepends=True),
                                 fromfile=f"{node.host} (current)", tofile=f"{node.host} (nodetune)", n=0)
    return "".join(lines)


def _print_unconfirmed(console: Any, result: RunResult) -> None:
    from rich.markup import escape

    for node in result.nodes.values():
        for entry in node.unconfirmed:
            console.print(f"[yellow]{node.host}: {escape(str(entry.get('id')))}[{escape(str(entry.get('target')))}]"
                          f" reads back {escape(str(entry.get('actual')))!s}, expected "
                          f"{escape(str(entry.get('expected')))}[/yellow]", highlight=False)


# --------------------------------------------------------------------------------------------- verify
def print_verify(result: RunResult) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = _console()
    table = Table(title="nodetune verify", title_justify="left")
    for column in ("node", "status", "ok", "drift", "waived", "n/a", "drift ids / message"):
        table.add_column(column, overflow="fold")
    for node in result.nodes.values():
        counts = status_counts(node)
        ids = ", ".join(sorted({f.id for f in node.drift}))
        table.add_row(node.host, _status(node), str(counts["ok"]), str(counts["drift"]), str(counts["waived"]),
                      str(counts["not_applicable"] + counts["unsupported"]), escape(node.message or ids))
    console.print(table)
    if result.drift:
        drift = Table(title="drift", title_justify="left")
        for column in ("node", "id", "targets", "expected", "actual", "remedy"):
            drift.add_column(column, overflow="fold")
        for node in result.nodes.values():
            groups = drift_groups(node.findings)
            for finding_id, targets, expected, actual, remedy, _count in groups[:MAX_GROUPS_PER_NODE]:
                drift.add_row(node.host, finding_id, escape(targets), escape(expected), escape(actual),
                              escape(_short(remedy, 90)))
            if len(groups) > MAX_GROUPS_PER_NODE:
                drift.add_row(node.host, f"... {len(groups) - MAX_GROUPS_PER_NODE} more (--json for all)", "", "", "",
                              "")
        console.print(drift)


# --------------------------------------------------------------------------------------------- discover / plan
def discover_row(node: NodeResult) -> list[str]:
    topo = node.topology
    if not topo:
        return [node.host, node.status, "", "", "", "", "", "", node.message or ""]
    cpus = topo.get("cpus") or []
    online = sum(1 for c in cpus if c.get("online"))
    sockets = len({c.get("package") for c in cpus if c.get("package") is not None})
    nvme = sum(1 for b in topo.get("block_devices") or [] if b.get("kind") == "nvme")
    return [node.host, node.status, f"{online}/{len(cpus)}", str(sockets), str(len(topo.get("numa_nodes") or [])),
            str(len(topo.get("gpus") or [])), str(len(topo.get("nics") or [])), str(nvme),
            ", ".join(topo.get("absent") or []) or "-"]


def print_discover(result: RunResult) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="nodetune discover", title_justify="left")
    for column in ("node", "status", "CPUs online", "sockets", "NUMA", "GPUs", "NICs", "NVMe", "absent / message"):
        table.add_column(column, overflow="fold")
    for node in result.nodes.values():
        table.add_row(*(escape(cell) for cell in discover_row(node)))
    _console().print(table)


def print_plan(result: RunResult) -> None:
    from nodetune.commands.plan import print_tables

    console = _console()
    for node in result.nodes.values():
        console.rule(f"[bold]{node.host}[/bold] ({node.status})")
        if node.layout and "numa" in node.layout:
            print_tables(node.layout)
            console.print(f"an apply would change {len(node.settings)} setting(s)"
                          + (" and needs a reboot" if node.reboot_required else ""))
        else:
            console.print(f"[red]{node.message or 'no layout returned'}[/red]", highlight=False)
