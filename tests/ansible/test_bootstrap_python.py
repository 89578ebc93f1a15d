"""Which Python scripts/bootstrap.sh and scripts/test.sh build the venv from (scripts/lib/setup.sh).

Each case runs ``nt_find_python`` in bash with a PATH of fake interpreters (shell scripts that answer the probe
with a version), a fake pyenv folder, and fake apt tools that log their calls: nothing real is probed or installed.
The rules: newest supported version present first (on PATH or in pyenv's versions), a pyenv shim that does not
run is skipped, apt is called only when nothing supported is present, NODETUNE_PYTHON overrides, and a failure is
one clear line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SETUP = REPO / "scripts" / "lib" / "setup.sh"
# The only outside commands the selection may use; everything else (real pythons included) stays off PATH.
TOOLS = ("dirname", "sort", "cat", "mkdir", "ln", "rm", "readlink", "grep", "chmod")


class Machine:
    """A fake machine: bin/ (PATH), home/.pyenv/versions, an apt log."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()
        self.home = root / "home"
        self.home.mkdir()
        self.apt_log = root / "apt.log"
        for tool in TOOLS:
            os.symlink(shutil.which(tool), self.bin / tool)
        self.script("id", 'echo 0')  # root: no sudo needed

    def script(self, name: str, body: str, folder: Path | None = None) -> Path:
        path = (folder or self.bin) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/bin/bash\n{body}\n")
        path.chmod(0o755)
        return path

    def python(self, name: str, version: str, folder: Path | None = None) -> Path:
        """A fake interpreter answering the probe as Python <version>, reporting itself as sys.executable."""
        return self.script(name, f'echo "{version} $0"', folder)

    def pyenv(self, full_version: str) -> Path:
        minor = ".".join(full_version.split(".")[:2])
        return self.python(f"python{minor}", minor, self.home / ".pyenv" / "versions" / full_version / "bin")

    def shim(self, name: str) -> None:
        """A pyenv shim for a version that is not active: it fails, as pyenv's do."""
        self.script(name, f'echo "pyenv: {name}: command not found" >&2; exit 127')

    def apt(self, installs: dict[str, str]) -> None:
        """apt-get/apt-cache/dpkg-query that know the packages in ``installs`` ({package: version it installs})."""
        known = " ".join(installs)
        creates = "\n".join(f'    [ "$p" = {pkg} ] && {{ printf \'#!/bin/bash\\necho "{ver} $0"\\n\' '
                            f'> "{self.bin}/{pkg}"; chmod +x "{self.bin}/{pkg}"; }}' for pkg, ver in installs.items())
        self.script("apt-get", f'echo "apt-get $*" >> "{self.apt_log}"\nfor p in "$@"; do\n{creates or ":"}\ndone')
        self.script("apt-cache", f'echo "apt-cache $*" >> "{self.apt_log}"\n'
                                 f'[ "$1" = show ] && [[ " {known} " == *" $2 "* ]]')
        self.script("dpkg-query", "exit 1")
        self.script("env", 'while [[ "$1" == *=* ]]; do shift; done; exec "$@"')

    def find_python(self, **env: str) -> subprocess.CompletedProcess[str]:
        environment = {"PATH": str(self.bin), "HOME": str(self.home), **env}
        return subprocess.run([shutil.which("bash"), "-c", f'. "{SETUP}"; nt_find_python'], env=environment,
                              capture_output=True, text=True, timeout=60, check=False)

    def apt_calls(self) -> list[str]:
        return self.apt_log.read_text().splitlines() if self.apt_log.exists() else []


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    return Machine(tmp_path)


