#!/usr/bin/env python3
"""The node-local checker (issue 15): ``nodetune-check`` on a tuned 384-CPU MI300X lab node, whole processes.

Run from the repository root (after ``scripts/bootstrap.sh``)::

    .venv/bin/python bench/node_check.py [--repeat 9]

The lab's MI300X spec (2x EPYC 9654, 384 CPUs, 8 GPUs, 8 HCAs, 8 NVMe) is built (in /dev/shm where it exists),
tuned with the lab's variables and a declared inventory, and the rendered ``/usr/local/sbin/nodetune-check`` is
run as a scheduler runs it (``python3 -I``: its own file, nothing else), clean and with ``--nhc``, interleaved with
a bare interpreter start (``python3 -I -c pass``) so that the ratio shows what the checker itself costs. Target:
a clean check under 0.5 s wall.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

_common.use_repository_code()

TARGET_S = 0.5
EXPECTED = {"gpu_count": 8, "gpu_model": "MI300X", "compute_partition": "SPX", "memory_partition": "NPS1",
            "xgmi_hive_size": 8, "hca_count": 8, "hca_rate": 400, "hca_width": "4X", "nvme_count": 8,
            "cpu_count": 384, "numa_per_socket": 1}


def tuned_node(workdir):
    from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine, node
    from ansible_collections.nodetune.instinct.plugins.module_utils.areas import checker_files
    from ansible_collections.nodetune.lab.plugins.module_utils import simkernel, simnode

    simkernel.install()  # the simulated node's writes are answered by the lab's kernel

    from tests.support.lab_vars import role_areas

    root = workdir / "mi300x"
    simnode.build(str(_common.REPO / "inventories/lab/specs/mi300x.yml"), str(root))
    state = node.load(str(root), role_areas(), {}, expected_inventory=EXPECTED)
    engine.apply(state.root, state.settings, services=state.services)
    entries = sum(len(json.loads(p.read_text())["settings"]) for p in (root / checker_files.CHECK_DIR).glob("*.json")
                  if p.name != "inventory.json")
    return root, root / checker_files.CHECK_SCRIPT, entries


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    workdir = _common.shm_dir("nodetune-check-bench-")
    try:
        root, script, entries = tuned_node(workdir)
        python = [sys.executable, "-I"]
        cases = [
            ("python3 -I -c pass", lambda: _common.run_timed(python + ["-c", "pass"])),
            ("nodetune-check", lambda: _common.run_timed(python + [str(script), "--root", str(root)])),
            ("nodetune-check --nhc", lambda: _common.run_timed(python + [str(script), "--root", str(root), "--nhc"])),
        ]
        series = _common.interleaved(cases, args.repeat)
        for name in ("nodetune-check", "nodetune-check --nhc"):
            codes = {s.returncode for s in series[name].samples}
            if codes != {0}:
                print(f"{name} exited {codes} on the tuned node: {series[name].samples[0].stdout}")
                return 1
        base = series["python3 -I -c pass"]
        rows = [(name, s.wall, s.cpu, _common.ratio(s.wall, base.wall)) for name, s in series.items()]
        print(_common.machine_text(_common.machine()))
        print(_common.load_text())
        print(f"node: lab mi300x spec, 384 CPUs; {entries} expected Settings + {len(EXPECTED)} inventory keys checked;"
              f" {args.repeat} rounds, medians")
        print(_common.table(("case", "wall s", "cpu s", "x interpreter start"), rows))
        check = series["nodetune-check"].wall
        print(f"nodetune-check: {check:.3f} s wall, target < {TARGET_S:.1f} s: {_common.verdict(check, TARGET_S)}"
              f" (ratio to target {check / TARGET_S:.2f})")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
