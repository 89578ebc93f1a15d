# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The sysctl area: VM writeback limits, NUMA balancing, extra keys; runtime and /etc/sysctl.d.

``vm.dirty_ratio``/``vm.dirty_bytes`` and ``vm.dirty_background_ratio``/``vm.dirty_background_bytes`` are exclusive
pairs: two views of one limit, and the kernel zeroes one when the other is written (mm/page-writeback.c,
``dirty_ratio_handler``/``dirty_bytes_handler``). Setting both forms would make every run rewrite the pair and
verify drift forever, so each pair takes exactly one form: the one given wins, the other is neither written nor
verified, and giving both is refused (including a bytes key through ``nodetune_sysctl_extra``). At boot a pair is
one key as well: sysctl_boot.py replays both forms through the same handlers, so a site file that sets the other
form after nodetune's is reported (``persist.sysctl_boot``). Where a site's sysctl.d file read after nodetune's sets
the other form, nodetune cannot win the pair at boot and leaves it alone (:func:`_site_form`): setting its own form
would zero the site's at each apply and lose it again at each boot.

A write of one form changes the other, so the engine journals both forms with either and revert puts the pair back
with one write (sysctl_boot.py: KERNEL_PAIRS, pair_restore): writing the other form's 0 back is EINVAL for a bytes
form, and would not bring the form in use back anyway.

Some sysctls are stored otherwise than written (:data:`KERNEL_STORES`): nodetune asks for the stored value, so that
a run does not rewrite it and verify does not drift on every run; for any other sysctl the kernel answered so, the
value it kept is adopted from the journal (:func:`kept_by_kernel`), as for the IPoIB MTU. Caps (:data:`CEILINGS`,
the max field of tcp_rmem/tcp_wmem) are "at least": a node whose own cap is higher keeps it.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional

from ansible_collections.nodetune.instinct.plugins.module_utils.plan import sysctl_boot
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.sysctl_boot import (
    DIRTY_BYTES_MIN,
    DIRTY_PAIRS,
    sysctl_path,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import persist as area_persist
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import (
    role_variables,
    Context,
    describe,
    unknown_keys,
    want_int,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import (
    ATTR,
    FILE,
    INT,
    WORDS,
    Setting,
    desired,
    read_current,
)

# The area's declaration: its role (ROLE), variables as an Ansible argument spec, check ids and docs; its
# role's files are generated from it (scripts/gen_role_docs.py) and declarations.py collects every area's.
ROLE = "sysctl"
DECLARATION = {
    'kind': 'area',
    'order': 60,
    'builder': 'sysctl',
    'setting_area': 'sysctl',
    'finding_prefix': 'sysctl',
    # one id per key: sysctl.<key> (vm.dirty_ratio, nodetune_sysctl_extra's keys)
    'check_ids': [],
    'check_id_pattern': (r'^sysctl\.[a-z0-9_]+(\.[a-z0-9_\-]+)+$', 'sysctl.<key> such as sysctl.vm.dirty_ratio'),
    'galaxy_tags': ['sysctl', 'kernel'],
    'severity': 'low',
    'short_description': (
        'VM writeback ratios, NUMA balancing and extra '
        'sysctls, at runtime and in sysctl.d'
    ),
    'description': [
        (
            'Each value is written under C(/proc/sys) and persisted in C(/etc/sysctl.d/), which '
            'systemd-sysctl applies at boot.'
        ),
        (
            'C(vm.dirty_ratio) and C(vm.dirty_bytes) are two views of one limit (the kernel zeroes one when '
            'the other is written), likewise the background pair. Each pair takes one form: the one given is '
            'written and verified, the other is neither, and giving both (or either key through '
            'C(nodetune_sysctl_extra)) is refused. To use the bytes form, set the ratio variable to C(null). '
            'The background limit must stay below the limit.'
        ),
        (
            "The ratio defaults 20/10 are the kernel's own defaults. On large-memory nodes (1-2 TiB) they "
            'allow hundreds of GiB of dirty page cache before writeback starts; docs/tuning.md ("Writeback '
            'limits") gives a bytes-based setting for such nodes and where it comes from.'
        ),
    ],
    'variables': {
        'nodetune_sysctl_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                'Tune this area. When false the area is left exactly as it is.',
            ],
        },
        'nodetune_vm_dirty_ratio': {
            'type': 'int',
            'default': 20,
            'description': [
                (
                    'C(vm.dirty_ratio), percent of memory (1-100) that may be dirty before writers are '
                    "throttled (20 is the kernel's own default). Exclusive with C(nodetune_vm_dirty_bytes). "
                    'C(null) leaves it alone. Where a site sysctl.d file read after nodetune\'s sets '
                    'C(vm.dirty_bytes), nodetune leaves the pair alone and warns (that file would win at boot).'
                ),
            ],
        },
        'nodetune_vm_dirty_background_ratio': {
            'type': 'int',
            'default': 10,
            'description': [
                (
                    'C(vm.dirty_background_ratio) (0-100), where background writeback starts (10 is the '
                    "kernel's own default); must be below C(nodetune_vm_dirty_ratio). C(null) leaves it alone."
                ),
            ],
        },
        'nodetune_vm_dirty_bytes': {
            'type': 'int',
            'default': None,
            'description': [
                (
                    "C(vm.dirty_bytes), dirty memory in bytes (at least 8192, the kernel's two-page minimum) at "
                    'which writers are throttled. Exclusive with C(nodetune_vm_dirty_ratio), which must then be '
                    'C(null). For a 1-2 TiB training node, e.g. C(34359738368) (32 GiB), see docs/tuning.md. '
                    'C(null) (the default) uses the ratio.'
                ),
            ],
        },
        'nodetune_vm_dirty_background_bytes': {
            'type': 'int',
            'default': None,
            'description': [
                (
                    'C(vm.dirty_background_bytes), dirty memory in bytes at which background writeback starts; '
                    'below C(nodetune_vm_dirty_bytes). Exclusive with C(nodetune_vm_dirty_background_ratio), '
                    'which must then be C(null). E.g. C(4294967296) (4 GiB) on a 1-2 TiB node. C(null) (the '
                    'default) uses the ratio.'
                ),
            ],
        },
        'nodetune_kernel_numa_balancing': {
            'type': 'int',
            'default': 0,
            'description': [
                (
                    "C(kernel.numa_balancing), 0 or 1. AMD's MI300X guide turns automatic NUMA balancing off"
                    ' (0) for pinned ranks. C(null) leaves it alone.'
                ),
            ],
        },
        'nodetune_sysctl_extra': {
            'type': 'dict',
            'default': {},
            'description': [
                (
                    'More sysctls, key to value, for example C({"net.ipv4.tcp_rmem": "4096 87380 '
                    '16777216"}). Each key must exist under C(/proc/sys) on the node; values are single '
                    'lines.'
                ),
                (
                    'Where the kernel stores another value than written (C(fs.pipe-max-size) rounds up to a power '
                    'of two pages, C(kernel.sched_rr_timeslice_ms) 0 means 100) nodetune sets, and verifies, '
                    'the stored value and says so. Caps (C(*mem_max), C(somaxconn), C(fs.file-max), the max '
                    'field of C(tcp_rmem)/C(tcp_wmem) ...) are at least the node\'s own: never lowered.'
                ),
            ],
        },
    },
}

AREA = "sysctl"
VARIABLES = role_variables(ROLE, DECLARATION)
_KEY = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_\-]+)+$")


PAGE_SIZE = 4096  # x86-64


def _pipe_max_size(number: int) -> Optional[int]:
    """fs/pipe.c, round_pipe_size(): less than a page becomes a page, anything else the next power of two (above
    2^31 the write fails with EINVAL: left to fail). Kernel 6.18 showed 1000000 -> 1048576, 4097 -> 8192, 0 -> 4096."""
    if number > 2 ** 31:
        return None
    if number < PAGE_SIZE:
        return PAGE_SIZE
    return 1 << (number - 1).bit_length()


def _rr_timeslice_ms(number: int) -> Optional[int]:
    """kernel/sched/rt.c, sched_rr_handler(): 0 or less resets to the default RR_TIMESLICE (100 ms whatever HZ,
    include/linux/sched/rt.h), shown in ms. Kernel 6.18 showed 0 -> 100 and -1 -> 100; 1, 3, 250 stay."""
    return 100 if number <= 0 else None


