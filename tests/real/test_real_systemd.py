"""SystemdServices and the boot-time restore unit against a real systemd as PID 1. Opt-in: NODETUNE_REAL_LANES=1
(CI's first line sets it); as root, with systemd-nspawn; skipped, saying why, elsewhere.

A throw-away container boots this machine's /usr with ``systemd-nspawn --volatile=yes -D /`` (Debian's
systemd-container; TOOLING.md): its / is a tmpfs, /usr is the host's read-only, and /sys and /proc/sys are
read-only. The repository is bound read-only, and a temporary folder over /usr/local so that the restore program
can be installed where the unit runs it. The code runs inside on the node's own /usr/bin/python3 (module_utils
is standard library only), entered with nsenter, and writes only inside the container. The container is stopped by
its pid in every case.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NSPAWN = shutil.which("systemd-nspawn")
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(REPO / "collection"),
       "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}


def _why_not() -> str | None:
    if os.environ.get("NODETUNE_REAL_LANES") != "1":
        return ("opt-in: set NODETUNE_REAL_LANES=1 (CI's first line does) to boot a systemd-nspawn container "
                "(needs root and systemd-container)")
    if os.geteuid() != 0:
        return "needs root to boot a systemd-nspawn container"
    if NSPAWN is None or shutil.which("nsenter") is None:
        return "systemd-nspawn (Debian: systemd-container) or nsenter is not installed"
    if not os.access("/usr/bin/python3", os.X_OK):
        return "no /usr/bin/python3 for the code inside the container"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))]


def _leader(nspawn: subprocess.Popen, deadline: float) -> int:
    """The container's PID 1 as seen here: the child of nspawn (a subreaper) that runs systemd; before it, an
    intermediate child of nspawn's may be there."""
    children = Path(f"/proc/{nspawn.pid}/task/{nspawn.pid}/children")
    while time.monotonic() < deadline and nspawn.poll() is None:
        for pid in children.read_text().split() if children.exists() else []:
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "systemd":
                    return int(pid)
            except OSError:
                continue
        time.sleep(0.1)
    raise AssertionError(f"systemd-nspawn started no container (exit {nspawn.poll()})")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _booted(leader: int, deadline: float) -> str:
    """The container's state once booted: ``--wait`` waits for the boot, once systemd answers on its bus at all."""
    said = ""
    while time.monotonic() < deadline:
        done = inside(leader, ["systemctl", "is-system-running", "--wait"], timeout=max(1, deadline - time.monotonic()))
        said = done.stdout.strip() or done.stderr.strip()
        if done.stdout.strip() not in ("", "offline"):
            return said
        # "offline" (no /run/systemd/system yet) or "Failed to connect to bus": systemd is still starting
        time.sleep(0.2)
    return said


def inside(leader: int, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["nsenter", "-t", str(leader), "-a", *argv], capture_output=True, text=True,
                          env=ENV, timeout=timeout, check=False)


def _stop(nspawn: subprocess.Popen) -> None:
    """SIGTERM (the container's systemd shuts down), then SIGKILL of the whole process group."""
    if nspawn.poll() is None:
        nspawn.send_signal(signal.SIGTERM)
        try:
            nspawn.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(nspawn.pid, signal.SIGKILL)
            nspawn.wait(timeout=20)


