# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What the kernel does when a simulated node's attribute is written.

A simulated node (a tree built by simnode.py, marked by ``.nodetune-simnode.json`` at its root) is plain files,
so a write would otherwise just replace text. Real sysfs/procfs answer writes with side effects and refusals that
nodetune must handle: choice files re-render the bracket, changing the I/O scheduler resets ``nr_requests``,
``vm.dirty_ratio`` zeroes ``vm.dirty_bytes``, ``smt/control=off`` offlines siblings, EPP is locked (EBUSY) under the
``performance`` governor in amd-pstate active mode, out-of-range values fail with EINVAL. Emulating them here keeps
the simulated nodes honest: a test that passes on them exercises the same ordering and error paths as a real node.
Only :class:`~rootfs.Root` calls :func:`write`, and only for simulated roots.
"""

from __future__ import annotations

import errno
import json
import os
import re
from typing import List, Optional

from ansible_collections.nodetune.instinct.plugins.module_utils.parse import (
    ParseError,
    format_cpulist,
    format_cpumask,
    parse_choice,
    parse_cpulist,
    parse_cpumask,
)

MARKER = ".nodetune-simnode.json"
EPP_CACHED_SUFFIX = ".nodetune-epp-cached"  # amd-pstate's epp_cached, kept beside the EPP file
SCHED_MAX_REQUESTS = 2048  # block/blk-mq-sched.c: the limit with an elevator
DEFAULT_TAGS = 1023  # default NVMe hardware tag depth (io_queue_depth 1024 minus one)

_CPU_ONLINE = re.compile(r"^sys/devices/system/cpu/cpu(\d+)/online$")
_IRQ_FILE = re.compile(r"^proc/irq/(\d+)/(smp_affinity|smp_affinity_list)$")
_QUEUE = re.compile(r"^(sys/(?:block|devices/.+)/[^/]+)/queue/(scheduler|nr_requests)$")
_EPP = re.compile(r"^sys/devices/system/cpu/cpu(\d+)/cpufreq/energy_performance_preference$")
_GOV = re.compile(r"^sys/devices/system/cpu/cpu(\d+)/cpufreq/scaling_governor$")
_MTU = re.compile(r"^sys/(?:class/net/[^/]+|devices/.+/net/[^/]+)/mtu$")
_DIRTY_PAIRS = {
    "proc/sys/vm/dirty_ratio": "proc/sys/vm/dirty_bytes",
    "proc/sys/vm/dirty_bytes": "proc/sys/vm/dirty_ratio",
    "proc/sys/vm/dirty_background_ratio": "proc/sys/vm/dirty_background_bytes",
    "proc/sys/vm/dirty_background_bytes": "proc/sys/vm/dirty_background_ratio",
}


def is_simulated(real_root: str) -> bool:
    return os.path.isfile(os.path.join(real_root, MARKER))


def _err(code: int, why: str) -> OSError:
    return OSError(code, "%s (simulated kernel: %s)" % (os.strerror(code), why))


def _read(real: str) -> Optional[str]:
    try:
        with open(real, "r", encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def _put(real: str, text: str) -> None:
    with open(real, "w", encoding="utf-8") as handle:
        handle.write(text)


def effective_cpu(irq: int, cpus: List[int]) -> Optional[int]:
    """The CPU the simulated IRQ matrix allocator picks from an affinity list (deterministic spread)."""
    if not cpus:
        return None
    return cpus[irq % len(cpus)]


def write(root, rel: str, value: str) -> None:
    """Write ``value`` to the simulated attribute ``rel`` (relative to the root) like the kernel would."""
    real = root.real(rel)
    value = value.strip()
    current = _read(real)
    if current is not None:
        active, options = parse_choice(current)
        if len(options) > 1 and "[" in current:
            if value not in options:
                raise _err(errno.EINVAL, "%r is not one of %s" % (value, " ".join(options)))
            _put(real, " ".join("[%s]" % o if o == value else o for o in options) + "\n")
            match = _QUEUE.match(rel)
            if match and match.group(2) == "scheduler" and value != active:
                _reset_nr_requests(root, match.group(1), value)
            return
    for handler in (_cpu_online, _smt_control, _irq, _queue, _epp, _governor, _mtu, _dirty):
        if handler(root, rel, value):
            return
    _put(real, value + "\n")


# ------------------------------------------------------------------------------------------ CPU hotplug / SMT
def _cpu_dir(root) -> str:
    return root.real("sys/devices/system/cpu")


def _online_set(root) -> List[int]:
    return parse_cpulist(_read(os.path.join(_cpu_dir(root), "online")) or "")


def _set_online(root, cpus: List[int]) -> None:
    base = _cpu_dir(root)
    present = parse_cpulist(_read(os.path.join(base, "present")) or "") or sorted(cpus)
    before = set(_online_set(root))
    online = sorted(set(cpus))
    _put(os.path.join(base, "online"), format_cpulist(online) + "\n")
    _put(os.path.join(base, "offline"), format_cpulist(sorted(set(present) - set(online))) + "\n")
    # Only the CPUs whose state changes (as the kernel does): rewriting every cpuN/online on each of a few hundred
    # offlines made a simulated apply spend seconds in open(2).
    for cpu in sorted(before.symmetric_difference(online)):
        path = os.path.join(base, "cpu%d" % cpu, "online")
        if os.path.exists(path):
            _put(path, ("1" if cpu in online else "0") + "\n")


def _siblings(root, cpu: int) -> List[int]:
    text = _read(os.path.join(_cpu_dir(root), "cpu%d" % cpu, "topology", "thread_siblings_list"))
    try:
        return parse_cpulist(text or "") or [cpu]
    except ParseError:
        return [cpu]


def _cpu_online(root, rel: str, value: str) -> bool:
    match = _CPU_ONLINE.match(rel)
    if not match:
        return False
    cpu = int(match.group(1))
    if value not in ("0", "1"):
        raise _err(errno.EINVAL, "cpu%d/online takes 0 or 1" % cpu)
    online = set(_online_set(root))
    if value == "1":
        control = (_read(os.path.join(_cpu_dir(root), "smt", "control")) or "").strip()
        # An offline CPU has no topology/ on a real kernel: under SMT off such a CPU is a secondary thread
        # (primaries stay online), so the kernel refuses it (cpu_smt_allowed()).
        no_topology = not os.path.isdir(os.path.join(_cpu_dir(root), "cpu%d" % cpu, "topology"))
        if control in ("off", "forceoff") and (no_topology or min(_siblings(root, cpu)) != cpu):
            raise _err(errno.EPERM, "SMT is %s: secondary threads cannot be onlined" % control)
        online.add(cpu)
    else:
        if len(online - {cpu}) == 0:
            raise _err(errno.EBUSY, "cannot offline the last online CPU")
        online.discard(cpu)
    _set_online(root, sorted(online))
    return True


def _smt_control(root, rel: str, value: str) -> bool:
    if rel != "sys/devices/system/cpu/smt/control":
        return False
    current = (_read(root.real(rel)) or "").strip()
    if current in ("notsupported", "notimplemented", "forceoff"):
        raise _err(errno.EPERM, "smt/control is %s and cannot be changed" % current)
    if value not in ("on", "off", "forceoff"):
        raise _err(errno.EINVAL, "smt/control takes on, off or forceoff")
    base = _cpu_dir(root)
    present = parse_cpulist(_read(os.path.join(base, "present")) or "")
    secondaries = [c for c in present if min(_siblings(root, c)) != c]
    online = set(_online_set(root))
    if value in ("off", "forceoff"):
        online -= set(secondaries)
    else:
        online |= set(secondaries)
    _put(root.real(rel), value + "\n")
    _set_online(root, sorted(online))
    active = os.path.join(base, "smt", "active")
    if os.path.exists(active):
        _put(active, ("1" if value == "on" else "0") + "\n")
    return True


# ------------------------------------------------------------------------------------------ IRQ affinity
def _irq(root, rel: str, value: str) -> bool:
    match = _IRQ_FILE.match(rel)
    if not match:
        return False
    irq = int(match.group(1))
    try:
        cpus = parse_cpulist(value) if match.group(2) == "smp_affinity_list" else parse_cpumask(value)
    except ParseError as exc:
        raise _err(errno.EINVAL, str(exc)) from None
    online = set(_online_set(root))
    usable = [c for c in cpus if c in online]
    if not usable:
        raise _err(errno.EINVAL, "affinity %r has no online CPU" % value)
    possible = parse_cpulist(_read(os.path.join(_cpu_dir(root), "possible")) or "") or cpus
    base = root.real("proc/irq/%d" % irq)
    _put(os.path.join(base, "smp_affinity_list"), format_cpulist(cpus) + "\n")
    _put(os.path.join(base, "smp_affinity"), format_cpumask(cpus, nr_cpus=max(possible) + 1) + "\n")
    effective = os.path.join(base, "effective_affinity_list")
    if os.path.exists(effective):
        _put(effective, "%d\n" % effective_cpu(irq, usable))
    eff_mask = os.path.join(base, "effective_affinity")
    if os.path.exists(eff_mask):
        _put(eff_mask, format_cpumask([effective_cpu(irq, usable)], nr_cpus=max(possible) + 1) + "\n")
    return True


# ------------------------------------------------------------------------------------------ block queues
def _nr_tags(root, disk_dir: str) -> int:
    text = _read(root.real(disk_dir + "/mq/0/nr_tags"))
    try:
        return int((text or "").strip())
    except ValueError:
        return DEFAULT_TAGS


def _reset_nr_requests(root, disk_dir: str, scheduler: str) -> None:
    tags = _nr_tags(root, disk_dir)
    value = tags if scheduler == "none" else 2 * min(tags, 128)
    _put(root.real(disk_dir + "/queue/nr_requests"), "%d\n" % value)


def _queue(root, rel: str, value: str) -> bool:
    match = _QUEUE.match(rel)
    if not match or match.group(2) != "nr_requests":
        return False
    try:
        wanted = int(value)
    except ValueError:
        raise _err(errno.EINVAL, "nr_requests takes an integer") from None
    scheduler = parse_choice(_read(root.real(match.group(1) + "/queue/scheduler")))[0]
    limit = _nr_tags(root, match.group(1)) if scheduler in (None, "none") else SCHED_MAX_REQUESTS
    if wanted > limit:
        raise _err(errno.EINVAL, "nr_requests %d exceeds %d with scheduler %s" % (wanted, limit, scheduler))
    _put(root.real(rel), "%d\n" % max(wanted, 4))
    return True


# ------------------------------------------------------------------------------------------ cpufreq
def _epp(root, rel: str, value: str) -> bool:
    match = _EPP.match(rel)
    if not match:
        return False
    cpufreq = os.path.dirname(root.real(rel))
    governor = (_read(os.path.join(cpufreq, "scaling_governor")) or "").strip()
    status = (_read(root.real("sys/devices/system/cpu/amd_pstate/status")) or "").strip()
    if status == "active" and governor == "performance" and value not in ("performance", "0"):
        raise _err(errno.EBUSY, "EPP is locked to performance under the performance governor")
    available = (_read(os.path.join(cpufreq, "energy_performance_available_preferences")) or "").split()
    if available and value not in available:
        raise _err(errno.EINVAL, "EPP %r is not one of %s" % (value, " ".join(available)))
    _put(root.real(rel), value + "\n")
    return True


def _governor(root, rel: str, value: str) -> bool:
    match = _GOV.match(rel)
    if not match:
        return False
    cpufreq = os.path.dirname(root.real(rel))
    available = (_read(os.path.join(cpufreq, "scaling_available_governors")) or "").split()
    if available and value not in available:
        raise _err(errno.EINVAL, "governor %r is not one of %s" % (value, " ".join(available)))
    previous = (_read(root.real(rel)) or "").strip()
    _put(root.real(rel), value + "\n")
    status = (_read(root.real("sys/devices/system/cpu/amd_pstate/status")) or "").strip()
    epp = os.path.join(cpufreq, "energy_performance_preference")
    if status != "active" or not os.path.exists(epp):
        return True
    # amd-pstate keeps the EPP it had (epp_cached) while the performance governor forces 0 ("performance"),
    # and writes it back when another governor takes over. The simulated node keeps it in a hidden file.
    cached = epp + EPP_CACHED_SUFFIX
    if value == "performance" and previous != "performance":
        _put(cached, _read(epp) or "")
        _put(epp, "performance\n")
    elif value != "performance" and previous == "performance" and os.path.exists(cached):
        _put(epp, _read(cached) or "")
        os.unlink(cached)
    return True


# ------------------------------------------------------------------------------------------ net
def _mtu(root, rel: str, value: str) -> bool:
    match = _MTU.match(rel)
    if not match:
        return False
    netdir = os.path.dirname(root.real(rel))
    try:
        mtu = int(value)
    except ValueError:
        raise _err(errno.EINVAL, "mtu takes an integer") from None
    if (_read(os.path.join(netdir, "type")) or "").strip() == "32":
        mode = (_read(os.path.join(netdir, "mode")) or "datagram").strip()
        limit = 65520 if mode == "connected" else 4092
        if mtu > limit:
            raise _err(errno.EINVAL, "IPoIB %s mode allows at most MTU %d" % (mode, limit))
        if mode == "datagram" and mtu >= 68:
            mtu = min(mtu, _broadcast_group_mtu(root, os.path.basename(netdir)) - 4)
    if mtu < 68:
        raise _err(errno.EINVAL, "MTU below 68")
    _put(root.real(rel), "%d\n" % mtu)
    return True


def _broadcast_group_mtu(root, name: str) -> int:
    """The IB MTU of the interface's partition broadcast group (the spec's ``bcast_mtu``, set by the subnet
    manager): ipoib_change_mtu() sets min(broadcast-group MTU - 4, requested) in datagram mode and succeeds."""
    try:
        with open(os.path.join(root.real(""), MARKER), "r", encoding="utf-8") as handle:
            spec = json.load(handle)
    except (OSError, ValueError):
        return 4096
    for nic in (spec.get("spec") or {}).get("nics") or []:
        if nic.get("name") == name:
            return int(nic.get("bcast_mtu") or nic.get("ib_mtu") or 4096)
    return 4096


# ------------------------------------------------------------------------------------------ vm sysctls
def _dirty(root, rel: str, value: str) -> bool:
    other = _DIRTY_PAIRS.get(rel)
    if other is None:
        return False
    try:
        number = int(value)
    except ValueError:
        raise _err(errno.EINVAL, "%s takes an integer" % rel) from None
    if number < 0 or (rel.endswith("_ratio") and number > 100):
        raise _err(errno.EINVAL, "%s out of range" % rel)
    _put(root.real(rel), "%d\n" % number)
    if number != 0 and os.path.exists(root.real(other)):
        _put(root.real(other), "0\n")
    return True
