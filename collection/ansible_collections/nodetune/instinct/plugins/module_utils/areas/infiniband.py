# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The InfiniBand area: IPoIB MTU by mode, socket buffer caps, neighbour table thresholds.

IPoIB in datagram mode carries at most the IB link MTU minus the 4-byte IPoIB header: 4092 with a 4K IB MTU,
2044 with 2K. The article's ``ifconfig ib0 mtu 4096`` fails with EINVAL, so 4096 is refused with the reason.
Connected mode allows up to 65520 but ConnectX-4 and later run Enhanced IPoIB, which is datagram only.
``net.core.rmem_max``/``wmem_max`` only cap SO_RCVBUF/SO_SNDBUF; TCP autotuning is bounded by tcp_rmem/tcp_wmem.

In datagram mode the kernel also caps the MTU by the partition's broadcast group, which the subnet manager sets
(drivers/infiniband/ulp/ipoib/ipoib_main.c, ``ipoib_change_mtu``: ``dev->mtu = min(priv->mcast_mtu,
priv->admin_mtu)``) and returns success. sysfs does not show that cap, so the engine reads the MTU back after the
write and journals what the kernel made of it (the Setting is ``effective_ok``: the node-local checker expects that
value from the same run on); the next plan asks for it (Context.effective_records, from the journal apply/node.py
reads) and says why, for as long as the interface stays at it, instead of rewriting the MTU and drifting on every
run.

A node without an RDMA device (nothing in /sys/class/infiniband) gets nothing from this area, and the socket buffer
caps are "at least" (area_sysctl.at_least): a node whose own cap is larger keeps it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import (
    choices,
    role_variables,
    Context,
    describe,
    unknown_keys,
    want_bool,
    want_int,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.sysctl import (
    at_least,
    kept_by_kernel,
    sysctl_setting,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import ParseError, ascii_int, is_digits
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import INT, Setting

# The area's declaration: its role (ROLE), variables as an Ansible argument spec, check ids and docs; its
# role's files are generated from it (scripts/gen_role_docs.py) and declarations.py collects every area's.
ROLE = "infiniband"
DECLARATION = {
    'kind': 'area',
    'order': 50,
    'steps': ['ib.mtu'],
    'builder': 'infiniband',
    'setting_area': 'infiniband',
    'finding_prefix': 'ib',
    'check_ids': ['ib.mtu'],  # and its caps and thresholds as sysctl.<key>, as the sysctl area's
    'galaxy_tags': ['infiniband', 'networking'],
    'severity': 'medium',
    'short_description': 'IPoIB MTU by mode, socket buffer caps and neighbour table thresholds',
    'description': [
        (
            'IPoIB in datagram mode carries at most the IB link MTU minus the 4-byte IPoIB header: 4092 with'
            " a 4K IB MTU, 2044 with 2K. The articles' C(ifconfig ib0 mtu 4096) fails with EINVAL, so 4096 "
            'is refused with the reason. Connected mode allows up to 65520, but ConnectX-4 and later use '
            "Enhanced IPoIB, which is datagram only. The subnet manager's broadcast group MTU can cap it "
            'further.'
        ),
        (
            "Changing an MTU briefly drops the interface's traffic, so it is opt-in: C(nodetune_ipoib_mtu) "
            'is C(null) (left alone) by default, and a change needs '
            'C(nodetune_ipoib_mtu_change_allowed=true).'
        ),
        (
            'C(net.core.rmem_max)/C(wmem_max) only cap what applications ask for with SO_RCVBUF/SO_SNDBUF; '
            "TCP autotuning is bounded by C(net.ipv4.tcp_rmem)/C(tcp_wmem) (set those with the sysctl role's"
            ' C(nodetune_sysctl_extra) if you need them). Sysctls persist in C(/etc/sysctl.d/).'
        ),
    ],
    'variables': {
        'nodetune_infiniband_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                'Tune this area. When false the area is left exactly as it is.',
            ],
        },
        'nodetune_ipoib_mtu': {
            'type': 'raw',
            'default': None,
            'description': [
                (
                    "MTU of every IPoIB interface, an integer or C(max) (the largest the interface's mode "
                    'allows, IB link MTU - 4 in datagram mode, 65520 in connected mode). C(null) leaves MTUs'
                    ' alone.'
                ),
                (
                    "Values above the mode's limit are refused before any write (4096 in datagram mode is "
                    'the classic mistake, use 4092 or C(max)); values below 1280 are refused too (IPv6 needs'
                    ' 1280).'
                ),
            ],
        },
        'nodetune_ipoib_mtu_change_allowed': {
            'type': 'bool',
            'default': False,
            'description': [
                (
                    "Opt-in for changing an interface's MTU (it briefly "
                    "drops the interface's traffic)."
                ),
            ],
        },
        'nodetune_ib_link_mtu': {
            'type': 'int',
            'default': 4096,
            'choices': [256, 512, 1024, 2048, 4096],
            'description': [
                (
                    'The InfiniBand link MTU of the fabric (set by the subnet manager); the IPoIB datagram '
                    'limit is this minus 4.'
                ),
            ],
        },
        'nodetune_net_core_rmem_max': {
            'type': 'int',
            'default': 2097152,
            'description': [
                (
                    "C(net.core.rmem_max), the cap of SO_RCVBUF (the articles' 2 MiB). C(null) leaves it "
                    'alone.'
                ),
                (
                    'A cap is "at least": a node whose own cap is larger keeps it (nodetune never lowers '
                    'it). A node without an InfiniBand/RDMA device gets nothing from this area.'
                ),
            ],
        },
        'nodetune_net_core_wmem_max': {
            'type': 'int',
            'default': 2097152,
            'description': [
                (
                    "C(net.core.wmem_max), the cap of SO_SNDBUF (the articles' 2 MiB). C(null) leaves it "
                    'alone.'
                ),
                'At least, like C(nodetune_net_core_rmem_max).',
            ],
        },
        'nodetune_neigh_gc_thresh1': {
            'type': 'int',
            'default': None,
            'description': [
                'C(net.ipv4.neigh.default.gc_thresh1); C(null) leaves it alone.',
            ],
        },
        'nodetune_neigh_gc_thresh2': {
            'type': 'int',
            'default': None,
            'description': [
                'C(net.ipv4.neigh.default.gc_thresh2); C(null) leaves it alone.',
            ],
        },
        'nodetune_neigh_gc_thresh3': {
            'type': 'int',
            'default': 10240,
            'description': [
                (
                    'C(net.ipv4.neigh.default.gc_thresh3), the hard cap of neighbour (ARP) entries (the '
                    "articles' 10240, for large fabrics)."
                ),
                (
                    "nodetune keeps C(gc_thresh1 <= gc_thresh2 <= gc_thresh3), comparing with the node's "
                    'current values for the ones left C(null), and refuses an order that breaks it.'
                ),
            ],
        },
    },
}

