# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The emitters of the system-wide files: ``sys/devices/system/cpu`` and ``node``, ``/proc/irq`` and
``/proc/interrupts``, the rest of ``/proc`` (cmdline, sysctls, meminfo, cpuinfo, the processes systemd started),
module parameters and DMI, and ``run/`` (systemd's unit links and the manager's state). Each writes what the
kernel shows for a :class:`_Machine` into a :class:`_Tree`."""

from __future__ import annotations

import json
import re
from typing import List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.parse import (
    ParseError,
    format_cpulist,
    parse_cpulist,
)
from ansible_collections.nodetune.lab.plugins.module_utils import simservices
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.catalogue import (
    CPUFREQ_GOVERNORS,
    CPUIDLE_STATES,
    EPP_VALUES,
    SYSCTL_DEFAULTS,
    ZEN3_FLAGS,
    ZEN4_FLAGS,
)
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.machine import _Cpus, _Machine
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.tree import _stable, _Tree


def _emit_cpus(tree: _Tree, m: _Machine) -> None:
    spec = m.spec
    cpu = spec["cpu"]
    cpus = m.cpus
    base = "sys/devices/system/cpu"
    everyone = format_cpulist(range(cpus.count))
    tree.f(base + "/possible", everyone)
    tree.f(base + "/present", everyone)
    tree.f(base + "/online", format_cpulist(cpus.online))
    tree.f(base + "/offline", format_cpulist(sorted(set(range(cpus.count)) - cpus.online_set)))
    tree.f(base + "/kernel_max", 8191)
    isolated, nohz = _isolation(spec["kernel"]["cmdline"], cpus.count)
    tree.f(base + "/isolated", format_cpulist(isolated))
    tree.f(base + "/nohz_full", format_cpulist(nohz) if nohz else "(null)")
    smt = cpu["smt"]
    tree.f(base + "/smt/control", smt, 0o644)
    tree.f(base + "/smt/active", 1 if smt == "on" else 0)
    freq = cpu["cpufreq"]
    driver = freq["driver"]
    if driver.startswith("amd-pstate"):
        tree.f(base + "/amd_pstate/status", freq["amd_pstate_mode"], 0o644)
        tree.f(base + "/amd_pstate/prefcore", "enabled")
    if driver == "acpi-cpufreq":
        tree.f(base + "/cpufreq/boost", 1 if freq["boost"] else 0, 0o644)
    idle = cpu["cpuidle"]
    if idle["driver"] != "none":
        tree.f(base + "/cpuidle/current_driver", idle["driver"])
        tree.f(base + "/cpuidle/current_governor", "menu", 0o644)
        tree.f(base + "/cpuidle/current_governor_ro", "menu")
        tree.f(base + "/cpuidle/available_governors", "ladder menu teo")
    cache = cpu["cache_kb"]
    mhz = cpu["mhz"]
    cache_levels = (("index0", 1, "Data", "%dK" % cache["l1d"]), ("index1", 1, "Instruction", "%dK" % cache["l1i"]),
                    ("index2", 2, "Unified", "%dK" % cache["l2"]), ("index3", 3, "Unified", "%dK" % cache["l3"]))
    governors = " ".join(CPUFREQ_GOVERNORS.get(driver, []))
    idle_states = [(index, name) + CPUIDLE_STATES[name] for index, name in enumerate(idle["states"])]
    khz = (mhz["min"] * 1000, mhz["base"] * 1000, mhz["max"] * 1000)
    for cid in range(cpus.count):
        d = "%s/cpu%d" % (base, cid)
        online = cid in cpus.online_set
        if cid:
            tree.f(d + "/online", 1 if online else 0, 0o644)
        tree.link("%s/node%d" % (d, cpus.node[cid]), "sys/devices/system/node/node%d" % cpus.node[cid])
        if online:
            t = d + "/topology"
            # The kernel drops offline CPUs from sibling, package and cache masks (remove_siblinginfo), so on a
            # node booted with nosmt every online CPU reports itself as its only thread.
            sibs = cpus.online_only(cpus.siblings(cid))
            pkg = cpus.online_only(cpus.package_cpus[cpus.socket[cid]])
            tree.f(t + "/physical_package_id", cpus.socket[cid])
            tree.f(t + "/core_id", cpus.core[cid])
            tree.f(t + "/die_id", 0)
            # The classic names only (kernels also show core_cpus/package_cpus/die_cpus aliases): every reader,
            # hwloc included, falls back to these, and a 384-CPU tree stays small enough to build in a second.
            tree.f(t + "/thread_siblings", cpus.mask(sibs))
            tree.f(t + "/thread_siblings_list", _list_cached(cpus, sibs))
            tree.f(t + "/core_siblings", cpus.mask(pkg))
            tree.f(t + "/core_siblings_list", _list_cached(cpus, pkg))
            for index, level, kind, size in cache_levels if cpu["caches"] else ():
                c = "%s/cache/%s" % (d, index)
                shared = sibs if level < 3 else cpus.online_only(cpus.l3_cpus[cpus.l3[cid]])
                tree.f(c + "/level", level)
                tree.f(c + "/type", kind)
                tree.f(c + "/size", size)
                tree.f(c + "/shared_cpu_map", cpus.mask(shared))
                tree.f(c + "/shared_cpu_list", _list_cached(cpus, shared))
        if driver != "none":
            p = "%s/cpufreq/policy%d" % (base, cid)
            if online:
                tree.link(d + "/cpufreq", p)
            tree.f(p + "/affected_cpus", cid)
            tree.f(p + "/related_cpus", cid)
            tree.f(p + "/scaling_driver", driver)
            tree.f(p + "/scaling_available_governors", governors)
            tree.f(p + "/scaling_governor", freq["governor"], 0o644)
            if driver == "acpi-cpufreq":
                tree.f(p + "/cpuinfo_min_freq", khz[0])
                tree.f(p + "/cpuinfo_max_freq", khz[1])
                tree.f(p + "/scaling_min_freq", khz[0], 0o644)
                tree.f(p + "/scaling_max_freq", khz[1], 0o644)
            else:
                low = 400000 if driver == "amd-pstate-epp" else khz[0]
                tree.f(p + "/cpuinfo_min_freq", low)
                tree.f(p + "/cpuinfo_max_freq", khz[2])
                tree.f(p + "/scaling_min_freq", low, 0o644)
                tree.f(p + "/scaling_max_freq", khz[2], 0o644)
                tree.f(p + "/amd_pstate_max_freq", khz[2])
            tree.f(p + "/scaling_cur_freq", khz[0] + (cid * 7919) % (khz[1] - khz[0] + 1))
            if driver == "amd-pstate-epp":
                tree.f(p + "/energy_performance_preference", freq["epp"], 0o644)
                tree.f(p + "/energy_performance_available_preferences", " ".join(EPP_VALUES))
        if idle_states and online:
            for index, name, desc, latency, _residency in idle_states:
                s = "%s/cpuidle/state%d" % (d, index)
                tree.f(s + "/name", name)
                tree.f(s + "/desc", desc)
                tree.f(s + "/latency", latency)
                tree.f(s + "/disable", 0, 0o644)


def _list_cached(cpus: _Cpus, members: List[int]) -> str:
    key = ("list",) + tuple(members)
    text = cpus._mask_cache.get(key)  # type: ignore[arg-type]
    if text is None:
        text = format_cpulist(members)
        cpus._mask_cache[key] = text  # type: ignore[index]
    return text


def _isolation(cmdline: str, count: int) -> Tuple[List[int], List[int]]:
    """isolcpus= and nohz_full= of the command line, as the kernel reports them."""
    isolated: List[int] = []
    nohz: List[int] = []
    for token in cmdline.split():
        key, _sep, value = token.partition("=")
        try:
            if key == "isolcpus":
                parts = value.split(",")
                while parts and re.match(r"^[a-z_]+$", parts[0]):
                    parts.pop(0)
                isolated = [c for c in parse_cpulist(",".join(parts)) if c < count]
            elif key == "nohz_full":
                nohz = [c for c in parse_cpulist(value) if c < count]
        except ParseError:
            continue
    return isolated, nohz


def _emit_nodes(tree: _Tree, m: _Machine) -> None:
    cpus = m.cpus
    base = "sys/devices/system/node"
    nodes = format_cpulist(range(cpus.nodes))
    for name in ("possible", "online", "has_cpu", "has_memory", "has_normal_memory"):
        tree.f("%s/%s" % (base, name), nodes)
    per_node_kb = m.spec["memory_gb"] * 1024 * 1024 // cpus.nodes
    total_kb = per_node_kb * 99 // 100
    for n in range(cpus.nodes):
        d = "%s/node%d" % (base, n)
        members = cpus.node_cpus[n]
        tree.f(d + "/cpulist", format_cpulist(members))
        tree.f(d + "/cpumap", cpus.mask(members))
        tree.f(d + "/distance", " ".join(str(x) for x in cpus.distance[n]))
        free = total_kb * 9 // 10
        lines = [("MemTotal:", total_kb), ("MemFree:", free), ("MemUsed:", total_kb - free),
                 ("Active:", total_kb // 40), ("Inactive:", total_kb // 30), ("FilePages:", total_kb // 25),
                 ("AnonPages:", total_kb // 50), ("Shmem:", total_kb // 2000), ("KernelStack:", 30000),
                 ("PageTables:", 20000), ("Slab:", total_kb // 200), ("AnonHugePages:", total_kb // 100)]
        text = "".join("Node %d %-15s %8d kB\n" % (n, k, v) for k, v in lines)
        text += "Node %d HugePages_Total:     0\nNode %d HugePages_Free:      0\nNode %d HugePages_Surp:      0\n" \
            % (n, n, n)
        tree.raw(d + "/meminfo", text.encode())
        for size in ("2048kB", "1048576kB"):
            h = "%s/hugepages/hugepages-%s" % (d, size)
            tree.f(h + "/nr_hugepages", 0, 0o644)
            tree.f(h + "/free_hugepages", 0)
            tree.f(h + "/surplus_hugepages", 0)
        for cid in members:
            tree.link("%s/cpu%d" % (d, cid), "sys/devices/system/cpu/cpu%d" % cid)


def _interrupts_row(prec: int, number: int, counts: str, chip: str, hwirq: str, flow: str, name: str) -> str:
    """One IRQ's row of /proc/interrupts (kernel/irq/proc.c, show_interrupts())."""
    return "%*d: %s %8s %*s-%-8s  %s" % (prec, number, counts, chip, prec, hwirq, flow, name)


