"""How the tests are laid out: shared helpers live in tests/support/, and no file imports another test file.

A test file that imports from another one runs that file's module code (and its fixtures' imports) in every
importer, ties the importer to a file it does not test, and hides the helper where nobody looks for it.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Every Python file that may import test helpers: the tests themselves, their support modules and the benchmarks.
SCANNED = ("tests", "bench")


def is_test_module(dotted: str) -> bool:
    """Whether a dotted module name is a test file (tests/.../test_*.py)."""
    parts = dotted.split(".")
    return parts[0] == "tests" and parts[-1].startswith("test_")


def imported_modules(node: ast.AST) -> list[str]:
    """The dotted modules an import statement brings in: ``from tests.unit import test_x`` names tests.unit.test_x."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        return [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return []


def imports_of_test_files(path: Path) -> list[str]:
    """'file:line imports module' for each import of a test file anywhere in ``path`` (functions included)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    rel = path.relative_to(REPO).as_posix()
    return [f"{rel}:{node.lineno} imports {module}" for node in ast.walk(tree)
            for module in imported_modules(node) if is_test_module(module)]


def test_no_file_imports_from_a_test_file() -> None:
    found = [line for top in SCANNED for path in sorted((REPO / top).rglob("*.py"))
             for line in imports_of_test_files(path)]
    assert found == [], "move the helper into tests/support/ and import it from there:\n" + "\n".join(found)


def test_the_check_names_both_import_forms() -> None:
    text = "import tests.unit.test_a\nfrom tests.unit.test_b import helper\nfrom tests.unit import test_c, topogen\n"
    found = [module for node in ast.walk(ast.parse(text)) for module in imported_modules(node)
             if is_test_module(module)]
    assert found == ["tests.unit.test_a", "tests.unit.test_b", "tests.unit.test_c"]


def test_every_test_file_is_in_its_groups_folder() -> None:
    """The folder is the group (tests/conftest.py): every test file sits in one of the groups' folders, and a file of
    tests/core names none of the node markers (a simulated tree, the simulated kernel, real captures)."""
    from tests.conftest import GROUPS, NODE_MARKS, group_of

    tests = REPO / "tests"
    strays = [path.relative_to(REPO).as_posix() for path in sorted(tests.rglob("test_*.py"))
              if "support" not in path.relative_to(tests).parts and group_of(path.relative_to(REPO).as_posix()) is None]
    assert strays == [], f"test files outside the groups' folders ({', '.join(GROUPS)}): {strays}"
    in_core = [f"{path.name} names {mark}" for path in sorted((tests / "core").glob("test_*.py"))
               for mark in NODE_MARKS if mark in path.read_text(encoding="utf-8")
               and path.name != "test_test_layout.py"]
    assert in_core == [], f"tests/core works on data alone; move these to tests/node: {in_core}"


def test_the_benchmarks_import_each_other_in_one_direction() -> None:
    """bench/*.py import each other by their bare names (run.py puts bench/ on sys.path): no cycle, a lazy import
    inside a function included (fleet_cost.py once imported fleet_ssh.py, which imports it)."""
    bench = REPO / "bench"
    names = {path.stem for path in bench.glob("*.py")}
    edges = {path.stem: {module for node in ast.walk(ast.parse(path.read_text())) for module in imported_modules(node)
                         if module in names} for path in bench.glob("*.py")}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})) for nxt in edges[start])

    cycles = sorted(name for name in names if reaches(name, name, {name}))
    assert cycles == [], f"benchmark modules in an import cycle: {cycles}"
