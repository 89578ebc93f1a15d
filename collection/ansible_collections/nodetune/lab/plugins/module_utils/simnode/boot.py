# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What a boot makes of a simulated node: the runtime tree generated from the machine (:func:`_generate`), what
the persistent files make the boot do (systemd-sysctl's sysctl.d, udev's ATTR{} rules, ``options nvme``,
irqbalance and the other enabled units), and :func:`reboot`, which puts ``sys/``, ``proc/`` and ``run/`` back to
that boot's values, with the memory partition the GPUs' firmware kept."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import stat
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ansible_collections.nodetune.lab.plugins.module_utils import simbootloader, simservices
from ansible_collections.nodetune.lab.plugins.module_utils.simboot import run_boot_restore
from ansible_collections.nodetune.lab.plugins.module_utils.simkernel import NPS_REQUEST, dirty_write, sim_root
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.catalogue import GPU_MODELS, _SYSCTL_VECTORS
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.emit_devices import (
    _emit_gpus,
    _emit_nics,
    _emit_nvme,
    _emit_pci,
    compute_partitions,
)
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.emit_system import (
    BOOT_ID,
    _emit_cpus,
    _emit_irqs,
    _emit_misc_sys,
    _emit_nodes,
    _emit_proc,
    _emit_run,
    next_boot_id,
)
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.machine import _Machine
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.marker import (
    MARKER,
    SimNodeError,
    _check_dest,
    read_marker,
)
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.spec import SpecError, load_spec
from ansible_collections.nodetune.lab.plugins.module_utils.simnode.tree import _Tree


RUNTIME_DIRS = ("sys", "proc", "run")  # reboot puts these back to the boot's values
PERSISTENT_DIRS = ("etc", "usr", "var")  # reboot keeps these and acts on them


# ============================================================================================ generation
def _generate(spec: Dict[str, Any], boot: Dict[str, Any]) -> Tuple[_Tree, _Machine]:
    machine = _Machine(spec, boot)
    tree = _Tree()
    _emit_cpus(tree, machine)
    _emit_nodes(tree, machine)
    _emit_pci(tree, machine)
    _emit_gpus(tree, machine)
    _emit_nics(tree, machine)
    _emit_nvme(tree, machine)
    _emit_irqs(tree, machine)
    _emit_proc(tree, machine)
    _emit_misc_sys(tree, machine)
    _emit_run(tree, machine)
    _apply_boot_config(tree, machine)
    return tree, machine


# ============================================================================================ boot-time effects
def _read_boot_state(dest: str) -> Dict[str, Any]:
    """What the persistent files under ``dest`` make the next boot do (modprobe options, irqbalance, ...)."""
    state: Dict[str, Any] = {"notes": []}
    # the boot this tree is at: the next one's boot_id follows from it (reboot), and a model of this boot has it
    state["boot_id"] = (_read_text_or_none(os.path.join(dest, BOOT_ID)) or "").strip() or None
    state["irqbalance_running"] = os.path.lexists(
        os.path.join(dest, "etc/systemd/system/multi-user.target.wants/irqbalance.service")) and \
        os.path.exists(os.path.join(dest, "usr/lib/systemd/system/irqbalance.service"))
    state["nvme"] = _modprobe_nvme(dest, state["notes"])
    state["sysctl"] = _sysctl_d(dest, state["notes"])
    state["udev"] = _udev_rules(dest, state["notes"])
    # systemd reads its default limits and starts the enabled services (simservices.boot_state)
    state["systemd"] = _boot_systemd(lambda rel: _read_text_or_none(os.path.join(dest, rel)),
                                     lambda rel: sorted(os.listdir(os.path.join(dest, rel)))
                                     if os.path.isdir(os.path.join(dest, rel)) else [])
    # systemd starts the enabled timers at boot (timers.target); the simulation's services (simservices.py) link
    # every enabled unit into multi-user.target.wants
    state["timers"] = sorted(set(
        name for wants in ("etc/systemd/system/multi-user.target.wants", "etc/systemd/system/timers.target.wants")
        for name in (os.listdir(os.path.join(dest, wants)) if os.path.isdir(os.path.join(dest, wants)) else [])
        if name.endswith(".timer") and any(os.path.isfile(os.path.join(dest, units, name))
                                           for units in ("etc/systemd/system", "usr/lib/systemd/system"))))
    return state


