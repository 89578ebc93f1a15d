# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A simulated node's life: :func:`build` (the whole tree, staged beside the destination and moved into place),
:func:`remove`, :func:`summary` and :func:`plan` (counts without writing), :func:`inject_faults` (break a built
node in place) and :func:`state_of` (what the sim_node module finds at a destination)."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Dict, Optional

from ansible_collections.nodetune.lab.plugins.module_utils.simnode.boot import (
    _boot_systemd,
    booted_spec,
    _generate,
    _read_boot_state,
    _tree_reader,
)
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.machine import _Machine
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.marker import (
    GENERATOR_VERSION,
    MARKER,
    SimNodeError,
    _check_dest,
    _is_empty_dir,
    _marker_bytes,
    is_simnode,
    read_marker,
)
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.persistent import _persistent_files
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.spec import (
    FAULT_DEFAULTS,
    SpecError,
    _show,
    load_spec,
)
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.tree import _Tree, _write_tree


def build(spec: Any, dest: str) -> Dict[str, Any]:
    """Build the whole simulated node at ``dest`` (replacing an earlier simulated tree there).

    Refuses ``/`` and any existing non-empty directory that is not a simulated node (no marker), so that a
    wrong path can never wipe real data. The tree is built next to ``dest`` and moved into place, so a failed
    build leaves the old tree (or nothing) behind, never half a node.
    """
    spec = load_spec(spec)
    real = _check_dest(dest)
    if os.path.isdir(real) and not _is_empty_dir(real) and not is_simnode(real):
        raise SimNodeError("dest %s is a non-empty directory that is not a simulated node (no %s); refusing to "
                           "replace it - choose an empty or new directory" % (dest, MARKER))
    parent = os.path.dirname(real)
    try:
        os.makedirs(parent, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".%s.simnode-" % os.path.basename(real), dir=parent)
    except OSError as exc:
        raise SimNodeError("cannot create %s: %s" % (dest, exc.strerror or exc)) from None
    try:
        os.chmod(staging, 0o755)
        persistent = _persistent_files(spec)
        boot = {"irqbalance_running": spec["irqbalance"]["enabled"], "nvme": {}, "sysctl": [], "udev": [],
                "systemd": _boot_systemd(*_tree_reader(persistent))}
        tree, machine = _generate(spec, boot)
        tree.files.update(persistent.files)
        tree.links.update(persistent.links)
        tree.dirs.update(persistent.dirs)
        tree.raw(MARKER, _marker_bytes(spec), 0o644)
        entries = _write_tree(tree, staging)
        _swap_into_place(staging, real)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {"dest": real, "entries": entries, "summary": summary(spec, machine)}


def _swap_into_place(staging: str, real: str) -> None:
    old = None
    if os.path.isdir(real):
        if _is_empty_dir(real):
            os.rmdir(real)
        else:
            old = tempfile.mkdtemp(prefix=".%s.old-" % os.path.basename(real), dir=os.path.dirname(real))
            os.rmdir(old)
            os.rename(real, old)
    os.rename(staging, real)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def remove(dest: str) -> bool:
    """Delete a simulated tree; refuses anything without the marker. Returns False where nothing was there."""
    real = _check_dest(dest)
    if not os.path.exists(real):
        return False
    if not is_simnode(real):
        if _is_empty_dir(real):
            os.rmdir(real)
            return True
        raise SimNodeError("dest %s is not a simulated node (no %s); refusing to delete it" % (dest, MARKER))
    shutil.rmtree(real)
    return True


def summary(spec: Dict[str, Any], machine: Optional[_Machine] = None) -> Dict[str, Any]:
    """Counts a caller can check discovery against (CPUs, NUMA nodes, devices, IRQs)."""
    machine = machine or _Machine(spec, {"irqbalance_running": spec["irqbalance"]["enabled"]})
    cpus = machine.cpus
    return {
        "cpus": cpus.count,
        "cpus_online": len(cpus.online),
        "sockets": cpus.sockets,
        "numa_nodes": cpus.nodes,
        "gpus": len(machine.gpus),
        "nics": len(machine.nics),
        "ib_devices": len(machine.ib_nics),
        "nvme": len(machine.nvmes),
        "irqs": len(machine.irqs),
        "pci_devices": len(machine.pci),
    }


