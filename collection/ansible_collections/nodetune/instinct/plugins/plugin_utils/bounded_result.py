# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller side of the tune and verify actions: a host failed for drift prints a bounded result, its detail in
the files the run writes; ``nodetune_full_diff``.

Why: Ansible's default callback prints a failed task's whole result as one line (``fatal: [host]: FAILED! =>
{...}``; ansible-core ``plugins/callback/default.py`` ``v2_runner_on_failed`` -> ``CallbackBase._dump_results``,
which leaves out only ``invocation``, ``diff``, ``exception``, ``warnings`` and ``deprecations`` below ``-vvv``), and
the registered variable is that same result (``plugins/strategy/__init__.py``: ``strip_internal_keys`` of the
task's return data). A verify result carries every finding, ~1,700 on a full-size node, twice (``findings`` and
``report``), and a tune result every change: a drifting MI300X node printed a 600,000-character line.

So a result failed for drift keeps what a person reads (the message: counts per check id and the first findings,
the summary, the report file's path) and the rest moves out of it: the findings and the report are the node's report
file, written before the host fails (``findings_file`` names it); a tune result's changes and BIOS-level findings
go to ``<report dir>/tune/<host>.json`` (``spill_file``, ``spilled``). :func:`restored` puts them back for the code
that reads the registered results (the fleet reports, the apply summary, the Python API), so nothing is lost. Where
no report file is written (``nodetune_verify_write_reports: false``) the result is the only copy and stays whole.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
from collections.abc import Mapping

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas
from ansible_collections.nodetune.instinct.plugins.plugin_utils.report_files import write_text

FULL_DIFF = areas.FULL_DIFF
#: a drift failure's printed result stays under this many characters
MAX_FAILURE_CHARS = 4096
SHOWN_IDS = 12
SHOWN_FINDINGS = 5
VALUE_WIDTH = 60
#: the keys of a tune result that move to its spill file when it fails for drift
TUNE_SPILLED = ("actions", "bios", "unconfirmed")
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


def bound_drift_failure(result, audit, findings, report_file, host):
    """Shape ``result`` (failed for drift; ``audit`` is the verify result in it, or the same dict, ``findings`` its
    decoded findings) so that it prints under :data:`MAX_FAILURE_CHARS`: the message, and the detail moved to the
    node's report file (already written) and, for a tune result, the spill file beside it."""
    result["msg"] = drift_message(host, findings, report_file)
    if not report_file:
        return
    report_file = os.path.abspath(report_file)
    audit.pop("findings", None)
    audit.pop("report", None)
    audit["findings_file"] = report_file
    if audit is result:
        return
    spilled = [key for key in TUNE_SPILLED if key in result]
    if spilled:
        path = os.path.join(os.path.dirname(os.path.dirname(report_file)), SPILL_DIR, os.path.basename(report_file))
        try:
            write_text(path, json.dumps(dict((key, result[key]) for key in spilled), separators=(",", ":")) + "\n")
        except (IOError, OSError) as exc:  # kept in the result, whole: nothing is lost for a smaller line
            result["msg"] += "; the tune result is printed whole: %s could not be written (%s)" % (path, exc)
            return
        for key in spilled:
            del result[key]
        result.update(spill_file=path, spilled=spilled)


def _load(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return None


def restored(result):
    """``result`` as it was before :func:`bound_drift_failure`: a verify result's findings and report from the
    node's report file, a tune result's spilled keys from their file (a new dict; the stored one is left as it is).
    One level only: the audit inside a tune result (``verify``) is restored by its own call, so that a reader of
    the changes does not parse every finding. A result that moved nothing out, or whose files are gone, is returned
    as it is."""
    if not isinstance(result, Mapping):
        return result
    out = None
    if result.get("findings_file") and "findings" not in result:
        report = _load(result["findings_file"])
        if isinstance(report, dict) and isinstance(report.get("findings"), list):
            out = dict(result, findings=report["findings"], report=report)
    if result.get("spill_file") and isinstance(result.get("spilled"), list):
        data = _load(result["spill_file"])
        if isinstance(data, dict):
            out = dict(out or result)
            out.update((key, data[key]) for key in result["spilled"] if key in data)
    return result if out is None else out


__all__ = ["FULL_DIFF", "MAX_FAILURE_CHARS", "bound_drift_failure", "drift_message", "full_diff", "restored"]
