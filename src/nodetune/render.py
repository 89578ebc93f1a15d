"""Result tables of the ``nodetune`` CLI (rich), kept apart from the commands so tests can read the rows.

Fleets are large and so are nodes (a governor per CPU, an affinity per IRQ): apply's rows are grouped per node by
(id, before, after), verify's by (check id, status) as the fleet reports group them, and numbered targets are
compressed the way the kernel prints CPU lists (``cpu0-63``, ``cpu0-63/C2``). On a terminal the tables are rich's;
when stdout is not a terminal each row is one plain line, cells separated by tabs, never wrapped nor truncated.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from typing import Any

from nodetune.api import Finding, NodeResult, RunResult, SettingChange
from nodetune.layout_tables import print_tables

STATUS_STYLE = {"ok": "green", "changed": "yellow", "drift": "yellow", "pending": "cyan", "failed": "bold red",
                "unreachable": "bold red"}
MAX_GROUPS_PER_NODE = 25
#: the grouped diff of one node (``nodetune apply --diff``) never exceeds this; ``--full-diff`` has every value
MAX_DIFF_LINES = 200


def compress_targets(targets: Iterable[str]) -> str:
    """``cpu0, cpu1, cpu2, cpu7`` -> ``cpu0-2,7``; ``cpu1/C2, cpu2/C2`` -> ``cpu1-2/C2``; others listed (the
    reports' own compaction, module_utils/plan/finding.py)."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import compact_targets

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
#: the order of a node's finding rows after its drift (which comes first, worst severity first); ok is folded
_ROW_STATUS_ORDER = ("pending", "waived", "unsupported", "not_applicable", "ok")
_SEVERITY_RANK = {"high": 0, "medium": 1, "low": 2, "info": 3}
#: a narrower status cell on a terminal (plain lines keep the finding's status as --json has it)
_TERMINAL_STATUS = {"not_applicable": "n/a", "unsupported": "unsupp."}
#: a (check id, status) group with at most this many distinct (expected, actual) pairs gets a row per pair
#: (bios.iommu's two command-line options); more (one affinity per IRQ) is one row whose values read "<N values>"
MAX_VALUES_PER_ROW = 3
#: on a terminal, the ranges of one kind of numbered target, and the names, a targets cell shows; plain lines show all
TARGETS_SHOWN = 3
# A numbered object whose number ends its name or is followed by a separator: cpu12, cpu12/C2, irq 40,
# irq 40 effective, ib3. nvme0n1 and ibp3s0 are names (a range of them would read as nonsense).
_NUMBERED_TARGET = re.compile(r"^(\D*?)(0|[1-9]\d*)([^0-9A-Za-z].*)?$")


def targets_cell(targets: Iterable[str], limit: int | None = None) -> str:
    """Targets written compactly: ``cpu0-191``; with several kinds, each with its count (``irq 40-71 (32),
    irq 40-71 effective (32)``); names sorted, files of one folder as the shell writes them (``/etc/x.d/{a,b}``).
    With ``limit``: at most that many ranges of a kind (then ``…`` and the kind's count: ``irq 40-47,49-60,62-70 …
    (260)``) and that many names in all (then ``+N``, the names not shown)."""
    numbered: dict[tuple[str, str], set[int]] = {}
    names: set[str] = set()
    for target in targets:
        match = _NUMBERED_TARGET.match(target)
        if match:
            numbered.setdefault((match.group(1), match.group(3) or ""), set()).add(int(match.group(2)))
        else:
            names.add(target)
    several = len(numbered) + len(names) > 1
    parts: list[str] = []
    for (prefix, suffix), numbers in sorted(numbered.items()):
        ranges = _ranges(sorted(numbers))
        cut = limit is not None and len(ranges) > limit
        text = ",".join(str(first) if first == last else f"{first}-{last}" for first, last in ranges[:limit])
        parts.append(f"{prefix}{text}{suffix}" + (" …" if cut else "")
                     + (f" ({len(numbers)})" if (several or cut) and len(numbers) > 1 else ""))
    folders: dict[str, list[str]] = {}
    for name in sorted(names, key=_natural):
        folder, _, base = name.rpartition("/") if name.startswith("/") else ("", "", name)
        folders.setdefault(folder, []).append(base)
    hidden = 0
    budget = limit
    for folder, bases in folders.items():
        shown = bases[:budget]
        hidden += len(bases) - len(shown)
        budget = None if budget is None else budget - len(shown)
        if not shown:
            continue
        if not folder:
            parts += shown
        else:
            parts.append(f"{folder}/{shown[0]}" if len(shown) == 1 else f"{folder}/{{{','.join(shown)}}}")
    return " ".join([", ".join(parts)] * bool(parts) + [f"+{hidden}"] * bool(hidden))


def _natural(name: str) -> list[Any]:
    """``ibp3s0`` before ``ibp25s0``: digit runs compared as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)]


def _ranges(numbers: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for number in numbers:
        if out and number == out[-1][1] + 1:
            out[-1] = (out[-1][0], number)
        else:
            out.append((number, number))
    return out


def _status_of(finding: Finding) -> str:
    """``pending`` for an IRQ that is right but not yet moved (ok, noted by verify: module_utils/audit/verify.py)."""
    if finding.status == "ok" and "(pending:" in str(finding.actual):
        return "pending"
    return finding.status


def finding_rows(findings: Sequence[Finding], *, every: bool = False,
                 limit: int | None = None) -> list[tuple[str, str, int, str, str, str, str]]:
    """A node's findings as (check id, status, count, targets, expected, actual, remedy) rows: one per check id and
    status, split by value when it has few (:data:`MAX_VALUES_PER_ROW`); drift first (worst severity first), then
    pending, waived, unsupported, not applicable, and the ok checks folded into one row. ``every``: a row per
    check id, status and value, ok too, every target listed. ``limit``: see :func:`targets_cell`."""
    groups: dict[tuple[str, str], list[Finding]] = {}
    for finding in findings:
        groups.setdefault((finding.id, _status_of(finding)), []).append(finding)
    drift = sorted((key for key in groups if key[1] == "drift"),
                   key=lambda key: min(_SEVERITY_RANK.get(f.severity, 4) for f in groups[key]))
    rest = sorted((key for key in groups if key[1] != "drift"),
                  key=lambda key: _ROW_STATUS_ORDER.index(key[1]) if key[1] in _ROW_STATUS_ORDER else -1)
    rows: list[tuple[str, str, int, str, str, str, str]] = []
    folded: list[Finding] = []
    for check, status in drift + rest:
        items = groups[(check, status)]
        if status == "ok" and not every:
            folded.extend(items)
            continue
        by_value: dict[tuple[str, str], list[Finding]] = {}
        for finding in items:
            by_value.setdefault((_text(finding.expected), _text(finding.actual)), []).append(finding)
        if every or len(by_value) <= MAX_VALUES_PER_ROW:
            rows.extend(_row(check, status, group, expected, actual, None if every else limit)
                        for (expected, actual), group in by_value.items())
        else:
            rows.append(_row(check, status, items, _one_of(key[0] for key in by_value),
                             _one_of(key[1] for key in by_value), limit))
    if folded:
        checks = len({f.id for f in folded})
        rows.append((f"{checks} check{'s' if checks != 1 else ''}", "ok", len(folded), "", "", "",
                     "--all lists them"))
    return rows


def _row(check: str, status: str, items: Sequence[Finding], expected: str, actual: str,
         limit: int | None) -> tuple[str, str, int, str, str, str, str]:
    remedy = next((f.remedy for f in items if f.remedy), "")
    waiver = items[0].waiver
    if status == "waived" and waiver:
        remedy = f"waived until {waiver.get('expires')}: {waiver.get('reason')}"
    return check, status, len(items), targets_cell((f.target for f in items), limit), expected, actual, remedy


def _one_of(values: Iterable[str]) -> str:
    distinct = set(values)
    return distinct.pop() if len(distinct) == 1 else f"<{len(distinct)} values>"


def _text(value: Any) -> str:
    return "<absent>" if value is None else str(value)


def _print_finding_table(console: Any, title: str, rows: list[tuple[str, str, int, str, str, str, str]]) -> None:
    """One node's rows on a terminal: one line each where the width allows (values and remedy are cut with an
    ellipsis: ``--json`` and piped output have them whole); only the targets fold."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title), title_justify="left")
    check_width = max(len(row[0]) for row in rows)
    table.add_column("check", no_wrap=True)  # ids whole: the targets column is the one that folds
    table.add_column("status", no_wrap=True)
    table.add_column("n", no_wrap=True, justify="right")
    table.add_column("targets", overflow="fold")
    # beside the check, status and count (and the borders): a third for the targets, a fifth (at most 20) for each
    # value, the rest for the remedy
    rest = console.width - check_width - 33
    value_width = max(6, min(20, rest // 5))
    for name in ("expected", "actual"):
        table.add_column(name, no_wrap=True, overflow="ellipsis", max_width=value_width)
    table.add_column("remedy", no_wrap=True, overflow="ellipsis",
                     max_width=max(8, rest - 2 * value_width - max(20, rest // 3)))
    for check, status, count, targets, expected, actual, remedy in rows:
        style = STATUS_STYLE.get(status, "")
        shown = _TERMINAL_STATUS.get(status, status)
        table.add_row(escape(check), f"[{style}]{shown}[/{style}]" if style else shown, str(count), escape(targets),
                      escape(expected), escape(actual), escape(short_remedy(remedy)))
    console.print(table)


# verify's usual remedy (module_utils/audit/verify.py, REMEDY; tests/ansible/test_cli.py holds the two together)
_APPLY_REMEDY = re.compile(r"run the nodetune apply \(site\.yml or playbooks/apply\.yml, --tags ([\w,]+)\) "
                           r"to restore it")


def short_remedy(remedy: str) -> str:
    """On a terminal, verify's usual remedy ("run the nodetune apply (site.yml or playbooks/apply.yml, --tags cpu) to
    restore it") as ``apply --tags cpu``, so that the reason after it shows in a one-line cell."""
    return _APPLY_REMEDY.sub(r"apply --tags \1", remedy)


def print_verify(result: RunResult, *, every: bool = False) -> None:
    """The findings of every node grouped by check id (what drifts first), then one summary row per node. ``every``
    (``--all``): a row per check id, status and value, with every target."""
    console = _console()
    title = "findings by check" if not every else "findings by check and value"
    columns = ("check", "status", "n", "targets", "expected", "actual", "remedy")
    if not _on_terminal():
        plain = _Rows(title, ("node", *columns))
        for node in result.nodes.values():
            for row in finding_rows(node.findings, every=every):
                plain.add_row(node.host, row[0], row[1], str(row[2]), *row[3:])
        if plain.rows:
            plain.print(console)
    else:
        for node in result.nodes.values():
            if node.findings:
                _print_finding_table(console, f"{node.host}: {title}", finding_rows(
                    node.findings, every=every, limit=None if every else TARGETS_SHOWN))
    summary = _Rows("nodetune verify", ("node", "status", "checks drifted", "ok", "drift", "waived", "n/a",
                                        "message"))
    for node in result.nodes.values():
        counts = status_counts(node)
        note = node.message or "; ".join(node.notes[:2])
        summary.add_row(_markup(node.host), _status(node), str(len({f.id for f in node.drift})), str(counts["ok"]),
                        str(counts["drift"]), str(counts["waived"]),
                        str(counts["not_applicable"] + counts["unsupported"]), _markup(_short(note, 200)))
    summary.print(console)


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
