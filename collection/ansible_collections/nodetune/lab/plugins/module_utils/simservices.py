# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Service state of a simulated node, kept as files the way systemd itself lays them out.

enabled = ``etc/systemd/system/multi-user.target.wants/<unit>`` exists (a symlink to the unit file);
active = ``run/systemd/units/invocation:<unit>`` exists. The simulated kernel's backend (simkernel.BACKEND) hands
this to the production code through ``services.for_root``.

The manager's loaded resource limits (:data:`MANAGER_STATE`, in ``run/``: a reboot builds it again): systemd reads
``DefaultLimitMEMLOCK=`` from system.conf and the system.conf.d drop-ins when it starts and again at
``daemon-reload`` and ``daemon-reexec`` (src/core/main.c: MANAGER_RELOAD calls parse_configuration() and
set_manager_defaults(), since systemd PR #426), a unit takes its ``LimitMEMLOCK=`` (fragment, then drop-ins, else
the manager's default) when it is loaded, and a process gets the unit's limit when it starts, shown in
``proc/<pid>/limits`` (fs/proc/base.c, proc_pid_limits()). Enabled services other than oneshots run from boot, each
with such a process. :func:`daemon_reload`, :func:`daemon_reexec` and :func:`restart` are what systemctl does;
:meth:`SimServices.show` answers as ``systemctl show`` does. This parser is the lab's own, written apart from
nodetune's (areas/limits.py), so that a test on a simulated node checks nodetune against systemd's rules.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from typing import Any, Callable, Dict, List, Optional

from ansible_collections.nodetune.instinct.plugins.module_utils.plan.services import (
    RUN_UNITS,
    UNIT_DIRS,
    WANTS,
    check_unit,
)


MANAGER_STATE = "run/systemd/.nodetune-sim-manager.json"
DEFAULT_MEMLOCK = 8 * 1024 * 1024  # systemd-system.conf(5): DefaultLimitMEMLOCK= defaults to 8M
_UNIT_PATHS = ("etc/systemd/system", "run/systemd/system", "usr/local/lib/systemd/system", "usr/lib/systemd/system",
               "lib/systemd/system")
_CONF_PATHS = ("etc/systemd", "run/systemd", "usr/local/lib/systemd", "usr/lib/systemd")
_SUFFIX = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50, "E": 1 << 60}
Limit = List[Any]  # [soft, hard]: bytes, or "infinity"


def _limit(text: str) -> Optional[Limit]:
    """systemd's rlimit syntax (systemd.exec(5)): ``infinity``, bytes with a base-1024 suffix, or ``soft:hard``."""
    values: List[Any] = []
    for part in text.strip().split(":"):
        part = part.strip()
        if part == "infinity":
            values.append("infinity")
            continue
        factor = _SUFFIX.get(part[-1:].upper(), 1) if part else 1
        digits = part[:-1] if factor > 1 else part
        if not digits.isdigit() or not digits.isascii():
            return None
        values.append(int(digits) * factor)
    return [values[0], values[-1]] if 1 <= len(values) <= 2 else None


def _assigned(texts: List[Optional[str]], section: str, key: str) -> Optional[Limit]:
    value = None
    for text in texts:
        current = ""
        for line in (text or "").splitlines():
            line = line.strip()
            if line.startswith("[") and line.endswith("]"):
                current = line[1:-1]
            elif current == section and line.split("=", 1)[0].strip() == key and "=" in line:
                raw = line.split("=", 1)[1].strip()
                value = _limit(raw) if raw else None  # "Key=" resets to the default
    return value


def _conf_d(listdir: Callable[[str], List[str]], dirs: List[str]) -> List[str]:
    """Drop-ins by file name, a name in an earlier (higher) directory hiding the later directories' one."""
    found: Dict[str, str] = {}
    for directory in dirs:
        for name in listdir(directory):
            if name.endswith(".conf") and name not in found:
                found[name] = directory + "/" + name
    return [found[name] for name in sorted(found)]