def plan(spec: Any) -> Dict[str, Any]:
    """The normalised spec and its summary, without writing anything (check mode)."""
    spec = load_spec(spec)
    return {"spec": spec, "summary": summary(spec)}


# ============================================================================================ faults in place
def _model_tree(spec: Dict[str, Any], real: str) -> _Tree:
    """Every file the generator makes for ``spec`` (runtime at the node's current boot state, with the partition the
    GPUs' firmware kept at it, and persistent)."""
    tree = _generate(booted_spec(real, spec), _read_boot_state(real))[0]
    persistent = _persistent_files(spec)
    tree.files.update(persistent.files)
    tree.links.update(persistent.links)
    tree.dirs.update(persistent.dirs)
    return tree


def inject_faults(dest: str, faults: Dict[str, Any]) -> Dict[str, Any]:
    """Break a built node in place, the way the spec's ``faults`` (:data:`FAULT_DEFAULTS`) would have at build.

    Only the paths whose content the faults decide are written (the difference between the trees generated with
    the old and the new faults), so whatever else changed on the node (tuning applied, other drift) stays as it
    is. The stored spec takes the new faults: a reboot keeps them, as a bad link or a RAS error outlives a reboot.
    Returns the paths written (files and links) and removed; a bad fault raises SpecError naming it, before anything
    is written. The model is the node at its current boot: the partitions its GPUs came up in (boot.booted_spec).
    """
    real = _check_dest(dest, must_exist=True)
    marker = read_marker(real)
    if marker is None:
        raise SimNodeError("dest %s is not a simulated node (no valid %s); nothing to break" % (dest, MARKER))
    old = load_spec(marker["spec"])
    if not isinstance(faults, dict):
        raise SpecError("simulated node spec is not valid:\n  - spec faults: %s is not valid: expected a mapping "
                        "with keys %s" % (_show(faults), ", ".join(FAULT_DEFAULTS)))
    new = load_spec(dict(old, faults=dict(old["faults"], **faults)))
    before, after = _model_tree(old, real), _model_tree(new, real)
    written = sorted(p for p, data in after.files.items() if before.files.get(p) != data)
    removed = sorted(p for p in before.files if p not in after.files)
    # links too: a compute partition renumbers the DRM cards and their /sys/class/drm links
    linked = sorted(p for p, target in after.links.items() if before.links.get(p) != target)
    unlinked = sorted(p for p in before.links if p not in after.links)
    for path in removed + unlinked:
        os.unlink(os.path.join(real, path))
    for directory in sorted(before.dirs - after.dirs, key=len, reverse=True):  # deepest first
        full = os.path.join(real, directory)
        if os.path.isdir(full) and not os.listdir(full):
            os.rmdir(full)
    for path in written:
        data, mode = after.files[path]
        full = os.path.join(real, path)
        os.makedirs(os.path.dirname(full), 0o755, exist_ok=True)
        if os.path.lexists(full):
            os.chmod(full, 0o644)
        with open(full, "wb") as handle:
            handle.write(data)
        os.chmod(full, mode)
    for path in linked:
        full = os.path.join(real, path)
        os.makedirs(os.path.dirname(full), 0o755, exist_ok=True)
        if os.path.islink(full):
            os.unlink(full)
        os.symlink(after.links[path], full)
    with open(os.path.join(real, MARKER), "wb") as handle:
        handle.write(_marker_bytes(new))
    return {"dest": real, "faults": new["faults"], "written": sorted(written + linked),
            "removed": sorted(removed + unlinked)}


# ============================================================================================ module helpers
def state_of(dest: str, spec: Optional[Dict[str, Any]] = None) -> str:
    """``absent``, ``foreign`` (non-empty, not ours), ``current`` (same spec and generator) or ``stale``.

    Raises SimNodeError for destinations that can never hold a simulated node (``/``, a file).
    """
    real = _check_dest(dest)
    if not os.path.exists(real) or _is_empty_dir(real):
        return "absent"
    marker = read_marker(real)
    if marker is None:
        return "foreign"
    if spec is not None and (marker.get("version") != GENERATOR_VERSION or marker["spec"] != spec):
        return "stale"
    return "current"
