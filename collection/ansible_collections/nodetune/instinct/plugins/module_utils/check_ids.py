# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Every check id verify can report: what a waiver may name.

A waiver whose id matches no check (``nvme.schedular``) would silently waive nothing while its author believes the
drift is covered; waivers are therefore refused unless their id is one of these. tests/unit/test_safety_catalogue.py
checks this list against the ids the code really builds.
"""

from __future__ import annotations

import difflib
import re
from typing import List

from ansible_collections.nodetune.instinct.plugins.module_utils import areas, bios, health, inventory

SETTING_IDS = (
    "smt.control", "smt.siblings_offline",
    "cpu.governor", "cpu.epp", "cpu.idle_state",
    "irq.irqbalance", "irq.nic_local",
    "ib.mtu",
    "nvme.scheduler", "nvme.nr_requests", "nvme.module_options",
    "rocm.env", "rocm.ranks", "rocm.bind",
    "persist.sysctl_d", "persist.udev", "persist.boot_restore",
    "check.expected", "check.program",
)
FINDING_IDS = ("irq.managed", "persist.sysctl_boot")
# sysctl settings are "sysctl.<key>" (vm.dirty_ratio, nodetune_sysctl_extra's keys)
SYSCTL_ID = re.compile(r"^sysctl\.[a-z0-9_]+(\.[a-z0-9_\-]+)+$")


def known_ids() -> List[str]:
    return sorted(set(SETTING_IDS + FINDING_IDS
                      + tuple("bios." + check for check in bios.CHECKS)
                      + tuple("health." + check for check in health.CHECKS)
                      + tuple("inventory." + key for key in inventory.KEYS)
                      + tuple(area + ".applicable" for area in areas.AREAS)))  # one per area role


def is_known(check_id: str) -> bool:
    return check_id in known_ids() or bool(SYSCTL_ID.match(check_id))


def unknown_message(check_id: str) -> str:
    ids = known_ids()
    near = difflib.get_close_matches(check_id, ids, n=1)
    return "id %r matches no check%s (valid: %s, or sysctl.<key> such as sysctl.vm.dirty_ratio)" % (
        check_id, "; did you mean %r?" % near[0] if near else "", ", ".join(ids))
