# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Simulated nodes: directory trees shaped like a real node's /sys, /proc and a little of /etc.

Every test, Molecule scenario and the default lab inventory run against such trees instead of a real machine, so
they must look like what a kernel really shows - to nodetune and to an independent reader (``lstopo --input``
builds the same CPUs, NUMA nodes and PCI locality from them). The generator therefore lays out the kernel's own
file shapes: PCI functions under ``sys/devices/pci0000:XX/<root port>/[<switch>/]<device>`` with relative
``sys/bus/pci/devices`` links, a binary ``config`` space (hwloc reads bridge bus ranges and link speeds from it),
kernel hex masks in 32-bit words, ``/proc/interrupts`` with one column per online CPU, managed NVMe vectors
spread the way ``group_cpus_evenly()`` does, mlx5 completion vectors placed with ``cpumask_local_spread()``.

Runtime and persistent state are kept apart as on a real machine: ``sys/``, ``proc/`` and ``run/`` are runtime
(:func:`reboot` puts every file there back to its boot value), ``etc/``, ``usr/`` and ``var/`` persist. A reboot
also does what the boot itself does with persistent files: systemd-sysctl applies ``etc/sysctl.d``, udev applies
``ATTR{}`` assignments of ``etc/udev/rules.d`` to block devices, ``options nvme`` in ``etc/modprobe.d`` sets the
NVMe queue count and depth at driver load, and irqbalance runs iff it is enabled.

Simulated service state (the representation ``simservices.py`` reads and writes):
``usr/lib/systemd/system/irqbalance.service`` = installed; the symlink
``etc/systemd/system/multi-user.target.wants/irqbalance.service`` = enabled; the link
``run/systemd/units/invocation:irqbalance.service`` (as systemd keeps it) = running, together with a
``proc/<pid>/{comm,cmdline}`` process entry. A role stops it by removing the ``run/`` link (and may remove the
process entry) and disables it by removing the ``wants`` link; the next :func:`reboot` starts it again iff the
``wants`` link exists. Any other enabled service (a ``slurmd.service`` a test installs) is started at boot too, with
a ``proc/<pid>/limits`` carrying the limit systemd gave it, and the manager's loaded limits are kept in
``run/systemd/.nodetune-sim-manager.json`` (simservices.py: daemon-reload, daemon-reexec, restart).

The boot loader (simbootloader.py): a Debian-family node has ``/etc/default/grub``, ``/boot/grub/grub.cfg`` and
``update-grub``/``grub-mkconfig`` stand-ins, a RHEL-family node BootLoaderSpec entries (the kernel's and a rescue
entry) and ``grubby``; the lab's backend runs those tools' effects on the files. :func:`reboot` boots the default
entry, so ``/proc/cmdline`` (and what the boot derives from it: ``isolcpus=``, ACS, the IOMMU groups' type) follows
what the boot loader was given; while the entry is as built, the spec's ``kernel.cmdline`` as it is.

The tree's root holds ``.nodetune-simnode.json`` (the normalised spec), for this package only. ``simkernel.py``
emulates the kernel side effects of writes for a Root given its backend explicitly (the lab says so; the marker
never does).

The package, by stage: spec.py (the spec and its validation; the spec format is documented there) with
catalogue.py (the models a spec names), machine.py (CPUs, PCI functions and IRQs derived from a spec), tree.py (a
tree in memory and its writing), emit_system.py and emit_devices.py (the files of ``sys/`` and ``proc/``),
persistent.py (``etc/``, ``usr/``, ``var/``), boot.py (what a boot makes of the tree, :func:`reboot`), marker.py
(the marker and the destination checks), lifecycle.py (:func:`build`, :func:`remove`, :func:`inject_faults`, ...)
and running.py (KFD processes, late mlx5 vectors). The names other code uses are imported here, so
``simnode.build(...)`` works as it always did.
"""

from __future__ import annotations

from ansible_collections.nodetune.lab.plugins.module_utils.simnode.boot import (
    FIRMWARE,
    PERSISTENT_DIRS,
    RUNTIME_DIRS,
    reboot,
)
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.catalogue import (
    CPU_MODELS,
    CPUFREQ_GOVERNORS,
    CPUIDLE_STATES,
    EPP_VALUES,
    GPU_MODELS,
    IB_ERROR_COUNTERS,
    NIC_MODELS,
    NVME_MODELS,
    OS_FAMILIES,
    PLATFORMS,
    SYSCTL_DEFAULTS,
    ZEN3_FLAGS,
    ZEN4_FLAGS,
)
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.emit_devices import (
    ACS_CAP_ID,
    ACS_CAPABILITY,
    GFX_MIN_MHZ,
    MEMORY_PARTITIONS,
    PARTITIONS,
    compute_partitions,
    partition_count,
)
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.lifecycle import (
    build,
    inject_faults,
    plan,
    remove,
    state_of,
    summary,
)
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.marker import (
    GENERATOR,
    GENERATOR_VERSION,
    MARKER,
    SimNodeError,
    is_simnode,
    read_marker,
)
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.running import (
    start_kfd_process,
    stop_kfd_process,
    use_comp_vectors,
)
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.spec import (
    FAULT_DEFAULTS,
    LATE_COMP_VECTORS,
    SpecError,
    load_spec,
)

__all__ = [
    "ACS_CAPABILITY",
    "ACS_CAP_ID",
    "CPUFREQ_GOVERNORS",
    "CPUIDLE_STATES",
    "CPU_MODELS",
    "EPP_VALUES",
    "FAULT_DEFAULTS",
    "FIRMWARE",
    "GENERATOR",
    "GENERATOR_VERSION",
    "GFX_MIN_MHZ",
    "GPU_MODELS",
    "IB_ERROR_COUNTERS",
    "LATE_COMP_VECTORS",
    "MARKER",
    "MEMORY_PARTITIONS",
    "NIC_MODELS",
    "NVME_MODELS",
    "OS_FAMILIES",
    "PARTITIONS",
    "PERSISTENT_DIRS",
    "PLATFORMS",
    "RUNTIME_DIRS",
    "SYSCTL_DEFAULTS",
    "SimNodeError",
    "SpecError",
    "ZEN3_FLAGS",
    "ZEN4_FLAGS",
    "build",
    "compute_partitions",
    "inject_faults",
    "is_simnode",
    "load_spec",
    "partition_count",
    "plan",
    "read_marker",
    "reboot",
    "remove",
    "start_kfd_process",
    "state_of",
    "stop_kfd_process",
    "summary",
    "use_comp_vectors",
]