def manager_memlock(read: Callable[[str], Optional[str]], listdir: Callable[[str], List[str]]) -> Limit:
    """DefaultLimitMEMLOCK as the manager reads it from the files now (systemd-system.conf(5))."""
    main = next((d + "/system.conf" for d in _CONF_PATHS if read(d + "/system.conf") is not None),
                "etc/systemd/system.conf")
    files = [main] + _conf_d(listdir, [d + "/system.conf.d" for d in _CONF_PATHS])
    return _assigned([read(f) for f in files], "Manager", "DefaultLimitMEMLOCK") or [DEFAULT_MEMLOCK, DEFAULT_MEMLOCK]


def unit_files(read: Callable[[str], Optional[str]], listdir: Callable[[str], List[str]], unit: str) -> List[str]:
    """The unit's fragment and its drop-ins (``<unit>.d``, ``<template>@.service.d``, ``service.d``) in the order
    systemd applies them; empty where it is not installed."""
    fragment = next((d + "/" + unit for d in _UNIT_PATHS if read(d + "/" + unit) is not None), None)
    if fragment is None:
        return []
    names = [unit + ".d"] + ([unit.split("@")[0] + "@.service.d"] if "@" in unit else []) + ["service.d"]
    found: Dict[str, str] = {}
    for name in names:
        for path in _conf_d(listdir, [d + "/" + name for d in _UNIT_PATHS]):
            found.setdefault(path.rsplit("/", 1)[1], path)
    return [fragment] + [found[n] for n in sorted(found)]


def load_unit(read: Callable[[str], Optional[str]], listdir: Callable[[str], List[str]], unit: str,
              default: Limit) -> Dict[str, Any]:
    """What the manager holds for a unit it loads now: its LimitMEMLOCK (the default where unset) and a digest of
    its files (``NeedDaemonReload`` once they differ)."""
    files = unit_files(read, listdir, unit)
    texts = [read(f) for f in files]
    digest = hashlib.sha256("\0".join("%s\0%s" % (f, t) for f, t in zip(files, texts)).encode()).hexdigest()
    oneshot = any(line.strip().replace(" ", "") == "Type=oneshot" for line in (texts[0] or "").splitlines()) \
        if texts else False
    return {"LimitMEMLOCK": _assigned(texts, "Service", "LimitMEMLOCK") or list(default), "digest": digest,
            "installed": bool(files), "oneshot": oneshot}


def limits_text(memlock: Limit) -> str:
    """``/proc/<pid>/limits`` of a service's process (fs/proc/base.c, proc_pid_limits(): "%-25s %-20s %-20s %-10s"),
    the other rows as systemd's defaults leave them."""
    def cell(value: Any) -> str:
        return "unlimited" if value == "infinity" else str(value)
    rows = [("Max cpu time", "unlimited", "unlimited", "seconds"), ("Max file size", "unlimited", "unlimited", "bytes"),
            ("Max data size", "unlimited", "unlimited", "bytes"), ("Max stack size", "8388608", "unlimited", "bytes"),
            ("Max core file size", "0", "unlimited", "bytes"), ("Max resident set", "unlimited", "unlimited", "bytes"),
            ("Max processes", "2062409", "2062409", "processes"), ("Max open files", "1024", "524288", "files"),
            ("Max locked memory", cell(memlock[0]), cell(memlock[1]), "bytes"),
            ("Max address space", "unlimited", "unlimited", "bytes"),
            ("Max file locks", "unlimited", "unlimited", "locks"),
            ("Max pending signals", "2062409", "2062409", "signals"),
            ("Max msgqueue size", "819200", "819200", "bytes"),
            ("Max nice priority", "0", "0", ""), ("Max realtime priority", "0", "0", ""),
            ("Max realtime timeout", "unlimited", "unlimited", "us")]
    out = "%-25s %-20s %-20s %-10s\n" % ("Limit", "Soft Limit", "Hard Limit", "Units")
    for name, soft, hard, unit in rows:
        out += ("%-25s %-20s %-20s " % (name, soft, hard)) + ("%-10s" % unit if unit else "") + "\n"
    return out


