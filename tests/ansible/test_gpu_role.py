"""The gpu role through ansible-playbook on a lab MI300X node (issue 26 item 3).

The role alone with its tag: check mode writes nothing and shows what it would write, apply puts the GPUs in
performance determinism at MI300X's 1900 MHz with a 700 W cap, verify (``--tags gpu``) finds them in place, a second
apply changes nothing, and revert puts the tree back byte for byte. A compute partition switch asked for while a
ROCm process holds /dev/kfd is refused before any write, naming the process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.nodetune.lab.plugins.module_utils import simkernel, simnode

from tests.support.playbooks import ok, playbook, recap
from tests.support.specs import small_spec
from tests.support.trees import changed_paths, tree_digest

pytestmark = pytest.mark.slow

GPUS = ("0000:05:00.0", "0000:85:00.0")


def inventory(folder: Path, node: Path, **variables: Any) -> Path:
    """One lab host on the local connection, answered by the simulated kernel, reports in ``folder``."""
    host = dict({"nodetune_root": str(node), "nodetune_gpu_perf_determinism": True, "nodetune_gpu_power_cap_w": 700},
                **variables)
    data = {"all": {"hosts": {"node1": host}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "nodetune_lab_backend": "simulated", "nodetune_report_dir": str(folder / "reports")}}}
    path = folder / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_gpu_role_alone_check_apply_verify_again_revert(tmp_path: Path) -> None:
    node = tmp_path / "node"
    simnode.build(small_spec(), str(node))
    pristine = tree_digest(node)
    hosts = inventory(tmp_path, node)
    book = tmp_path / "gpu.yml"
    book.write_text(yaml.safe_dump([{"name": "GPU alone", "hosts": "all", "gather_facts": False, "roles": ["gpu"]}]))

    check = ok(playbook(hosts, str(book), "--tags", "gpu", "--check", "--diff"))
    assert recap(check, "node1")["changed"] == 1
    for line in ("power_dpm_force_performance_level", "= perf_determinism", "= s 1 1900", "= 700000000"):
        assert line in check.stdout, check.stdout[-4000:]
    assert tree_digest(node) == pristine

    applied = ok(playbook(hosts, str(book), "--tags", "gpu"))
    assert recap(applied, "node1")["changed"] == 1
    for bdf in GPUS:
        dev = node / "sys/bus/pci/devices" / bdf
        assert (dev / "power_dpm_force_performance_level").read_text() == "perf_determinism\n"
        assert "1: 1900Mhz" in (dev / "pp_od_clk_voltage").read_text()
        hwmon = next((dev / "hwmon").iterdir())
        assert (hwmon / "power1_cap").read_text() == "700000000\n"
    touched = changed_paths(pristine, tree_digest(node))
    assert [p for p in touched if p.startswith("sys/") and not p.endswith(
        ("/power_dpm_force_performance_level", "/pp_od_clk_voltage", "/power1_cap"))] == []

    ok(playbook(hosts, "playbooks/verify.yml", "--tags", "gpu"))
    findings = json.loads((tmp_path / "reports" / "nodes" / "node1.json").read_text())["findings"]
    gpu = sorted((f["id"], f["target"], f["status"]) for f in findings if f["id"].startswith("gpu."))
    assert gpu == sorted((check_id, bdf, "ok") for bdf in GPUS
                         for check_id in ("gpu.perf_level", "gpu.determinism_clock", "gpu.power_cap"))

    again = ok(playbook(hosts, str(book), "--tags", "gpu"))
    assert recap(again, "node1")["changed"] == 0

    ok(playbook(hosts, "playbooks/revert.yml"))
    # byte for byte, but for the simulated driver's memory (the clock last set before a commit), which amdgpu keeps
    assert changed_paths(pristine, tree_digest(node)) == [simkernel.OD_CUSTOM]

    # a partition switch while a process holds /dev/kfd: refused before any write, naming it
    simnode.start_kfd_process(str(node), 4242, [GPUS[0]])
    before = tree_digest(node)
    busy = inventory(tmp_path, node, nodetune_gpu_compute_partition="CPX", nodetune_gpu_partition_allowed=True)
    refused = playbook(busy, str(book), "--tags", "gpu")
    assert refused.returncode != 0 and "pid 4242 (uses this GPU)" in refused.stdout, refused.stdout[-4000:]
    assert tree_digest(node) == before
