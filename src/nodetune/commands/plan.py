"""``nodetune plan --root DIR [--json] [--policy FILE]``: the node's Layout (docs/layout.md).

Discovers the node under ROOT (read-only) and runs the layout planner on it; ``--topology FILE`` plans from a
saved ``nodetune discover --json`` instead. ``--json`` prints the Layout with its documented, stable keys; the
default view is a table per NUMA node (``rich``, imported only for that view).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import LayoutError, PolicyError, plan
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError

from nodetune.commands._basics import CommandError, load_mapping
from nodetune.layout_tables import print_tables

EXIT_OK = 0
EXIT_FAILURE = 1


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "plan",
        help="compute the node's NUMA, IRQ and SMT layout (per-GPU CPU sets, NIC IRQ pinning, SMT siblings)",
        description="Discover the node under ROOT (read-only) and compute its layout: housekeeping CPUs, the SMT "
                    "siblings to offline, one disjoint CPU set per GPU rank with its environment, and where each NIC "
                    "completion IRQ goes. Nothing is written.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--root", default="/", metavar="DIR",
                        help="the node's root file system: '/' (default) or a captured/simulated node tree")
    source.add_argument("--topology", metavar="FILE",
                        help="plan from a saved Topology (the output of 'nodetune discover --json') instead")
    source.add_argument("-i", "--inventory", metavar="INVENTORY",
                        help="plan the nodes of an Ansible inventory with its variables (playbooks/plan.yml)")
    parser.add_argument("-l", "--limit", metavar="PATTERN", help="with -i: only these hosts")
    parser.add_argument("--policy", metavar="FILE",
                        help="layout policy, a YAML or JSON mapping of settings (docs/layout.md); defaults otherwise")
    parser.add_argument("--json", action="store_true", help="print the Layout as JSON (docs/layout.md)")
    parser.set_defaults(func=run)
    return parser


def load_topology(args: argparse.Namespace) -> dict[str, Any]:
    if args.topology:
        return load_mapping(args.topology, "topology")
    from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover

    try:
        return discover(args.root)
    except NodeFileError as exc:
        raise CommandError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    if args.inventory:
        from nodetune.commands._shared import run_fleet

        return run_fleet("plan", args)
    try:
        policy = load_mapping(args.policy, "policy") if args.policy else None
        topology = load_topology(args)
        layout = plan(topology, policy)
    except PolicyError as exc:
        print(f"nodetune plan: policy error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except (CommandError, LayoutError) as exc:
        print(f"nodetune plan: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:  # a bug must not greet the operator with a traceback
        if os.environ.get("NODETUNE_DEBUG"):
            raise
        print(f"nodetune plan: error: planning failed unexpectedly ({type(exc).__name__}: {exc}); "
              "set NODETUNE_DEBUG=1 for the traceback and please report it", file=sys.stderr)
        return EXIT_FAILURE
    try:
        if args.json:
            sys.stdout.write(json.dumps(layout, indent=2) + "\n")
        else:
            print_tables(layout)
        sys.stdout.flush()
    except BrokenPipeError:  # `nodetune plan --json | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK
