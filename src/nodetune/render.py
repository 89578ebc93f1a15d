"""Result tables of the ``nodetune`` CLI (rich), kept apart from the commands so tests can read the rows.

Fleets are large and so are nodes (a governor per CPU): rows are grouped per node by (id, before, after), and
numbered targets are compressed the way the kernel prints CPU lists (``cpu0-63``, ``cpu0-63/C2``). On a terminal
the tables are rich's; when stdout is not a terminal each row is one plain line, cells separated by tabs, never
wrapped nor truncated.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from typing import Any

from nodetune.api import Finding, NodeResult, RunResult, SettingChange

STATUS_STYLE = {"ok": "green", "changed": "yellow", "drift": "yellow", "failed": "bold red", "unreachable": "bold red"}
MAX_GROUPS_PER_NODE = 25
#: the grouped diff of one node (``nodetune apply --diff``) never exceeds this; ``--full-diff`` has every value
MAX_DIFF_LINES = 200


def compress_targets(targets: Iterable[str]) -> str:
    """``cpu0, cpu1, cpu2, cpu7`` -> ``cpu0-2,7``; ``cpu1/C2, cpu2/C2`` -> ``cpu1-2/C2``; others listed (the
    reports' own compaction, module_utils/finding.py)."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.finding import compact_targets

    return compact_targets(targets)


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
    """One line; shortened to ``width`` on a terminal only: piped output is never truncated."""
    text = "<absent>" if value is None else str(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= width or not _on_terminal() else text[: width - 1] + "…"


# C0, DEL, C1, and the two separators str.splitlines() also breaks at: a host name, value or message holding one
# would split a plain row (one row per line, docs/cli.md)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def plain_cell(text: str) -> str:
    """A cell of a plain line: control characters written as Python escapes (``\\n``, ``\\t``, ``\\x1b``)."""
    return _CONTROL.sub(lambda match: repr(match.group())[1:-1], text)


def _on_terminal() -> bool:
    import sys

    return sys.stdout.isatty()


def _status(node: NodeResult) -> str:
    style = STATUS_STYLE.get(node.status, "")
    return f"[{style}]{node.status}[/{style}]" if style and _on_terminal() else node.status


def _console() -> Any:
    from rich.console import Console

    return Console()


class _Rows:
    """A table: rich's on a terminal; else plain lines, one per row, cells separated by a tab, never wrapped nor
    truncated (ids, hosts and messages stay whole for grep, awk and logs). Cells are rich markup on a terminal
    (escaped by the caller) and plain text otherwise."""

    def __init__(self, title: str, columns: Sequence[str]) -> None:
        self.title = title
        self.columns = list(columns)
        self.rows: list[list[str]] = []

    def add_row(self, *cells: str) -> None:
        self.rows.append([str(c) for c in cells])

    def print(self, console: Any) -> None:
        if _on_terminal():
            from rich.table import Table

            table = Table(title=self.title, title_justify="left")
            for column in self.columns:
                table.add_column(column, overflow="fold")
            for row in self.rows:
                table.add_row(*row)
            console.print(table)
            return
        _plain_lines([f"# {plain_cell(self.title)}", "\t".join(self.columns),
                      *("\t".join(plain_cell(cell) for cell in row) for row in self.rows)])


def _plain_lines(lines: Iterable[str]) -> None:
    import sys

    sys.stdout.write("".join(line + "\n" for line in lines))


def _markup(text: str) -> str:
    """Escaped for rich on a terminal; as it is in plain lines."""
    if not _on_terminal():
        return text
    from rich.markup import escape

    return escape(text)


# --------------------------------------------------------------------------------------------- apply / revert
def print_apply(result: RunResult, *, show_diff: bool = False, full_diff: bool = False) -> None:
    console = _console()
    title = f"nodetune {result.operation}" + (" (check mode: nothing written)" if result.check else "")
    table = _Rows(title, ("node", "status", "changes" if result.operation == "apply" else "restored", "reboot",
                          "message"))
    for node in result.nodes.values():
        count = len(node.settings) if result.operation == "apply" else len(node.restored)
        note = node.message or "; ".join(node.notes[:2])
        table.add_row(node.host, _status(node), str(count), "yes" if node.reboot_required else "",
                      _markup(_short(note, 200)))
    table.print(console)
    if result.operation == "apply" and any(n.settings for n in result.nodes.values()):
        changes = _Rows("changes" + (" that would be made" if result.check else ""),
                        ("node", "setting", "targets", "before", "after"))
        for node in result.nodes.values():
            groups = change_groups(node.settings)
            shown = groups if not _on_terminal() else groups[:MAX_GROUPS_PER_NODE]
            for setting_id, targets, before, after, _count in shown:
                changes.add_row(node.host, setting_id, _markup(targets), _markup(before), _markup(after))
            if len(groups) > len(shown):
                changes.add_row(node.host, f"... {len(groups) - len(shown)} more (--json for all)", "", "", "")
        changes.print(console)
    if show_diff or full_diff:
        for node in result.nodes.values():
            if full_diff and node.diff and (node.diff.get("before") or node.diff.get("after")):
                text = unified_diff(node)
            elif show_diff and node.settings:
                text = "\n".join(grouped_diff(node)) + "\n"
            else:
                continue
            if _on_terminal():
                console.print(f"[bold]--- {node.host}[/bold]")
                console.print(_markup(text), highlight=False)
            else:
                _plain_lines(text.splitlines())
    _print_unconfirmed(console, result)


def grouped_diff(node: NodeResult, limit: int = MAX_DIFF_LINES) -> list[str]:
    """The node's changes as a diff of groups: one ``@@ id @@`` hunk per setting id, a ``-``/``+`` pair per
    distinct change over its targets (compact), at most ``limit`` lines whatever the node's size."""
    lines = [f"--- {node.host} (current)", f"+++ {node.host} (nodetune)"]
    by_id: dict[str, list[tuple[str, str, str, str, int]]] = {}
    for group in change_groups(node.settings):
        by_id.setdefault(group[0], []).append(group)
    body: list[str] = []
    for setting_id, groups in by_id.items():
        values = sum(g[4] for g in groups)
        body.append(f"@@ {setting_id} ({values} value{'s' if values != 1 else ''}) @@")
        for _id, targets, before, after, _count in groups:
            body += [f"-{targets}: {before}", f"+{targets}: {after}"]
    room = limit - len(lines)
    if len(body) > room:
        cut = len(body) - room + 1
        body = body[: room - 1] + [f"... {cut} more line(s): --full-diff shows every value"]
    return lines + body


def unified_diff(node: NodeResult) -> str:
    diff = node.diff or {}
    lines = difflib.unified_diff(diff.get("before", "").splitlines(keepends=True),
                                 diff.get("after", "").splitlines(keepends=True),
                                 fromfile=f"{node.host} (current)", tofile=f"{node.host} (nodetune)", n=0)
    return "".join(lines)


def _print_unconfirmed(console: Any, result: RunResult) -> None:
    for node in result.nodes.values():
        for entry in node.unconfirmed:
            line = (f"{node.host}: {entry.get('id')}[{entry.get('target')}] reads back {entry.get('actual')}, "
                    f"expected {entry.get('expected')}")
            if _on_terminal():
                from rich.markup import escape

                console.print(f"[yellow]{escape(line)}[/yellow]", highlight=False)
            else:
                _plain_lines([plain_cell(line)])


# --------------------------------------------------------------------------------------------- verify
def print_verify(result: RunResult) -> None:
    console = _console()
    table = _Rows("nodetune verify", ("node", "status", "ok", "drift", "waived", "n/a", "drift ids / message"))
    for node in result.nodes.values():
        counts = status_counts(node)
        ids = ", ".join(sorted({f.id for f in node.drift}))
        table.add_row(node.host, _status(node), str(counts["ok"]), str(counts["drift"]), str(counts["waived"]),
                      str(counts["not_applicable"] + counts["unsupported"]), _markup(node.message or ids))
    table.print(console)
    if result.drift:
        drift = _Rows("drift", ("node", "id", "targets", "expected", "actual", "remedy"))
        for node in result.nodes.values():
            groups = drift_groups(node.findings)
            shown = groups if not _on_terminal() else groups[:MAX_GROUPS_PER_NODE]
            for finding_id, targets, expected, actual, remedy, _count in shown:
                drift.add_row(node.host, finding_id, _markup(targets), _markup(expected), _markup(actual),
                              _markup(_short(remedy, 90)))
            if len(groups) > len(shown):
                drift.add_row(node.host, f"... {len(groups) - len(shown)} more (--json for all)", "", "", "", "")
        drift.print(console)


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
    table = _Rows("nodetune discover",
                  ("node", "status", "CPUs online", "sockets", "NUMA", "GPUs", "NICs", "NVMe", "absent / message"))
    for node in result.nodes.values():
        table.add_row(*(_markup(cell) for cell in discover_row(node)))
    table.print(_console())


def print_plan(result: RunResult) -> None:
    from nodetune.commands.plan import print_tables

    console = _console()
    terminal = _on_terminal()
    for node in result.nodes.values():
        if terminal:
            console.rule(f"[bold]{_markup(node.host)}[/bold] ({node.status})")
        else:
            _plain_lines([f"## {plain_cell(node.host)} ({node.status})"])
        if node.layout and "numa" in node.layout:
            print_tables(node.layout)
            line = (f"an apply would change {len(node.settings)} setting(s)"
                    + (" and needs a reboot" if node.reboot_required else ""))
            if terminal:
                console.print(line)
            else:
                _plain_lines([line])
        elif terminal:
            console.print(f"[red]{_markup(node.message or 'no layout returned')}[/red]", highlight=False)
        else:
            _plain_lines([plain_cell(node.message or "no layout returned")])
