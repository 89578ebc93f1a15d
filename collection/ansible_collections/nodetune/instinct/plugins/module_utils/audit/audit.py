# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A node's audit: every finding (Settings, Layout, BIOS-level, health), waivers, summary and report.

Shared by the verify module (an audit alone) and the tune module (``verify``: the audit right after the apply, in
the same call). At fleet scale each module call costs a process start and a discovery per host, so site.yml's
apply-then-verify is one call; both paths build the findings with this very code.

Inputs are checked by ``prepare`` before anything else happens (in the tune module: before any write), so a bad
waiver or threshold never leaves a node half-applied.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.audit import bios as bios_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import bootloader
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import health as health_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import inventory as inventory_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import report as report_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import transport
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import summarize
from ansible_collections.nodetune.instinct.plugins.module_utils.audit.waivers import (
    WaiverError,
    apply_waivers,
    validate_waivers,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.apply.node import layout_summary
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError, Root
from ansible_collections.nodetune.instinct.plugins.module_utils.audit.verify import verify_settings

__all__ = ["WaiverError", "prepare", "audit", "read_waivers_file"]


def read_waivers_file(path: str) -> Any:
    """A list of waivers from a JSON or YAML file on the node."""
    try:
        with open(path, "r") as handle:
            text = handle.read()
    except (IOError, OSError) as exc:
        raise WaiverError("waivers_file %s cannot be read: %s" % (path, exc)) from None
    try:
        data = json.loads(text)
    except ValueError:
        try:
            import yaml  # optional on nodes
        except ImportError:
            raise WaiverError("waivers_file %s is not JSON, and PyYAML is not installed on the node to read YAML: "
                              "pass the list with the waivers option instead" % path) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise WaiverError("waivers_file %s is neither JSON nor valid YAML: %s" % (path, exc)) from None
    if isinstance(data, dict) and "waivers" in data:
        data = data["waivers"]
    return data or []


def prepare(bios: Dict[str, Any], health: Dict[str, Any], waivers: Optional[List[Any]],
            waivers_file: Optional[str] = None) -> List[Dict[str, Any]]:
    """Validate the bios and health variables and the waivers, reporting every mistake of both variable sets at
    once; returns the validated waivers. Raises SettingError (variables) or WaiverError."""
    errors: List[str] = []
    for validate, config in ((bios_mod.validate_config, bios), (health_mod.validate_config, health)):
        try:
            validate(config)
        except (bios_mod.BiosConfigError, health_mod.HealthConfigError) as exc:
            errors.extend(exc.errors)
    try:
        inventory_mod.validate((health or {}).get(inventory_mod.VARIABLE))
    except inventory_mod.InventoryConfigError as exc:
        errors.extend(exc.errors)
    if errors:
        raise bios_mod.BiosConfigError(errors)
    entries = list(waivers or [])
    if waivers_file:
        entries += read_waivers_file(waivers_file)
    return validate_waivers(entries)


def _default_node_name(root: Root) -> str:
    if root.is_host:
        return os.uname()[1]
    return root.read("proc/sys/kernel/hostname") or root.read("etc/hostname") or root.path


# The textfile's timestamp sample is new at every run. node_exporter's textfile collector reads the file at each
# scrape and exports its mtime as node_textfile_mtime_seconds (collector/textfile.go, processFile/exportMTimes), so the
# file is rewritten at every run to stay fresh, but only a change of its metrics is a change (a rerun that finds the
# node as before reports changed=false).
TIMESTAMP_SAMPLE = "nodetune_last_verify_timestamp_seconds "


def _metrics(text: Optional[str]) -> Optional[List[str]]:
    """The textfile's lines but its timestamp sample (None: no file)."""
    if text is None:
        return None
    return [line for line in text.splitlines() if not line.startswith(TIMESTAMP_SAMPLE)]


def _write_textfile(root: Root, path: str, text: str, check_mode: bool,
                    warn: Callable[[str], None]) -> Tuple[Dict[str, Any], Optional[Dict[str, str]]]:
    """Where the textfile went (``changed``: its metrics differ from the file's, or there was none; in check mode,
    whether they would) and, when it changes, its diff."""
    old = root.read(path, strip=False)
    changed = _metrics(old) != _metrics(text)
    diff = dict(before=old or "", after=text, before_header=path, after_header=path) if changed else None
    if check_mode:
        return {"path": path, "written": False, "changed": changed, "reason": "check mode"}, diff
    try:
        root.write_file(path, text, mode=0o644)
    except NodeFileError as exc:
        warn("the Prometheus textfile was not written: %s" % exc)
        return {"path": path, "written": False, "changed": False, "reason": str(exc)}, None
    return {"path": path, "written": True, "changed": changed}, diff


def audit(state: Any, areas: Dict[str, Any], bios: Dict[str, Any], health: Dict[str, Any],
          waivers: List[Dict[str, Any]], node_name: Optional[str] = None, textfile_path: Optional[str] = None,
          check_mode: bool = False, warn: Callable[[str], None] = lambda message: None,
          findings_format: str = "list", known_findings: Optional[str] = None) -> Dict[str, Any]:
    """The verify result of a loaded NodeState (node.load): changed, drift, findings, summary, report, notes and,
    with ``textfile_path``, where the Prometheus textfile went. ``findings_format`` ``json``: the findings as one
    JSON text and the report without them (the action plugins decode it: far cheaper for Ansible to return), and
    left out where their SHA-256 is ``known_findings``, that of the findings the controller holds
    (transport.compact)."""
    findings = verify_settings(state, areas)
    # the boot loader's entries too: a kernel command line fixed there and not yet booted is pending, not drift
    findings += bios_mod.check(state.topology, state.layout, bios, boot=bootloader.configured_lines(state.root))
    findings += health_mod.check(state.root, state.topology, health, areas)
    inventory_findings, inventory_facts = inventory_mod.check(state.root.path, health)
    findings += inventory_findings
    platform = bios_mod.platform_summary(state.topology, bios)
    notes = list(state.context.notes)
    notes += apply_waivers(findings, waivers)
    summary = summarize(findings)
    finding_dicts = [f.to_dict() for f in findings]
    report = report_mod.node_report(
        node_name or _default_node_name(state.root), finding_dicts, summary, root=state.root.path,
        extra={"platform": platform, "layout": layout_summary(state.layout), "notes": notes,
               "inventory": inventory_facts})
    result = dict(changed=False, drift=summary["drift"], findings=finding_dicts, summary=summary, report=report,
                  notes=notes)
    if textfile_path:
        text = report_mod.prometheus_text(finding_dicts, timestamp=report["timestamp"])
        result["textfile"], diff = _write_textfile(state.root, textfile_path, text, check_mode, warn)
        if diff is not None:  # the module returns it in diff mode (verify) or folds it into its own (tune)
            result.update(changed=True, diff=diff)
    return transport.compact(result, finding_dicts, findings_format, known_findings)
