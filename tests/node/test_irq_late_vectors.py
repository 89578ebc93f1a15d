"""IRQ pinning that survives late vectors and reboots (issue 24, items 7 and 8), on simulated nodes.

mlx5 creates its completion vectors on first use since Linux 6.5 (commit f14c1a14e632: mlx5_comp_eqn_get() ->
create_comp_eq() -> comp_irq_request_pci(), drivers/net/ethernet/mellanox/mlx5/core/eq.c): after a reboot only the
vectors in use exist, the others appear when a job opens them, with new IRQ numbers and the driver's default
affinity. IRQ numbers also move between boots (here: more NVMe queues from a modprobe option), so irqbalance's
``--banirq=N`` went stale; ban mode now names the pinned IRQs (irqbalance's --policyscript).
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine, node
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import irq as area_irq
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import verify
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.irq import parse_interrupts
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_check
from ansible_collections.nodetune.lab.plugins.module_utils import simboot, simnode
from ansible_collections.nodetune.lab.plugins.module_utils.simkernel import sim_root

from tests.support.lab_vars import AREAS

pytestmark = pytest.mark.usefixtures("simulated_kernel")  # applies to simulated nodes in-process

NICS = {"ib0": "0000:03:00.0", "ib1": "0000:83:00.0"}
# Two sockets, a ConnectX-7 on each with 8 completion vectors, of which the first 2 exist after boot (the IPoIB
# channels), and an NVMe drive on a bus between them: its queue count decides the numbers of ib1's IRQs.
SPEC = {
    "name": "late",
    "kernel": {"release": "6.8.0-60-generic"},
    "cpu": {"model": "EPYC 9654", "sockets": 2, "cores_per_socket": 8, "threads_per_core": 2, "caches": False},
    "irqbalance": {"installed": True, "enabled": True},
    "nics": [{"name": name, "model": "ConnectX-7", "bdf": bdf, "comp_vectors": 8, "comp_vectors_at_boot": 2}
             for name, bdf in NICS.items()],
    "nvme": [{"model": "CM7-R", "bdf": "0000:11:00.0"}],
}
LATE = sorted(f"mlx5_comp{i}@pci:{bdf}" for bdf in NICS.values() for i in range(2, 8))
BAN = copy.deepcopy(AREAS)
BAN["irq_affinity"]["nodetune_irqbalance_mode"] = "ban"


@pytest.fixture
def fresh(fresh_tree: Callable[[Any], Path]) -> Path:
    """A node of the test's own: built again in memory, which costs less than copying a built one."""
    return fresh_tree(SPEC)


def interrupts(root: Path) -> dict:
    """Action name -> IRQ number, as discovery parses /proc/interrupts."""
    return {row["name"]: row["irq"] for row in parse_interrupts((root / "proc/interrupts").read_text())[1]
            if isinstance(row["irq"], int)}


def use_all(root: Path) -> None:
    for name in NICS:
        simnode.use_comp_vectors(str(root), name)


def tuned(root: Path, areas: dict) -> None:
    state = node.load(str(root), areas, {})
    result = engine.apply(state.root, state.settings, services=state.services)
    assert result["changed"] and not result["unconfirmed"]


def findings(root: Path, areas: dict = AREAS) -> list:
    state = node.load(str(root), areas, {})
    return verify.verify_settings(state, areas)


def policy(root: Path, device: Path, irq: int) -> str:
    """What the policy script tells irqbalance, run as irqbalance runs it: ``exec <script> <device path> <irq>``
    (classify.c, get_irq_user_policy()); below a test's root, the device path starts with that root."""
    run = subprocess.run(["sh", "-c", 'exec "$0" "$1" "$2"', str(root / area_irq.POLICY_SCRIPT), str(device), str(irq)],
                         capture_output=True, text=True, check=True)
    return run.stdout


def drifted(found: list) -> set:
    return {(f.id, f.target) for f in found if f.status == "drift"}


def pending(found: list) -> set:
    return {f.target for f in found if f.id == "irq.nic_local" and f.status == "not_applicable"}


