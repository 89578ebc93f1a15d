"""The project's setup and CI wiring: what a new user and CI rely on before any feature code runs.

These catch the quiet breakages: a README whose commands no longer exist, a CI script that runs something other
than what the README promises, an ansible.cfg key Ansible silently ignores, an ansible-test config that no longer
parses, and version pins that drift apart between pyproject.toml and the collection.
"""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "collection" / "ansible_collections" / "nodetune" / "instinct"
SCRIPTS = ("scripts/bootstrap.sh", "scripts/test.sh", "scripts/lib/setup.sh", ".ci/run")


def readme_quick_start_commands() -> list[str]:
    """The commands in the fenced code blocks of the README's "Quick start" section."""
    text = (REPO / "README.md").read_text()
    match = re.search(r"^## Quick start\n(.*?)^## ", text, flags=re.S | re.M)
    assert match, "README.md has no '## Quick start' section followed by another section"
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", match.group(1), flags=re.S | re.M)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_readme_quick_start_has_exactly_setup_and_test_commands():
    commands = readme_quick_start_commands()
    assert commands == ["scripts/bootstrap.sh", "scripts/test.sh"], commands
    for command in commands:
        script = REPO / command
        assert script.is_file(), f"README names {command}, which does not exist"
        assert os.access(script, os.X_OK), f"{command} is not executable (git mode 100755)"


