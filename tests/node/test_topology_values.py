"""The modules' discovery reads the node's structure, not its current values (issue 28 item 4; discover/topology.py
``values=False``): each value is read where it is used, once. The governors and EPP, the idle states' disabled CPUs
and the IRQs' affinities are left None by discovery; the Settings read the values they set when they are compared,
node.load reads the placed IRQs' effective CPUs for verify, and the managed IRQs' CPUs only for a Layout a module
returns whole. What a run plans, checks and returns is the same as from a discovery that read everything.

Also here: the /proc/interrupts rows without their count columns (irq.numbered_tails), the evidence under which a
structure store keeps the IRQ rows, and the idle states a store keeps for a discovery without values.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import node as node_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import persist
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import verify as verify_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.discover import irq as irq_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.discover import structure
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.irq import (
    interrupt_rows,
    interrupt_tails,
    numbered_tails,
    read_affinities,
    read_interrupts,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import layout as layout_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.lab_vars import AREAS
from tests.support.specs import LAB_SPECS

CPU = "sys/devices/system/cpu"
KEPT_STRUCTURE = ("cpus", "cpufreq", "cpuidle", "l3_domains", "pci", "irqs")


def without_values(topology: dict[str, Any]) -> dict[str, Any]:
    """A Topology with values, less what a discovery without values leaves None."""
    out = copy.deepcopy(topology)
    out["cpufreq"].update(governors=None, epp=None)
    for state in out["cpuidle"]["states"]:
        state["disabled_cpus"] = None
    for irq in out["irqs"]:
        irq.update(smp_affinity_list=None, effective_affinity_list=None)
    return out


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The full-size MI300X lab node as the lab's areas tuned it (siblings offline, idle states disabled, NIC IRQs
    pinned), its structure kept by that run: to copy, never to write."""
    from ansible_collections.nodetune.instinct.plugins.module_utils import rootfs
    from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine
    from ansible_collections.nodetune.lab.plugins.module_utils import simkernel, simnode

    root = tmp_path_factory.mktemp("values") / "node"
    simnode.build(str(LAB_SPECS / "mi300x.yml"), str(root))
    simkernel.install()
    try:
        state = node_mod.load(str(root), AREAS, {})
        engine.apply(state.root, state.settings, services=state.services)
    finally:
        rootfs.use_backend(None)
    store = structure.StructureStore(str(root), writable=True)
    discover(str(root), irq_counts=False, structure=store, values=False)
    assert store.save()
    return root


