# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The node-local checker's files an apply writes: what ``nodetune-check`` compares between Ansible runs.

Under ``/etc/nodetune/check.d/`` (node_check.CONFIG_DIR): one ``<area>.json`` of every tuned area's expected Settings
(:func:`check_settings`), ``inventory.json`` with the declared inventory (``nodetune_inventory_expected``, validated by
audit/inventory.py) and, under the keys not declared, the inventory the fleet report learned from the node's group
majority (``learned_inventory``, audit/outliers.py); and the checker itself, ``nodetune-check``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils import interpreter
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.services import parse_state
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_check, render
from ansible_collections.nodetune.instinct.plugins.module_utils.json_text import one_per_line
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import (
    ABSENT,
    CPULIST,
    FILE,
    LINE,
    SERVICE,
    Setting,
    desired,
)

VARIABLE = "nodetune_inventory_expected"  # the declared inventory (audit/inventory.py's VARIABLE), named in a reason
PERSIST = "persist"  # the check files are restored by the apply (--tags apply), like the boot-restore files
CHECK_DIR = node_check.CONFIG_DIR
CHECK_SCRIPT = "usr/local/sbin/nodetune-check"


def _check_entry(setting: Setting) -> Optional[Dict[str, Any]]:
    """What nodetune-check compares for one Setting. Of a service only its enablement, which systemd's links show
    (node_check.unit_enabled); whether it runs is left to verify (no systemctl at job boundaries)."""
    if setting.kind == "boot":
        return None  # the boot loader's entries need its parser (bootloader.py): verify checks them, not this
    entry: Dict[str, Any] = {"id": setting.id, "target": setting.target, "path": setting.path,
                             "kind": setting.kind, "compare": setting.compare}
    if setting.kind == SERVICE:
        enabled = parse_state(setting.value).get("enabled")
        if enabled not in ("yes", "no"):
            return None
        entry["value"] = "enabled=" + enabled
        return entry
    if setting.irq_name:
        # IRQ numbers change across reboots, names do not: the file names the IRQ only by its irq_name, so that it
        # still matches the node after a reboot (verify compares this file's content): a NIC vector by its action
        # name, a GPU's by amdgpu@pci:<BDF> (amdgpu names every GPU's vector alike), both found again as
        # nodetune-restore finds them (rules.irq_numbers).
        entry.update(irq_name=setting.irq_name, target=setting.irq_name, path="")
    if setting.kind == FILE:
        entry["value"] = "sha256:" + hashlib.sha256(setting.value.encode("utf-8")).hexdigest()
    elif setting.kind == LINE:
        entry["key"] = setting.key
        entry["value"] = setting.value
    elif setting.kind == ABSENT:
        entry["value"] = "absent"
    else:
        entry["value"] = desired(setting)
    return entry


def _file_area(setting: Setting, areas: Any) -> str:
    """The check.d file of a Setting: its area's; a persistence file goes with the area it persists, so that a
    partial run (``--tags nvme``) rewrites no other area's expectations."""
    if setting.area == PERSIST:
        named = setting.target.split(":")[-1]
        if named in areas and named != PERSIST:
            return named
    return setting.area


