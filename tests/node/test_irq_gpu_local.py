"""Each GPU's amdgpu vector pinned to a core of its rank (issue 24 item 6), end to end on a simulated node.

The kernel's truth the lab models (simnode): amdgpu_irq_init() (drivers/gpu/drm/amd/amdgpu/amdgpu_irq.c)
allocates one vector per GPU PCI function and request_irq()s it under the driver's name, so /proc/interrupts
shows one "amdgpu" line per GPU, the vector is listed in the GPU's /sys/bus/pci/devices/<BDF>/msi_irqs/, and
/proc/irq/N/amdgpu/ exists (kernel/irq/proc.c, register_handler_proc()). It is not kernel-managed, so its
affinity can be written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine, node
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import verify
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import SettingError
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.support.lab_vars import AREAS
from tests.support.specs import AUDIT_SPEC as SPEC

pytestmark = pytest.mark.usefixtures("simulated_kernel")  # applies to simulated nodes in-process
GPUS = [gpu["bdf"] for gpu in SPEC["gpus"]]


@pytest.fixture
def root(fresh_tree: Callable[[Any], Path]) -> Path:
    """A node of the test's own: built again in memory, which costs less than copying a built one."""
    return fresh_tree(SPEC)


def amdgpu_irqs(root: Path) -> dict[str, int]:
    """GPU BDF -> the IRQ number of its amdgpu vector, as the kernel shows it: msi_irqs/ and /proc/irq/N/amdgpu/."""
    out = {}
    for bdf in GPUS:
        vectors = [int(n.name) for n in (root / "sys/bus/pci/devices" / bdf / "msi_irqs").iterdir()
                   if (root / "proc/irq" / n.name / "amdgpu").is_dir()]
        assert len(vectors) == 1, (bdf, vectors)
        out[bdf] = vectors[0]
    return out


def affinity(root: Path, irq: int) -> str:
    return (root / f"proc/irq/{irq}/smp_affinity_list").read_text().strip()


def gpu_findings(root: Path) -> dict[str, str]:
    state = node.load(str(root), AREAS, {})
    return {f.target: f.status for f in verify.verify_settings(state, AREAS) if f.id == "irq.gpu_local"}


def test_gpu_vectors_are_pinned_to_their_ranks_verified_and_idempotent(root: Path) -> None:
    irqs = amdgpu_irqs(root)
    before = {bdf: affinity(root, irq) for bdf, irq in irqs.items()}
    assert len(set(before.values())) == 1, "as the driver leaves them: every CPU"
    state = node.load(str(root), AREAS, {})
    rank_cpus = {r["gpu"]: r["cpus"] for r in state.layout["ranks"]}
    pins = {s.target: s for s in state.settings if s.id == "irq.gpu_local"}
    assert set(pins) == {f"irq {irq}" for irq in irqs.values()}
    for bdf, irq in irqs.items():
        pin = pins[f"irq {irq}"]
        assert pin.value == str(rank_cpus[bdf][0]) and pin.persist == "boot_restore"
        assert pin.key == f"amdgpu@pci:{bdf}", "amdgpu names every GPU's vector alike: the key says whose it is"
    # check mode tells the truth and writes nothing
    planned = engine.apply(state.root, state.settings, check_mode=True, services=state.services)
    assert {a["target"] for a in planned["actions"] if a["id"] == "irq.gpu_local"} == set(pins)
    assert {bdf: affinity(root, irq) for bdf, irq in irqs.items()} == before
    assert set(gpu_findings(root).values()) == {"drift"}
    engine.apply(state.root, state.settings, services=state.services)
    for bdf, irq in irqs.items():
        assert affinity(root, irq) == str(rank_cpus[bdf][0])
    assert gpu_findings(root) == {f"irq {irq}": "ok" for irq in irqs.values()}
    again = node.load(str(root), AREAS, {})
    assert engine.apply(again.root, again.settings, services=again.services)["changed"] is False


def test_a_moved_gpu_vector_is_drift_and_reboot_and_revert_restore_it(root: Path) -> None:
    irqs = amdgpu_irqs(root)
    original = affinity(root, irqs[GPUS[0]])
    state = node.load(str(root), AREAS, {})
    engine.apply(state.root, state.settings, services=state.services)
    pinned = {bdf: affinity(root, irq) for bdf, irq in irqs.items()}
    moved = irqs[GPUS[0]]
    Root(str(root)).write(f"proc/irq/{moved}/smp_affinity_list", "0")  # what irqbalance or an operator does
    assert gpu_findings(root) == {f"irq {irq}": "drift" if irq == moved else "ok" for irq in irqs.values()}
    # Write queues are a queue set of their own, each with its interrupt (drivers/nvme/host/pci.c): at the next
    # driver load the NVMe drive (0000:11:00.0) asks for more vectors, so the IRQs of the devices probed after it,
    # the GPU at 0000:85:00.0 among them, get other numbers.
    (root / "etc/modprobe.d/local-nvme.conf").write_text("options nvme write_queues=4\n")
    booted = simnode.reboot(str(root))  # affinities back to the kernel's default, then nodetune-restore runs
    assert booted["boot_restore"]["ran"] and not booted["boot_restore"]["failed"]
    after = amdgpu_irqs(root)
    assert after[GPUS[0]] == moved and after[GPUS[1]] != irqs[GPUS[1]], (irqs, after)
    # found again by action name at its device (amdgpu@pci:<BDF>), not by the number it had when tuned
    assert {bdf: affinity(root, irq) for bdf, irq in after.items()} == pinned
    assert gpu_findings(root) == {f"irq {irq}": "ok" for irq in after.values()}
    engine.revert(Root(str(root)), services=node.load(str(root), AREAS, {}).services)
    assert affinity(root, moved) == original


def test_the_gpu_toggle_leaves_gpu_vectors_alone_and_a_bad_value_is_refused(root: Path) -> None:
    areas = {name: dict(config) for name, config in AREAS.items()}
    areas["irq_affinity"]["nodetune_irq_pin_gpu"] = False
    settings = node.load(str(root), areas, {}).settings
    assert not any(s.id == "irq.gpu_local" for s in settings)
    assert any(s.id == "irq.nic_local" for s in settings), "the NIC vectors keep their own toggle"
    areas["irq_affinity"]["nodetune_irq_pin_gpu"] = "yes"
    with pytest.raises(SettingError, match="nodetune_irq_pin_gpu='yes' is not valid: expected true or false"):
        node.load(str(root), areas, {})
