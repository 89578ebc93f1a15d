"""The #! line of the scripts apply renders (nodetune-check, nodetune-bind, nodetune-restore): the node's system
Python under its root, never the interpreter nodetune runs under (the controller's virtualenv with the CLI on a local
root, a root-only path over Ansible), and not ``/usr/bin/env python3`` where a system Python is there."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils import interpreter
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine, node
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import checker_files, rank_bind
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import persist as area_persist
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_check, render
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.support.lab_vars import AREAS
from tests.support.specs import AUDIT_SPEC as SPEC

pytestmark = pytest.mark.usefixtures("simulated_kernel")  # applies to simulated nodes in-process


def python(version: str) -> str | None:
    """A real Python <version> (pyenv's or on PATH; the pyenv shim is not a Python)."""
    found = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")))
    return found[-1] if found else shutil.which(f"python{version}")


def install(root: Path, path: str, target: str | None = None, mode: int = 0o755) -> None:
    """A Python at ``path`` under ``root``: a file, or a link to ``target`` (created as a file)."""
    where = root / path.lstrip("/")
    where.parent.mkdir(parents=True, exist_ok=True)
    if target is None:
        where.write_text("")
        where.chmod(mode)
        return
    install(root, target if target.startswith("/") else os.path.join(os.path.dirname(path), target), mode=mode)
    where.symlink_to(target)


def test_the_controller_virtualenv_is_never_named() -> None:
    """The CLI with --root / runs apply in the controller's virtualenv (these tests too): its python used to be
    every script's #! line, which no other user of the node may have."""
    assert sys.prefix != sys.base_prefix, "the tests run in the project's virtualenv"
    if not os.path.isfile("/usr/bin/python3"):
        pytest.skip("no /usr/bin/python3 on this machine")
    assert interpreter.shebang() == "#!/usr/bin/python3\n"


def test_the_node_system_python_under_its_root(tmp_path: Path) -> None:
    root = Root(str(tmp_path))
    assert interpreter.shebang(root=root) == "#!/usr/bin/env python3\n"  # none there
    install(tmp_path, "/usr/bin/python3", "python3.12")
    assert interpreter.shebang(root=root) == "#!/usr/bin/python3\n"


def test_rhel8_python36_is_passed_over(tmp_path: Path) -> None:
    """RHEL 8: python3 and platform-python are 3.6 (absolute links, resolved inside the root), too old for the
    scripts; the newest python3.N is named."""
    install(tmp_path, "/usr/bin/python3", "/etc/alternatives/python3")
    (tmp_path / "etc/alternatives/python3").unlink()
    install(tmp_path, "/etc/alternatives/python3", "/usr/bin/python3.6")
    install(tmp_path, "/usr/libexec/platform-python", "/usr/libexec/platform-python3.6")
    for name in ("python3.6", "python3.9", "python3.11"):
        install(tmp_path, "/usr/bin/" + name)
    assert interpreter.shebang(root=Root(str(tmp_path))) == "#!/usr/bin/python3.11\n"


def test_a_python_users_cannot_run_or_a_virtualenv_is_passed_over(tmp_path: Path) -> None:
    install(tmp_path, "/usr/bin/python3", mode=0o750)  # root-only
    install(tmp_path, "/usr/libexec/platform-python")
    (tmp_path / "usr/libexec/pyvenv.cfg").write_text("home = /usr/bin\n")
    install(tmp_path, "/usr/bin/python3.10")
    assert interpreter.shebang(root=Root(str(tmp_path))) == "#!/usr/bin/python3.10\n"


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


def test_a_new_system_python_is_one_change_then_idempotent(tmp_path: Path) -> None:
    """The node gains a system Python (an OS upgrade): the next apply rewrites each script once, naming it, and
    then changes nothing. Which Python runs nodetune (here this virtualenv's) does not matter."""
    root = tmp_path / "node"
    simnode.build(SPEC, str(root))
    assert apply(root)["changed"]
    assert apply(root)["changed"] is False
    assert (root / checker_files.CHECK_SCRIPT).read_text().startswith("#!/usr/bin/env python3\n")
    install(root, "/usr/bin/python3", "python3.12")
    changed = apply(root)
    # each script once, and the checker's expectations of the launcher and the restore program (content hashes)
    assert sorted((a["id"], a["target"]) for a in changed["actions"]) == [
        ("check.expected", "persist"), ("check.expected", "rocm_env"), ("check.program", "nodetune-check"),
        ("persist.boot_restore", "script"), ("rocm.bind", "launcher")]
    for script in (checker_files.CHECK_SCRIPT, "usr/local/bin/nodetune-bind", area_persist.SCRIPT_FILE):
        assert (root / script).read_text().startswith("#!/usr/bin/python3\n"), script
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
    checker.write_text(render.program_text(node_check, interpreter.shebang(older)))
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
