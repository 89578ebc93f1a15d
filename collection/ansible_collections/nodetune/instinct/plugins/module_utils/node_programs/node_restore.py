# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""nodetune-restore: re-apply the runtime settings nodetune tuned (rendered by nodetune).

    nodetune-restore [--root DIR]           at boot (nodetune-restore.service): every setting
    nodetune-restore [--root DIR] --irqs    every 10 s (nodetune-irq-repin.timer): the IRQs created since

Reads every /etc/nodetune/boot-restore.d/*.json (one per tuned area) and writes each value in dependency
order (SMT before IRQ affinity, governor before EPP). IRQs are found again by their action name: their numbers
change across boots. An IRQ whose device is there but whose driver has not created it yet is pending, not a
failure: mlx5 creates its completion vectors on first use since Linux 6.5 (commit f14c1a14e632); not a GPU's,
which amdgpu creates when it binds to the GPU (amdgpu_irq_init()): one missing is a failure. --irqs pins
each IRQ once, when it appears (or reappears under another number), and prints nothing when there is nothing to
do; an IRQ moved by hand afterwards is left for verify to report. /run/nodetune/irqs-pinned.json records the
IRQ numbers already handled in this boot. Missing devices and failed writes are reported; the exit status is 1
when any write failed.
"""

from __future__ import annotations

import json
import os
import sys

from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs.rules import (
    CPULIST,
    created_later,
    irq_numbers,
    list_names,
    normalize,
    read_text,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any, Dict, List, Optional

STATE_DIR = "etc/nodetune/boot-restore.d"
PINNED_RECORD = "run/nodetune/irqs-pinned.json"  # which IRQ numbers the program handled in this boot (a tmpfs)


class NodeFiles(object):
    """The node's files under ``root``, as the program reads and writes them (plain os calls; the lab replays the
    same :func:`restore` on its simulated nodes, through their simulated kernel)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def read(self, rel: str) -> Optional[str]:
        return read_text(self.root, rel)

    def listdir(self, rel: str) -> Optional[List[str]]:
        return list_names(self.root, rel)

    def isdir(self, rel: str) -> bool:
        return os.path.isdir(os.path.join(self.root, rel))

    def write(self, rel: str, value: str) -> None:
        """One write(2) of ``value``; OSError where the kernel refuses it."""
        with open(os.path.join(self.root, rel), "w") as handle:
            handle.write(value)


def restore(files: Any, items: List[Dict[str, Any]], record: Dict[str, Any], irqs_only: bool) -> Dict[str, Any]:
    """Write each entry's value, in the order given; an IRQ at the number its action name has now. ``record``: the
    IRQ numbers already handled in this boot (``--irqs``: each IRQ is pinned once, when it appears). Returns what was
    written (``written``, ``pinned``: the IRQ names), ``failed`` (one message each), ``pending`` (IRQs their
    driver creates later) and ``handled`` (the record to keep)."""
    names = [item["irq_name"] for item in items if item.get("irq_name")]
    numbers = irq_numbers(names, files.listdir, files.read) if names else {}
    done = {"written": 0, "pinned": [], "failed": [], "pending": [], "handled": {}}  # type: Dict[str, Any]
    for item in items:
        name = item.get("irq_name")
        rel = item.get("path") or ""
        if name:
            number = numbers.get(name)
            if number is None:
                bdf = name.partition("@pci:")[2]
                if created_later(item["id"], name, bool(bdf) and files.isdir("sys/bus/pci/devices/" + bdf)):
                    done["pending"].append(name)  # its driver creates it later (mlx5: on first use)
                elif not irqs_only:
                    done["failed"].append("%s[%s]: IRQ %s not found (no such device or IRQ)"
                                          % (item["id"], item["target"], name))
                continue
            done["handled"][name] = number
            if irqs_only and record.get(name) == number:
                continue  # pinned when it appeared; a move since is drift for verify to report
            rel = "proc/irq/%d/smp_affinity_list" % number
        if irqs_only and normalize(CPULIST, files.read(rel)) == normalize(CPULIST, item["value"]):
            continue  # already there, as verify compares CPUs
        try:
            files.write(rel, item["value"])
        except (OSError, ValueError) as exc:
            done["failed"].append("%s[%s] %s: %s" % (item["id"], item["target"], rel, exc))
            continue
        done["written"] += 1
        if name:
            done["pinned"].append(name)
    return done


def read_record(root: str) -> Dict[str, Any]:
    try:
        with open(os.path.join(root, PINNED_RECORD)) as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def save_record(root: str, record: Dict[str, int]) -> None:
    path = os.path.join(root, PINNED_RECORD)
    try:
        if not os.path.isdir(os.path.dirname(path)):
            os.makedirs(os.path.dirname(path))
        with open(path + ".tmp", "w") as handle:
            json.dump(record, handle, sort_keys=True)
        os.replace(path + ".tmp", path)
    except OSError as exc:
        sys.stderr.write("nodetune-restore: cannot record the IRQs handled in %s: %s\n" % (path, exc))


def read_state(root: str) -> List[Dict[str, Any]]:
    """Every area's entries, in the order they are written."""
    state_dir = os.path.join(root, STATE_DIR)
    items = []  # type: List[Dict[str, Any]]
    for name in sorted(os.listdir(state_dir)):
        if name.endswith(".json"):
            with open(os.path.join(state_dir, name)) as handle:
                items.extend(json.load(handle)["settings"])
    items.sort(key=lambda item: (item.get("order", 90), item["id"], item["target"]))
    return items


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    root = args[args.index("--root") + 1] if "--root" in args else "/"
    irqs_only = "--irqs" in args
    items = read_state(root)
    if irqs_only:
        items = [item for item in items if item.get("irq_name")]
    record = read_record(root) if irqs_only else {}
    done = restore(NodeFiles(root), items, record, irqs_only)
    for message in done["failed"]:
        sys.stderr.write("nodetune-restore: %s\n" % message)
    if done["handled"] != record:
        save_record(root, done["handled"])
    failed, pending = len(done["failed"]), done["pending"]
    later = ""
    if pending:
        later = " (%s%s: pinned by nodetune-irq-repin.timer when the driver creates them)" % (
            ", ".join(pending[:3]), ", ..." if len(pending) > 3 else "")
    if not irqs_only:
        sys.stdout.write("nodetune-restore: %d settings, %d failed, %d pending%s\n" % (
            len(items), failed, len(pending), later))
    elif done["written"] or failed:
        sys.stdout.write("nodetune-restore: pinned %d IRQ(s) created since boot, %d failed, %d pending\n" % (
            done["written"], failed, len(pending)))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
