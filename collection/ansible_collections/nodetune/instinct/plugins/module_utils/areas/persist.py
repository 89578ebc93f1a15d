# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Persistence across reboot without tuned: sysctl.d, udev rules, and a boot-time restore of runtime settings.

Sysctls go to ``/etc/sysctl.d/90-nodetune-<area>.conf`` (systemd-sysctl applies it at boot), NVMe queue settings to
a udev rule (applied whenever a namespace appears), nvme module options to modprobe.d (nvme area). Everything else
that a reboot resets (SMT, IRQ affinity, governor, EPP, idle states, IPoIB MTU) is listed in
``/etc/nodetune/boot-restore.d/<area>.json`` and re-applied at boot by the ``nodetune-restore.service`` oneshot,
which runs a small stdlib-only script: no Ansible needed on the node at boot.

``nodetune_persist_boot: false`` (config ``boot``) leaves out the boot-time restore (its state files, program and
unit) where nothing boots the node with systemd; the sysctl.d, udev and modprobe.d files are read by the system
itself and stay.

One file per area, because a run may tune some areas only (``--tags nvme``): rewriting one shared file from a
partial run would drop the other areas' entries.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils import interpreter
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_restore, render, rules
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import sysctl_boot
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.irq import INTERRUPTS
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import Context
from ansible_collections.nodetune.instinct.plugins.module_utils.json_text import one_per_line
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import ParseError, parse_cpulist
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import FILE, ORDER, SERVICE, Setting

AREA = "persist"
SYSCTL_FILE = "etc/sysctl.d/90-nodetune-%s.conf"  # % area
UDEV_FILE = "etc/udev/rules.d/60-nodetune-nvme.rules"
STATE_DIR = node_restore.STATE_DIR
STATE_FILE = STATE_DIR + "/%s.json"  # % area
SCRIPT_FILE = "usr/local/sbin/nodetune-restore"
UNIT = "nodetune-restore.service"
UNIT_FILE = "etc/systemd/system/" + UNIT
# Pinned IRQs created after boot (mlx5 completion vectors, Linux 6.5+): the same program, again, from a timer
REPIN_UNIT = "nodetune-irq-repin.service"
REPIN_UNIT_FILE = "etc/systemd/system/" + REPIN_UNIT
REPIN_TIMER = "nodetune-irq-repin.timer"
REPIN_TIMER_FILE = "etc/systemd/system/" + REPIN_TIMER
PINNED_RECORD = node_restore.PINNED_RECORD
IRQ_IDS = ("irq.nic_local", "irq.gpu_local")  # the pinned IRQs (areas/irq.py): key and irq_name, the action name
HEADER = "# Managed by nodetune. Local changes are reported as drift and overwritten.\n"

UNIT_TEXT = HEADER + """[Unit]
Description=nodetune: restore runtime tuning (SMT, IRQ affinity, cpufreq, idle states, IPoIB MTU)
After=systemd-udev-settle.service network-pre.target
Before=network.target irqbalance.service
ConditionDirectoryNotEmpty=/%s

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/%s

[Install]
WantedBy=multi-user.target
""" % (STATE_DIR, SCRIPT_FILE)

# IRQs have no uevent, so no udev rule and no path unit (inotify does not work on procfs) can react to one being
# created: a timer runs the program every 10 s (irqbalance's own default interval), which only reads a few
# directories unless an IRQ appeared. systemd.timer(5): OnBootSec=/OnUnitActiveSec= repeat relative to the last
# run; a repeated service must not have RemainAfterExit= (the boot unit has it, hence a unit of its own).
# SyslogLevel=notice with LogLevelMax=notice keep the program's lines and drop systemd's info-level start and finish
# lines for each run (as podman does for its health-check timers); a failed run is still logged (warning).
REPIN_UNIT_TEXT = HEADER + """[Unit]
Description=nodetune: pin the IRQs created since boot (mlx5 creates completion vectors on first use)
After=%s

[Service]
Type=oneshot
ExecStart=/%s --irqs
SyslogLevel=notice
LogLevelMax=notice
""" % (UNIT, SCRIPT_FILE)

REPIN_TIMER_TEXT = HEADER + """[Unit]
Description=nodetune: look for new IRQs to pin every 10 s

[Timer]
OnBootSec=10s
OnUnitActiveSec=10s
AccuracySec=1s

[Install]
WantedBy=timers.target
"""


def _by_area(settings: List[Setting]) -> Dict[str, List[Setting]]:
    groups: Dict[str, List[Setting]] = {}
    for setting in settings:
        groups.setdefault(setting.area, []).append(setting)
    return groups


