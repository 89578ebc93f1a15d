#!/usr/bin/env python3
"""What site.yml costs over a fleet of simulated nodes, as a multiple of a one-task ping playbook.

Run from the repository root (after ``scripts/bootstrap.sh``)::

    .venv/bin/python bench/fleet_cost.py [--nodes 64] [--workdir DIR] [--keep]

Builds ``--nodes`` simulated lab nodes (half the MI250 spec, half the MI300X spec of inventories/lab/specs; each
spec is built once and copied), writes an inventory with the lab's opt-ins, and times, with the repository's
ansible.cfg (forks 16):

- ``ping``: one ``ansible.builtin.ping`` task (the unit of cost: one module call per host);
- ``site``: site.yml on the fresh nodes (the lab play skips them: they exist), which applies and verifies;
- ``site (no-op)``: site.yml again, nothing to change;
- ``apply (no-op)``: playbooks/apply.yml alone, nothing to change.

Targets (issue 4): site <= 4x ping, a no-op rerun <= 3x ping. Wall time is what a user waits for; CPU time (user +
system of ansible-playbook and its workers) is steadier on a shared machine. Both are printed, with the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "collection"))

from ansible_collections.nodetune.instinct.plugins.module_utils import simnode  # noqa: E402

SPECS = ("mi250", "mi300x")
PING = "- name: Ping\n  hosts: all\n  gather_facts: false\n  tasks:\n    - name: Ping\n      ansible.builtin.ping:\n"


def build_nodes(workdir: Path, count: int) -> dict[str, Path]:
    templates = workdir / "templates"
    nodes: dict[str, Path] = {}
    for index in range(count):
        spec = SPECS[index % len(SPECS)]
        template = templates / spec
        if not template.exists():
            simnode.build(str(REPO / "inventories" / "lab" / "specs" / f"{spec}.yml"), str(template))
        dest = workdir / "nodes" / f"{spec}-{index:03d}"
        if not dest.exists():
            shutil.copytree(template, dest, symlinks=True)
        nodes[dest.name] = dest
    return nodes


def write_inventory(workdir: Path, nodes: dict[str, Path]) -> Path:
    group_vars = workdir / "group_vars" / "all"
    group_vars.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "inventories" / "lab" / "group_vars" / "all" / "tuning.yml", group_vars / "tuning.yml")
    (group_vars / "reports.yml").write_text(f"nodetune_report_dir: {workdir / 'reports'}\n")
    hosts = {name: {"nodetune_root": str(path),
                    "nodetune_sim_spec": str(REPO / "inventories" / "lab" / "specs" / (name.split("-")[0] + ".yml"))}
             for name, path in nodes.items()}
    inventory = {"all": {"hosts": hosts, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}
    path = workdir / "hosts.yml"
    path.write_text(json.dumps(inventory, indent=1))  # JSON is YAML
    (workdir / "ping.yml").write_text(PING)
    return path


def timed(inventory: Path, playbook: str) -> tuple[float, float, str]:
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_NOCOLOR="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    result = subprocess.run(["ansible-playbook", "-i", str(inventory), playbook], cwd=REPO, env=env, text=True,
                            capture_output=True, check=False)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if result.returncode != 0:
        sys.exit(f"{playbook} failed (rc={result.returncode}):\n{result.stdout[-4000:]}{result.stderr[-2000:]}")
    recap = result.stdout[result.stdout.rfind("PLAY RECAP"):]
    return wall, cpu, recap


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--workdir", type=Path, help="keep the nodes here (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="do not delete the temporary folder")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="nodetune-fleet-"))
    try:
        started = time.monotonic()
        nodes = build_nodes(workdir, args.nodes)
        inventory = write_inventory(workdir, nodes)
        print(f"{len(nodes)} simulated nodes in {workdir} ({time.monotonic() - started:.0f} s to build)")
        runs = [("ping", str(workdir / "ping.yml")), ("site", "site.yml"), ("site (no-op)", "site.yml"),
                ("apply (no-op)", "playbooks/apply.yml")]
        results = {}
        for label, playbook in runs:
            wall, cpu, recap = timed(inventory, playbook)
            results[label] = (wall, cpu)
            if label.endswith("(no-op)") and re.search(r"changed=[1-9]", recap):
                print(f"warning: {label} changed something:\n{recap}")
        ping_wall, ping_cpu = results["ping"]
        print(f"{'run':<15}{'wall s':>9}{'x ping':>8}{'cpu s':>9}{'x ping':>8}")
        for label, (wall, cpu) in results.items():
            print(f"{label:<15}{wall:>9.1f}{wall / ping_wall:>8.2f}{cpu:>9.1f}{cpu / ping_cpu:>8.2f}")
        print("targets: site <= 4x ping, no-op rerun <= 3x ping")
    finally:
        if not args.workdir and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