def _show_limit(value: Any) -> str:
    return "infinity" if value == "infinity" else str(value)


# where ``systemctl mask`` puts its link (``--runtime``: /run), and where an empty unit file masks a unit too
MASK_DIRS = ("etc/systemd/system", "run/systemd/system")


class SimServices(object):
    """Service state of a simulated node, kept as files under its root."""

    def __init__(self, root) -> None:
        self.root = root

    def installed(self, unit: str) -> bool:
        return any(self.root.exists("%s/%s" % (d, unit)) for d in UNIT_DIRS)

    def invocation_id(self, unit: str) -> str:
        """The target of ``run/systemd/units/invocation:<unit>``, as the simulated node was built with it.

        systemd links that name to the unit's invocation id; simnode derives the id from the host name (crc32 of
        ``<hostname>/invocation``, see simnode/emit_system.py, _emit_run), so a service started again here gets
        back the very link the node booted with, and a revert leaves the tree byte-identical.
        """
        try:
            hostname = json.loads(self.root.read(".nodetune-simnode.json", strip=False) or "{}")["spec"]["hostname"]
        except (ValueError, KeyError, TypeError):
            hostname = "localhost"
        text = hostname + "/invocation" + ("" if unit == "irqbalance.service" else "/" + unit)
        value = (zlib.crc32(text.encode()) << 32) | zlib.crc32((text + "#").encode())
        return "%032x" % (value & ((1 << 64) - 1))

    def masked(self, unit: str) -> bool:
        """systemd.unit(5): "If a unit file is empty (i.e. has the file size 0) or is symlinked to /dev/null, its
        configuration will not be loaded and it appears with a load state of "masked""; ``systemctl is-enabled`` then
        says ``masked`` (the unit file in /etc/systemd/system or /run/systemd/system, the folders systemctl mask
        writes)."""
        for folder in MASK_DIRS:
            path = self.root.real(folder) + "/" + unit
            try:
                if os.path.islink(path):
                    if os.readlink(path) == "/dev/null":
                        return True
                elif os.path.isfile(path) and os.path.getsize(path) == 0:
                    return True
            except OSError:
                continue
        return False

    def state(self, unit: str) -> Dict[str, str]:
        check_unit(unit)
        enabled = os.path.lexists(self.root.real(WANTS) + "/" + unit) and not self.masked(unit)
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

    # ---------------------------------------------------------------- the manager's loaded limits
    def _read(self, rel: str) -> Optional[str]:
        return self.root.read(rel, strip=False)

    def manager(self) -> Dict[str, Any]:
        """The manager's loaded state; where the node has none yet (a tree built before this model), what it
        would have loaded from the files as they are."""
        try:
            state = json.loads(self._read(MANAGER_STATE) or "")
        except ValueError:
            state = None
        if not isinstance(state, dict):
            state = {"DefaultLimitMEMLOCK": manager_memlock(self._read, self.root.listdir), "units": {}}
        return state

    def _unit(self, state: Dict[str, Any], unit: str) -> Dict[str, Any]:
        loaded = state["units"].get(unit)
        if loaded is None:  # systemctl show loads a unit on demand, from the files as they are now
            loaded = load_unit(self._read, self.root.listdir, unit, state["DefaultLimitMEMLOCK"])
            loaded["MainPID"] = 0
        return loaded

    def show(self, unit: Optional[str], properties: List[str]) -> Dict[str, str]:
        """What ``systemctl show -p ...`` prints for the manager (unit None) or a unit."""
        state = self.manager()
        if unit is None:
            limit = state["DefaultLimitMEMLOCK"]
            values = {"DefaultLimitMEMLOCK": _show_limit(limit[1]), "DefaultLimitMEMLOCKSoft": _show_limit(limit[0])}
        else:
            check_unit(unit)
            loaded = self._unit(state, unit)
            current = load_unit(self._read, self.root.listdir, unit, state["DefaultLimitMEMLOCK"])
            values = {"LimitMEMLOCK": _show_limit(loaded["LimitMEMLOCK"][1]),
                      "LimitMEMLOCKSoft": _show_limit(loaded["LimitMEMLOCK"][0]),
                      "MainPID": str(loaded.get("MainPID") or 0),
                      "NeedDaemonReload": "yes" if current["digest"] != loaded["digest"] else "no",
                      "LoadState": "loaded" if loaded["installed"] else "not-found"}
        return dict((name, values[name]) for name in properties if name in values)


