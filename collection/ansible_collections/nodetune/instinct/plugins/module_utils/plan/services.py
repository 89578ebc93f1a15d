# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Service state (irqbalance, nodetune-restore) of a node.

A service Setting's value lists the wanted properties, ``"active=no,enabled=no"`` or just ``"enabled=yes"``;
only the listed properties are compared, so a oneshot unit that should merely be enabled is not reported as
drift when it has (or has not) run.

On a real node (root ``/``) systemd is asked through ``systemctl`` with fixed argument lists (never a shell).
Where systemd is not running there (a container, a chroot, an image build) only unit files can change: they are
enabled and disabled offline (``systemctl --root``), nothing is started, stopped or reloaded.
A root whose write backend keeps its own services (the lab's simulated nodes, nodetune.lab) answers through it.
"""

from __future__ import annotations

import os
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

UNIT_DIRS = ("etc/systemd/system", "usr/lib/systemd/system", "lib/systemd/system")
WANTS = "etc/systemd/system/multi-user.target.wants"
RUN_UNITS = "run/systemd/units"
# sd_booted(3): systemd runs as the init system iff this directory exists
BOOTED = "run/systemd/system"
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


class SystemdServices(object):
    """Service state of a real node through systemctl (argument lists only, never a shell).

    ``offline`` where systemd is not running under ``root``: systemctl would refuse daemon-reload, start, stop and
    is-active ("System has not been booted with systemd as init system"), so unit files are enabled and disabled
    with ``--root=<root>``, no unit counts as active and stopping one is a no-op."""

    def __init__(self, run_command: Callable[[List[str]], Tuple[int, str, str]], systemctl: str = "systemctl",
                 root: str = "/"):
        self.run = run_command
        self.systemctl = systemctl
        self.root = root
        self.offline = not os.path.isdir(os.path.join(root, BOOTED))

    def _command(self, *args: str) -> List[str]:
        return [self.systemctl] + (["--root=" + self.root] if self.offline else []) + list(args)

    def installed(self, unit: str) -> bool:
        rc, out = self.run(self._command("list-unit-files", "--no-legend", "--no-pager", unit))[:2]
        return rc == 0 and unit in out

    def state(self, unit: str) -> Dict[str, str]:
        check_unit(unit)
        out_enabled = self.run(self._command("is-enabled", unit))[1]
        active = not self.offline and self.run(self._command("is-active", "--quiet", unit))[0] == 0
        return {"enabled": "yes" if out_enabled.strip() in ("enabled", "enabled-runtime", "alias") else "no",
                "active": "yes" if active else "no"}

    def show(self, unit: Optional[str], properties: Sequence[str]) -> Dict[str, str]:
        """``systemctl show``'s ``KEY=VALUE`` properties of a unit, or of the manager itself where ``unit`` is None
        (what it has loaded, e.g. ``DefaultLimitMEMLOCK``); empty where systemd is not running or systemctl fails.
        Reads only (area_limits' verify)."""
        if self.offline:
            return {}
        argv = [self.systemctl, "show", "--no-pager"] + ["--property=" + name for name in properties]
        rc, out = self.run(argv + (["--", unit] if unit else []))[:2]
        if rc != 0:
            return {}
        return dict(line.partition("=")[::2] for line in out.splitlines() if "=" in line)

    def set_state(self, unit: str, wanted: Dict[str, str]) -> None:
        """Every step is tried (a failed stop must not leave the unit enabled); one OSError names each failure."""
        check_unit(unit)
        failures = []
        commands = []
        if wanted.get("active") == "no" and not self.offline:
            commands.append(self._command("stop", unit))
        if wanted.get("enabled") == "no":
            commands.append(self._command("disable", unit))
        if wanted.get("enabled") == "yes":
            if not self.offline:
                commands.append(self._command("daemon-reload"))  # the unit file may have just been written
            commands.append(self._command("enable", unit))
        if wanted.get("active") == "yes":
            if self.offline:
                failures.append("cannot start %s: systemd is not running under %s" % (unit, self.root))
            else:
                commands.append(self._command("start", unit))
        for command in commands:
            rc, out, err = self.run(command)
            if rc == 5 and command[-2] == "stop":
                # "Unit ... not loaded" (LSB 5): a unit never started whose file a revert removed is unloaded at the
                # next daemon-reload (systemctl disable of another unit does one); stopped is what was wanted
                continue
            if rc != 0:
                failures.append("%s failed (rc=%d): %s" % (" ".join(command), rc, (err or out).strip()))
        if failures:
            raise OSError(0, "; ".join(failures))


def for_root(root, run_command: Optional[Callable] = None):
    """The service manager for a root: its write backend's (the lab's), systemd on a real node, else None."""
    backend = getattr(root, "backend", None)
    if backend is not None:
        return backend.services(root)
    if getattr(root, "is_host", False) and run_command is not None:
        return SystemdServices(run_command, root=root.path)
    return None
