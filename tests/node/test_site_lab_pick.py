"""site.yml's first play: the simulated lab nodes to build, picked by one controller task (issue 28 item 3).

The task's loop holds only the hosts to build, chosen in one expression; on a rerun it holds none. Before, it looped
over every lab host with a condition per item, and each item was a task run of its own on the controller that read
the host's variables three times more: a cost per host in every site.yml run, most of all over a fleet. What must
hold: the same hosts are picked (a missing tree; nodetune_sim_force; a nodetune_sim_state other than present; never a
host without nodetune_sim_spec), in play order, and a host whose tree exists is no loop item at all.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.support.playbooks import ok, playbook, write_inventory

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SHOW = {"name": "Show the lab nodes picked", "hosts": "all", "gather_facts": False, "tasks": [
    {"name": "Picked", "ansible.builtin.debug": {"msg": "{{ groups['nodetune_lab_build'] | default([]) }}"},
     "run_once": True}]}


@pytest.fixture
def pick(tmp_path: Path) -> Path:
    """site.yml's first play alone, then a play that prints the group it fills; three hosts: node1 built (its
    marker file exists), node2 not yet, node3 a real host (no nodetune_sim_spec) whose root has no marker either."""
    plays = yaml.safe_load((REPO / "site.yml").read_text())
    assert plays[0]["name"] == "Pick the simulated lab nodes to build"
    book = tmp_path / "pick.yml"
    book.write_text(yaml.safe_dump([plays[0], SHOW], sort_keys=False))
    hosts = {}
    for name in ("node1", "node2", "node3"):
        root = tmp_path / "nodes" / name
        root.mkdir(parents=True)
        hosts[name] = {"nodetune_root": str(root)}
        if name != "node3":
            hosts[name]["nodetune_sim_spec"] = str(tmp_path / "spec.yml")  # never read by the pick
    (tmp_path / "nodes" / "node1" / ".nodetune-simnode.json").write_text("{}\n")
    write_inventory(tmp_path, hosts)
    return book


def picked(book: Path, *extra: str) -> tuple[list[str], str]:
    run = ok(playbook(book.parent / "hosts.yml", str(book), *extra))
    shown = re.search(r"^ok: \[node1\] => (\{.*\})$", run.stdout, re.M)
    assert shown, run.stdout[-3000:]
    return json.loads(shown.group(1))["msg"], run.stdout


def test_only_the_nodes_to_build_are_loop_items(pick: Path) -> None:
    hosts, out = picked(pick)
    assert hosts == ["node2"]
    # node1's tree exists: no item of the loop (each item would be a task run on the controller); node3 is real
    assert "(item=node1)" not in out and "(item=node3)" not in out, out[-3000:]
    assert len(re.findall(r"\(item=node2\)", out)) == 1, out[-3000:]


def test_force_and_state_pick_every_lab_node_in_play_order(pick: Path) -> None:
    assert picked(pick, "-e", "nodetune_sim_force=true")[0] == ["node1", "node2"]
    assert picked(pick, "-e", "nodetune_sim_state=rebooted")[0] == ["node1", "node2"]
    assert picked(pick, "-e", "nodetune_sim_state=present", "-e", "nodetune_sim_force=false")[0] == ["node2"]