AREA = "infiniband"
VARIABLES = role_variables(ROLE, DECLARATION)
IB_MTUS = choices(DECLARATION, "nodetune_ib_link_mtu")
IPOIB_HEADER = 4
CONNECTED_MAX = 65520


def ipoib_max(mode: Optional[str], link_mtu: int) -> int:
    return CONNECTED_MAX if mode == "connected" else link_mtu - IPOIB_HEADER


def build(ctx: Context, config: Dict[str, Any]) -> List[Setting]:
    unknown_keys(ctx, config, VARIABLES, AREA)
    if not has_rdma(ctx.topology):
        ctx.notes.append("infiniband: no InfiniBand/RDMA device on this node (/sys/class/infiniband is empty): "
                         "nothing to tune")
        return []
    settings = _mtu(ctx, config)
    settings += _sysctls(ctx, config)
    return settings


def has_rdma(topology: Dict[str, Any]) -> bool:
    """An RDMA device (discovery's ib_devices), or a NIC that names one or is IPoIB."""
    return bool(topology.get("ib_devices")) or any(
        nic.get("ib_device") or nic.get("type") == "infiniband" for nic in topology.get("nics") or [])


def _mtu(ctx: Context, config: Dict[str, Any]) -> List[Setting]:
    wanted = config.get("nodetune_ipoib_mtu")
    if wanted is None:
        return []
    link_mtu = want_int(ctx, config, "nodetune_ib_link_mtu") or 4096
    if link_mtu not in IB_MTUS:
        ctx.error("nodetune_ib_link_mtu=%s is not an InfiniBand MTU (valid: %s)"
                  % (describe(config.get("nodetune_ib_link_mtu")), ", ".join(str(m) for m in IB_MTUS)))
        return []
    allowed = want_bool(ctx, config, "nodetune_ipoib_mtu_change_allowed", False)
    ipoib = [n for n in ctx.topology.get("nics", []) if n.get("type") == "infiniband"]
    if not ipoib:
        ctx.notes.append("infiniband: no IPoIB interface on this node; nodetune_ipoib_mtu not applicable")
        return []
    settings = []
    capped: Optional[Dict[str, Any]] = None  # the journal's capped writes, read once for all interfaces
    for nic in ipoib:
        mode = nic.get("ipoib_mode") or "datagram"
        limit = ipoib_max(mode, link_mtu)
        if wanted == "max":
            value = limit
        else:
            try:
                value = ascii_int(wanted, "nodetune_ipoib_mtu")
            except ParseError:
                ctx.error("nodetune_ipoib_mtu=%s is not valid: expected an integer (digits 0-9) or 'max'"
                          % describe(wanted))
                return []
            if value > limit:
                if mode == "datagram":
                    ctx.error("nodetune_ipoib_mtu=%d is not possible on %s: IPoIB datagram mode carries at most the "
                              "IB link MTU minus the 4-byte IPoIB header, %d with a %d-byte IB MTU (the article's "
                              "'ifconfig %s mtu 4096' fails with EINVAL). Use %d or 'max'%s"
                              % (value, nic["name"], limit, link_mtu, nic["name"], limit,
                                 "; connected mode (up to 65520) is not available on ConnectX-4 and later, which use "
                                 "Enhanced IPoIB" if nic.get("driver") == "mlx5_core" or
                                 (nic.get("ib_device") or "").startswith("mlx5") else ""))
                else:
                    ctx.error("nodetune_ipoib_mtu=%d is above the connected-mode maximum of %d on %s"
                              % (value, limit, nic["name"]))
                continue
            if value < 1280:
                ctx.error("nodetune_ipoib_mtu=%d is too small for %s (IPv6 needs 1280)" % (value, nic["name"]))
                continue
        if nic.get("mtu") != value and not allowed:
            ctx.error("nodetune_ipoib_mtu=%s changes the MTU of %s from %s to %d, which briefly drops its traffic: "
                      "set nodetune_ipoib_mtu_change_allowed: true to allow it" % (describe(wanted), nic["name"],
                                                                                   nic.get("mtu"), value))
            continue
        reason = "IPoIB %s mode: MTU %d (limit %d)" % (mode, value, limit)
        requested = value
        if capped is None:
            capped = ctx.effective_records()
        effective = kernel_capped_mtu(capped, nic, value)
        if effective is not None:
            ctx.warn(cap_message(nic["name"], value, effective))
            reason += "; the kernel caps it at %d (the partition's broadcast group), verified at that" % effective
            value = effective
        # restore_value: the boot restore writes the requested MTU, so that the kernel's admin MTU stays there and
        # the interface rises by itself once the subnet manager's group allows it; effective_ok: verified at the
        # capped MTU from the first apply on
        settings.append(Setting("ib.mtu", nic["name"], "sys/class/net/%s/mtu" % nic["name"], value, compare=INT,
                                area=AREA, persist="boot_restore", disruptive=True, reason=reason,
                                restore_value=str(requested), effective_ok=True))
    return settings


