"""Expected inventory (issue 15): verify's inventory.* findings and the node-local nodetune-check, on simulated nodes.

Nodes are built with the project's generator (simnode) from the MI300X-shaped spec the verify tests use; drift
is injected the way it shows on real nodes: a GPU gone (the spec without it: the PCI device, its KFD node and DRM
card all disappear), an HCA port trained at half rate, a tuned sysfs value changed behind nodetune's back.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils import interpreter
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine, node
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import checker_files
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import persist as area_persist
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import audit, bios, inventory
from ansible_collections.nodetune.instinct.plugins.module_utils.discover import devices as discover_devices
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_check
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import ATTR
from ansible_collections.nodetune.lab.plugins.module_utils import simboot, simnode
from ansible_collections.nodetune.lab.plugins.module_utils.simkernel import sim_root

from tests import realdata
from tests.support.lab_vars import AREAS
from tests.support.specs import AUDIT_SPEC as SPEC
from tests.support.trees import tree_digest

pytestmark = pytest.mark.usefixtures("simulated_kernel")  # applies to simulated nodes in-process

EXPECTED = {"gpu_count": 2, "gpu_model": "MI300X", "compute_partition": "SPX", "memory_partition": "NPS1",
            "xgmi_hive_size": 2, "hca_count": 2, "hca_rate": 400, "hca_width": "4X", "nvme_count": 1,
            "cpu_count": 32, "smt": "on", "numa_per_socket": 1}
HEALTH = {"nodetune_inventory_expected": EXPECTED}


def build(tmp_path: Path, spec: dict, name: str = "node") -> Path:
    dest = tmp_path / name
    simnode.build(spec, str(dest))
    return dest


def apply(root: Path, expected: dict | None = None) -> node.NodeState:
    state = node.load(str(root), AREAS, {}, expected_inventory=expected)
    result = engine.apply(state.root, state.settings, services=state.services)
    assert result["changed"]
    return state


def run_audit(root: Path, health: dict) -> dict:
    waivers = audit.prepare({}, health, [])
    state = node.load(str(root), AREAS, {}, expected_inventory=health.get("nodetune_inventory_expected"))
    return audit.audit(state, AREAS, {}, health, waivers, node_name="n1")


def inventory_drift(result: dict) -> dict:
    return {f["id"]: (f["expected"], f["actual"]) for f in result["findings"]
            if f["source"] == "inventory" and f["status"] == "drift"}


def checker(root: Path, *args: str) -> subprocess.CompletedProcess:
    """The rendered checker as a scheduler runs it: its own file, isolated (-I: no site, no cwd on sys.path), so it
    can only work if it needs nothing but the standard library."""
    script = root / checker_files.CHECK_SCRIPT
    return subprocess.run([sys.executable, "-I", str(script), "--root", str(root), *args], capture_output=True,
                          text=True, check=False, cwd="/")


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("inventory"), SPEC)


@pytest.fixture(scope="module")
def tuned_template(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    root = build(tmp_path_factory.mktemp("inventory_tuned"), SPEC)
    return root, apply(root, EXPECTED)


@pytest.fixture
def tuned(tuned_template: tuple, tmp_path: Path) -> tuple:
    """A copy of a node tuned with EXPECTED declared, and its NodeState (its settings)."""
    dest = tmp_path / "node"
    shutil.copytree(tuned_template[0], dest, symlinks=True)
    return dest, tuned_template[1]


# ------------------------------------------------------------------------------------------------ facts
def test_facts_of_the_simulated_node(fresh: Path) -> None:
    facts = node_check.read_facts(str(fresh))
    assert {k: facts[k] for k in EXPECTED} == {
        "gpu_count": 2, "gpu_model": ["MI300X"], "compute_partition": ["SPX"], "memory_partition": ["NPS1"],
        "xgmi_hive_size": [2], "hca_count": 2, "hca_rate": [400], "hca_width": ["4X"], "nvme_count": 1,
        "cpu_count": 32, "smt": "on", "numa_per_socket": 1}
    assert facts["versions"]["kernel"]


def test_a_partitioned_gpu_counts_once_in_its_hive(fresh_tree, tmp_path: Path) -> None:
    """CPX: each GPU is 8 KFD nodes, its partition ORed into location_id (kfd_topology_add_device), so the hive of
    2 GPUs must stay 2, not 16; the kernel's newer form puts the partition into bits 31:28 instead."""
    root = fresh_tree(dict(copy.deepcopy(SPEC), faults={"compute_partition": "CPX"}))
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    partitions = [n for n in nodes.iterdir() if "hive_id" in (n / "properties").read_text()
                  and "simd_count 0" not in (n / "properties").read_text()]
    assert len(partitions) == 16  # the test's premise: the lab writes one KFD node per partition
    facts = node_check.read_facts(str(root))
    assert facts["compute_partition"] == ["CPX"] and facts["xgmi_hive_size"] == [2]
    for node_dir in partitions:  # the newer kernels' location_id: node id << 28
        props = (node_dir / "properties").read_text().splitlines()
        location = next(int(line.split()[1]) for line in props if line.startswith("location_id "))
        bdf_form = (location & ~0x7) | (int(node_dir.name) % 8 << 28)
        (node_dir / "properties").write_text("\n".join(
            f"location_id {bdf_form}" if line.startswith("location_id ") else line for line in props) + "\n")
    assert node_check.read_facts(str(root))["xgmi_hive_size"] == [2]


