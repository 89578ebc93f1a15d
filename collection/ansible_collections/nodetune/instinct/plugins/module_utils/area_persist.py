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

from typing import Any, Dict, List

from ansible_collections.nodetune.instinct.plugins.module_utils import interpreter, sysctl_boot
from ansible_collections.nodetune.instinct.plugins.module_utils.area_common import Context
from ansible_collections.nodetune.instinct.plugins.module_utils.json_text import one_per_line
from ansible_collections.nodetune.instinct.plugins.module_utils.setting import FILE, SERVICE, Setting

AREA = "persist"
SYSCTL_FILE = "etc/sysctl.d/90-nodetune-%s.conf"  # % area
UDEV_FILE = "etc/udev/rules.d/60-nodetune-nvme.rules"
STATE_DIR = "etc/nodetune/boot-restore.d"
STATE_FILE = STATE_DIR + "/%s.json"  # % area
SCRIPT_FILE = "usr/local/sbin/nodetune-restore"
UNIT = "nodetune-restore.service"
UNIT_FILE = "etc/systemd/system/" + UNIT
HEADER = "# Managed by nodetune. Local changes are reported as drift and overwritten.\n"

# nodetune-restore without its #! line, which names the node's system Python (interpreter.shebang)
RESTORE_PROGRAM = '''"""nodetune-restore: re-apply the runtime settings nodetune tuned, at boot (rendered by nodetune).

Reads every /etc/nodetune/boot-restore.d/*.json (one per tuned area) and writes each value in dependency
order (SMT before IRQ affinity, governor before EPP). Kernel-managed IRQs and missing devices are reported and
skipped; the exit status is 1 when any write failed.
"""
import json
import os
import sys


def main(argv):
    root = argv[argv.index("--root") + 1] if "--root" in argv else "/"
    state_dir = os.path.join(root, "%(state)s")
    items = []
    for name in sorted(os.listdir(state_dir)):
        if name.endswith(".json"):
            with open(os.path.join(state_dir, name)) as handle:
                items.extend(json.load(handle)["settings"])
    items.sort(key=lambda item: (item.get("order", 90), item["id"], item["target"]))
    irq_numbers = {}
    with open(os.path.join(root, "proc/interrupts")) as handle:
        for line in handle.read().splitlines()[1:]:
            head, _, rest = line.partition(":")
            if head.strip().isdigit() and rest.split():
                irq_numbers.setdefault(rest.split()[-1], int(head))
    failed = 0
    for item in items:
        if item.get("irq_name"):
            # IRQ numbers change across reboots (e.g. after new nvme queue options); action names do not.
            number = irq_numbers.get(item["irq_name"])
            if number is None:
                failed += 1
                sys.stderr.write("nodetune-restore: IRQ %%s not found in /proc/interrupts\\n" %% item["irq_name"])
                continue
            item["path"] = "proc/irq/%%d/smp_affinity_list" %% number
        path = os.path.join(root, item["path"])
        try:
            with open(path, "w") as handle:
                handle.write(item["value"])
        except OSError as exc:
            failed += 1
            sys.stderr.write("nodetune-restore: %%s[%%s] %%s: %%s\\n" %% (item["id"], item["target"], path, exc))
    sys.stdout.write("nodetune-restore: %%d settings, %%d failed\\n" %% (len(items), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
''' % {"state": STATE_DIR}

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


def _by_area(settings: List[Setting]) -> Dict[str, List[Setting]]:
    groups: Dict[str, List[Setting]] = {}
    for setting in settings:
        groups.setdefault(setting.area, []).append(setting)
    return groups


def _state_entry(setting: Setting) -> Dict[str, Any]:
    """One boot-restore entry. IRQs are named by their action name, found again at boot (numbers change)."""
    if setting.id == "irq.nic_local" and setting.key:
        return {"id": setting.id, "target": setting.key, "irq_name": setting.key, "path": None,
                "value": setting.value, "order": setting.order}
    # an IPoIB MTU the kernel caps is restored at the requested value (its key): the kernel keeps that as its admin
    # MTU and applies the cap itself, so the interface rises once the subnet manager's broadcast group allows it
    value = setting.key if setting.id == "ib.mtu" and setting.key else setting.value
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
        state = {"version": 1, "settings": sorted((_state_entry(s) for s in group),
                                                  key=lambda e: (e["order"], e["id"], e["target"]))}
        out.append(Setting("persist.boot_restore", "state:" + area, STATE_FILE % area,
                           one_per_line(state, "settings"), kind=FILE, compare="content", area=AREA, mode=0o644,
                           reason="runtime settings a reboot resets, re-applied by nodetune-restore.service"))
    if runtime:
        script = interpreter.shebang(root=ctx.root) + RESTORE_PROGRAM
        out.append(Setting("persist.boot_restore", "script", SCRIPT_FILE, script, kind=FILE,
                           compare="content", area=AREA, mode=0o755, reason="the boot-time restore program"))
        out.append(Setting("persist.boot_restore", "unit", UNIT_FILE, UNIT_TEXT, kind=FILE, compare="content",
                           area=AREA, reason="runs nodetune-restore once at boot"))
        if ctx.services is not None:
            out.append(Setting("persist.boot_restore", UNIT, "", "enabled=yes", kind=SERVICE, area=AREA,
                               reason="enable the boot-time restore", after=(UNIT_FILE, SCRIPT_FILE)))
    if any(s.id == "persist.sysctl_d" for s in out):
        for entry in sysctl_boot.shadowed(ctx.root, settings + out):
            ctx.warn("persist: " + sysctl_boot.message(entry))
    return out


def _udev_rules(settings: List[Setting]) -> str:
    by_device: Dict[str, Dict[str, str]] = {}
    for s in settings:
        attr = "queue/scheduler" if s.id == "nvme.scheduler" else "queue/nr_requests"
        by_device.setdefault(s.target, {})[attr] = s.value
    if not by_device:
        return ""

    # Scheduler first: switching it resets nr_requests (udev applies ATTR assignments in order).
    def assignments(attrs: Dict[str, str]) -> str:
        return ", ".join('ATTR{%s}="%s"' % (a, attrs[a])
                         for a in ("queue/scheduler", "queue/nr_requests") if a in attrs)
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