def picked(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_newest_supported_present_is_picked_and_named(machine: Machine) -> None:
    machine.python("python3.11", "3.11")
    newest = machine.python("python3.12", "3.12")
    machine.python("python3", "3.11")
    machine.python("python3.10", "3.10")
    result = machine.find_python()
    assert picked(result) == str(newest)
    assert f"Python: {newest} (3.12" in result.stderr


def test_python3_counts_when_it_is_a_supported_version(machine: Machine) -> None:
    system = machine.python("python3", "3.13")  # Debian 13: python3 is 3.13
    machine.python("python3.11", "3.11")
    assert picked(machine.find_python()) == str(system)


def test_pyenv_versions_are_found_and_a_failing_shim_is_skipped(machine: Machine) -> None:
    machine.shim("python3.13")
    machine.python("python3", "3.11")
    machine.pyenv("3.12.1")
    newest_patch = machine.pyenv("3.13.10")
    machine.pyenv("3.13.9")
    assert picked(machine.find_python()) == str(newest_patch)


def test_apt_is_not_called_when_a_supported_python_is_present(machine: Machine) -> None:
    machine.apt({"python3.12": "3.12", "python3.12-venv": "3.12"})
    machine.python("python3.11", "3.11")
    assert picked(machine.find_python()).endswith("/python3.11")
    assert machine.apt_calls() == []


def test_apt_installs_the_newest_it_knows_only_when_none_is_present(machine: Machine) -> None:
    machine.python("python3", "3.10")  # Ubuntu 22.04's python3: too old
    machine.apt({"python3.12": "3.12", "python3.12-venv": "3.12"})  # Ubuntu 24.04: 3.12, no 3.13 or 3.11
    result = machine.find_python()
    assert picked(result) == str(machine.bin / "python3.12")
    calls = machine.apt_calls()
    assert any(c.startswith("apt-get install") and "python3.12 python3.12-venv" in c for c in calls), calls
    assert "installing Debian's python3.12" in result.stderr


def test_nothing_supported_and_no_apt_is_one_clear_line(machine: Machine) -> None:
    machine.python("python3", "3.10")
    result = machine.find_python()
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("[nodetune] ERROR: no supported Python found: none of python3.13 python3.12 python3.11")
    assert "NODETUNE_PYTHON=" in lines[0]


def test_skip_apt_is_honoured(machine: Machine) -> None:
    machine.apt({"python3.12": "3.12", "python3.12-venv": "3.12"})
    result = machine.find_python(NODETUNE_SKIP_APT="1")
    assert result.returncode == 1 and machine.apt_calls() == []
    assert "NODETUNE_SKIP_APT=1" in result.stderr


def test_nodetune_python_versions_pick_among_those_only(machine: Machine) -> None:
    machine.python("python3.13", "3.13")
    old = machine.python("python3.11", "3.11")
    assert picked(machine.find_python(NODETUNE_PYTHON="3.11")) == str(old)
    assert picked(machine.find_python(NODETUNE_PYTHON="3.12 3.11")) == str(old)


def test_nodetune_python_interpreter_overrides(machine: Machine, tmp_path: Path) -> None:
    machine.python("python3.13", "3.13")
    chosen = machine.python("mypython", "3.12", tmp_path / "elsewhere")
    result = machine.find_python(NODETUNE_PYTHON=str(chosen))
    assert picked(result) == str(chosen)
    assert "from NODETUNE_PYTHON" in result.stderr


@pytest.mark.parametrize(("setting", "message"), [
    ("3.10", "NODETUNE_PYTHON='3.10': Python 3.10 is not supported; valid: 3.13 3.12 3.11"),
    ("old", "NODETUNE_PYTHON=old does not run as a Python interpreter"),
    ("py39", "NODETUNE_PYTHON={py39} is Python 3.9; valid: Python 3.13 3.12 3.11"),
])
def test_bad_nodetune_python_is_refused_by_name(machine: Machine, tmp_path: Path, setting: str, message: str) -> None:
    machine.python("python3.13", "3.13")
    py39 = machine.python("python3.9", "3.9", tmp_path / "other")
    setting = str(py39) if setting == "py39" else setting
    result = machine.find_python(NODETUNE_PYTHON=setting)
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"[nodetune] ERROR: {message.format(py39=py39)}"), lines


@pytest.mark.parametrize(("venv_version", "setting", "kept"), [
    ("3.11", "", True),             # an existing venv from a supported Python is kept, though 3.13 is present
    ("3.11", "3.12 3.11", True),
    ("3.11", "3.13", False),        # NODETUNE_PYTHON asks for another version: rebuilt
    ("3.10", "", False),            # an unsupported one is rebuilt
])
def test_existing_venv_is_kept_only_when_it_is_wanted(machine: Machine, venv_version: str, setting: str,
                                                      kept: bool) -> None:
    machine.python("python3.13", "3.13")
    venv = machine.root / "venv"
    machine.python("python", venv_version, venv / "bin")
    env = {"PATH": str(machine.bin), "HOME": str(machine.home), "NODETUNE_VENV": str(venv), "NODETUNE_PYTHON": setting}
    result = subprocess.run([shutil.which("bash"), "-c", f'. "{SETUP}"; _nt_venv_is_wanted "$(_nt_venv_version)"'],
                            env=env, capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode == 0) == kept, result.stderr
