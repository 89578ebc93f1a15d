"""The import graph of the collection's module_utils and of src/nodetune (issue 29 item 2): no cycle, module_utils on
the standard library alone, and the stages of module_utils in one direction.

Every import statement counts, at module level and inside functions (a lazy import still closes a cycle: it only
moves the failure to the first call), read with ``ast`` from the files, so nothing is imported to build the graph.
A package's own ``__init__`` that Python runs before each of its modules is not an edge: it is not written anywhere.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULE_UTILS = REPO / "collection/ansible_collections/nodetune/instinct/plugins/module_utils"
PACKAGE = "ansible_collections.nodetune.instinct.plugins.module_utils"
SRC = REPO / "src"

# Which stage of module_utils may import which: each one the stages before it and itself. A module's stage is its
# folder (foundations: the modules at the top of module_utils, and node_programs/: the programs nodetune renders onto
# the node and the rules they share with verify, stdlib only). The order is the data's: discover reads the node into
# a Topology; plan/ holds what a plan is made of (Setting, Finding, the journal, the layout, how each kind of Setting
# is read: services, boot loader, sysctl.d); areas/ build the Settings (tuning.py runs every builder); apply/ loads
# a node's state (node.py) and writes it; audit/ reports on it. No exceptions and no module filed elsewhere.
STAGES = ("foundations", "discover", "plan", "areas", "apply", "audit")
FOUNDATIONS, DISCOVER, PLAN, AREAS, APPLY, AUDIT = STAGES
MAY_IMPORT = {stage: set(STAGES[:index + 1]) for index, stage in enumerate(STAGES)}
STAGE_OF_FOLDER = {"": FOUNDATIONS, "node_programs": FOUNDATIONS, "discover": DISCOVER, "plan": PLAN, "areas": AREAS,
                   "apply": APPLY, "audit": AUDIT}
# The one import of module_utils outside the standard library, optional: waivers_file in YAML where PyYAML is there
OPTIONAL_THIRD_PARTY = {("audit.audit", "yaml")}


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    imported: str  # dotted module name: one of ours, else what the statement names
    path: Path
    line: int

    def where(self) -> str:
        return f"{self.path.relative_to(REPO).as_posix()}:{self.line}"


@functools.cache
def module_files() -> dict[str, Path]:
    """Every module of module_utils and of src/nodetune by its dotted name."""
    out = {}
    for base, prefix in ((MODULE_UTILS, PACKAGE), (SRC / "nodetune", "nodetune")):
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([prefix, *parts])] = path
    return out


def statement_targets(node: ast.AST, package: str, known: dict[str, Path]) -> Iterator[str]:
    """The modules one import statement imports: ``from pkg import mod`` names pkg.mod, ``from mod import name``
    names mod; a relative import is resolved against ``package``."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = package.split(".")[:len(package.split(".")) - node.level + 1]
            base = ".".join(parts + ([base] if base else []))
        for alias in node.names:
            yield base + "." + alias.name if base + "." + alias.name in known else base


def dynamic_imports(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """cli.py imports each command by name (importlib, build_parser): the modules its COMMANDS name."""
    if name != "nodetune.cli":
        return
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "COMMANDS" for t in node.targets):
            yield from (("nodetune.commands." + command, node.lineno) for command in ast.literal_eval(node.value))


@functools.cache
def all_imports() -> tuple[Import, ...]:
    """Every import statement of our modules, read once for all the tests."""
    known = module_files()
    out: list[Import] = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            out.extend(Import(name, target, path, node.lineno) for target in statement_targets(node, package, known))
        out.extend(Import(name, target, path, line) for target, line in dynamic_imports(name, path))
    return tuple(out)


def short(name: str) -> str:
    return name[len(PACKAGE) + 1:] if name.startswith(PACKAGE + ".") else name


def graph(imports: Iterable[Import]) -> dict[str, dict[str, Import]]:
    """importer -> {imported: the first statement}: the edges between our own modules."""
    known = module_files()
    edges: dict[str, dict[str, Import]] = {name: {} for name in known}
    for item in imports:
        if item.imported in known and item.imported != item.importer:
            edges[item.importer].setdefault(item.imported, item)
    return edges


def shortest_path(edges: dict[str, dict[str, Import]], start: str, goal: str) -> list[str] | None:
    paths = {start: [start]}
    queue = [start]
    for node in queue:
        for nxt in edges[node]:
            if nxt not in paths:
                paths[nxt] = paths[node] + [nxt]
                if nxt == goal:
                    return paths[nxt]
                queue.append(nxt)
    return None


def cycles(edges: dict[str, dict[str, Import]]) -> list[list[str]]:
    """The shortest cycle through each edge that is on one, each once (whatever module it is read from)."""
    found: dict[tuple[str, ...], list[str]] = {}
    for importer, targets in edges.items():
        for imported in targets:
            back = shortest_path(edges, imported, importer)
            if back is None:
                continue
            loop = [importer, *back]  # importer -> imported -> ... -> importer
            first = loop.index(min(loop[:-1]))
            found.setdefault(tuple(loop[first:-1] + loop[:first]), loop)
    return sorted(found.values(), key=lambda loop: (len(loop), loop))


