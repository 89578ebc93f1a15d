"""An area is one file: its declaration beside its builder (issue 29 item 1, issue 39 item 4).

In a scratch copy of the checkout (collection, roles, playbooks, ansible.cfg), a throw-away area is added the way
docs/areas.md says: one file, areas/<name>.py, with its ``ROLE``, ``DECLARATION`` and ``build``; then
``scripts/gen_role_docs.py --root`` writes its role, the tune and verify roles' area tags and ``areas/builders.py``.
Nothing else is edited, and the area works end to end through ansible-playbook on a small simulated node: the role
alone in check mode with diff (the change shown, nothing written), ``playbooks/apply.yml --tags <area>``, the role
alone again (a second apply changes nothing), ``playbooks/verify.yml --tags <area>`` (its finding ok) and
``playbooks/revert.yml`` (the node as it was).

The area sets transparent hugepages (``/sys/kernel/mm/transparent_hugepage/enabled``): the kernel shows the modes
with the active one in brackets and takes one mode name, anything else is EINVAL (mm/huge_memory.c, enabled_show()
and enabled_store()); the lab's simulated kernel answers a bracketed choice file that way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.support.specs import small_spec
from tests.support.trees import tree_digest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
COLLECTION = "collection/ansible_collections/nodetune"
THP = "sys/kernel/mm/transparent_hugepage/enabled"

AREA_MODULE = '''# -*- coding: utf-8 -*-
"""The throw-away area of tests/ansible/test_new_area.py: transparent hugepages' mode."""

from __future__ import annotations

from typing import Any, Dict, List

