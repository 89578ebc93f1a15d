"""The modules on the oldest node Python the collection claims (3.9): build, tune (check mode, then for real) and
verify one small simulated node whose ``ansible_python_interpreter`` is a Python 3.9.

The interpreter is a wrapper that logs each call and then runs the real Python 3.9, so the test proves the modules
ran there (a host variable that Ansible ignored would leave the log empty). Skipped, saying why, where no Python 3.9
is present (``python3.9`` on PATH or pyenv's versions folder; ``NODETUNE_NODE_PYTHON39`` names one explicitly).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.playbooks import ok, playbook, recap, write_inventory
from tests.support.specs import small_mi250_spec as small_spec
from tests.support.trees import changed_paths, tree_digest

pytestmark = pytest.mark.slow

NODE_VERSION = "3.9"


def runs_as(python: str, version: str) -> bool:
    try:
        out = subprocess.run([python, "-c", "import sys; print('{0}.{1}'.format(*sys.version_info))"],
                             capture_output=True, text=True, timeout=30, check=False).stdout.strip()
    except OSError:
        return False
    return out == version


def patch_level(interpreter: Path) -> int:
    """3.9.18 for <pyenv>/versions/3.9.18/bin/python3.9 -> 18 (-1 for a name such as 3.9-dev)."""
    last = interpreter.parent.parent.name.rsplit(".", 1)[-1]
    return int(last) if last.isdigit() else -1


def find_python(version: str) -> str | None:
    """A Python <version> that runs: NODETUNE_NODE_PYTHON39, python3.9 on PATH, then pyenv's newest 3.9.x."""
    name = f"python{version}"
    candidates = [os.environ.get("NODETUNE_NODE_PYTHON39", ""), shutil.which(name) or ""]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates += [str(p) for p in sorted(pyenv.glob(f"{version}.*/bin/{name}"), key=patch_level, reverse=True)]
    return next((c for c in candidates if c and runs_as(c, version)), None)


@pytest.fixture(scope="module")
def python39() -> str:
    python = find_python(NODE_VERSION)
    if python is None:
        pytest.skip("no Python 3.9 here (python3.9 on PATH, ~/.pyenv/versions/3.9.*, NODETUNE_NODE_PYTHON39): "
                    "the modules' 3.9 run needs one")
    return python


def logging_wrapper(folder: Path, python: str) -> tuple[Path, Path]:
    log = folder / "interpreter.log"
    wrapper = folder / "python3.9"
    wrapper.write_text(f'#!/bin/sh\necho "$$ $*" >> "{log}"\nexec "{python}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, log


def test_tune_and_verify_modules_run_on_python39(tmp_path: Path, python39: str) -> None:
    wrapper, log = logging_wrapper(tmp_path, python39)
    spec_file = tmp_path / "small.yml"
    spec_file.write_text(yaml.safe_dump(small_spec()))
    node = tmp_path / "nodes" / "node1"
    inventory = write_inventory(tmp_path, {"node1": {"nodetune_sim_spec": str(spec_file), "nodetune_root": str(node),
                                                     "ansible_python_interpreter": str(wrapper)}})

    ok(playbook(inventory, "playbooks/lab.yml"))
    assert log.is_file() and log.read_text().strip(), "the sim_node module did not run through the 3.9 interpreter"
    pristine = tree_digest(node)

    check = ok(playbook(inventory, "playbooks/apply.yml", "--check", "--diff"))
    assert recap(check, "node1")["changed"] >= 1
    assert tree_digest(node) == pristine, "check mode wrote to the node"

    ok(playbook(inventory, "playbooks/apply.yml"))
    assert changed_paths(pristine, tree_digest(node)), "the apply changed nothing"
    assert (node / "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor").read_text().strip() == "performance"
    tuned = tree_digest(node)
    again = ok(playbook(inventory, "playbooks/apply.yml"))
    assert recap(again, "node1")["changed"] == 0
    assert tree_digest(node) == tuned

    (node / "proc/sys/kernel/numa_balancing").write_text("1\n")
    ok(playbook(inventory, "playbooks/verify.yml"))
    findings = json.loads((tmp_path / "reports" / "nodes" / "node1.json").read_text())["findings"]
    assert [f["id"] for f in findings if f["status"] == "drift" and f["source"] == "setting"] == \
        ["sysctl.kernel.numa_balancing"]

    calls = log.read_text().splitlines()
    # lab, check, apply, apply again, verify: at least one module call each, all through the 3.9 wrapper
    assert len(calls) >= 5, calls
