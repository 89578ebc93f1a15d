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

from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import (
    role_variables,
    CPU_DIR,
    Context,
    describe,
    unknown_keys,
    want_list,
    want_str,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import Setting

# The area's declaration: its role (ROLE), variables as an Ansible argument spec, check ids and docs; its
# role's files are generated from it (scripts/gen_role_docs.py) and declarations.py collects every area's.
ROLE = "cpu"
DECLARATION = {
    'kind': 'area',
    'order': 20,
    'steps': ['cpu.governor', 'cpu.epp', 'cpu.idle_state'],
    'builder': 'cpu',
    'setting_area': 'cpu',
    'finding_prefix': 'cpu',
    'check_ids': ['cpu.governor', 'cpu.epp', 'cpu.idle_state'],
    'galaxy_tags': ['cpu', 'cpufreq'],
    'severity': 'medium',
    'short_description': 'cpufreq governor, amd-pstate aware EPP and idle states disabled by name',
    'description': [
        (
            'The governor and EPP are written per online CPU (after the SMT step of the layout), idle states'
            ' through C(cpuN/cpuidle/stateK/disable), chosen by C(stateK/name) because index 2 is not C2 on '
            'every machine. None of these survives a reboot, so nodetune re-applies them at boot with '
            'C(nodetune-restore.service).'
        ),
        (
            'In amd-pstate active mode (driver C(amd-pstate-epp)) the C(performance) governor forces EPP to '
            'C(performance) and the kernel refuses other values (EBUSY): such a request is refused before '
            'any write.'
        ),
        (
            'A node without cpufreq (VM, driver not loaded) or '
            'without cpuidle gets a note, not an error.'
        ),
    ],
    'variables': {
        'nodetune_cpu_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                'Tune this area. When false the area is left exactly as it is.',
            ],
        },
        'nodetune_cpu_governor': {
            'type': 'str',
            'default': 'performance',
            'description': [
                (
                    "cpufreq governor for every online CPU (the articles' C(cpupower frequency-set -g "
                    'performance)).'
                ),
                (
                    "Must be one of the node's C(scaling_available_governors); in amd-pstate active mode "
                    'only C(performance) and C(powersave) exist. C(null) leaves the governor alone.'
                ),
            ],
        },
        'nodetune_cpu_epp': {
            'type': 'str',
            'default': None,
            'description': [
                (
                    'Energy/performance preference (C(energy_performance_preference)) for every online CPU, '
                    "one of the node's C(energy_performance_available_preferences) (typically C(default), "
                    'C(performance), C(balance_performance), C(balance_power), C(power)).'
                ),
                (
                    'Leave C(null) with the C(performance) governor in amd-pstate active mode (EPP is then '
                    'forced to C(performance)); set it with the C(powersave) governor to steer amd-pstate.'
                ),
            ],
        },
        'nodetune_cpu_idle_states_disabled': {
            'type': 'list',
            'elements': 'str',
            'default': ['C2'],
            'description': [
                (
                    'Names of idle states (C(cpuN/cpuidle/stateK/name)) to disable on every online CPU. '
                    "AMD's Instinct guides disable C2 (C(cpupower idle-set -d 2)) for low wake-up latency."
                ),
                (
                    'A name the node does not have is skipped with a warning. C([]) leaves idle states '
                    'alone.'
                ),
            ],
        },
    },
}

AREA = "cpu"
VARIABLES = role_variables(ROLE, DECLARATION)


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