# Sysctls whose handler stores another value than the one written: key -> the stored value, None where as written
KERNEL_STORES: Dict[str, Callable[[int], Optional[int]]] = {
    "fs.pipe-max-size": _pipe_max_size,
    "kernel.sched_rr_timeslice_ms": _rr_timeslice_ms,
}
# Caps that only bound what programs may ask for: raising one never hurts what nodetune tunes for, lowering one can
# break a workload that relies on the node's larger cap, so the desired value is max(the node's own, wanted).
CEILINGS = (
    "net.core.rmem_max", "net.core.wmem_max", "net.core.optmem_max", "net.core.somaxconn",
    "net.core.netdev_max_backlog", "fs.pipe-max-size", "fs.file-max", "fs.nr_open", "fs.aio-max-nr",
    "vm.max_map_count", "fs.inotify.max_user_watches", "fs.inotify.max_user_instances",
)
# "min default max" sysctls: the index of the cap among their fields (TCP autotuning's limit)
CEILING_FIELDS = {"net.ipv4.tcp_rmem": 2, "net.ipv4.tcp_wmem": 2}


def kernel_stored(key: str, value: Any) -> Optional[str]:
    """The value the kernel keeps when ``value`` is written to ``key``, where it differs; else None."""
    normaliser = KERNEL_STORES.get(key)
    text = str(value).strip()
    if normaliser is None or not text.lstrip("-").isdigit():
        return None
    stored = normaliser(int(text))
    return None if stored is None or str(stored) == text else str(stored)


def _own_value(ctx: Context, key: str) -> Optional[str]:
    """The node's own value of a sysctl: the one it had before nodetune first wrote it (the journal's baseline),
    else the current one; so an earlier, larger wanted value of nodetune's is never taken for the node's own."""
    snap = (ctx.journal().get("baseline") or {}).get(sysctl_path(key))
    if isinstance(snap, dict) and snap.get("kind") == ATTR and snap.get("restore") is not None:
        return str(snap["restore"])
    return ctx.root.read(sysctl_path(key))


def at_least(ctx: Context, key: str, value: Any, area: str = AREA) -> Any:
    """``value`` for a cap sysctl, raised to the node's own cap where that is larger (the cap field only, for
    tcp_rmem/tcp_wmem); a note says so. Other keys and values that are not numbers: ``value`` unchanged."""
    index = 0 if key in CEILINGS else CEILING_FIELDS.get(key)
    if index is None:
        return value
    wanted, own = str(value).split(), (_own_value(ctx, key) or "").split()
    if len(wanted) != len(own) or len(wanted) <= index or not (wanted[index] + own[index]).isdigit() \
            or int(own[index]) <= int(wanted[index]):
        return value
    ctx.notes.append("%s: the node's own %s %s is above the wanted %s: kept (nodetune raises caps, never lowers them)"
                     % (area, key, " ".join(own), " ".join(wanted)))
    fields = list(wanted)
    fields[index] = own[index]
    return int(fields[0]) if isinstance(value, int) else " ".join(fields)


def kept_by_kernel(ctx: Context, settings: List[Setting]) -> None:
    """Ask for the value the kernel kept where nodetune's last write of a sysctl read back otherwise and the node
    still holds it (the journal's ``effective`` records, as area_infiniband does for the IPoIB MTU): a kernel
    normalisation missing from KERNEL_STORES then settles instead of being rewritten on every run."""
    records = ctx.effective_records() if any(s.id.startswith("sysctl.") for s in settings) else {}
    for setting in settings:
        record = records.get(setting.uid)
        if not isinstance(record, dict) or record.get("requested") != desired(setting):
            continue
        kept = record.get("effective")
        if kept is None or read_current(ctx.root, setting) != kept:
            continue
        ctx.warn("%s: the kernel stored %s=%s as %s when nodetune wrote it; nodetune now sets and verifies %s"
                 % (setting.area, setting.target, record["requested"], kept, kept))
        setting.value = kept
        setting.reason += "; the kernel stores %s as %s" % (record["requested"], kept)


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
    size = want_int(ctx, config, bytes_var, DIRTY_BYTES_MIN if bytes_key == "vm.dirty_bytes" else 1,
                    SYSCTL_INT_MAX)  # an unsigned long (proc_doulongvec_minmax)
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


def _site_form(ctx: Context, key: str, value: int) -> Optional[Dict[str, Any]]:
    """The boot model's entry (sysctl_boot.boot_checks) where a site's sysctl.d file decides ``key``'s pair at boot
    by setting the other form after nodetune's file; None where nodetune's ``key=value`` would hold at boot."""
    ours = area_persist.SYSCTL_FILE % AREA
    planned = [sysctl_setting(key, value, AREA, ""),
               Setting("persist.sysctl_d", AREA, ours, "%s = %d\n" % (key, value), kind=FILE, compare="content")]
    for entry in sysctl_boot.boot_checks(ctx.root, planned):
        if entry["file"] and not entry["nodetune"] and entry["set_key"] not in (None, key):
            return entry
    return None


