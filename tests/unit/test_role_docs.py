"""Each role's meta/argument_specs.yml is the single source of truth: README, defaults and the module agree with it."""

from __future__ import annotations

import importlib
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import gen_role_docs  # noqa: E402

ROLES = gen_role_docs.roles_with_specs()
# area role -> the module_utils builder that consumes its variables (tuning.BUILDERS)
AREA_MODULES = {
    "cpu": "area_cpu", "smt": "area_smt", "irq_affinity": "area_irq", "infiniband": "area_infiniband",
    "nvme": "area_nvme", "sysctl": "area_sysctl", "rocm_env": "area_rocm_env",
}
OWN_ROLES = [*AREA_MODULES, "tune"]


def spec_options(role: Path) -> dict:
    return yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]


def set_fact_pattern(role: str) -> re.Pattern[str]:
    text = (REPO / "roles" / role / "tasks" / "main.yml").read_text()
    return re.compile(re.search(r"varnames', '([^']+)'", text).group(1))


def test_every_role_of_ours_has_a_spec() -> None:
    assert {r.name for r in ROLES} >= set(OWN_ROLES)


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.name)
def test_readme_is_generated_from_the_spec(role: Path) -> None:
    readme = role / "README.md"
    assert readme.is_file(), f"{readme} is missing: run python scripts/gen_role_docs.py"
    assert readme.read_text() == gen_role_docs.render(role), (
        f"{readme.relative_to(REPO)} is out of date with meta/argument_specs.yml: run python scripts/gen_role_docs.py")


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.name)
def test_defaults_match_the_spec(role: Path) -> None:
    defaults_file = role / "defaults" / "main.yml"
    defaults = (yaml.safe_load(defaults_file.read_text()) or {}) if defaults_file.is_file() else {}
    options = spec_options(role)
    assert set(defaults) <= set(options), f"undocumented defaults: {sorted(set(defaults) - set(options))}"
    for name, option in options.items():
        if "default" in option:
            assert name in defaults, f"{name} is documented with a default but not in defaults/main.yml"
            assert defaults[name] == option["default"], f"{name}: defaults/main.yml {defaults[name]!r} != spec"


@pytest.mark.parametrize("role", AREA_MODULES)
def test_area_role_variables_are_the_builders_variables(role: str) -> None:
    module = importlib.import_module(
        f"ansible_collections.nodetune.instinct.plugins.module_utils.{AREA_MODULES[role]}")
    options = set(spec_options(REPO / "roles" / role))
    toggle = f"nodetune_{role}_enabled"
    assert toggle in options
    assert options - {toggle} == set(module.VARIABLES)


@pytest.mark.parametrize("role", AREA_MODULES)
def test_set_fact_collects_exactly_the_role_own_variables(role: str) -> None:
    """The role passes every variable of its namespace (so typos reach the module and are refused) and no other
    role's variable."""
    pattern = set_fact_pattern(role)
    for other in AREA_MODULES:
        for name in spec_options(REPO / "roles" / other):
            assert bool(pattern.match(name)) == (other == role), f"{role}'s pattern vs {other}'s {name}"
    for name in ("nodetune_root", "nodetune_areas", "nodetune_layout_policy", "nodetune_state",
                 "nodetune_verify_fail_on_drift", "nodetune_bios_policy"):
        assert not pattern.match(name)


def test_check_mode_of_the_generator_catches_a_stale_readme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    roles = tmp_path / "roles"
    shutil.copytree(REPO / "roles" / "nvme", roles / "nvme")
    monkeypatch.setattr(gen_role_docs, "ROLES", roles)
    monkeypatch.setattr(gen_role_docs, "REPO", tmp_path)
    assert gen_role_docs.main(["--check"]) == 0
    spec = roles / "nvme" / "meta" / "argument_specs.yml"
    spec.write_text(spec.read_text().replace("Shell-style pattern", "Glob"))
    assert gen_role_docs.main(["--check"]) == 1
    assert gen_role_docs.main([]) == 0
    assert "| Glob of the NVMe namespaces" in (roles / "nvme" / "README.md").read_text()
    assert gen_role_docs.main(["--check"]) == 0


def test_markup_becomes_markdown() -> None:
    assert gen_role_docs.markup("C(echo 1 > f(x)) and B(bold) I(it)") == "`echo 1 > f(x)` and **bold** *it*"


def test_the_tune_action_plugin_gathers_the_same_namespaces_as_the_roles() -> None:
    """apply.yml relies on the action plugin, verify.yml (and composed plays) on the roles' set_fact: same variables."""
    from ansible_collections.nodetune.instinct.plugins.action import tune as action

    assert dict(action.AREA_ROLES) == {role: set_fact_pattern(role).pattern for role in AREA_MODULES}
    role, pattern = action.BIOS_ROLE
    assert set_fact_pattern(role).pattern == pattern