def _read_text_or_none(path: str) -> Optional[str]:
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _boot_systemd(read: Any, listdir: Any) -> Dict[str, Any]:
    """The manager's state after boot from the persistent files as ``read``/``listdir`` see them."""
    wants = "etc/systemd/system/multi-user.target.wants"
    return simservices.boot_state(read, listdir, (read("etc/hostname") or "").strip(), listdir(wants))


def _tree_reader(tree: _Tree) -> Tuple[Any, Any]:
    """``read``/``listdir`` over a tree still in memory (a build's persistent files)."""
    def read(rel: str) -> Optional[str]:
        entry = tree.files.get(rel)
        return entry[0].decode("utf-8", "replace") if entry is not None else None

    def listdir(rel: str) -> List[str]:
        prefix = rel.rstrip("/") + "/"
        return sorted(set(p[len(prefix):].split("/")[0] for p in list(tree.files) + list(tree.links)
                          if p.startswith(prefix)))
    return read, listdir


def _conf_files(dest: str, directories: Iterable[str], suffix: str) -> List[str]:
    """Config files by name, /etc overriding /run and /usr/lib (the systemd drop-in rule), in lexical order."""
    chosen: Dict[str, str] = {}
    for directory in directories:
        full = os.path.join(dest, directory)
        try:
            names = os.listdir(full)
        except OSError:
            continue
        for name in names:
            if name.endswith(suffix) and name not in chosen:
                chosen[name] = os.path.join(full, name)
    return [chosen[name] for name in sorted(chosen)]


def _read_text(path: str) -> str:
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def _modprobe_nvme(dest: str, notes: List[str]) -> Dict[str, int]:
    params: Dict[str, int] = {}
    limits = {"io_queue_depth": (2, 4095), "write_queues": (0, 1024), "poll_queues": (0, 1024)}
    for path in _conf_files(dest, ("etc/modprobe.d", "run/modprobe.d", "usr/lib/modprobe.d"), ".conf"):
        for line in _read_text(path).splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) < 3 or words[0] != "options" or words[1] != "nvme":
                continue
            for word in words[2:]:
                key, _sep, value = word.partition("=")
                if key in limits and re.match(r"^\d+$", value):
                    low, high = limits[key]
                    if low <= int(value) <= high:
                        params[key] = int(value)
                    else:
                        notes.append("%s: nvme %s=%s is out of range %d-%d; the driver ignores it"
                                     % (os.path.relpath(path, dest), key, value, low, high))
                else:
                    notes.append("%s: nvme option %s is not simulated" % (os.path.relpath(path, dest), word))
    return params


def _sysctl_d(dest: str, notes: List[str]) -> List[Tuple[str, Optional[str], str]]:
    """systemd-sysctl's writes at boot, ``(key as a /proc/sys path or glob, value, file)`` in its order
    (src/sysctl/sysctl.c, parse_file()/apply_all(): one entry per key in an ordered map, a later assignment with
    another value moves the key to the end, one with the same value leaves it in place). A ``-key`` line without a
    value (None) only keeps globs off that key."""
    options: Dict[str, Tuple[Optional[str], str]] = {}
    dirs = ("etc/sysctl.d", "run/sysctl.d", "usr/local/lib/sysctl.d", "usr/lib/sysctl.d", "lib/sysctl.d")
    for path in _conf_files(dest, dirs, ".conf"):
        for line in _read_text(path).splitlines():
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            key, sep, value = line.partition("=")
            if not sep and not line.startswith("-"):
                continue
            key = key.strip().lstrip("-").strip()
            if "." in key and ("/" not in key or key.index(".") < key.index("/")):
                key = key.translate(str.maketrans("./", "/."))  # sysctl_normalize(): dotted form to a path
            wanted = value.strip() if sep else None
            if key in options and options[key][0] == wanted:
                continue
            options.pop(key, None)
            options[key] = (wanted, os.path.relpath(path, dest))
    return [(key, value, source) for key, (value, source) in options.items()]


def _udev_rules(dest: str, notes: List[str]) -> List[Tuple[str, List[Tuple[str, str, str]], List[Tuple[str, str]]]]:
    """Rules that set block device attributes: (file, [(key, op, value) matches], [(attr, value) assignments])."""
    rules = []
    for path in _conf_files(dest, ("etc/udev/rules.d", "run/udev/rules.d", "usr/lib/udev/rules.d"), ".rules"):
        text = _read_text(path).replace("\\\n", " ")
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            matches: List[Tuple[str, str, str]] = []
            assigns: List[Tuple[str, str]] = []
            for part in re.finditer(r'([A-Za-z_]+(?:\{[^}]*\})?)\s*(==|!=|\+=|:=|=)\s*"([^"]*)"', line):
                key, op, value = part.groups()
                if op in ("==", "!="):
                    matches.append((key, op, value))
                elif key.startswith("ATTR{") and op in ("=", ":="):
                    assigns.append((key[5:-1], value))
            if assigns:
                rules.append((os.path.relpath(path, dest), matches, assigns))
    return rules


