"""The boot-time restore script as rendered for real nodes, run on a plain tree (no simulated kernel)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils import area_persist, areas, engine, node, services
from ansible_collections.nodetune.instinct.plugins.module_utils.setting import CPULIST, Setting
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.unit.test_verify_module import AREAS, SPEC

REPO = Path(__file__).resolve().parents[2]


def test_restore_script_writes_in_order_and_finds_irqs_by_name(tmp_path: Path) -> None:
    (tmp_path / "proc/irq/200").mkdir(parents=True)
    (tmp_path / "proc/irq/200/smp_affinity_list").write_text("0-7\n")
    # the IRQ was number 150 when nodetune tuned the node; after a reboot it is 200
    (tmp_path / "proc/interrupts").write_text(
        "           CPU0       CPU1\n"
        " 200:          0          0  IR-PCI-MSIX-0000:41:00.0    1-edge      mlx5_comp1@pci:0000:41:00.0\n")
    (tmp_path / "sys/devices/system/cpu/cpu3/cpufreq").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/cpu3/cpufreq/scaling_governor").write_text("schedutil\n")
    settings = [
        Setting("irq.nic_local", "irq 150", "proc/irq/150/smp_affinity_list", "5", compare=CPULIST,
                key="mlx5_comp1@pci:0000:41:00.0", persist="boot_restore"),
        Setting("cpu.governor", "cpu3", "sys/devices/system/cpu/cpu3/cpufreq/scaling_governor", "performance",
                persist="boot_restore"),
    ]
    rendered = area_persist.build(_Ctx(), settings, {})
    for setting in rendered:
        if setting.kind == "file":
            target = tmp_path / setting.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(setting.value)
    state = json.loads((tmp_path / "etc/nodetune/boot-restore.d/irq.json").read_text())
    assert state["settings"][0]["irq_name"] == "mlx5_comp1@pci:0000:41:00.0"
    assert state["settings"][0]["path"] is None, "no IRQ number in the state: it would be stale after a reboot"
    script = tmp_path / area_persist.SCRIPT_FILE
    proc = subprocess.run([sys.executable, str(script), "--root", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "2 settings, 0 failed" in proc.stdout
    assert (tmp_path / "proc/irq/200/smp_affinity_list").read_text() == "5"
    assert (tmp_path / "sys/devices/system/cpu/cpu3/cpufreq/scaling_governor").read_text() == "performance"
    # a vanished IRQ is reported and makes the unit fail, the rest is still applied
    (tmp_path / "proc/interrupts").write_text("           CPU0       CPU1\n")
    proc = subprocess.run([sys.executable, str(script), "--root", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "mlx5_comp1@pci:0000:41:00.0 not found" in proc.stderr


class _Ctx:
    services = None
    root = None  # this machine's /: the script's #! names its system Python


@pytest.mark.usefixtures("simulated_kernel")
def test_boot_persistence_off_leaves_out_the_restore_unit_but_not_the_system_files(tmp_path: Path) -> None:
    """nodetune_persist_boot: false (a container, an image build): no boot-restore state, program or unit, and no
    enable (systemd need not run); sysctl.d, read by the system itself at boot, is still written."""
    root = tmp_path / "node"
    simnode.build(SPEC, str(root))
    on = {(s.id, s.target) for s in node.load(str(root), AREAS).settings}
    state = node.load(str(root), AREAS, persist_boot=False)
    off = {(s.id, s.target) for s in state.settings}
    assert {("persist.boot_restore", "script"), ("persist.boot_restore", area_persist.UNIT)} <= on
    # (and the checker's expectations of those files)
    assert {entry for entry in on - off if entry[0] != "check.expected"} == {
        entry for entry in on if entry[0] == "persist.boot_restore"}
    assert any(entry[0] == "persist.sysctl_d" for entry in off) and off < on
    assert any(note.startswith("persist: nodetune_persist_boot is false") for note in state.context.notes)
    engine.apply(state.root, state.settings, services=state.services)
    assert not (root / area_persist.UNIT_FILE).exists() and not (root / area_persist.SCRIPT_FILE).exists()
    assert not (root / services.WANTS / area_persist.UNIT).is_symlink()


def test_every_writing_role_passes_the_boot_persistence_toggle() -> None:
    """Declared once (areas.py) for the area roles, tune and verify; each of their module calls passes it."""
    for role in [*areas.AREAS, "tune", "verify"]:
        assert areas.defaults(role)["nodetune_persist_boot"] is True
        tasks = (REPO / "roles" / role / "tasks" / "main.yml").read_text()
        assert "persist_boot: '{{ nodetune_persist_boot }}'" in tasks.replace('"', "'"), role
    assert "nodetune_persist_boot" not in areas.defaults("bios_check")  # check mode only: writes nothing
