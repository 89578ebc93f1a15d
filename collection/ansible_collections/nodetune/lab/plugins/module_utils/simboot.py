# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The boot-time restore on a simulated node: what ``nodetune-restore.service`` does when systemd starts it.

On a real node the unit runs the rendered stdlib script (area_persist.RESTORE_PROGRAM), whose plain writes get
their side effects from the kernel. A simulated node has no kernel, so the same state file is replayed through
:class:`~rootfs.Root`, whose writes the simulated kernel (simkernel.py) answers like the real one. The script
itself is tested separately on a plain tree.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List

from ansible_collections.nodetune.instinct.plugins.module_utils.area_persist import STATE_DIR, UNIT
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError, Root
from ansible_collections.nodetune.instinct.plugins.module_utils.services import WANTS


def run_boot_restore(root: Root) -> Dict[str, Any]:
    """Replay the boot-restore state files if the unit is enabled; returns what was applied and what failed."""
    enabled = os.path.lexists(root.real(WANTS) + "/" + UNIT)
    names = [n for n in root.listdir(STATE_DIR) if n.endswith(".json")]
    if not enabled or not names:
        return {"ran": False, "applied": 0, "failed": []}
    items: List[Dict[str, Any]] = []
    for name in names:
        items.extend(json.loads(root.read(STATE_DIR + "/" + name, strip=False) or "{}").get("settings", []))
    items.sort(key=lambda item: (item.get("order", 90), item["id"], item["target"]))
    irq_numbers = irq_numbers_by_name(root)
    failed: List[str] = []
    applied = 0
    for item in items:
        path = resolve_path(item, irq_numbers)
        if path is None:
            failed.append("%s[%s]: IRQ %r not found in /proc/interrupts" % (item.get("id"), item.get("target"),
                                                                            item.get("irq_name")))
            continue
        try:
            root.write(path, item["value"])
            applied += 1
        except NodeFileError as exc:
            failed.append("%s[%s]: %s" % (item.get("id"), item.get("target"), exc))
    return {"ran": True, "applied": applied, "failed": failed}


def irq_numbers_by_name(root: Root) -> Dict[str, int]:
    """Action name -> IRQ number from /proc/interrupts (IRQ numbers change across reboots; names do not)."""
    out: Dict[str, int] = {}
    for line in (root.read("proc/interrupts", strip=False) or "").splitlines()[1:]:
        head, rest = line.partition(":")[::2]
        if head.strip().isdigit() and rest.split():
            out.setdefault(rest.split()[-1], int(head))
    return out


def resolve_path(item: Dict[str, Any], irq_numbers: Dict[str, int]) -> Any:
    """The attribute path of a state entry; IRQ entries are found again by their action name."""
    name = item.get("irq_name")
    if not name:
        return item["path"]
    number = irq_numbers.get(name)
    return None if number is None else "proc/irq/%d/smp_affinity_list" % number
