"""``nodetune verify (-i INVENTORY | --root DIR)``: audit the nodes (playbooks/verify.yml); changes nothing.

Exit codes: 0 no drift, 2 drift found on at least one node, 3 no drift but a node pending a reboot (its boot loader
has a kernel command line its running kernel did not boot with), 1 failure (bad input, a node where verify could
not run or that was unreachable). The finding ids are those of docs/verify.md.
"""

from __future__ import annotations

import argparse
from typing import Any

from nodetune.commands._basics import EXIT_OK, EXIT_PENDING, add_run_options, add_target_options
from nodetune.commands._shared import finish, run_command


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "verify",
        help="audit the nodes against the tuning and report drift with stable ids (changes nothing)",
        description="Check every node against the Settings an apply would make, plus the BIOS-level and health "
                    "checks (playbooks/verify.yml). Never changes a node. Exit 2 when drift is found.",
    )
    add_target_options(parser)
    parser.add_argument("--report-dir", metavar="DIR",
                        help="also write the fleet reports there: junit.xml, summary.json, nodes/<host>.json")
    parser.add_argument("--waivers", metavar="FILE", help="waivers file (docs/verify.md): known exceptions")
    parser.add_argument("--all", action="store_true", dest="every",
                        help="list every finding: a row per check id, status and value, ok ones too, with every "
                             "target (the default: a row per check id and status, the ok checks folded)")
    add_run_options(parser)
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from nodetune import api
    from nodetune.commands._shared import fail, tags_of
    from nodetune.render import print_verify

    if args.waivers:
        if not Path(args.waivers).is_file():
            return fail("verify", f"--waivers {args.waivers!r}: no such file")
        args.extra_vars = [*args.extra_vars, "nodetune_verify_waivers_file=" + str(Path(args.waivers).resolve())]
    outcome = run_command("verify", args, api.verify, tags=tags_of(args), report_dir=args.report_dir)
    if isinstance(outcome, int):
        return outcome
    code = finish("verify", args, outcome, lambda result: print_verify(result, every=args.every),
                  drift=bool(outcome.drifted))
    return EXIT_PENDING if code == EXIT_OK and outcome.pending else code
