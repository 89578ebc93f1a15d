"""What a Setting says about itself, and what the engine, persist and the checker do with it without naming its id
(issue 29 item 2): ``effective_ok`` (the kernel may keep another value, verified at that one), ``restore_value``
and ``irq_name`` (what the boot restore writes, and the name an IRQ is found by); and the one rule by which
nodetune-restore, nodetune-check and verify find an IRQ by its name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import checker_files
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import persist as area_persist
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_check
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import CPULIST, INT, Setting
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root

CAP = 2048


class CappingKernel:
    """A kernel whose attributes accept any number and keep at most CAP of it, returning success, as
    ipoib_change_mtu does under a smaller broadcast group (drivers/infiniband/ulp/ipoib/ipoib_main.c)."""

    def attach(self, root: Root) -> None:
        pass

    def write(self, root: Root, rel: str, value: str) -> None:
        Path(root.real(rel)).write_text(str(min(int(value), CAP)))


def test_a_setting_that_may_read_back_otherwise_is_journaled_and_checked_at_what_the_kernel_kept(
        tmp_path: Path) -> None:
    """Made-up ids the engine cannot know: ``effective_ok`` alone makes the node-local checker expect the kept value
    from the first apply on; a Setting without it keeps its requested value there (and is drift for the checker)."""
    for name in ("depth", "width"):
        (tmp_path / "sys/lab/dev0").mkdir(parents=True, exist_ok=True)
        (tmp_path / "sys/lab/dev0" / name).write_text("1024\n")
    settings = [
        Setting("lab.depth", "dev0", "sys/lab/dev0/depth", "4096", compare=INT, area="lab", effective_ok=True),
        Setting("lab.width", "dev0", "sys/lab/dev0/width", "4096", compare=INT, area="lab"),
    ]
    settings += [s for s in checker_files.check_settings(settings, None) if s.id == "check.expected"]
    result = engine.apply(Root(str(tmp_path), backend=CappingKernel()), settings)
    assert sorted((u["id"], u["actual"]) for u in result["unconfirmed"]) == [("lab.depth", "2048"),
                                                                              ("lab.width", "2048")]
    journal = json.loads((tmp_path / engine.JOURNAL).read_text())
    assert journal["effective"]["lab.depth[dev0]"] == {"requested": "4096", "effective": "2048"}
    expected = json.loads((tmp_path / node_check.CONFIG_DIR / "lab.json").read_text())["settings"]
    assert {e["id"]: e["value"] for e in expected} == {"lab.depth": "2048", "lab.width": "4096"}
    assert node_check.problems(str(tmp_path)) == ["lab.width dev0: expected 4096, found 2048"]


def test_a_setting_with_its_own_restore_keys_is_persisted_with_them() -> None:
    """The boot restore writes ``restore_value`` (else the value) and finds an object by ``irq_name`` (else its
    path); the checker names it so too: persist and the checker read the fields, whatever the id."""
    mtu = Setting("lab.mtu", "eth9", "sys/class/net/eth9/mtu", "2044", compare=INT, area="lab",
                  persist="boot_restore", restore_value="4092")
    vector = Setting("lab.vector", "irq 77", "proc/irq/77/smp_affinity_list", "3", compare=CPULIST, area="lab",
                     persist="boot_restore", irq_name="lab_vec@pci:0000:01:00.0")
    plain = Setting("lab.plain", "dev0", "sys/lab/dev0/depth", "8", compare=INT, area="lab", persist="boot_restore")
    state = next(s for s in area_persist.build(_Ctx(), [mtu, vector, plain], {}) if s.target == "state:lab")
    entries = {e["id"]: e for e in json.loads(state.value)["settings"]}
    assert entries["lab.mtu"] == {"id": "lab.mtu", "target": "eth9", "path": "sys/class/net/eth9/mtu",
                                  "value": "4092", "order": mtu.order}
    assert entries["lab.vector"] == {"id": "lab.vector", "target": "lab_vec@pci:0000:01:00.0",
                                     "irq_name": "lab_vec@pci:0000:01:00.0", "path": None, "value": "3",
                                     "order": vector.order}
    assert entries["lab.plain"]["value"] == "8" and entries["lab.plain"]["path"] == "sys/lab/dev0/depth"
    check = next(s for s in checker_files.check_settings([mtu, vector, plain], None) if s.target == "lab")
    checked = {e["id"]: e for e in json.loads(check.value)["settings"]}
    assert (checked["lab.vector"]["irq_name"], checked["lab.vector"]["path"]) == ("lab_vec@pci:0000:01:00.0", "")
    assert checked["lab.mtu"]["value"] == "2044", "the checker expects the value the node is verified at"


class _Ctx:
    services = None
    root = None


# ------------------------------------------------------------------------------------------------ one IRQ rule
NIC, GPU = "0000:41:00.0", "0000:05:00.0"
FOUND = f"mlx5_comp0@pci:{NIC}"  # among its device's msi_irqs, with its action folder
NOT_YET = f"mlx5_comp1@pci:{NIC}"  # its device lists msi_irqs, none carries it (not created yet)
AMDGPU = f"amdgpu@pci:{GPU}"  # the action "amdgpu" on one of the GPU's msi_irqs
LEGACY = "eth_legacy"  # no device in its name: /proc/interrupts


def irq_tree(root: Path) -> None:
    for bdf, number, action in ((NIC, 100, FOUND), (GPU, 200, "amdgpu")):
        (root / f"sys/bus/pci/devices/{bdf}/msi_irqs").mkdir(parents=True, exist_ok=True)
        (root / f"sys/bus/pci/devices/{bdf}/msi_irqs/{number}").write_text("msix\n")
        (root / f"proc/irq/{number}/{action}").mkdir(parents=True)
    for number in (100, 200, 7, 102):
        (root / f"proc/irq/{number}").mkdir(parents=True, exist_ok=True)
        (root / f"proc/irq/{number}/smp_affinity_list").write_text("0-7\n")
    # /proc/interrupts also names NOT_YET (a tree no kernel makes: register_handler_proc() gives every action its
    # /proc/irq/N/<action>/ folder): the rule does not read it for a name whose device lists msi_irqs
    (root / "proc/interrupts").write_text(
        "           CPU0       CPU1\n"
        f"   7:          0          0  IO-APIC    7-edge      {LEGACY}\n"
        f" 102:          0          0  IR-PCI-MSIX-{NIC}    2-edge      {NOT_YET}\n")


def test_nodetune_restore_nodetune_check_and_verify_find_irqs_by_one_rule(tmp_path: Path) -> None:
    irq_tree(tmp_path)
    for names, want in (([FOUND, NOT_YET, AMDGPU], {FOUND: 100, AMDGPU: 200}), ([LEGACY], {LEGACY: 7})):
        assert found(area_persist.irq_numbers(Root(str(tmp_path)), names), names) == want  # verify's pending IRQs
        assert found(node_check._irq_numbers(str(tmp_path), names), names) == want  # nodetune-check
    restored = _restore_run(tmp_path, [(FOUND, "1"), (NOT_YET, "2"), (AMDGPU, "3")])
    assert restored.returncode == 0, restored.stderr
    assert "3 settings, 0 failed, 1 pending" in restored.stdout and NOT_YET in restored.stdout
    assert {n: (tmp_path / f"proc/irq/{n}/smp_affinity_list").read_text() for n in (100, 200, 102)} == {
        100: "1", 200: "3", 102: "0-7\n"}


def found(numbers: dict[str, int], names: list[str]) -> dict[str, int]:
    return {name: number for name, number in numbers.items() if name in names}


def _restore_run(root: Path, pins: list[tuple[str, str]]) -> subprocess.CompletedProcess:
    """nodetune-restore as apply renders it, pinning ``pins`` (action name, CPUs) from its state file."""
    settings: list[Any] = [Setting("irq.nic_local", f"irq {900 + i}", f"proc/irq/{900 + i}/smp_affinity_list", cpus,
                                   compare=CPULIST, key=name, irq_name=name, persist="boot_restore")
                           for i, (name, cpus) in enumerate(pins)]
    for setting in area_persist.build(_Ctx(), settings, {}):
        if setting.kind == "file":
            (root / setting.path).parent.mkdir(parents=True, exist_ok=True)
            (root / setting.path).write_text(setting.value)
    return subprocess.run([sys.executable, str(root / area_persist.SCRIPT_FILE), "--root", str(root)],
                          capture_output=True, text=True)
