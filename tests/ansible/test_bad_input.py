"""Invalid variables given to the tune role are refused with the true fix, and the node tree stays byte-identical.

What Molecule's former ``bad_input`` scenario proved, one case per test, without starting Ansible: the tune role's
own task (``roles/tune/tasks/main.yml``, its arguments templated with the role's defaults) runs through the tune
action plugin, whose module call runs ``nodetune.lab.tune`` in this process (``tests/support/inprocess.py``). The
node is Molecule's small MI300X (amd-pstate-epp in active mode, ConnectX-7 HCAs in datagram mode, NVMe on scheduler
none) with Molecule's variables. A case refused on the controller never reaches the module; a case the node refuses
is refused by the module before any write. Either way the tree, a journal or a lock left behind included, is as it
was.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible_collections.nodetune.instinct.plugins.action import tune as tune_action

from tests.support import cache
from tests.support.inprocess import lab_action
from tests.support.trees import tree_digest

REPO = Path(__file__).resolve().parents[2]
MOLECULE = REPO / "molecule" / "shared"
HOST = "small-mi300x"
WRITTEN_NOTHING = "nothing was written"  # the node refused: the module ran and wrote nothing
SENT_NOTHING = "nothing was sent to the node"  # the controller refused: no module call

# case -> (variables over Molecule's, every string the refusal must carry)
CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "ipoib_mtu_4096_datagram": (
        {"nodetune_ipoib_mtu": 4096, "nodetune_ipoib_mtu_change_allowed": True},
        [WRITTEN_NOTHING, "nodetune_ipoib_mtu=4096", "datagram mode", "4092"]),
    "nvme_nr_requests_4096_none": (  # the limit is the hardware tag depth
        {"nodetune_nvme_scheduler": "none", "nodetune_nvme_nr_requests": 4096},
        [WRITTEN_NOTHING, "nodetune_nvme_nr_requests=4096", "scheduler 'none'", "1023"]),
    "cpu_governor_not_offered": (
        {"nodetune_cpu_governor": "schedutil"},
        [WRITTEN_NOTHING, "nodetune_cpu_governor='schedutil'", "available: performance, powersave"]),
    "cpu_epp_under_performance": (  # amd-pstate active mode
        {"nodetune_cpu_governor": "performance", "nodetune_cpu_epp": "balance_power"},
        [WRITTEN_NOTHING, "nodetune_cpu_epp='balance_power'", "EBUSY"]),
    "nvme_nr_queues_misspelt": (  # the articles' setting that does not exist
        {"nodetune_nvme_nr_queues": 32},
        [SENT_NOTHING, "nodetune_nvme_nr_queues is not a setting", "nodetune_nvme_module_options"]),
    "root_misspelt": (  # refused with the nearest real name, never ignored
        {"nodetune_rot": "/srv/lab/node1"},
        [SENT_NOTHING, "nodetune_rot is not a nodetune variable", "did you mean nodetune_root?"]),
    "smt_policy_unknown": (  # outside the role's argument spec
        {"nodetune_smt_policy": "bogus"},
        [SENT_NOTHING, "nodetune_smt_policy", "bogus", "offline_siblings"]),
}


@pytest.fixture(scope="module")
def node() -> Iterator[Path]:
    """Molecule's small MI300X, one tree for every case: each is refused before any write."""
    tree = cache.fresh_tree(str(MOLECULE / "specs" / f"{HOST}.yml"))
    yield tree
    cache.remove_fresh_tree(tree)


def molecule_variables(root: Path) -> dict[str, Any]:
    """The host's variables in Molecule (shared/group_vars/all), its tree as the root."""
    variables: dict[str, Any] = {}
    for path in sorted((MOLECULE / "group_vars" / "all").glob("*.yml")):
        variables.update(yaml.safe_load(path.read_text()) or {})
    variables.pop("ansible_python_interpreter")  # this process is the node's Python
    return dict(variables, nodetune_root=str(root), nodetune_report_dir=str(root.parent / "reports"))


def tune_role_task() -> tuple[str, dict[str, Any]]:
    """The name and the module arguments of the tune role's one task that touches the node."""
    tasks = yaml.safe_load((REPO / "roles" / "tune" / "tasks" / "main.yml").read_text())
    block = next(t for t in tasks if "block" in t)["block"]
    task = next(t for t in block if "nodetune.instinct.tune" in t)
    return task["name"], task["nodetune.instinct.tune"]


def role_arguments(task_vars: dict[str, Any]) -> dict[str, Any]:
    """The tune task's arguments as the role templates them (its defaults under the host's variables)."""
    defaults = yaml.safe_load((REPO / "roles" / "tune" / "defaults" / "main.yml").read_text())
    templar = Templar(loader=DataLoader(), variables={**defaults, **task_vars})
    try:
        from ansible.template import trust_as_template
    except ImportError:  # ansible-core < 2.19: every template is trusted
        return templar.template(tune_role_task()[1])
    return templar.template({k: trust_as_template(v) if isinstance(v, str) else v
                             for k, v in tune_role_task()[1].items()})


def test_the_tune_task_is_the_role_s_one_task_on_the_node() -> None:
    name, args = tune_role_task()
    assert name.startswith("Tune the node")  # the task Molecule's scenario required the failure in
    assert {"root", "policy", "state"} <= set(args)


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_refused_with_the_fix_and_the_tree_unchanged(node: Path, case: str) -> None:
    changes, expected = CASES[case]
    before = tree_digest(node)
    task_vars = dict(molecule_variables(node), inventory_hostname=HOST, **changes)
    run = lab_action(tune_action, role_arguments(task_vars), role="tune")
    result = run.run(task_vars=task_vars)
    message = str(result.get("msg", ""))
    assert result.get("failed"), f"{case}: the tune role accepted invalid variables: {result}"
    assert [part for part in expected if part not in message] == [], f"{case}: {message}"
    if WRITTEN_NOTHING in expected:  # refused by the module on the node, not by the controller
        assert [name for name, _, _ in run.calls] == ["nodetune.lab.tune"], case
    else:
        assert run.calls == [], f"{case}: sent to the node"
    assert tree_digest(node) == before, f"{case}: the node tree changed"
