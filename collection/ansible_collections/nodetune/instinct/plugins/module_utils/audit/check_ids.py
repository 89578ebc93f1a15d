# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Every check id verify can report: what a waiver may name.

A waiver whose id matches no check (``nvme.schedular``) would silently waive nothing while its author believes the
drift is covered; waivers are therefore refused unless their id is one of these. Each area declares its own check ids
(and, where they are open-ended, their pattern) in its declaration (areas/<area>.py), so this module holds no
per-area list.
The read-only checks' ids are data too: the choices of ``nodetune_bios_checks`` and ``nodetune_health_checks`` there,
and node_check.INVENTORY_KEYS. This module imports no check (waivers.py imports it to refuse a waiver);
tests/core/test_import_graph.py holds those ids equal to the checks' own.
tests/node/test_safety_catalogue.py checks the ids against those the code really builds; tests/ansible/test_new_area.py
pins every published id.
"""

from __future__ import annotations

import difflib
import re
from typing import List, Pattern, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_check

# what every apply adds whatever the areas (areas/persist.py, areas/checker_files.py, sysctl_boot.py): not an area's
ENGINE_IDS = ("persist.sysctl_d", "persist.udev", "persist.boot_restore", "persist.sysctl_boot",
              "check.expected", "check.program")
AREA_IDS = tuple(check_id for name in areas.AREAS for check_id in areas.ROLES[name]["check_ids"])
SETTING_IDS = AREA_IDS + ENGINE_IDS
# the open-ended ids of an area ("sysctl.<key>": vm.dirty_ratio, nodetune_sysctl_extra's keys), with how to say them
ID_PATTERNS: Tuple[Tuple[Pattern[str], str], ...] = tuple(
    (re.compile(areas.ROLES[name]["check_id_pattern"][0]), areas.ROLES[name]["check_id_pattern"][1])
    for name in areas.AREAS if areas.ROLES[name].get("check_id_pattern"))


def declared_checks(role: str, variable: str) -> Tuple[str, ...]:
    """The checks a role's list variable may name (its declared choices): bios.CHECKS, health.CHECKS."""
    return tuple(areas.ROLES[role]["variables"][variable]["choices"])


BIOS_CHECKS = declared_checks(areas.BIOS_ROLE, "nodetune_bios_checks")
HEALTH_CHECKS = declared_checks("verify", "nodetune_health_checks")


def known_ids() -> List[str]:
    return sorted(set(SETTING_IDS
                      + tuple("bios." + check for check in BIOS_CHECKS)
                      + tuple("health." + check for check in HEALTH_CHECKS)
                      + tuple("inventory." + key for key in node_check.INVENTORY_KEYS)
                      + tuple(area + ".applicable" for area in areas.AREAS)))  # one per area role


def is_known(check_id: str) -> bool:
    return check_id in known_ids() or any(pattern.match(check_id) for pattern, _text in ID_PATTERNS)


def unknown_message(check_id: str) -> str:
    ids = known_ids()
    near = difflib.get_close_matches(check_id, ids, n=1)
    forms = "".join(", or %s" % text for _pattern, text in ID_PATTERNS)
    return "id %r matches no check%s (valid: %s%s)" % (
        check_id, "; did you mean %r?" % near[0] if near else "", ", ".join(ids), forms)