def test_the_real_cpx_capture_has_a_hive_of_8_gpus() -> None:
    """The MI300X CPX capture: 63 KFD GPU nodes, 8 GPUs (8 unique_ids) in one hive."""
    root = realdata.kfd_root()
    assert sorted(set(node_check._hive_sizes(str(root)))) == [8]


def test_facts_agree_with_the_topology(fresh: Path) -> None:
    """The checker's own readers count what discovery finds (one code for verify and nodetune-check)."""
    topology = discover(str(fresh))
    facts = node_check.read_facts(str(fresh))
    assert facts["gpu_count"] == len(topology["gpus"])
    assert facts["gpu_model"] == sorted({g["name"] for g in topology["gpus"]})
    assert facts["hca_count"] == len(topology["ib_devices"])
    assert facts["hca_rate"] == sorted({int(p["rate_gbps"]) for d in topology["ib_devices"] for p in d["ports"]})
    assert facts["xgmi_hive_size"] == sorted({len(g["xgmi_peers"]) + 1 for g in topology["gpus"]})
    assert facts["cpu_count"] == len(topology["cpus"])
    assert facts["smt"] == ("on" if topology["smt"]["active"] else "off")


def test_the_checker_knows_every_gpu_name_discovery_knows() -> None:
    assert node_check.AMD_GPU_NAMES == discover_devices.AMD_GPU_NAMES


# ------------------------------------------------------------------------------------------------ validation
def test_valid_declarations_are_normalised() -> None:
    assert inventory.validate({"smt": True, "hca_width": 4, "compute_partition": "cpx", "gpu_count": "8"}) == {
        "smt": "on", "hca_width": "4X", "compute_partition": "CPX", "gpu_count": 8}
    assert inventory.validate(None) == {} and inventory.validate({"gpu_count": None}) == {}


@pytest.mark.parametrize("declared, words", [
    ({"gpu_cnt": 8}, ["nodetune_inventory_expected has unknown key 'gpu_cnt'", "gpu_count", "hca_rate"]),
    ({"gpu_count": "eight"}, ["nodetune_inventory_expected.gpu_count='eight'", "whole number"]),
    ({"gpu_count": True}, ["gpu_count=True", "whole number"]),
    ({"compute_partition": "XPX"}, ["compute_partition='XPX'", "SPX, DPX, TPX, QPX, CPX"]),
    ({"smt": "maybe"}, ["smt='maybe'", "on or off"]),
    ([8], ["nodetune_inventory_expected=[8]", "expected a mapping"]),
])
def test_bad_declarations_are_refused_with_the_variable_and_what_is_valid(declared: object, words: list) -> None:
    with pytest.raises(inventory.InventoryConfigError) as caught:
        inventory.validate(declared)
    for word in words:
        assert word in str(caught.value)


