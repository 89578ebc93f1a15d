"""Running Ansible from the tests: ansible-playbook on a generated lab-like inventory, and a module ad hoc."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
LAB_TUNING = REPO / "inventories" / "lab" / "group_vars" / "all" / "tuning.yml"


def write_inventory(folder: Path, hosts: dict[str, dict[str, Any]]) -> Path:
    """An inventory like inventories/lab: local connection, the lab opt-ins, reports in the temporary folder."""
    group_vars = folder / "group_vars" / "all"
    group_vars.mkdir(parents=True, exist_ok=True)
    (group_vars / "tuning.yml").write_text(LAB_TUNING.read_text())
    (group_vars / "reports.yml").write_text(yaml.safe_dump({"nodetune_report_dir": str(folder / "reports")}))
    inventory = {"all": {"children": {"lab": {
        "hosts": hosts,
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                 "nodetune_lab_backend": "simulated"}}}}}
    path = folder / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def playbook(inventory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_CALLBACK_FORMAT_PRETTY="0")
    return subprocess.run(["ansible-playbook", "-i", str(inventory), *args], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=600, check=False)


def recap(result: subprocess.CompletedProcess[str], host: str) -> dict[str, int]:
    match = re.search(rf"^{re.escape(host)}\s*:\s*(.*)$", result.stdout, re.M)
    assert match, result.stdout[-3000:] + result.stderr[-3000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group(1))}


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    return result


def adhoc(module: str, args: dict, check: bool = False, diff: bool = False) -> tuple[int, dict]:
    """rc and result of an ad-hoc module run; the result gets the run's output under "_output" (the diff too: the
    callback prints it, not in the result)."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "collection"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    argv = ["ansible", "localhost", "-i", "localhost,", "-c", "local", "-e",
            f"ansible_python_interpreter={sys.executable}", "-e", "nodetune_lab_backend=simulated",
            "-m", module, "-a", json.dumps(args)]
    proc = subprocess.run(argv + (["--check"] if check else []) + (["--diff"] if diff else []), capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=300)
    head, sep, body = proc.stdout.partition(" => ")
    assert sep, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.returncode, dict(json.loads(body), _output=proc.stdout + proc.stderr)