def _udev_match(pattern: str, value: str) -> bool:
    return any(fnmatch.fnmatchcase(value, alternative) for alternative in pattern.split("|"))


def _apply_boot_config(tree: _Tree, m: _Machine) -> None:
    """systemd-sysctl and udev at boot: sysctl.d values and block ATTR{} assignments onto the fresh tree."""
    notes = m.boot.setdefault("notes", [])
    applied = m.boot.setdefault("applied", [])
    writes = m.boot.get("sysctl", [])
    explicit = set(key for key, _value, _source in writes if not any(c in key for c in "*?["))
    for key, value, source in writes:
        if value is None:
            continue
        if not any(c in key for c in "*?["):
            _boot_sysctl(tree, "proc/sys/" + key, value, source, notes, applied)
            continue
        # a glob: every matching sysctl no file names explicitly, in glob(3)'s sorted order
        for path in sorted(p for p in tree.files if p.startswith("proc/sys/") and p[9:] not in explicit
                           and _glob_path(key, p[9:])):
            _boot_sysctl(tree, path, value, source, notes, applied)
    for source, matches, assigns in m.boot.get("udev", []):
        for nvme in m.nvmes:
            disk = "%sn1" % m.nvme_name[nvme.bdf]
            base = "%s/nvme/%s/%s" % (nvme.path, m.nvme_name[nvme.bdf], disk)
            if not _udev_rule_matches(matches, disk, tree, base):
                continue
            for attr, value in assigns:
                path = "%s/%s" % (base, attr)
                if path not in tree.files:
                    notes.append("%s: ATTR{%s} does not exist on %s; skipped" % (source, attr, disk))
                    continue
                _udev_write(tree, base, attr, value)
                applied.append("udev %s: %s ATTR{%s}=%s" % (source, disk, attr, value))


def _glob_path(pattern: str, path: str) -> bool:
    parts, names = pattern.split("/"), path.split("/")
    return len(parts) == len(names) and all(fnmatch.fnmatchcase(n, p) for n, p in zip(names, parts))


def _boot_sysctl(tree: _Tree, path: str, value: str, source: str, notes: List[str], applied: List[str]) -> None:
    """One sysctl write of systemd-sysctl at boot, answered as the kernel answers it: a vm.dirty_* limit zeroes
    the other form of its pair (simkernel.dirty_write), so the replay ends with one form of each pair."""
    key = path[9:].translate(str.maketrans("./", "/."))
    value = " ".join(value.split())
    if path not in tree.files:
        notes.append("sysctl %s is not simulated on this node; skipped" % key)
        return
    try:
        files = dirty_write(lambda rel: tree.files[rel][0].decode() if rel in tree.files else None, path, value)
    except OSError as exc:
        notes.append("%s: sysctl %s=%s refused: %s" % (source, key, value, exc.strerror))
        return
    if files is None:
        files = [(path, (value.replace(" ", "\t") if key in _SYSCTL_VECTORS else value) + "\n")]
    for rel, text in files:
        tree.files[rel] = (text.encode(), tree.files[rel][1])
    applied.append("sysctl %s=%s" % (key, value))


def _udev_rule_matches(matches: List[Tuple[str, str, str]], disk: str, tree: _Tree, base: str) -> bool:
    for key, op, value in matches:
        if key == "ACTION":
            ok = _udev_match(value, "add")
        elif key == "SUBSYSTEM":
            ok = _udev_match(value, "block")
        elif key == "KERNEL":
            ok = _udev_match(value, disk)
        elif key in ("ENV{DEVTYPE}",):
            ok = _udev_match(value, "disk")
        elif key.startswith("ATTR{"):
            current = tree.files.get("%s/%s" % (base, key[5:-1]))
            ok = current is not None and _udev_match(value, current[0].decode().strip())
        else:
            return False  # a match key the simulation does not know: the rule is not applied
        if (op == "==") != ok:
            return False
    return True