def _yield_to_site(ctx: Context, pair: tuple, key: str, value: int, entry: Dict[str, Any]) -> None:
    ratio_var, bytes_var, ratio_key, bytes_key = pair
    mine, theirs = (bytes_var, ratio_var) if key == ratio_key else (ratio_var, bytes_var)
    ctx.warn("sysctl: %s%s sets %s=%s and systemd-sysctl writes it after nodetune's file at boot, which zeroes %s "
             "(one limit in two forms, mm/page-writeback.c): nodetune leaves %s/%s as the node has them instead of "
             "setting %s=%d, which each boot would undo; to manage this limit with nodetune set %s (and %s: null), "
             "or remove that line from %s"
             % (entry["file"], entry["via"], entry["set_key"], entry["set_value"], key, ratio_key, bytes_key, key,
                value, mine, theirs, entry["file"]))


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
    for form, what, pair in ((limit, "writers are throttled", DIRTY_PAIRS[0]),
                             (background, "background writeback starts", DIRTY_PAIRS[1])):
        if form is None:
            continue
        key, value = form
        site = _site_form(ctx, key, value)
        if site is not None:
            # the site's form wins at every boot: setting ours would flip the pair at each apply and each boot
            _yield_to_site(ctx, pair, key, value, site)
            continue
        other = key.replace("_ratio", "_bytes") if key.endswith("_ratio") else key.replace("_bytes", "_ratio")
        unit = "%" if key.endswith("_ratio") else " bytes"
        reason = "%s at %d%s of dirty memory; %s is left to the kernel (it zeroes it)" % (what, value, unit, other)
        if current.get(other) not in (None, "0"):
            reason += "; the node uses %s=%s now" % (other, current[other])
        settings.append(sysctl_setting(key, value, AREA, reason, INT))
    return settings


# The widest sysctl number the kernel holds is 64 bits (proc_doulongvec_minmax, proc_dou64vec_minmax); text sysctls
# hold short strings (their ctl_table maxlen, a page at most): anything longer is no sysctl's value.
SYSCTL_INT_MIN = -(1 << 63)
SYSCTL_INT_MAX = (1 << 64) - 1
SYSCTL_TEXT_MAX = 4095


def _value_problem(value: Any) -> Optional[str]:
    """Why a nodetune_sysctl_extra value cannot be what the kernel holds (None when it can)."""
    if isinstance(value, bool):
        return "a boolean: write the number the sysctl takes (0 or 1)"
    if isinstance(value, int):
        if not SYSCTL_INT_MIN <= value <= SYSCTL_INT_MAX:
            return "out of range: no sysctl holds more than 64 bits (%d to %d)" % (SYSCTL_INT_MIN, SYSCTL_INT_MAX)
        return None
    if not isinstance(value, str):
        return "expected an integer or a single line of text (like '4096 87380 6291456' or 'bbr')"
    if not value.strip():
        return "empty: give the value to set (or leave the key out to keep the node's)"
    bad = [c for c in value if ord(c) < 32 and c != "\t" or 127 <= ord(c) < 160 or c in "\u2028\u2029"]
    if bad:
        return "it holds the control character %r: one line of printable text is written to /etc/sysctl.d" % bad[0]
    if len(value.encode("utf-8")) > SYSCTL_TEXT_MAX:
        return "longer than any sysctl holds (%d bytes at most)" % SYSCTL_TEXT_MAX
    return None


def build(ctx: Context, config: Dict[str, Any]) -> List[Setting]:
    unknown_keys(ctx, config, VARIABLES, AREA, hints=DECLARATION.get("hints", {}))
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
        problem = _value_problem(value)
        if problem:
            ctx.error("nodetune_sysctl_extra['%s']=%s is not valid: %s" % (key, describe(value), problem))
            continue
        if not ctx.root.exists(sysctl_path(key)):
            ctx.error("nodetune_sysctl_extra['%s']: /%s does not exist on this node (unknown sysctl or module "
                      "not loaded)" % (key, sysctl_path(key)))
            continue
        reason = "nodetune_sysctl_extra"
        stored = kernel_stored(key, value)
        if stored is not None:
            ctx.warn("nodetune_sysctl_extra['%s']=%s: the kernel stores it as %s, so nodetune sets and verifies %s"
                     % (key, value, stored, stored))
            reason += "; %s as the kernel stores it" % stored
            value = stored
        settings.append(sysctl_setting(key, at_least(ctx, key, value), AREA, reason))
    kept_by_kernel(ctx, settings)
    return settings
