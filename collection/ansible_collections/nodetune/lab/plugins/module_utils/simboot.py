# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The boot-time restore on a simulated node: what ``nodetune-restore.service`` does when systemd starts it, and
what ``nodetune-irq-repin.timer`` does each time it elapses.

On a real node the units run the rendered stdlib script (area_persist.RESTORE_PROGRAM), whose plain writes get
their side effects from the kernel. A simulated node has no kernel, so the same state files are replayed through
:class:`~rootfs.Root`, whose writes the simulated kernel (simkernel.py) answers like the real one, by the same
rules: IRQs found again by action name (area_persist.irq_numbers), an IRQ whose device is there but which its driver
has not created yet pending rather than failed, the timer pinning each IRQ once when it appears and recording the
numbers it handled in ``run/`` (emptied by a reboot). The script itself is tested separately on a plain tree.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List

from ansible_collections.nodetune.instinct.plugins.module_utils.areas.persist import (
    PINNED_RECORD,
    REPIN_TIMER,
    STATE_DIR,
    UNIT,
    irq_numbers,
    irq_pending,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import ParseError, parse_cpulist
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError, Root
from ansible_collections.nodetune.instinct.plugins.module_utils.apply.services import RUN_UNITS, WANTS


def run_boot_restore(root: Root) -> Dict[str, Any]:
    """Replay the boot-restore state files if the unit is enabled; returns what was applied, what failed and which
    IRQs are pending (their driver creates them later)."""
    enabled = os.path.lexists(root.real(WANTS) + "/" + UNIT)
    if not enabled or not _state_names(root):
        return {"ran": False, "applied": 0, "pinned": [], "failed": [], "pending": []}
    return _replay(root, irqs_only=False)


def run_irq_repin(root: Root) -> Dict[str, Any]:
    """``nodetune-irq-repin.timer`` elapses: if it is active, pin the IRQs created since the last run (each once,
    when it appears); returns the IRQ names pinned (``applied`` counts them), the failures and the still pending."""
    active = os.path.lexists(root.real(RUN_UNITS) + "/invocation:" + REPIN_TIMER)
    if not active or not _state_names(root):
        return {"ran": False, "applied": 0, "pinned": [], "failed": [], "pending": []}
    return _replay(root, irqs_only=True)


def _state_names(root: Root) -> List[str]:
    return [n for n in root.listdir(STATE_DIR) if n.endswith(".json")]


def _replay(root: Root, irqs_only: bool) -> Dict[str, Any]:
    items: List[Dict[str, Any]] = []
    for state in _state_names(root):
        items.extend(json.loads(root.read(STATE_DIR + "/" + state, strip=False) or "{}").get("settings", []))
    items.sort(key=lambda item: (item.get("order", 90), item["id"], item["target"]))
    if irqs_only:
        items = [item for item in items if item.get("irq_name")]
    numbers = irq_numbers(root, [item["irq_name"] for item in items if item.get("irq_name")])
    record = _read_record(root) if irqs_only else {}
    handled: Dict[str, int] = {}
    failed: List[str] = []
    pending: List[str] = []
    pinned: List[str] = []
    applied = 0
    for item in items:
        name = item.get("irq_name")
        path = str(item.get("path") or "")
        if name:
            number = numbers.get(name)
            if number is None:
                if irq_pending(root, item["id"], name):
                    pending.append(name)
                elif not irqs_only:
                    failed.append("%s[%s]: IRQ %r not found (no such device or IRQ)" % (item.get("id"),
                                                                                        item.get("target"), name))
                continue
            handled[name] = number
            if irqs_only and record.get(name) == number:
                continue  # pinned when it appeared; a move since is drift for verify to report
            path = "proc/irq/%d/smp_affinity_list" % number
        if irqs_only and _same_cpus(root.read(path), item["value"]):
            continue
        try:
            root.write(path, item["value"])
            applied += 1
            if name:
                pinned.append(name)
        except NodeFileError as exc:
            failed.append("%s[%s]: %s" % (item.get("id"), item.get("target"), exc))
    if handled != record:
        root.write_file(PINNED_RECORD, json.dumps(handled, sort_keys=True))
    return {"ran": True, "applied": applied, "pinned": pinned, "failed": failed, "pending": pending}


def _read_record(root: Root) -> Dict[str, Any]:
    try:
        data = json.loads(root.read(PINNED_RECORD, strip=False) or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _same_cpus(current: Any, value: str) -> bool:
    try:
        return current is not None and set(parse_cpulist(current)) == set(parse_cpulist(value))
    except ParseError:
        return False
