# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""nodetune.instinct.fleet_report: the fleet JUnit XML and summary written on the controller, in one task.

Why an action plugin with no module: the reports are controller files built from every host's registered verify
result. Templated into a ``copy`` task (content), a fleet's JUnit XML (1,700 testcases per MI300X node) cost
seconds per play in ansible-core 2.19 - the text is templated, staged and checksummed, and each loop item is two
module runs - and grew with the fleet. Here the results are read from hostvars as stored (``raw_get``), the files
are written atomically by Python, and nothing contacts a node.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.nodetune.instinct.plugins.plugin_utils.report_files import write_text
from ansible_collections.nodetune.instinct.plugins.filter.report import DEFAULT_VAR, fleet_digests
from ansible_collections.nodetune.instinct.plugins.module_utils import outliers as outliers_mod
from ansible_collections.nodetune.instinct.plugins.module_utils import report as report_mod


def host_groups(groups, hosts):
    """Host -> the inventory groups it is in (the fleet's peer groups, outliers.py)."""
    return dict((host, sorted(name for name, members in groups.items() if host in (members or [])))
                for host in hosts)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(("dest", "hosts", "var", "write", "suite_name", "top"))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = self._task.args
        hosts = args.get("hosts") or task_vars.get("ansible_play_hosts_all") or []
        if isinstance(hosts, str) or not isinstance(hosts, (list, tuple)):
            result.update(failed=True, msg="nodetune.instinct.fleet_report: hosts must be a list of host names, "
                                           "got %r" % (hosts,))
            return result
        write = boolean(args.get("write", True), strict=False)
        dest = args.get("dest")
        if write and not dest:
            result.update(failed=True, msg="nodetune.instinct.fleet_report: dest (the report directory) is required "
                                           "unless write is false")
            return result
        if dest:
            dest = os.path.abspath(str(dest))  # relative: to ansible-playbook's folder (docs/verify.md)
        # one host's result at a time: its findings read once, grouped per check id, then dropped
        digests, facts = fleet_digests(task_vars.get("hostvars") or {}, list(hosts), args.get("var") or DEFAULT_VAR)
        outliers = outliers_mod.outliers_of(facts, host_groups(task_vars.get("groups") or {}, hosts))
        summary = report_mod.fleet_summary({}, top=int(args.get("top", 10)), digests=digests)
        summary["outliers"] = outliers
        summary["text"] = list(summary["text"]) + outliers_mod.summary_lines(outliers)
        result.update(changed=False, summary=summary)
        if not write:
            return result
        junit = report_mod.junit_xml({}, suite_name=args.get("suite_name") or "nodetune verify", digests=digests)
        files = {"junit.xml": outliers_mod.add_to_junit(junit, outliers),
                 "summary.json": json.dumps(summary, indent=4, sort_keys=True) + "\n"}
        try:
            for name, text in files.items():
                write_text(os.path.join(dest, name), text)
        except (IOError, OSError) as exc:
            result.update(failed=True, msg="nodetune.instinct.fleet_report: %s could not be written on the "
                                           "controller: %s" % (dest, exc))
            return result
        result["files"] = sorted(os.path.join(dest, name) for name in files)
        return result
