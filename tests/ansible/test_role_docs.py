"""Every role and variable is declared once (module_utils/areas/declarations.py): each role's defaults, argument spec,
README
and (area roles, bios_check) task are generated from it, and the builders and action plugins read the same."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import builders as _builders
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import tuning
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import check_ids

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
            f"{path.relative_to(REPO)} differs from plugins/module_utils/areas/declarations.py: "
            "run python scripts/gen_role_docs.py")


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


def test_the_collection_files_are_up_to_date() -> None:
    """areas/builders.py: the static imports of every declared builder (Ansible ships only those in a payload)."""
    for path, text in gen_role_docs.collection_files().items():
        assert path.is_file() and path.read_text() == text, (
            f"{path.relative_to(REPO)} differs from plugins/module_utils/areas/declarations.py: "
            "run python scripts/gen_role_docs.py")


def test_each_area_runs_the_builder_its_declaration_names() -> None:
    assert [name for name, _ in tuning.BUILDERS] == list(areas.AREAS)
    for name, build in tuning.BUILDERS:
        module = areas.ROLES[name]["builder"]
        assert _builders.MODULES[module].__name__.endswith(".module_utils.areas." + module)
        assert build is _builders.MODULES[module].build


def test_the_generator_renders_the_noop_tags_and_role_meta(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tune and verify roles' meta noop tags and each role's meta/main.yml come from the declaration: a stale
    one fails --check and a run writes it back, keeping the rest of the hand-written tasks file (and never)."""
    roles = tmp_path / "roles"
    for name in ("tune", "nvme"):
        shutil.copytree(REPO / "roles" / name, roles / name)
    monkeypatch.setattr(gen_role_docs, "ROLES", roles)
    monkeypatch.setattr(gen_role_docs, "REPO", tmp_path)
    assert gen_role_docs.main(["--check", "tune", "nvme"]) == 0
    tasks, meta = roles / "tune" / "tasks" / "main.yml", roles / "nvme" / "meta" / "main.yml"
    original = tasks.read_text(), meta.read_text()
    tasks.write_text(original[0].replace("rocm_env, bios_check", "bios_check"))
    meta.write_text(original[1].replace("nvme, storage]", "storage]"))
    assert gen_role_docs.main(["--check", "tune", "nvme"]) == 1
    assert gen_role_docs.main(["tune", "nvme"]) == 0
    assert (tasks.read_text(), meta.read_text()) == original
    assert gen_role_docs.noop_tags("tune")[-1] == "never" and "- name: Tune the nodes" in tasks.read_text()
    assert yaml.safe_load(meta.read_text())["galaxy_info"]["description"].startswith("nodetune nvme: NVMe ")


def test_a_tasks_file_without_its_noop_task_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    roles = tmp_path / "roles"
    shutil.copytree(REPO / "roles" / "verify", roles / "verify")
    tasks = roles / "verify" / "tasks" / "main.yml"
    tasks.write_text(tasks.read_text().replace("ansible.builtin.meta: noop", "ansible.builtin.meta: flush_handlers"))
    monkeypatch.setattr(gen_role_docs, "ROLES", roles)
    monkeypatch.setattr(gen_role_docs, "REPO", tmp_path)
    with pytest.raises(SystemExit, match=r"verify/tasks/main.yml must hold one `ansible.builtin.meta: noop` task"):
        gen_role_docs.main(["--check", "verify"])