def _state_entry(setting: Setting) -> Dict[str, Any]:
    """One boot-restore entry, as the Setting's builder says: an IRQ by its action name (``irq_name``), found again
    at boot (numbers change); the value ``restore_value`` where the builder gives one (the IPoIB MTU: the requested
    one, which the kernel keeps as its admin MTU while it applies a cap), else the Setting's own."""
    value = setting.value if setting.restore_value is None else setting.restore_value
    if setting.irq_name:
        return {"id": setting.id, "target": setting.irq_name, "irq_name": setting.irq_name, "path": None,
                "value": value, "order": setting.order}
    return {"id": setting.id, "target": setting.target, "path": setting.path, "value": value,
            "order": setting.order}


def build(ctx: Context, settings: List[Setting], config: Dict[str, Any]) -> List[Setting]:
    out: List[Setting] = []
    for area, sysctls in sorted(_by_area([s for s in settings if s.persist == "sysctl.d"]).items()):
        body = "".join("%s = %s\n" % (s.target, " ".join(s.value.split()))
                       for s in sorted(sysctls, key=lambda s: s.target))
        out.append(Setting("persist.sysctl_d", area, SYSCTL_FILE % area, HEADER + body, kind=FILE,
                           compare="content", area=AREA, reason="systemd-sysctl applies these at boot"))
    udev = _udev_rules([s for s in settings if s.persist == "udev"])
    if udev:
        out.append(Setting("persist.udev", "nvme", UDEV_FILE, HEADER + udev, kind=FILE, compare="content", area=AREA,
                           reason="udev applies the NVMe queue settings whenever a namespace appears"))
    runtime = _by_area([s for s in settings if s.persist == "boot_restore"])
    if runtime and config.get("boot", True) is False:
        ctx.notes.append("persist: nodetune_persist_boot is false: %d runtime setting(s) are not re-applied at boot"
                         % sum(len(group) for group in runtime.values()))
        runtime = {}
    for area, group in sorted(runtime.items()):
        entries = [_state_entry(s) for s in group]
        if area == "irq":
            entries += _pending_entries(ctx, carried_irq_entries(ctx.root, [s.irq_name for s in group]))
        state = {"version": 1, "settings": sorted(entries, key=lambda e: (e["order"], e["id"], e["target"]))}
        out.append(Setting("persist.boot_restore", "state:" + area, STATE_FILE % area,
                           one_per_line(state, "settings"), kind=FILE, compare="content", area=AREA, mode=0o644,
                           reason="runtime settings a reboot resets, re-applied by nodetune-restore.service"))
    if runtime:
        script = render.program_text(node_restore, interpreter.shebang(root=ctx.root))
        out.append(Setting("persist.boot_restore", "script", SCRIPT_FILE, script, kind=FILE,
                           compare="content", area=AREA, mode=0o755, reason="the boot-time restore program"))
        out.append(Setting("persist.boot_restore", "unit", UNIT_FILE, UNIT_TEXT, kind=FILE, compare="content",
                           area=AREA, reason="runs nodetune-restore once at boot"))
        if ctx.services is not None:
            out.append(Setting("persist.boot_restore", UNIT, "", "enabled=yes", kind=SERVICE, area=AREA,
                               reason="enable the boot-time restore", after=(UNIT_FILE, SCRIPT_FILE)))
    if "irq" in runtime:
        out.append(Setting("persist.boot_restore", "repin unit", REPIN_UNIT_FILE, REPIN_UNIT_TEXT, kind=FILE,
                           compare="content", area=AREA, reason="runs nodetune-restore --irqs"))
        out.append(Setting("persist.boot_restore", "repin timer", REPIN_TIMER_FILE, REPIN_TIMER_TEXT, kind=FILE,
                           compare="content", area=AREA,
                           reason="pins IRQs created after boot: mlx5 creates completion vectors on first use"))
        if ctx.services is not None:
            # started now as well where systemd runs: vectors created before the next boot are pinned too; an
            # offline root (an image build) can only enable it (services.SystemdServices)
            wanted = "enabled=yes" if getattr(ctx.services, "offline", False) else "active=yes,enabled=yes"
            out.append(Setting("persist.boot_restore", REPIN_TIMER, "", wanted, kind=SERVICE, area=AREA,
                               reason="pin the IRQs a driver creates after boot, when they appear",
                               after=(REPIN_TIMER_FILE, REPIN_UNIT_FILE, SCRIPT_FILE)))
    if any(s.id == "persist.sysctl_d" for s in out):
        for entry in sysctl_boot.shadowed(ctx.root, settings + out):
            ctx.warn("persist: " + sysctl_boot.message(entry))
    return out