def test_bad_declarations_are_refused_before_any_write(tmp_path: Path) -> None:
    root = build(tmp_path, SPEC)
    before = tree_digest(root)
    bad = {"nodetune_inventory_expected": {"gpu_count": "eight", "nics": 2}}
    with pytest.raises(bios.BiosConfigError) as caught:  # the audit's input check, run before the tune writes
        audit.prepare({}, bad, [])
    assert len(caught.value.errors) == 2
    with pytest.raises(inventory.InventoryConfigError):
        node.load(str(root), AREAS, {}, expected_inventory=bad["nodetune_inventory_expected"])
    assert tree_digest(root) == before


# ------------------------------------------------------------------------------------------------ verify
def test_a_node_as_declared_has_no_inventory_drift(tmp_path: Path) -> None:
    root = build(tmp_path, SPEC)
    apply(root, EXPECTED)
    result = run_audit(root, HEALTH)
    ids = {f["id"] for f in result["findings"] if f["source"] == "inventory"}
    assert ids == {"inventory." + key for key in EXPECTED}
    assert inventory_drift(result) == {}
    assert result["report"]["inventory"]["gpu_count"] == 2
    assert not result["summary"]["drift"]


def test_a_missing_gpu_is_reported(tmp_path: Path) -> None:
    """The issue's case: one GPU gone; verify used to report the remaining ones as healthy and nothing else."""
    spec = copy.deepcopy(SPEC)
    del spec["gpus"][1]
    root = build(tmp_path, spec)
    result = run_audit(root, HEALTH)
    drift = inventory_drift(result)
    assert drift == {"inventory.gpu_count": (2, 1), "inventory.xgmi_hive_size": (2, "1")}
    remedy = [f["remedy"] for f in result["findings"] if f["id"] == "inventory.gpu_count"][0]
    assert "amdgpu" in remedy
    assert "inventory.gpu_count" in result["summary"]["drift_ids"]


def test_an_hca_at_half_rate_is_reported(tmp_path: Path) -> None:
    root = build(tmp_path, SPEC)
    port = next((root / "sys/class/infiniband").iterdir()) / "ports/1/rate"
    port.write_text("200 Gb/sec (4X HDR)\n")
    assert inventory_drift(run_audit(root, HEALTH)) == {"inventory.hca_rate": (400, "200,400")}


def test_undeclared_keys_are_not_checked(tmp_path: Path) -> None:
    spec = copy.deepcopy(SPEC)
    del spec["gpus"][1]
    result = run_audit(build(tmp_path, spec), {"nodetune_inventory_expected": {"nvme_count": 1}})
    assert [f["id"] for f in result["findings"] if f["source"] == "inventory"] == ["inventory.nvme_count"]
    assert inventory_drift(result) == {}


# ------------------------------------------------------------------------------------------------ nodetune-check
def test_apply_renders_the_checker_and_its_expectations(tuned: tuple) -> None:
    root, state = tuned
    check_dir = root / checker_files.CHECK_DIR
    names = sorted(p.name for p in check_dir.iterdir())
    assert "inventory.json" in names and "nvme.json" in names
    assert json.loads((check_dir / "inventory.json").read_text())["expected"] == EXPECTED
    script = root / checker_files.CHECK_SCRIPT
    # the node's system Python (none under the simulated root: /usr/bin/env python3), never the one nodetune ran under
    assert os.access(script, os.X_OK) and script.read_text().startswith(interpreter.shebang(root=state.root))
    assert not script.read_text().startswith(f"#!{sys.executable}\n")
    attrs = [s for s in state.settings if s.kind == ATTR]
    listed = [e for p in check_dir.glob("*.json") if p.name != "inventory.json"
              for e in json.loads(p.read_text())["settings"]]
    assert len([e for e in listed if e["kind"] == ATTR]) == len(attrs)


def test_the_checker_is_clean_on_a_tuned_node_and_writes_nothing(tuned: tuple) -> None:
    root = tuned[0]
    before = tree_digest(root)
    done = checker(root)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert checker(root, "--nhc").returncode == 0
    assert tree_digest(root) == before


