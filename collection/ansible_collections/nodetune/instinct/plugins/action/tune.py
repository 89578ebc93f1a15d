# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller side of nodetune.instinct.tune: the role variables taken and validated inside the one task.

Why an action plugin: at fleet scale every task costs a worker process per host. Taking each area's variables with
its own tasks (an argument-spec validation task plus a set_fact per area) cost more than the tune module call itself.
The shared logic is in ``plugin_utils/role_variables.py``; every role and variable is declared in
``module_utils/areas/`` (an area's in its module, the rest in declarations.py).

- Before anything: a ``nodetune_*`` variable that nothing declares is refused with the nearest real name, and a
  writing run whose root is the controller's own ``/`` (local connection or localhost) is refused unless
  ``nodetune_controller_allowed`` is true. Check mode needs no opt-in.
- In an area role's own task (``roles: [nodetune.instinct.nvme]``): that area alone, its variables over its
  declared defaults, coerced and validated; bios_check's task: the BIOS-level checks alone.
- Elsewhere (the tune role, site.yml), ``areas``/``bios`` not given: every enabled area the run's tags select
  (``--tags nvme``, ``--skip-tags smt``; ``--tags verify`` none, no call, unless the task also verifies).
- ``verify: true`` (the tune role with ``nodetune_tune_verify``): the node is audited in the same module call right
  after the apply, with the verify role's variables; the node's JSON report is written on the controller and, with
  ``nodetune_verify_fail_on_drift``, the host is failed when it drifts (after its report is written), the message
  counting the drift per check id and showing the first findings.
- A bounded result (what Ansible keeps per host): in a nodetune role's task, or with ``verify: true``, where the run
  writes reports (``nodetune_verify_write_reports``), the findings stay in the node's report file
  (``verify.findings_file``) and the apply's changes move to ``<report dir>/tune/<host>.json`` (``spill_file``),
  written here as the result arrives (``plugin_utils/bounded_result.py``; the fleet reports, the API and the
  ``nodetune_detail`` filter read them back from there). A task of the user's own calling the module keeps them.
- ``nodetune_full_diff`` (a boolean): the module's diff has every value and every file whole, instead of the
  grouped diff of at most 200 lines per node (``module_utils/apply/diff_view.py``); for an apply and a revert alike.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas
from ansible_collections.nodetune.instinct.plugins.plugin_utils.bounded_result import bound, full_diff, spill_path
from ansible_collections.nodetune.instinct.plugins.plugin_utils.lab_backend import module_for
from ansible_collections.nodetune.instinct.plugins.plugin_utils.report_files import finish_audit, offer_held_report
from ansible_collections.nodetune.instinct.plugins.plugin_utils.role_variables import (
    ALL_TAGS,
    VERIFY_TAGS,
    RoleVariables,
    RoleVariablesError,
    any_selected,
    controller_refusal,
    refused,
    refused_tags,
    role_name,
    tag_errors,
    undeclared_errors,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True
    MODULE_NAME = "nodetune.instinct.tune"

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        present = args.get("state", "present") == "present"
        bad_tags = tag_errors(task_vars) if present else []  # tags mean nothing to a revert
        if bad_tags:
            return refused_tags(result, bad_tags)
        variables = RoleVariables(self, task_vars)
        role = role_name(self._task)
        errors = undeclared_errors(task_vars) + variables.own_role_errors(role)
        controller = {}
        try:
            why = controller_refusal(task_vars, args.get("root", "/"), getattr(self._connection, "transport", None),
                                     self._play_context.check_mode, variables.controller_allowed())
            if why:
                errors.append(why)
            own_area = role if role in areas.ROLES and areas.ROLES[role]["kind"] != "runner" else None
            if own_area and present and "areas" not in args and "bios" not in args:
                chosen = variables.only(own_area, errors)
                if chosen is None and not errors:
                    result.update(skipped=True, changed=False, msg="%s is false: the %s area is left as it is"
                                  % (areas.enabled_variable(own_area), own_area))
                    return result
                args.update(chosen or {})
            elif present and ("areas" not in args or "bios" not in args):
                collected, area_errors = variables.gather(args, ALL_TAGS)
                errors.extend(area_errors)
                args.update(collected)
            verify = args.pop("verify", None)
            if present and verify is not None and not isinstance(verify, dict) and boolean(verify, strict=False):
                args["verify"], controller = variables.verify_options(errors)
                self._audit_scope(variables, args, errors)
            elif isinstance(verify, dict) and present:
                args["verify"] = dict(verify)  # a copy: the transport format is set on it below
        except RoleVariablesError as exc:
            result.update(failed=True, msg="nodetune: %s" % exc)
            return result
        if full_diff(self, task_vars, errors) and "full_diff" not in args:
            args["full_diff"] = True
        if errors:
            return refused(result, errors)
        if present and not args.get("areas") and not args.get("bios") and not args.get("verify") \
                and not any_selected(task_vars, ALL_TAGS):
            bad_tags = tag_errors(task_vars, ALL_TAGS)  # -t nvm: a run that would do nothing and pass
            if bad_tags:
                return refused_tags(result, bad_tags)
            result.update(skipped=True, changed=False,
                          msg="no nodetune area selected by this run's tags (%s); nothing to do"
                              % ", ".join(task_vars.get("ansible_run_tags") or []))
            return result
        compact = isinstance(args.get("verify"), dict) and "findings_format" not in args["verify"] \
            and not self._task.async_val
        if compact:
            args["verify"]["findings_format"] = "json"
            offer_held_report(args["verify"], controller)
        module_name = module_for(self.MODULE_NAME, task_vars, self._templar)  # a lab node: nodetune.lab's
        result.update(self._execute_module(module_name=module_name, module_args=args, task_vars=task_vars))
        if self._task.async_val:  # the job's id: its result is async_status's
            return result
        audit = result.get("verify") if isinstance(result.get("verify"), dict) else None
        findings = report_file = None
        if audit is not None:
            # Without a report file the findings stay one JSON text in the registered result (verify.findings): as
            # dicts they cost Ansible more controller CPU than the audit.
            findings, report_file = finish_audit(result, audit, controller)
        host = task_vars.get("inventory_hostname")
        # a nodetune role's task, or one that reports: a task of the user's own calling the module keeps it whole
        report_dir = variables.report_dir() if role in areas.ROLES or report_file else None
        bound(result, audit, findings, report_file, spill_path(report_dir, host) if report_dir and host else None,
              host)
        return result

    def _audit_scope(self, variables, args, errors):
        """The audit after the apply covers what a verify run with the same tags covers: ``--tags verify`` applies
        nothing and audits every area, ``--tags nvme`` applies and audits nvme. Where that differs from what is
        applied, the module is told (``verify.areas``/``verify.bios``) and discovers the node for the audit."""
        given = dict((key, self._task.args[key]) for key in ("areas", "bios") if key in self._task.args)
        audit, audit_errors = variables.gather_for_audit(given)
        errors.extend(audit_errors)
        for key in ("areas", "bios"):
            if key in audit and audit[key] != args.get(key):
                args["verify"][key] = audit[key]


__all__ = ["ActionModule", "VERIFY_TAGS"]