from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import (
    Context,
    choices,
    role_variables,
    unknown_keys,
    want_str,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import CHOICE, Setting

ROLE = "scratch_thp"
DECLARATION = {
    'kind': 'area',
    'order': 65,
    'builder': 'scratch_thp',
    'setting_area': 'scratch_thp',
    'finding_prefix': 'scratch_thp',
    'check_ids': ['scratch_thp.enabled'],
    'galaxy_tags': ['memory'],
    'severity': 'low',
    'short_description': 'Transparent hugepages mode (the throw-away area of tests/ansible/test_new_area.py)',
    'description': ['Writes the mode to C(/sys/kernel/mm/transparent_hugepage/enabled).'],
    'variables': {
        'nodetune_scratch_thp_enabled': {
            'type': 'bool',
            'default': True,
            'description': ['Tune this area. When false the area is left exactly as it is.'],
        },
        'nodetune_scratch_thp_mode': {
            'type': 'str',
            'default': 'never',
            'choices': ['always', 'madvise', 'never'],
            'description': ['The transparent hugepages mode. C(null) leaves it alone.'],
        },
    },
}

AREA = "scratch_thp"
VARIABLES = role_variables(ROLE, DECLARATION)
PATH = "sys/kernel/mm/transparent_hugepage/enabled"


def build(ctx: Context, config: Dict[str, Any]) -> List[Setting]:
    unknown_keys(ctx, config, VARIABLES, AREA)
    mode = want_str(ctx, config, "nodetune_scratch_thp_mode", choices(DECLARATION, "nodetune_scratch_thp_mode"))
    if mode is None:
        return []
    if not ctx.root.exists(PATH):
        ctx.notes.append("scratch_thp: no /%s on this node" % PATH)
        return []
    return [Setting("scratch_thp.enabled", "thp", PATH, mode, compare=CHOICE, area=AREA, reason="THP mode")]
'''


def _ignored(folder: str, names: list[str]) -> set[str]:
    """Test output, caches and ansible-test's own environments stay behind."""
    skip = {name for name in names if name in ("__pycache__", ".pytest_cache") or name.endswith(".pyc")}
    if Path(folder).name == "tests" and Path(folder).parent.name == "instinct":
        skip |= {"output"} & set(names)
    return skip


def scratch_checkout(dest: Path) -> Path:
    """What ansible-playbook needs of the checkout, copied: its configuration, collections, roles and playbooks."""
    for folder in (COLLECTION, "roles", "playbooks"):
        shutil.copytree(REPO / folder, dest / folder, ignore=_ignored)
    shutil.copy2(REPO / "ansible.cfg", dest / "ansible.cfg")
    return dest


def add_area(tree: Path) -> None:
    """What docs/areas.md asks for: one file, the area's declaration beside its builder."""
    (tree / COLLECTION / "instinct/plugins/module_utils/areas/scratch_thp.py").write_text(AREA_MODULE)


def generate(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "scripts/gen_role_docs.py"), "--root", str(tree), *args],
                          capture_output=True, text=True, timeout=120, check=False)


def playbook(tree: Path, inventory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_CONFIG=str(tree / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_LOCAL_TEMP=str(tree / ".ansible-tmp"))
    return subprocess.run(["ansible-playbook", "-i", str(inventory), *args], cwd=tree, env=env, text=True,
                          capture_output=True, timeout=600, check=False)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    return result.stdout


def changed(stdout: str) -> int:
    recap = next(line for line in stdout.splitlines() if line.startswith("node1 ") and "changed=" in line)
    return int(recap.split("changed=")[1].split()[0])


def test_a_new_area_is_its_declaration_and_its_builder(tmp_path: Path) -> None:
    tree = scratch_checkout(tmp_path / "checkout")
    add_area(tree)
    stale = generate(tree, "--check")
    assert stale.returncode == 1 and "roles/scratch_thp/tasks/main.yml" in stale.stdout, stale.stdout + stale.stderr
    wrote = generate(tree)
    assert wrote.returncode == 0, wrote.stderr
    assert generate(tree, "--check").returncode == 0
    # what the generator wrote from the declaration: the role, the area's tag on the runner roles, the builder import
    role = tree / "roles/scratch_thp"
    assert yaml.safe_load((role / "tasks/main.yml").read_text())[0]["tags"] == ["scratch_thp"]
    assert yaml.safe_load((role / "defaults/main.yml").read_text())["nodetune_scratch_thp_mode"] == "never"
    assert "memory" in yaml.safe_load((role / "meta/main.yml").read_text())["galaxy_info"]["galaxy_tags"]
    for runner in ("tune", "verify"):
        noop = yaml.safe_load((tree / "roles" / runner / "tasks/main.yml").read_text())[0]
        assert noop["ansible.builtin.meta"] == "noop" and "scratch_thp" in noop["tags"] and "never" in noop["tags"]
    assert '"scratch_thp": scratch_thp,' in (tree / COLLECTION / "instinct/plugins/module_utils"
                                               "/areas/builders.py").read_text()

    node = tmp_path / "node"
    simnode.build(small_spec(), str(node))
    assert (node / THP).read_text() == "always [madvise] never\n"
    reports = tmp_path / "reports"
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"node1": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "nodetune_root": str(node),
        "nodetune_lab_backend": "simulated", "nodetune_report_dir": str(reports)}}}}))
    alone = tree / "playbooks/scratch_thp.yml"
    alone.write_text(yaml.safe_dump([{"name": "The throw-away area alone", "hosts": "all", "gather_facts": False,
                                      "roles": ["scratch_thp"]}]))
    pristine = tree_digest(node)

    # the role alone, check mode with diff: the change shown, nothing written
    dry = ok(playbook(tree, inventory, str(alone), "--check", "--diff"))
    assert changed(dry) == 1
    shown = [line for line in dry.splitlines() if line[:1] in "+-" and "scratch_thp.enabled[thp]" in line]
    assert any(line.startswith("-") and "madvise" in line for line in shown), dry[-4000:]
    assert any(line.startswith("+") and line.endswith("= never") for line in shown), dry[-4000:]
    assert tree_digest(node) == pristine

    # the area's tag on the tune role applies it, and nothing of the other areas
    ok(playbook(tree, inventory, "playbooks/apply.yml", "--tags", "scratch_thp"))
    assert (node / THP).read_text() == "always madvise [never]\n"
    tuned = tree_digest(node)
    touched = {path for path in set(pristine) | set(tuned) if pristine.get(path) != tuned.get(path)}
    assert {path for path in touched if path.startswith(("sys", "proc"))} == {THP}

    # the role alone again: a second apply changes nothing
    assert changed(ok(playbook(tree, inventory, str(alone)))) == 0

    # verify with the area's tag: its finding is there, ok
    ok(playbook(tree, inventory, "playbooks/verify.yml", "--tags", "scratch_thp"))
    findings = json.loads((reports / "nodes" / "node1.json").read_text())["findings"]
    mine = [f for f in findings if f["id"] == "scratch_thp.enabled"]
    assert [f["status"] for f in mine] == ["ok"], mine

    # revert: the node as it was before the first apply, byte for byte
    ok(playbook(tree, inventory, "playbooks/revert.yml"))
    assert (node / THP).read_text() == "always [madvise] never\n"
    assert tree_digest(node) == pristine
