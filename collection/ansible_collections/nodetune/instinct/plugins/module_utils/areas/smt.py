# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The SMT area: offline the secondary threads the Layout chose, or ``smt/control=off``.

Offlining CPUs is disruptive, so it is opt-in: ``nodetune_smt_offline_allowed`` must be true. The CPUs come from
the Layout (lowest thread of each core kept, never CPU0), not from the article's fixed ``{8..15}``.
"""

from __future__ import annotations

from typing import Any, Dict, List

from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import (
    choices,
    role_variables,
    CPU_DIR,
    Context,
    unknown_keys,
    want_bool,
    want_str,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import SMT_MODES
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import Setting

# The area's declaration: its role (ROLE), variables as an Ansible argument spec, check ids and docs; its
# role's files are generated from it (scripts/gen_role_docs.py) and declarations.py collects every area's.
ROLE = "smt"
DECLARATION = {
    'kind': 'area',
    'order': 10,
    'builder': 'smt',
    'setting_area': 'smt',
    'finding_prefix': 'smt',
    'check_ids': ['smt.control', 'smt.siblings_offline'],
    'galaxy_tags': ['cpu', 'smt'],
    'severity': 'high',
    'short_description': 'SMT siblings offlined per the planned layout, or smt/control=off (opt-in)',
    'description': [
        (
            "AMD's guides run Instinct training nodes with SMT off (best done in the BIOS). From Linux, "
            'nodetune either offlines the secondary thread of every core that the layout planner chose (the '
            'lowest-numbered thread of each C(thread_siblings_list) stays online, so CPU0 is never '
            'offlined), or writes C(off) to C(/sys/devices/system/cpu/smt/control), which offlines all '
            'secondary threads at once.'
        ),
        (
            "The articles' C(for i in {8..15}) loop is wrong on almost every machine: sibling numbering is "
            'C(N) and C(N+cores) on most EPYC servers. nodetune never uses a fixed range.'
        ),
        (
            'Offlining CPUs is disruptive (processes and IRQs on them move), so it needs '
            'C(nodetune_smt_offline_allowed=true). The default policy C(keep) changes nothing.'
        ),
        (
            'Offlined CPUs are brought back online at boot by the kernel; C(nodetune-restore.service) '
            're-applies them.'
        ),
    ],
    'variables': {
        'nodetune_smt_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                'Tune this area. When false the area is left exactly as it is.',
            ],
        },
        'nodetune_smt_policy': {
            'type': 'str',
            'default': 'keep',
            'choices': list(SMT_MODES),  # the layout planner's (plan/layout.py)
            'description': [
                (
                    'C(keep) leaves SMT as it is. C(offline_siblings) offlines the secondary threads the '
                    'layout planner chose (through C(cpuN/online)). C(control_off) writes C(off) to '
                    'C(smt/control).'
                ),
                (
                    'The layout planner reads the same variable, so NIC IRQs and GPU ranks are placed on the'
                    ' threads that stay online.'
                ),
            ],
        },
        'nodetune_smt_offline_allowed': {
            'type': 'bool',
            'default': False,
            'description': [
                (
                    'Opt-in for the disruptive part. Without it, a policy that would take CPUs offline is '
                    'refused before any write, with a message saying how many CPUs it would offline.'
                ),
            ],
        },
    },
}

AREA = "smt"
POLICIES = choices(DECLARATION, "nodetune_smt_policy")
VARIABLES = role_variables(ROLE, DECLARATION)


def build(ctx: Context, config: Dict[str, Any]) -> List[Setting]:
    unknown_keys(ctx, config, VARIABLES, AREA)
    policy = want_str(ctx, config, "nodetune_smt_policy", POLICIES) or "keep"
    allowed = want_bool(ctx, config, "nodetune_smt_offline_allowed", False)
    if policy == "keep":
        return []
    control = (ctx.topology.get("smt") or {}).get("control")
    if policy == "control_off":
        if control in ("notsupported", "notimplemented", None):
            ctx.notes.append("smt: SMT control is %s on this node; nothing to switch off" % control)
            return []
        if control == "forceoff":
            return []
        if not allowed and control != "off":
            ctx.error("nodetune_smt_policy='control_off' switches SMT off (all %d secondary threads go offline): set "
                      "nodetune_smt_offline_allowed: true to allow this disruptive change"
                      % len(ctx.secondary_threads()))
            return []
        return [Setting("smt.control", "smt", CPU_DIR + "/smt/control", "off", area=AREA, persist="boot_restore",
                        disruptive=True, reason="SMT off: one thread per core, as AMD's guides advise")]
    offline = list(ctx.layout.get("smt_offline") or [])
    if 0 in offline:
        ctx.error("the layout asks to offline CPU0, which Linux cannot offline; this is a planner bug, nothing written")
        return []
    if offline and not allowed:
        ctx.error("nodetune_smt_policy='offline_siblings' offlines %d CPUs: set nodetune_smt_offline_allowed: true to "
                  "allow this disruptive change" % len(offline))
        return []
    pinned = set()
    for entry in ctx.layout.get("irq_affinity") or []:
        pinned.update(entry.get("cpus") or [])
    clash = sorted(pinned & set(offline))
    if clash:
        ctx.error("the layout offlines CPUs that take pinned IRQs (%s); nothing written" % clash)
        return []
    settings = []
    for cpu in offline:
        path = "%s/cpu%d/online" % (CPU_DIR, cpu)
        if not ctx.root.exists(path):
            ctx.error("cpu%d cannot be offlined: %s does not exist (not hotpluggable)" % (cpu, "/" + path))
            continue
        settings.append(Setting("smt.siblings_offline", "cpu%d" % cpu, path, "0", area=AREA, persist="boot_restore",
                                disruptive=True, reason="secondary SMT thread of its core: offline"))
    return settings