def _emit_irqs(tree: _Tree, m: _Machine) -> None:
    cpus = m.cpus
    managed_mode = 0o444 if m.version >= (6, 12) else 0o644
    everyone = list(range(cpus.count))
    tree.f("proc/irq/default_smp_affinity", cpus.mask(everyone), 0o644)
    for irq in m.irqs:
        d = "proc/irq/%d" % irq.number
        mode = managed_mode if irq.managed else 0o644
        tree.f(d + "/smp_affinity", cpus.mask(irq.affinity), mode)
        tree.f(d + "/smp_affinity_list", _list_cached(cpus, irq.affinity), mode)
        tree.f(d + "/effective_affinity", cpus.mask([irq.effective]))
        tree.f(d + "/effective_affinity_list", irq.effective)
        tree.f(d + "/node", irq.node if irq.node >= 0 else 0)
        if irq.name and "/" not in irq.name:  # register_handler_proc(): one directory per named action
            tree.dir(d + "/" + irq.name)
    # /proc/interrupts: one column per online CPU; the count lands on the effective CPU.
    online = cpus.online
    column = dict((cpu, index) for index, cpu in enumerate(online))
    # show_interrupts(): the number column is as wide as nr_irqs needs (x86 sizes it by CPU count).
    nr_irqs = max([irq.number + 1 for irq in m.irqs] + [256 + 8 * cpus.count])
    prec, limit = 3, 1000
    while prec < 10 and limit <= nr_irqs:
        prec += 1
        limit *= 10
    zero = "%10d " % 0
    lines = [" " * (prec + 8) + "".join("CPU%-8d" % c for c in online)]
    for irq in sorted(m.irqs, key=lambda i: i.number):
        where = column.get(irq.effective, 0)
        counts = zero * where + "%10d " % irq.count + zero * (len(online) - where - 1)
        lines.append(_interrupts_row(prec, irq.number, counts, irq.chip, irq.hwirq, irq.flow, irq.name))
    arch = [("NMI", "Non-maskable interrupts", 1), ("LOC", "Local timer interrupts", 1000),
            ("SPU", "Spurious interrupts", 0), ("PMI", "Performance monitoring interrupts", 1),
            ("IWI", "IRQ work interrupts", 0), ("RTR", "APIC ICR read retries", 0),
            ("RES", "Rescheduling interrupts", 50), ("CAL", "Function call interrupts", 20),
            ("TLB", "TLB shootdowns", 10), ("TRM", "Thermal event interrupts", 0),
            ("THR", "Threshold APIC interrupts", 0), ("DFR", "Deferred Error APIC interrupts", 0),
            ("MCE", "Machine check exceptions", 0), ("MCP", "Machine check polls", 3)]
    for label, text, scale in arch:
        counts = "".join("%10d " % (scale * (1000 + (cpu * 37) % 500)) for cpu in online) if scale else \
            zero * len(online)
        lines.append("%*s: %s  %s" % (prec, label, counts, text))
    lines.append("%s: %10d" % ("ERR".rjust(prec), 0))
    lines.append("%s: %10d" % ("MIS".rjust(prec), 0))
    for label, text in (("PIN", "Posted-interrupt notification event"), ("NPI", "Nested posted-interrupt event"),
                        ("PIW", "Posted-interrupt wakeup event")):
        lines.append("%*s: %s  %s" % (prec, label, zero * len(online), text))
    tree.raw("proc/interrupts", ("\n".join(lines) + "\n").encode())