def describe_cycle(edges: dict[str, dict[str, Import]], loop: list[str]) -> str:
    steps = [short(loop[0])] + [f"-> {short(b)} ({edges[a][b].where()})" for a, b in zip(loop, loop[1:], strict=False)]
    return " ".join(steps)


def stage(name: str) -> str | None:
    """The stage of a module of module_utils (None for src/nodetune's)."""
    if not name.startswith(PACKAGE):
        return None
    parts = short(name).split(".") if name != PACKAGE else []
    folder = parts[0] if len(parts) > 1 or (parts and parts[0] in STAGE_OF_FOLDER) else ""
    return STAGE_OF_FOLDER[folder]


def direction_breaks(imports: Iterable[Import]) -> list[str]:
    out = []
    for item in imports:
        mine, theirs = stage(item.importer), stage(item.imported)
        if mine is None or theirs is None or theirs in MAY_IMPORT[mine]:
            continue
        allowed = ", ".join(sorted(MAY_IMPORT[mine]))
        out.append(f"{item.where()} imports {short(item.imported)}: {short(item.importer)} ({mine}) may import "
                   f"{allowed}, not {theirs}")
    return out


def outside_imports(imports: Iterable[Import]) -> list[str]:
    """Imports of module_utils that are neither the standard library nor module_utils itself."""
    known = module_files()
    out = []
    for item in imports:
        if not item.importer.startswith(PACKAGE):
            continue
        top = item.imported.split(".")[0]
        if item.imported in known or top in sys.stdlib_module_names or top == "__future__":
            continue
        if (short(item.importer), item.imported) in OPTIONAL_THIRD_PARTY:
            continue
        out.append(f"{item.where()} imports {item.imported}")
    return out


# ------------------------------------------------------------------------------------------------ the rules
def test_no_import_cycle() -> None:
    edges = graph(all_imports())
    found = [describe_cycle(edges, loop) for loop in cycles(edges)]
    assert found == [], "import cycles (break each, not with a lazy import):\n" + "\n".join(found)


def test_module_utils_imports_only_the_standard_library_and_itself() -> None:
    found = outside_imports(all_imports())
    assert found == [], "module_utils is sent to the nodes and runs there on the standard library:\n" + "\n".join(found)


def test_the_stages_import_in_one_direction() -> None:
    found = direction_breaks(all_imports())
    assert found == [], "imports against the stages' direction (MAY_IMPORT):\n" + "\n".join(found)


def test_every_exception_and_stage_of_a_module_is_still_needed() -> None:
    """An optional import that no module makes any more leaves the table: it must stay short."""
    imported = set(short(item.imported) for item in all_imports() if item.importer.startswith(PACKAGE))
    assert sorted(name for _module, name in OPTIONAL_THIRD_PARTY if name not in imported) == []


# ------------------------------------------------------------------------------------------------ the checks work
def test_the_checks_name_a_cycle_a_lazy_import_closes_and_a_wrong_direction(tmp_path: Path) -> None:
    first = Import(PACKAGE + ".audit.waivers", PACKAGE + ".audit.check_ids", MODULE_UTILS / "audit/waivers.py", 69)
    second = Import(PACKAGE + ".audit.check_ids", PACKAGE + ".audit.waivers", MODULE_UTILS / "audit/check_ids.py", 3)
    edges = graph([first, second])
    assert [describe_cycle(edges, loop) for loop in cycles(edges)] == [
        f"audit.check_ids -> audit.waivers ({second.where()}) -> audit.check_ids ({first.where()})"]
    upward = Import(PACKAGE + ".discover.cpu", PACKAGE + ".plan.layout", MODULE_UTILS / "discover/cpu.py", 5)
    assert direction_breaks([upward]) == [
        f"{upward.where()} imports plan.layout: discover.cpu (discover) may import discover, foundations, not plan"]
    outside = Import(PACKAGE + ".parse", "yaml", MODULE_UTILS / "parse.py", 7)
    assert outside_imports([outside]) == [f"{outside.where()} imports yaml"]


def test_an_import_inside_a_function_is_an_edge() -> None:
    """render.compress_targets imports finding.py when called: the graph has that edge all the same."""
    render = SRC / "nodetune/render.py"
    inner = next(node for node in ast.walk(ast.parse(render.read_text())) if getattr(node, "name", "") ==
                 "compress_targets")
    line = next(node.lineno for node in ast.walk(inner) if isinstance(node, ast.ImportFrom))
    assert graph(all_imports())["nodetune.render"][PACKAGE + ".plan.finding"].line == line


# ------------------------------------------------------------------------------------------------ the cut's data
def test_the_ids_check_ids_reads_as_data_are_the_checks_own() -> None:
    """check_ids.py imports no check (they import finding.py, which imports it): the ids it reads from the
    declarations are those the checks run, and the checker's files name the variable audit/inventory.py validates."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.areas import checker_files
    from ansible_collections.nodetune.instinct.plugins.module_utils.audit import (
        bios,
        check_ids,
        health,
        inventory,
    )
    from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_check

    assert check_ids.BIOS_CHECKS == bios.CHECKS
    assert check_ids.HEALTH_CHECKS == health.CHECKS
    assert inventory.KEYS is node_check.INVENTORY_KEYS
    assert checker_files.VARIABLE == inventory.VARIABLE
    assert {"bios.iommu", "health.gpu_power_cap", "inventory.gpu_count"} <= set(check_ids.known_ids())
