"""verify and nodetune-check give one verdict on every node state (issue 39, item 2).

A lab node (the small MI250, the lab's own variables, irqbalance banned from the pinned IRQs) is tuned once; then
hypothesis drifts what the checker's expectations (check.d) name, with drift of every kind the areas know: the
same value written otherwise ('0-3' and '0,1,2,3', trailing blanks, '[mq-deadline] none', quotes around a line's
value), other values, text that only looks like a number ('٣', '4_092', '0-3,,8', '[a] [b]'), a file changed or
removed. verify (setting_findings, the Settings the plan made) and the rendered nodetune-check, run as the node
runs it, must name the same checks as drifted and no other. Before the node programs took verify's rules
(node_programs/rules.py) they differed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils import interpreter
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine
from ansible_collections.nodetune.instinct.plugins.module_utils.apply.node import load
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import checker_files
from ansible_collections.nodetune.instinct.plugins.module_utils.audit.verify import setting_findings
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_check, render
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import DRIFT
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.lab.plugins.module_utils import simnode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.lab_vars import AREAS
from tests.support.specs import small_mi250_spec
from tests.support.trees import scratch_dir

pytestmark = pytest.mark.usefixtures("simulated_kernel")  # applies to simulated nodes in-process
# The lab's variables, irqbalance kept running with the pinned IRQs banned: its config file's lines are checked too
LAB_BAN = {**AREAS, "irq_affinity": {**AREAS["irq_affinity"], "nodetune_irqbalance_mode": "ban"}}

# Text a kernel attribute or a config line may hold that only looks like a value, or is one written otherwise
ODD = ["٣", "4_092", "0-3,,8", "[a] [b]", "a b", "", " ", "+1", "0x10", "1 ", "\t1\n", "0-3", "0,1,2,3", "[none]",
       "none [mq-deadline]", "[mq-deadline] none", "06", "1-0", "0-3:1/2", "１"]


class Node:
    def __init__(self, root: Path, settings: list, services: Any, entries: list[dict[str, Any]],
                 checker: Path) -> None:
        self.root, self.settings, self.services, self.entries, self.checker = root, settings, services, entries, checker

    def verify_drift(self) -> set[tuple[str, str]]:
        """The checks verify finds drifted, named as the checker names them (its entry's id and target)."""
        out = set()
        for setting, finding in zip(self.settings, setting_findings(Root(str(self.root)), self.settings,
                                                                     self.services), strict=True):
            entry = checker_files._check_entry(setting)
            if entry is not None and finding.status == DRIFT:
                out.add((entry["id"], entry["target"]))
        return out

    def checker_drift(self) -> set[tuple[str, str]]:
        """The checks the rendered nodetune-check reports, run as the node runs it (its own file, no nodetune on
        sys.path)."""
        proc = subprocess.run([sys.executable, "-I", str(self.checker), "--root", str(self.root)],
                              capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode in (node_check.EXIT_CLEAN, node_check.EXIT_DRIFT), proc.stderr
        out = set()
        for line in proc.stdout.splitlines():
            head = line.split(": expected ", 1)[0]
            check_id, _sep, target = head.partition(" ")
            out.add((check_id, target))
        return out


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    scratch = scratch_dir()
    try:
        root = scratch / "node"
        simnode.build(small_mi250_spec(), str(root))
        state = load(str(root), LAB_BAN)
        assert engine.apply(state.root, state.settings, services=state.services)["changed"]
        state = load(str(root), LAB_BAN)  # the plan a verify after the apply makes
        entries, _inventory, _learned = node_check.load_config(str(root), node_check.CONFIG_DIR)
        checker = scratch / "nodetune-check"
        checker.write_text(render.program_text(node_check, interpreter.shebang()))
        yield Node(root, state.settings, state.services, entries, checker)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_the_tuned_node_is_clean_for_both(node: Node) -> None:
    kinds = {(e["kind"], e.get("compare")) for e in node.entries}
    # the drift below reaches every kind of expectation the lab's areas write
    assert {("attr", "cpulist"), ("attr", "choice"), ("attr", "int"), ("attr", "exact"), ("line", "exact"),
            ("file", "content")} <= kinds, kinds
    assert node.verify_drift() == set() and node.checker_drift() == set()


def _path(node: Node, entry: dict[str, Any]) -> str | None:
    if entry.get("irq_name"):
        setting = next(s for s in node.settings if s.irq_name == entry["irq_name"] and s.id == entry["id"])
        return setting.path
    return entry.get("path") or None


def _variants(entry: dict[str, Any]) -> st.SearchStrategy[str | None]:
    """What to leave in the entry's file: the expected value written otherwise, other values, odd text, or None
    (the file removed)."""
    value = str(entry["value"])
    same = [value, value + "\n", value + "  \n", " " + value, "\t".join(value.split(" "))]
    if entry.get("compare") == "cpulist" and value:
        cpus = value.split(",")
        same.append(",".join(reversed(cpus)))
    if entry.get("compare") == "choice":
        same += [f"[{value}] other", f"other [{value}]"]
    if entry["kind"] == "line":
        key = entry["key"]
        return st.sampled_from([f'{key}="{value}"\n', f"{key}={value}\n", f"{key}='{value}'\n", f"{key}=x{value}\n",
                                f"# {key}={value}\n", "", None])
    if entry["kind"] == "file":
        return st.sampled_from(["", "# changed\n", None])
    return st.one_of(st.sampled_from(same + ODD), st.text(alphabet="0123456789-,:/ []abno\t\n٣_", max_size=10),
                     st.none())


@st.composite
def drift(draw: st.DrawFn, node: Node) -> list[tuple[str, str | None]]:
    writable = [e for e in node.entries if e["kind"] in ("attr", "line", "file") and _path(node, e)]
    chosen = draw(st.lists(st.sampled_from(writable), min_size=1, max_size=4, unique_by=lambda e: _path(node, e)))
    changes = []
    for entry in chosen:
        path = _path(node, entry)
        assert path is not None
        if entry["kind"] == "line":
            # the line among the file's others, as an operator's edit leaves it
            text = draw(_variants(entry))
            if text is not None:
                kept = [line for line in (node.root / path).read_text().splitlines(True)
                        if not line.strip().startswith(entry["key"] + "=")]
                text = "".join(kept) + text
            changes.append((path, text))
        else:
            changes.append((path, draw(_variants(entry))))
    return changes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(data=st.data())
def test_verify_and_nodetune_check_report_the_same_drift(node: Node, data: st.DataObject) -> None:
    changes = data.draw(drift(node))
    saved = {}
    for path, _text in changes:
        full = node.root / path
        saved[path] = full.read_bytes() if full.exists() else None
    try:
        for path, text in changes:
            full = node.root / path
            if text is None:
                full.unlink(missing_ok=True)
            else:
                full.write_text(text)
        assert node.checker_drift() == node.verify_drift(), json.dumps(changes, ensure_ascii=False)
    finally:
        for path, content in saved.items():
            full = node.root / path
            if content is None:
                full.unlink(missing_ok=True)
            else:
                full.write_bytes(content)
                os.utime(full)