def test_the_checker_reports_drift_with_the_ids_verify_uses(tuned: tuple) -> None:
    root, state = tuned
    governor = next(s for s in state.settings if s.kind == ATTR and s.id == "cpu.governor")
    (root / governor.path).write_text("powersave\n")
    port = next((root / "sys/class/infiniband").iterdir()) / "ports/1/rate"
    port.write_text("200 Gb/sec (4X HDR)\n")
    before = tree_digest(root)
    done = checker(root)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert f"cpu.governor {governor.target}: expected performance, found powersave" in lines
    assert "inventory.hca_rate node: expected 400, found 200,400" in lines
    assert len(lines) == 2
    verify_ids = {f["id"] for f in run_audit(root, HEALTH)["findings"] if f["status"] == "drift"}
    assert {line.split()[0] for line in lines} <= verify_ids
    nhc = checker(root, "--nhc")
    assert nhc.returncode == 1
    assert nhc.stdout.splitlines() == [f"nodetune: {lines[0]} (+1 more: run nodetune-check)"]
    assert tree_digest(root) == before


def test_the_checker_reads_unit_enablement_from_systemds_links(tuned: tuple) -> None:
    """irqbalance disabled and nodetune-restore enabled, as apply left them, read from the links systemctl enable
    makes (no systemctl): a package update that enables irqbalance again is drift, masking it is as good as
    disabled, and a removed enablement link of nodetune-restore is drift too."""
    root, state = tuned
    services = {s.target: s.value for s in state.settings if s.kind == "service"}
    assert services == {"irqbalance.service": "active=no,enabled=no", "nodetune-restore.service": "enabled=yes",
                        "nodetune-irq-repin.timer": "active=yes,enabled=yes"}
    check_files = (root / checker_files.CHECK_DIR).glob("*.json")
    listed = {e["target"]: e["value"] for p in check_files if p.name != "inventory.json"
              for e in json.loads(p.read_text())["settings"] if e["kind"] == "service"}
    assert listed == {"irqbalance.service": "enabled=no", "nodetune-restore.service": "enabled=yes",
                      "nodetune-irq-repin.timer": "enabled=yes"}
    assert checker(root).returncode == 0
    wants = root / "etc/systemd/system/multi-user.target.wants"
    (wants / "irqbalance.service").symlink_to("/usr/lib/systemd/system/irqbalance.service")
    done = checker(root)
    assert (done.returncode, done.stdout.splitlines()) == (
        1, ["irq.irqbalance irqbalance.service: expected enabled=no, found enabled=yes"])
    verify_drift = {(f["id"], f["target"]) for f in run_audit(root, HEALTH)["findings"] if f["status"] == "drift"}
    assert ("irq.irqbalance", "irqbalance.service") in verify_drift  # verify sees the same
    (root / "etc/systemd/system/irqbalance.service").symlink_to("/dev/null")  # systemctl mask
    assert checker(root).returncode == 0
    (wants / "nodetune-restore.service").unlink()
    assert checker(root).stdout.splitlines() == [
        "persist.boot_restore nodetune-restore.service: expected enabled=yes, found enabled=no"]
    runtime = root / "run/systemd/system/multi-user.target.wants"  # systemctl enable --runtime
    runtime.mkdir(parents=True)
    (runtime / "nodetune-restore.service").symlink_to("/etc/systemd/system/nodetune-restore.service")
    assert checker(root).returncode == 0


def test_the_checker_sees_an_edited_config_file_and_a_missing_gpu(tuned: tuple) -> None:
    root, state = tuned
    config = next(s for s in state.settings if s.kind == "file" and not s.id.startswith("check."))
    (root / config.path).write_text("# edited\n")
    gpu = root / "sys/bus/pci/devices" / SPEC["gpus"][1]["bdf"]
    (gpu / "class").write_text("0x0000ff\n")  # what a GPU that fell off the bus leaves: not a GPU any more
    lines = checker(root).stdout.splitlines()
    ids = sorted(line.split()[0] for line in lines)
    assert "inventory.gpu_count" in ids and config.id in ids


def test_the_checker_without_expectations_says_so(tuned: tuple) -> None:
    root = tuned[0]
    done = checker(root, "--config-dir", "etc/nodetune/none")
    assert done.returncode == 2 and "run the nodetune apply" in done.stderr
    assert checker(root, "--bogus").returncode == 2


