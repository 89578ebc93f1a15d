# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The sysctl area: VM writeback limits, NUMA balancing, extra keys; runtime and /etc/sysctl.d.

``vm.dirty_ratio``/``vm.dirty_bytes`` and ``vm.dirty_background_ratio``/``vm.dirty_background_bytes`` are exclusive
pairs: two views of one limit, and the kernel zeroes one when the other is written (mm/page-writeback.c,
``dirty_ratio_handler``/``dirty_bytes_handler``). Setting both forms would make every run rewrite the pair and
verify drift forever, so each pair takes exactly one form: the one given wins, the other is neither written nor
verified, and giving both is refused (including a bytes key through ``nodetune_sysctl_extra``).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

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
# The kernel refuses vm.dirty_bytes below two pages (dirty_bytes_min = 2 * PAGE_SIZE); 4 KiB pages on x86-64.
DIRTY_BYTES_MIN = 2 * 4096
# (ratio variable, bytes variable, ratio key, bytes key) of each exclusive pair
DIRTY_PAIRS = (
    ("nodetune_vm_dirty_ratio", "nodetune_vm_dirty_bytes", "vm.dirty_ratio", "vm.dirty_bytes"),
    ("nodetune_vm_dirty_background_ratio", "nodetune_vm_dirty_background_bytes",
     "vm.dirty_background_ratio", "vm.dirty_background_bytes"),
)


def sysctl_path(key: str) -> str:
    return "proc/sys/" + key.replace(".", "/")


def sysctl_setting(key: str, value: Any, area: str, reason: str, compare: str = WORDS) -> Setting:
    """A runtime sysctl; persisted by the persist area in /etc/sysctl.d (so not restored at boot by us)."""
    return Setting("sysctl." + key, key, sysctl_path(key), value, compare=compare, area=area,
                   persist="sysctl.d", reason=reason, runtime=False)


def _dirty_form(ctx: Context, config: Dict[str, Any], extra: Dict[str, Any], pair: tuple) -> Optional[tuple]:
    """The one form (key, value) an exclusive pair takes, or None to leave it alone; both forms given is an error."""
    ratio_var, bytes_var, ratio_key, bytes_key = pair
    for key in (ratio_key, bytes_key):
        if key in extra:
            ctx.error("nodetune_sysctl_extra['%s'] is not valid: %s and %s are one limit in two forms (writing one "
                      "zeroes the other); set %s or %s instead" % (key, ratio_key, bytes_key, ratio_var, bytes_var))
    low = 1 if ratio_key == "vm.dirty_ratio" else 0
    ratio = want_int(ctx, config, ratio_var, low, 100)
    size = want_int(ctx, config, bytes_var, DIRTY_BYTES_MIN if bytes_key == "vm.dirty_bytes" else 1)
    if ratio is not None and size is not None:
        ctx.error("%s=%d and %s=%d are both set: %s and %s are one limit in two forms (the kernel zeroes one when "
                  "the other is written), so give one and set the other to null"
                  % (ratio_var, ratio, bytes_var, size, ratio_key, bytes_key))
        return None
    if size is not None:
        return bytes_key, size
    if ratio is not None:
        return ratio_key, ratio
    return None


def _dirty_settings(ctx: Context, config: Dict[str, Any], extra: Dict[str, Any]) -> List[Setting]:
    limit = _dirty_form(ctx, config, extra, DIRTY_PAIRS[0])
    background = _dirty_form(ctx, config, extra, DIRTY_PAIRS[1])
    if limit and background and limit[0].endswith("_ratio") == background[0].endswith("_ratio") \
            and background[1] >= limit[1]:
        ctx.error("nodetune_%s=%d must be below nodetune_%s=%d: background writeback has to start before writers "
                  "are throttled" % (background[0].replace(".", "_"), background[1], limit[0].replace(".", "_"),
                                     limit[1]))
    current = ctx.topology.get("sysctl", {})
    settings = []
    for form, what in ((limit, "writers are throttled"), (background, "background writeback starts")):
        if form is None:
            continue
        key, value = form
        other = key.replace("_ratio", "_bytes") if key.endswith("_ratio") else key.replace("_bytes", "_ratio")
        unit = "%" if key.endswith("_ratio") else " bytes"
        reason = "%s at %d%s of dirty memory; %s is left to the kernel (it zeroes it)" % (what, value, unit, other)
        if current.get(other) not in (None, "0"):
            reason += "; the node uses %s=%s now" % (other, current[other])
        settings.append(sysctl_setting(key, value, AREA, reason, INT))
    return settings


def build(ctx: Context, config: Dict[str, Any]) -> List[Setting]:
    unknown_keys(ctx, config, VARIABLES, AREA, hints=areas.hints(AREA))
    extra = config.get("nodetune_sysctl_extra") or {}
    if not isinstance(extra, dict):
        ctx.error("nodetune_sysctl_extra=%s is not valid: expected a mapping of sysctl key to value"
                  % describe(extra))
        extra = {}
    settings = _dirty_settings(ctx, config, extra)
    balancing = want_int(ctx, config, "nodetune_kernel_numa_balancing", 0, 1)
    if balancing is not None:
        settings.append(sysctl_setting("kernel.numa_balancing", balancing, AREA,
                                       "AMD's MI300X guide: automatic NUMA balancing off for pinned ranks", INT))
    exclusive = set(key for pair in DIRTY_PAIRS for key in pair[2:])
    for key in sorted(extra):
        value = extra[key]
        if key in exclusive:
            continue  # refused in _dirty_form
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
