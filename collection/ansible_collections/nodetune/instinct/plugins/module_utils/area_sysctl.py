# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The sysctl area: VM writeback ratios, NUMA balancing, extra keys; runtime and /etc/sysctl.d.

``vm.dirty_ratio`` and ``vm.dirty_bytes`` are two views of one limit: writing either zeroes the other, so
nodetune sets (and verifies) the ratio form only and says so when a node currently uses the bytes form.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List

from ansible_collections.nodetune.instinct.plugins.module_utils import areas
from ansible_collections.nodetune.instinct.plugins.module_utils.area_common import (
    Context,
    describe,
    unknown_keys,
    want_int,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.setting import INT, WORDS, Setting

AREA = "sysctl"
VARIABLES = areas.area_variables(AREA)
_KEY = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_\-]+)+$")


def sysctl_path(key: str) -> str:
    return "proc/sys/" + key.replace(".", "/")


def sysctl_setting(key: str, value: Any, area: str, reason: str, compare: str = WORDS) -> Setting:
    """A runtime sysctl; persisted by the persist area in /etc/sysctl.d (so not restored at boot by us)."""
    return Setting("sysctl." + key, key, sysctl_path(key), value, compare=compare, area=area,
                   persist="sysctl.d", reason=reason, runtime=False)


def build(ctx: Context, config: Dict[str, Any]) -> List[Setting]:
    unknown_keys(ctx, config, VARIABLES, AREA, hints=areas.hints(AREA))
    settings: List[Setting] = []
    ratio = want_int(ctx, config, "nodetune_vm_dirty_ratio", 1, 100)
    background = want_int(ctx, config, "nodetune_vm_dirty_background_ratio", 0, 100)
    if ratio is not None and background is not None and background >= ratio:
        ctx.error("nodetune_vm_dirty_background_ratio=%d must be below nodetune_vm_dirty_ratio=%d: background "
                  "writeback has to start before writers are throttled" % (background, ratio))
    current = ctx.topology.get("sysctl", {})
    if ratio is not None:
        reason = "seed 2: dirty_ratio %d balances page cache and checkpoint bursts" % ratio
        if current.get("vm.dirty_bytes") not in (None, "0"):
            reason += "; the node uses vm.dirty_bytes=%s now, which the kernel zeroes when the ratio is written" \
                      % current["vm.dirty_bytes"]
        settings.append(sysctl_setting("vm.dirty_ratio", ratio, AREA, reason, INT))
    if background is not None:
        settings.append(sysctl_setting("vm.dirty_background_ratio", background, AREA,
                                       "start background writeback at %d%% of memory" % background, INT))
    balancing = want_int(ctx, config, "nodetune_kernel_numa_balancing", 0, 1)
    if balancing is not None:
        settings.append(sysctl_setting("kernel.numa_balancing", balancing, AREA,
                                       "AMD's MI300X guide: automatic NUMA balancing off for pinned ranks", INT))
    extra = config.get("nodetune_sysctl_extra") or {}
    if not isinstance(extra, dict):
        ctx.error("nodetune_sysctl_extra=%s is not valid: expected a mapping of sysctl key to value"
                  % describe(extra))
        extra = {}
    for key in sorted(extra):
        value = extra[key]
        if not isinstance(key, str) or not _KEY.match(key):
            ctx.error("nodetune_sysctl_extra key %s is not a sysctl name like 'vm.swappiness'" % describe(key))
            continue
        if isinstance(value, (dict, list)) or value is None or "\n" in str(value):
            ctx.error("nodetune_sysctl_extra['%s']=%s is not valid: expected a single-line value"
                      % (key, describe(value)))
            continue
        if not ctx.root.exists(sysctl_path(key)):
            ctx.error("nodetune_sysctl_extra['%s']: /%s does not exist on this node (unknown sysctl or module "
                      "not loaded)" % (key, sysctl_path(key)))
            continue
        settings.append(sysctl_setting(key, value, AREA, "nodetune_sysctl_extra"))
    return settings
