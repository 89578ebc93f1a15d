"""The node programs as rendered onto the node (node_programs/render.py, issue 39 item 1): each is its module with
parse.py and rules.py inlined whole, runs with nothing but the standard library, and follows verify's rules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils import interpreter, parse
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import (
    node_check,
    node_restore,
    render,
    rules,
)

PROGRAMS = (node_check, node_restore)
MODULES = (*render.INLINED, *PROGRAMS)
OURS = "ansible_collections.nodetune."


def dropped_by_ast(text: str) -> tuple[str, set[int]]:
    """What split_module must take out, as ast finds it: the docstring, and the line numbers of ``from __future__``
    and of imports of nodetune's modules."""
    tree = ast.parse(text)
    docstring = ast.get_docstring(tree, clean=False)
    assert docstring is not None
    lines = set()
    for node in tree.body:
        future_or_ours = isinstance(node, ast.ImportFrom) and (
            node.module == "__future__" or (node.module or "").startswith(OURS))
        if future_or_ours or isinstance(node, ast.Import) and any(a.name.startswith(OURS) for a in node.names):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return docstring, lines


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__.rpartition(".")[2])
def test_the_line_scan_takes_out_what_ast_finds(module) -> None:
    text = render.source(module)
    docstring, body = render.split_module(text)
    expected_doc, dropped = dropped_by_ast(text)
    assert ast.literal_eval(docstring) == expected_doc
    first_after_doc = ast.parse(text).body[1].lineno
    kept = [line for number, line in enumerate(text.splitlines(True), 1)
            if number >= first_after_doc and number not in dropped]
    assert body.lstrip("\n") == "".join(kept).lstrip("\n")


def test_a_program_imports_only_what_is_inlined() -> None:
    inlined = {module.__name__ for module in render.INLINED}
    for module in (*render.INLINED, *PROGRAMS):
        for node in ast.parse(render.source(module)).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(OURS):
                assert node.module in inlined, f"{module.__name__} imports {node.module}, which is not inlined"
            assert not (isinstance(node, ast.Import) and any(a.name.startswith(OURS) for a in node.names)), (
                f"{module.__name__}: 'import {OURS}...' leaves a module name the rendered file does not have")


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda m: m.__name__.rpartition(".")[2])
def test_no_name_is_defined_twice_differently(program) -> None:
    """One namespace in the rendered file: a name two modules define would be the later one's everywhere."""
    seen: dict[str, tuple[str, str]] = {}
    for module in (*render.INLINED, program):
        text = render.source(module)
        for node in ast.parse(text).body:
            names = []
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            for name in names:
                code = ast.get_source_segment(text, node) or ""
                if name in seen and seen[name][1] != code:
                    pytest.fail(f"{name} is defined in {seen[name][0]} and {module.__name__}")
                seen[name] = (module.__name__, code)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda m: m.__name__.rpartition(".")[2])
def test_the_rendered_program_runs_on_the_standard_library_alone(program, tmp_path: Path) -> None:
    text = render.program_text(program, interpreter.shebang())
    assert OURS not in text.replace("# Rendered by nodetune", "")
    assert text.startswith(interpreter.shebang() + '"""' + program.__doc__.split("\n", 1)[0])
    script = tmp_path / "program"
    script.write_text(text)
    # -I -S: no site-packages, no user site, no PYTHONPATH, not the current folder: only the standard library
    proc = subprocess.run([sys.executable, "-I", "-S", str(script), "--root", str(tmp_path / "nothing")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert "Traceback" not in proc.stderr or "FileNotFoundError" in proc.stderr, proc.stderr
    assert "ModuleNotFoundError" not in proc.stderr and "ImportError" not in proc.stderr, proc.stderr


def test_the_rendered_checker_says_its_help_from_its_own_docstring(tmp_path: Path) -> None:
    script = tmp_path / "nodetune-check"
    script.write_text(render.program_text(node_check, interpreter.shebang()))
    proc = subprocess.run([sys.executable, "-I", "-S", str(script), "--help"], capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout.startswith(node_check.USAGE) and node_check.__doc__ in proc.stdout


def test_what_the_two_comparisons_disagreed_on_is_compared_by_the_ascii_rules() -> None:
    """Before one source, nodetune-check took these as numbers and cpulists that verify does not (int() and its own
    cpulist reader take other scripts' digits and underscores, skip empty items)."""
    assert rules.normalize("int", "٣") == "٣" and rules.normalize("int", "4_092") == "4_092"
    assert rules.normalize("cpulist", "٣") == "٣" and rules.normalize("cpulist", "0-3,,8") == "0-3,,8"
    assert rules.normalize("choice", "[a] [b]") == "b" and rules.normalize("choice", "[mq-deadline] none") == \
        "mq-deadline"
    assert rules.normalize("cpulist", "0,1,2,3 ") == rules.normalize("cpulist", "0-3") == "0,1,2,3"
    with pytest.raises(parse.ParseError):
        parse.parse_cpulist("0-3,,8")
