# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The IRQ affinity area: irqbalance out of the way, NIC completion and GPU vectors pinned per the Layout.

irqbalance rewrites hand-set affinities at its next rebalance, so pinning needs it either stopped and disabled
or told to keep off the pinned CPUs (``IRQBALANCE_BANNED_CPULIST`` in /etc/default/irqbalance on Debian,
/etc/sysconfig/irqbalance on RHEL) and away from the pinned IRQs, named by action through its --policyscript
(irqbalance_ban). Kernel-managed IRQs (NVMe queues) are never written: the Layout lists them
for verify only.
"""

from __future__ import annotations

from typing import Any, Dict, List

from ansible_collections.nodetune.instinct.plugins.module_utils.areas import persist as area_persist
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import (
    choices,
    role_variables,
    Context,
    unknown_keys,
    want_bool,
    want_str,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import ParseError, format_cpulist, parse_cpulist
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import (
    CPULIST,
    FILE,
    LINE,
    SERVICE,
    Setting,
)

# The area's declaration: its role (ROLE), variables as an Ansible argument spec, check ids and docs; its
# role's files are generated from it (scripts/gen_role_docs.py) and declarations.py collects every area's.
ROLE = "irq_affinity"
DECLARATION = {
    'kind': 'area',
    'order': 40,
    'steps': ['irq.irqbalance', 'irq.nic_local', 'irq.gpu_local'],
    'builder': 'irq',
    'setting_area': 'irq',
    'finding_prefix': 'irq',
    'check_ids': ['irq.irqbalance', 'irq.nic_local', 'irq.gpu_local', 'irq.managed'],
    'galaxy_tags': ['irq', 'networking'],
    'severity': 'high',
    'short_description': 'irqbalance out of the way; NIC completion and GPU IRQs pinned to local cores',
    'description': [
        (
            'The layout planner puts each NIC completion vector (C(mlx5_comp*)) on one physical core of the '
            "NIC's own NUMA node, primary SMT thread only, skipping the async vector and the housekeeping "
            'cores. B(By default the vectors spread round-robin over every other core of the node, the GPU '
            'rank cores included) (layout policy C(irq_cores: 0)), as mlnx-tools\' '
            "C(set_irq_affinity_bynode.sh) does: no core takes more than ceil(vectors / cores), where "
            'reserving a few cores away from the ranks (C(irq_cores: auto) or a number) piles dozens of '
            'vectors on each of them; a rank loses a little CPU time to the few it carries. The articles\' '
            "loop that writes CPU 1 to every mlx5 IRQ is wrong, and mlnx-tools' C(set_irq_affinity.sh) is "
            'not NUMA-aware. See docs/layout.md.'
        ),
        (
            'Each GPU\'s C(amdgpu) vector (one per PCI function, not kernel-managed) goes to a core of its '
            "own rank, on its GPU's NUMA node, one GPU per core: the amdgpu handler runs there and the KFD "
            'event work it queues on a CPU next to it (same L3), beside the rank they wake (C(irq.gpu_local)). '
            "Left alone it stays wherever the kernel's default or irqbalance put it, possibly another NUMA "
            'node.'
        ),
        (
            'B(By default irqbalance is stopped and disabled) (C(nodetune_irqbalance_mode=disable)): it '
            'rewrites hand-set affinities at its next rebalance, so deterministic pinning needs it out of '
            'the way. This is the documented default of the pinned layout; C(ban) keeps irqbalance running '
            'but off the pinned CPUs instead.'
        ),
        (
            'Kernel-managed IRQs (NVMe queues, many multi-queue drivers) cannot be moved (EIO/EPERM): they '
            'are reported, never written. Affinities do not survive a reboot; C(nodetune-restore.service) '
            're-applies them at boot, finding each IRQ by its action name (numbers change between boots).'
        ),
        (
            'mlx5 creates its completion vectors on first use since Linux 6.5 (commit f14c1a14e632), so after '
            'a reboot only those in use exist: the others are pending, not errors, for the boot restore and for '
            'verify (C(not_applicable)), and C(nodetune-irq-repin.timer) pins each one within 10 s of its '
            'creation, once (a later move is drift for verify). See docs/tuning.md.'
        ),
    ],
    'variables': {
        'nodetune_irq_affinity_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                'Tune this area. When false the area is left exactly as it is.',
            ],
        },
        'nodetune_irqbalance_mode': {
            'type': 'str',
            'default': 'disable',
            'choices': ['disable', 'ban', 'leave'],
            'description': [
                (
                    'C(disable) stops and disables C(irqbalance.service) (the default for deterministic '
                    'pinning), once C(nodetune_irqbalance_stop_allowed) allows it.'
                ),
                (
                    'C(ban) keeps irqbalance running and sets C(IRQBALANCE_BANNED_CPULIST) to the CPUs that '
                    'take pinned NIC IRQs and C(IRQBALANCE_ARGS) to C(--policyscript=/usr/local/sbin/'
                    'nodetune-irqbalance-policy), which tells irqbalance C(ban=true) for each pinned IRQ, named '
                    'by its action in C(/etc/nodetune/irqbalance-banned) (without it irqbalance would move them '
                    'off the banned CPUs; C(--banirq=N) went stale at the next boot, as IRQ numbers change), in '
                    'C(/etc/default/irqbalance) (Debian family) or C(/etc/sysconfig/irqbalance) (RHEL, '
                    'SUSE). irqbalance reads the file when it starts, so restart it once yourself.'
                ),
                (
                    'C(leave) does not touch irqbalance; pinned affinities then only last until its next '
                    'rebalance.'
                ),
                'Nothing is done for irqbalance where it is not installed.',
            ],
        },
        'nodetune_irqbalance_stop_allowed': {
            'type': 'bool',
            'default': False,
            'description': [
                (
                    'Opt-in for the disruptive part of C(disable). Stopping a service is opt-in (the safety '
                    'rules), so with C(false) a node whose irqbalance is running or enabled gets a warning, '
                    'and neither irqbalance nor the NIC and GPU IRQs are touched (pins would not survive '
                    "irqbalance's next rebalance); verify reports the area as not applicable with the "
                    'reason. Nodes where irqbalance is already stopped and disabled, or not installed, are '
                    'pinned either way.'
                ),
            ],
        },
        'nodetune_irq_pin_nic': {
            'type': 'bool',
            'default': True,
            'description': [
                (
                    'Pin NIC completion vectors as the layout planner placed them '
                    '(C(/proc/irq/N/smp_affinity_list)).'
                ),
            ],
        },
        'nodetune_irq_pin_gpu': {
            'type': 'bool',
            'default': True,
            'description': [
                (
                    "Pin each GPU's C(amdgpu) vector to the core of its rank the layout planner chose "
                    '(C(irq.gpu_local)); re-applied at boot like the NIC vectors. C(false) leaves the GPU '
                    'vectors where they are.'
                ),
            ],
        },
        'nodetune_os_family': {
            'type': 'str',
            'default': None,
            'description': [
                (
                    'Which irqbalance configuration file C(ban) edits when the node has none yet; one of '
                    'C(Debian) (C(/etc/default/irqbalance)), C(RedHat) or C(Suse) '
                    '(C(/etc/sysconfig/irqbalance)); any other value is refused before anything is written.'
                ),
                (
                    'C(null) uses the file the node already has, else the Debian location. Facts are not '
                    'gathered, so set it per group on RHEL-family fleets.'
                ),
            ],
        },
    },
}

AREA = "irq"
MODES = choices(DECLARATION, "nodetune_irqbalance_mode")
VARIABLES = role_variables(ROLE, DECLARATION)
UNIT = "irqbalance.service"
CONFIG_BY_FAMILY = {"Debian": "etc/default/irqbalance", "RedHat": "etc/sysconfig/irqbalance",
                    "Suse": "etc/sysconfig/irqbalance"}
# ban mode: irqbalance's --policyscript bans the pinned IRQs by action name (irqbalance_ban)
POLICY_SCRIPT = "usr/local/sbin/nodetune-irqbalance-policy"
BANNED_FILE = "etc/nodetune/irqbalance-banned"
HEADER = "# Managed by nodetune. Local changes are reported as drift and overwritten.\n"
# POSIX sh, not Python: irqbalance runs it once per IRQ (a thousand on a large node) at start and at each rescan.
# The device path is /sys/bus/pci/devices/<BDF> (or /sys for an IRQ without a device); whatever comes before /sys
# is the root (a test's tree). An action that does not carry its device (amdgpu) is listed as <action>@pci:<BDF>.
POLICY_SCRIPT_TEXT = "#!/bin/sh\n" + HEADER + """\
# nodetune-irqbalance-policy: irqbalance --policyscript (irqbalance(1)). irqbalance runs it for each IRQ it
# discovers as "<this script> <sysfs device path> <irq>" and reads key=value lines from it; ban=true makes it
# leave that IRQ alone. Printed for the IRQs nodetune pins, listed by action name in
# /etc/nodetune/irqbalance-banned (IRQ numbers change from one boot to the next, names do not). It only reads.
case "$1" in
    */sys/bus/pci/devices/*) root=${1%/sys/bus/pci/devices/*}; bdf=${1##*/} ;;
    */sys) root=${1%/sys}; bdf= ;;
    *) root=; bdf= ;;
