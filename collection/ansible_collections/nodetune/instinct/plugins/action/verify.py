# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller side of nodetune.instinct.verify: the area variables gathered inside the one task, the report written
by the controller.

Why an action plugin (the same reason as the tune action, whose collection code this reuses): at fleet scale every
task costs a worker process per host, and a large value templated per host costs more. Measured on 8 simulated
nodes, the area roles' argument-spec validation and set_fact (sixteen tasks per host) and the per-host copy of
a 0.3-0.5 MB JSON report (a templated ``to_nice_json`` then a copy module call) cost more than the verify module.

- ``areas`` / ``bios`` not given: gathered from each area role's namespace over its defaults and validated against
  its ``meta/argument_specs.yml``, exactly as the tune action does. The tags that select every area are those the
  area roles' tasks carry, ``all``, ``apply`` and ``verify`` (``--tags nvme`` verifies only the nvme area). Unlike
  the tune action, a run whose tags select no area still verifies the layout, BIOS-level and health checks: a
  verify run never skips a node silently. A disabled bios_check role (``nodetune_bios_check_enabled: false``) is
  passed as such: the verify module, unlike tune, runs the BIOS-level checks on an empty mapping.
- ``report_file`` (not sent to the node): a path on the controller where the node's JSON report is written
  (``to_nice_json(sort_keys=false)`` and a newline, as the verify role used to write it), in check mode too: a
  report is a controller file, not a node change.
- ``role_variables: true`` (the verify role): the verify role's own variables - health thresholds, waivers (the
  waivers file read here on the controller), the Prometheus textfile, the report file under
  ``nodetune_report_dir`` and ``nodetune_verify_fail_on_drift`` - are gathered over its defaults and validated, as
  the tune action gathers them for ``verify: true``. Options given in the task win.
- ``fail_on_drift`` (not sent to the node): the host fails when it drifts, after its report is written, with
  ``failed_on_drift: true`` in the result so that the fleet reports count it as drifted.
- Transport: the module is asked for ``findings_format: json`` (the findings as one JSON text, the report without
  them), and this plugin puts the decoded list back into ``findings`` and ``report``: returning 1,700 findings as
  dicts cost ~0.2 s CPU per node (Ansible walks every value of a result to hide no_log values, then encodes it).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.nodetune.instinct.plugins.action.tune import (
    VERIFY_TAGS,
    RoleVariablesError,
    expand_findings,
    finish_audit,
    refused,
    write_report,
)
from ansible_collections.nodetune.instinct.plugins.action.tune import ActionModule as TuneAction
from ansible_collections.nodetune.instinct.plugins.plugin_utils.lab_backend import module_for

__all__ = ["ActionModule", "expand_findings", "write_report"]
CONTROLLER_OPTIONS = ("report_file", "fail_on_drift", "role_variables")


class ActionModule(TuneAction):
    TRANSFERS_FILES = False
    _requires_connection = True
    MODULE_NAME = "nodetune.instinct.verify"
    ALL_TAGS = VERIFY_TAGS  # the tags the area roles' own tasks carry

    def _collect(self, args, task_vars):
        return self._collect_for_audit(args, task_vars)

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = ActionBase.run(self, tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        controller = dict((name, args.pop(name)) for name in CONTROLLER_OPTIONS if name in args)
        errors = self._own_role_errors(task_vars)
        try:
            if boolean(controller.pop("role_variables", False), strict=False):
                options, from_role = self._verify_options(task_vars, errors)
                for name, value in options.items():
                    args.setdefault(name, value)
                for name, value in from_role.items():
                    controller.setdefault(name, value)
            if "areas" not in args or "bios" not in args:
                collected, area_errors = self._collect(args, task_vars)
                errors.extend(area_errors)
                args.update(collected)
        except RoleVariablesError as exc:
            result.update(failed=True, msg="nodetune: %s" % exc)
            return result
        if errors:
            return refused(result, errors)
        if "fail_on_drift" in controller:
            controller["fail_on_drift"] = boolean(controller["fail_on_drift"], strict=False)
        compact = "findings_format" not in args and not self._task.async_val  # async_status would see the text
        if compact:
            args["findings_format"] = "json"
        module_name = module_for(self.MODULE_NAME, task_vars, self._templar)  # a lab node: nodetune.lab's
        result.update(self._execute_module(module_name=module_name, module_args=args, task_vars=task_vars))
        if compact:
            expand_findings(result)
        finish_audit(result, result, controller)
        return result
