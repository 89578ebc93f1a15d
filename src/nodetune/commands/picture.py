"""``nodetune picture (--root DIR | -i INVENTORY) -o FILE.html``: a picture of each node's layout (HTML + SVG).

``--root`` discovers and plans one node tree on this machine (no Ansible; ``--policy FILE`` as for ``plan``).
``-i`` plans every node of the inventory with its own variables (one ``nodetune.plan()`` run) and, unless
``--no-drift``, audits them (one ``nodetune.verify()`` run) for the fleet drift section at the top.
Exit codes: 0 written, 1 failure (2 is never used: drift is drawn, not judged, here).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from nodetune.commands._basics import EXIT_FAILURE, EXIT_OK, add_target_options


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "picture",
        help="draw each node's layout (sockets, NUMA nodes, cores, GPUs, NICs, IRQ cores) as an HTML page",
        description="Write an HTML page with an SVG picture of each node's layout: sockets, NUMA nodes and cores "
                    "(offline SMT siblings greyed out), GPUs and NICs on their NUMA nodes, the cores that take NIC "
                    "IRQs and each GPU rank's cores. With -i, a fleet drift section comes first.",
    )
    add_target_options(parser)
    parser.add_argument("-o", "--output", required=True, metavar="FILE.html", help="where to write the page")
    parser.add_argument("--policy", metavar="FILE", help="with --root: layout policy file (as for 'nodetune plan')")
    parser.add_argument("-l", "--limit", metavar="PATTERN", help="with -i: only these hosts")
    parser.add_argument("-e", "--extra-vars", action="append", default=[], metavar="KEY=VALUE|@FILE",
                        help="with -i: set a variable; repeatable")
    parser.add_argument("--no-drift", action="store_true", help="with -i: skip the verify run and drift section")
    parser.set_defaults(func=run)
    return parser


def _error(message: str) -> int:
    print(f"nodetune picture: error: {message}", file=sys.stderr)
    return EXIT_FAILURE


def run(args: argparse.Namespace) -> int:
    output = Path(args.output)
    if not output.parent.is_dir():
        return _error(f"-o {args.output!r}: the folder {str(output.parent)!r} does not exist")
    try:
        text = _local_page(args) if args.root else _fleet_page(args)
    except _Failure as exc:
        return _error(str(exc))
    except Exception as exc:  # a bug must not greet the operator with a traceback
        if os.environ.get("NODETUNE_DEBUG"):
            raise
        return _error(f"unexpected {type(exc).__name__}: {exc}; set NODETUNE_DEBUG=1 for the traceback")
    try:
        output.write_text(text)
    except OSError as exc:
        return _error(f"cannot write {args.output!r}: {exc.strerror or exc}")
    print(f"nodetune picture: wrote {output}")
    return EXIT_OK


class _Failure(Exception):
    pass


def _local_page(args: argparse.Namespace) -> str:
    from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover
    from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import LayoutError, plan
    from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError

    from nodetune.commands._basics import CommandError, load_mapping
    from nodetune.picture import node_page

    root = Path(args.root)
    if not root.is_dir():
        raise _Failure(f"--root {args.root!r}: no such directory (give '/' or a node tree)")
    try:
        policy = load_mapping(args.policy, "policy") if args.policy else None
        topology = discover(str(root))
        layout = plan(topology, policy)
    except (CommandError, LayoutError, NodeFileError) as exc:
        raise _Failure(str(exc)) from None
    host = "localhost" if str(root.resolve()) == "/" else root.resolve().name
    return node_page(topology, layout, host)


def _fleet_page(args: argparse.Namespace) -> str:
    from nodetune import api
    from nodetune.commands._shared import UsageError, extra_vars_of, inventory_of
    from nodetune.picture import drift_records, fleet_page, outlier_records

    try:
        inventory = inventory_of(args)
        extra = extra_vars_of(args) or None
    except UsageError as exc:
        raise _Failure(str(exc)) from None
    try:
        planned = api.plan(inventory, limit=args.limit, extra_vars=extra, raise_on_failure=False)
        audit = None if args.no_drift else api.verify(inventory, limit=args.limit, extra_vars=extra,
                                                      raise_on_failure=False)
    except api.NodetuneError as exc:
        raise _Failure(str(exc)) from None
    layouts = [(n.host, n.topology, n.layout) for n in planned.nodes.values() if n.topology and n.layout]
    failures = [(n.host, f"{n.status}: {n.message}") for n in planned.nodes.values() if not (n.topology and n.layout)]
    return fleet_page(layouts, drift_records(audit) if audit is not None else None, failures,
                      outliers=outlier_records(audit) if audit is not None else None)
