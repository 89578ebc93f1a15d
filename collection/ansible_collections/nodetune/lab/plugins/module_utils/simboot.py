# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The boot-time restore on a simulated node: what ``nodetune-restore.service`` does when systemd starts it, and
what ``nodetune-irq-repin.timer`` does each time it elapses.

On a real node the units run the rendered stdlib script (node_programs/node_restore.py), whose plain writes get
their side effects from the kernel. A simulated node has no kernel, so the program's own restore() replays the same
state files through :class:`~rootfs.Root`, whose writes the simulated kernel (simkernel.py) answers like the real
one: IRQs found again by action name, an IRQ whose device is there but which its driver has not created yet pending
rather than failed, the timer pinning each IRQ once when it appears and recording the numbers it handled in ``run/``
(emptied by a reboot). The rendered script itself is tested separately on a plain tree.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional

from ansible_collections.nodetune.instinct.plugins.module_utils.areas.persist import (
    PINNED_RECORD,
    REPIN_TIMER,
    STATE_DIR,
    UNIT,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_restore
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError, Root
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.services import RUN_UNITS, WANTS


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


class _SimulatedFiles(object):
    """The node's files for node_restore.restore(), through the Root whose writes the simulated kernel answers."""

    def __init__(self, root: Root) -> None:
        self.root = root

    def read(self, rel: str) -> Optional[str]:
        return self.root.read(rel, strip=False)

    def listdir(self, rel: str) -> Optional[List[str]]:
        return self.root.listdir(rel) if self.root.isdir(rel) else None

    def isdir(self, rel: str) -> bool:
        return self.root.isdir(rel)

    def write(self, rel: str, value: str) -> None:
        try:
            self.root.write(rel, value)
        except NodeFileError as exc:
            raise OSError(str(exc)) from None


def _replay(root: Root, irqs_only: bool) -> Dict[str, Any]:
    """What nodetune-restore does (node_restore.restore, the very function), on the simulated node."""
    items: List[Dict[str, Any]] = []
    for state in _state_names(root):
        items.extend(json.loads(root.read(STATE_DIR + "/" + state, strip=False) or "{}").get("settings", []))
    items.sort(key=lambda item: (item.get("order", 90), item["id"], item["target"]))
    if irqs_only:
        items = [item for item in items if item.get("irq_name")]
    record = _read_record(root) if irqs_only else {}
    done = node_restore.restore(_SimulatedFiles(root), items, record, irqs_only)
    if done["handled"] != record:
        root.write_file(PINNED_RECORD, json.dumps(done["handled"], sort_keys=True))
    return {"ran": True, "applied": done["written"], "pinned": done["pinned"], "failed": done["failed"],
            "pending": done["pending"]}


def _read_record(root: Root) -> Dict[str, Any]:
    try:
        data = json.loads(root.read(PINNED_RECORD, strip=False) or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
