"""IPoIB MTU under a subnet manager whose broadcast group is smaller than the port MTU (issue 14.5).

The kernel (ipoib_change_mtu) sets min(broadcast-group MTU - 4, requested) in datagram mode and returns success.
The simulated node models that cap (the spec's ``bcast_mtu``); nodetune must read the MTU back, report the cap with
its remedy, and verify against the effective value instead of rewriting and drifting on every run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine
from ansible_collections.nodetune.instinct.plugins.module_utils.apply.node import load
from ansible_collections.nodetune.instinct.plugins.module_utils.audit.verify import setting_findings
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import journal
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.support.specs import small_spec

pytestmark = pytest.mark.usefixtures("simulated_kernel")  # applies to simulated nodes in-process

AREAS = {"infiniband": {"nodetune_ipoib_mtu": "max", "nodetune_ipoib_mtu_change_allowed": True}}


def capped_node(tmp_path: Path, bcast_mtu: int = 2048) -> Path:
    spec = small_spec()
    spec["nics"][0].update({"mode": "datagram", "ib_mtu": 4096, "bcast_mtu": bcast_mtu, "mtu": 2044})
    dest = tmp_path / "node"
    simnode.build(spec, str(dest))
    return dest


def mtu(root: Path, name: str) -> int:
    return int((root / "sys/class/net" / name / "mtu").read_text())


def test_the_simulated_kernel_caps_the_mtu_at_the_broadcast_group(tmp_path: Path) -> None:
    root = capped_node(tmp_path)
    state = load(str(root), AREAS)
    engine.apply(state.root, state.settings, services=state.services)
    assert (mtu(root, "ib0"), mtu(root, "ib1")) == (2044, 4092)


def test_a_capped_mtu_is_reported_with_its_remedy_and_verified_at_the_effective_value(tmp_path: Path) -> None:
    root = capped_node(tmp_path)
    state = load(str(root), AREAS)
    first = engine.apply(state.root, state.settings, services=state.services)
    assert first["changed"]
    assert [(u["target"], u["expected"], u["actual"]) for u in first["unconfirmed"]] == [("ib0", "4092", "2044")]
    again = load(str(root), AREAS)
    ib0 = next(s for s in again.settings if s.id == "ib.mtu" and s.target == "ib0")
    assert ib0.value == "2044"
    message = " ".join(again.context.warnings)
    assert "ib0" in message and "2044" in message and "4092" in message and "subnet manager" in message
    assert "mtu=5" in message  # the remedy: the partition's MTU in OpenSM's partitions.conf
    for run in range(3):
        settings = load(str(root), AREAS).settings
        result = engine.apply(again.root, settings, services=again.services)
        # Nothing at all is rewritten: the first apply wrote the checker's expectation (check.d/infiniband.json)
        # with the MTU the kernel capped the interface at, the value every later plan asks for.
        assert (result["changed"], result["actions"]) == (False, []), run
    settings = load(str(root), AREAS).settings
    drift = [f for f in setting_findings(again.root, settings, again.services) if f.status != "ok"]
    assert drift == []
    # the boot restore asks for the requested MTU again, so the interface rises once the SM's group allows it
    from ansible_collections.nodetune.instinct.plugins.module_utils.areas.persist import STATE_FILE
    restore = json.loads((root / (STATE_FILE % "infiniband")).read_text())["settings"]
    assert {e["target"]: e["value"] for e in restore if e["id"] == "ib.mtu"} == {"ib0": "4092", "ib1": "4092"}


def test_the_node_local_checker_expects_the_capped_mtu_from_the_first_apply(tmp_path: Path) -> None:
    """Between the first apply and the next Ansible run a scheduler runs nodetune-check: it must expect the MTU the
    kernel set (2044, the 2K broadcast group minus the 4-byte IPoIB header), not report drift on a node apply just
    tuned; and it still catches the MTU moving away from that."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_check

    root = capped_node(tmp_path)
    state = load(str(root), AREAS)
    result = engine.apply(state.root, state.settings, services=state.services)
    expected = json.loads((root / node_check.CONFIG_DIR / "infiniband.json").read_text())["settings"]
    assert {e["target"]: e["value"] for e in expected if e["id"] == "ib.mtu"} == {"ib0": "2044", "ib1": "4092"}
    checker_files = sorted(a["target"] for a in result["actions"] if a["id"] == "check.expected")
    assert checker_files == ["infiniband", "persist"]  # infiniband.json reported once, as written last
    assert node_check.problems(str(root)) == []
    assert [f for f in setting_findings(state.root, load(str(root), AREAS).settings, state.services)
            if f.status != "ok"] == []
    (root / "sys/class/net/ib0/mtu").write_text("1500\n")
    assert node_check.problems(str(root)) == ["ib.mtu ib0: expected 2044, found 1500"]


def test_once_the_cap_is_gone_the_requested_mtu_is_asked_for_again(tmp_path: Path) -> None:
    root = capped_node(tmp_path)
    state = load(str(root), AREAS)
    engine.apply(state.root, state.settings, services=state.services)
    # the SM's partition was raised to 4K and the kernel raised the interface on rejoin
    (root / "sys/class/net/ib0/mtu").write_text("4092\n")
    later = load(str(root), AREAS)
    assert next(s.value for s in later.settings if s.id == "ib.mtu" and s.target == "ib0") == "4092"
    assert not later.context.warnings or "ib0" not in " ".join(later.context.warnings)


def test_the_journal_is_read_once_for_all_interfaces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The capped writes come from the journal: one read (and one validation) per plan, not one per interface (a
    no-op plan of an 8-HCA node read and validated the whole journal 8 times)."""
    root = capped_node(tmp_path)
    state = load(str(root), AREAS)
    engine.apply(state.root, state.settings, services=state.services)
    reads = []
    real = journal.load_journal
    monkeypatch.setattr(journal, "load_journal", lambda node_root: reads.append(1) or real(node_root))
    again = load(str(root), AREAS)
    assert len([s for s in again.settings if s.id == "ib.mtu"]) == 2
    assert {s.target: s.value for s in again.settings if s.id == "ib.mtu"} == {"ib0": "2044", "ib1": "4092"}
    assert len(reads) == 1
