"""Check mode and verify against THIS machine's own /, proven read-only.

The run happens in a private mount namespace (``unshare -m``) where /sys, /proc/sys, /proc/irq, /etc and /var are
bind-mounted read-only (DESIGN.md safety rules, TOOLING.md last section): any write attempt fails with EROFS, so a
check-mode run that succeeds there wrote nothing. The namespace is checked to be read-only before anything runs.
Never runs apply for real against /.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow

# The tuning a real MI300X node would get (the lab defaults); on this machine most areas are not applicable.
AREAS = {
    "cpu": {"nodetune_cpu_governor": "performance", "nodetune_cpu_idle_states_disabled": ["C2"]},
    "nvme": {"nodetune_nvme_scheduler": "none", "nodetune_nvme_nr_requests": "max"},
    "sysctl": {"nodetune_vm_dirty_ratio": 20, "nodetune_vm_dirty_background_ratio": 10,
               "nodetune_kernel_numa_balancing": 0},
    "irq_affinity": {"nodetune_irqbalance_mode": "disable", "nodetune_irq_pin_nic": True},
    "infiniband": {"nodetune_net_core_rmem_max": 2097152, "nodetune_net_core_wmem_max": 2097152},
    "rocm_env": {"nodetune_rocm_env": {"NCCL_DEBUG": "WARN"}},
}

READONLY = ("/sys", "/proc/sys", "/proc/irq", "/etc", "/var", "/usr")

SETUP = textwrap.dedent("""\
    set -e
    for m in {mounts}; do
        [ -e "$m" ] || continue
        mount -o bind,ro "$m" "$m"
        mount -o remount,bind,ro "$m"
    done
    # ansible's temp dirs live on a private tmpfs (HOME is under /root, which stays writable only there)
    mount -t tmpfs tmpfs "$NODETUNE_TMP"
    # prove the namespace is read-only before running anything
    if ( echo 20 > /proc/sys/vm/dirty_ratio ) 2>/dev/null; then echo "namespace NOT read-only" >&2; exit 90; fi
    if ( : > /etc/.nodetune-ro-probe ) 2>/dev/null; then echo "namespace NOT read-only (/etc)" >&2; exit 90; fi
    exec "$@"
""").format(mounts=" ".join(READONLY))


def _namespace_available() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create a mount namespace"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return "unshare -m is not permitted here: " + probe.stderr.strip()
    return None


def run_readonly(tmp_path: Path, argv: list[str]) -> subprocess.CompletedProcess:
    reason = _namespace_available()
    if reason:
        pytest.skip(reason)
    private_tmp = tmp_path / "ns-tmp"
    private_tmp.mkdir()
    env = dict(os.environ, NODETUNE_TMP=str(private_tmp), PATH=f"{VENV_BIN}:{os.environ['PATH']}",
               ANSIBLE_LOCAL_TEMP=str(private_tmp / "local"), ANSIBLE_REMOTE_TEMP=str(private_tmp / "remote"),
               ANSIBLE_HOME=str(private_tmp / "home"), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collection"), ANSIBLE_NOCOLOR="1")
    return subprocess.run(["unshare", "-m", "sh", "-c", SETUP, "nodetune-ro", *argv], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)


def adhoc(module: str, args: dict, check: bool) -> list[str]:
    argv = ["ansible", "localhost", "-i", "localhost,", "-c", "local", "-e",
            f"ansible_python_interpreter={sys.executable}", "-m", module, "-a", json.dumps(args)]
    return argv + (["--check", "--diff"] if check else [])


def _result(proc: subprocess.CompletedProcess) -> dict:
    """The module result from ad-hoc output ('localhost | SUCCESS => {...}')."""
    assert proc.returncode in (0, 2), \
        f"rc={proc.returncode}\nstdout:{proc.stdout[-3000:]}\nstderr:{proc.stderr[-3000:]}"
    start = proc.stdout.rfind("\nlocalhost | ") + 1 if "\nlocalhost | " in proc.stdout else 0
    head, sep, body = proc.stdout[start:].partition("=> ")
    assert sep and head.startswith("localhost |"), proc.stdout[-3000:]
    return json.loads(body)


def test_check_mode_against_the_real_machine_writes_nothing(tmp_path: Path) -> None:
    proc = run_readonly(tmp_path, adhoc("nodetune.instinct.tune", {"root": "/", "areas": AREAS}, check=True))
    res = _result(proc)
    assert not res.get("failed"), res.get("msg")
    # a real node differs from the tuning in at least one sysctl: check mode shows it without writing
    assert isinstance(res["actions"], list)
    for action in res["actions"]:
        assert action["path"] is None or action["path"].startswith("/")
    assert "EROFS" not in proc.stdout and "Read-only file system" not in proc.stdout


def test_verify_against_the_real_machine_is_read_only(tmp_path: Path) -> None:
    modules = REPO / "collection/ansible_collections/nodetune/instinct/plugins/modules"
    if not (modules / "verify.py").exists():
        pytest.skip("the verify module is not in this checkout yet")
    proc = run_readonly(tmp_path, adhoc("nodetune.instinct.verify", {"root": "/", "areas": AREAS}, check=False))
    res = _result(proc)
    assert not res.get("failed"), res.get("msg")
    assert res["findings"], "verify reports findings (ok, drift or not_applicable) for every enabled area"
    assert "Read-only file system" not in proc.stdout