def _udev_write(tree: _Tree, base: str, attr: str, value: str) -> None:
    """The kernel's answer to a udev ATTR write, for the block queue attributes udev rules set."""
    path = "%s/%s" % (base, attr)
    data, mode = tree.files[path]
    current = data.decode().strip()
    if attr == "queue/scheduler" and "[" in current:
        options = [o.strip("[]") for o in current.split()]
        if value in options:
            tree.files[path] = ((" ".join("[%s]" % o if o == value else o for o in options) + "\n").encode(), mode)
            tags = int(tree.files[base + "/mq/0/nr_tags"][0]) if base + "/mq/0/nr_tags" in tree.files else 1023
            depth = tags if value == "none" else 2 * min(tags, 128)
            tree.files[base + "/queue/nr_requests"] = (("%d\n" % depth).encode(), 0o644)
        return
    if attr == "queue/nr_requests" and value.isdigit():
        scheduler = tree.files[base + "/queue/scheduler"][0].decode()
        limit = int(tree.files[base + "/mq/0/nr_tags"][0]) if "[none]" in scheduler else 2048
        if int(value) > limit:
            return  # EINVAL: the rule fails and the value stays
        value = str(max(int(value), 4))
    tree.files[path] = ((value + "\n").encode(), mode)


# ============================================================================================ reboot
def reboot(dest: str, check_only: bool = False) -> Dict[str, Any]:
    """Simulate a reboot: every runtime file under sys/, proc/ and run/ back to its boot value.

    Persistent files (etc/, usr/, var/) are kept, and they act the way they would at a real boot: sysctl.d
    values, udev ATTR{} rules for block devices, ``options nvme`` from modprobe.d, irqbalance running iff
    enabled; then the enabled nodetune-restore unit replays the runtime tuning (simboot.py), and the enabled
    timers run (nodetune-irq-repin.timer: simboot.run_irq_repin() is one of its runs). Mlx5 completion vectors
    created since boot (use_comp_vectors) are gone again. Returns what differed (``changed``: paths set back,
    created or removed) and what the boot applied; with ``check_only`` nothing is written. Every boot draws a new
    ``proc/sys/kernel/random/boot_id``, as the kernel does (derived from the last one: rebuilds and reboots are
    reproducible); it is not in ``changed``.
    """
    real = _check_dest(dest, must_exist=True)
    marker = read_marker(real)
    if marker is None:
        raise SimNodeError("dest %s is not a simulated node (no valid %s); nothing to reboot" % (dest, MARKER))
    try:
        spec = load_spec(marker["spec"])
    except SpecError as exc:
        raise SimNodeError("the spec stored in %s/%s is no longer valid: %s" % (dest, MARKER, exc)) from None
    spec = _with_firmware(real, spec, check_only)
    boot = _read_boot_state(real)
    boot["boot_id"] = next_boot_id(spec["hostname"], boot["boot_id"])  # a new boot: the kernel draws a new one
    # the kernel boots with its boot loader's default entry (the spec's command line while that is unchanged)
    spec = dict(spec, kernel=dict(spec["kernel"], cmdline=simbootloader.booted_cmdline(real, spec)))
    tree = _generate(spec, boot)[0]
    # every boot has a new boot_id: what differed is what else the boot set back
    changes = [path for path in _sync_runtime(tree, real, check_only) if path != BOOT_ID]
    restore = {"ran": False, "applied": 0, "pinned": [], "failed": [], "pending": []}
    if not check_only:
        # systemd then starts the enabled units: nodetune-restore replays the runtime tuning (simboot.py).
        restore = run_boot_restore(sim_root(real))
    return {"dest": real, "changed": changes, "applied": boot.get("applied", []), "notes": boot.get("notes", []),
            "check_only": check_only, "boot_restore": restore}


