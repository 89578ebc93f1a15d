# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Node-wide facts: kernel command line, IOMMU, PCIe ASPM policy, irqbalance and the tuned sysctls."""

from __future__ import annotations

from ansible_collections.nodetune.instinct.plugins.module_utils.discover.cpu import (
    cpulist_or_none,
    cpumask_or_none,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import parse_choice
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: they are postponed, so typing is never imported at run time
    from typing import Any, Dict, List, Optional, Tuple

# The sysctls nodetune's roles tune (DOMAIN.md); discovery reports their current values.
TUNED_SYSCTLS = (
    "vm.dirty_ratio",
    "vm.dirty_background_ratio",
    "vm.dirty_bytes",
    "vm.dirty_background_bytes",
    "kernel.numa_balancing",
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.neigh.default.gc_thresh1",
    "net.ipv4.neigh.default.gc_thresh2",
    "net.ipv4.neigh.default.gc_thresh3",
)
IRQBALANCE_CONFIGS = ("etc/sysconfig/irqbalance", "etc/default/irqbalance")
IRQBALANCE_FILES = (
    "usr/sbin/irqbalance",
    "sbin/irqbalance",
    "usr/bin/irqbalance",
    "usr/lib/systemd/system/irqbalance.service",
    "lib/systemd/system/irqbalance.service",
    "etc/systemd/system/irqbalance.service",
    "etc/init.d/irqbalance",
)
IRQBALANCE_ENABLED_LINK = "etc/systemd/system/multi-user.target.wants/irqbalance.service"
ASPM_POLICY = "sys/module/pcie_aspm/parameters/policy"
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_NAME_CHARS = _NAME_START | frozenset("0123456789")


def sysctl_path(key: str) -> str:
    """``net.ipv4.tcp_rmem`` -> ``proc/sys/net/ipv4/tcp_rmem``."""
    return "proc/sys/" + key.replace(".", "/")


def read_sysctls(root: Root) -> Dict[str, str]:
    values: Dict[str, str] = {}
    for key in TUNED_SYSCTLS:
        text = root.read(sysctl_path(key))
        if text is not None:
            values[key] = text
    return values


def read_kernel(root: Root) -> Dict[str, Optional[str]]:
    return {"cmdline": root.read("proc/cmdline"), "release": root.read("proc/sys/kernel/osrelease")}


def read_iommu(root: Root) -> Dict[str, Any]:
    devices = root.listdir("sys/class/iommu")
    groups = root.listdir("sys/kernel/iommu_groups")
    return {"present": bool(devices) or bool(groups), "devices": devices, "groups": len(groups)}


def read_pcie_aspm(root: Root) -> Dict[str, Any]:
    active, available = parse_choice(root.read(ASPM_POLICY))
    return {"policy": active, "available": available}


def _shell_value(raw: str) -> str:
    import shlex  # only where an irqbalance file sets something: not on every discovery's start-up

    try:
        words = shlex.split(raw, comments=True)
    except ValueError:
        return raw.strip().strip("\"'")
    return " ".join(words)


def shell_assignment(line: str) -> Optional[Tuple[str, str]]:
    """``(NAME, raw value)`` of ``NAME=value`` or ``export NAME=value`` (one line, no newline in it), else None
    (``^\\s*(?:export\\s+)?([A-Z_][A-Z0-9_]*)=(.*)$``; no regular expressions on the discovery path, see
    parse.py)."""
    rest = line.lstrip()
    if rest.startswith("export"):
        after = rest[len("export"):]
        words = after.lstrip()
        if len(words) < len(after):
            found = _name_and_value(words)
            if found is not None:
                return found
    return _name_and_value(rest)


def _name_and_value(text: str) -> Optional[Tuple[str, str]]:
    name, sep, value = text.partition("=")
    if sep and name and name[0] in _NAME_START and _NAME_CHARS.issuperset(name):
        return name, value
    return None


def parse_irqbalance_config(text: str, what: str, warnings: List[str]) -> Optional[List[int]]:
    """Banned CPUs from an irqbalance environment file (``IRQBALANCE_BANNED_CPULIST`` wins over the
    older hex ``IRQBALANCE_BANNED_CPUS``); None when neither is set."""
    settings: Dict[str, str] = {}
    for line in text.splitlines():
        assignment = shell_assignment(line)
        if assignment is not None:
            settings[assignment[0]] = _shell_value(assignment[1])
    if settings.get("IRQBALANCE_BANNED_CPULIST"):
        return cpulist_or_none(settings["IRQBALANCE_BANNED_CPULIST"], what + " IRQBALANCE_BANNED_CPULIST", warnings)
    if settings.get("IRQBALANCE_BANNED_CPUS"):
        return cpumask_or_none(settings["IRQBALANCE_BANNED_CPUS"], what + " IRQBALANCE_BANNED_CPUS", warnings)
    return None


def read_irqbalance(root: Root, warnings: List[str]) -> Dict[str, Any]:
    installed = any(root.exists(path) for path in IRQBALANCE_FILES)
    config_file = None
    banned = None
    for path in IRQBALANCE_CONFIGS:
        text = root.read(path)
        if text is not None:
            config_file = path
            banned = parse_irqbalance_config(text, path, warnings)
            break
    return {
        "installed": installed,
        "enabled": root.exists(IRQBALANCE_ENABLED_LINK) if installed else False,
        "config_file": config_file,
        "banned_cpulist": banned,
    }