# Every check id published before the areas declared their own (issue 29 item 1): none may be lost. New ids may join.
PUBLISHED_IDS = {
    "bios.above_4g", "bios.aspm", "bios.iommu", "bios.nps", "bios.pcie_link", "bios.smt",
    "check.expected", "check.program",
    "cpu.applicable", "cpu.epp", "cpu.governor", "cpu.idle_state",
    "health.gpu_perf_level", "health.gpu_power", "health.gpu_power_cap", "health.gpu_ras", "health.gpu_temp",
    "health.ib_counters", "health.ib_port", "health.memlock", "health.pcie_acs", "health.pcie_link",
    "health.xgmi_links",
    "ib.mtu", "infiniband.applicable",
    "inventory.compute_partition", "inventory.cpu_count", "inventory.gpu_count", "inventory.gpu_model",
    "inventory.hca_count", "inventory.hca_rate", "inventory.hca_width", "inventory.memory_partition",
    "inventory.numa_per_socket", "inventory.nvme_count", "inventory.smt", "inventory.xgmi_hive_size",
    "irq.gpu_local", "irq.irqbalance", "irq.managed", "irq.nic_local", "irq_affinity.applicable",
    "limits.applicable", "limits.effective", "limits.pam", "limits.systemd", "limits.unit",
    "nvme.applicable", "nvme.module_options", "nvme.nr_requests", "nvme.scheduler",
    "persist.boot_restore", "persist.sysctl_boot", "persist.sysctl_d", "persist.udev",
    "rocm.bind", "rocm.env", "rocm.ranks", "rocm_env.applicable",
    "smt.applicable", "smt.control", "smt.siblings_offline",
    "sysctl.applicable",
}


def test_every_published_check_id_is_still_known() -> None:
    assert PUBLISHED_IDS - set(check_ids.known_ids()) == set()
    for key in ("sysctl.vm.dirty_ratio", "sysctl.net.core.rmem_max", "sysctl.net.ipv4.neigh.default.gc_thresh3"):
        assert check_ids.is_known(key), key
    assert not check_ids.is_known("sysctl.vm") and not check_ids.is_known("nvme.schedular")
    assert "or sysctl.<key> such as sysctl.vm.dirty_ratio" in check_ids.unknown_message("nvme.schedular")


def test_each_area_declares_its_own_check_ids() -> None:
    """check_ids.py holds no per-area list: each id is declared once, by the area whose prefix it has, and the
    apply-order steps are among them."""
    seen: dict[str, str] = {}
    for name in areas.AREAS:
        declared = areas.ROLES[name]
        for check_id in declared["check_ids"]:
            assert check_id.startswith(declared["finding_prefix"] + "."), (name, check_id)
            assert check_id not in seen, (check_id, name, seen.get(check_id))
            seen[check_id] = name
        assert set(declared.get("steps") or []) <= set(declared["check_ids"]), name
    source = (REPO / "collection/ansible_collections/nodetune/instinct/plugins/module_utils/audit"
              / "check_ids.py").read_text()
    for check_id in seen:
        assert f'"{check_id}"' not in source, check_id


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
    noop beside it carries the declared areas' tags so that --list-tags shows them, and never, so that a run without
    --tags does not print its empty header once per host (issue 25 item 10)."""
    for role, extra in (("tune", ["apply", "verify"]), ("verify", ["verify"])):
        tasks = yaml.safe_load((REPO / "roles" / role / "tasks" / "main.yml").read_text())
        noop = [t for t in tasks if t.get("ansible.builtin.meta") == "noop"]
        assert len(noop) == 1, role
        assert noop[0]["tags"] == [*areas.AREAS, areas.BIOS_ROLE, *extra, "never"], role


def test_every_area_declares_what_it_is() -> None:
    for name in areas.AREAS:
        declared = areas.ROLES[name]
        assert declared["severity"] in ("low", "medium", "high")
        assert declared["builder"] in _builders.MODULES and declared["finding_prefix"]
        assert isinstance(declared["check_ids"], list) and declared["setting_area"]
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


@pytest.mark.parametrize("module", ["nodetune.instinct.tune", "nodetune.instinct.verify"])
def test_every_declared_builder_is_in_the_module_payload(module: str) -> None:
    """tuning.py takes the builders from areas/builders.py's static imports, which Ansible follows into the payload."""
    from tests.support.payload import payload_files

    shipped = {name.split("/instinct/plugins/module_utils/", 1)[1] for name in payload_files(module)
               if "/instinct/plugins/module_utils/" in name}
    assert {"areas/" + areas.ROLES[name]["builder"] + ".py" for name in areas.AREAS} | {"areas/builders.py"} <= shipped