def test_the_checker_finds_a_renumbered_irq_by_its_name(tuned: tuple) -> None:
    """The number apply recorded no longer carries the action (IRQs renumber across reboots): the checker finds
    the action under its device's new vector (msi_irqs, /proc/irq/N/<action>/) and compares the right IRQ, instead
    of reporting the old one."""
    root, state = tuned
    irq = next(s for s in state.settings if s.id == "irq.nic_local" and s.key)
    recorded = root / irq.path.rpartition("/")[0] / irq.key
    assert recorded.is_dir()
    msi_irqs = root / "sys/bus/pci/devices" / irq.key.partition("@pci:")[2] / "msi_irqs"
    number = 1 + max(int(n.name) for n in (root / "proc/irq").iterdir() if n.name.isdigit())
    renumbered = root / "proc/irq" / str(number)  # as the kernel shows the vector under its new number
    renumbered.mkdir()
    recorded.rename(renumbered / irq.key)
    (renumbered / "smp_affinity_list").write_text((root / irq.path).read_text())
    (msi_irqs / recorded.parent.name).rename(msi_irqs / str(number))
    assert checker(root).returncode == 0
    (renumbered / "smp_affinity_list").write_text("0\n")
    lines = checker(root).stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"irq.nic_local {irq.key}: expected "), lines  # named by action


def test_the_checker_expectations_name_irqs_by_action_so_a_reboot_does_not_change_them(tuned: tuple) -> None:
    """IRQ numbers change across reboots: the expectations apply writes (check.d/irq.json, compared by verify) hold
    no IRQ number, and the checker finds each IRQ through its device's msi_irqs after a renumbering."""
    root, state = tuned
    text = (root / "etc/nodetune/check.d/irq.json").read_text()
    entries = [e for e in json.loads(text)["settings"] if e["id"] == "irq.nic_local"]
    assert entries and all(e["path"] == "" and e["target"] == e["irq_name"] for e in entries)
    assert "proc/irq/" not in text
    irq, other = [s for s in state.settings if s.id == "irq.nic_local" and s.key][:2]
    (root / irq.path.rpartition("/")[0] / irq.key).rmdir()  # the action left its number
    (root / "proc/interrupts").write_text("")  # and /proc/interrupts is not needed to find the others
    (root / other.path).write_text("0\n" if other.value != "0" else "1\n")
    lines = checker(root).stdout.splitlines()
    # the moved one is reported, found through msi_irqs; the one whose action is gone while its device is there is
    # not created (yet), which is no drift: mlx5 creates its completion vectors on first use (Linux 6.5+)
    assert len(lines) == 1 and lines[0].startswith(f"irq.nic_local {other.key}: "), lines


# ------------------------------------------------------------------------------------------------ GPU vectors
def gpu_vectors(root: Path) -> dict[str, int]:
    """GPU BDF -> the IRQ number of its amdgpu vector, as the kernel shows it: msi_irqs/ and /proc/irq/N/amdgpu/."""
    out = {}
    for gpu in SPEC["gpus"]:
        [number] = [int(n.name) for n in (root / "sys/bus/pci/devices" / gpu["bdf"] / "msi_irqs").iterdir()
                    if (root / "proc/irq" / n.name / "amdgpu").is_dir()]
        out[gpu["bdf"]] = number
    return out


