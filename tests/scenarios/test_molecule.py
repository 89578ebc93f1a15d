"""The Molecule scenarios (molecule/*/molecule.yml), one pytest test each: `molecule test -s NAME`.

Each scenario builds small simulated nodes (directory trees, never this machine) and runs its whole test sequence;
see molecule/<name>/molecule.yml for what it proves. Running them from pytest puts them in the same report as the
rest of the suite, with each scenario's duration recorded (the testcase time and a ``molecule_<scenario>_s``
testsuite property in the JUnit XML; printed with -s).

Molecule counts a step whose playbook is missing as "missing", not as a failure, so the test also requires every
step of the scenario's recap to have succeeded: a scenario whose verify playbook went missing cannot pass here.

    pytest tests/scenarios/test_molecule.py               # every scenario (minutes)
    pytest tests/scenarios/test_molecule.py -k drift      # one
    pytest -m "not slow"                                    # the suite without them
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))
TIMEOUT_S = 900  # one scenario takes about a minute on a 2-core machine; this only stops a hung run

pytestmark = pytest.mark.slow

ANSI = re.compile(r"\x1b\[[0-9;]*m")
RECAP = re.compile(r"^(?P<name>\S+)\s*: actions=(?P<actions>\d+)\s+successful=(?P<successful>\d+)\s+"
                   r"disabled=(?P<disabled>\d+)\s+skipped=(?P<skipped>\d+)\s+missing=(?P<missing>\d+)\s+"
                   r"failed=(?P<failed>\d+)", re.MULTILINE)


def molecule_env(ephemeral: Path) -> dict[str, str]:
    """The caller's environment with the venv's bin first on PATH (molecule shells out to ansible-playbook ...).

    The caller's MOLECULE_* variables are dropped (a MOLECULE_GLOB would make -s look elsewhere); the scenario's
    ephemeral directory, where its nodes, inventory and reports live, is the test's own ``ephemeral``: in the test's
    folder (in memory, tests/conftest.py), never shared with another run of the same scenario (Molecule's default,
    ~/.cache/molecule/tmp/molecule.<checksum of the folder's name>.<scenario>, is the same for every checkout of the
    same name). ANSIBLE_CONFIG is Molecule's own business.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOLECULE_") and k != "ANSIBLE_CONFIG"}
    env["MOLECULE_EPHEMERAL_DIRECTORY"] = str(ephemeral)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["NO_COLOR"] = "1"
    env["PY_COLORS"] = "0"
    env["ANSIBLE_FORCE_COLOR"] = "0"
    return env


def failure_excerpt(output: str, lines: int = 120) -> str:
    """The lines that say what failed (fatal/assert messages), then the end of the run."""
    text = output.splitlines()
    interesting = [line for line in text if re.search(r"fatal:|FAILED|failed:|ERROR|reported but|expected but", line)]
    return "\n".join(["--- failure lines ---", *interesting[:60], f"--- last {lines} lines ---", *text[-lines:]])


def test_molecule_scenarios_exist() -> None:
    assert {"default", "drift"} <= set(SCENARIOS), SCENARIOS


def test_the_default_scenario_reboots_the_converged_nodes() -> None:
    """The reboot is folded into default (issue 29): after its verify, the nodes reboot, verify clean again, and a
    converge changes nothing. bad_input runs as module calls in tests/ansible/test_bad_input.py."""
    config = yaml.safe_load((REPO / "molecule" / "default" / "molecule.yml").read_text())
    sequence = config["scenario"]["test_sequence"]
    assert sequence[sequence.index("converge"):] == ["converge", "idempotence", "verify", "side_effect", "verify",
                                                     "idempotence", "destroy"]
    side_effect = REPO / "molecule" / "default" / config["ansible"]["playbooks"]["side_effect"]
    tasks = yaml.safe_load(side_effect.read_text())[0]["tasks"]
    assert any(task.get("nodetune.lab.sim_node", {}).get("state") == "rebooted" for task in tasks)


@pytest.mark.parametrize("scenario", [
    # the default scenario (converge, idempotence, verify) runs on every CI line, the others on the first only
    pytest.param(name, marks=[pytest.mark.ansible] if name == "default" else []) for name in SCENARIOS])
def test_molecule_scenario(scenario: str, record_testsuite_property: Callable[[str, object], None],
                           record_property: Callable[[str, object], None], tmp_path: Path) -> None:
    start = time.monotonic()
    try:
        proc = subprocess.run(["molecule", "test", "-s", scenario], cwd=REPO, env=molecule_env(tmp_path / scenario),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode(errors="replace")
        pytest.fail(f"molecule test -s {scenario} ran over {TIMEOUT_S} s\n{failure_excerpt(ANSI.sub('', output))}")
    elapsed = time.monotonic() - start
    record_testsuite_property(f"molecule_{scenario}_s", round(elapsed, 1))
    record_property(f"molecule_{scenario}_s", round(elapsed, 1))  # what reaches the JUnit file under -n
    print(f"\nmolecule scenario {scenario}: {elapsed:.1f} s")
    output = ANSI.sub("", proc.stdout)
    assert proc.returncode == 0, (f"molecule test -s {scenario} failed (exit {proc.returncode}) after "
                                  f"{elapsed:.0f} s\n{failure_excerpt(output)}")
    recaps = [m for m in RECAP.finditer(output) if m.group("name") == scenario]
    assert recaps, f"no scenario recap for {scenario} in molecule's output\n{failure_excerpt(output)}"
    recap = {k: int(v) for k, v in recaps[-1].groupdict().items() if k != "name"}
    assert recap["actions"] > 0 and recap["successful"] == recap["actions"], (
        f"molecule test -s {scenario}: not every step succeeded: {recap}\n{failure_excerpt(output)}")
