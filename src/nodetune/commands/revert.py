"""``nodetune revert (-i INVENTORY | --root DIR) [--check]``: put the nodes back as they were before nodetune
(playbooks/revert.yml): the journal's baseline values byte for byte, nodetune's files removed.

Exit codes: 0 reverted (or nothing to revert), 1 failure, 2 with ``--check`` when something would be restored
(the node differs from its baseline), as ``apply --check`` exits 2 when something would change.
"""

from __future__ import annotations

import argparse
from typing import Any

from nodetune.commands._basics import add_run_options, add_target_options
from nodetune.commands._shared import finish, run_command


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "revert",
        help="restore the values the nodes had before nodetune first changed them",
        description="Restore every node's journal baseline (the values before the first apply) and remove the "
                    "files nodetune created (playbooks/revert.yml). --check shows what would be restored.",
    )
    add_target_options(parser)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; show what would be restored (exit 2 if anything would)")
    add_run_options(parser, tags=False)
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from nodetune import api
    from nodetune.render import print_apply

    outcome = run_command("revert", args, api.revert, check=args.check)
    if isinstance(outcome, int):
        return outcome
    return finish("revert", args, outcome, print_apply, drift=args.check and bool(outcome.changed))
