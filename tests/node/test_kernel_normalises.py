"""What a real node's kernel did that the lab did not (issue 22, item 4).

a) sysctls stored otherwise than written (fs.pipe-max-size rounds up, kernel.sched_rr_timeslice_ms 0 means 100)
   must settle: nodetune asks for what the kernel keeps, and adopts what it kept for keys it does not know;
b) caps (rmem_max, wmem_max, the max field of tcp_rmem ...) are "at least", and a node without an RDMA device gets
   nothing from the infiniband area;
c) without interrupt remapping an IRQ's new affinity takes effect at its next interrupt: verify and nodetune-check
   call that pending, not drift;
d) only NIC completion vectors are placed: virtio's config vector and mlx5's event vectors are not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine
from ansible_collections.nodetune.instinct.plugins.module_utils.apply.node import load
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import sysctl as area_sysctl
from ansible_collections.nodetune.instinct.plugins.module_utils.audit.verify import verify_settings
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.irq import read_irqs
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_check
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import OK
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import plan
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.lab.plugins.module_utils import simkernel, simnode

from tests.support import topogen
from tests.support.specs import small_spec
from tests.support.topogen import NicSpec, Spec

pytestmark = pytest.mark.usefixtures("simulated_kernel")  # applies to simulated nodes in-process

NORMALISED = {"fs.pipe-max-size": 1000000, "kernel.sched_rr_timeslice_ms": 0}


def build(tmp_path: Path, **changes: Any) -> Path:
    dest = tmp_path / "node"
    simnode.build(small_spec(cpu__caches=False, **changes), str(dest))
    return dest


def sysctl(root: Path, key: str) -> str:
    return (root / area_sysctl.sysctl_path(key)).read_text().strip()


def drift(state: Any, areas: dict) -> list:
    return [(f.id, f.target, f.expected, f.actual) for f in verify_settings(state, areas)
            if f.status not in (OK, "not_applicable")]


def apply(root: Path, areas: dict) -> dict:
    state = load(str(root), areas)
    return engine.apply(state.root, state.settings, services=state.services)


# ------------------------------------------------------------------------------------------ a) stored otherwise
def test_the_simulated_kernel_stores_these_sysctls_as_kernel_6_18_did(tmp_path: Path) -> None:
    root = build(tmp_path)
    node = simkernel.sim_root(str(root))
    seen = {}
    for key, value in [("fs.pipe-max-size", "1000000"), ("fs.pipe-max-size", "4097"), ("fs.pipe-max-size", "0"),
                       ("fs.pipe-max-size", "4096"), ("kernel.sched_rr_timeslice_ms", "0"),
                       ("kernel.sched_rr_timeslice_ms", "-1"), ("kernel.sched_rr_timeslice_ms", "250")]:
        node.write(area_sysctl.sysctl_path(key), value)
        seen[(key, value)] = sysctl(root, key)
    # what this project's test VM (kernel 6.18) showed for the same writes
    assert seen == {("fs.pipe-max-size", "1000000"): "1048576", ("fs.pipe-max-size", "4097"): "8192",
                    ("fs.pipe-max-size", "0"): "4096", ("fs.pipe-max-size", "4096"): "4096",
                    ("kernel.sched_rr_timeslice_ms", "0"): "100", ("kernel.sched_rr_timeslice_ms", "-1"): "100",
                    ("kernel.sched_rr_timeslice_ms", "250"): "250"}


def test_sysctls_the_kernel_normalises_are_set_as_stored_and_settle_in_one_run(tmp_path: Path) -> None:
    root = build(tmp_path, sysctl={"fs.pipe-max-size": 65536, "kernel.sched_rr_timeslice_ms": 30})
    areas = {"sysctl": {"nodetune_sysctl_extra": dict(NORMALISED)}}
    state = load(str(root), areas)
    values = {s.target: s.value for s in state.settings if s.id.startswith("sysctl.")}
    assert (values["fs.pipe-max-size"], values["kernel.sched_rr_timeslice_ms"]) == ("1048576", "100")
    warned = " ".join(state.context.warnings)
    assert "1048576" in warned and "fs.pipe-max-size" in warned and "sched_rr_timeslice_ms" in warned
    first = engine.apply(state.root, state.settings, services=state.services)
    assert first["changed"] and first["unconfirmed"] == []
    assert (sysctl(root, "fs.pipe-max-size"), sysctl(root, "kernel.sched_rr_timeslice_ms")) == ("1048576", "100")
    assert apply(root, areas)["actions"] == []
    assert drift(load(str(root), areas), areas) == []
    assert node_check.main(["--root", str(root), "--quiet"]) == node_check.EXIT_CLEAN


def test_a_normalising_sysctl_nodetune_does_not_know_is_adopted_from_the_journal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(area_sysctl.KERNEL_STORES, "fs.pipe-max-size")  # as for a key missing from the table
    root = build(tmp_path, sysctl={"fs.pipe-max-size": 65536})
    areas = {"sysctl": {"nodetune_sysctl_extra": {"fs.pipe-max-size": 1000000}}}
    first = apply(root, areas)
    assert [(u["expected"], u["actual"]) for u in first["unconfirmed"]] == [("1000000", "1048576")]
    state = load(str(root), areas)
    assert {s.target: s.value for s in state.settings}["fs.pipe-max-size"] == "1048576"
    assert any("1048576" in w and "fs.pipe-max-size" in w for w in state.context.warnings)
    # the runtime value verifies; only nodetune's own files still say 1000000, and the next run rewrites them
    assert not [d for d in drift(state, areas) if d[0].startswith("sysctl.")]
    apply(root, areas)
    assert apply(root, areas)["actions"] == []
    assert drift(load(str(root), areas), areas) == []


# ------------------------------------------------------------------------------------------ b) caps: at least
def test_caps_are_at_least_the_nodes_own(tmp_path: Path) -> None:
    root = build(tmp_path, sysctl={"net.core.rmem_max": 4194304, "net.ipv4.tcp_rmem": "4096 131072 33554432"})
    areas = {"infiniband": {"nodetune_net_core_rmem_max": 2097152, "nodetune_net_core_wmem_max": 2097152},
             "sysctl": {"nodetune_sysctl_extra": {"net.ipv4.tcp_rmem": "4096 87380 16777216"}}}
    state = load(str(root), areas)
    values = {s.target: s.value for s in state.settings if s.id.startswith("sysctl.")}
    # the node's larger caps stay; the smaller one is raised; tcp_rmem's min and default are set as asked
    assert values["net.core.rmem_max"] == "4194304" and values["net.core.wmem_max"] == "2097152"
    assert values["net.ipv4.tcp_rmem"] == "4096 87380 33554432"
    assert any("net.core.rmem_max 4194304 is above the wanted 2097152" in n for n in state.context.notes)
    engine.apply(state.root, state.settings, services=state.services)
    assert sysctl(root, "net.core.rmem_max") == "4194304"
    assert drift(load(str(root), areas), areas) == []
    # nodetune's own raise is not the node's cap: a smaller wanted value later goes back towards the node's own
    lower = {"infiniband": {"nodetune_net_core_wmem_max": 1048576, "nodetune_net_core_rmem_max": None}}
    assert {s.target: s.value for s in load(str(root), lower).settings
            if s.id.startswith("sysctl.")}["net.core.wmem_max"] == "1048576"


def test_a_node_without_an_rdma_device_gets_nothing_from_the_infiniband_area(tmp_path: Path) -> None:
    spec = small_spec()
    root = build(tmp_path, nics=[nic for nic in spec["nics"] if nic["model"] == "BCM57416"],
                 sysctl={"net.core.rmem_max": 4194304, "net.core.wmem_max": 4194304})
    areas = {"infiniband": {"nodetune_net_core_rmem_max": 2097152, "nodetune_net_core_wmem_max": 2097152}}
    state = load(str(root), areas)
    assert [s.uid for s in state.settings if s.area == "infiniband"] == []
    assert any(n.startswith("infiniband: no InfiniBand/RDMA device") for n in state.context.notes)
    assert apply(root, areas)["actions"] == []
    assert sysctl(root, "net.core.rmem_max") == "4194304"


# ------------------------------------------------------------------------------------------ c) deferred IRQ moves
IRQ_AREAS = {"irq_affinity": {"nodetune_irqbalance_mode": "disable", "nodetune_irqbalance_stop_allowed": True,
                              "nodetune_irq_pin_nic": True}}


def effective(root: Path, irq: int) -> str:
    return (root / f"proc/irq/{irq}/effective_affinity_list").read_text().strip()


def test_without_interrupt_remapping_a_moved_irq_is_pending_until_it_fires(tmp_path: Path) -> None:
    root = build(tmp_path, iommu=False)
    state = load(str(root), IRQ_AREAS)
    pinned = dict((s.target, s.value) for s in state.settings if s.id == "irq.nic_local")
    assert pinned
    engine.apply(state.root, state.settings, services=state.services)
    after = load(str(root), IRQ_AREAS)
    layout = dict((f"irq {e['irq']}", e) for e in after.layout["irq_affinity"])
    findings = [f for f in verify_settings(after, IRQ_AREAS) if f.id == "irq.nic_local" and "effective" in f.target]
    pending = [f for f in findings if "pending" in str(f.actual)]
    # the kernel keeps the old CPU until the IRQ's next interrupt: right affinity, not yet effective
    moved = [t for t in pinned if effective(root, int(t.split()[1])) not in
             [str(c) for c in layout[t]["cpus"]]]
    assert moved and len(pending) == len(moved)
    assert all(f.status == OK for f in findings)
    assert drift(after, IRQ_AREAS) == []
    # nodetune-check, on the same node state, agrees: nothing to report
    assert node_check.main(["--root", str(root), "--quiet"]) == node_check.EXIT_CLEAN
    # traffic: each IRQ fires once and lands on its CPU; nothing is pending any more
    node = simkernel.sim_root(str(root))
    assert all(simkernel.fire(node, int(t.split()[1])) for t in moved)
    assert not simkernel.fire(node, int(moved[0].split()[1]))  # already there
    settled = load(str(root), IRQ_AREAS)
    findings = [f for f in verify_settings(settled, IRQ_AREAS) if f.id == "irq.nic_local" and "effective" in f.target]
    assert findings and all(f.status == OK and "pending" not in str(f.actual) for f in findings)


def test_a_pending_irq_whose_affinity_was_changed_since_is_drift(tmp_path: Path) -> None:
    root = build(tmp_path, iommu=False)
    state = load(str(root), IRQ_AREAS)
    engine.apply(state.root, state.settings, services=state.services)
    after = load(str(root), IRQ_AREAS)
    entry = after.layout["irq_affinity"][0]
    other = next(c for c in range(32) if c not in entry["cpus"])
    simkernel.sim_root(str(root)).write(f"proc/irq/{entry['irq']}/smp_affinity_list", str(other))
    simkernel.fire(simkernel.sim_root(str(root)), entry["irq"])
    again = load(str(root), IRQ_AREAS)
    ids = {(i, t) for i, t, _e, _a in drift(again, IRQ_AREAS)}
    assert ("irq.nic_local", f"irq {entry['irq']} effective") in ids
    assert node_check.main(["--root", str(root), "--quiet"]) == node_check.EXIT_DRIFT


# ------------------------------------------------------------------------------------------ d) completion vectors
VIRTIO_INTERRUPTS = """\
           CPU0       CPU1
 28:          0          0 PCI-MSIX-0000:00:01.0   0-edge      virtio0-config
 29:          0          0 PCI-MSIX-0000:00:01.0   1-edge      virtio0-inflate
 35:          0          1 PCI-MSIX-0000:00:02.0   0-edge      virtio1-config
 36:          0    4254224 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0
 37:          0          0 PCI-MSIX-0000:00:03.0   0-edge      virtio2-config
 38:          0       3297 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0
 39:       3190          0 PCI-MSIX-0000:00:03.0   2-edge      virtio2-output.0
 50:          0          0 PCI-MSIX-0000:41:00.0   0-edge      mlx5_async0@pci:0000:41:00.0
 51:          0          0 PCI-MSIX-0000:41:00.0   1-edge      mlx5_pages_eq@pci:0000:41:00.0
 52:          0          0 PCI-MSIX-0000:41:00.0   2-edge      mlx5_comp0@pci:0000:41:00.0
