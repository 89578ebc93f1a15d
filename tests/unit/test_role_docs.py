"""Every role and variable is declared once (module_utils/areas.py): each role's defaults, argument spec, README
and (area roles, bios_check) task are generated from it, and the builders and action plugins read the same."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.nodetune.instinct.plugins.module_utils import areas, tuning

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import gen_role_docs  # noqa: E402

ROLES = gen_role_docs.declared_roles()


def test_the_declared_roles_are_the_roles_on_disk() -> None:
    on_disk = {p.parent.parent.name for p in (REPO / "roles").glob("*/meta/main.yml")}
    assert on_disk == set(areas.ROLES)
    assert tuning.AREAS == areas.AREAS


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.name)
def test_generated_files_are_up_to_date(role: Path) -> None:
    for path, text in gen_role_docs.generated_files(role).items():
        assert path.is_file(), f"{path} is missing: run python scripts/gen_role_docs.py"
        assert path.read_text() == text, (
            f"{path.relative_to(REPO)} differs from plugins/module_utils/areas.py: run python scripts/gen_role_docs.py")


def test_the_generator_check_mode_catches_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    roles = tmp_path / "roles"
    shutil.copytree(REPO / "roles" / "nvme", roles / "nvme")
    monkeypatch.setattr(gen_role_docs, "ROLES", roles)
    monkeypatch.setattr(gen_role_docs, "REPO", tmp_path)
    assert gen_role_docs.main(["--check", "nvme"]) == 0
    defaults = roles / "nvme" / "defaults" / "main.yml"
    defaults.write_text(defaults.read_text().replace("nodetune_nvme_scheduler: none", "nodetune_nvme_scheduler: bfq"))
    assert gen_role_docs.main(["--check", "nvme"]) == 1
    assert gen_role_docs.main(["nvme"]) == 0
    assert "nodetune_nvme_scheduler: none" in defaults.read_text()
    assert gen_role_docs.main(["--check", "nvme"]) == 0


def test_defaults_and_spec_are_the_declaration() -> None:
    for name in areas.ROLES:
        role = REPO / "roles" / name
        defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
        spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
        options = spec["argument_specs"]["main"]["options"]
        assert defaults == areas.defaults(name)
        assert list(options) == list(areas.role_options(name))


def test_an_area_role_applies_its_area_in_one_tagged_module_call() -> None:
    for name in areas.AREAS:
        tasks = yaml.safe_load((REPO / "roles" / name / "tasks" / "main.yml").read_text())
        assert len(tasks) == 1 and "nodetune.instinct.tune" in tasks[0] and tasks[0]["tags"] == [name]
        assert "set_fact" not in str(tasks)


def test_the_tune_role_lists_every_area_tag() -> None:
    """The tune task is tagged always (a task carrying the area tags would be skipped whole by --skip-tags); a meta
    noop beside it carries the declared areas' tags so that --list-tags shows them."""
    for role, extra in (("tune", ["apply", "verify"]), ("verify", ["verify"])):
        tasks = yaml.safe_load((REPO / "roles" / role / "tasks" / "main.yml").read_text())
        noop = [t for t in tasks if t.get("ansible.builtin.meta") == "noop"]
        assert len(noop) == 1, role
        assert noop[0]["tags"] == [*areas.AREAS, areas.BIOS_ROLE, *extra], role


def test_every_area_declares_what_it_is() -> None:
    for name in areas.AREAS:
        declared = areas.ROLES[name]
        assert declared["severity"] in ("low", "medium", "high")
        assert declared["builder"].startswith("area_") and declared["finding_prefix"]
        assert areas.enabled_variable(name) in declared["variables"]
        for var, option in declared["variables"].items():
            assert var.startswith("nodetune_") and option["type"] and option["description"], var


def test_markup_becomes_markdown() -> None:
    assert gen_role_docs.markup("C(echo 1 > f(x)) and B(bold) I(it)") == "`echo 1 > f(x)` and **bold** *it*"


def test_the_declared_apply_order_keeps_the_documented_dependencies() -> None:
    order = areas.apply_order()
    assert order["smt"] < order["irq.nic_local"]  # offlining CPUs moves IRQs
    assert order["cpu.governor"] < order["cpu.epp"]  # EPP is refused under some governors
    assert order["nvme.scheduler"] < order["nvme.nr_requests"]  # a scheduler switch resets nr_requests
    assert order["irq.irqbalance"] < order["irq.nic_local"]  # irqbalance would move pinned IRQs again
    assert max(v for k, v in order.items() if k != "persist") < order["persist"]