def test_ci_runs_the_readme_test_command():
    test_command = readme_quick_start_commands()[-1]
    ci = (REPO / ".ci" / "run").read_text()
    runs = [line for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert any(re.search(rf"(^|\s){re.escape(test_command)}(\s|$)", line) for line in runs), runs


@pytest.mark.parametrize("script", SCRIPTS)
def test_shell_scripts_parse(script):
    result = subprocess.run(["bash", "-n", str(REPO / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_ansible_cfg_paths_are_the_ones_ansible_reads():
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "ansible.cfg")
    defaults = cfg["defaults"]
    # The plural key is silently ignored by ansible-core: only the singular one works.
    assert "collections_paths" not in defaults
    collections = (REPO / defaults["collections_path"]).resolve()
    assert (collections / "ansible_collections" / "nodetune" / "instinct" / "galaxy.yml").is_file()
    assert (REPO / defaults["roles_path"]).resolve() == REPO / "roles"
    # The safe default: the simulated lab, never a real fleet.
    assert Path(defaults["inventory"]).parts[-2:] == ("lab", "hosts.yml")


def test_ansible_test_config_declares_node_python_versions():
    content_config = pytest.importorskip("ansible_test._internal.content_config")
    data = yaml.safe_load((COLLECTION / "tests" / "config.yml").read_text())
    config = content_config.parse_content_config(data)
    versions = config.modules.python_versions
    assert "3.8" not in versions
    assert {"3.9", "3.11"} <= set(versions)


def test_pip_standin_has_the_name_ansible_test_looks_for(tmp_path):
    requirements = pytest.importorskip("ansible_test._internal.python_requirements")
    pip_version = requirements.get_venv_packages(type("Python", (), {"version": "3.11"})())["pip"]
    env = dict(os.environ, HOME=str(tmp_path))
    script = REPO / "scripts" / "lib" / "ansible_test_get_pip.py"

    first = subprocess.run([sys.executable, str(script), "3.11"], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    path = Path(first.stdout.strip())
    assert path == tmp_path / ".ansible" / "test" / "cache" / f"get_pip_{pip_version.replace('.', '_')}.py"
    compile(path.read_text(), str(path), "exec")

    # Idempotent: a second run leaves the file alone.
    mtime = path.stat().st_mtime_ns
    second = subprocess.run([sys.executable, str(script), "3.11"], env=env, capture_output=True, text=True)
    assert second.returncode == 0 and path.stat().st_mtime_ns == mtime


def test_ansible_test_still_reads_the_standin_path():
    """If ansible-test renames its cache file, the stand-in silently stops working: notice it here."""
    spec = pytest.importorskip("ansible_test")
    setup = Path(spec.__file__).parent / "_util" / "target" / "setup" / "requirements.py"
    assert "~/.ansible/test/cache/get_pip_%s.py" in setup.read_text()


def ansible_core_pins() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [req for req in map(Requirement, project["dependencies"]) if req.name == "ansible-core"]


def supported_pythons() -> list[str]:
    """NODETUNE_SUPPORTED_PYTHONS from scripts/lib/setup.sh: the controller Pythons the scripts pick from."""
    match = re.search(r"^NODETUNE_SUPPORTED_PYTHONS=\(([^)]*)\)", (REPO / "scripts/lib/setup.sh").read_text(), re.M)
    assert match, "scripts/lib/setup.sh sets no NODETUNE_SUPPORTED_PYTHONS=(...)"
    return match.group(1).split()


def test_versions_agree_between_package_and_collection():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    galaxy = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())
    runtime = yaml.safe_load((COLLECTION / "meta" / "runtime.yml").read_text())
    assert galaxy["version"] == project["version"]
    # requires_ansible admits exactly the ansible-core lines that pyproject.toml pins (the lines CI tests)
    requires_ansible = SpecifierSet(runtime["requires_ansible"])
    pins = ansible_core_pins()
    assert len(pins) >= 2, pins
    for minor in range(10, 30):
        for version in (f"2.{minor}.0", f"2.{minor}.99"):
            pinned = any(pin.specifier.contains(version) for pin in pins)
            assert requires_ansible.contains(version) == pinned, (version, str(requires_ansible),
                                                                  [str(p) for p in pins])


def test_each_supported_python_gets_one_ansible_core_line():
    requires_python = SpecifierSet(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"])
    supported = supported_pythons()
    assert supported == sorted(supported, key=lambda v: tuple(map(int, v.split("."))), reverse=True), "newest first"
    for minor in range(8, 16):
        version = f"3.{minor}"
        assert requires_python.contains(f"{version}.0") == (version in supported), (version, str(requires_python))
    for version in supported:
        env = {"python_version": version, "python_full_version": f"{version}.0"}
        lines = [pin for pin in ansible_core_pins() if pin.marker is None or pin.marker.evaluate(env)]
        assert len(lines) == 1, (version, [str(p) for p in lines])


def test_readme_supported_line_names_the_tested_lines():
    text = (REPO / "README.md").read_text()
    match = re.search(r"^Supported: (.*?)\n\n", text, flags=re.S | re.M)
    assert match, "README.md has no 'Supported: ...' paragraph"
    supported = " ".join(match.group(1).split())
    for pin in ansible_core_pins():
        minimum = re.search(r">=\s*(\d+\.\d+)", str(pin.specifier)).group(1)
        assert f"ansible-core {minimum}" in supported, (minimum, supported)
    for version in supported_pythons():
        assert f"{version}" in supported, (version, supported)


def test_every_test_group_is_a_folder_that_holds_tests():
    """tests/conftest.py's GROUPS are the folders under tests/ (the folder is the group): each is there, with tests,
    and pyproject.toml registers each as a marker (``--strict-markers``)."""
    from tests.conftest import GROUPS

    missing = [group for group in GROUPS if not list((REPO / "tests" / group).glob("test_*.py"))]
    assert missing == [], missing
    markers = [line.split(":", 1)[0].strip(' "') for line in tomllib.loads(
        (REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]]
    assert set(GROUPS) <= set(markers), markers


def test_the_declared_license_ships_and_roles_claim_the_supported_ansible():
    """galaxy.yml and pyproject.toml declare Apache-2.0: its text is in the repository (the wheel and the Galaxy
    tarball take it from there); a role's min_ansible_version is the oldest ansible-core requires_ansible admits."""
    assert "Apache License" in (REPO / "LICENSE").read_text() and "Version 2.0" in (REPO / "LICENSE").read_text()
    runtime = yaml.safe_load((COLLECTION / "meta" / "runtime.yml").read_text())
    oldest = re.search(r">=\s*([0-9]+\.[0-9]+)", runtime["requires_ansible"]).group(1)
    for meta in sorted((REPO / "roles").glob("*/meta/main.yml")):
        declared = yaml.safe_load(meta.read_text())["galaxy_info"]["min_ansible_version"]
        assert str(declared) == oldest, f"{meta}: min_ansible_version {declared!r}, requires_ansible starts at {oldest}"
