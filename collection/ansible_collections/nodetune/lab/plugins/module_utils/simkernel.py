# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What the kernel does when a simulated node's attribute is written.

A simulated node (a tree built by simnode) is plain files, so a write would otherwise just replace text. Real
sysfs/procfs answer writes with side effects and refusals that nodetune must handle: choice files re-render the
bracket, changing the I/O scheduler resets ``nr_requests``, ``vm.dirty_ratio`` zeroes ``vm.dirty_bytes``,
``smt/control=off`` offlines siblings, EPP is locked (EBUSY) under the ``performance`` governor in amd-pstate active
mode, out-of-range values fail with EINVAL, ``fs.pipe-max-size`` and ``kernel.sched_rr_timeslice_ms`` are stored
otherwise than written, and without interrupt remapping an IRQ's new affinity takes effect at its next interrupt
(:func:`fire`). Emulating them here keeps the simulated nodes honest: a test that passes on them exercises the same
ordering and error paths as a real node.
Only :class:`~rootfs.Root` calls :func:`write`, and only for a root given this backend explicitly
(``Root(path, backend=BACKEND)``, or :func:`install` in the lab's modules): nothing on the node selects it.

Every file the simulated kernel reads or writes is resolved inside the root, like any other write of the root
layer: a link in the tree never leads a write out of it. An update of several files (the CPU online/offline lists
and each CPU's ``online``, an IRQ's four affinity files) is staged first in ``run/`` (:data:`PENDING`), so a run
killed half way leaves the next run (and a simulated reboot, which empties ``run/``) a whole update, never half.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.parse import (
    ParseError,
    format_cpulist,
    format_cpumask,
    parse_choice,
    parse_cpulist,
    parse_cpumask,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import (
    NodeFileError,
    Root,
    RootError,
    use_backend,
)
from ansible_collections.nodetune.lab.plugins.module_utils import simbootloader
from ansible_collections.nodetune.lab.plugins.module_utils.simservices import SimServices

MARKER = ".nodetune-simnode.json"
EPP_CACHED_SUFFIX = ".nodetune-epp-cached"  # amd-pstate's epp_cached, kept beside the EPP file
SCHED_MAX_REQUESTS = 2048  # block/blk-mq-sched.c: the limit with an elevator
DEFAULT_TAGS = 1023  # default NVMe hardware tag depth (io_queue_depth 1024 minus one)
# A multi-file update staged before it is written; run/ is emptied by a (simulated) reboot, like a tmpfs.
PENDING = "run/.nodetune-simkernel-pending.json"
_PENDING_NAME = os.path.basename(PENDING)
_STAGING_NAME = _PENDING_NAME + ".tmp"
_CPU_DIR = "sys/devices/system/cpu"

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


class SimKernel(object):
    """The root layer's write backend of a simulated node: its kernel, and its systemd (files under the root)."""

    def attach(self, root: Root) -> None:
        if root.is_host:
            raise RootError("the simulated kernel (nodetune_lab_backend: simulated) is for lab nodes; it never "
                            "writes to '/'", root.path)
        recover(root)

    def write(self, root: Root, rel: str, value: str) -> None:
        write(root, rel, value)

    def services(self, root: Root) -> SimServices:
        return SimServices(root)

    def boot_tools(self, root: Root) -> Callable[[List[str]], Tuple[int, str, str]]:
        """update-grub, grub-mkconfig and grubby of the simulated node (simbootloader.py), for bootloader.runner."""
        return simbootloader.tools(root)


BACKEND = SimKernel()


def install() -> None:
    """Every Root this process creates from now on is a simulated node (the lab's modules, before the production
    module's main)."""
    use_backend(BACKEND)


def sim_root(path: str) -> Root:
    """A simulated node's root, its writes answered by the simulated kernel."""
    return Root(path, backend=BACKEND)


def _err(code: int, why: str) -> OSError:
    return OSError(code, "%s (simulated kernel: %s)" % (os.strerror(code), why))


def _read(root: Root, rel: str) -> Optional[str]:
    """A file's text (resolved inside the root), None where absent or unreadable."""
    return root.read(rel, strip=False)


def _exists(root: Root, rel: str) -> bool:
    return root.exists(rel)


def _put(root: Root, rel: str, text: str) -> None:
    """Write one file in place, resolved inside the root; the last component is never followed as a link."""
    fd = os.open(root.real(rel), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


_RUN_DIRS: Dict[str, str] = {}  # root path -> its resolved run/ (made once per process and root)


def _run_file(root: Root, name: str) -> str:
    """Host path of the simulated kernel's own file ``run/<name>`` (the name itself is never followed)."""
    run = _RUN_DIRS.get(root.path)
    if run is None:
        run = root.real("run")
        os.makedirs(run, exist_ok=True)
        _RUN_DIRS[root.path] = run
    return os.path.join(run, name)


@contextlib.contextmanager
def _update_lock(root: Root) -> Iterator[None]:
    """The simulated kernel's own lock, an flock on ``run/`` itself (no file is created): a multi-file update and
    the replay of a killed one never overlap, in whichever processes they run. :func:`recover` runs when a Root
    attaches, before a run takes the node's lock, so without this a run starting beside another's update deleted
    that update's staging file (the concurrent apply/revert test failed so). A killed writer's flock is released
    with its process, so the replay goes ahead."""
    fd = os.open(os.path.dirname(_run_file(root, _STAGING_NAME)), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _put_all(root: Root, files: Sequence[Tuple[str, str]]) -> None:
    """Write several files as one update: staged in :data:`PENDING` first, so a kill leaves all of it to
    :func:`recover`, never a part."""
    if len(files) == 1:
        _put(root, files[0][0], files[0][1])
        return
    folders = dict((os.path.dirname(root.real(rel)), rel) for rel, _text in files)
    for folder, rel in folders.items():  # a path that cannot be written inside the root fails before any write
        if not os.path.isdir(folder):
            raise _err(errno.ENOENT, "%s resolves to no folder inside the root" % rel)
    staging, pending = _run_file(root, _STAGING_NAME), _run_file(root, _PENDING_NAME)
    with _update_lock(root):
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            os.write(fd, json.dumps([[rel, text] for rel, text in files]).encode("utf-8"))
        finally:
            os.close(fd)
        os.replace(staging, pending)
        try:
            for rel, text in files:
                _put(root, rel, text)
        except OSError:
            _unlink(pending)  # refused, and the caller sees the error: never replayed
            raise
        _unlink(pending)


def recover(root: Root) -> List[str]:
    """Finish the multi-file update a killed run left staged; returns the files written again."""
    if not root.isdir("run"):
        return []
    with _update_lock(root):
        return _replay(root)


def _replay(root: Root) -> List[str]:
    _unlink(_run_file(root, _STAGING_NAME))  # killed while staging: the update never began
    pending = _run_file(root, _PENDING_NAME)
    try:
        fd = os.open(pending, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return []
    except OSError:
        fd = -1  # a link: not one of ours
    files: List[Tuple[str, str]] = []
    if fd >= 0:
        try:
            with os.fdopen(fd, "rb") as handle:
                files = [(str(rel), str(value)) for rel, value in json.loads(handle.read().decode("utf-8"))]
        except (ValueError, TypeError):
            files = []  # staged whole and renamed, so never partial: not one of ours
    done = []
    for rel, value in files:
        try:
            _put(root, rel, value)
            done.append(rel)
        except (OSError, NodeFileError):
            pass  # it failed when staged too: that run reported it
    _unlink(pending)
    return done


def kernel_cpumask(cpus: List[int], nr_cpu_ids: int) -> str:
    """A cpumask as the kernel prints it (``%*pb``): ceil(nr_cpu_ids / 4) hex digits, a comma every 8 from the
    right (``0001`` on a 16-CPU node, ``ff,ffffffff`` for 40 CPUs)."""
    words = format_cpumask(cpus, nr_cpus=nr_cpu_ids).split(",")
    if len(words) == (nr_cpu_ids + 31) // 32:  # else a CPU beyond nr_cpu_ids: shown whole, not cut
        words[0] = words[0][-(((nr_cpu_ids % 32) + 3) // 4 or 8):]
    return ",".join(words)


def effective_cpu(irq: int, cpus: List[int]) -> Optional[int]:
    """The CPU the simulated IRQ matrix allocator picks from an affinity list (deterministic spread)."""
    if not cpus:
        return None
    return cpus[irq % len(cpus)]


def write(root, rel: str, value: str) -> None:
    """Write ``value`` to the simulated attribute ``rel`` (relative to the root) like the kernel would."""
    value = value.strip()
    current = _read(root, rel)
    if current is not None:
        active, options = parse_choice(current)
        if len(options) > 1 and "[" in current:
            if value not in options:
                raise _err(errno.EINVAL, "%r is not one of %s" % (value, " ".join(options)))
            _put(root, rel, " ".join("[%s]" % o if o == value else o for o in options) + "\n")
            match = _QUEUE.match(rel)
            if match and match.group(2) == "scheduler" and value != active:
                _reset_nr_requests(root, match.group(1), value)
            return
    for handler in (_cpu_online, _smt_control, _irq, _queue, _epp, _governor, _mtu, _dirty, _stored_sysctl,
                    _amdgpu, _power_cap):
        if handler(root, rel, value):
            return
    _put(root, rel, value + "\n")


# ------------------------------------------------------------------------------------------ CPU hotplug / SMT
def _online_set(root) -> List[int]:
    return parse_cpulist(_read(root, _CPU_DIR + "/online") or "")


def _set_online(root, cpus: List[int], also: Sequence[Tuple[str, str]] = ()) -> None:
    """The online and offline lists and each changed CPU's ``online`` (with ``also``), as one update."""
    present = parse_cpulist(_read(root, _CPU_DIR + "/present") or "") or sorted(cpus)
    before = set(_online_set(root))
    online = sorted(set(cpus))
    files = list(also)
    files.append((_CPU_DIR + "/online", format_cpulist(online) + "\n"))
    files.append((_CPU_DIR + "/offline", format_cpulist(sorted(set(present) - set(online))) + "\n"))
    # Only the CPUs whose state changes (as the kernel does): rewriting every cpuN/online on each of a few hundred
    # offlines made a simulated apply spend seconds in open(2).
    for cpu in sorted(before.symmetric_difference(online)):
        path = _CPU_DIR + "/cpu%d/online" % cpu
        if _exists(root, path):
            files.append((path, ("1" if cpu in online else "0") + "\n"))
    _put_all(root, files)


def _siblings(root, cpu: int) -> List[int]:
    text = _read(root, _CPU_DIR + "/cpu%d/topology/thread_siblings_list" % cpu)
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
        control = (_read(root, _CPU_DIR + "/smt/control") or "").strip()
        # An offline CPU has no topology/ on a real kernel: under SMT off such a CPU is a secondary thread
        # (primaries stay online), so the kernel refuses it (cpu_smt_allowed()).
        no_topology = not root.isdir(_CPU_DIR + "/cpu%d/topology" % cpu)
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
    current = (_read(root, rel) or "").strip()
    if current in ("notsupported", "notimplemented", "forceoff"):
        raise _err(errno.EPERM, "smt/control is %s and cannot be changed" % current)
    if value not in ("on", "off", "forceoff"):
        raise _err(errno.EINVAL, "smt/control takes on, off or forceoff")
    present = parse_cpulist(_read(root, _CPU_DIR + "/present") or "")
    secondaries = [c for c in present if min(_siblings(root, c)) != c]
    online = set(_online_set(root))
    if value in ("off", "forceoff"):
        online -= set(secondaries)
    else:
        online |= set(secondaries)
    files = [(rel, value + "\n")]
    active = _CPU_DIR + "/smt/active"
    if _exists(root, active):
        files.append((active, ("1" if value == "on" else "0") + "\n"))
    _set_online(root, sorted(online), also=files)
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
    nr_cpu_ids = _nr_cpu_ids(root, cpus)
    base = "proc/irq/%d/" % irq
    files = [(base + "smp_affinity_list", format_cpulist(cpus) + "\n"),
             (base + "smp_affinity", kernel_cpumask(cpus, nr_cpu_ids) + "\n")]
    if _remapped(root) and not _stays(root, irq, usable):
        files += _effective_files(root, irq, effective_cpu(irq, usable), nr_cpu_ids)
    # else the move waits for the IRQ's next interrupt (fire): kernel/irq/manage.c, irq_set_affinity_locked(), keeps
    # the mask pending (irqd_set_move_pending, desc->pending_mask) where the IRQ cannot move in process context, as
    # x86 MSI/IO-APIC vectors without interrupt remapping; kernel/irq/proc.c, show_irq_affinity(), prints the pending
    # mask in smp_affinity(_list), while effective_affinity(_list) keeps the old CPU until then.
    _put_all(root, files)
    return True


def fire(root: Root, irq: int) -> bool:
    """IRQ ``irq`` fires: a move pending since an affinity write takes effect, as the kernel does while handling
    the interrupt (kernel/irq/migration.c, irq_move_masked_irq(), from the x86 ack path). An IRQ that never fires
    never moves. Returns whether its effective CPU changed. The lab's stand-in for device traffic."""
    base = "proc/irq/%d/" % irq
    try:
        cpus = parse_cpulist(_read(root, base + "smp_affinity_list") or "")
        current = parse_cpulist(_read(root, base + "effective_affinity_list") or "")
    except ParseError:
        return False
    online = set(_online_set(root))
    usable = [c for c in cpus if c in online]
    if not usable or set(current) <= set(usable):
        return False
    _put_all(root, _effective_files(root, irq, effective_cpu(irq, usable), _nr_cpu_ids(root, cpus)))
    return True


def _stays(root, irq: int, usable: List[int]) -> bool:
    """Whether the IRQ keeps its CPU: arch/x86/kernel/apic/vector.c, assign_vector_locked(), does not move an IRQ
    whose current target CPU is online and in the new mask. So writing back a wider mask (a revert) leaves the IRQ
    where it was pinned: effective_affinity is the kernel's choice, not restored by restoring smp_affinity."""
    try:
        current = parse_cpulist(_read(root, "proc/irq/%d/effective_affinity_list" % irq) or "")
    except ParseError:
        return False
    return len(current) == 1 and current[0] in usable


def _nr_cpu_ids(root, cpus: List[int]) -> int:
    return max(parse_cpulist(_read(root, _CPU_DIR + "/possible") or "") or cpus) + 1


def _effective_files(root, irq: int, cpu: Optional[int], nr_cpu_ids: int) -> List[Tuple[str, str]]:
    base = "proc/irq/%d/" % irq
    files = []
    if cpu is not None and _exists(root, base + "effective_affinity_list"):
        files.append((base + "effective_affinity_list", "%d\n" % cpu))
    if cpu is not None and _exists(root, base + "effective_affinity"):
        files.append((base + "effective_affinity", kernel_cpumask([cpu], nr_cpu_ids) + "\n"))
    return files


def _remapped(root) -> bool:
    """Interrupt remapping (the spec's ``iommu``, on by default; simnode's ``IR-`` chips): an IRQ moves as soon as
    its affinity is written. A tree without the marker (hand-made in a test) moves at once too."""
    try:
        spec = json.loads(_read(root, MARKER) or "{}").get("spec") or {}
    except (ValueError, AttributeError):
        return True
    return spec.get("iommu", True) is not False


# ------------------------------------------------------------------------------------------ block queues
def _nr_tags(root, disk_dir: str) -> int:
    text = _read(root, disk_dir + "/mq/0/nr_tags")
    try:
        return int((text or "").strip())
    except ValueError:
        return DEFAULT_TAGS


def _reset_nr_requests(root, disk_dir: str, scheduler: str) -> None:
    tags = _nr_tags(root, disk_dir)
    value = tags if scheduler == "none" else 2 * min(tags, 128)
    _put(root, disk_dir + "/queue/nr_requests", "%d\n" % value)


def _queue(root, rel: str, value: str) -> bool:
    match = _QUEUE.match(rel)
    if not match or match.group(2) != "nr_requests":
        return False
    try:
        wanted = int(value)
    except ValueError:
        raise _err(errno.EINVAL, "nr_requests takes an integer") from None
    scheduler = parse_choice(_read(root, match.group(1) + "/queue/scheduler"))[0]
    limit = _nr_tags(root, match.group(1)) if scheduler in (None, "none") else SCHED_MAX_REQUESTS
    if wanted > limit:
        raise _err(errno.EINVAL, "nr_requests %d exceeds %d with scheduler %s" % (wanted, limit, scheduler))
    _put(root, rel, "%d\n" % max(wanted, 4))
    return True


# ------------------------------------------------------------------------------------------ cpufreq
def _epp(root, rel: str, value: str) -> bool:
    match = _EPP.match(rel)
    if not match:
        return False
    cpufreq = os.path.dirname(rel)
    governor = (_read(root, cpufreq + "/scaling_governor") or "").strip()
    status = (_read(root, _CPU_DIR + "/amd_pstate/status") or "").strip()
    if status == "active" and governor == "performance" and value not in ("performance", "0"):
        raise _err(errno.EBUSY, "EPP is locked to performance under the performance governor")
    available = (_read(root, cpufreq + "/energy_performance_available_preferences") or "").split()
    if available and value not in available:
        raise _err(errno.EINVAL, "EPP %r is not one of %s" % (value, " ".join(available)))
    _put(root, rel, value + "\n")
    return True


def _governor(root, rel: str, value: str) -> bool:
    match = _GOV.match(rel)
    if not match:
        return False
    cpufreq = os.path.dirname(rel)
    available = (_read(root, cpufreq + "/scaling_available_governors") or "").split()
    if available and value not in available:
        raise _err(errno.EINVAL, "governor %r is not one of %s" % (value, " ".join(available)))
    previous = (_read(root, rel) or "").strip()
    status = (_read(root, _CPU_DIR + "/amd_pstate/status") or "").strip()
    epp = cpufreq + "/energy_performance_preference"
    if status != "active" or not _exists(root, epp):
        _put(root, rel, value + "\n")
        return True
    # amd-pstate keeps the EPP it had (epp_cached) while the performance governor forces 0 ("performance"),
    # and writes it back when another governor takes over. The simulated node keeps it in a hidden file.
    cached = epp + EPP_CACHED_SUFFIX
    if value == "performance" and previous != "performance":
        _put_all(root, [(cached, _read(root, epp) or ""), (epp, "performance\n"), (rel, value + "\n")])
    elif value != "performance" and previous == "performance" and _exists(root, cached):
        _put_all(root, [(epp, _read(root, cached) or ""), (rel, value + "\n")])
        _unlink(os.path.join(root.real(os.path.dirname(cached)), os.path.basename(cached)))
    else:
        _put(root, rel, value + "\n")
    return True


# ------------------------------------------------------------------------------------------ net
def _mtu(root, rel: str, value: str) -> bool:
    match = _MTU.match(rel)
    if not match:
        return False
    netdir = os.path.dirname(rel)
    try:
        mtu = int(value)
    except ValueError:
        raise _err(errno.EINVAL, "mtu takes an integer") from None
    if (_read(root, netdir + "/type") or "").strip() == "32":
        mode = (_read(root, netdir + "/mode") or "datagram").strip()
        limit = 65520 if mode == "connected" else 4092
        if mtu > limit:
            raise _err(errno.EINVAL, "IPoIB %s mode allows at most MTU %d" % (mode, limit))
        if mode == "datagram" and mtu >= 68:
            mtu = min(mtu, _broadcast_group_mtu(root, os.path.basename(netdir)) - 4)
    if mtu < 68:
        raise _err(errno.EINVAL, "MTU below 68")
    _put(root, rel, "%d\n" % mtu)
    return True


def _broadcast_group_mtu(root, name: str) -> int:
    """The IB MTU of the interface's partition broadcast group (the spec's ``bcast_mtu``, set by the subnet
    manager): ipoib_change_mtu() sets min(broadcast-group MTU - 4, requested) in datagram mode and succeeds."""
    try:
        spec = json.loads(_read(root, MARKER) or "{}")
    except ValueError:
        return 4096
    for nic in (spec.get("spec") or {}).get("nics") or []:
        if nic.get("name") == name:
            return int(nic.get("bcast_mtu") or nic.get("ib_mtu") or 4096)
    return 4096


# ------------------------------------------------------------------------------------------ vm sysctls
# mm/page-writeback.c, each limit's ctl_table extra1/extra2: ratios 0-100, vm.dirty_bytes at least dirty_bytes_min
# (two 4 KiB pages), vm.dirty_background_bytes at least 1; anything else is EINVAL and changes nothing.
_DIRTY_RANGES = {
    "proc/sys/vm/dirty_ratio": (0, 100),
    "proc/sys/vm/dirty_bytes": (2 * 4096, (1 << 64) - 1),
    "proc/sys/vm/dirty_background_ratio": (0, 100),
    "proc/sys/vm/dirty_background_bytes": (1, (1 << 64) - 1),
}


def dirty_write(read: Callable[[str], Optional[str]], rel: str, value: str) -> Optional[List[Tuple[str, str]]]:
    """The files a write of ``value`` to a ``vm.dirty_*`` limit sets, as mm/page-writeback.c answers it (None where
    ``rel`` is no such limit): dirty_ratio_handler() and dirty_bytes_handler() zero the other form of the pair only
    when the value changes, the two background handlers on every write. ``read`` gives a file's current text. The
    runtime writes and the simulated boot's replay of sysctl.d (simnode) both go through here."""
    other = _DIRTY_PAIRS.get(rel)
    if other is None:
        return None
    value = value.strip()
    low, high = _DIRTY_RANGES[rel]
    if not re.match(r"^[0-9]+$", value) or not low <= int(value) <= high:
        raise _err(errno.EINVAL, "%s takes an integer from %d to %d" % (rel, low, high))
    number = int(value)
    files = [(rel, "%d\n" % number)]
    changed = (read(rel) or "").strip() != str(number)
    if (changed or "_background_" in rel) and read(other) is not None:
        files.append((other, "0\n"))
    return files


def _dirty(root, rel: str, value: str) -> bool:
    files = dirty_write(lambda path: _read(root, path), rel, value)
    if files is None:
        return False
    _put_all(root, files)
    return True


# ------------------------------------------------------------------------------------------ sysctls stored otherwise
PIPE_MAX_SIZE = "proc/sys/fs/pipe-max-size"
RR_TIMESLICE = "proc/sys/kernel/sched_rr_timeslice_ms"
PAGE_SIZE = 4096


def _stored_sysctl(root, rel: str, value: str) -> bool:
    """Sysctls whose handler stores another value than the one written (seen on kernel 6.18: pipe-max-size
    1000000 -> 1048576, 0 -> 4096; sched_rr_timeslice_ms 0 -> 100, -1 -> 100)."""
    if rel not in (PIPE_MAX_SIZE, RR_TIMESLICE):
        return False
    try:
        number = int(value)
    except ValueError:
        raise _err(errno.EINVAL, "%s takes an integer" % rel) from None
    if rel == PIPE_MAX_SIZE:
        # fs/pipe.c, do_proc_dopipe_max_size_conv() -> round_pipe_size(): above 2^31 EINVAL, below a page one page,
        # else rounded up to a power of two
        if number < 0 or number > 2 ** 31:
            raise _err(errno.EINVAL, "pipe-max-size %d is out of range" % number)
        stored = PAGE_SIZE if number < PAGE_SIZE else 1 << (number - 1).bit_length()
    else:
        # kernel/sched/rt.c, sched_rr_handler(): 0 or less resets to RR_TIMESLICE (100 ms), shown in ms
        stored = 100 if number <= 0 else number
    _put(root, rel, "%d\n" % stored)
    return True


# ------------------------------------------------------------------------------------------ amdgpu
# drivers/gpu/drm/amd/pm/amdgpu_pm.c (the level, pp_od_clk_voltage, power1_cap), swsmu/smu13/smu_v13_0_6_ppt.c
# (MI300X) and aldebaran_ppt.c (MI250), amdgpu_gfx.c / aqua_vanjaram.c (compute partition), amdgpu_gmc.c (memory
# partition). What the driver keeps in memory (the OD clock set before a commit, the requested NPS mode) sits in
# run/ (OD_CUSTOM, NPS_REQUEST); a reboot applies the NPS request (simnode.reboot: the driver hands it to the
# firmware when it unloads).
_AMDGPU = re.compile(r"^(sys/(?:bus/pci/devices/[^/]+|devices/.+))/(power_dpm_force_performance_level|"
                     r"pp_od_clk_voltage|current_compute_partition|current_memory_partition)$")
_POWER_CAP = re.compile(r"^(sys/.+/hwmon\d+)/power1_cap$")
_LEVELS = ("auto", "low", "high", "manual", "profile_exit", "profile_standard", "profile_min_sclk",
           "profile_min_mclk", "profile_peak", "perf_determinism")
# smu_v13_0_6_set_performance_level takes these three only (EINVAL for the others); aldebaran takes all
_SMU_13_0_6_LEVELS = ("auto", "manual", "perf_determinism")
_MI300_DEVICES = ("0x74a0", "0x74a1", "0x74a5", "0x74b5")
# the driver's memory, gone at a reboot like run/: each GPU's pstate custom min/max ("s" sets them, "c" uses them)
# and the hive's requested NPS mode
OD_CUSTOM = "run/.nodetune-simkernel-od-custom.json"
NPS_REQUEST = "run/.nodetune-simkernel-nps-request"
KFD_PROC = "sys/devices/virtual/kfd/kfd/proc"
COMPUTE_MODES = ("SPX", "DPX", "TPX", "QPX", "CPX")
MCLK_MHZ = (900, 1300)


def od_clk_text(sclk_min: int, sclk_max: int) -> str:
    """pp_od_clk_voltage as Linux 6.x prints it for SMU 13.0.6 (emit_clk_levels): the current soft minimum and maximum
    GFX clock, then the memory clock; no OD_RANGE."""
    return "OD_SCLK:\n0: %dMhz\n1: %dMhz\nOD_MCLK:\n0: %dMhz\n1: %dMhz\n" % ((sclk_min, sclk_max) + MCLK_MHZ)


def _mhz_levels(text: Optional[str]) -> List[int]:
    return [int(m) for m in re.findall(r"^\s*\d+:\s*(\d+)Mhz", text or "", re.M | re.I)]


def _gfx_table(root, dev: str) -> Tuple[int, int]:
    """The GFX DPM table's minimum and maximum (pp_dpm_sclk's first and last level)."""
    levels = _mhz_levels(_read(root, dev + "/pp_dpm_sclk"))
    if not levels:
        raise _err(errno.EINVAL, "no GFX clock table (pp_dpm_sclk)")
    return levels[0], levels[-1]


def _od_current(root, dev: str) -> Tuple[int, int]:
    text = _read(root, dev + "/pp_od_clk_voltage") or ""
    section = text.split("OD_MCLK:")[0]
    levels = _mhz_levels(section)
    return (levels[0], levels[-1]) if levels else _gfx_table(root, dev)


def _amdgpu(root, rel: str, value: str) -> bool:
    match = _AMDGPU.match(rel)
    if not match:
        return False
    dev, name = match.groups()
    {"power_dpm_force_performance_level": _perf_level, "pp_od_clk_voltage": _od_clk,
     "current_compute_partition": _compute_partition, "current_memory_partition": _memory_partition}[name](
        root, dev, rel, value)
    return True


def _perf_level(root, dev: str, rel: str, value: str) -> None:
    """amdgpu_set_power_dpm_force_performance_level: an unknown level or one the SMU refuses is EINVAL. Leaving
    perf_determinism puts the maximum GFX clock back to the table's; auto puts both back (set_performance_level)."""
    if value not in _LEVELS:
        raise _err(errno.EINVAL, "%r is not a performance level (%s)" % (value, ", ".join(_LEVELS)))
    if (_read(root, dev + "/device") or "").strip() in _MI300_DEVICES and value not in _SMU_13_0_6_LEVELS:
        raise _err(errno.EINVAL, "SMU 13.0.6 takes the levels %s only" % ", ".join(_SMU_13_0_6_LEVELS))
    previous = (_read(root, rel) or "").strip()
    if value == "profile_exit":
        if not previous.startswith("profile_"):
            raise _err(errno.EINVAL, "profile_exit is valid in a profile level only")
        value = "auto"
    low, high = _od_current(root, dev)
    table = _gfx_table(root, dev)
    if previous == "perf_determinism" and value != "perf_determinism":
        high = table[1]
    if value == "auto":
        low, high = table
    _put_all(root, [(rel, value + "\n"), (dev + "/pp_od_clk_voltage", od_clk_text(low, high))])


def _od_clk(root, dev: str, rel: str, value: str) -> None:
    """amdgpu_set_pp_od_clk_voltage -> smu_v13_0_6_usr_edit_dpm_table: one command per write, only in the manual and
    perf_determinism levels; "s 0|1 <MHz>" within the GFX table, "c" commits (in perf_determinism the maximum is
    the determinism clock), "r" restores the table."""
    if len(value) > 127:
        raise _err(errno.EINVAL, "more than 127 bytes")
    words = value.split()
    if not words or words[0] not in ("s", "c", "r"):
        raise _err(errno.EINVAL, "%r: the simulated SMU 13.0.6 takes 's', 'c' and 'r'" % value)
    if not all(re.match(r"^-?[0-9]+$", w) for w in words[1:]):
        raise _err(errno.EINVAL, "%r: parameters are integers" % value)
    level = (_read(root, dev + "/power_dpm_force_performance_level") or "").strip()
    if level not in ("manual", "perf_determinism"):
        raise _err(errno.EINVAL, "pp_od_clk_voltage is writable in the manual and perf_determinism levels only, "
                                 "not %s" % level)
    table = _gfx_table(root, dev)
    try:
        memory = dict(json.loads(_read(root, OD_CUSTOM) or "{}"))
    except ValueError:
        memory = {}
    custom = dict(memory.get(dev) or {})
    params = [int(w) for w in words[1:]]
    current = _od_current(root, dev)
    if words[0] == "s":
        if len(params) != 2 or params[0] not in (0, 1):
            raise _err(errno.EINVAL, "'s' takes an index (0 or 1) and a clock")
        if (params[0] == 0 and params[1] < table[0]) or (params[0] == 1 and params[1] > table[1]):
            raise _err(errno.EINVAL, "clock %d MHz is outside the GFX table %d-%d MHz" % ((params[1],) + table))
        custom["min" if params[0] == 0 else "max"] = params[1]
        memory[dev] = custom
        _put(root, OD_CUSTOM, json.dumps(memory, sort_keys=True))
        return
    if params:
        raise _err(errno.EINVAL, "%r takes no parameters" % words[0])
    if words[0] == "r":
        low, high = table
    else:
        low, high = custom.get("min") or current[0], custom.get("max") or current[1]
        if level == "perf_determinism":
            if not table[0] <= high <= table[1]:
                raise _err(errno.EINVAL, "invalid determinism clock %d MHz" % high)
            low = table[0]
        elif low >= high:
            raise _err(errno.EINVAL, "the minimum GFX clock must be below the maximum")
    _put(root, dev + "/pp_od_clk_voltage", od_clk_text(low, high))


def _power_cap(root, rel: str, value: str) -> bool:
    """amdgpu_hwmon_set_power_cap: kstrtou32 microwatts, truncated to watts; smu_set_power_limit refuses a limit
    outside [power1_cap_min, power1_cap_max] with EINVAL; 0 re-applies the current limit."""
    match = _POWER_CAP.match(rel)
    if not match:
        return False
    if not re.match(r"^[0-9]+$", value):
        raise _err(errno.EINVAL, "power1_cap takes microwatts as digits")
    if int(value) > (1 << 32) - 1:
        raise _err(errno.ERANGE, "power1_cap %s does not fit 32 bits" % value)
    watts = int(value) // 1000000
    high = int((_read(root, match.group(1) + "/power1_cap_max") or "0").strip()) // 1000000
    low = int((_read(root, match.group(1) + "/power1_cap_min") or "0").strip()) // 1000000
    if watts == 0:
        return True
    if not low <= watts <= high:
        raise _err(errno.EINVAL, "power limit %d W is out of range [%d,%d]" % (watts, low, high))
    _put(root, rel, "%d\n" % (watts * 1000000))
    return True


def _listed_modes(text: Optional[str]) -> List[str]:
    return [w.strip().upper() for w in (text or "").replace(",", " ").split()]


def kfd_processes(root) -> List[str]:
    """The processes that have /dev/kfd open (sys/class/kfd/kfd/proc/<pid>/, kfd_process.c)."""
    return sorted(name for name in root.listdir(KFD_PROC) if name.isdigit())


def _compute_partition(root, dev: str, rel: str, value: str) -> None:
    """amdgpu_gfx_set_compute_partition -> aqua_vanjaram_switch_partition_mode: the name is matched with
    strncasecmp, a mode the memory partition does not allow is EINVAL, the current one changes nothing, and any
    open KFD process makes the switch EBUSY (kgd2kfd_check_and_lock_kfd)."""
    mode = next((m for m in COMPUTE_MODES if value.upper().startswith(m)), None)
    if mode is None or mode not in _listed_modes(_read(root, dev + "/available_compute_partition")):
        raise _err(errno.EINVAL, "compute partition %r is not available" % value)
    if mode == (_read(root, rel) or "").strip():
        return
    pids = kfd_processes(root)
    if pids:
        raise _err(errno.EBUSY, "KFD processes are open (%s)" % ", ".join(pids))
    _put(root, rel, mode + "\n")


def _memory_partition(root, dev: str, rel: str, value: str) -> None:
    """current_memory_partition_store: a supported mode (strncasecmp) is stored as the hive's request and the file
    keeps showing the current mode ("NPS mode change requested, please remove and reload the driver"); the current
    mode itself is skipped, which leaves an earlier request in place; anything else is EINVAL."""
    supported = _listed_modes(_read(root, dev + "/available_memory_partition"))
    mode = next((m for m in supported if value.upper().startswith(m)), None)
    if mode is None:
        raise _err(errno.EINVAL, "memory partition %r is not supported" % value)
    if mode == (_read(root, rel) or "").strip():
        return
    _put(root, NPS_REQUEST, mode + "\n")


def nps_request(root) -> Optional[str]:
    """The memory partition requested since boot, which the next boot applies (None: none)."""
    text = _read(root, NPS_REQUEST)
    return text.strip() if text else None