def check_settings(settings: List[Setting], expected: Optional[Dict[str, Any]], root: Any = None,
                   learned: Optional[Tuple[Dict[str, Any], Dict[str, str]]] = None) -> List[Setting]:
    """The files apply writes for nodetune-check: one ``<area>.json`` per area (a ``--tags nvme`` run rewrites only
    nvme's), ``inventory.json`` where an inventory is declared or learned (validate_learned: the values and the
    group each was learned from; a declared key wins), and the checker itself, run by the node's system Python
    under ``root`` (interpreter.shebang)."""
    by_area: Dict[str, List[Dict[str, Any]]] = {}
    areas = set(s.area for s in settings)
    for setting in settings:
        entry = _check_entry(setting)
        if entry is not None:
            by_area.setdefault(_file_area(setting, areas), []).append(entry)
    for entry in _pending_irq_entries(settings):
        by_area.setdefault("irq", []).append(entry)
    out = []
    for area, entries in sorted(by_area.items()):
        # IRQs by name, in name order: the file stays the same when a pending IRQ appears (and is then planned)
        entries = ([e for e in entries if not e.get("irq_name")]
                   + sorted((e for e in entries if e.get("irq_name")), key=lambda e: (e["id"], e["irq_name"])))
        out.append(Setting("check.expected", area, "%s/%s.json" % (CHECK_DIR, area), _settings_text(entries),
                           kind=FILE, compare="content", area=PERSIST, runtime=False, at_effective=at_effective,
                           reason="the expected Settings nodetune-check compares between Ansible runs"))
    learned_values, learned_groups = learned or ({}, {})
    merged = dict(learned_values)
    merged.update(expected or {})
    if merged:
        data: Dict[str, Any] = {"version": 1, "expected": merged}
        from_group = dict((key, group) for key, group in learned_groups.items() if key not in (expected or {}))
        if from_group:  # only then: a declared inventory's file stays as it always was
            data["learned"] = from_group
        text = json.dumps(data, indent=1, sort_keys=True) + "\n"
        which = ["declared (%s)" % VARIABLE] if expected else []
        which = (["learned (the group majority)"] if from_group else []) + which
        out.append(Setting("check.expected", "inventory", "%s/%s" % (CHECK_DIR, node_check.INVENTORY_FILE), text,
                           kind=FILE, compare="content", area=PERSIST, runtime=False,
                           reason="the %s inventory nodetune-check compares" % " and ".join(which)))
    if out:
        out.append(Setting("check.program", "nodetune-check", CHECK_SCRIPT,
                           render.program_text(node_check, interpreter.shebang(root=root)), kind=FILE,
                           compare="content", area=PERSIST, runtime=False, mode=0o755,
                           reason="the node-local check a scheduler runs (Slurm HealthCheckProgram, NHC)"))
    return out


def _pending_irq_entries(settings: List[Setting]) -> List[Dict[str, Any]]:
    """Check entries of the IRQs the boot-restore state keeps although this run does not see them: mlx5 creates its
    completion vectors on first use (Linux 6.5+), and area_persist keeps those a reboot took away until they are
    back. nodetune-check skips one whose device is there but which is not created yet."""
    state = next((s for s in settings if s.id == "persist.boot_restore" and s.target == "state:irq"), None)
    if state is None:
        return []
    planned = set(s.irq_name for s in settings if s.irq_name)
    out = []
    for item in json.loads(state.value).get("settings") or []:
        name = item.get("irq_name")
        if name and name not in planned:
            entry = _check_entry(Setting(item["id"], name, "", item["value"], compare=CPULIST, key=name))
            if entry is not None:
                entry.update(irq_name=name, target=name, path="")
                out.append(entry)
    return out


def _settings_text(entries: List[Dict[str, Any]]) -> str:
    return one_per_line({"version": 1, "settings": entries}, "settings", sort_keys=True)


def at_effective(setting: Setting, effective: Dict[Tuple[str, str], str]) -> Optional[Setting]:
    """The ``check.expected`` Setting of an area with each capped value ({(id, target): value read back}) in
    place of the requested one, or None where none of its entries changes.

    Apply calls it after a write the kernel accepted but capped (the IPoIB MTU under a smaller broadcast group),
    so that the checker expects what the node has, and what the next run's plan asks for, from the first run on.
    """
    if setting.id != "check.expected" or setting.kind != FILE:
        return None
    try:
        data = json.loads(setting.value)
    except ValueError:
        return None
    entries = data.get("settings") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return None
    changed = False
    for entry in entries:
        value = effective.get((entry.get("id"), entry.get("target")))
        if value is not None and entry.get("value") != value:
            entry["value"] = value
            changed = True
    if not changed:
        return None
    return Setting(setting.id, setting.target, setting.path, _settings_text(entries), kind=FILE,
                   compare=setting.compare, area=setting.area, runtime=False, mode=setting.mode,
                   reason=setting.reason + "; capped values as the kernel set them", at_effective=at_effective)