def kernel_capped_mtu(capped: Dict[str, Any], nic: Dict[str, Any], requested: int) -> Optional[int]:
    """The MTU the kernel left after nodetune's last write of ``requested`` on this interface, when it capped it
    and the interface is still at that value; else None (ask for ``requested``). ``capped``: Context.effective_records.
    """
    record = capped.get("ib.mtu[%s]" % nic["name"])
    if not record or str(record.get("requested")) != str(requested):
        return None
    try:
        effective = int(str(record.get("effective")))
    except ValueError:
        return None
    if effective < requested and nic.get("mtu") == effective:
        return effective
    return None


def cap_message(name: str, requested: Any, effective: Any) -> str:
    """The cap, its cause and its remedy, for an IPoIB MTU the kernel accepted but lowered."""
    try:
        group = "%d-byte" % (int(str(effective)) + IPOIB_HEADER)
    except ValueError:
        group = "smaller"
    return ("%s: the kernel set the IPoIB MTU to %s, not the requested %s: in datagram mode it uses the smaller of "
            "the requested MTU and the partition's broadcast-group MTU minus 4, and this partition's broadcast group "
            "has a %s MTU. Remedy: raise the partition's MTU in the subnet manager (OpenSM partitions.conf, e.g. "
            "'Default=0x7fff, ipoib, mtu=5 : ALL=full;' where mtu=5 is 4096; UFM: the partition's MTU setting); the "
            "kernel raises the interface MTU itself when it rejoins the group. Until then nodetune verifies %s "
            "against %s." % (name, effective, requested, group, name, effective))


def _sysctls(ctx: Context, config: Dict[str, Any]) -> List[Setting]:
    settings = []
    for var, key, why in (
            ("nodetune_net_core_rmem_max", "net.core.rmem_max", "cap of SO_RCVBUF (not TCP autotuning)"),
            ("nodetune_net_core_wmem_max", "net.core.wmem_max", "cap of SO_SNDBUF (not TCP autotuning)")):
        value = want_int(ctx, config, var, 4096, 2 ** 31 - 1)
        if value is not None:
            settings.append(sysctl_setting(key, at_least(ctx, key, value, AREA), AREA, why, INT))
    current = ctx.topology.get("sysctl") or {}
    thresholds = []
    for level in (1, 2, 3):
        var = "nodetune_neigh_gc_thresh%d" % level
        key = "net.ipv4.neigh.default.gc_thresh%d" % level
        value = want_int(ctx, config, var, 0, 2 ** 31 - 1)
        if value is not None:
            settings.append(sysctl_setting(key, value, AREA, "neighbour table threshold %d" % level, INT))
            thresholds.append((level, value, var))
        else:
            number = current.get(key, "")
            if is_digits(str(number).strip()):
                thresholds.append((level, int(number), key + " (current)"))
    ordered = sorted(thresholds)
    for (_level_a, va, na), (_level_b, vb, nb) in zip(ordered, ordered[1:]):
        if va > vb:
            ctx.error("%s=%d is above %s=%d: keep gc_thresh1 <= gc_thresh2 <= gc_thresh3 (gc_thresh3 is the hard cap "
                      "of neighbour entries)" % (na, va, nb, vb))
    kept_by_kernel(ctx, settings)
    return settings