BOOT_ID = "proc/sys/kernel/random/boot_id"


def next_boot_id(hostname: str, previous: Optional[str]) -> str:
    """The boot_id of the boot after ``previous`` (None: the first boot of a built tree), as the kernel prints it: a
    version 4 UUID (drivers/char/random.c draws it at random; here it follows from the last one, so that rebuilds
    and reboots are reproducible)."""
    seed = "%s/boot/%s" % (hostname, previous or "first")
    high, low = _stable(seed, 64), _stable(seed + "/low", 64)
    return "%08x-%04x-4%03x-%x%03x-%012x" % (high >> 32, (high >> 16) & 0xFFFF, high & 0xFFF,
                                             8 | (low >> 62), (low >> 48) & 0xFFF, low & 0xFFFFFFFFFFFF)


def _emit_proc(tree: _Tree, m: _Machine) -> None:
    spec = m.spec
    cpus = m.cpus
    cpu = spec["cpu"]
    tree.f("proc/cmdline", spec["kernel"]["cmdline"])
    tree.f("proc/version", "Linux version %s (nodetune-simnode@%s) (gcc (GCC) 13.3.0, GNU ld 2.42) #1 SMP "
                           "PREEMPT_DYNAMIC" % (m.release, spec["hostname"]))
    values = dict(SYSCTL_DEFAULTS)
    values.update(spec["sysctl"])
    for key, value in values.items():
        tree.f("proc/sys/" + key.replace(".", "/"), value, 0o644)
    tree.f("proc/sys/kernel/osrelease", m.release)
    # drivers/char/random.c: boot_id is a random UUID drawn once per boot (proc_do_uuid), read-only; a node's
    # structure cache is discarded when it changes (discover/structure.BOOT_ID). One per simulated boot.
    tree.f(BOOT_ID, m.boot.get("boot_id") or next_boot_id(spec["hostname"], None), 0o444)
    tree.f("proc/sys/kernel/hostname", spec["hostname"], 0o644)
    tree.f("proc/sys/kernel/pid_max", max(32768, 1024 * cpus.count), 0o644)
    total_kb = spec["memory_gb"] * 1024 * 1024 * 99 // 100
    meminfo = [("MemTotal:", total_kb), ("MemFree:", total_kb * 9 // 10), ("MemAvailable:", total_kb * 19 // 20),
               ("Buffers:", 812345), ("Cached:", total_kb // 25), ("SwapCached:", 0), ("SwapTotal:", 8388604),
               ("SwapFree:", 8388604), ("Dirty:", 312), ("Writeback:", 0), ("AnonPages:", total_kb // 50),
               ("Shmem:", total_kb // 2000), ("Slab:", total_kb // 200), ("HugePages_Total:", 0),
               ("HugePages_Free:", 0), ("Hugepagesize:", 2048)]
    tree.raw("proc/meminfo", "".join("%-16s%8d kB\n" % kv if not kv[0].startswith("HugePages_")
                                     else "%-16s%8d\n" % kv for kv in meminfo).encode())
    flags = ZEN4_FLAGS if cpu["model_id"] >= 0x10 else ZEN3_FLAGS
    bogomips = "%.2f" % (cpu["mhz"]["base"] * 2 * 0.9984)
    apic_bits = 1
    while (1 << apic_bits) < cpus.cores * cpus.threads:
        apic_bits += 1
    blocks = []
    for cid in cpus.online:
        apic = (cpus.socket[cid] << apic_bits) | (cpus.core[cid] * cpus.threads + cpus.thread[cid])
        blocks.append(
            "processor\t: %d\nvendor_id\t: AuthenticAMD\ncpu family\t: %d\nmodel\t\t: %d\nmodel name\t: %s\n"
            "stepping\t: %d\nmicrocode\t: %s\ncpu MHz\t\t: %d.000\ncache size\t: %d KB\nphysical id\t: %d\n"
            "siblings\t: %d\ncore id\t\t: %d\ncpu cores\t: %d\napicid\t\t: %d\ninitial apicid\t: %d\nfpu\t\t: yes\n"
            "fpu_exception\t: yes\ncpuid level\t: 16\nwp\t\t: yes\nflags\t\t: %s\n"
            "bugs\t\t: sysret_ss_attrs spectre_v1 spectre_v2 spec_store_bypass srso\nbogomips\t: %s\n"
            "TLB size\t: 2560 4K pages\nclflush size\t: 64\ncache_alignment\t: 64\n"
            "address sizes\t: 52 bits physical, 57 bits virtual\n"
            "power management: ts ttp tsc_freq hwpstate cpb eff_freq_ro [13] [14]\n\n"
            % (cid, cpu["family"], cpu["model_id"], cpu["model_name"], cpu["stepping"], cpu["microcode"],
               cpu["mhz"]["base"], cpu["cache_kb"]["l2"], cpus.socket[cid],
               len([c for c in cpus.package_cpus[cpus.socket[cid]] if c in cpus.online_set]), cpus.core[cid],
               cpus.cores, apic, apic, flags, bogomips))
    tree.raw("proc/cpuinfo", "".join(blocks).encode())
    if m.boot.get("irqbalance_running"):
        pid = 1000 + _stable(spec["hostname"] + "irqbalance") % 3000
        tree.f("proc/%d/comm" % pid, "irqbalance")
        tree.raw("proc/%d/cmdline" % pid, b"/usr/sbin/irqbalance\x00--foreground\x00")
        tree.f("proc/%d/status" % pid, "Name:\tirqbalance\nState:\tS (sleeping)\nPid:\t%d\nPPid:\t1" % pid)
    # the other services systemd started at boot, each with the limits it gave their process (simservices.py)
    for unit, loaded in sorted(((m.boot.get("systemd") or {}).get("units") or {}).items()):
        for name, text in simservices.process_files(unit, loaded["MainPID"], loaded["LimitMEMLOCK"]).items():
            tree.raw("proc/%d/%s" % (loaded["MainPID"], name), text.encode(), 0o444)


def _emit_misc_sys(tree: _Tree, m: _Machine) -> None:
    spec = m.spec
    tree.f("sys/module/pcie_aspm/parameters/policy", "[default] performance powersave powersupersave", 0o644)
    params = m.boot.get("nvme", {})
    tree.f("sys/module/nvme/parameters/io_queue_depth", params.get("io_queue_depth", 1024))
    tree.f("sys/module/nvme/parameters/write_queues", params.get("write_queues", 0))
    tree.f("sys/module/nvme/parameters/poll_queues", params.get("poll_queues", 0))
    tree.f("sys/module/nvme_core/parameters/multipath", "N")
    tree.f("sys/module/nvme_core/parameters/io_timeout", 30, 0o644)
    if m.gpus:
        tree.f("sys/module/amdgpu/parameters/ppfeaturemask", "0xfff7bfff")
        tree.f("sys/module/amdgpu/version", "")
    if m.ib_nics:
        tree.f("sys/module/ib_ipoib/parameters/send_queue_size", 256)
        tree.f("sys/module/ib_ipoib/parameters/recv_queue_size", 512)
        tree.f("sys/module/mlx5_core/version", "")
    tree.f("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never", 0o644)
    tree.f("sys/kernel/mm/transparent_hugepage/defrag", "always defer defer+madvise [madvise] never", 0o644)
    dmi = "sys/devices/virtual/dmi/id"
    tree.f(dmi + "/sys_vendor", spec["platform"]["vendor"])
    tree.f(dmi + "/product_name", spec["platform"]["product"])
    tree.f(dmi + "/board_vendor", spec["platform"]["vendor"])
    tree.f(dmi + "/bios_vendor", "American Megatrends International, LLC.")
    tree.f(dmi + "/bios_version", "2.7")
    # the board's UUID, readable by root only as on a real node: from the host name, so two nodes differ
    uuid = "%016x%016x" % (_stable(spec["hostname"] + "/product_uuid", 64), _stable(spec["hostname"] + "/uuid", 64))
    tree.f(dmi + "/product_uuid", "-".join((uuid[:8], uuid[8:12], uuid[12:16], uuid[16:20], uuid[20:])), 0o400)
    tree.link("sys/class/dmi/id", dmi)


def _emit_run(tree: _Tree, m: _Machine) -> None:
    tree.dir("run/systemd/units")
    if m.boot.get("irqbalance_running"):
        invocation = "%032x" % _stable(m.spec["hostname"] + "/invocation", 64)
        tree.abslink("run/systemd/units/invocation:irqbalance.service", invocation)
    for unit in m.boot.get("timers", []):  # the id simservices.SimServices.invocation_id gives a started unit
        tree.abslink("run/systemd/units/invocation:" + unit,
                     "%032x" % _stable("%s/invocation/%s" % (m.spec["hostname"], unit), 64))
    manager = m.boot.get("systemd")
    if manager is not None:  # the limits the manager loaded at boot (simservices.MANAGER_STATE)
        for unit in sorted(manager["units"]):
            tree.abslink("run/systemd/units/invocation:" + unit,
                         "%032x" % _stable("%s/invocation/%s" % (m.spec["hostname"], unit), 64))
        tree.raw(simservices.MANAGER_STATE, (json.dumps(manager, sort_keys=True, indent=1) + "\n").encode(), 0o644)