@pytest.fixture(scope="module")
def container(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    local = tmp_path_factory.mktemp("usr-local")
    (local / "sbin").mkdir()
    log = (tmp_path_factory.mktemp("nspawn") / "console.log").open("w")
    nspawn = subprocess.Popen(
        [str(NSPAWN), "-q", "--register=no", "--keep-unit", "--volatile=yes", "-D", "/",
         f"--bind-ro={REPO}", f"--bind={local}:/usr/local", "-b", "systemd.firstboot=off"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    leader = 0
    try:
        deadline = time.monotonic() + 60
        leader = _leader(nspawn, deadline)
        state = _booted(leader, deadline)
        # degraded: a unit of the host's that cannot run in a container (ssh without host keys) failed
        assert state in ("running", "degraded"), f"the container did not boot to multi-user: {state}"
        yield leader
    finally:
        _stop(nspawn)
        log.close()
        assert nspawn.poll() is not None, "the container's systemd-nspawn is still running"
        assert not leader or not _alive(leader), "the container's PID 1 is still running"


def run_inside(leader: int, code: str) -> dict:
    """Run ``code`` on the container's /usr/bin/python3; it prints one JSON object last."""
    done = inside(leader, ["/usr/bin/python3", "-c", textwrap.dedent(code)], timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


COMMON = """
import json, os, subprocess
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import services

def run(argv):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout, done.stderr

manager = services.for_root(type("Host", (), {"backend": None, "is_host": True, "path": "/"})(), run)
"""


def test_a_throwaway_unit_is_enabled_started_stopped_and_disabled(container: int) -> None:
    seen = run_inside(container, COMMON + """
unit = "nodetune-probe.service"
with open("/etc/systemd/system/" + unit, "w") as handle:
    handle.write("[Service]\\nType=oneshot\\nRemainAfterExit=yes\\nExecStart=/bin/true\\n"
                 "[Install]\\nWantedBy=multi-user.target\\n")
out = {"offline": manager.offline, "before": manager.state(unit)}
manager.set_state(unit, {"enabled": "yes", "active": "yes"})
out["on"] = manager.state(unit)
out["linked"] = os.path.islink("/etc/systemd/system/multi-user.target.wants/" + unit)
manager.set_state(unit, {"active": "no", "enabled": "no"})
out["off"] = manager.state(unit)
out["link_left"] = os.path.lexists("/etc/systemd/system/multi-user.target.wants/" + unit)
print(json.dumps(out))
""")
    assert seen["offline"] is False  # systemd runs there: daemon-reload, start and stop are real
    assert seen["before"] == {"enabled": "no", "active": "no"}
    assert seen["on"] == {"enabled": "yes", "active": "yes"} and seen["linked"]
    assert seen["off"] == {"enabled": "no", "active": "no"} and not seen["link_left"]


def test_the_restore_unit_is_installed_runs_and_is_reverted(container: int) -> None:
    """The persist area's Settings applied with the real systemd: the unit enabled after its file, started (the
    program re-applies its entry with the node's #! Python), then the revert leaves no link, unit or journal."""
    seen = run_inside(container, COMMON + """
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import persist as area_persist
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine
from ansible_collections.nodetune.instinct.plugins.module_utils import interpreter
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import Context
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import Setting

root = Root("/")
os.makedirs("/run/nodetune-probe")
# a runtime value a reboot would reset, somewhere the container may write (its /proc/sys and /sys are read-only)
runtime = [Setting("cpu.governor", "cpu0", "run/nodetune-probe/scaling_governor", "performance",
                   persist="boot_restore")]
settings = area_persist.build(Context(root, {}, {}, manager), runtime, {})
result = engine.apply(root, settings, services=manager)
unit, link = area_persist.UNIT, "/etc/systemd/system/multi-user.target.wants/" + area_persist.UNIT
out = {"applied": [a["target"] for a in result["actions"]], "state": manager.state(unit),
       "linked": os.path.islink(link), "shebang": open("/" + area_persist.SCRIPT_FILE).readline()}
out["start"] = run(["systemctl", "start", unit])
out["restored"] = open("/run/nodetune-probe/scaling_governor").read()
out["after_start"] = manager.state(unit)
out["second"] = engine.apply(root, settings, services=manager)["changed"]
out["revert"] = len(engine.revert(root, services=manager)["restored"])
out["left"] = [p for p in (link, "/" + area_persist.UNIT_FILE, "/" + area_persist.SCRIPT_FILE,
                           "/" + engine.JOURNAL) if os.path.lexists(p)]
out["is_enabled"] = run(["systemctl", "is-enabled", unit])
out["load_state"] = run(["systemctl", "show", "-p", "LoadState", "--value", unit])[1].strip()
print(json.dumps(out))
""")
    assert seen["applied"][-1] == "nodetune-restore.service", seen["applied"]  # enabled after its files
    assert seen["state"] == {"enabled": "yes", "active": "no"} and seen["linked"]
    assert seen["shebang"] == "#!/usr/bin/python3\n"
    assert seen["start"][0] == 0, seen["start"]
    assert seen["restored"] == "performance"
    assert seen["after_start"] == {"enabled": "yes", "active": "yes"}
    assert seen["second"] is False
    assert seen["revert"] == len(seen["applied"])
    assert seen["left"] == []
    assert seen["is_enabled"][0] != 0, seen["is_enabled"]
    assert seen["load_state"] == "not-found", "systemd still has the removed unit loaded"


def test_the_irq_repin_timer_is_started_runs_and_is_reverted(container: int) -> None:
    """An IRQ pin in the state brings nodetune-irq-repin.timer (mlx5 creates completion vectors on first use): the
    real systemd accepts both units (systemd-analyze verify), apply enables and starts the timer after its files,
    its oneshot runs the program with --irqs (a vector not created yet is pending: exit 0, no output), a second
    apply changes nothing, and the revert stops and removes the timer."""
    seen = run_inside(container, COMMON + """
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import persist as area_persist
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import Context
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import Setting

root = Root("/")
bdf = sorted(os.listdir("/sys/bus/pci/devices"))[0]  # a device that is there, with no such vector (yet)
pins = [Setting("irq.nic_local", "irq 999", "proc/irq/999/smp_affinity_list", "0", compare="cpulist",
                key="mlx5_comp0@pci:" + bdf, persist="boot_restore")]
settings = area_persist.build(Context(root, {}, {}, manager), pins, {})
result = engine.apply(root, settings, services=manager)
timer = area_persist.REPIN_TIMER
out = {"applied": [a["target"] for a in result["actions"]], "state": manager.state(timer)}
out["verify"] = run(["systemd-analyze", "verify", "/" + area_persist.REPIN_TIMER_FILE,
                     "/" + area_persist.REPIN_UNIT_FILE])
out["run"] = run(["systemctl", "start", area_persist.REPIN_UNIT])
out["result"] = run(["systemctl", "show", "-p", "Result", "--value", area_persist.REPIN_UNIT])[1].strip()
out["second"] = engine.apply(root, settings, services=manager)["changed"]
out["revert"] = len(engine.revert(root, services=manager)["restored"])
out["after"] = manager.state(timer)
out["load_state"] = run(["systemctl", "show", "-p", "LoadState", "--value", timer])[1].strip()
print(json.dumps(out))
""")
    applied = seen["applied"]
    assert applied.index("nodetune-irq-repin.timer") > applied.index("repin timer"), applied  # after its files
    assert seen["state"] == {"enabled": "yes", "active": "yes"}
    assert seen["verify"][0] == 0, seen["verify"]
    assert seen["run"][0] == 0 and seen["result"] == "success", seen["run"]
    assert seen["second"] is False
    assert seen["revert"] == len(seen["applied"])
    assert seen["after"] == {"enabled": "no", "active": "no"}
    assert seen["load_state"] == "not-found", "systemd still has the removed timer loaded"