"""


def test_only_nic_completion_vectors_are_nic_comp(tmp_path: Path) -> None:
    """The interrupts of this project's test VM (virtio-net at 00:03.0, virtio-blk at 00:02.0, the balloon at
    00:01.0) and an mlx5 with an older kernel's pages EQ."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/interrupts").write_text(VIRTIO_INTERRUPTS)
    pci = [{"bdf": "0000:00:01.0", "class": "0x00ff00", "msi_irqs": [28, 29]},
           {"bdf": "0000:00:02.0", "class": "0x010000", "msi_irqs": [35, 36]},
           {"bdf": "0000:00:03.0", "class": "0x020000", "msi_irqs": [37, 38, 39]},
           {"bdf": "0000:41:00.0", "class": "0x020700", "msi_irqs": [50, 51, 52]}]
    irqs = read_irqs(Root(str(tmp_path)), pci, [], {}, {}, "6.18.0", [])
    assert {i["name"]: i["kind"] for i in irqs} == {
        "virtio0-config": "other", "virtio0-inflate": "other", "virtio1-config": "other", "virtio1-req.0": "other",
        "virtio2-config": "nic_async", "virtio2-input.0": "nic_comp", "virtio2-output.0": "nic_comp",
        "mlx5_async0@pci:0000:41:00.0": "nic_async", "mlx5_pages_eq@pci:0000:41:00.0": "nic_async",
        "mlx5_comp0@pci:0000:41:00.0": "nic_comp"}


def test_the_planner_never_places_a_config_vector_an_earlier_discovery_called_a_completion_vector() -> None:
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=4, nics=[NicSpec(0, 1)]))
    template = next(i for i in topo["irqs"] if i["name"].startswith("mlx5_comp"))
    for number, name, kind in ((900, "virtio0-config", "nic_comp"), (901, "virtio0-input.0", None),
                               (902, "virtio0-output.0", None)):
        topo["irqs"].append(dict(template, irq=number, name=name, kind=kind))
    layout = plan(topo)
    placed = {e["name"] for e in layout["irq_affinity"]}
    assert {"virtio0-input.0", "virtio0-output.0"} <= placed and "virtio0-config" not in placed
    assert "virtio0-config" in [e["name"] for e in layout["irq_left_alone"]]
