"""What the entry point (cli.py) and the commands share: the exit codes, the target and run options, and reading a
mapping file (``--policy``, ``--topology``).

Below cli.py and every command, so that neither imports the other. It imports nothing at module level:
``nodetune discover --json`` loads it on its way, where start-up is most of the cost (cli.py).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: see nodetune/__init__.py
if TYPE_CHECKING:
    import argparse
    from typing import Any

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_DRIFT = 2
#: verify: no drift, but a node's boot loader holds a kernel command line its running kernel has not booted with yet
#: (status pending): not clean, and not drift either (apply has nothing left to do there; a reboot has)
EXIT_PENDING = 3
#: cancelled by SIGINT / SIGTERM (128 + the signal number, as shells report it)
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


def add_target_options(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``-i INVENTORY`` (a fleet, through the playbooks) or ``--root DIR`` (one node tree on this machine)."""
    target = parser.add_mutually_exclusive_group(required=required)
    target.add_argument("-i", "--inventory", metavar="INVENTORY",
                        help="an Ansible inventory (file or directory): run on its nodes through the playbooks")
    target.add_argument("--root", metavar="DIR",
                        help="one node on this machine: '/' (this machine) or a simulated/captured node tree")


def add_run_options(parser: argparse.ArgumentParser, *, tags: bool = True) -> None:
    """Options of every command that runs a playbook: node selection, variables, output."""
    parser.add_argument("-l", "--limit", metavar="PATTERN", help="only these hosts (an Ansible host pattern)")
    parser.add_argument("-f", "--forks", type=_positive_int, metavar="N",
                        help="hosts in parallel (default: ansible.cfg)")
    parser.add_argument("-e", "--extra-vars", action="append", default=[], metavar="KEY=VALUE|@FILE",
                        help="set a variable (YAML value), or load a YAML/JSON file of them; repeatable")
    if tags:
        parser.add_argument("-t", "--tags", metavar="TAGS", help="only these areas, comma-separated (e.g. nvme,cpu)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")
    parser.add_argument("--keep-artifacts", action="store_true",
                        help="keep ansible-runner's private data directory (its path is printed) for debugging")


def whole_number(minimum: int):
    """An argparse type: a whole number of at least ``minimum``, refused with what was given. argparse is imported
    only when a command line is parsed (discover's fast path imports neither it nor re)."""

    def parse(text: str) -> int:
        import argparse

        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {value}")
        return value

    return parse


_positive_int = whole_number(1)


class CommandError(Exception):
    """A user-facing failure: printed as one line, exit status 1."""


def load_mapping(path: str, what: str) -> dict[str, Any]:
    """The mapping a JSON or YAML file holds (``what``: ``policy``, whose empty file is an empty policy, or
    ``topology``); raises CommandError naming the file."""
    import json  # here, not above: the discover --json start-up path imports this module
    from pathlib import Path

    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CommandError(f"cannot read the {what} file {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise CommandError(f"the {what} file {path} is neither JSON nor YAML: {exc}") from None
    if data is None and what == "policy":
        return {}
    if not isinstance(data, dict):
        raise CommandError(f"the {what} file {path} must hold a mapping, not {type(data).__name__}")
    return data