def _sync_runtime(tree: _Tree, real: str, check_only: bool) -> List[str]:
    """Make sys/, proc/ and run/ under ``real`` exactly the model's; returns the paths that differed."""
    changes: List[str] = []
    seen_dirs = set()
    for top in RUNTIME_DIRS:
        base = os.path.join(real, top)
        if not os.path.isdir(base) or os.path.islink(base):
            continue
        stack = [top]
        while stack:
            rel_dir = stack.pop()
            seen_dirs.add(rel_dir)
            try:
                entries = list(os.scandir(os.path.join(real, rel_dir)))
            except OSError:
                continue
            for entry in entries:
                rel = rel_dir + "/" + entry.name
                if entry.is_symlink():
                    target = tree.links.get(rel)
                    if target is None or os.readlink(entry.path) != target:
                        changes.append(rel)
                        if not check_only:
                            os.unlink(entry.path)
                elif entry.is_dir():
                    if rel in tree.dirs:
                        stack.append(rel)
                    else:
                        changes.append(rel + "/")
                        if not check_only:
                            shutil.rmtree(entry.path)
                else:
                    wanted = tree.files.get(rel)
                    if wanted is None:
                        changes.append(rel)
                        if not check_only:
                            os.unlink(entry.path)
                        continue
                    try:
                        mode = stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode)
                        with open(entry.path, "rb") as handle:
                            data = handle.read()
                    except OSError:
                        data, mode = None, -1
                    if data != wanted[0] or mode != wanted[1]:
                        changes.append(rel)
                        if not check_only:
                            os.chmod(entry.path, 0o644)
                            with open(entry.path, "wb") as handle:
                                handle.write(wanted[0])
                            os.chmod(entry.path, wanted[1])
    runtime = tuple(t + "/" for t in RUNTIME_DIRS)
    for directory in sorted(d for d in tree.dirs if d.startswith(runtime) or d in RUNTIME_DIRS):
        if directory not in seen_dirs and not os.path.isdir(os.path.join(real, directory)):
            changes.append(directory + "/")
            if not check_only:
                os.makedirs(os.path.join(real, directory), 0o755, exist_ok=True)
    for path, (data, mode) in tree.files.items():
        if path.startswith(runtime) and not os.path.lexists(os.path.join(real, path)):
            changes.append(path)
            if not check_only:
                fd = os.open(os.path.join(real, path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
                try:
                    os.write(fd, data)
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)
    for path, target in tree.links.items():
        if path.startswith(runtime) and not os.path.lexists(os.path.join(real, path)):
            changes.append(path)
            if not check_only:
                os.symlink(target, os.path.join(real, path))
    return sorted(set(changes))


# ============================================================================================ GPU firmware
FIRMWARE = ".nodetune-simnode-firmware.json"  # what the GPUs' firmware keeps across reboots: the memory partition


def _with_firmware(real: str, spec: Dict[str, Any], check_only: bool) -> Dict[str, Any]:
    """``spec`` as the GPUs come up at this boot. A memory partition requested since the last boot (simkernel's NPS
    request) is handed to the firmware when amdgpu unloads (amdgpu_gmc_prepare_nps_mode_change) and is the mode
    from this boot on; a compute partition the new memory partition does not allow falls back to the one amdgpu
    picks for it (aqua_vanjaram.c, __aqua_vanjaram_get_auto_mode)."""
    firmware = _read_firmware(real)
    request_path = os.path.join(real, NPS_REQUEST)
    if os.path.isfile(request_path) and not os.path.islink(request_path):
        with open(request_path, encoding="utf-8") as handle:
            request = handle.read().strip()
        if request in ("NPS1", "NPS2", "NPS4", "NPS8"):
            firmware["memory_partition"] = request
            if not check_only:
                with open(os.path.join(real, FIRMWARE), "w", encoding="utf-8") as handle:
                    json.dump(firmware, handle)
    return _booted_with(spec, firmware)


def booted_spec(real: str, spec: Dict[str, Any]) -> Dict[str, Any]:
    """``spec`` as the GPUs came up at the boot the tree is at: the memory partition their firmware kept, not one
    requested since (that is the next boot's, :func:`_with_firmware`)."""
    return _booted_with(spec, _read_firmware(real))


def _read_firmware(real: str) -> Dict[str, Any]:
    try:
        with open(os.path.join(real, FIRMWARE), encoding="utf-8") as handle:
            return dict(json.load(handle))
    except (OSError, ValueError, TypeError):
        return {}


def _booted_with(spec: Dict[str, Any], firmware: Dict[str, Any]) -> Dict[str, Any]:
    """``spec`` with the firmware's memory partition, and the compute partition amdgpu falls back to where the
    spec's is not allowed with it."""
    if not firmware.get("memory_partition"):
        return spec
    faults = dict(spec["faults"], memory_partition=firmware["memory_partition"])
    xcc = max([GPU_MODELS[g["model"]]["num_xcc"] for g in spec.get("gpus") or []] or [1])
    if faults["compute_partition"] not in compute_partitions(faults["memory_partition"], xcc):
        parts = int(faults["memory_partition"][3:])
        faults["compute_partition"] = ("SPX" if parts == 1 else "CPX" if parts == xcc else
                                       "QPX" if parts * 2 == xcc else "DPX")
    return dict(spec, faults=faults)