# ------------------------------------------------------------------------------------------------ the simulator
def test_the_lab_creates_mlx5_completion_vectors_on_first_use(fresh: Path) -> None:
    boot = interrupts(fresh)
    assert {f"mlx5_{v}@pci:{NICS['ib0']}" for v in ("async0", "comp0", "comp1")} <= set(boot)
    assert not set(LATE) & set(boot)
    created = simnode.use_comp_vectors(str(fresh), "ib0", [5, 2])["created"]
    # in the order of use, each with the next free IRQ number, the driver's default CPU (mlx5_cpumask_default_spread:
    # the vector's place among the online CPUs nearest the device: CPUs 0-7 on socket 0, ib0's) and a fresh MSI-X entry
    assert [(c["name"], c["irq"], c["cpu"]) for c in created] == [
        (f"mlx5_comp5@pci:{NICS['ib0']}", max(boot.values()) + 1, 5),
        (f"mlx5_comp2@pci:{NICS['ib0']}", max(boot.values()) + 2, 2)]
    number = created[0]["irq"]
    assert (fresh / f"proc/irq/{number}/smp_affinity_list").read_text() == "5\n"
    assert (fresh / f"proc/irq/{number}/effective_affinity_list").read_text() == "5\n"
    assert (fresh / f"proc/irq/{number}/mlx5_comp5@pci:{NICS['ib0']}").is_dir()
    assert (fresh / f"sys/bus/pci/devices/{NICS['ib0']}/msi_irqs/{number}").read_text() == "msix\n"
    rows = [r for r in parse_interrupts((fresh / "proc/interrupts").read_text())[1] if r["irq"] == number]
    assert [(r["chip"], r["hwirq"]) for r in rows] == [(f"IR-PCI-MSIX-{NICS['ib0']}", "3")]
    again = simnode.use_comp_vectors(str(fresh), "ib0", [2, 3])  # an existing vector is reused, not created again
    assert [c["name"] for c in again["created"]] == [f"mlx5_comp3@pci:{NICS['ib0']}"]
    assert again["existing"] == [f"mlx5_comp2@pci:{NICS['ib0']}"]
    # a reboot takes the created vectors away again: their IRQs are runtime state
    simnode.reboot(str(fresh))
    assert interrupts(fresh) == boot and not (fresh / f"proc/irq/{number}").exists()


@pytest.mark.parametrize(("change", "words"), [
    ({"kernel": {"release": "6.1.0-30-amd64"}}, ["nics[0].comp_vectors_at_boot", "6.1.0-30-amd64", "f14c1a14e632"]),
    ({"nics": [{"name": "ib0", "model": "ConnectX-7", "bdf": "0000:03:00.0", "comp_vectors": 8,
                "comp_vectors_at_boot": 9}]}, ["nics[0].comp_vectors_at_boot", "9", "from 0 to 8"]),
])
def test_late_vectors_need_a_kernel_that_has_them(change: dict, words: list) -> None:
    with pytest.raises(simnode.SpecError) as raised:
        simnode.load_spec(dict(SPEC, **change))
    for word in words:
        assert word in str(raised.value)


def test_using_a_vector_the_nic_does_not_have_is_refused(fresh: Path) -> None:
    with pytest.raises(simnode.SpecError, match=r"vectors \[8\] are not valid for ib0: it has completion vectors 0-7"):
        simnode.use_comp_vectors(str(fresh), "ib0", [8])
    with pytest.raises(simnode.SpecError, match="nic 'eth9' is not valid.*ib0 0000:03:00.0"):
        simnode.use_comp_vectors(str(fresh), "eth9")


