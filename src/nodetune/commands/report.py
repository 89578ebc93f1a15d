"""``nodetune report DIR... [-o OUT]``: the fleet reports from per-node report files of any number of runs.

Each DIR is a report folder a run wrote (``nodetune_report_dir``: ``nodes/<host>.json``, ``failed/<host>.json``) or a
folder of node reports: the ``--limit`` slices of one fleet (AWX / Automation Platform job slicing), runs from
several controllers, or yesterday's and today's. The newest report of each node wins (docs/fleet.md). Nothing runs
on a node and no Ansible is started: only files are read.

Exit codes, as ``verify``: 0 every node clean, 2 drift on at least one node, 3 no drift but a node pending a reboot,
1 failure (a node failed in its newest run, an unreadable report file, bad input).
"""

from __future__ import annotations

import argparse
from typing import Any

from nodetune.commands._basics import EXIT_DRIFT, EXIT_FAILURE, EXIT_OK, EXIT_PENDING, whole_number


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "report",
        help="fleet reports (summary, JUnit, Prometheus, outliers, picture) from the report files of many runs",
        description="Build the fleet summary, JUnit XML, Prometheus text, outliers, learned expectations and the "
                    "picture's fleet page from the per-node report files that any number of runs, --limit slices "
                    "or controllers wrote; the newest report of each node wins. Exit 2 when a node drifts.",
    )
    parser.add_argument("sources", nargs="+", metavar="DIR",
                        help="report folders (nodetune_report_dir of a run or slice) or folders of node reports")
    parser.add_argument("-o", "--output", metavar="OUT",
                        help="write summary.json, junit.xml, fleet.prom, fleet.html and learned/<host>.json there "
                             "(created if missing; without it nothing is written)")
    parser.add_argument("--top", type=whole_number(0), default=10, metavar="N",
                        help="how many of the most frequent drift ids the summary ranks (default 10)")
    parser.add_argument("--suite-name", default="nodetune verify", metavar="NAME",
                        help="the JUnit <testsuites> name (default 'nodetune verify')")
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of the summary lines")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    from nodetune import api
    from nodetune.commands._shared import fail
    from nodetune.render import plain_cell

    try:
        result = api.report(args.sources, args.output, top=args.top, suite_name=args.suite_name)
    except api.ReportError as exc:
        return fail("report", str(exc))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, sort_keys=True, default=str))
        for item in result.unreadable:  # the summary's text says it too, without --json
            print(plain_cell(f"nodetune report: unreadable {item['file']}: {item['error']}"), file=sys.stderr)
    else:
        for line in result.summary["text"]:
            print(line)
        for path in result.files:
            print(f"nodetune report: wrote {path}")
    if not result.ok:
        return EXIT_FAILURE
    if result.drifted:
        return EXIT_DRIFT
    return EXIT_PENDING if result.pending else EXIT_OK
