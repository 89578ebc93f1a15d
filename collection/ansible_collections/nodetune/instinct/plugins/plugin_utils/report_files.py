# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller side of an audit's results, shared by the tune and verify action plugins (and fleet_report): the
findings back from their JSON transport text, the node's JSON report written on the controller, a host failed on
drift after its report is written."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import tempfile

from ansible.errors import AnsibleError

from ansible_collections.nodetune.instinct.plugins.module_utils.json_text import one_per_line


def expand_findings(result):
    """The module's JSON text of findings back into one list, shared by ``findings`` and ``report``."""
    findings = decoded_findings(result)
    if findings is None:
        return
    result["findings"] = findings
    if isinstance(result.get("report"), dict):
        result["report"] = report_with(result["report"], findings)


def decoded_findings(result):
    text = result.get("findings")
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise AnsibleError("nodetune returned verify findings that are not valid JSON: %s" % exc) from None


def report_with(report, findings):
    """The report with its findings, in the module's key order: findings right after summary."""
    merged = dict(report)
    merged["findings"] = findings
    keys = [k for k in merged if k != "findings"]
    position = keys.index("summary") + 1 if "summary" in keys else len(keys)
    return dict((k, merged[k]) for k in keys[:position] + ["findings"] + keys[position:])


def finish_audit(result, audit, controller):
    """Write the node's report on the controller, then fail the host on drift where asked (``result`` is the task
    result, ``audit`` the verify result inside it or the same dict). A host failed for drift keeps its report and
    says so with ``failed_on_drift``, so the fleet reports count it as drifted, not as a node verify could not
    run on."""
    report = audit.get("report")
    if controller.get("report_file") and isinstance(report, dict) and not result.get("failed"):
        findings = decoded_findings(audit)  # the tune action keeps them as text in its result
        if findings is not None:
            report = report_with(report, findings)
        try:
            write_report(controller["report_file"], report)
        except (IOError, OSError) as exc:
            result.update(failed=True, msg="nodetune verify: the report %s could not be written on the "
                                           "controller: %s" % (controller["report_file"], exc))
            return
    if controller.get("fail_on_drift") and audit.get("drift") and not result.get("failed"):
        ids = ((audit.get("summary") or {}).get("drift_ids")) or []
        where = " (details in %s)" % controller["report_file"] if controller.get("report_file") else ""
        result.update(failed=True, failed_on_drift=True,
                      msg="nodetune verify found drift: %s%s" % (", ".join(ids), where))


def write_report(path, report):
    """The node's report: a line per top-level key and per finding (written at every run for every node, so by
    the C encoder: ``to_nice_json`` costs the controller more than the audit costs the node)."""
    write_text(path, one_per_line(report, "findings", indent=4, ensure_ascii=False))


def write_text(path, text):
    """Atomically, mode 0644, creating the directory: a reader never sees half a report."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
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
