# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller side of nodetune.instinct.verify: the role variables taken inside the one task, the report written by
the controller.

Why an action plugin (the same reason as the tune action; the shared code is in ``plugin_utils/``): at fleet scale
every task costs a worker process per host, and a large value templated per host costs more.

- A ``nodetune_*`` variable that nothing declares is refused with the nearest real name, before the call.
- ``areas`` / ``bios`` not given: every area the run's tags select, its variables over its declared defaults,
  coerced and validated as the tune action does. The tags that select every area are ``all``, ``apply`` and
  ``verify`` (``--tags nvme`` verifies only the nvme area). Unlike the tune action, a run whose tags select no area
  still verifies the layout, BIOS-level and health checks: a verify run never skips a node silently. A disabled
  bios_check role (``nodetune_bios_check_enabled: false``) is passed as such.
- ``report_file`` (not sent to the node): a path on the controller where the node's JSON report is written
  (the module's key order, a line per top-level key and per finding), in check mode too: a report is a controller
  file, not a node change.
- ``role_variables: true`` (the verify role): the verify role's own variables - health thresholds, waivers (the
  waivers file read here on the controller), the Prometheus textfile, the report file under
  ``nodetune_report_dir`` and ``nodetune_verify_fail_on_drift`` - are taken over its defaults and validated, as
  the tune action takes them for ``verify: true``. Options given in the task win.
- ``fail_on_drift`` (not sent to the node): the host fails when it drifts, after its report is written, with
  ``failed_on_drift: true`` in the result so that the fleet reports count it as drifted.
- A bounded result (what Ansible keeps per host): where the report is written, the findings and the report are in
  the node's report file (``findings_file``), not in the result: its summary, counts and drifting check ids stay
  (``plugin_utils/bounded_result.py``; the fleet reports and the API read them back from there). A host failed for
  drift gets a message that counts the drift per check id and shows the first findings.
- The module's diff (the Prometheus textfile's, when its metrics change) is kept to 200 lines unless
  ``nodetune_full_diff`` is true.
- Transport: the module is asked for ``findings_format: json`` (the findings as one JSON text, the report without
  them: ``module_utils/audit/transport.py``), decoded once here; with no report file this plugin puts the list back
  into ``findings`` and ``report``. Returning the findings as dicts costs more controller CPU per node (Ansible
  walks every value of a result to hide no_log values).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.nodetune.instinct.plugins.module_utils.apply import diff_view
from ansible_collections.nodetune.instinct.plugins.plugin_utils.bounded_result import bound, full_diff
from ansible_collections.nodetune.instinct.plugins.plugin_utils.report_files import (
    expand_findings,
    finish_audit,
    offer_held_report,
    write_report,
)
from ansible_collections.nodetune.instinct.plugins.plugin_utils.lab_backend import module_for
from ansible_collections.nodetune.instinct.plugins.plugin_utils.role_variables import (
    VERIFY_TAGS,
    RoleVariables,
    RoleVariablesError,
    refused,
    refused_tags,
    role_name,
    tag_errors,
    undeclared_errors,
)

__all__ = ["ActionModule", "expand_findings", "write_report"]
CONTROLLER_OPTIONS = ("report_file", "fail_on_drift", "role_variables")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True
    MODULE_NAME = "nodetune.instinct.verify"

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        controller = dict((name, args.pop(name)) for name in CONTROLLER_OPTIONS if name in args)
        # the tags choose the areas only where the task does not give them
        bad_tags = tag_errors(task_vars, VERIFY_TAGS if "areas" not in args else None)
        if bad_tags:
            return refused_tags(result, bad_tags)
        variables = RoleVariables(self, task_vars)
        errors = undeclared_errors(task_vars) + variables.own_role_errors(role_name(self._task))
        try:
            if boolean(controller.pop("role_variables", False), strict=False):
                options, from_role = variables.verify_options(errors)
                for name, value in options.items():
                    args.setdefault(name, value)
                for name, value in from_role.items():
                    controller.setdefault(name, value)
            if "areas" not in args or "bios" not in args:
                collected, area_errors = variables.gather_for_audit(args)
                errors.extend(area_errors)
                args.update(collected)
        except RoleVariablesError as exc:
            result.update(failed=True, msg="nodetune: %s" % exc)
            return result
        whole_diff = full_diff(self, task_vars, errors)
        if errors:
            return refused(result, errors)
        if "fail_on_drift" in controller:
            controller["fail_on_drift"] = boolean(controller["fail_on_drift"], strict=False)
        compact = "findings_format" not in args and not self._task.async_val  # async_status would see the text
        if compact:
            args["findings_format"] = "json"
            offer_held_report(args, controller)
        module_name = module_for(self.MODULE_NAME, task_vars, self._templar)  # a lab node: nodetune.lab's
        result.update(self._execute_module(module_name=module_name, module_args=args, task_vars=task_vars))
        if isinstance(result.get("diff"), dict) and not whole_diff:
            result["diff"] = diff_view.bounded_text(result["diff"])
        if self._task.async_val:  # the job's id: its result is async_status's
            return result
        findings, report_file = finish_audit(result, result, controller)
        if compact and not report_file:  # the result is the only copy: the findings as one list, in the report too
            expand_findings(result, findings)
        bound(result, result, findings, report_file, None, task_vars.get("inventory_hostname"))
        return result
