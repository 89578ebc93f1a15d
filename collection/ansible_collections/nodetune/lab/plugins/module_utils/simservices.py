# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Service state of a simulated node, kept as files the way systemd itself lays them out.

enabled = ``etc/systemd/system/multi-user.target.wants/<unit>`` exists (a symlink to the unit file);
active = ``run/systemd/units/invocation:<unit>`` exists. The simulated kernel's backend (simkernel.BACKEND) hands
this to the production code through ``services.for_root``.
"""

from __future__ import annotations

import json
import os
import zlib
from typing import Dict

from ansible_collections.nodetune.instinct.plugins.module_utils.services import RUN_UNITS, UNIT_DIRS, WANTS, check_unit


class SimServices(object):
    """Service state of a simulated node, kept as files under its root."""

    def __init__(self, root) -> None:
        self.root = root

    def installed(self, unit: str) -> bool:
        return any(self.root.exists("%s/%s" % (d, unit)) for d in UNIT_DIRS)

    def invocation_id(self, unit: str) -> str:
        """The target of ``run/systemd/units/invocation:<unit>``, as the simulated node was built with it.

        systemd links that name to the unit's invocation id; simnode derives the id from the host name (crc32 of
        ``<hostname>/invocation``, see simnode._emit_run), so a service started again here gets back the very link
        the node booted with, and a revert leaves the tree byte-identical.
        """
        try:
            hostname = json.loads(self.root.read(".nodetune-simnode.json", strip=False) or "{}")["spec"]["hostname"]
        except (ValueError, KeyError, TypeError):
            hostname = "localhost"
        text = hostname + "/invocation" + ("" if unit == "irqbalance.service" else "/" + unit)
        value = (zlib.crc32(text.encode()) << 32) | zlib.crc32((text + "#").encode())
        return "%032x" % (value & ((1 << 64) - 1))

    def state(self, unit: str) -> Dict[str, str]:
        check_unit(unit)
        enabled = os.path.lexists(self.root.real(WANTS) + "/" + unit)
        active = os.path.lexists(self.root.real(RUN_UNITS) + "/invocation:" + unit)
        return {"enabled": "yes" if enabled else "no", "active": "yes" if active else "no"}

    def set_state(self, unit: str, wanted: Dict[str, str]) -> None:
        check_unit(unit)
        if "enabled" in wanted:
            link = self.root.real(WANTS) + "/" + unit
            if wanted["enabled"] == "yes" and not os.path.lexists(link):
                target = next(("/%s/%s" % (d, unit) for d in UNIT_DIRS
                               if self.root.exists("%s/%s" % (d, unit))), None)
                if target is None:
                    # as systemctl 252 answers (and exits 1) for a unit file that is not there (yet)
                    raise OSError(0, "systemctl enable %s failed (rc=1): Failed to enable unit, unit %s does not "
                                     "exist." % (unit, unit))
                os.makedirs(os.path.dirname(link), exist_ok=True)
                os.symlink(target, link)
            elif wanted["enabled"] == "no" and os.path.lexists(link):
                os.unlink(link)
        if "active" in wanted:
            flag = self.root.real(RUN_UNITS) + "/invocation:" + unit
            if wanted["active"] == "yes" and not os.path.lexists(flag):
                os.makedirs(os.path.dirname(flag), exist_ok=True)
                os.symlink(self.invocation_id(unit), flag)
            elif wanted["active"] == "no" and os.path.lexists(flag):
                os.unlink(flag)