esac
case "$2" in
    ''|*[!0-9]*) exit 0 ;;
esac
[ -r "$root/etc/nodetune/irqbalance-banned" ] || exit 0
for dir in "$root/proc/irq/$2"/*/; do
    [ -d "$dir" ] || continue
    action=${dir%/}
    action=${action##*/}
    if grep -qxF -e "$action" -e "$action@pci:$bdf" "$root/etc/nodetune/irqbalance-banned"; then
        echo ban=true
        exit 0
    fi
done
exit 0
"""


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
    pin_gpu = want_bool(ctx, config, "nodetune_irq_pin_gpu", True)
    family = want_str(ctx, config, "nodetune_os_family", sorted(CONFIG_BY_FAMILY)) or "Debian"
    settings: List[Setting] = []
    ban_config = None  # the irqbalance config file, where the pinned IRQs are banned by name
    installed = bool((ctx.topology.get("irqbalance") or {}).get("installed"))
    if ctx.services is not None and not installed:
        installed = ctx.services.installed(UNIT)
    if mode == "disable" and installed:
        allowed = want_bool(ctx, config, "nodetune_irqbalance_stop_allowed", False)
        if not allowed and _irqbalance_running_or_enabled(ctx):
            # Stopping a service is disruptive, so it is opt-in (DESIGN.md); pinning without it would not hold.
            message = ("irq: irqbalance is running or enabled and nodetune_irqbalance_stop_allowed is false: "
                       "NIC and GPU IRQs are not pinned (irqbalance would move them at its next rebalance). Set "
                       "nodetune_irqbalance_stop_allowed: true to stop and disable it, "
                       "or nodetune_irqbalance_mode: ban")
            ctx.warn(message)
            ctx.notes.append(message)
            return []
        settings.append(Setting("irq.irqbalance", UNIT, "", "active=no,enabled=no", kind=SERVICE, area=AREA,
                                disruptive=True,
                                reason="irqbalance would overwrite the pinned affinities at its next rebalance"))
    elif mode == "ban" and installed:
        # irqbalance is kept off the CPUs of the pinned IRQs and told to leave those IRQs alone once the pins below
        # are known (irqbalance_ban)
        ban_config = irqbalance_config_file(ctx, family)
    elif not installed:
        ctx.notes.append("irq: irqbalance is not installed on this node; nothing to stop")
    if pin:
        for entry in ctx.layout.get("irq_affinity") or []:
            irq = int(entry["irq"])
            path = "proc/irq/%d/smp_affinity_list" % irq
            if not ctx.root.exists(path):
                ctx.warn("irq %d (%s) has no %s; skipped" % (irq, entry.get("device"), "/" + path))
                continue
            # key = irq_name = the IRQ's action name (mlx5_comp3@pci:...): IRQ numbers change across reboots, names
            # do not, so the boot-time restore and the node-local checker find the IRQ again by name.
            settings.append(Setting("irq.nic_local", "irq %d" % irq, path, format_cpulist(entry["cpus"]),
                                    key=entry.get("name") or None, irq_name=entry.get("name") or None,
                                    compare=CPULIST, area=AREA, persist="boot_restore",
                                    reason=entry.get("reason") or "NIC completion vector on a local core"))
    if pin_gpu:
        for entry in ctx.layout.get("gpu_irq_affinity") or []:
            irq = int(entry["irq"])
            path = "proc/irq/%d/smp_affinity_list" % irq
            if not ctx.root.exists(path):
                ctx.warn("irq %d (GPU %s) has no %s; skipped" % (irq, entry.get("device"), "/" + path))
                continue
            # amdgpu names every GPU's vector "amdgpu" (amdgpu_irq.c: request_irq(..., driver->name, ...)), so the
            # name alone does not tell GPUs apart: key = the action name at its PCI device, in mlx5's own form
            # (amdgpu@pci:0000:05:00.0), which /sys/bus/pci/devices/<BDF>/msi_irqs/ and /proc/irq/N/<name>/ resolve
            name = entry.get("name") or None
            key = name if not name or "@pci:" in name else "%s@pci:%s" % (name, entry.get("device"))
            settings.append(Setting("irq.gpu_local", "irq %d" % irq, path, format_cpulist(entry["cpus"]), key=key,
                                    irq_name=key, compare=CPULIST, area=AREA, persist="boot_restore",
                                    reason=entry.get("reason") or "GPU vector on a core of its rank"))
    if ban_config is not None:
        settings.extend(irqbalance_ban(ctx, settings, ban_config))
    return settings


def irqbalance_ban(ctx: Context, settings: List[Setting], config_file: str) -> List[Setting]:
    """irqbalance kept off the CPUs of the pinned IRQs (IRQBALANCE_BANNED_CPULIST), and away from those IRQs, which
    are named, not numbered.

    ``--banirq=N`` went stale at the next boot (IRQ numbers follow the probe order, the NVMe queue count, the order
    in which mlx5 creates vectors on first use), and irqbalance then moved the pinned vectors. irqbalance(1)
    ``--policyscript``: it runs the script for each IRQ it discovers, also one created later, as
    ``exec <script> <sysfs device path> <irq>`` (classify.c, get_irq_user_policy()) and a ``ban=true`` line
    makes it leave that IRQ alone. The script prints it for the IRQs whose action (/proc/irq/N/<action>/) is
    listed in BANNED_FILE: every pinned IRQ, and those the boot restore keeps for when their driver creates them
    (area_persist.carried_irq_entries), whose CPUs stay banned meanwhile: neither file changes when they appear.
    """
    pinned = [s for s in settings if s.id in area_persist.IRQ_IDS]
    keys = [s.key for s in pinned if s.key]
    pending, _problems = area_persist.carried_irq_entries(ctx.root, keys)  # persist warns about the problems
    out: List[Setting] = []
    cpus = _banned_cpus(ctx, pending)
    if cpus:
        out.append(Setting("irq.irqbalance", "IRQBALANCE_BANNED_CPULIST", config_file, format_cpulist(cpus),
                           kind=LINE, key="IRQBALANCE_BANNED_CPULIST", area=AREA, runtime=False,
                           reason="keep irqbalance off the CPUs that take pinned NIC IRQs"))
    names = []
    for name in sorted(set(keys + [e["irq_name"] for e in pending])):
        if area_persist.safe_irq_name(name):
            names.append(name)
        else:
            ctx.warn("irq: the IRQ named %r cannot be banned from irqbalance by name (its name holds a blank or a "
                     "character outside letters, digits and '_.:@+-'): irqbalance may move it" % name)
    unnamed = sorted(s.target for s in pinned if not s.key)
    if unnamed:
        ctx.warn("irq: %s have no action name: irqbalance may move them" % ", ".join(unnamed))
    if not names:
        return out
    return out + [
        Setting("irq.irqbalance", "banned IRQs", BANNED_FILE, HEADER + "".join(n + "\n" for n in names), kind=FILE,
                compare="content", area=AREA, reason="the pinned IRQs by action name, for the irqbalance policy"),
        Setting("irq.irqbalance", "policy script", POLICY_SCRIPT, POLICY_SCRIPT_TEXT, kind=FILE, compare="content",
                area=AREA, mode=0o755, reason="prints ban=true to irqbalance for the IRQs listed in /" + BANNED_FILE),
        Setting("irq.irqbalance", "IRQBALANCE_ARGS", config_file, "--policyscript=/" + POLICY_SCRIPT, kind=LINE,
                key="IRQBALANCE_ARGS", area=AREA, runtime=False, after=(POLICY_SCRIPT, BANNED_FILE),
                reason="irqbalance leaves the pinned IRQs where nodetune put them, whatever their number this boot"),
    ]


def _banned_cpus(ctx: Context, pending: List[Dict[str, Any]]) -> List[int]:
    """The Layout's banned CPUs (those of the pinned IRQs, with the SMT siblings that stay online), and the same for
    the IRQs the boot restore keeps that do not exist yet: the list must not shrink while they are away."""
    banned = (ctx.layout.get("irqbalance") or {}).get("banned_cpulist") or []
    try:
        cpus = set(parse_cpulist(banned) if isinstance(banned, str) else (int(c) for c in banned))
    except (ParseError, TypeError, ValueError):
        ctx.error("irq: the Layout's irqbalance banned_cpulist %r is not a CPU list" % (banned,))
        return []
    going = set(ctx.layout.get("smt_offline") or [])
    siblings = dict((c.get("id"), c) for c in ctx.topology.get("cpus") or [] if isinstance(c, dict))
    for entry in pending:
        for cpu in parse_cpulist(entry["value"]):  # checked by carried_irq_entries
            cpus.add(cpu)
            for other in (siblings.get(cpu) or {}).get("thread_siblings") or []:
                if other not in going and (siblings.get(other) or {}).get("online", True):
                    cpus.add(other)
    return sorted(cpus)
