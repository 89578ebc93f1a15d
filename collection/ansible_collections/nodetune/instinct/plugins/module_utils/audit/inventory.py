# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Expected inventory: what a node of a group should have (``nodetune_inventory_expected``), checked by verify.

The facts are read by node_check.read_facts, the very code the node-local ``nodetune-check`` runs, so verify and
the scheduler's health check cannot disagree. One finding per declared key, id ``inventory.<key>``
(``inventory.gpu_count``, ``inventory.hca_rate``...), target ``node``. The facts of every node also go into its
report (``inventory``), where the fleet report finds each group's outliers (outliers.py).

Apply also writes the declared inventory to ``/etc/nodetune/check.d/inventory.json`` for ``nodetune-check``
(:func:`check_settings`), with every tuned area's expected Settings beside it; under the keys not declared, the
inventory the fleet report learned from the node's group majority (``learned_inventory``, outliers.py).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.areas import persist as area_persist
from ansible_collections.nodetune.instinct.plugins.module_utils import interpreter
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import node_check
from ansible_collections.nodetune.instinct.plugins.module_utils.audit.finding import DRIFT, OK, Finding
from ansible_collections.nodetune.instinct.plugins.module_utils.json_text import one_per_line
from ansible_collections.nodetune.instinct.plugins.module_utils.apply.services import parse_state
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import (
    ABSENT,
    CPULIST,
    FILE,
    LINE,
    SERVICE,
    Setting,
    SettingError,
    desired,
)

VARIABLE = "nodetune_inventory_expected"
LEARNED = "learned_inventory"  # the modules' option: the expectation the fleet report learned (outliers.py)
PERSIST = "persist"  # the check files are restored by the apply (--tags apply), like the boot-restore files
SOURCE = "inventory"
KEYS = node_check.INVENTORY_KEYS
CHECK_DIR = node_check.CONFIG_DIR
CHECK_SCRIPT = "usr/local/sbin/nodetune-check"
REMEDIES = {
    "gpu_count": "a GPU is missing or was not probed: check dmesg for amdgpu errors and lspci, reseat or replace "
                 "it; keep jobs off the node (ranks are planned from the GPUs found)",
    "gpu_model": "the node has another GPU model than its group declares: move it to the right group, or fix the "
                 "declaration",
    "compute_partition": "set the compute partition (amd-smi set --compute-partition MODE) and reload amdgpu; the "
                         "rank layout depends on it",
    "memory_partition": "set the memory partition (amd-smi set --memory-partition MODE) and reload amdgpu",
    "xgmi_hive_size": "a GPU is not in the xGMI hive: check amd-smi xgmi and dmesg for xGMI link training errors",
    "hca_count": "an RDMA device is missing: check lspci, dmesg (mlx5_core) and the HCA firmware",
    "hca_rate": "a port trained at another rate: check the cable, transceiver and switch port (ibstat, mlxlink)",
    "hca_width": "a port trained narrower: check the cable, transceiver and switch port (ibstat, mlxlink)",
    "nvme_count": "an NVMe drive is missing: check lspci, nvme list and dmesg",
    "cpu_count": "CPUs are missing: check the BIOS core settings and maxcpus=/nr_cpus= on the kernel command line",
    "smt": "SMT differs: the smt area (nodetune_smt_policy) or the BIOS SMT option",
    "numa_per_socket": "the BIOS NUMA-nodes-per-socket (NPS) setting differs",
}


class InventoryConfigError(SettingError):
    """``nodetune_inventory_expected`` is invalid; ``errors`` lists every problem."""


def _describe(value: Any) -> str:
    return "%r (%s)" % (value, type(value).__name__)


def _int(key: str, value: Any, errors: List[str], name: str = VARIABLE) -> Optional[int]:
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit():
        errors.append("%s.%s=%s is not valid: expected a whole number (%s)"
                      % (name, key, _describe(value), KEYS[key][1]))
        return None
    return int(text)


def _text(key: str, value: Any, errors: List[str], name: str = VARIABLE) -> Optional[str]:
    if key == "smt":
        if isinstance(value, bool):  # YAML 1.1 reads a bare on/off as a boolean
            return "on" if value else "off"
        if str(value).strip().lower() in ("on", "off"):
            return str(value).strip().lower()
        errors.append("%s.smt=%s is not valid: expected on or off" % (name, _describe(value)))
        return None
    if isinstance(value, bool) or value is None or not str(value).strip():
        errors.append("%s.%s=%s is not valid: expected a text (%s)" % (name, key, _describe(value), KEYS[key][1]))
        return None
    text = str(value).strip()
    if key == "hca_width":
        text = text.upper() if text.upper().endswith("X") else text + "X"
        if not text[:-1].isdigit():
            errors.append("%s.hca_width=%s is not valid: expected a link width like 4X (or 4)"
                          % (name, _describe(value)))
            return None
    if key in node_check.PARTITION_MODES:
        text = text.upper()
        if text not in node_check.PARTITION_MODES[key]:
            errors.append("%s.%s=%s is not valid: expected one of %s"
                          % (name, key, _describe(value), ", ".join(node_check.PARTITION_MODES[key])))
            return None
    return text