def _save(root: Any, state: Dict[str, Any]) -> None:
    root.write_file(MANAGER_STATE, json.dumps(state, sort_keys=True, indent=1) + "\n", mode=0o644)


def daemon_reload(root: Any) -> Dict[str, Any]:
    """``systemctl daemon-reload``: the manager re-reads system.conf(.d) (since systemd PR #426) and reloads every
    unit's files; running processes keep their limits. Returns the new state."""
    services = SimServices(root)
    state = services.manager()
    read = services._read
    state["DefaultLimitMEMLOCK"] = manager_memlock(read, root.listdir)
    for unit, loaded in sorted(state["units"].items()):
        fresh = load_unit(read, root.listdir, unit, state["DefaultLimitMEMLOCK"])
        fresh["MainPID"] = loaded.get("MainPID", 0)
        state["units"][unit] = fresh
    _save(root, state)
    return state


def daemon_reexec(root: Any) -> Dict[str, Any]:
    """``systemctl daemon-reexec``: the manager serializes, executes itself again and reads its configuration and
    the units anew; for the limits the same as a reload, and running processes keep theirs."""
    return daemon_reload(root)


def restart(root: Any, unit: str) -> int:
    """``systemctl restart <unit>``: its process ends and a new one starts with the unit's loaded limit (a unit
    whose files changed since it was loaded still runs with what was loaded: systemctl warns to daemon-reload).
    Returns the new main PID."""
    check_unit(unit)
    services = SimServices(root)
    state = services.manager()
    loaded = services._unit(state, unit)
    if not loaded["installed"]:
        raise OSError(0, "systemctl restart %s failed (rc=5): Unit %s not found." % (unit, unit))
    old = int(loaded.get("MainPID") or 0)
    pid = (old + 1) if old else 4000 + zlib.crc32(unit.encode()) % 3000
    if old and root.isdir("proc/%d" % old):
        for name in root.listdir("proc/%d" % old):
            os.unlink(root.real("proc/%d/%s" % (old, name)))
        os.rmdir(root.real("proc/%d" % old))
    for name, text in process_files(unit, pid, loaded["LimitMEMLOCK"]).items():
        root.write_file("proc/%d/%s" % (pid, name), text, mode=0o444)
    services.set_state(unit, {"active": "yes"})
    loaded["MainPID"] = pid
    state["units"][unit] = loaded
    _save(root, state)
    return pid


def process_files(unit: str, pid: int, memlock: Limit) -> Dict[str, str]:
    """A service's process entry under ``proc/<pid>/``."""
    name = unit.rsplit(".", 1)[0].split("@")[0][:15]
    return {"comm": name + "\n", "cmdline": "/usr/sbin/%s\0" % name,
            "status": "Name:\t%s\nState:\tS (sleeping)\nPid:\t%d\nPPid:\t1\n" % (name, pid),
            "limits": limits_text(memlock)}


def boot_state(read: Callable[[str], Optional[str]], listdir: Callable[[str], List[str]], hostname: str,
               enabled: List[str]) -> Dict[str, Any]:
    """The manager's state right after boot: the default from the files, and each enabled service (but
    irqbalance, which the node models apart, and oneshots, which have exited) loaded and running."""
    default = manager_memlock(read, listdir)
    units: Dict[str, Any] = {}
    for unit in sorted(enabled):
        if not unit.endswith(".service") or unit == "irqbalance.service":
            continue
        loaded = load_unit(read, listdir, unit, default)
        if loaded["installed"] and not loaded["oneshot"]:
            loaded["MainPID"] = 4000 + zlib.crc32((hostname + "/" + unit).encode()) % 3000
            units[unit] = loaded
    return {"DefaultLimitMEMLOCK": default, "units": units}