# ------------------------------------------------------------------------------------------ IRQs not created yet
_SAFE_IRQ_NAME = re.compile(r"^[A-Za-z0-9_.:@+\-]+$")


def irq_numbers(root: Root, names: Iterable[str], topology: Optional[Dict[str, Any]] = None) -> Dict[str, int]:
    """Action name -> IRQ number, read through ``root`` by the rule nodetune-restore and nodetune-check follow
    (rules.irq_numbers). ``topology``: the node's Topology, discovered in this run: the rule then reads its
    answers from it (:class:`_FromTopology`) instead of reading the files again (a folder per vector, and
    /proc/interrupts: megabytes on a 384-CPU node)."""
    if topology is None:
        return rules.irq_numbers(list(names), lambda rel: _folder_entries(root, rel),
                                 lambda rel: root.read(rel, strip=False))
    answers = _FromTopology(root, topology)
    return rules.irq_numbers(list(names), answers.listdir, answers.read)


class _FromTopology(object):
    """The files rules.irq_numbers reads, as this run's Topology has them: a device's ``msi_irqs/`` (its
    ``msi_irqs``), ``/proc/irq/N/`` (the folder per action register_handler_proc() makes, named as in the row's
    names, which /proc/interrupts joins with ", ", kernel/irq/proc.c) and /proc/interrupts (its rows less the count
    columns, chip and hardware IRQ: the rule takes a row's last word, its action name's last word). Anything else,
    and a device the Topology lists no vector of (no folder, or an empty one), is read from the node."""

    def __init__(self, root: Root, topology: Dict[str, Any]) -> None:
        self._root = root
        self._irqs = topology.get("irqs") or []
        self._actions = dict((irq["irq"], (irq.get("name") or "").split(", ")) for irq in self._irqs)
        self._vectors = dict((dev["bdf"], dev.get("msi_irqs") or []) for dev in topology.get("pci_devices") or [])

    def listdir(self, rel: str) -> Optional[List[str]]:
        head, _sep, tail = rel.partition("/msi_irqs")
        bdf = head[len(_PCI_DEVICES):] if head.startswith(_PCI_DEVICES) and not tail else ""
        if self._vectors.get(bdf):
            return [str(number) for number in self._vectors[bdf]]
        number = rel[len(_PROC_IRQ):]
        if rel.startswith(_PROC_IRQ) and number.isdigit() and int(number) in self._actions:
            return self._actions[int(number)]
        return _folder_entries(self._root, rel)

    def read(self, rel: str) -> Optional[str]:
        if rel == INTERRUPTS:
            rows = ["%d: %s\n" % (irq["irq"], irq["name"]) for irq in self._irqs if (irq.get("name") or "").strip()]
            return "CPU0\n" + "".join(rows)
        return self._root.read(rel, strip=False)


_PCI_DEVICES = "sys/bus/pci/devices/"
_PROC_IRQ = "proc/irq/"


def _folder_entries(root: Root, rel: str) -> Optional[List[str]]:
    entries = root.listdir(rel)
    return entries if entries or root.isdir(rel) else None


def device_present(root: Root, irq_name: str) -> bool:
    bdf = irq_name.partition("@pci:")[2]
    return bool(bdf) and root.isdir("sys/bus/pci/devices/" + bdf)


def irq_pending(root: Root, setting_id: str, irq_name: str) -> bool:
    """An IRQ not there is pending, not missing, where its driver creates it after probe and its device is there
    (rules.created_later: the rule nodetune-restore and nodetune-check follow too)."""
    return rules.created_later(setting_id, irq_name, device_present(root, irq_name))


