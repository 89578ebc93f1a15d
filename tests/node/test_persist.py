"""The boot-time restore script as rendered for real nodes, run on a plain tree (no simulated kernel)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine, node
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import persist as area_persist
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import services
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import CPULIST, Setting
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.support.lab_vars import AREAS
from tests.support.specs import AUDIT_SPEC as SPEC

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
                key="mlx5_comp1@pci:0000:41:00.0", irq_name="mlx5_comp1@pci:0000:41:00.0", persist="boot_restore"),
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
    """Declared once (areas/declarations.py) for the area roles, tune and verify; each of their module calls passes
    it."""
    for role in [*areas.AREAS, "tune", "verify"]:
        assert areas.defaults(role)["nodetune_persist_boot"] is True
        tasks = (REPO / "roles" / role / "tasks" / "main.yml").read_text()
        assert "persist_boot: '{{ nodetune_persist_boot }}'" in tasks.replace('"', "'"), role
    assert "nodetune_persist_boot" not in areas.defaults("bios_check")  # check mode only: writes nothing


def _late_vector_tree(root: Path) -> dict:
    """A plain tree with mlx5 NIC 0000:41:00.0 whose completion vector 0 exists (IRQ 200) and vector 1 not yet, and
    the boot-restore state pinning both, rendered by area_persist from Settings as apply writes it."""
    bdf = "0000:41:00.0"
    names = {0: f"mlx5_comp0@pci:{bdf}", 1: f"mlx5_comp1@pci:{bdf}"}
    (root / f"sys/bus/pci/devices/{bdf}/msi_irqs").mkdir(parents=True)
    _make_irq(root, bdf, 200, names[0], "0-7")
    (root / "proc/interrupts").write_text("           CPU0       CPU1\n")  # not read: the device lists msi_irqs
    settings = [Setting("irq.nic_local", f"irq {150 + i}", f"proc/irq/{150 + i}/smp_affinity_list", str(5 + i),
                        compare=CPULIST, key=name, irq_name=name, persist="boot_restore") for i, name in names.items()]
    for setting in area_persist.build(_Ctx(), settings, {}):
        if setting.kind == "file":
            (root / setting.path).parent.mkdir(parents=True, exist_ok=True)
            (root / setting.path).write_text(setting.value)
    return names


def _make_irq(root: Path, bdf: str, number: int, name: str, cpus: str) -> None:
    """What the kernel shows once a driver has requested IRQ ``number`` named ``name`` for device ``bdf``."""
    (root / f"sys/bus/pci/devices/{bdf}/msi_irqs/{number}").write_text("msix\n")
    (root / f"proc/irq/{number}/{name}").mkdir(parents=True)
    (root / f"proc/irq/{number}/smp_affinity_list").write_text(cpus + "\n")


def _restore(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(root / area_persist.SCRIPT_FILE), "--root", str(root), *args],
                          capture_output=True, text=True)


def test_restore_script_leaves_a_vector_not_created_yet_pending_and_the_timer_pins_it_once(tmp_path: Path) -> None:
    """mlx5 creates its completion vectors on first use (Linux 6.5+, f14c1a14e632): after a reboot the boot restore
    finds only some. The others are pending, not failures (exit 0); the timer's --irqs run pins each one once, when
    it appears, and leaves alone what it pinned before (a later hand move is verify's to report)."""
    names = _late_vector_tree(tmp_path)
    affinity = tmp_path / "proc/irq/{}/smp_affinity_list"
    boot = _restore(tmp_path)
    assert boot.returncode == 0, boot.stderr
    assert "2 settings, 0 failed, 1 pending" in boot.stdout and names[1] in boot.stdout
    assert Path(str(affinity).format(200)).read_text() == "5"
    assert json.loads((tmp_path / area_persist.PINNED_RECORD).read_text()) == {names[0]: 200}
    quiet = _restore(tmp_path, "--irqs")  # nothing new: no output at all (the timer runs every 10 s)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    # a job opens vector 1: the driver creates it as IRQ 213 on the driver's default CPU
    _make_irq(tmp_path, "0000:41:00.0", 213, names[1], "2")
    tick = _restore(tmp_path, "--irqs")
    assert tick.returncode == 0 and "pinned 1 IRQ(s) created since boot, 0 failed, 0 pending" in tick.stdout
    assert Path(str(affinity).format(213)).read_text() == "6"
    assert json.loads((tmp_path / area_persist.PINNED_RECORD).read_text()) == {names[0]: 200, names[1]: 213}
    Path(str(affinity).format(213)).write_text("3")  # moved by hand afterwards: left for verify to report
    again = _restore(tmp_path, "--irqs")
    assert (again.returncode, again.stdout) == (0, "") and Path(str(affinity).format(213)).read_text() == "3"
    # the device gone altogether is a failure of the boot restore, not a pending IRQ
    shutil.rmtree(tmp_path / "sys/bus/pci/devices/0000:41:00.0")
    gone = _restore(tmp_path)
    assert gone.returncode == 1 and f"IRQ {names[0]} not found" in gone.stderr


def test_the_irq_state_brings_the_repin_timer_started_where_systemd_runs() -> None:
    """IRQs have no uevent (no udev rule, and inotify does not work on /proc for a path unit): a timer runs the
    program again; systemd.timer(5) repeats it relative to its last run, and a repeated service has no
    RemainAfterExit (the boot unit has it). Started where systemd runs, only enabled in an offline root."""
    setting = Setting("irq.nic_local", "irq 150", "proc/irq/150/smp_affinity_list", "5", compare=CPULIST,
                      key="mlx5_comp0@pci:0000:41:00.0", persist="boot_restore")
    by_target = {s.target: s for s in area_persist.build(_ServicesCtx(offline=False), [setting], {})}
    timer, unit = by_target["repin timer"], by_target["repin unit"]
    assert "OnUnitActiveSec=10s" in timer.value and "WantedBy=timers.target" in timer.value
    assert f"ExecStart=/{area_persist.SCRIPT_FILE} --irqs" in unit.value and "RemainAfterExit" not in unit.value
    assert by_target[area_persist.REPIN_TIMER].value == "active=yes,enabled=yes"
    offline = {s.target: s for s in area_persist.build(_ServicesCtx(offline=True), [setting], {})}
    assert offline[area_persist.REPIN_TIMER].value == "enabled=yes"
    # no IRQ to pin, no timer
    governor = Setting("cpu.governor", "cpu3", "sys/devices/system/cpu/cpu3/cpufreq/scaling_governor", "performance",
                       persist="boot_restore")
    assert not [s for s in area_persist.build(_ServicesCtx(offline=False), [governor], {}) if "repin" in s.target]


class _ServicesCtx(_Ctx):
    def __init__(self, offline: bool) -> None:
        self.services = type("Services", (), {"offline": offline})()