def test_the_checker_names_gpu_vectors_by_device_and_finds_them_after_a_renumbering_reboot(tuned: tuple) -> None:
    """amdgpu names every GPU's vector "amdgpu": the expectations name each by its device (amdgpu@pci:<BDF>, no IRQ
    number), and after a reboot that renumbers the IRQs the checker finds each GPU's own vector, as nodetune-restore
    does (through the GPU's msi_irqs), so a tuned node is clean and a vector moved by hand is named."""
    root, state = tuned
    entries = [e for e in json.loads((root / "etc/nodetune/check.d/irq.json").read_text())["settings"]
               if e["id"] == "irq.gpu_local"]
    assert sorted(e["irq_name"] for e in entries) == sorted(f"amdgpu@pci:{g['bdf']}" for g in SPEC["gpus"])
    assert all(e["path"] == "" and e["target"] == e["irq_name"] for e in entries)
    want = {e["irq_name"]: e["value"] for e in entries}
    before = gpu_vectors(root)
    # more NVMe write queues at the next driver load: the IRQs of the devices probed after the drive, the GPU at
    # 0000:85:00.0 among them, get other numbers (test_irq_gpu_local.py)
    (root / "etc/modprobe.d/local-nvme.conf").write_text("options nvme write_queues=4\n")
    assert not simnode.reboot(str(root))["boot_restore"]["failed"]
    after = gpu_vectors(root)
    assert after != before
    assert checker(root).returncode == 0, checker(root).stdout
    moved = "0000:85:00.0"
    other = "0" if want[f"amdgpu@pci:{moved}"] != "0" else "1"
    (root / f"proc/irq/{after[moved]}/smp_affinity_list").write_text(other + "\n")
    run = checker(root)
    assert run.returncode == node_check.EXIT_DRIFT
    assert run.stdout.splitlines() == [f"irq.gpu_local amdgpu@pci:{moved}: expected {want[f'amdgpu@pci:{moved}']}, "
                                       f"found {other}"]


def unbind_amdgpu(root: Path, bdf: str) -> None:
    """The tree as the kernel leaves it when amdgpu lets go of a GPU (unbound, or its probe failed at boot) while
    the PCI device stays: amdgpu_irq_fini_hw() frees the IRQ (free_irq(): /proc/irq/N/amdgpu/ goes) and the vector
    (pci_free_irq_vectors(): msi_irqs/N, /proc/irq/N/ and its /proc/interrupts line go), and the driver link goes."""
    number = gpu_vectors(root)[bdf]
    shutil.rmtree(root / f"proc/irq/{number}")
    (root / "sys/bus/pci/devices" / bdf / "msi_irqs" / str(number)).unlink()
    (root / "sys/bus/pci/devices" / bdf / "driver").unlink()
    lines = (root / "proc/interrupts").read_text().splitlines(keepends=True)
    (root / "proc/interrupts").write_text("".join(x for x in lines if x.split(":")[0].strip() != str(number)))


def test_a_missing_gpu_vector_is_a_failure_while_a_nic_vector_not_created_yet_is_pending(tuned: tuple) -> None:
    """mlx5 creates completion vectors on first use (Linux 6.5+): one not there while its NIC is, is pending. A
    GPU's vector exists whenever amdgpu is bound (amdgpu_irq_init() at probe): one not there while its GPU is means
    amdgpu is not bound, which nodetune-check and the boot restore (the rendered program and the lab's) report."""
    root, state = tuned
    nic = next(s for s in state.settings if s.id == "irq.nic_local" and s.key)
    (root / nic.path.rpartition("/")[0] / nic.key).rmdir()  # this vector is not created (yet)
    lines = (root / "proc/interrupts").read_text().splitlines(keepends=True)
    (root / "proc/interrupts").write_text("".join(x for x in lines if not x.rstrip().endswith(nic.key)))
    assert checker(root).returncode == 0
    gpu = "0000:05:00.0"
    want = next(s.value for s in state.settings if s.id == "irq.gpu_local" and s.key == f"amdgpu@pci:{gpu}")
    unbind_amdgpu(root, gpu)
    run = checker(root)
    assert run.returncode == node_check.EXIT_DRIFT
    assert run.stdout.splitlines() == [f"irq.gpu_local amdgpu@pci:{gpu}: expected {want}, found absent"]
    # the boot restore agrees: the rendered program run on this tree, and the lab's replay of it
    restore = subprocess.run([sys.executable, "-I", str(root / area_persist.SCRIPT_FILE), "--root", str(root)],
                             capture_output=True, text=True, check=False, cwd="/")
    assert restore.returncode == 1
    assert f"IRQ amdgpu@pci:{gpu} not found" in restore.stderr and nic.key not in restore.stderr
    assert "1 failed, 1 pending" in restore.stdout
    replay = simboot.run_boot_restore(sim_root(str(root)))
    assert replay["pending"] == [nic.key] and [f for f in replay["failed"] if f"amdgpu@pci:{gpu}" in f]