def carried_irq_entries(root: Optional[Root],
                        planned: Iterable[Optional[str]]) -> Tuple[List[Dict[str, Any]], List[str]]:
    """The IRQ entries of the node's boot-restore state that this run keeps although discovery does not see their
    IRQ: mlx5 creates its completion vectors on first use (Linux 6.5+, commit f14c1a14e632: mlx5_comp_eqn_get() ->
    create_comp_eq(), drivers/net/ethernet/mellanox/mlx5/core/eq.c), so after a reboot only the vectors in use
    exist. Kept: entries of a device this run pins (``planned``: the action names it pins) whose device is there
    and whose IRQ is not; a run before they appear must not drop them from the restore. Returns (entries, the
    problems found in the state file). No root (rendering without a node): nothing kept."""
    names = set(name for name in planned if name)
    devices = set(name.partition("@pci:")[2] for name in names) - {""}
    if root is None or not devices:
        return [], []
    text = root.read(STATE_FILE % "irq", strip=False)
    if not text:
        return [], []
    try:
        entries = json.loads(text)["settings"]
        if not isinstance(entries, list):
            raise ValueError("'settings' is not a list")
    except (ValueError, KeyError, TypeError) as exc:
        return [], ["/%s cannot be read (%s): the IRQs it lists that are not there yet are not kept" % (
            STATE_FILE % "irq", exc)]
    problems: List[str] = []
    candidates = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        name, value = entry.get("irq_name"), entry.get("value")
        if not isinstance(name, str) or name in names or name.partition("@pci:")[2] not in devices:
            continue
        try:
            parse_cpulist(value if isinstance(value, str) else "")
        except ParseError:
            problems.append("/%s: %s has affinity %r, not a CPU list: not kept" % (STATE_FILE % "irq", name, value))
            continue
        candidates.append(entry)
    present = irq_numbers(root, [e["irq_name"] for e in candidates])
    kept = [e for e in candidates if e["irq_name"] not in present and irq_pending(root, e["id"], e["irq_name"])]
    return kept, problems


def _pending_entries(ctx: Context, carried: Tuple[List[Dict[str, Any]], List[str]]) -> List[Dict[str, Any]]:
    entries, problems = carried
    for problem in problems:
        ctx.warn("persist: " + problem)
    return [{"id": e["id"], "target": e["irq_name"], "irq_name": e["irq_name"], "path": None, "value": e["value"],
             "order": ORDER.get(e["id"], 90)} for e in entries]


def pending_irqs(root: Root, settings: List[Setting], topology: Optional[Dict[str, Any]] = None
                 ) -> List[Dict[str, Any]]:
    """The IRQ entries of the boot-restore state these Settings write whose IRQ does not exist yet (its device does):
    verify reports them as pending, not as drift; nodetune-irq-repin.timer pins each when its driver creates it."""
    state = next((s for s in settings if s.id == "persist.boot_restore" and s.target == "state:irq"), None)
    if state is None:
        return []
    entries = [e for e in json.loads(state.value)["settings"] if e.get("irq_name")]
    present = irq_numbers(root, [e["irq_name"] for e in entries], topology)
    return [e for e in entries if e["irq_name"] not in present and irq_pending(root, e["id"], e["irq_name"])]


def safe_irq_name(name: str) -> bool:
    """Whether an action name can go into the files nodetune writes one name per line (no blank, no newline)."""
    return bool(_SAFE_IRQ_NAME.match(name or ""))


def _udev_rules(settings: List[Setting]) -> str:
    by_device: Dict[str, Dict[str, Tuple[int, str]]] = {}
    for s in settings:
        # the attribute as udev's ATTR{} names it: relative to the device's folder (sys/block/<dev>/queue/scheduler)
        attr = s.path[len("sys/block/%s/" % s.target):]
        by_device.setdefault(s.target, {})[attr] = (s.order, s.value)
    if not by_device:
        return ""

    # In the Settings' apply order, the scheduler first: switching it resets nr_requests (udev applies ATTR
    # assignments in order).
    def assignments(attrs: Dict[str, Tuple[int, str]]) -> str:
        return ", ".join('ATTR{%s}="%s"' % (attr, value)
                         for attr, (_order, value) in sorted(attrs.items(), key=lambda item: (item[1][0], item[0])))
    # Whole namespaces only: udev's '*' also matches the 'p1' of a partition (nvme0n1p1), which has no queue/
    # folder, so every partition would log a failed ATTR write. DEVTYPE is 'disk' for a namespace, 'partition'
    # for its partitions (the kernel's block uevent).
    distinct = set(tuple(sorted(v.items())) for v in by_device.values())
    if len(distinct) == 1:
        attrs = next(iter(by_device.values()))
        return ('ACTION=="add|change", SUBSYSTEM=="block", ENV{DEVTYPE}=="disk", KERNEL=="nvme[0-9]*n[0-9]*", %s\n'
                % assignments(attrs))
    return "".join('ACTION=="add|change", SUBSYSTEM=="block", ENV{DEVTYPE}=="disk", KERNEL=="%s", %s\n'
                   % (dev, assignments(attrs)) for dev, attrs in sorted(by_device.items()))
