"""The bounded diff of a tune run (module_utils/apply/diff_view.py) and revert's plan (issue 25 items 3 and 8).

`site.yml --check --diff` printed 9,536 lines for the two lab nodes (one line per value, nodetune's own files whole)
and `revert.yml --check --diff` printed no diff at all. The diff is now grouped and cut at 200 rendered lines per
node, counted the way Ansible's callback renders it (difflib's unified diff of before/after), and revert returns
each journal entry's current value and the baseline it would restore, in check mode too, without writing.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import diff_view, engine, node
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.support.lab_vars import role_areas
from tests.support.specs import AUDIT_SPEC as SPEC
from tests.support.trees import tree_digest

pytestmark = pytest.mark.usefixtures("simulated_kernel")


def ansible_lines(diff: dict[str, str]) -> list[str]:
    """What Ansible's default callback prints for a diff (CallbackBase._get_diff: difflib, 3 lines of context)."""
    lines = list(difflib.unified_diff(diff["before"].splitlines(True), diff["after"].splitlines(True),
                                      "before: " + diff["before_header"], "after: " + diff["after_header"], "", "",
                                      n=3))
    return [line.rstrip("\n") for line in lines]


def full_size_actions() -> list[dict]:
    """The changes of a fresh full-size MI300X node, as engine.Action.to_dict gives them: a value per CPU and per
    IRQ (every IRQ pinned to its own CPU), and nodetune's files."""
    actions = []
    for cpu in range(192, 384):
        actions.append({"id": "smt.siblings_offline", "target": f"cpu{cpu}", "kind": "attr", "before": "1",
                        "after": "0", "path": f"/sys/devices/system/cpu/cpu{cpu}/online"})
    for cpu in range(192):
        actions.append({"id": "cpu.governor", "target": f"cpu{cpu}", "kind": "attr", "before": "powersave",
                        "after": "performance", "path": f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"})
    for irq in range(40, 490):
        actions.append({"id": "irq.nic_local", "target": f"mlx5_comp{irq % 63}@pci:0000:{irq // 63:02x}:00.0",
                        "kind": "attr", "before": "0-383", "after": str(irq % 192),
                        "path": f"/proc/irq/{irq}/smp_affinity_list"})
    settings = [{"id": "cpu.governor", "target": f"cpu{n}", "value": "performance"} for n in range(192)]
    for area in ("cpu", "irq", "smt", "nvme", "sysctl", "infiniband", "rocm_env", "persist"):
        text = json.dumps({"settings": settings}, indent=1) + "\n"
        actions.append({"id": "check.expected", "target": area, "kind": "file", "before": None, "after": text,
                        "path": f"/etc/nodetune/check.d/{area}.json"})
    program = "#!/usr/bin/env python3\n" + "print('nodetune-check')\n" * 484
    actions.append({"id": "check.program", "target": "nodetune-check", "kind": "file", "before": None,
                    "after": program, "path": "/usr/local/sbin/nodetune-check"})
    actions.append({"id": "persist.sysctl_d", "target": "sysctl", "kind": "file", "before": None,
                    "after": "# Managed by nodetune.\nkernel.numa_balancing = 0\nvm.dirty_ratio = 20\n",
                    "path": "/etc/sysctl.d/90-nodetune-sysctl.conf"})
    return actions


def test_a_full_size_node_shows_every_change_group_in_under_200_lines() -> None:
    actions = full_size_actions()
    diff = diff_view.bounded(diff_view.from_actions(actions))
    shown = ansible_lines(diff)
    assert len(shown) + 1 <= diff_view.MAX_LINES == 200  # and the empty line Ansible prints after a diff
    assert diff_view.rendered_lines(diff["before"], diff["after"]) == len(shown) + 1
    text = "\n".join(shown)
    # a group per distinct change, targets compact
    assert "-smt.siblings_offline[cpu192-383] /sys/devices/system/cpu/cpu{192-383}/online = 1" in shown
    assert "+smt.siblings_offline[cpu192-383] /sys/devices/system/cpu/cpu{192-383}/online = 0" in shown
    assert "+cpu.governor[cpu0-191] /sys/devices/system/cpu/cpu{0-191}/cpufreq/scaling_governor = performance" in shown
    assert "<192 distinct values>" in text  # one affinity per IRQ: one row, not 450
    # nodetune's files: path, settings count, digest; the program is not printed
    program = next(a["after"] for a in actions if a["id"] == "check.program")
    digest = hashlib.sha256(program.encode()).hexdigest()
    assert "+check.program[nodetune-check] /usr/local/sbin/nodetune-check = <file: program, 485 lines, " in text
    assert digest in text and "print('nodetune-check')" not in text
    assert "+check.expected[cpu] /etc/nodetune/check.d/cpu.json = <file: 192 settings, " in text
    # a small configuration file is shown with its lines
    assert "+    | kernel.numa_balancing = 0" in shown
    # the full diff still has every value
    full = diff_view.full(diff_view.from_actions(actions))
    assert len(ansible_lines(full)) > 1500 and "cpu.governor[cpu7] /sys/devices/system/cpu/cpu7/" in full["after"]


def test_a_diff_too_long_is_cut_saying_what_it_left_out() -> None:
    actions = [{"id": f"sysctl.k{n}", "target": f"k{n}", "kind": "attr", "before": "1", "after": "2",
                "path": f"/proc/sys/kernel/k{n}"} for n in range(150)]
    diff = diff_view.bounded(diff_view.from_actions(actions))
    shown = ansible_lines(diff)
    assert len(shown) + 1 <= 200
    assert shown[-1].startswith("+... ") and "nodetune_full_diff=true shows every value" in shown[-1]
    kept = sum(1 for line in shown if line.startswith("-sysctl."))
    assert f"{150 - kept} more changes of {150 - kept} groups" in shown[-1] and kept > 50
    # each group's - and + lines are printed together, under its header
    first = shown.index(" # sysctl.k0: 1 value")
    assert shown[first + 1].startswith("-sysctl.k0[k0]") and shown[first + 2].startswith("+sysctl.k0[k0]")
    assert diff_view.bounded(diff_view.from_actions(actions), limit=10_000)["after"].count("\n") == 300


def test_file_summaries_count_the_settings_nodetune_writes() -> None:
    check_d = json.dumps({"settings": [{"id": "a"}, {"id": "b"}]}) + "\n"
    assert diff_view.file_summary(check_d).startswith("<file: 2 settings, 1 line, ")
    assert diff_view.file_summary(json.dumps({"generator": "x", "ranks": [1, 2, 3]})).startswith("<file: 3 ranks, ")
    conf = "# Managed by nodetune.\nvm.dirty_ratio = 20\n\nkernel.numa_balancing = 0\n"
    digest = hashlib.sha256(conf.encode()).hexdigest()
    assert diff_view.file_summary(conf) == f"<file: 2 settings, 4 lines, {len(conf)} bytes, sha256 {digest}>"
    assert diff_view.file_summary("#!/bin/sh\nexit 0\n").startswith("<file: program, 2 lines, ")
    assert diff_view.file_summary(None) == "<absent>"


@pytest.fixture
def tuned(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A small simulated MI300X node, tuned with the lab's variables: (its root, the digest of the pristine tree)."""
    dest = tmp_path / "node"
    simnode.build(SPEC, str(dest))
    pristine = tree_digest(dest)
    state = node.load(str(dest), role_areas(), {})
    engine.apply(state.root, state.settings, services=state.services)
    return dest, pristine


def test_revert_in_check_mode_shows_each_value_it_would_restore(tuned: tuple[Path, dict[str, str]]) -> None:
    """revert.yml --check --diff said only "restored from the journal: N value(s)": the plan now has each entry's
    current value and the baseline, read from the node and the journal, and check mode still writes nothing."""
    dest, pristine = tuned
    state = node.load(str(dest), {}, {})
    before = tree_digest(dest)
    plan = engine.revert(state.root, check_mode=True, services=state.services)
    assert tree_digest(dest) == before  # check mode: nothing written
    by_path = {c["path"] or c["target"]: c for c in plan["changes"]}
    assert len(plan["changes"]) == len(plan["restored"])
    assert by_path["/sys/devices/system/cpu/cpu16/online"]["before"] == "0"  # cpu0's sibling, offlined by the apply
    assert by_path["/sys/devices/system/cpu/cpu16/online"]["after"] == "1"
    assert by_path["/proc/sys/kernel/numa_balancing"] == {"key": "proc/sys/kernel/numa_balancing", "kind": "attr",
                                                          "path": "/proc/sys/kernel/numa_balancing", "before": "0",
                                                          "after": "1"}
    created = by_path["/etc/sysctl.d/90-nodetune-sysctl.conf"]
    assert created["after"] is None and created["before"] == (dest / "etc/sysctl.d/90-nodetune-sysctl.conf").read_text()
    assert by_path["irqbalance.service"]["after"] == "active=yes,enabled=yes"

    diff = diff_view.bounded(diff_view.from_revert(plan["changes"]), headers=diff_view.REVERT_HEADERS)
    shown = ansible_lines(diff)
    assert len(shown) + 1 <= 200 and shown[1] == "+++ after: node (journal baseline)"
    assert "-/sys/devices/system/cpu/cpu{16-31}/online (16 values) = 0" in shown
    assert "+/sys/devices/system/cpu/cpu{16-31}/online (16 values) = 1" in shown
    assert "+/etc/sysctl.d/90-nodetune-sysctl.conf = <absent>" in shown
    assert "-irqbalance.service = active=no,enabled=no" in shown

    # the real revert restores exactly that plan, and then has nothing left to show
    done = engine.revert(state.root, services=state.services)
    assert [c["key"] for c in done["changes"]] == [c["key"] for c in plan["changes"]]
    for change in plan["changes"]:
        if change["kind"] == "attr":
            assert engine.normalize_raw(state.root.read(change["key"])) == change["after"], change
        elif change["kind"] == "file":
            assert state.root.read(change["key"], strip=False) == change["after"], change
    assert {p: d for p, d in tree_digest(dest).items() if "effective_affinity" not in p} == \
        {p: d for p, d in pristine.items() if "effective_affinity" not in p}  # the kernel's choice, not restored
    assert engine.revert(state.root, check_mode=True, services=state.services).get("changes", []) == []
