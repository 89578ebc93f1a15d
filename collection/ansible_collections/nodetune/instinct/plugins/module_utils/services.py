# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Service state (irqbalance, nodetune-restore) for real and simulated nodes.

A service Setting's value lists the wanted properties, ``"active=no,enabled=no"`` or just ``"enabled=yes"``;
only the listed properties are compared, so a oneshot unit that should merely be enabled is not reported as
drift when it has (or has not) run.

On a real node (root ``/``) systemd is asked through ``systemctl`` with fixed argument lists (never a shell).
A simulated node keeps the same facts as files, the way systemd itself lays them out:
enabled = ``etc/systemd/system/multi-user.target.wants/<unit>`` exists (a symlink to the unit file);
active = ``run/systemd/units/invocation:<unit>`` exists.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from typing import Callable, Dict, List, Optional, Sequence, Tuple

UNIT_DIRS = ("etc/systemd/system", "usr/lib/systemd/system", "lib/systemd/system")
WANTS = "etc/systemd/system/multi-user.target.wants"
RUN_UNITS = "run/systemd/units"
_UNIT = re.compile(r"^[A-Za-z0-9@_.\-]+\.(service|timer)$")


def parse_state(text: str) -> Dict[str, str]:
    out = {}
    for item in text.split(","):
        key, value = item.partition("=")[::2]
        if key.strip():
            out[key.strip()] = value.strip()
    return out


def format_state(state: Dict[str, str], keys: Optional[Sequence[str]] = None) -> str:
    keys = list(keys) if keys is not None else sorted(state)
    return ",".join("%s=%s" % (k, state.get(k, "unknown")) for k in keys)


def check_unit(unit: str) -> None:
    if not _UNIT.match(unit or ""):
        raise ValueError("service name %r is not valid: expected a systemd unit such as 'irqbalance.service'" % unit)


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
                os.makedirs(os.path.dirname(link), exist_ok=True)
                target = next(("/%s/%s" % (d, unit) for d in UNIT_DIRS
                               if self.root.exists("%s/%s" % (d, unit))), "/etc/systemd/system/" + unit)
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


class SystemdServices(object):
    """Service state of a real node through systemctl (argument lists only, never a shell)."""

    def __init__(self, run_command: Callable[[List[str]], Tuple[int, str, str]], systemctl: str = "systemctl"):
        self.run = run_command
        self.systemctl = systemctl

    def installed(self, unit: str) -> bool:
        rc, out = self.run([self.systemctl, "list-unit-files", "--no-legend", "--no-pager", unit])[:2]
        return rc == 0 and unit in out

    def state(self, unit: str) -> Dict[str, str]:
        check_unit(unit)
        out_enabled = self.run([self.systemctl, "is-enabled", unit])[1]
        rc_active = self.run([self.systemctl, "is-active", "--quiet", unit])[0]
        return {"enabled": "yes" if out_enabled.strip() in ("enabled", "enabled-runtime", "alias") else "no",
                "active": "yes" if rc_active == 0 else "no"}

    def set_state(self, unit: str, wanted: Dict[str, str]) -> None:
        check_unit(unit)
        commands = []
        if wanted.get("active") == "no":
            commands.append([self.systemctl, "stop", unit])
        if wanted.get("enabled") == "no":
            commands.append([self.systemctl, "disable", unit])
        if wanted.get("enabled") == "yes":
            commands.append([self.systemctl, "daemon-reload"])
            commands.append([self.systemctl, "enable", unit])
        if wanted.get("active") == "yes":
            commands.append([self.systemctl, "start", unit])
        for command in commands:
            rc, out, err = self.run(command)
            if rc != 0:
                raise OSError(0, "%s failed (rc=%d): %s" % (" ".join(command), rc, (err or out).strip()))


def for_root(root, run_command: Optional[Callable] = None):
    """The service manager for a root: systemd on a real node, files on a simulated one, else None."""
    if getattr(root, "simulated", False):
        return SimServices(root)
    if getattr(root, "is_host", False) and run_command is not None:
        return SystemdServices(run_command)
    return None
