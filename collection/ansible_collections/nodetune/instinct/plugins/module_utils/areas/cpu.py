# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The CPU area: cpufreq governor, amd-pstate aware EPP, idle states disabled by name.

``cpupower frequency-set -g performance`` and ``cpupower idle-set -d 2`` (the articles' commands) become per-CPU
attribute Settings, restored at boot by nodetune-restore because none of them survives a reboot. In amd-pstate
active mode the ``performance`` governor pins EPP to ``performance`` and any other EPP write fails with EBUSY, so
such a request is refused up front. Idle states are chosen by ``stateN/name``: index 2 is not C2 everywhere.
"""

from __future__ import annotations

from typing import Any, Dict, List

from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import (
    CPU_DIR,
    Context,
    describe,
    unknown_keys,
    want_list,
    want_str,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import Setting

AREA = "cpu"
VARIABLES = areas.area_variables(AREA)


def build(ctx: Context, config: Dict[str, Any]) -> List[Setting]:
    unknown_keys(ctx, config, VARIABLES, AREA)
    cpus = ctx.cpus_after_layout()
    settings = _governor(ctx, config, cpus)
    settings += _epp(ctx, config, cpus)
    settings += _idle(ctx, config, cpus)
    return settings


def _with_cpufreq(ctx: Context, cpus: List[int]) -> List[int]:
    return [c for c in cpus if ctx.root.exists("%s/cpu%d/cpufreq/scaling_governor" % (CPU_DIR, c))]


def _governor(ctx: Context, config: Dict[str, Any], cpus: List[int]) -> List[Setting]:
    governor = want_str(ctx, config, "nodetune_cpu_governor")
    if governor is None:
        return []
    targets = _with_cpufreq(ctx, cpus)
    if not targets:
        ctx.notes.append("cpu: no cpufreq on this node (VM or driver not loaded); governor not applicable")
        return []
    available = (ctx.topology.get("cpufreq") or {}).get("available_governors") or []
    if available and governor not in available:
        driver = (ctx.topology.get("cpufreq") or {}).get("driver")
        ctx.error("nodetune_cpu_governor='%s' is not available with the %s driver on this node (available: %s)"
                  % (governor, driver or "current", ", ".join(available)))
        return []
    return [Setting("cpu.governor", "cpu%d" % c, "%s/cpu%d/cpufreq/scaling_governor" % (CPU_DIR, c), governor,
                    area=AREA, persist="boot_restore",
                    reason="'%s' governor: steady clocks for collective communication" % governor)
            for c in targets]


def _epp(ctx: Context, config: Dict[str, Any], cpus: List[int]) -> List[Setting]:
    epp = want_str(ctx, config, "nodetune_cpu_epp")
    if epp is None:
        return []
    cpufreq = ctx.topology.get("cpufreq") or {}
    governor = config.get("nodetune_cpu_governor")
    status = cpufreq.get("amd_pstate_status")
    if status == "active" and governor == "performance" and epp != "performance":
        ctx.error("nodetune_cpu_epp='%s' cannot be applied with nodetune_cpu_governor='performance': in amd-pstate "
                  "active mode the performance governor forces EPP to 'performance' and the kernel refuses other "
                  "values (EBUSY). Leave nodetune_cpu_epp unset, or use the powersave governor with an EPP hint"
                  % epp)
        return []
    targets = [c for c in cpus
               if ctx.root.exists("%s/cpu%d/cpufreq/energy_performance_preference" % (CPU_DIR, c))]
    if not targets:
        ctx.error("nodetune_cpu_epp='%s' is not applicable: this node exposes no energy_performance_preference "
                  "(it needs amd-pstate or intel_pstate in active mode; cpufreq driver: %s)"
                  % (epp, cpufreq.get("driver")))
        return []
    available = cpufreq.get("available_epp") or []
    if available and epp not in available:
        ctx.error("nodetune_cpu_epp='%s' is not valid on this node (available: %s)" % (epp, ", ".join(available)))
        return []
    return [Setting("cpu.epp", "cpu%d" % c, "%s/cpu%d/cpufreq/energy_performance_preference" % (CPU_DIR, c), epp,
                    area=AREA, persist="boot_restore", reason="energy/performance hint '%s'" % epp)
            for c in targets]


def _idle(ctx: Context, config: Dict[str, Any], cpus: List[int]) -> List[Setting]:
    names = want_list(ctx, config, "nodetune_cpu_idle_states_disabled")
    if not names:
        return []
    for name in names:
        if not isinstance(name, str) or not name:
            ctx.error("nodetune_cpu_idle_states_disabled contains %s: expected idle state names such as 'C2'"
                      % describe(name))
            return []
    states = (ctx.topology.get("cpuidle") or {}).get("states") or []
    if not states:
        ctx.notes.append("cpu: no cpuidle states on this node; nodetune_cpu_idle_states_disabled not applicable")
        return []
    by_name = dict((s.get("name"), s) for s in states)
    settings = []
    for name in names:
        state = by_name.get(name)
        if state is None:
            ctx.warn("nodetune_cpu_idle_states_disabled: no idle state named '%s' on this node (states: %s); "
                     "skipped" % (name, ", ".join(str(s.get("name")) for s in states)))
            continue
        have = set(state.get("cpus_with_state") or cpus)
        index = state["index"]
        settings.extend(
            Setting("cpu.idle_state", "cpu%d/%s" % (c, name), "%s/cpu%d/cpuidle/state%d/disable" % (CPU_DIR, c, index),
                    "1", area=AREA, persist="boot_restore",
                    reason="AMD's guide: disable %s (cpupower idle-set -d %d) for low wake-up latency" % (name, index))
            for c in cpus if c in have)
    return settings
