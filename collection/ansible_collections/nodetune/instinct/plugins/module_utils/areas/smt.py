# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The SMT area: offline the secondary threads the Layout chose, or ``smt/control=off``.

Offlining CPUs is disruptive, so it is opt-in: ``nodetune_smt_offline_allowed`` must be true. The CPUs come from
the Layout (lowest thread of each core kept, never CPU0), not from the article's fixed ``{8..15}``.
"""

from __future__ import annotations

from typing import Any, Dict, List

from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import (
    CPU_DIR,
    Context,
    unknown_keys,
    want_bool,
    want_str,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import Setting

AREA = "smt"
POLICIES = ("keep", "offline_siblings", "control_off")
VARIABLES = areas.area_variables(AREA)


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
