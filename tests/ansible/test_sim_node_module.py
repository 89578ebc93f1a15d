"""The nodetune.lab.sim_node module: idempotent builds, check mode, reboot, removal, clear failures.

The module runs the way Ansible runs it (a separate Python process reading its arguments from a JSON file), and
playbooks/lab.yml is run once through ansible-playbook with a throw-away inventory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "collection"
MODULE = COLLECTION / "ansible_collections/nodetune/lab/plugins/modules/sim_node.py"
SPECS = REPO / "inventories/lab/specs"

SPEC = {
    "name": "mod",
    "cpu": {"model": "EPYC 7763", "sockets": 1, "cores_per_socket": 8, "smt": "on"},
    "numa": {"per_socket": 1},
    "memory_gb": 32,
    "gpus": [{"model": "MI250", "bdf": "0000:05:00.0", "package": 0, "switch": "s0"},
             {"model": "MI250", "bdf": "0000:06:00.0", "package": 0, "switch": "s0"}],
    "nics": [{"name": "ib0", "model": "ConnectX-6", "bdf": "0000:04:00.0", "switch": "s0"}],
    "nvme": [{"model": "P5800X", "bdf": "0000:41:00.0", "max_queues": 4}],
}


def run_module(args: dict, check: bool = False, tmp: Path | None = None) -> dict:
    payload = dict(args)
    if check:
        payload["_ansible_check_mode"] = True
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, dir=tmp) as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": payload}, handle)
    env = dict(os.environ, PYTHONPATH=str(COLLECTION) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        done = subprocess.run([sys.executable, str(MODULE), handle.name], capture_output=True, text=True, env=env,
                              timeout=300, check=False)
    finally:
        os.unlink(handle.name)
    assert "Traceback" not in done.stderr, done.stderr
    result = json.loads(done.stdout)
    result["rc"] = done.returncode
    return result


@pytest.fixture
def where(tmp_path):
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        path = Path(tempfile.mkdtemp(prefix="nodetune-sim-node-", dir=shm))
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield tmp_path


def test_present_builds_once_then_reports_unchanged(where):
    dest = where / "node"
    first = run_module({"spec": SPEC, "dest": str(dest)})
    assert first["changed"] is True and first["action"] == "built" and first["entries"] > 100
    assert first["summary"]["cpus"] == 16 and first["summary"]["gpus"] == 2 and first["summary"]["nvme"] == 1
    assert (dest / ".nodetune-simnode.json").is_file()
    (dest / "proc/sys/vm/dirty_ratio").write_text("5\n")  # a role's change survives an unchanged spec
    second = run_module({"spec": SPEC, "dest": str(dest)})
    assert second["changed"] is False and second["action"] == "unchanged"
    assert (dest / "proc/sys/vm/dirty_ratio").read_text() == "5\n"
    forced = run_module({"spec": SPEC, "dest": str(dest), "force": True})
    assert forced["changed"] is True and forced["action"] == "rebuilt"
    assert (dest / "proc/sys/vm/dirty_ratio").read_text() == "20\n"


def test_spec_change_rebuilds_and_spec_file_works(where):
    dest = where / "node"
    run_module({"spec": SPEC, "dest": str(dest)})
    changed = dict(SPEC, memory_gb=64)
    spec_file = where / "spec.json"
    spec_file.write_text(json.dumps(changed))
    result = run_module({"spec_file": str(spec_file), "dest": str(dest)})
    assert result["changed"] is True and result["action"] == "rebuilt"
    again = run_module({"spec_file": str(spec_file), "dest": str(dest)})
    assert again["changed"] is False


def test_check_mode_writes_nothing(where):
    dest = where / "node"
    planned = run_module({"spec": SPEC, "dest": str(dest)}, check=True)
    assert planned["changed"] is True and planned["action"] == "built" and not dest.exists()
    run_module({"spec": SPEC, "dest": str(dest)})
    (dest / "proc/sys/vm/dirty_ratio").write_text("5\n")
    reboot = run_module({"dest": str(dest), "state": "rebooted"}, check=True)
    assert reboot["changed"] is True and "proc/sys/vm/dirty_ratio" in reboot["reset"]
    assert (dest / "proc/sys/vm/dirty_ratio").read_text() == "5\n"
    removal = run_module({"dest": str(dest), "state": "absent"}, check=True)
    assert removal["changed"] is True and dest.exists()


def test_rebooted_and_absent(where):
    dest = where / "node"
    run_module({"spec": SPEC, "dest": str(dest)})
    assert run_module({"dest": str(dest), "state": "rebooted"})["changed"] is False  # fresh tree: boot values
    (dest / "sys/devices/system/cpu/cpu3/cpufreq/scaling_governor").write_text("performance\n")
    (dest / "etc/sysctl.d/90-test.conf").write_text("vm.dirty_ratio = 33\n")
    reboot = run_module({"dest": str(dest), "state": "rebooted"})
    assert reboot["changed"] is True
    assert "sys/devices/system/cpu/cpufreq/policy3/scaling_governor" in reboot["reset"]
    assert reboot["applied"] == ["sysctl vm.dirty_ratio=33"]
    assert (dest / "proc/sys/vm/dirty_ratio").read_text() == "33\n"
    gone = run_module({"dest": str(dest), "state": "absent"})
    assert gone["changed"] is True and gone["action"] == "removed" and not dest.exists()
    assert run_module({"dest": str(dest), "state": "absent"})["changed"] is False


def test_failures_are_clear_and_touch_nothing(where):
    foreign = where / "data"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    refused = run_module({"spec": SPEC, "dest": str(foreign)})
    assert refused["failed"] is True and "not a simulated node" in refused["msg"]
    refused = run_module({"dest": str(foreign), "state": "absent"})
    assert refused["failed"] is True and "refusing to delete" in refused["msg"]
    assert os.listdir(foreign) == ["keep.txt"]
    root = run_module({"spec": SPEC, "dest": "/"})
    assert root["failed"] is True and "real root" in root["msg"]
    bad = run_module({"spec": dict(SPEC, cpu={"model": "EPYC 7763", "sockets": 0}), "dest": str(where / "n")})
    assert bad["failed"] is True and "cpu.sockets: 0 is not valid" in bad["msg"]
    assert not (where / "n").exists()
    missing = run_module({"dest": str(where / "n"), "state": "rebooted"})
    assert missing["failed"] is True and "does not exist" in missing["msg"]
    neither = run_module({"dest": str(where / "n")})
    assert neither["failed"] is True and "spec" in neither["msg"]
    both = run_module({"dest": str(where / "n"), "spec": SPEC, "spec_file": "x.yml"})
    assert both["failed"] is True and "mutually exclusive" in both["msg"]


def test_yaml_spec_file_is_read(where):
    dest = where / "node"
    spec_file = where / "spec.yml"
    spec_file.write_text(yaml.safe_dump(SPEC))
    result = run_module({"spec_file": str(spec_file), "dest": str(dest)})
    assert result["changed"] is True and result["summary"]["ib_devices"] == 1


@pytest.mark.slow
def test_lab_playbook_builds_hosts_with_a_spec_and_is_idempotent(where):
    """playbooks/lab.yml with the lab specs, run twice, on a throw-away inventory (not the repo's lab/)."""
    if shutil.which("ansible-playbook", path=os.path.dirname(sys.executable)) is None:
        pytest.skip("ansible-playbook is not installed next to this Python")
    inventory = where / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"lab": {
        "hosts": {"sim-a": {"nodetune_sim_spec": str(SPECS / "mi250.yml")}, "plain-b": {}},
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "nodetune_root": str(where) + "/{{ inventory_hostname }}"}}}}}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="default",
               ANSIBLE_NOCOLOR="1", PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory),
               str(REPO / "playbooks/lab.yml")]
    first = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO / "playbooks", timeout=600,
                           check=False)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "sim-a                      : ok=2    changed=1" in first.stdout  # the role's include, its build
    assert "plain-b                    : ok=0    changed=0    unreachable=0    failed=0    skipped=1" in first.stdout
    assert (where / "sim-a/sys/class/kfd/kfd/topology/nodes").is_dir() and not (where / "plain-b").exists()
    second = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=600, check=False)
    assert second.returncode == 0 and "sim-a                      : ok=2    changed=0" in second.stdout


@pytest.mark.slow
def test_ansible_doc_renders_the_module():
    ansible_doc = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    if not os.path.exists(ansible_doc):
        pytest.skip("ansible-doc is not installed next to this Python")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTION), ANSIBLE_NOCOLOR="1")
    done = subprocess.run([ansible_doc, "-t", "module", "nodetune.lab.sim_node"], capture_output=True,
                          text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "simulated node" in done.stdout and "rebooted" in done.stdout and "EXAMPLES" in done.stdout
