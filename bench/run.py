#!/usr/bin/env python3
"""nodetune's benchmarks in one run: fleet cost against ping, discovery against hwloc, planner scaling, fleet reports.

Run from the repository root (after ``scripts/bootstrap.sh``)::

    .venv/bin/python bench/run.py            # the full run (docs/benchmarks.md): ~15 min on 2 busy cores
    .venv/bin/python bench/run.py --quick    # smoke run: N=1, one repetition, one real capture (~1 min)

Options: ``--only fleet,discovery,planner,reports``, ``--nodes 1,8,32,64``, ``--repeat N`` (rounds for all three),
``--mitogen auto|yes|no``, ``--connection local|ssh`` (fleet: the nodes over SSH to 127.0.0.1, root only: the fleet
part is then bench/fleet_ssh.py, 64 nodes and 2 rounds by default), ``--pipelining off,on`` (over SSH: the settings
compared side by side), ``--json FILE`` (every figure, for docs/benchmarks.md).

Each part compares side by side in one run, interleaved, medians of several runs, ratios rather than absolute
times (the machines are shared and noisy); the load average is printed before each part. The last lines are
the ratio lines with their targets (issues 8 and 13):

- ``ratio fleet[...]``: site.yml <= 2.5x and a no-op rerun <= 1.5x a one-task ping playbook (issue 13); over SSH
  (``fleet[ssh, pipelining off|on]``, issue 28) site.yml <= 2.5x and the no-op rerun <= 1.3x, with and without
  pipelining;
- ``ratio discovery share of a no-op run ...`` (issue 28): discovery under 5% of a no-op tune call's process CPU on
  the largest lab node and a 1,152-CPU synthetic node (issue 8's ``nodetune discover`` <= 2x ``lstopo --input DIR``
  is still printed, without a verdict);
- ``ratio planner ...``: plan() under 50 ms at 1,152 CPUs and ~4,000 IRQs, growing linearly;
- ``ratio fleet reports ...`` (issue 12): the fleet report writers for 10,000 nodes under 60 s and 2 GiB, growing
  linearly, and (issue 28) the same reports from 10,000 nodes' report files (``--quick``: 100 and 1,000 nodes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
import discovery  # noqa: E402
import fleet_cost  # noqa: E402
import fleet_reports  # noqa: E402
import fleet_ssh  # noqa: E402
import plan_scaling  # noqa: E402

PARTS = ("fleet", "discovery", "planner", "reports")


def parse_parts(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        raise argparse.ArgumentTypeError(f"--only takes {', '.join(PARTS)} (comma-separated), got {text!r}")
    return parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: fleet N=1, one repetition, discovery on one small capture and the lab nodes")
    parser.add_argument("--only", type=parse_parts, default=list(PARTS), help="parts to run (default: all)")
    parser.add_argument("--nodes", type=fleet_cost.parse_sizes, help="fleet sizes (default 1,8,32,64; quick: 1)")
    parser.add_argument("--repeat", type=int, help="repetitions (default: fleet 3, discovery 7, planner 7; quick 1)")
    parser.add_argument("--mitogen", choices=("auto", "yes", "no"), default="auto",
                        help="fleet also with mitogen's strategy: where installed (auto), always, never")
    parser.add_argument("--connection", choices=fleet_cost.CONNECTIONS, default="local",
                        help="fleet: reach the nodes locally (default) or over SSH to 127.0.0.1 (root only)")
    parser.add_argument("--pipelining", type=fleet_ssh.parse_modes, default=fleet_ssh.PIPELINING,
                        help="fleet over SSH: the ANSIBLE_PIPELINING settings compared side by side (default off,on)")
    parser.add_argument("--json", type=Path, help="write every figure to this JSON file")
    args = parser.parse_args(argv)

    sizes = args.nodes or ([1] if args.quick else list(fleet_cost.DEFAULT_SIZES))
    repeat = args.repeat if args.repeat is not None else (1 if args.quick else None)
    started = time.monotonic()
    info = _common.machine()
    print(_common.machine_text(info), flush=True)
    results: dict = {"machine": info, "quick": args.quick}
    ratio_lines: list[str] = []
    if "planner" in args.only:
        results["planner"] = plan_scaling.run(max(1, repeat or 7), ratio_lines)
    if "discovery" in args.only:
        results["discovery"] = discovery.run(max(1, repeat or 7), args.quick, ratio_lines)
    if "reports" in args.only:
        results["reports"] = fleet_reports.run([100, 1000] if args.quick else list(fleet_reports.DEFAULT_SIZES),
                                               ratio_lines)
    if "fleet" in args.only and args.connection == "ssh":
        ssh_sizes = args.nodes or ([1] if args.quick else list(fleet_ssh.DEFAULT_SIZES))
        print(f"\nfleet over SSH: sizes {','.join(map(str, ssh_sizes))}; {_common.load_text()}", flush=True)
        results["fleet"] = fleet_ssh.run(ssh_sizes, max(1, repeat or 2), args.pipelining, out=ratio_lines)
    elif "fleet" in args.only:
        print(f"\nfleet: sizes {','.join(map(str, sizes))}; {_common.load_text()}", flush=True)
        results["fleet"] = fleet_cost.run(sizes, max(1, repeat or 3), args.mitogen, None, False, ratio_lines)
    results["load_average_after"] = [round(x, 2) for x in _common.load_average()]
    results["duration_s"] = round(time.monotonic() - started, 1)
    print(f"\nsummary ({results['duration_s']:.0f} s; {_common.load_text()}):")
    for line in ratio_lines:
        print(line)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
