"""The ``nodetune`` command line.

Each sub-command lives in ``nodetune.commands.<name>`` and exposes ``add_parser(subparsers)`` and
``run(args) -> int``. Exit codes (docs/cli.md), the same for every verb: 0 ok, 1 failure (bad input, failed or
unreachable nodes), 2 drift found (``verify``; ``apply --check``/``revert --check`` when something would change),
3 (``verify``) no drift but a node waits for a reboot to run what its boot loader has (pending);
130/143 when cancelled by SIGINT/SIGTERM. A usage error is a failure (1), not argparse's usual 2, which would read
as drift.

``nodetune discover --root DIR --json`` is scripted at fleet scale, where its start-up is most of its cost, so the
plain forms of that one command skip argparse (with its ``re``, ``gettext``, ``locale`` and ``shutil`` imports,
a quarter of the run): :func:`_plain_discover` reads them by hand and gives anything else to the full parser.
"""

from __future__ import annotations

import sys

# the exit codes (docs/cli.md) live below the commands with the options they share: no command imports cli.py
from nodetune.commands._basics import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK

TYPE_CHECKING = False  # not typing's: see nodetune/__init__.py
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence
    from typing import Any

COMMANDS = ("discover", "plan", "apply", "verify", "revert", "picture", "bind", "report")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; ``only`` imports just that command's module (start-up time of ``nodetune discover
    --json`` matters at fleet scale, and each command module brings its own imports)."""
    import argparse
    import importlib

    parser = argparse.ArgumentParser(
        prog="nodetune",
        description="Discover, plan, tune and verify AMD Instinct GPU training nodes.",
        epilog="Exit codes, the same for every command: 0 ok, 1 failure or bad input, 2 drift found (verify; "
               "apply/revert --check: something would change), 3 no drift but a reboot pending (verify). See "
               "docs/cli.md.",
    )
    from nodetune import __version__

    parser.add_argument("--version", action="version", version=f"nodetune {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        if only is not None and name != only:
            continue
        module = importlib.import_module("nodetune.commands." + name)
        module.add_parser(sub)
    return parser


class PlainDiscoverArgs:
    """What argparse would give ``discover`` for the plain forms :func:`_plain_discover` accepts."""

    command = "discover"
    inventory: str | None = None
    limit: str | None = None

    def __init__(self, root: str, json: bool) -> None:
        self.root = root
        self.json = json


def _plain_discover(words: list[str]) -> PlainDiscoverArgs | None:
    """``discover`` with only ``--json``, ``--root DIR`` and ``--root=DIR`` (in any order, repeats: the last
    wins, as with argparse), else None: help, ``-i``, abbreviations, ``--``, an empty DIR or one that starts with
    ``-`` (argparse's error) and any mistake go through argparse, so that their messages stay argparse's."""
    if not words or words[0] != "discover":
        return None
    root = "/"
    as_json = False
    index = 1
    while index < len(words):
        word = words[index]
        if word == "--json":
            as_json = True
        elif word == "--root" and index + 1 < len(words) and words[index + 1][:1] not in ("", "-"):
            index += 1
            root = words[index]
        elif word.startswith("--root=") and len(word) > len("--root="):
            root = word[len("--root="):]
        else:
            return None
        index += 1
    return PlainDiscoverArgs(root, as_json)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("ansible_collections"):
            raise
        from nodetune._collection import searched

        print("nodetune: the nodetune.instinct collection is not installed where nodetune looks ("
              + ", ".join(searched()) + "). Install the collection with `ansible-galaxy collection install "
              "nodetune-instinct-<version>.tar.gz` (scripts/build_collection.sh builds it), set "
              "ANSIBLE_COLLECTIONS_PATH to the folder that holds ansible_collections/, or run from a checkout "
              "(`pip install -e .`).", file=sys.stderr)
        return EXIT_FAILURE


def _main(words: list[str]) -> int:
    plain = _plain_discover(words)
    if plain is not None:
        from nodetune.commands.discover import run as run_discover

        return _call(run_discover, plain)
    parser = build_parser(words[0] if words and words[0] in COMMANDS else None)
    unknown = _unknown_option(parser, words)
    if unknown:  # named first: argparse would complain of a missing -i/--root before an option it does not know
        print(f"nodetune {words[0]}: error: unrecognized option {unknown!r} (nodetune {words[0]} --help lists them)",
              file=sys.stderr)
        return EXIT_FAILURE
    try:
        args = parser.parse_args(words)
    except SystemExit as exc:  # argparse: 0 after --help, 2 for a usage error (printed already)
        return EXIT_OK if exc.code in (0, None) else EXIT_FAILURE
    return _call(args.func, args)


def _unknown_option(parser: argparse.ArgumentParser, words: list[str]) -> str | None:
    """The first word of a sub-command that looks like an option and names none of its options (nor a prefix of
    one, as argparse allows), or None."""
    import argparse

    if not words or words[0] not in COMMANDS:
        return None
    sub = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    known = list(sub.choices[words[0]]._option_string_actions)
    for word in words[1:]:
        if word == "--":
            break
        if not word.startswith("-") or word == "-" or word[1:2].isdigit():
            continue
        name = word.split("=", 1)[0]
        if name.startswith("--") and any(option.startswith(name) for option in known if option.startswith("--")):
            continue
        if not name.startswith("--") and name[:2] in known:
            continue
        return word
    return None


def _call(func: Callable[[Any], int], args: Any) -> int:
    try:
        return int(func(args))
    except KeyboardInterrupt:
        print("nodetune: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
