"""The ``nodetune`` command line.

Each sub-command lives in ``nodetune.commands.<name>`` and exposes ``add_parser(subparsers)`` and
``run(args) -> int``. Exit codes are documented in the README: 0 clean, 1 failure, 2 drift found.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMANDS = ("discover", "plan")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_DRIFT = 2


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; ``only`` imports just that command's module (start-up time of ``nodetune discover
    --json`` matters at fleet scale, and each command module brings its own imports)."""
    parser = argparse.ArgumentParser(
        prog="nodetune",
        description="Discover, plan, tune and verify AMD Instinct GPU training nodes.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        if only is not None and name != only:
            continue
        module = importlib.import_module("nodetune.commands." + name)
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words[0] if words and words[0] in COMMANDS else None)
    args = parser.parse_args(words)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("nodetune: interrupted", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