# ------------------------------------------------------------------------------------------------ item 7
def test_late_vectors_are_pending_after_a_reboot_and_pinned_when_they_appear(fresh: Path) -> None:
    use_all(fresh)  # a job ran: every vector exists when the node is tuned
    tuned(fresh, AREAS)
    reboot = simnode.reboot(str(fresh))
    # the boot restore pins what is there; the vectors not created yet are pending, not failures ("IRQ not found")
    assert reboot["boot_restore"]["failed"] == []
    assert sorted(reboot["boot_restore"]["pending"]) == LATE
    found = findings(fresh)
    assert drifted(found) == set()
    assert pending(found) == set(LATE)
    assert node_check.problems(str(fresh)) == []  # the node-local check does not flag them either
    # a run before they appear changes nothing (and keeps them in the boot restore)
    state = node.load(str(fresh), AREAS, {})
    assert engine.apply(state.root, state.settings, services=state.services)["changed"] is False
    # a job opens them: the driver puts each on its default CPU, which verify reports until the timer pins them
    use_all(fresh)
    late_irqs = {f"irq {n}" for name, n in interrupts(fresh).items() if name in LATE}
    found = findings(fresh)
    assert {t for i, t in drifted(found) if i == "irq.nic_local" and not t.endswith("effective")} == late_irqs
    assert pending(found) == set()
    tick = simboot.run_irq_repin(sim_root(str(fresh)))
    assert sorted(tick["pinned"]) == LATE and tick["failed"] == [] and tick["pending"] == []
    assert drifted(findings(fresh)) == set()
    assert simboot.run_irq_repin(sim_root(str(fresh)))["pinned"] == []  # each is pinned once
    # moved by hand afterwards: the timer leaves it (it pinned that IRQ already), verify reports it
    moved = sorted(late_irqs)[0]
    sim_root(str(fresh)).write(f"proc/irq/{moved.split()[1]}/smp_affinity_list", "0")
    assert simboot.run_irq_repin(sim_root(str(fresh)))["pinned"] == []
    assert ("irq.nic_local", moved) in drifted(findings(fresh))


# ------------------------------------------------------------------------------------------------ item 8
def test_ban_mode_names_the_pinned_irqs_so_a_renumbering_reboot_leaves_them_banned(fresh: Path) -> None:
    use_all(fresh)
    tuned(fresh, BAN)
    before = interrupts(fresh)
    # more NVMe queues at the next boot: every IRQ after the NVMe drive's (all of ib1's) gets another number
    (fresh / "etc/modprobe.d").mkdir(parents=True, exist_ok=True)
    (fresh / "etc/modprobe.d/nvme.conf").write_text("options nvme write_queues=4\n")
    simnode.reboot(str(fresh))
    ib1 = f"mlx5_comp0@pci:{NICS['ib1']}"
    assert interrupts(fresh)[ib1] != before[ib1]
    assert drifted(findings(fresh, BAN)) == set()  # irq.irqbalance included: nothing in it depends on numbers
    config = (fresh / "etc/default/irqbalance").read_text()
    assert f'IRQBALANCE_ARGS="--policyscript=/{area_irq.POLICY_SCRIPT}"' in config and "--banirq" not in config
    use_all(fresh)  # and the late vectors, numbered after everything else this time
    simboot.run_irq_repin(sim_root(str(fresh)))
    after = interrupts(fresh)
    # irqbalance runs the policy script for each IRQ it finds as "exec <script> <device path> <irq>"
    listed = (fresh / area_irq.BANNED_FILE).read_text()
    for name, number in after.items():
        bdf = name.partition("@pci:")[2] or "0000:11:00.0"
        device = fresh / "sys/bus/pci/devices" / bdf
        pinned = name.startswith("mlx5_comp")
        assert policy(fresh, device, number) == ("ban=true\n" if pinned else ""), (name, number)
        assert (name + "\n" in listed) is pinned
    # an IRQ without a device (irqbalance passes /sys) is not banned
    assert policy(fresh, fresh / "sys", 0) == ""


def test_ban_mode_bans_a_vector_not_created_yet_when_it_appears(fresh: Path) -> None:
    """After a reboot, before a job opens them: the late vectors are in the banned list already, so irqbalance,
    which runs the policy script for an IRQ when it appears, never balances them before the timer pins them."""
    use_all(fresh)
    tuned(fresh, BAN)
    simnode.reboot(str(fresh))
    state = node.load(str(fresh), BAN, {})
    assert engine.apply(state.root, state.settings, services=state.services)["changed"] is False
    assert set(LATE) <= set((fresh / area_irq.BANNED_FILE).read_text().splitlines())
    created = simnode.use_comp_vectors(str(fresh), "ib1", [2])["created"][0]
    assert policy(fresh, fresh / "sys/bus/pci/devices" / NICS["ib1"], created["irq"]) == "ban=true\n"
    # the timer's next run pins it and records it; verify then finds the node as tuned, with ib1's others pending
    assert simboot.run_irq_repin(sim_root(str(fresh)))["pinned"] == [created["name"]]
    assert json.loads((fresh / "run/nodetune/irqs-pinned.json").read_text())[created["name"]] == created["irq"]
    found = findings(fresh, BAN)
    assert drifted(found) == set() and pending(found) == set(LATE) - {created["name"]}


