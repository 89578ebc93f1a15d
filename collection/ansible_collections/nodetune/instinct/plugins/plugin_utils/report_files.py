# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller side of an audit's results, shared by the tune and verify action plugins (and fleet_report): the
findings back from their JSON transport text (module_utils/audit/transport.py), the node's JSON report written on
the controller, a host failed on
drift after its report is written, and the inventory each node's group majority taught the fleet report, kept for
the next apply (``<report dir>/learned/<host>.json``)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import tempfile

from ansible.errors import AnsibleError

from ansible_collections.nodetune.instinct.plugins.module_utils.audit import inventory as inventory_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import outliers as outliers_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import transport
from ansible_collections.nodetune.instinct.plugins.module_utils.audit.finding import group_findings
from ansible_collections.nodetune.instinct.plugins.module_utils.json_text import one_per_line
from ansible_collections.nodetune.instinct.plugins.module_utils.audit.report import report_file_name

LEARNED_DIR = "learned"
LEARNED_VERSION = 1


def expand_findings(result, findings=None):
    """The module's JSON text of findings back into one list, shared by ``findings`` and ``report``, in place
    (transport.expanded; ``findings``: the list where it is decoded already)."""
    try:
        result.update(transport.expanded(result, findings))
    except transport.TransportError as exc:
        raise AnsibleError("nodetune returned verify findings that are not valid: %s" % exc) from None


def decoded_findings(result):
    """The findings of a verify result as a list (transport.decode), or None where it holds none."""
    try:
        return transport.decode(result.get(transport.FINDINGS))
    except transport.TransportError as exc:
        raise AnsibleError("nodetune returned verify findings that are not valid: %s" % exc) from None


def finish_audit(result, audit, controller):
    """Write the node's report on the controller, then fail the host on drift where asked (``result`` is the task
    result, ``audit`` the verify result inside it or the same dict). A host failed for drift keeps its report and
    says so with ``failed_on_drift``, so the fleet reports count it as drifted, not as a node verify could not
    run on. Returns the audit's findings (decoded once) and the report file written, or None where none was."""
    report = audit.get(transport.REPORT)
    findings = decoded_findings(audit)
    written = None
    if controller.get("report_file") and isinstance(report, dict) and not result.get("failed"):
        if findings is not None:
            report = transport.report_with(report, findings)
        if controller.get("report_extra"):  # the run and the host's groups, for fleet reports over many runs
            report = with_checks(dict(report, **controller["report_extra"]))
        try:
            write_report(controller["report_file"], report)
        except (IOError, OSError) as exc:
            result.update(failed=True, msg="nodetune verify: the report %s could not be written on the "
                                           "controller: %s" % (controller["report_file"], exc))
            return findings, None
        written = controller["report_file"]
    if controller.get("fail_on_drift") and audit.get("drift") and not result.get("failed"):
        ids = ((audit.get("summary") or {}).get("drift_ids")) or []
        where = " (details in %s)" % controller["report_file"] if controller.get("report_file") else ""
        result.update(failed=True, failed_on_drift=True,
                      msg="nodetune verify found drift: %s%s" % (", ".join(ids), where))
    return findings, written


def write_report(path, report):
    """The node's report: a line per top-level key and per finding (written at every run for every node, so by
    the C encoder: ``to_nice_json`` costs the controller more than the audit costs the node)."""
    write_text(path, one_per_line(report, "findings", indent=4, ensure_ascii=False))


def with_checks(report):
    """The report with ``checks`` (its findings grouped per check id, finding.group_findings) right before its
    findings: a fleet report over report files reads them instead of decoding every finding
    (plugin_utils/fleet_reports.py), most of the cost of reading a full-size node's report."""
    findings = report.get("findings")
    if not isinstance(findings, list):
        return report
    out = {}
    for key, value in report.items():
        if key == "findings":
            out["checks"] = group_findings(findings)
        if key != "checks":
            out[key] = value
    return out


def write_text(path, text):
    """Atomically, mode 0644, creating the directory: a reader never sees half a report."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, 0o755, exist_ok=True)  # the forks of one play write their nodes' reports at once
    handle, tmp = tempfile.mkstemp(prefix=".nodetune-report-", dir=directory)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# ------------------------------------------------------------------------------------------------ learned inventory
# The fleet report (run_once, every host's facts in view) learns each node's expectation from its group majority;
# the next apply runs per host and sees only its own. So the expectation waits on the controller, one small file per
# host beside the reports (nodes/<host>.json), read by the tune and verify actions of that host only.
def learned_path(report_dir, host):
    """``<report_dir>/learned/<host>.json``, the host name %-encoded as for its report."""
    return os.path.join(str(report_dir), LEARNED_DIR, report_file_name(host))


def read_learned(path):
    """The learned expectation kept at ``path`` (``expected`` and ``groups``, as inventory.validate_learned takes
    them), or None where there is none; raises ValueError naming the file and what is wrong with it."""
    try:
        with open(path) as handle:
            text = handle.read()
    except (IOError, OSError) as exc:
        if not os.path.exists(path):
            return None
        raise ValueError("the learned inventory %s cannot be read on the controller: %s" % (path, exc)) from None
    remove = "(written by the fleet report of a verify run: remove it, and the next verify learns again)"
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError("the learned inventory %s is not valid JSON (%s) %s" % (path, exc, remove)) from None
    if not isinstance(data, dict) or data.get("version") != LEARNED_VERSION:
        raise ValueError("the learned inventory %s is not one the fleet report writes (a mapping with version %d, "
                         "expected and groups) %s" % (path, LEARNED_VERSION, remove))
    learned = dict((key, value) for key, value in data.items() if key != "version")
    try:
        inventory_mod.validate_learned(learned, "learned")
    except inventory_mod.InventoryConfigError as exc:
        raise ValueError("the learned inventory %s is not valid: %s %s" % (path, "; ".join(exc.errors), remove)) \
            from None
    return learned


def keep_learned(path, learned, action):
    """Do ``action`` (outliers.learned_file_action: write, delete or keep) with the host's file; a file that
    already says the same is not rewritten. Returns whether the file changed."""
    if action == "delete":
        if os.path.lexists(path):
            os.unlink(path)
            return True
        return False
    if action != "write":
        return False
    text = json.dumps(dict(learned, version=LEARNED_VERSION), indent=1, sort_keys=True) + "\n"
    try:
        with open(path) as handle:
            if handle.read() == text:
                return False
    except (IOError, OSError):
        pass
    write_text(path, text)
    return True


def add_learned_to_report(path, findings):
    """The node's report file on the controller with its learned findings and its summary counted again
    (outliers.with_learned); nothing where the run wrote no report for the node. Returns whether it was
    rewritten."""
    try:
        with open(path) as handle:
            report = json.load(handle)
    except (IOError, OSError):
        if not os.path.exists(path):
            return False
        raise
    except ValueError as exc:
        raise IOError("the report %s is not valid JSON: %s" % (path, exc)) from None
    updated = outliers_mod.with_learned(report, findings)
    write_report(path, with_checks(updated) if "checks" in report else updated)
    return True
