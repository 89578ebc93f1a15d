"""What the playbook-running sub-commands share: the target (``-i`` or ``--root``), variables, the run with its
per-node progress display, and turning errors into one line and an exit code (never a traceback)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from nodetune import api
from nodetune._as_data import MAX_EXTRA_VARS_BYTES, expanded_size
from nodetune.commands._basics import EXIT_DRIFT, EXIT_FAILURE, EXIT_OK, CommandError, load_mapping


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 1."""


def inventory_of(args: argparse.Namespace) -> api.Inventory:
    """The inventory the command runs on: the ``-i`` path, or a one-host inventory for ``--root DIR``."""
    if getattr(args, "inventory", None):
        path = Path(args.inventory).expanduser()
        if not path.exists():
            raise UsageError(f"inventory {args.inventory!r} does not exist (give a file or directory, as for "
                             "ansible-playbook -i)")
        return str(path)
    if getattr(args, "root", None):
        if not Path(args.root).expanduser().is_dir():
            raise UsageError(f"--root {args.root!r}: no such directory (give '/' or a node tree)")
        return api.local_inventory(args.root)
    raise UsageError("give -i INVENTORY (a fleet) or --root DIR (one node on this machine)")


#: The largest ``-e @FILE`` read, and the most data any ``-e`` may expand to through YAML aliases (the API's own
#: bound on extra variables): a small "billion laughs" file would otherwise take gigabytes before Ansible's error.
MAX_VARS_FILE_BYTES = 1 << 20
MAX_VARS_EXPANDED = MAX_EXTRA_VARS_BYTES


def extra_vars_of(args: argparse.Namespace) -> dict[str, Any]:
    """``-e KEY=VALUE`` (the value read as YAML, as ansible-playbook does) and ``-e @FILE`` (YAML or JSON)."""
    import yaml

    out: dict[str, Any] = {}
    for text in getattr(args, "extra_vars", None) or []:
        if text.startswith("@"):
            name = text[1:]
            try:
                with open(name, "rb") as handle:
                    raw = handle.read(MAX_VARS_FILE_BYTES + 1)  # not all of it: it may be huge, or endless
                if len(raw) > MAX_VARS_FILE_BYTES:
                    size = os.stat(name).st_size
                    found = f"{size} bytes" if size > MAX_VARS_FILE_BYTES else "an endless stream"
                    raise UsageError(f"-e @{name}: the file is larger than the {MAX_VARS_FILE_BYTES >> 20} MiB "
                                     f"nodetune reads from a variables file ({found})")
                data = _load_yaml(raw.decode("utf-8"), f"-e @{name}")
            except OSError as exc:
                raise UsageError(f"-e @{name}: cannot read the file: {exc.strerror or exc}") from None
            except UnicodeDecodeError as exc:
                raise UsageError(f"-e @{name}: not a UTF-8 text file (byte {exc.start} is not UTF-8): give a YAML "
                                 "or JSON file of variables") from None
            except yaml.YAMLError as exc:
                raise UsageError(f"-e @{name}: not YAML or JSON: {' '.join(str(exc).split())}") from None
            if not isinstance(data, dict):
                raise UsageError(f"-e @{name}: must hold a mapping of variable names to values")
            out.update(data)
        elif "=" in text and not text.lstrip().startswith("{"):
            key, _, value = text.partition("=")
            if not key.isidentifier():
                raise UsageError(f"-e {text!r}: {key!r} is not a variable name (KEY=VALUE)")
            try:
                out[key] = _load_yaml(value, f"-e {key}=...") if value else ""
            except yaml.YAMLError:
                out[key] = value
        else:
            try:
                data = _load_yaml(text, "-e {...}")
            except yaml.YAMLError:
                data = None
            if not isinstance(data, dict):
                raise UsageError(f"-e {text!r}: expected KEY=VALUE, @FILE or a YAML/JSON mapping")
            out.update(data)
    return out