@pytest.fixture
def node(tuned: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "node"
    shutil.copytree(tuned, dest, symlinks=True)
    return dest


# ------------------------------------------------------------------------------------------------ the same Topology
def test_a_discovery_without_values_is_one_with_them_less_the_values(tuned: Path) -> None:
    full = discover(str(tuned), irq_counts=False)
    assert full["cpufreq"]["governors"] and any(s["disabled_cpus"] for s in full["cpuidle"]["states"])
    lean = discover(str(tuned), irq_counts=False, values=False)
    assert lean == without_values(full)
    store = structure.StructureStore(str(tuned))  # read only: the tuned node's kept structure
    assert discover(str(tuned), irq_counts=False, structure=store, values=False) == lean
    assert store.hits == list(KEPT_STRUCTURE)


def test_every_real_capture_discovers_its_structure_as_with_values_and_keeps_it(tmp_path: Path) -> None:
    """The real kernels' /proc/interrupts and sysfs (../shared/fixtures/real): the values-free Topology is the full
    one less its values, the same again from what a store kept of it (in memory), IRQ rows included where the
    capture has them; every affinity read afterwards is what the full discovery read."""
    from tests import realdata

    realdata.require_real()
    kept_irqs = 0
    for name, root in realdata.all_roots().items():
        full = discover(str(root), irq_counts=False)
        lean = discover(str(root), irq_counts=False, values=False)
        assert lean == without_values(full), name
        store = structure.StructureStore(str(tmp_path))  # kept in memory: never saved
        discover(str(root), irq_counts=False, structure=store, values=False)
        again = discover(str(root), irq_counts=False, structure=store, values=False)
        assert again == lean, name
        kept_irqs += "irqs" in store.hits
        read_affinities(Root(str(root)), again["irqs"], again["warnings"])
        assert again["irqs"] == full["irqs"], name
    assert kept_irqs  # at least one capture's IRQ rows were kept and taken back


def test_read_affinities_reads_what_a_discovery_with_values_reads(tuned: Path) -> None:
    full = discover(str(tuned), irq_counts=False)
    lean = discover(str(tuned), irq_counts=False, structure=structure.StructureStore(str(tuned)), values=False)
    read_affinities(Root(str(tuned)), lean["irqs"], lean["warnings"])
    assert lean["irqs"] == full["irqs"]
    assert any(irq["effective_affinity_list"] for irq in lean["irqs"])


def test_node_load_plans_and_checks_as_from_a_discovery_with_values(node: Path, monkeypatch: pytest.MonkeyPatch
                                                                    ) -> None:
    """On the tuned node with what the IRQ checks look for: one pinned NIC IRQ delivered elsewhere while asked where
    planned (pending: not moved yet), one asked and delivered elsewhere (drift): the findings, the Layout returned
    whole and the Settings are the same."""
    lean = node_mod.load(str(node), AREAS, {}, structure=structure.StructureStore(str(node)))
    pinned = lean.layout["irq_affinity"]
    outside = next(cpu for cpu in lean.topology["cpu_lists"]["online"] if cpu not in pinned[0]["cpus"])
    for entry, files in ((pinned[0], ("effective_affinity_list",)),
                         (pinned[1], ("effective_affinity_list", "smp_affinity_list"))):
        for name in files:
            (node / f"proc/irq/{entry['irq']}/{name}").write_text(f"{outside}\n")
    real_discover = node_mod.discover
    monkeypatch.setattr(node_mod, "discover", lambda *a, **k: real_discover(*a, **dict(k, values=True)))
    full = node_mod.load(str(node), AREAS, {})
    monkeypatch.undo()
    lean = node_mod.load(str(node), AREAS, {}, structure=structure.StructureStore(str(node)))

    def findings(state: node_mod.NodeState) -> list[dict[str, Any]]:
        return [f.to_dict() for f in verify_mod.verify_settings(state, AREAS)]

    seen = findings(lean)
    assert seen == findings(full)
    nic = {f["target"]: f for f in seen if f["id"] == "irq.nic_local" and f["source"] == "layout"}
    assert nic[f"irq {pinned[0]['irq']} effective"]["status"] == "ok"  # pending
    assert nic[f"irq {pinned[0]['irq']} effective"]["actual"].endswith(verify_mod.PENDING)
    assert nic[f"irq {pinned[1]['irq']} effective"]["status"] == "drift"
    assert [s.to_dict() for s in lean.settings] == [s.to_dict() for s in full.settings]
    assert node_mod.with_managed_cpus(lean) == full.layout
    assert all(entry["cpus"] for entry in full.layout["managed_irqs"])


def test_the_managed_irqs_cpus_are_read_only_for_a_layout_returned_whole(node: Path) -> None:
    state = node_mod.load(str(node), AREAS, {}, structure=structure.StructureStore(str(node)))
    managed = state.layout["managed_irqs"]
    assert managed and all(entry["cpus"] is None and entry["source"] is None for entry in managed)
    whole = node_mod.with_managed_cpus(state)
    assert all(entry["cpus"] and entry["source"] == "effective_affinity_list" for entry in whole["managed_irqs"])
    assert whole["managed_irqs"] == layout_mod.plan(discover(str(node), irq_counts=False),
                                                    node_mod.layout_policy(AREAS, {}))["managed_irqs"]


def test_the_tune_module_returns_the_whole_layout_with_the_managed_irqs_cpus(node: Path) -> None:
    """``return_layout``: what the tune module returns is the Layout planned from a discovery with every value."""
    from tests.support.inprocess import run_lab_module

    result = run_lab_module("tune", {"root": str(node), "areas": AREAS, "return_layout": True}, check=True)
    assert result["rc"] == 0 and not result["changed"], result.get("msg")
    managed = result["layout"]["managed_irqs"]
    assert len(managed) > 100 and all(entry["cpus"] for entry in managed)
    assert managed == layout_mod.plan(discover(str(node), irq_counts=False),
                                      node_mod.layout_policy(AREAS, {}))["managed_irqs"]


@pytest.mark.parametrize("change", ["none", "an action folder missing", "a device without vectors"])
def test_irq_numbers_found_from_the_topology_as_from_the_files(node: Path, change: str) -> None:
    """The rule (rules.irq_numbers) lists a named device's msi_irqs/ and each vector's /proc/irq/N/, and reads
    /proc/interrupts for a name without its device (eno1-TxRx-0): from this run's Topology it finds the same
    numbers, for every name the node has, one of another device, and names that are not there."""
    topology = discover(str(node), irq_counts=False, values=False)
    names = [irq["name"] for irq in topology["irqs"] if irq["name"]]
    comp = next(name for name in names if name.startswith("mlx5_comp") and "@pci:" in name)
    if change == "an action folder missing":  # its row still names it: found through /proc/interrupts
        names.remove(comp)
        shutil.rmtree(node / f"proc/irq/{persist.irq_numbers(Root(str(node)), [comp])[comp]}/{comp}")
        topology = discover(str(node), irq_counts=False, values=False)
    elif change == "a device without vectors":
        shutil.rmtree(node / f"sys/bus/pci/devices/{comp.partition('@pci:')[2]}/msi_irqs")
        topology = discover(str(node), irq_counts=False, values=False)
    assert any("@pci:" not in name for name in names)
    wanted = names + [comp, "mlx5_comp999@pci:" + comp.partition("@pci:")[2], "nothing-here"]
    root = Root(str(node))
    found = persist.irq_numbers(root, wanted, topology)
    assert found == persist.irq_numbers(root, wanted)
    assert "nothing-here" not in found and len(found) >= len(set(names))


# ------------------------------------------------------------------------------------------------ the idle states kept
def other_idle_driver(root: Path) -> None:
    (root / CPU / "cpuidle/current_driver").write_text("intel_idle\n")


def fewer_idle_states(root: Path) -> None:
    """The driver registered the CPUs' states again without the deepest (acpi_processor_cst_has_changed)."""
    for states in (root / CPU).glob("cpu[0-9]*/cpuidle"):
        deepest = max(states.glob("state[0-9]*"), key=lambda p: int(p.name[5:]), default=None)
        if deepest is not None:
            shutil.rmtree(deepest)


def cpu_offline(root: Path) -> None:
    online = Root(str(root)).read(CPU + "/online")
    last = int(online.replace("-", ",").split(",")[-1])
    (root / CPU / f"cpu{last}/online").write_text("0\n")
    (root / CPU / "online").write_text(online.rsplit("-", 1)[0] + f"-{last - 1}\n" if "-" in online else "0\n")
    shutil.rmtree(root / CPU / f"cpu{last}/cpuidle", ignore_errors=True)


@pytest.mark.parametrize("change", [other_idle_driver, fewer_idle_states, cpu_offline])
def test_a_change_of_the_idle_states_is_read_afresh(node: Path, change: Any) -> None:
    change(node)
    store = structure.StructureStore(str(node))
    assert discover(str(node), irq_counts=False, structure=store, values=False) == discover(
        str(node), irq_counts=False, values=False)
    assert "cpuidle" not in store.hits


# ------------------------------------------------------------------------------------------------ /proc/interrupts rows
HEADER = b"           CPU0       CPU1\n"
ROW = b"  24:          5          7  IR-PCI-MSIX-0000:41:00.0    0-edge      mlx5_comp0@pci:0000:41:00.0\n"
OTHERS = b" NMI:          1          2   Non-maskable interrupts\n ERR:          3\n"


def test_the_tails_are_the_rows_without_their_counts() -> None:
    data = HEADER + ROW + OTHERS
    tails = numbered_tails(data)
    assert tails == "  24:  IR-PCI-MSIX-0000:41:00.0    0-edge      mlx5_comp0@pci:0000:41:00.0"
    assert numbered_tails(data, checked=True) == tails
    counted = data.replace(b"         5          7", b"4294967295         70")  # counts move, up to 10 digits
    assert numbered_tails(counted) == tails


@pytest.mark.parametrize("change", [
    (b"mlx5_comp0@pci", b"mlx5_comp1@pci"),  # another action name
    (b"0000:41:00.0    0-edge", b"0000:41:00.0    1-edge"),  # another hardware IRQ
    (b"MSIX-0000:41", b"MSIX-0000:42"),  # another chip
    (b"  24:", b"  25:"),  # another number
])
def test_the_tails_change_with_any_part_of_a_row_but_its_counts(change: tuple[bytes, bytes]) -> None:
    data = HEADER + ROW + OTHERS
    assert numbered_tails(data.replace(*change)) != numbered_tails(data)


def test_the_tails_change_with_a_row_added_or_gone() -> None:
    added = HEADER + ROW + ROW.replace(b"  24:", b"  25:").replace(b"comp0", b"comp1") + OTHERS
    gone = HEADER + OTHERS
    tails = numbered_tails(HEADER + ROW + OTHERS)
    assert len({numbered_tails(added), numbered_tails(gone), tails}) == 3


@pytest.mark.parametrize("data", [
    HEADER + b"  24:          5\n" + ROW,  # a row short of its columns
    HEADER + b"no colon here\n" + ROW,  # a line without its label
    HEADER + b"  24:1234567890123456789012  IR-PCI-MSIX-0000:41:00.0    0-edge      x\n",  # no column in place
])
def test_rows_that_are_not_the_kernels_are_never_kept(data: bytes) -> None:
    assert numbered_tails(data, checked=True) is None


@pytest.mark.parametrize("data", [b"", b"garbage\n", HEADER.replace(b"\n", b"\r\n") + ROW, "CPU0\n 1: ï\n".encode()])
def test_a_file_that_is_not_plain_proc_interrupts_gives_no_tails(data: bytes) -> None:
    assert numbered_tails(data) is None


def test_the_lab_nodes_rows_are_kept_as_interrupt_rows_reads_them(tuned: Path) -> None:
    data = (tuned / "proc/interrupts").read_bytes()
    assert numbered_tails(data, checked=True) == numbered_tails(data)
    rows = [r for r in interrupt_rows(data, counts=False) if isinstance(r["irq"], int)]
    store = structure.StructureStore(str(tuned))
    topology = discover(str(tuned), irq_counts=False, structure=store, values=False)
    assert "irqs" in store.hits
    assert [(i["irq"], i["chip"], i["hwirq"], i["name"]) for i in topology["irqs"]] == sorted(
        (r["irq"], r["chip"], r["hwirq"], r["name"]) for r in rows)


# Lines a generated /proc/interrupts is made of: the kernel's, and what it never prints.
_LINES = st.sampled_from([
    ROW, ROW.replace(b"  24:", b" 125:"), ROW.replace(b"comp0", b"comp17"), OTHERS, b"  24:          5\n",
    b"no colon here\n", b"\n", b"  26:1234567890123456789012  IR-PCI-MSIX    0-edge      x\n", b"ERR: 0\n",
    b"  27:          0          0  IO-APIC    9-fasteoi   acpi", "  28: \u00ef\n".encode(), b"  29:\r\n"])


def _tails_read_in_pieces(tmp_path: Path, data: bytes, chunk: int, monkeypatch: pytest.MonkeyPatch) -> tuple:
    (tmp_path / "proc").mkdir(exist_ok=True)
    (tmp_path / "proc/interrupts").write_bytes(data)
    monkeypatch.setattr(irq_mod, "_TAILS_CHUNK", chunk)
    return interrupt_tails(Root(str(tmp_path)))


@settings(max_examples=300, deadline=None)
@given(header=st.sampled_from([HEADER, b"CPU0\n", b"  CPU0 CPU1 CPU2", b"garbage\n", b""]),
       lines=st.lists(_LINES, max_size=8), chunk=st.sampled_from([1, 3, 16, 64, 1 << 18]))
def test_the_tails_read_in_pieces_are_those_of_the_whole_file(tmp_path_factory: pytest.TempPathFactory,
                                                               header: bytes, lines: list, chunk: int) -> None:
    """interrupt_tails (the module's read: one buffer, a piece at a time) gives numbered_tails of the whole file,
    whatever the file holds and wherever its lines fall across the pieces (a buffer of 1 byte grows)."""
    data = header + b"".join(lines)
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert _tails_read_in_pieces(tmp_path_factory.mktemp("node"), data, chunk, monkeypatch) == (
            True, numbered_tails(data))


def test_the_lab_nodes_tails_read_in_pieces_are_those_of_the_whole_file(tuned: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    root = Root(str(tuned))
    whole = numbered_tails(read_interrupts(root))
    assert whole and whole.count("\n") > 100
    for chunk in (4096, 1 << 18):
        monkeypatch.setattr(irq_mod, "_TAILS_CHUNK", chunk)
        assert interrupt_tails(root) == (True, whole)
    assert interrupt_tails(Root(str(tuned / "sys"))) == (False, None)  # no proc/interrupts there


def test_a_no_op_discovery_reads_the_rows_tails_not_the_whole_file(tuned: Path, node: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """With the structure store, the modules' discovery takes the IRQ rows from their tails: /proc/interrupts is not
    read whole (a 4.8 MB bytes object at 384 CPUs); where the rows are new it is, and they are learned."""
    whole_reads: list = []
    monkeypatch.setattr(irq_mod, "read_interrupts", lambda root: whole_reads.append(root) or read_interrupts(root))
    store = structure.StructureStore(str(tuned))  # read only: the tuned node's kept structure
    lean = discover(str(tuned), irq_counts=False, structure=store, values=False)
    assert "irqs" in store.hits and whole_reads == []
    assert lean == discover(str(tuned), irq_counts=False, values=False) and len(whole_reads) == 1  # no store: whole
    interrupts = node / "proc/interrupts"
    interrupts.write_bytes(interrupts.read_bytes().replace(b"mlx5_comp0@", b"mlx5_comp9@", 1))
    store = structure.StructureStore(str(node), writable=True)
    changed = discover(str(node), irq_counts=False, structure=store, values=False)
    assert "irqs" not in store.hits and len(whole_reads) == 2 and store.save()
    assert any(irq["name"].startswith("mlx5_comp9@") for irq in changed["irqs"])
    store = structure.StructureStore(str(node))
    assert discover(str(node), irq_counts=False, structure=store, values=False) == changed
    assert "irqs" in store.hits and len(whole_reads) == 2  # learned: the tails again, the file not read whole


# ------------------------------------------------------------------------------------------------ a Setting read once
def reads_per_setting(monkeypatch: pytest.MonkeyPatch, args: dict[str, Any], check: bool = False
                      ) -> tuple[dict[str, Any], dict[str, int]]:
    """One tune call in process (tests/support/inprocess.py), the reads of each Setting's current value counted."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine
    from ansible_collections.nodetune.instinct.plugins.module_utils.plan import setting as setting_mod

    from tests.support.inprocess import run_lab_module

    counted: dict[str, int] = {}
    real = setting_mod.read_current

    def read_current(root: Any, setting: Any, services: Any = None) -> Any:
        counted[setting.uid] = counted.get(setting.uid, 0) + 1
        return real(root, setting, services)

    monkeypatch.setattr(engine, "read_current", read_current)
    monkeypatch.setattr(verify_mod, "read_current", read_current)
    result = run_lab_module("tune", args, check=check)
    monkeypatch.undo()
    return result, counted


@pytest.mark.parametrize("check", [False, True])
def test_the_audit_of_a_run_that_wrote_nothing_reads_no_setting_again(node: Path, monkeypatch: pytest.MonkeyPatch,
                                                                        check: bool) -> None:
    args = {"root": str(node), "areas": AREAS, "verify": {}}
    result, counted = reads_per_setting(monkeypatch, args, check=check)
    assert result["rc"] == 0 and not result["changed"], result.get("msg")
    assert len(counted) == result["settings"] > 1000 and set(counted.values()) == {1}
    from tests.support.inprocess import run_lab_module

    audit = run_lab_module("verify", {"root": str(node), "areas": AREAS})  # reads every Setting itself
    assert audit["rc"] == 0 and result["verify"]["summary"] == audit["summary"]
    assert audit["summary"]["counts"]["ok"] > 1000


def test_the_audit_after_a_write_reads_the_node_again(node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A governor changed behind nodetune's back: the apply reads it (drift), writes it, and its audit reads every
    Setting again, after the writes: no drift, and the governor it reports is the one written."""
    governor = next((node / CPU / "cpufreq").glob("policy*/scaling_governor"))
    governor.write_text("powersave\n")
    args = {"root": str(node), "areas": AREAS, "verify": {}}
    result, counted = reads_per_setting(monkeypatch, args)
    assert result["rc"] == 0 and result["changed"] and [a["id"] for a in result["actions"]] == ["cpu.governor"]
    written = result["actions"][0]["target"]
    # the plan (under the lock the module holds from discovery on: not planned again) and the audit of the node as
    # written; the written Setting once more, read back after its write (engine.unconfirmed)
    assert {uid: n for uid, n in counted.items() if n != 2} == {f"cpu.governor[{written}]": 3}
    assert "cpu.governor" not in result["verify"]["summary"]["drift_ids"]
    assert governor.read_text().strip() == "performance"
