# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""nodetune.instinct.fleet_report: the fleet JUnit XML and summary written on the controller, in one task.

Why an action plugin with no module: the reports are controller files built from every host's registered verify
result. Templated into a ``copy`` task (content), a fleet's JUnit XML (1,700 testcases per MI300X node) cost
seconds per play in ansible-core 2.19 - the text is templated, staged and checksummed, and each loop item is two
module runs - and grew with the fleet. Here the results are read from hostvars as stored (``raw_get``), the files
are written atomically by Python, and nothing contacts a node.

It is also where every host's facts are in view, so the group majorities are learned here
(module_utils/audit/outliers.py):
a host that differs from its group on an inventory key nothing declares gets the ``inventory.<key>`` drift finding
a declaration would give, marked ``source: learned``, in its report file, the fleet summary and JUnit, and this
task's ``learned_findings`` (the API puts it into the host's result). Each host's learned expectation is kept in
``<dest>/learned/<host>.json`` for the next apply, which writes it into nodetune-check's files (the tune and verify
actions read it, plugin_utils/report_files.py). A run_once task cannot fail one host (a failing run_once task fails
every host of the play, ansible's strategy plugin), so ``nodetune_verify_fail_on_drift`` does not fail a host on a
learned finding.

Every output is built by plugin_utils/fleet_reports.py, the code ``nodetune report DIR...`` runs over report files:
``fleet.prom`` (the fleet's Prometheus text) is written too, a host that failed in this run gets
``<dest>/failed/<host>.json`` (its last report stays in ``nodes/``: the failure, newer, is what a later fleet report
shows), and ``sources`` (a list of report folders) builds the reports from the files that any number of runs or
``--limit`` slices wrote, instead of from this play's results (docs/fleet.md: AWX / Automation Platform job slicing).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.nodetune.instinct.plugins.filter.report import DEFAULT_VAR, iter_verify_results
from ansible_collections.nodetune.instinct.plugins.plugin_utils import fleet_reports as fleet_mod


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(("dest", "hosts", "var", "write", "suite_name", "top", "sources"))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = self._task.args
        name = "nodetune.instinct.fleet_report"
        sources = args.get("sources")
        hosts = args.get("hosts") or task_vars.get("ansible_play_hosts_all") or []
        if sources is not None and (isinstance(sources, str) or not isinstance(sources, (list, tuple))
                                    or not sources or not all(isinstance(s, str) and s for s in sources)):
            result.update(failed=True, msg="%s: sources must be a non-empty list of report folders (each a "
                                           "nodetune_report_dir of a run or slice), got %r" % (name, sources))
            return result
        if sources is None and (isinstance(hosts, str) or not isinstance(hosts, (list, tuple))):
            result.update(failed=True, msg="%s: hosts must be a list of host names, got %r" % (name, hosts))
            return result
        write = boolean(args.get("write", True), strict=False)
        dest = args.get("dest")
        if write and not dest:
            result.update(failed=True, msg="%s: dest (the report directory) is required unless write is false" % name)
            return result
        if dest:
            dest = os.path.abspath(str(dest))  # relative: to ansible-playbook's folder (docs/verify.md)
        failures = None
        try:
            if sources is not None:
                # the reports that any number of runs or slices wrote: the newest of each node (docs/fleet.md)
                entries = fleet_mod.file_entries([os.path.abspath(str(s)) for s in sources])
            else:
                # one host's result at a time: its findings read once, grouped per check id, then dropped
                groups = task_vars.get("groups") or {}
                run = fleet_mod.report_context(task_vars)[fleet_mod.RUN_KEY]
                seen = set()
                results = ((h, r) for h, r in iter_verify_results(task_vars.get("hostvars") or {}, list(hosts),
                                                                  args.get("var") or DEFAULT_VAR)
                           if h not in seen and not seen.add(h))  # a host named twice is one host
                entries = fleet_mod.play_entries(results, groups, run, dest if write else None)
            outputs = fleet_mod.build(entries, top=int(args.get("top", 10)),
                                      suite_name=args.get("suite_name") or "nodetune verify")
        except fleet_mod.ReportSourceError as exc:
            result.update(failed=True, msg="%s: %s" % (name, exc))
            return result
        result.update(changed=False, summary=outputs.summary, learned_findings=outputs.learned)
        if not write:
            return result
        if sources is None:
            # a node that failed in this run: its failure, newer than its last report, for the next fleet reports
            failures = fleet_mod.play_failures(outputs.summary["failed"], groups, run)
        try:
            files, changed = fleet_mod.write_files(dest, outputs, failures)
        except (IOError, OSError) as exc:
            result.update(failed=True, msg="%s: %s could not be written on the controller: %s" % (name, dest, exc))
            return result
        result["files"] = files
        result["learned_files"] = changed
        return result
