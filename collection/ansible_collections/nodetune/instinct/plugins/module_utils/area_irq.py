# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The IRQ affinity area: irqbalance out of the way, NIC completion vectors pinned per the Layout.

irqbalance rewrites hand-set affinities at its next rebalance, so pinning needs it either stopped and disabled
or told to keep off the pinned CPUs (``IRQBALANCE_BANNED_CPULIST`` in /etc/default/irqbalance on Debian,
/etc/sysconfig/irqbalance on RHEL). Kernel-managed IRQs (NVMe queues) are never written: the Layout lists them
for verify only.
"""

from __future__ import annotations

from typing import Any, Dict, List

from ansible_collections.nodetune.instinct.plugins.module_utils import areas
from ansible_collections.nodetune.instinct.plugins.module_utils.area_common import (
    Context,
    unknown_keys,
    want_bool,
    want_str,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import format_cpulist
from ansible_collections.nodetune.instinct.plugins.module_utils.setting import CPULIST, LINE, SERVICE, Setting

AREA = "irq"
ROLE = "irq_affinity"
MODES = ("disable", "ban", "leave")
VARIABLES = areas.area_variables(ROLE)
UNIT = "irqbalance.service"
CONFIG_BY_FAMILY = {"Debian": "etc/default/irqbalance", "RedHat": "etc/sysconfig/irqbalance",
                    "Suse": "etc/sysconfig/irqbalance"}


def irqbalance_config_file(ctx: Context, family: str) -> str:
    found = (ctx.topology.get("irqbalance") or {}).get("config_file")
    if found:
        return found.lstrip("/")
    return CONFIG_BY_FAMILY.get(family, "etc/default/irqbalance")


def _irqbalance_running_or_enabled(ctx: Context) -> bool:
    """True unless the node says irqbalance is both stopped and disabled (unknown counts as running)."""
    if ctx.services is not None:
        state = ctx.services.state(UNIT)
        return state.get("active") != "no" or state.get("enabled") != "no"
    info = ctx.topology.get("irqbalance") or {}
    return info.get("enabled") is not False or info.get("running") is not False


def build(ctx: Context, config: Dict[str, Any]) -> List[Setting]:
    # The role (and its enable toggle, nodetune_irq_affinity_enabled) is named irq_affinity; the check ids are irq.*
    unknown_keys(ctx, config, VARIABLES, ROLE)
    mode = want_str(ctx, config, "nodetune_irqbalance_mode", MODES) or "disable"
    pin = want_bool(ctx, config, "nodetune_irq_pin_nic", True)
    family = want_str(ctx, config, "nodetune_os_family", sorted(CONFIG_BY_FAMILY)) or "Debian"
    settings: List[Setting] = []
    installed = bool((ctx.topology.get("irqbalance") or {}).get("installed"))
    if ctx.services is not None and not installed:
        installed = ctx.services.installed(UNIT)
    if mode == "disable" and installed:
        allowed = want_bool(ctx, config, "nodetune_irqbalance_stop_allowed", False)
        if not allowed and _irqbalance_running_or_enabled(ctx):
            # Stopping a service is disruptive, so it is opt-in (DESIGN.md); pinning without it would not hold.
            message = ("irq: irqbalance is running or enabled and nodetune_irqbalance_stop_allowed is false: "
                       "NIC IRQs are not pinned (irqbalance would move them at its next rebalance). Set "
                       "nodetune_irqbalance_stop_allowed: true to stop and disable it, "
                       "or nodetune_irqbalance_mode: ban")
            ctx.warn(message)
            ctx.notes.append(message)
            return []
        settings.append(Setting("irq.irqbalance", UNIT, "", "active=no,enabled=no", kind=SERVICE, area=AREA,
                                disruptive=True,
                                reason="irqbalance would overwrite the pinned affinities at its next rebalance"))
    elif mode == "ban" and installed:
        banned = (ctx.layout.get("irqbalance") or {}).get("banned_cpulist")
        cpus = banned if isinstance(banned, list) else None
        text = format_cpulist(cpus) if cpus is not None else (banned or "")
        if text:
            config_file = irqbalance_config_file(ctx, family)
            settings.append(Setting("irq.irqbalance", "IRQBALANCE_BANNED_CPULIST", config_file,
                                    text, kind=LINE, key="IRQBALANCE_BANNED_CPULIST", area=AREA, runtime=False,
                                    reason="keep irqbalance off the CPUs that take pinned NIC IRQs"))
            # Banned CPUs alone would make irqbalance move the pinned IRQs away from them: --banirq tells it to
            # leave those IRQs alone. IRQ numbers can change across reboots; apply recomputes and verify checks.
            irqs = sorted(int(e["irq"]) for e in ctx.layout.get("irq_affinity") or [])
            if pin and irqs:
                settings.append(Setting("irq.irqbalance", "IRQBALANCE_ARGS", config_file,
                                        " ".join("--banirq=%d" % n for n in irqs), kind=LINE, key="IRQBALANCE_ARGS",
                                        area=AREA, runtime=False,
                                        reason="irqbalance leaves the pinned NIC IRQs where nodetune put them"))
    elif not installed:
        ctx.notes.append("irq: irqbalance is not installed on this node; nothing to stop")
    if pin:
        for entry in ctx.layout.get("irq_affinity") or []:
            irq = int(entry["irq"])
            path = "proc/irq/%d/smp_affinity_list" % irq
            if not ctx.root.exists(path):
                ctx.warn("irq %d (%s) has no %s; skipped" % (irq, entry.get("device"), "/" + path))
                continue
            # key = the IRQ's action name (mlx5_comp3@pci:...): IRQ numbers change across reboots, names do not,
            # so the boot-time restore finds the IRQ again by name.
            settings.append(Setting("irq.nic_local", "irq %d" % irq, path, format_cpulist(entry["cpus"]),
                                    key=entry.get("name") or None,
                                    compare=CPULIST, area=AREA, persist="boot_restore",
                                    reason=entry.get("reason") or "NIC completion vector on a local core"))
    return settings
