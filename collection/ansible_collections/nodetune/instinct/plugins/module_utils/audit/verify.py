# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Verify: re-read the node and compare it with the very Settings apply would write, plus Layout checks.

Never writes. Works against a read-only system (it only opens files for reading and asks systemd for state).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ansible_collections.nodetune.instinct.plugins.module_utils.areas import limits as area_limits
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import persist as area_persist
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import kernel_cmdline as area_kernel_cmdline
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import slurm as area_slurm
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import (
    DRIFT,
    NOT_APPLICABLE,
    OK,
    Finding,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import sysctl_boot
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import format_cpulist
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import (
    FILE,
    SERVICE,
    Setting,
    desired,
    read_current,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.tuning import AREAS

# Setting.area -> the severity of its drift, and the tag (area role) that restores it (areas/declarations.py declares
# both)
SEVERITY_BY_AREA = dict([(areas.ROLES[name]["setting_area"], areas.ROLES[name]["severity"]) for name in areas.AREAS]
                        + [("persist", "low")])
TAG_BY_AREA = dict([(areas.ROLES[name]["setting_area"], name) for name in areas.AREAS] + [("persist", "apply")])
REMEDY = "run the nodetune apply (site.yml or playbooks/apply.yml, --tags %s) to restore it"
# An IRQ whose affinity is right but whose effective CPU is not yet in it: without interrupt remapping the kernel
# moves it at its next interrupt (kernel/irq/manage.c, irq_set_affinity_locked(): the mask stays pending;
# kernel/irq/migration.c, irq_move_masked_irq()), and an IRQ that never fires never moves. Not drift: ok, noted.
PENDING = " (pending: the kernel moves it at the IRQ's next interrupt)"


def _shown(setting: Setting, value: Optional[str]) -> Optional[str]:
    if setting.kind == FILE and value is not None:
        return "<file, %d bytes>" % len(value)
    return value


def setting_findings(root: Any, settings: List[Setting], services: Any = None,
                     readings: Optional[Dict[int, Optional[str]]] = None) -> List[Finding]:
    """One finding per Setting: its current value against the desired one. ``readings``: the values a plan of these
    very Settings read (engine.plan_actions) while the node has not been written since: each is read once a run."""
    findings = []
    for setting in settings:
        actual = readings[id(setting)] if readings is not None and id(setting) in readings else read_current(
            root, setting, services)
        expected = desired(setting)
        status = OK if actual == expected else DRIFT
        findings.append(Finding(
            setting.id, setting.target if setting.kind != FILE else "/" + setting.path,
            _shown(setting, expected), _shown(setting, actual), status,
            severity=SEVERITY_BY_AREA.get(setting.area, "medium"),
            remedy="" if status == OK else (REMEDY % _tag(setting)) + (
                "; %s" % setting.reason if setting.reason else ""),
            source="setting"))
    return findings


def _tag(setting: Setting) -> str:
    return TAG_BY_AREA.get(setting.area, setting.area)


def layout_findings(topology: Dict[str, Any], layout: Dict[str, Any], areas: Dict[str, Any],
                    pinned: Optional[List[str]] = None) -> List[Finding]:
    """Where the kernel really put things: effective affinity of pinned NIC IRQs, managed IRQs (info).

    ``pinned`` lists the targets ("irq N") that apply pins; IRQs the irq area left alone (irqbalance not
    stopped, pinning off) are not expected anywhere. None means every IRQ the Layout places.
    """
    findings: List[Finding] = []
    irq_area = areas.get("irq_affinity") or {}
    if "irq_affinity" in areas and irq_area.get("nodetune_irq_pin_nic", True):
        by_number = dict((entry["irq"], entry) for entry in topology.get("irqs", []))
        for planned in layout.get("irq_affinity") or []:
            if pinned is not None and "irq %d" % planned["irq"] not in pinned:
                continue
            irq = by_number.get(planned["irq"]) or {}
            effective = irq.get("effective_affinity_list")
            if effective is None:
                continue  # kernels without effective_affinity_list: the Setting on smp_affinity_list covers it
            inside = set(effective) <= set(planned["cpus"])
            actual = format_cpulist(effective)
            if not inside and set(irq.get("smp_affinity_list") or ()) == set(planned["cpus"]):
                actual += PENDING
                inside = True
            findings.append(Finding(
                "irq.nic_local", "irq %d effective" % planned["irq"], format_cpulist(planned["cpus"]),
                actual, OK if inside else DRIFT, severity="high", source="layout",
                remedy="" if inside else "the kernel delivers this NIC IRQ outside its planned CPUs: is irqbalance "
                                         "running again? " + REMEDY % "irq_affinity"))
    managed = layout.get("managed_irqs") or []
    if managed:
        devices = sorted(set(str(m.get("device")) for m in managed))
        findings.append(Finding(
            "irq.managed", "%d IRQs" % len(managed), "kernel-managed (never written)",
            "on %d device(s): %s" % (len(devices), ", ".join(devices[:8]) + (" ..." if len(devices) > 8 else "")),
            OK, severity="info", source="layout"))
    return findings


def applicability_findings(areas: Dict[str, Any], settings: List[Setting], notes: List[str]) -> List[Finding]:
    """An enabled area that produced nothing on this node is reported as not applicable, with the reason."""
    findings = []
    produced = set(s.area for s in settings)
    # area role -> setting_area (areas/declarations.py)
    area_of = dict((name, area) for area, name in TAG_BY_AREA.items())
    for name in AREAS:
        config = areas.get(name)
        if config is None or config.get("nodetune_%s_enabled" % name, True) is False:
            continue
        if area_of.get(name, name) in produced:
            continue
        key = area_of.get(name, name)
        why = [n for n in notes if n.startswith(key + ":") or n.startswith(name + ":")]
        findings.append(Finding(name + ".applicable", "-", "settings for this node", "none",
                                NOT_APPLICABLE, severity="info", source="setting",
                                remedy="; ".join(why) or "nothing to tune in this area with these variables"))
    return findings


def sysctl_boot_findings(root: Any, settings: List[Setting]) -> List[Finding]:
    """Each persisted sysctl's value at the next boot: drift where a later sysctl.d file (or /etc/sysctl.conf
    through 99-sysctl.conf) sets it otherwise, naming that file."""
    findings = []
    for entry in sysctl_boot.boot_checks(root, settings):
        bad = entry["shadowed"]
        findings.append(Finding(
            sysctl_boot.CHECK_ID, entry["key"], entry["value"],
            sysctl_boot.actual(entry), DRIFT if bad else OK,
            severity="medium", source="setting", remedy=sysctl_boot.message(entry) if bad else ""))
    return findings


def verify_settings(state: Any, areas: Dict[str, Any]) -> List[Finding]:
    """All setting, layout and applicability findings of a loaded NodeState (node.load)."""
    findings = setting_findings(state.root, state.settings, state.services, state.readings)
    findings += sysctl_boot_findings(state.root, state.settings)
    pinned = [s.target for s in state.settings if s.id == "irq.nic_local"]
    findings += layout_findings(state.topology, state.layout, areas, pinned)
    findings += applicability_findings(areas, state.settings, state.context.notes)
    findings += pending_irq_findings(state.root, state.settings, state.topology)
    findings += area_kernel_cmdline.running_findings(state.root, state.settings)
    # the limits area's files in effect: pam's and systemd's winning lines, the manager's and slurmd's limits
    findings += area_limits.effective_findings(state.root, state.settings, state.services)
    # the slurm area's read-only checks: slurm.conf's limit propagation, slurmd's memlock, gres.conf's Include
    findings += area_slurm.readonly_findings(state.root, state.settings, areas)
    return findings


def pending_irq_findings(root: Any, settings: List[Setting],
                         topology: Optional[Dict[str, Any]] = None) -> List[Finding]:
    """IRQs the boot restore pins whose driver has not created them yet (mlx5 creates its completion vectors on
    first use since Linux 6.5): not applicable until they appear, not drift; nodetune-irq-repin.timer pins each
    then, and from then on the IRQ is checked like any other (area_persist.pending_irqs)."""
    return [Finding(entry["id"], entry["irq_name"], entry["value"], "not created yet", NOT_APPLICABLE, severity="info",
                    source="setting", remedy="pending: its driver creates it on first use and "
                                             "nodetune-irq-repin.timer pins it when it appears")
            for entry in area_persist.pending_irqs(root, settings, topology)]


__all__ = ["verify_settings", "setting_findings", "layout_findings", "applicability_findings", "SERVICE"]