def _load_yaml(text: str, what: str) -> Any:
    """``yaml.safe_load``, refusing a document whose aliases expand it past :data:`MAX_VARS_EXPANDED` (measured on
    the composed nodes before any value is built) or that nests deeper than Python can follow."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        try:
            expanded = _expanded_size(node, MAX_VARS_EXPANDED)
        except ValueError as exc:
            raise UsageError(f"{what}: {exc}") from None
        if expanded > MAX_VARS_EXPANDED:
            raise UsageError(f"{what}: its YAML aliases (*name) expand it to more than the "
                             f"{MAX_VARS_EXPANDED >> 20} MiB of data nodetune takes (from {len(text)} characters)")
        return loader.construct_document(node)
    except RecursionError:
        raise UsageError(f"{what}: nested too deeply") from None
    finally:
        loader.dispose()


def _expanded_size(root: Any, limit: int) -> int:
    """The size of a composed YAML node with every alias expanded (its scalars' length and one per node); stops
    past ``limit``. Raises ValueError for a node within itself."""
    import yaml

    def parts(node: Any) -> list[Any] | None:
        if isinstance(node, yaml.ScalarNode):
            return None
        return [part for pair in node.value for part in pair] if isinstance(node, yaml.MappingNode) else node.value

    return expanded_size(root, parts, lambda node: len(node.value) + 1, limit,
                         "a YAML alias (*name) refers to the value that holds it")


def check_names(extra_vars: dict[str, Any], tags: list[str] | None) -> None:
    """Refuse, before anything runs, a misspelt nodetune variable (``Nodetune_smt_enabled``, a Cyrillic ``о``) and a
    tag that selects no area (``-t NVME``): the playbook would ignore the one and make apply a no-op with the other."""
    from ansible_collections.nodetune.instinct.plugins.plugin_utils import variable_names

    errors = variable_names.undeclared(name for name in extra_vars if isinstance(name, str))
    errors += variable_names.tag_errors(tags or [])
    if errors:
        raise UsageError("; ".join(errors))


def tags_of(args: argparse.Namespace) -> list[str] | None:
    text = getattr(args, "tags", None)
    if not text:
        return None
    tags = [t.strip() for t in text.split(",") if t.strip()]
    return tags or None


def fail(command: str, message: str) -> int:
    print(f"nodetune {command}: error: {message}", file=sys.stderr)
    return EXIT_FAILURE


def cancelled(command: str, exc: api.CancelledError) -> int:
    """What a cancelled run did, node by node, and 128 + the signal (130 SIGINT, 143 SIGTERM)."""
    print(f"nodetune {command}: {exc}", file=sys.stderr)
    for node in (exc.result.nodes.values() if exc.result else []):
        done = f"{len(node.settings)} value(s) written" if command == "apply" else node.status
        if node.failed:
            done = node.message or node.status
        print(f"nodetune {command}: {node.host}: {done}", file=sys.stderr)
    return 128 + exc.signal


def run_command(command: str, args: argparse.Namespace, call: Callable[..., api.RunResult],
                **kwargs: Any) -> api.RunResult | int:
    """Run one API call for the command with the shared options and a progress display.

    Returns the result, or an exit code when the run could not happen (the message is printed)."""
    try:
        inventory = inventory_of(args)
        extra = extra_vars_of(args)
        check_names(extra, kwargs.get("tags"))
    except UsageError as exc:
        return fail(command, str(exc))
    options: dict[str, Any] = {"limit": getattr(args, "limit", None), "forks": getattr(args, "forks", None),
                               "extra_vars": extra or None, "keep_artifacts": getattr(args, "keep_artifacts", False),
                               "raise_on_failure": False}
    options.update(kwargs)
    try:
        with node_progress(enabled=not getattr(args, "json", False)) as progress:
            result = call(inventory, progress=progress, **options)
    except api.CancelledError as exc:
        return cancelled(command, exc)
    except api.NodetuneError as exc:
        return fail(command, str(exc))
    except Exception as exc:  # a bug must not greet the operator with a traceback
        if os.environ.get("NODETUNE_DEBUG"):
            raise
        return fail(command, f"unexpected {type(exc).__name__}: {exc}; set NODETUNE_DEBUG=1 for the traceback "
                             "and please report it")
    if result.artifacts_dir:
        print(f"nodetune {command}: artifacts kept in {result.artifacts_dir}", file=sys.stderr)
    return result


def finish(command: str, args: argparse.Namespace, result: api.RunResult, render: Callable[[api.RunResult], None],
           *, drift: bool = False) -> int:
    """Print the result (JSON or tables) and return the exit code: 1 failure, 2 drift (when ``drift``), else 0."""
    if args.json:
        _write(json.dumps(result.to_dict(), indent=2, default=str) + "\n")
    else:
        render(result)
    code = EXIT_OK
    if drift:
        code = EXIT_DRIFT
    if result.unmatched:
        print(f"nodetune {command}: error: no host of the inventory matches {', '.join(result.unmatched)} "
              "(the others ran)", file=sys.stderr)
        code = EXIT_FAILURE
    if not result.ok:
        for line in result.errors:
            print(f"nodetune {command}: error: {line}", file=sys.stderr)
        bad = result.failed + result.unreachable
        if bad:
            print(f"nodetune {command}: {len(bad)} node(s) failed or unreachable: "
                  + ", ".join(n.host for n in bad), file=sys.stderr)
        code = EXIT_FAILURE
    return code


def _write(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `nodetune verify --json | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


# --------------------------------------------------------------------------------------------- progress
class _NodeBars:
    """One progress row per node: its tasks done of the tasks started so far, and what it is doing."""

    def __init__(self, progress: Any) -> None:
        self.progress = progress
        self.rows: dict[str, Any] = {}
        self.done: dict[str, int] = {}
        self.tasks_seen: set[str] = set()

    def __call__(self, event: api.TaskEvent) -> None:
        if event.host not in self.rows:
            self.rows[event.host] = self.progress.add_task(event.host, total=1, state="")
            self.done[event.host] = 0
        row = self.rows[event.host]
        self.tasks_seen.add(event.task)
        total = max(len(self.tasks_seen), 1)
        from rich.markup import escape

        if event.status == "started":
            self.progress.update(row, total=total, state=f"[dim]{escape(event.task)}[/dim]")
            return
        self.done[event.host] += 1
        style = {"failed": "red", "unreachable": "red", "changed": "yellow", "ok": "green"}.get(event.status, "dim")
        state = f"[{style}]{event.status}[/{style}] {escape(event.task)}"
        if event.status in ("failed", "unreachable") and not event.ignored:
            state = f"[red]{event.status}[/red]: {escape((event.message or '')[:120])}"
        self.progress.update(row, total=total, completed=self.done[event.host], state=state)


@contextmanager
def node_progress(enabled: bool = True) -> Iterator[api.ProgressCallback | None]:
    """Per-node progress bars on stderr while the playbook runs (only on a terminal)."""
    from rich.console import Console

    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

    progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(bar_width=24),
                        MofNCompleteColumn(), TextColumn("{task.fields[state]}"), console=console, transient=False)
    bars = _NodeBars(progress)
    with progress:
        yield bars
        for row in bars.rows.values():
            progress.update(row, completed=progress.tasks[row].total)


# --------------------------------------------------------------------------------------------- discover/plan -i
def run_fleet(command: str, args: argparse.Namespace) -> int:
    """``nodetune discover -i`` and ``nodetune plan -i``: the same views, per node of an inventory."""
    from nodetune.render import print_discover, print_plan

    if getattr(args, "root", "/") not in (None, "/"):
        return fail(command, "-i INVENTORY and --root DIR are alternatives: give one")
    if getattr(args, "policy", None):
        try:
            policy = load_mapping(args.policy, "policy")
        except CommandError as exc:
            return fail(command, str(exc))
        args.extra_vars = [*(getattr(args, "extra_vars", None) or []), json.dumps({"nodetune_layout_policy": policy})]
    call = api.discover if command == "discover" else api.plan
    outcome = run_command(command, args, call)
    if isinstance(outcome, int):
        return outcome
    return finish(command, args, outcome, print_discover if command == "discover" else print_plan)
