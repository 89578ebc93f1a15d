"""``nodetune discover --root DIR --json`` without argparse and json: the same arguments, the same bytes out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover

from nodetune.cli import _plain_discover, build_parser, main
from nodetune.commands.discover import encode_json

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "collection"


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


# ------------------------------------------------------------------------------------------- arguments
@pytest.mark.parametrize("words", [
    ["discover"],
    ["discover", "--json"],
    ["discover", "--root", "/tmp/node", "--json"],
    ["discover", "--json", "--root", "/tmp/node"],
    ["discover", "--root=/tmp/node"],
    ["discover", "--root=-odd", "--json"],
    ["discover", "--root", "a", "--root", "b", "--json", "--json"],
])
def test_plain_forms_read_as_argparse_reads_them(words: list[str]) -> None:
    plain = _plain_discover(words)
    assert plain is not None
    parsed = build_parser("discover").parse_args(words)
    assert (plain.root, plain.json, plain.inventory, plain.limit) == (
        parsed.root, parsed.json, parsed.inventory, parsed.limit)


@pytest.mark.parametrize("words", [
    [],
    ["plan", "--root", "/"],
    ["discover", "-h"],
    ["discover", "--js"],  # an abbreviation: argparse accepts it, the hand parser leaves it to argparse
    ["discover", "--root"],
    ["discover", "--root", "--json"],
    ["discover", "--root", ""],
    ["discover", "--root="],
    ["discover", "-i", "inventories/lab"],
    ["discover", "--json=yes"],
    ["discover", "--", "x"],
    ["discover", "extra"],
])
def test_everything_else_goes_to_argparse(words: list[str]) -> None:
    assert _plain_discover(words) is None


def test_usage_errors_still_come_from_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["discover", "--root", "--json"]) == 1
    assert "--root: expected one argument" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- JSON
AWKWARD = {
    "text": ["plain", "é ü 中文 \U0001f600", "quote \" backslash \\ slash /", "\x00\x01\x1f\x7f\n\t\r",
             "\u2028\u2029", ""],
    "numbers": [0, -1, 2 ** 70, 1.5, -0.0, 1e300, 3.141592653589793],
    "flags": [True, False, None],
    "nested": {"a": [{"b": []}, {}], "": {"x": [[]]}},
    7: "int key",
}


@pytest.mark.parametrize("value", [AWKWARD, [], {}, "é\n", 12, None, [1.0, {"k": float("inf")}]])
def test_encoding_is_json_dumps(value: object) -> None:
    assert encode_json(value) == compact(value)


def test_encoding_without_the_accelerator_is_json_dumps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "_json", None)  # `from _json import ...` now raises ImportError
    assert encode_json(AWKWARD) == compact(AWKWARD)


def test_unserialisable_values_fail_as_json_dumps_does() -> None:
    with pytest.raises(TypeError, match="Object of type set is not JSON serializable"):
        encode_json({"x": {1}})


def test_topologies_encode_as_json_dumps(saved_topology: Callable[[Any], dict[str, Any]]) -> None:
    topologies = [saved_topology(str(REPO / "inventories/lab/specs/mi300x.yml"))]  # about encoding: saved
    from tests import realdata

    if realdata.real_available():
        topologies += [discover(str(realdata.capture_root(name))) for name in ("hwloc-e5", "nri-desktop")]
    for topology in topologies:
        assert encode_json(topology) == compact(topology)


# ------------------------------------------------------------------------------------------- whole process
def test_plain_path_prints_the_topology_and_imports_no_parser(shared_tree: Callable[[Any], Path]) -> None:
    node = shared_tree(str(REPO / "inventories/lab/specs/mi250.yml"))  # read only
    code = ("import sys, io, contextlib; from nodetune.cli import main\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out): rc = main(sys.argv[1:])\n"
            "loaded = sorted(m for m in ('argparse', 'json', 're', 'shutil', 'rich') if m in sys.modules)\n"
            "sys.stderr.write(repr((rc, loaded)))\n"
            "sys.stdout.write(out.getvalue())")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(COLLECTION)]))
    result = subprocess.run([sys.executable, "-c", code, "discover", "--root", str(node), "--json"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.stderr == "(0, [])"
    assert result.stdout == compact(discover(str(node))) + "\n"


def _modules_imported_by(argv: list[str]) -> set[str]:
    """The modules a fresh process imports (``-X importtime``), and checks it ran (exit 1: a missing root)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(COLLECTION)]))
    result = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "nodetune discover: error:" in result.stderr
    return {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}


def test_the_nodetune_script_imports_no_regular_expressions(tmp_path: Path) -> None:
    """pip's wrapper for a [project.scripts] entry point imports ``re`` (and enum, functools, collections) before
    the CLI; the project's own script (bin/nodetune, pyproject's script-files) does not."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "nodetune" not in config["project"].get("scripts", {})
    assert config["tool"]["setuptools"]["script-files"] == ["bin/nodetune"]
    argv = ["discover", "--root", str(tmp_path / "missing"), "--json"]
    scripts = [REPO / "bin" / "nodetune"]
    installed = Path(sys.executable).parent / "nodetune"
    if installed.exists():  # what `pip install` put on PATH, when it is this checkout's (pip install -e .)
        scripts.append(installed)
    for script in scripts:
        imported = _modules_imported_by([str(script), *argv])
        assert "nodetune.cli" in imported
        assert not imported & {"re", "enum", "functools", "argparse", "json"}, (script, sorted(imported))