# ------------------------------------------------------------------------------------------------ stable placement
# Two ConnectX-7 on socket 0's NUMA node, each with 2 of its 8 completion vectors after boot: each NIC's vectors
# go round-robin over the node's cores from a start of its own, by vector number (layout._place_nic_irqs).
SHARED = dict(SPEC, name="late-shared", nics=[
    {"name": name, "model": "ConnectX-7", "bdf": bdf, "numa_node": 0, "comp_vectors": 8, "comp_vectors_at_boot": 2}
    for name, bdf in (("ib0", "0000:03:00.0"), ("ib1", "0000:05:00.0"))])


def pins(state: node.NodeState) -> dict:
    """Vector name -> the CPUs its irq.nic_local Setting asks for."""
    return {s.key: s.value for s in state.settings if s.id == "irq.nic_local"}


def apply_again(root: Path, new: set) -> dict:
    """Apply; asserts that it moves none of the vectors pinned before and pins exactly the ``new`` ones (by name),
    besides rewriting the files that list the pinned IRQs (boot restore, nodetune-check)."""
    state = node.load(str(root), AREAS, {})
    named = {f"irq {n}": name for name, n in interrupts(root).items()}
    result = engine.apply(state.root, state.settings, services=state.services)
    pinned = {named[a["target"]] for a in result["actions"] if a["id"] == "irq.nic_local"}
    assert pinned == new, (sorted(pinned), sorted(new))
    assert {(a["id"], a["target"]) for a in result["actions"] if a["id"] != "irq.nic_local"} <= {
        ("persist.boot_restore", "state:irq"), ("check.expected", "irq")}, result["actions"]
    return pins(state)


def test_vectors_created_later_move_none_already_pinned(tmp_path: Path) -> None:
    root = tmp_path / "node"
    simnode.build(SHARED, str(root))
    first = pins(node.load(str(root), AREAS, {}))
    assert sorted(first) == sorted(f"mlx5_comp{i}@pci:{n['bdf']}" for n in SHARED["nics"] for i in (0, 1))
    tuned(root, AREAS)
    # a job opens vectors out of order: ib0's 5th (after 0 and 1), ib1's 3rd
    simnode.use_comp_vectors(str(root), "ib0", [5])
    simnode.use_comp_vectors(str(root), "ib1", [3])
    late = {"mlx5_comp5@pci:0000:03:00.0", "mlx5_comp3@pci:0000:05:00.0"}
    second = apply_again(root, late)
    assert {name: second[name] for name in first} == first, "a vector pinned before moved"
    # then every vector: the ones pinned before stay, the new ones go where a plan with all of them puts them
    for name in ("ib0", "ib1"):
        simnode.use_comp_vectors(str(root), name)
    rest = {f"mlx5_comp{i}@pci:{n['bdf']}" for n in SHARED["nics"] for i in range(8)} - set(second)
    third = apply_again(root, rest)
    assert {name: third[name] for name in second} == second, "a vector pinned before moved"
    # and spread as before: each NIC's 8 vectors one per core over the node's 7 free cores (CPU 0 is housekeeping),
    # at most ceil(16 / 7) = 3 on a core
    for nic in SHARED["nics"]:
        assert len({cpu for name, cpu in third.items() if name.endswith(nic["bdf"])}) == 7
    assert len(third) == 16 and max(list(third.values()).count(cpu) for cpu in third.values()) <= 3
    assert drifted(findings(root)) == set()
    state = node.load(str(root), AREAS, {})
    assert engine.apply(state.root, state.settings, services=state.services)["changed"] is False
