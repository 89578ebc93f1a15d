"""The #! line of the scripts apply renders (nodetune-check, nodetune-bind): the interpreter the module runs under,
as Ansible's interpreter discovery chose it, not ``/usr/bin/env python3`` (Python 3.6 on RHEL 8)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils import (
    engine,
    interpreter,
    inventory,
    node,
    node_check,
    rank_bind,
)
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.unit.test_verify_module import AREAS, SPEC

pytestmark = pytest.mark.usefixtures("simulated_kernel")  # applies to simulated nodes in-process


def python(version: str) -> str | None:
    """A real Python <version> (pyenv's or on PATH; the pyenv shim is not a Python)."""
    found = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")))
    return found[-1] if found else shutil.which(f"python{version}")


def test_the_running_interpreter_is_named() -> None:
    assert interpreter.shebang() == f"#!{sys.executable}\n"
    assert interpreter.shebang(sys.executable) == f"#!{sys.executable}\n"


@pytest.mark.parametrize("executable", [
    "", "python3", "bin/python3", "/nonexistent/bin/python3", "/opt/my python/bin/python3", "/" + "p" * 130,
], ids=["empty", "bare name", "relative", "missing", "whitespace", "too long"])
def test_a_path_a_shebang_cannot_carry_falls_back_to_env(executable: str) -> None:
    assert interpreter.shebang(executable) == "#!/usr/bin/env python3\n"


def test_a_file_that_is_not_executable_falls_back_to_env(tmp_path: Path) -> None:
    plain = tmp_path / "python3"
    plain.write_text("")
    plain.chmod(0o644)
    assert interpreter.shebang(str(plain)) == "#!/usr/bin/env python3\n"
    plain.chmod(0o755)
    assert interpreter.shebang(str(plain)) == f"#!{plain}\n"


def apply(root: Path) -> dict:
    state = node.load(str(root), AREAS, {})
    return engine.apply(state.root, state.settings, services=state.services)


def test_a_changed_interpreter_is_one_change_then_idempotent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ansible's interpreter discovery picks another Python (say after an OS upgrade): the next apply rewrites the
    scripts once, naming it, and then changes nothing."""
    other = python("3.9") or python("3.8")
    if other is None:
        pytest.skip("no second Python here (~/.pyenv/versions/3.8.* or 3.9.*, or python3.9/python3.8 on PATH)")
    root = tmp_path / "node"
    simnode.build(SPEC, str(root))
    assert apply(root)["changed"]
    assert apply(root)["changed"] is False
    monkeypatch.setattr(sys, "executable", other)
    changed = apply(root)
    # each script once, and the checker's expectation of the launcher (its content hash)
    assert sorted((a["id"], a["target"]) for a in changed["actions"]) == [
        ("check.expected", "rocm_env"), ("check.program", "nodetune-check"), ("rocm.bind", "launcher")]
    assert (root / inventory.CHECK_SCRIPT).read_text().startswith(f"#!{other}\n")
    assert (root / "usr/local/bin/nodetune-bind").read_text().startswith(f"#!{other}\n")
    assert apply(root)["changed"] is False


@pytest.mark.parametrize("version", ["3.8", "3.9"])
def test_the_rendered_scripts_run_on_an_older_node_python(tmp_path: Path, version: str) -> None:
    """Run as the scheduler runs them (their own #! line, nothing on sys.path but the standard library): the
    checker on a simulated node, the launcher with --dry-run. No syntax newer than the node's Python."""
    older = python(version)
    if older is None:
        pytest.skip(f"no Python {version} here (~/.pyenv/versions/{version}.* or python{version} on PATH)")
    root = tmp_path / "node"
    simnode.build(SPEC, str(root))
    assert apply(root)["changed"]  # the expectations in check.d, for a checker run that has work to do
    checker = tmp_path / "nodetune-check"
    checker.write_text(node_check.script_text(interpreter.shebang(older)))
    table = tmp_path / "ranks.json"
    table.write_text(rank_bind.table_text([{"rank": 0, "gpu": "0000:05:00.0", "numa_node": 0, "cpus": [0],
                                            "env": {"OMP_NUM_THREADS": "1"}}]))
    launcher = tmp_path / "nodetune-bind"
    launcher.write_text(rank_bind.script_text(str(table), interpreter.shebang(older)))
    for script in (checker, launcher):
        script.chmod(0o755)
    env = {"PATH": os.defpath, "LOCAL_RANK": "0", "PYTHONNOUSERSITE": "1"}
    checked = subprocess.run([str(checker), "--root", str(root)], capture_output=True, text=True, env=env,
                             cwd="/", timeout=120, check=False)
    assert (checked.returncode, checked.stdout, checked.stderr) == (0, "", "")  # clean: the node was just tuned
    (root / "proc/sys/vm/dirty_ratio").write_text("40\n")
    drifted = subprocess.run([str(checker), "--root", str(root)], capture_output=True, text=True, env=env,
                             cwd="/", timeout=120, check=False)
    assert drifted.returncode == 1 and drifted.stdout.startswith("sysctl.vm.dirty_ratio"), drifted.stderr
    bound = subprocess.run([str(launcher), "--dry-run", "--", "true"], capture_output=True, text=True, env=env,
                           cwd="/", timeout=120, check=False)
    assert bound.returncode == 0 and "Traceback" not in bound.stderr, bound.stderr
    version_seen = subprocess.run([older, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                  capture_output=True, text=True, check=True).stdout.strip()
    assert version_seen == version
