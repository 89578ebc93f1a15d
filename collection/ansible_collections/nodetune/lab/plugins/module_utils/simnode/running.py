# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What happens on a running simulated node between boots, as the kernel shows it: a process opens /dev/kfd
(:func:`start_kfd_process`, :func:`stop_kfd_process`) and an mlx5 user makes the driver create completion
vectors on first use (:func:`use_comp_vectors`). A reboot undoes both (runtime state)."""

from __future__ import annotations

import os
import shutil
import stat
from typing import Any, Dict, Iterable, List, Optional

from ansible_collections.nodetune.instinct.plugins.module_utils.discover.irq import parse_interrupts
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import parse_cpulist
from ansible_collections.nodetune.lab.plugins.module_utils.simkernel import KFD_PROC
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.boot import _read_boot_state, _read_text
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.catalogue import NIC_MODELS
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.emit_system import _interrupts_row
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.machine import _Machine
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.marker import (
    MARKER,
    SimNodeError,
    _check_dest,
    read_marker,
)
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.spec import SpecError, _show, load_spec
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.tree import _Tree


# ============================================================================================ KFD processes
def start_kfd_process(dest: str, pid: int, bdfs: Iterable[str] = ()) -> str:
    """A process that opened /dev/kfd, as a ROCm program does: ``sys/class/kfd/kfd/proc/<pid>/`` with a
    ``vram_<gpu_id>`` file per GPU it uses (kfd_process.c, kfd_procfs_add_sysfs_files). It lasts until
    :func:`stop_kfd_process` or a reboot. Returns the folder (relative to the root)."""
    real = _check_dest(dest, must_exist=True)
    topology = os.path.join(real, "sys/devices/virtual/kfd/kfd/topology/nodes")
    ids = {}
    for node in os.listdir(topology):
        props = {}
        with open(os.path.join(topology, node, "properties"), encoding="utf-8") as handle:
            for line in handle:
                key, _sep, value = line.partition(" ")
                props[key] = int(value)
        location = props.get("location_id", 0)
        bdf = "%04x:%02x:%02x.0" % (props.get("domain", 0), location >> 8, (location >> 3) & 0x1f)
        with open(os.path.join(topology, node, "gpu_id"), encoding="utf-8") as handle:
            ids.setdefault(bdf, []).append(handle.read().strip())
    folder = "%s/%d" % (KFD_PROC, int(pid))
    os.makedirs(os.path.join(real, folder), exist_ok=True)
    with open(os.path.join(real, folder, "pasid"), "w", encoding="utf-8") as handle:
        handle.write("%d\n" % (0x8000 + int(pid) % 0x8000))
    for bdf in bdfs:
        if bdf not in ids:
            raise SimNodeError("no KFD GPU at %s (GPUs: %s)" % (bdf, ", ".join(sorted(ids))))
        for gpu_id in ids[bdf]:
            with open(os.path.join(real, folder, "vram_" + gpu_id), "w", encoding="utf-8") as handle:
                handle.write("0\n")
    return folder


def stop_kfd_process(dest: str, pid: int) -> bool:
    """The process closed /dev/kfd: its proc folder goes. False where there was none."""
    real = _check_dest(dest, must_exist=True)
    folder = os.path.join(real, KFD_PROC, str(int(pid)))
    if not os.path.isdir(folder):
        return False
    shutil.rmtree(folder)
    return True


# ============================================================================================ late mlx5 vectors
def use_comp_vectors(dest: str, nic: str, vectors: Optional[Iterable[int]] = None) -> Dict[str, Any]:
    """A user of mlx5 NIC ``nic`` (its name or PCI address) asks for completion ``vectors`` (default: all of them),
    as an RDMA job creating completion queues or an interface opening its channels does.

    Since Linux 6.5 (commit f14c1a14e632, "net/mlx5: Allocate completion EQs dynamically") the driver creates a
    completion vector's IRQ only then: mlx5_comp_eqn_get() -> create_comp_eq() -> comp_irq_request_pci()
    (drivers/net/ethernet/mellanox/mlx5/core/eq.c) -> mlx5_irq_alloc() (pci_irq.c), which takes a free MSI-X
    table entry and IRQ number (pci_msix_alloc_irq_at(), MSI_ANY_INDEX: the lowest free ones), names the action
    ``mlx5_comp<N>@pci:<BDF>`` and sets the driver's default affinity, the one CPU mlx5_cpumask_default_spread()
    picks: the vector's place in the online CPUs ordered by NUMA distance from the device (CPU 0 past the end).
    Each new IRQ gets its /proc/irq/N files and /N/<name>/ folder, its msi_irqs entry and its /proc/interrupts
    row. Vectors that exist are left as they are; a reboot removes the created ones again (runtime state).
    Returns the IRQs created (``irq``, ``name``, ``cpu``) and the names that existed already.
    """
    real = _check_dest(dest, must_exist=True)
    marker = read_marker(real)
    if marker is None:
        raise SimNodeError("dest %s is not a simulated node (no valid %s); nothing to use" % (dest, MARKER))
    spec = load_spec(marker["spec"])
    m = _Machine(spec, _read_boot_state(real))
    mlx5 = [d for d in sorted(m.pci.values(), key=lambda d: d.bdf)
            if d.kind == "nic" and NIC_MODELS[d.spec["model"]]["kind"] == "ib"]
    dev = next((d for d in mlx5 if nic in (d.spec["name"], d.bdf)), None)
    if dev is None:
        raise SpecError("nic %s is not valid: expected the name or PCI address of one of this node's mlx5 NICs "
                        "(%s)" % (_show(nic), ", ".join("%s %s" % (d.spec["name"], d.bdf) for d in mlx5) or "none"))
    count = min(dev.spec["comp_vectors"], len(m.cpus.online))
    wanted = list(range(count)) if vectors is None else list(vectors)
    bad = [v for v in wanted if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < count]
    if bad:
        # mlx5_comp_eqn_get() refuses an index >= max_comp_eqs (EINVAL)
        raise SpecError("vectors %s are not valid for %s: it has completion vectors 0-%d" % (
            _show(bad), dev.spec["name"], count - 1))
    interrupts = os.path.join(real, "proc/interrupts")
    lines = _read_text(interrupts).splitlines()
    cpu_ids, rows = parse_interrupts("\n".join(lines))
    existing = dict((row["name"], row["irq"]) for row in rows if isinstance(row["irq"], int))
    used = set(existing.values()) | set(int(n) for n in os.listdir(os.path.join(real, "proc/irq")) if n.isdigit())
    chip = m._chip(dev, 0)[0]
    indices = set(int(row["hwirq"]) for row in rows if row["chip"] == chip and (row["hwirq"] or "").isdigit())
    online = parse_cpulist(_read_text(os.path.join(real, "sys/devices/system/cpu/online")).strip())
    spread = [c for c in m.cpus.local_spread(dev.node) if c in online]
    prec = len(lines[1].partition(":")[0]) if len(lines) > 1 else 3
    tree = _Tree()
    created: List[Dict[str, Any]] = []
    already: List[str] = []
    for vector in wanted:
        name = "mlx5_comp%d@pci:%s" % (vector, dev.bdf)
        if name in existing:
            already.append(name)
            continue
        number = next(n for n in range(m.FIRST_DYNAMIC_IRQ, 1 << 20) if n not in used)
        index = next(i for i in range(1, 1 << 11) if i not in indices)  # entry 0 is the async vector's, at probe
        used.add(number)
        indices.add(index)
        existing[name] = number
        cpu = spread[vector] if vector < len(spread) else 0
        d = "proc/irq/%d" % number
        tree.f(d + "/smp_affinity", m.cpus.mask([cpu]), 0o644)
        tree.f(d + "/smp_affinity_list", cpu, 0o644)
        tree.f(d + "/effective_affinity", m.cpus.mask([cpu]))
        tree.f(d + "/effective_affinity_list", cpu)
        tree.f(d + "/node", dev.node if dev.node >= 0 else 0)
        tree.dir(d + "/" + name)
        tree.f("%s/msi_irqs/%d" % (dev.path, number), "msix")
        row = _interrupts_row(prec, number, ("%10d " % 0) * len(cpu_ids), chip, str(index), "edge", name)
        at = next((i for i, line in enumerate(lines[1:], 1)
                   if not line.partition(":")[0].strip().isdigit() or int(line.partition(":")[0]) > number),
                  len(lines))
        lines.insert(at, row)
        created.append({"irq": number, "name": name, "cpu": cpu})
    for directory in sorted(tree.dirs):
        os.makedirs(os.path.join(real, directory), 0o755, exist_ok=True)
    for path, (data, mode) in tree.files.items():
        full = os.path.join(real, path)
        with open(full, "wb") as handle:
            handle.write(data)
        os.chmod(full, mode)
    if created:
        mode = stat.S_IMODE(os.stat(interrupts).st_mode)
        os.chmod(interrupts, 0o644)
        with open(interrupts, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        os.chmod(interrupts, mode)
    return {"dest": real, "nic": dev.spec["name"], "created": created, "existing": already}
