# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller side of the tune and verify actions: every result is a bounded summary, its per-value detail in the
node's files on the controller; a host failed for drift prints a bounded message; ``nodetune_full_diff``.

Why: what Ansible keeps of a task is its result, per host, to the end of the play (registered, ``hostvars``; the
strategy's ``strip_internal_keys`` of the task's return data, ansible-core ``plugins/strategy/__init__.py``), and
its default callback prints a failed task's whole result as one line (``plugins/callback/default.py``
``v2_runner_on_failed`` -> ``CallbackBase._dump_results``). A full-size MI300X node's first run returned ~1,064
changes and ~1,800 findings: about 1.3 MB of JSON kept per host on the controller, and a 600,000-character line
when it failed for drift.

So where the run writes the node's report (``nodetune_verify_write_reports``, the default), the action plugin,
in the worker process that received the module's result, writes the detail to the node's files and keeps
(:func:`bound`):

- of a verify result (verify's own, or ``verify`` in a tune result): ``changed``, ``drift``, the ``summary`` (counts
  per status and the drifting check ids, the first :data:`MAX_DRIFT_IDS`), ``notes``, ``textfile`` and
  ``findings_file``, the report file that holds the findings and the report;
- of a tune result: everything but its lists (``actions``, ``bios``, ``unconfirmed``, ``restored``, ``gone``), which
  go to ``<report dir>/tune/<host>.json`` (``spill_file``; ``spilled``: each key moved with its number of items),
  and ``changed_ids`` (per Setting id, how many values changed: what the apply summary counts).

The diff (``--diff``: at most 200 lines per node, ``module_utils/apply/diff_view.py``) and the failure message stay.
:func:`restored` puts the detail back for the code that reads it (the fleet reports, the Python API), one host at
a time. Where no report is written (``nodetune_verify_write_reports: false``) the result is the only copy and stays
whole.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
from collections.abc import Mapping

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import transport
from ansible_collections.nodetune.instinct.plugins.module_utils.audit.report import report_file_name
from ansible_collections.nodetune.instinct.plugins.plugin_utils.report_files import write_text

FULL_DIFF = areas.FULL_DIFF
#: a drift failure's printed result stays under this many characters
MAX_FAILURE_CHARS = 4096
SHOWN_IDS = 12
SHOWN_FINDINGS = 5
VALUE_WIDTH = 60
#: the drifting check ids a bounded summary names (the report file has every one)
MAX_DRIFT_IDS = 64
#: the keys of a tune result that move to its spill file
TUNE_SPILLED = ("actions", "bios", "unconfirmed", "restored", "gone")
SPILL_DIR = "tune"


def full_diff(action, task_vars, errors):
    """``nodetune_full_diff`` for this host, True or False; a value that is not a boolean is an error naming it."""
    value = action._templar.template(task_vars.get(FULL_DIFF, False))
    try:
        return boolean(value, strict=True)
    except TypeError:
        if not any(error.startswith(FULL_DIFF) for error in errors):  # the role's own validation may have said it
            errors.append("%s=%r is not valid: expected true or false" % (FULL_DIFF, value))
        return False


def _short(value):
    text = "absent" if value is None else str(value).replace("\n", "\\n")
    return text if len(text) <= VALUE_WIDTH else text[:VALUE_WIDTH - 3] + "..."


def drift_message(node, findings, report_file):
    """The failure message of a drifting node: how many findings drift, per check id (the first
    :data:`SHOWN_IDS`), the first :data:`SHOWN_FINDINGS` with expected and actual values, and where the rest is."""
    drifting = [f for f in findings if isinstance(f, dict) and f.get("status") == "drift"]
    counts = {}
    for finding in drifting:
        counts[str(finding.get("id"))] = counts.get(str(finding.get("id")), 0) + 1
    ids = ", ".join("%s (%d)" % item for item in list(counts.items())[:SHOWN_IDS])
    if len(counts) > SHOWN_IDS:
        ids += " and %d more check(s)" % (len(counts) - SHOWN_IDS)
    # the first finding of each check first (of the first SHOWN_FINDINGS checks), then the next ones
    firsts = {}
    for index, finding in enumerate(drifting):
        firsts.setdefault(str(finding.get("id")), index)
    picked = sorted(list(firsts.values())[:SHOWN_FINDINGS])
    picked += [i for i in range(len(drifting)) if i not in picked][:SHOWN_FINDINGS - len(picked)]
    shown = [drifting[i] for i in sorted(picked)]
    first = "; ".join("%s[%s]: expected %s, found %s" % (f.get("id"), _short(f.get("target")),
                                                         _short(f.get("expected")), _short(f.get("actual")))
                      for f in shown)
    where = ("every finding, with its remedy, is in %s" % report_file if report_file else
             "every finding is in this result (no report file: nodetune_verify_write_reports is false)")
    return "nodetune verify found drift on %s: %d finding(s) of %d check(s) drift: %s; first: %s%s; %s" % (
        node, len(drifting), len(counts), ids, first, "; ..." if len(drifting) > SHOWN_FINDINGS else "", where)