def validate(expected: Any, name: str = VARIABLE) -> Dict[str, Any]:
    """The declared inventory, normalised (``hca_width: 4`` -> ``4X``, ``smt: true`` -> ``on``); raises
    InventoryConfigError listing every unknown key and bad value (named as ``name``'s)."""
    if expected is None:
        return {}
    if not isinstance(expected, dict):
        raise InventoryConfigError(["%s=%s is not valid: expected a mapping of %s"
                                    % (name, _describe(expected), ", ".join(sorted(KEYS)))])
    errors: List[str] = []
    out: Dict[str, Any] = {}
    for key in sorted(expected, key=str):
        value = expected[key]
        if key not in KEYS:
            errors.append("%s has unknown key %r: valid keys are %s" % (name, key, ", ".join(sorted(KEYS))))
            continue
        if value is None:
            continue  # declared empty: not checked (a group may unset a key of a parent group)
        checked = _int(key, value, errors, name) if KEYS[key][0] == "int" else _text(key, value, errors, name)
        if checked is not None:
            out[key] = checked
    if errors:
        raise InventoryConfigError(errors)
    return out


def validate_learned(learned: Any, name: str = LEARNED) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """The expectation learned from the group majority (outliers.learned_expectation: ``expected`` and the
    ``groups`` they were learned from), normalised as a declaration; raises InventoryConfigError listing every
    problem, named as ``name``'s (the module option, or the controller's file it was read from)."""
    if not learned:
        return {}, {}
    if not isinstance(learned, dict):
        raise InventoryConfigError(["%s=%s is not valid: expected a mapping with expected and groups"
                                    % (name, _describe(learned))])
    errors = ["%s has unknown key %r: valid keys are expected, groups" % (name, key)
              for key in sorted(learned, key=str) if key not in ("expected", "groups")]
    try:
        expected = validate(learned.get("expected"), name + ".expected")
    except InventoryConfigError as exc:
        errors.extend(exc.errors)
        expected = {}
    groups = learned.get("groups")
    if not isinstance(groups, dict):
        errors.append("%s.groups=%s is not valid: expected a mapping of key to group name"
                      % (name, _describe(groups)))
        groups = {}
    raw = learned.get("expected") if isinstance(learned.get("expected"), dict) else {}
    for key in sorted(set(raw) | set(groups), key=str):
        group = groups.get(key)
        if key not in raw or not isinstance(group, str) or not group.strip():
            errors.append("%s.groups.%s=%s is not valid: every learned key needs the name of the group it was "
                          "learned from, and only learned keys have one" % (name, key, _describe(group)))
    if errors:
        raise InventoryConfigError(errors)
    return expected, dict((key, str(groups[key])) for key in expected)


def findings(expected: Dict[str, Any], facts: Dict[str, Any]) -> List[Finding]:
    """One finding per declared key (already validated): ok, or drift with the expected and actual values."""
    bad = dict((key, actual) for key, _want, actual in node_check.compare_inventory(expected, facts))
    out = []
    for key in sorted(expected):
        drift = key in bad
        actual = bad[key] if drift else expected[key]
        out.append(Finding("inventory." + key, "node", expected[key], "none" if actual is None else actual,
                           DRIFT if drift else OK, severity="high", source=SOURCE,
                           remedy=REMEDIES[key] if drift else ""))
    return out


def check(root_path: str, health: Optional[Dict[str, Any]]) -> Tuple[List[Finding], Dict[str, Any]]:
    """The inventory findings of a node and its facts (for the report and the fleet's outliers)."""
    expected = validate((health or {}).get(VARIABLE))
    facts = node_check.read_facts(root_path)
    return findings(expected, facts), facts


# ------------------------------------------------------------------------------------------------ nodetune-check
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
    if setting.id in area_persist.IRQ_IDS and setting.key:
        # IRQ numbers change across reboots, names do not: the file names the IRQ only by its key, so that it
        # still matches the node after a reboot (verify compares this file's content): a NIC vector by its action
        # name, a GPU's by amdgpu@pci:<BDF> (amdgpu names every GPU's vector alike), both found again as
        # nodetune-restore finds them (node_check._irq_numbers).
        entry.update(irq_name=setting.key, target=setting.key, path="")
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
                           kind=FILE, compare="content", area=PERSIST, runtime=False,
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
                           node_check.script_text(interpreter.shebang(root=root)), kind=FILE,
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
    planned = set(s.key for s in settings if s.id in area_persist.IRQ_IDS and s.key)
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
                   reason=setting.reason + "; capped values as the kernel set them")
