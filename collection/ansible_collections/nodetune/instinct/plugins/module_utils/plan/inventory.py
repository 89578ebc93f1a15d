# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The declared and learned inventory (``nodetune_inventory_expected``, ``learned_inventory``), validated before
discovery and before any write: apply writes it into the node-local checker's files, verify checks the node against
it (audit/inventory.py)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_check
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import SettingError

VARIABLE = "nodetune_inventory_expected"
LEARNED = "learned_inventory"  # the modules' option: the expectation the fleet report learned (outliers.py)
KEYS = node_check.INVENTORY_KEYS


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
