"""``nodetune apply (-i INVENTORY | --root DIR) [--check] [--diff]``: tune the nodes (playbooks/apply.yml).

Exit codes: 0 applied (or nothing to do), 1 failure (bad input, a node failed or was unreachable), 2 with
``--check`` when something would change (the node is not what nodetune would make it: drift).
"""

from __future__ import annotations

import argparse
from typing import Any

from nodetune.commands._basics import EXIT_OK, add_run_options, add_target_options
from nodetune.commands._shared import finish, run_command


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "apply",
        help="tune the nodes: discover, plan and apply every area's Settings (journaled, all-or-nothing)",
        description="Tune the nodes of an inventory (or one node tree with --root) through playbooks/apply.yml: "
                    "each node is discovered, planned and tuned in one module call; every previous value is kept "
                    "in the node's journal for 'nodetune revert'. --check shows what would change and writes "
                    "nothing (exit 2 when something would).",
    )
    add_target_options(parser)
    parser.add_argument("--check", action="store_true", help="write nothing; show what would change (exit 2 if any)")
    parser.add_argument("--diff", action="store_true",
                        help="also print each node's changes as a grouped diff (one hunk per setting id, targets "
                             "compact, at most 200 lines per node)")
    parser.add_argument("--full-diff", action="store_true",
                        help="also print each node's full diff, one line per value (a fresh full-size node: "
                             "thousands of lines)")
    add_run_options(parser)
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from nodetune import api
    from nodetune.commands._shared import tags_of
    from nodetune.render import print_apply

    if args.full_diff:  # the module's diff has every value only when asked: by default it is grouped and bounded
        args.extra_vars = [*args.extra_vars, "nodetune_full_diff=true"]
    outcome = run_command("apply", args, api.apply, check=args.check, diff=True, tags=tags_of(args))
    if isinstance(outcome, int):
        return outcome
    code = finish("apply", args, outcome, lambda r: print_apply(r, show_diff=args.diff, full_diff=args.full_diff),
                  drift=args.check and bool(outcome.changed))
    return code if code != EXIT_OK or not outcome.reboot_required else _reboot_note(outcome)


def _reboot_note(result: Any) -> int:
    import sys

    hosts = ", ".join(n.host for n in result.nodes.values() if n.reboot_required)
    print(f"nodetune apply: a reboot is needed for some settings to take effect on: {hosts}", file=sys.stderr)
    return EXIT_OK