def spill_path(report_dir, host):
    """``<report dir>/tune/<host>.json``: where a tune result's lists go (the host name %-encoded)."""
    return os.path.join(str(report_dir), SPILL_DIR, report_file_name(host))


def bound(result, audit, findings, report_file, spill_file, host):
    """Shape ``result`` into its bounded summary (see the module's doc). ``audit`` is the verify result in it (the
    same dict for verify, None for a tune without one), ``findings`` its decoded findings, ``report_file`` the node's
    report when it was written (None: the audit stays whole), ``spill_file`` where a tune result's lists go (None:
    they stay). A host failed for drift gets :func:`drift_message`."""
    if result.get("failed_on_drift"):
        result["msg"] = drift_message(host, findings or [], report_file)
    if audit is not None and report_file:
        for key in (transport.FINDINGS, transport.REPORT):
            audit.pop(key, None)
        audit["findings_file"] = os.path.abspath(report_file)
        _cap_drift_ids(audit)
    if spill_file and audit is not result:
        _spill(result, os.path.abspath(spill_file))


def _cap_drift_ids(audit):
    summary = audit.get("summary")
    ids = summary.get("drift_ids") if isinstance(summary, dict) else None
    if isinstance(ids, list) and len(ids) > MAX_DRIFT_IDS:
        audit["summary"] = dict(summary, drift_ids=ids[:MAX_DRIFT_IDS], drift_ids_total=len(ids))


def _spill(result, path):
    """A tune result's lists to ``path``; where it cannot be written they stay, with the reason in ``warnings``."""
    moved = dict((key, result[key]) for key in TUNE_SPILLED if isinstance(result.get(key), list) and result[key])
    if not moved:
        return
    try:
        write_text(path, json.dumps(moved, separators=(",", ":")) + "\n")
    except (IOError, OSError) as exc:  # kept in the result, whole: nothing is lost for a smaller result
        result.setdefault("warnings", []).append("nodetune: the tune result is kept whole: %s could not be written "
                                                 "on the controller (%s)" % (path, exc))
        return
    if "actions" in moved:
        result["changed_ids"] = changed_ids(moved["actions"])
    for key in moved:
        del result[key]
    result.update(spill_file=path, spilled=dict((key, len(items)) for key, items in moved.items()))


def changed_ids(actions):
    """Setting id -> how many of its values the actions change."""
    counts = {}
    for action in actions:
        key = str(action.get("id")) if isinstance(action, dict) else "?"
        counts[key] = counts.get(key, 0) + 1
    return counts


def _load(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return None


def restored(result):
    """``result`` with its detail back from the files :func:`bound` wrote: a verify result's findings and report from
    the node's report file, a tune result's lists from its spill file (a new dict; the stored one is left as it is).
    One level only: the audit inside a tune result (``verify``) is restored by its own call, so that a reader of
    the changes does not parse every finding. A result that moved nothing out, or whose files are gone, is returned
    as it is."""
    if not isinstance(result, Mapping):
        return result
    out = None
    if result.get("findings_file") and transport.FINDINGS not in result:
        report = _load(result["findings_file"])
        findings = report.get(transport.FINDINGS) if isinstance(report, dict) else None
        if isinstance(findings, list):
            out = transport.with_findings(dict(result, report=report), findings)
            if isinstance(report.get("summary"), dict):
                out["summary"] = report["summary"]  # every drifting id
    if result.get("spill_file") and isinstance(result.get("spilled"), (list, Mapping)):
        data = _load(result["spill_file"])
        if isinstance(data, dict):
            out = dict(out or result)
            out.update((key, data[key]) for key in result["spilled"] if key in data)
    return result if out is None else out


__all__ = ["FULL_DIFF", "MAX_FAILURE_CHARS", "bound", "changed_ids", "drift_message", "full_diff", "restored",
           "spill_path"]
