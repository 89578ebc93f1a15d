# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller side of the tune and verify action plugins: a host's role variables, taken, coerced and validated.

Every role and variable is declared once, in ``module_utils/areas.py``. For a host, a role's variables are the
host's values over the declared defaults, templated, then coerced and validated as Ansible validates a role's
arguments (``-e nodetune_smt_offline_allowed=true`` is a boolean, ``-e nodetune_vm_dirty_ratio=20`` an integer);
what cannot be coerced is refused, naming the variable, its value and what is valid. Before any of that, a
``nodetune_*`` variable that nothing declares is refused with the nearest real name, and a run that would write
to the controller's own ``/`` is refused without ``nodetune_controller_allowed``.

Tags: a run's ``--tags``/``--skip-tags`` select the areas (``selected``); the tune role's one task is tagged
``always`` and a ``meta: noop`` task beside it carries every area's tag (``--list-tags`` shows them). A tag that
selects no area where one was meant is refused (``tag_errors``), as is a run whose tags select none.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible.errors import AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.nodetune.instinct.plugins.module_utils import areas
from ansible_collections.nodetune.instinct.plugins.module_utils.report import report_file_name

try:
    from ansible.template import trust_as_template
except ImportError:  # ansible-core < 2.19: every template is trusted
    def trust_as_template(value):
        return value

ALL_TAGS = ("all", "apply")
VERIFY_TAGS = ("all", "apply", "verify")  # the tags that select every area for an audit
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")

# The verify role's own variables the tune action takes for ``verify: true``.
VERIFY_ROLE = "verify"


class RoleVariablesError(Exception):
    pass


def selected(role, task_vars, all_tags=ALL_TAGS):
    """Whether this run's tags select the role's area: --tags all/apply/<role>, and not --skip-tags <role>."""
    run = set(task_vars.get("ansible_run_tags") or ["all"])
    skip = set(task_vars.get("ansible_skip_tags") or [])
    return role not in skip and bool(run & set(tuple(all_tags) + (role,)))


def any_selected(task_vars, all_tags=ALL_TAGS):
    return any(selected(role, task_vars, all_tags) for role in areas.AREAS + (areas.BIOS_ROLE,))


def undeclared_errors(task_vars):
    """A misspelt variable is refused instead of silently ignored (``nodetune_rot`` would leave the root at /)."""
    return areas.undeclared(name for name in task_vars if isinstance(name, str))


def tag_errors(task_vars, all_tags=None):
    """Tags that select no area where one was meant: ``-t NVME``, a Cyrillic ``nvmе``, ``--skip-tags SMT``. With
    ``all_tags`` (a task that applies or audits what the tags select) and no area selected, every tag that is
    neither a nodetune tag nor one of the collection's playbooks: such a run would otherwise do nothing and pass."""
    strict = all_tags is not None and not any_selected(task_vars, all_tags)
    return areas.tag_errors(task_vars.get("ansible_run_tags") or [], task_vars.get("ansible_skip_tags") or [],
                            strict=strict, others=areas.PLAYBOOK_TAGS)


def refused_tags(result, errors):
    result.update(failed=True, errors=errors,
                  msg="nodetune refused this run's tags, nothing was sent to the node: " + "; ".join(errors))
    return result


def controller_refusal(task_vars, root, transport, check_mode, allowed):
    """Why a writing run must not go ahead on the controller's own ``/`` (None when it may)."""
    if check_mode or allowed:
        return None
    host = task_vars.get("inventory_hostname")
    local = transport == "local" or str(task_vars.get("ansible_connection") or "") == "local" \
        or host in LOCAL_NAMES or str(task_vars.get("ansible_host") or "") in LOCAL_NAMES
    if not local or os.path.realpath(str(root or "/")) != "/":
        return None
    return ("nodetune_root=%r on %s is the root of the machine Ansible runs on (local connection): tuning the "
            "controller itself is refused unless %s: true is set; point nodetune_root at the node's tree, or use "
            "check mode (--check), which needs no opt-in" % (str(root or "/"), host, areas.CONTROLLER_OPT_IN))


def role_name(task):
    """The short name of the role a task belongs to (``nvme`` for ``nodetune.instinct.nvme``), or None."""
    role = getattr(task, "_role", None)
    if role is None:
        return None
    name = getattr(role, "_role_name", None) or role.get_name()
    return str(name).rsplit(".", maxsplit=1)[-1]


_CONVERSION = re.compile(r"argument '([^']+)' is of type \S+ and we were unable to convert to (\w+)")


def validate(options, values, role):
    """``values`` coerced and checked against ``options`` as Ansible's role argument validation does: the coerced
    values and the errors, each naming the value (Ansible's own type message shows a class name instead)."""
    validated = ArgumentSpecValidator(areas.argument_spec(options)).validate(
        values, validate_role_argument_spec=True)
    errors = []
    for message in validated.error_messages:
        match = _CONVERSION.search(message)
        if match and match.group(1) in values:
            name, kind = match.group(1), match.group(2)
            message = "%s=%r is not valid: expected a %s" % (name, _plain(values[name]), kind)
        line = "%s (role %s)" % (message, role)
        if line not in errors:
            errors.append(line)
    coerced = dict(values)
    coerced.update((name, validated.validated_parameters[name]) for name in values
                   if name in validated.validated_parameters)
    return coerced, errors


def _plain(value):
    """A tagged string (ansible-core 2.19 data tagging) shown as the plain value it holds."""
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def _trusted(value):
    """Declared defaults are the collection's own templates (``{{ role_path }}``), trusted as a role's are."""
    if isinstance(value, dict):
        return dict((key, _trusted(item)) for key, item in value.items())
    if isinstance(value, list):
        return [_trusted(item) for item in value]
    if isinstance(value, str):
        return trust_as_template(value)
    return value


class RoleVariables(object):
    """One host's role variables for one task. ``action`` is the running action plugin (its templar and
    ``_find_needle``); values are gathered once per role (the apply and its audit ask for the same roles)."""

    def __init__(self, action, task_vars):
        self._action = action
        self._task_vars = task_vars
        self._memo = {}

    # ------------------------------------------------------------------------------------ one role
    def values(self, role, errors, toggle=True):
        """The role's declared variables for this host (its defaults under the host's values), coerced and
        validated; None when ``toggle`` and the role is disabled."""
        key = (role, toggle)
        if key not in self._memo:
            found = []
            self._memo[key] = (self._read(role, found, toggle), found)
        values, found = self._memo[key]
        errors.extend(found)
        return values

    def _read(self, role, errors, toggle):
        declared = areas.ROLES[role]["variables"]
        values = {}
        for name, option in declared.items():
            if name in self._task_vars:
                values[name] = self._task_vars[name]
            elif "default" in option:
                values[name] = _trusted(option["default"])
        values = self._action._templar.template(values)
        enabled = areas.enabled_variable(role)
        if toggle and enabled in declared:
            try:
                if not boolean(values.get(enabled, True), strict=True):
                    return None
            except TypeError:
                errors.append("%s=%r is not valid: expected true or false" % (enabled, _plain(values.get(enabled))))
                return None
        coerced, problems = validate(declared, values, role)
        errors.extend(problems)
        return coerced

    def own_role_errors(self, role):
        """The running role's own variables (the tune or verify role: ``nodetune_state``...) checked as Ansible's
        validation task would: the playbooks import them with ``rolespec_validate: false``, since that task is one
        more worker process per host."""
        if role not in areas.ROLES or areas.ROLES[role]["kind"] != "runner":
            return []
        options = areas.role_options(role)
        values = dict((name, self._task_vars[name]) for name in options if name in self._task_vars)
        return validate(options, self._action._templar.template(values), role)[1]

    def controller_allowed(self):
        value = self._action._templar.template(self._task_vars.get(areas.CONTROLLER_OPT_IN, False))
        try:
            return boolean(value, strict=True)
        except TypeError:
            raise RoleVariablesError("%s=%r is not valid: expected true or false"
                                     % (areas.CONTROLLER_OPT_IN, _plain(value))) from None

    # ------------------------------------------------------------------------------------ areas
    def gather(self, args, all_tags):
        """``areas`` and ``bios`` for every area the run's tags select (unless the task gives them)."""
        collected = {}
        errors = []
        if "areas" not in args:
            chosen = {}
            for role in areas.AREAS:
                if not selected(role, self._task_vars, all_tags):
                    continue
                values = self.values(role, errors)
                if values is not None:
                    chosen[role] = values
            collected["areas"] = chosen
        if "bios" not in args:
            values = None
            if selected(areas.BIOS_ROLE, self._task_vars, all_tags):
                values = self.values(areas.BIOS_ROLE, errors)
            collected["bios"] = values or {}
        return collected, errors

    def gather_for_audit(self, args):
        """``areas`` and ``bios`` as an audit takes them: every area the tags select for a verify run, and a
        disabled bios_check passed as such (the verify module, unlike tune, runs the BIOS-level checks on an empty
        mapping)."""
        collected, errors = self.gather(args, VERIFY_TAGS)
        if "bios" not in args and not collected.get("bios") and selected(areas.BIOS_ROLE, self._task_vars,
                                                                         VERIFY_TAGS):
            collected["bios"] = {areas.enabled_variable(areas.BIOS_ROLE): False}
        return collected, errors

    def only(self, role, errors):
        """``areas`` and ``bios`` for an area role's (or bios_check's) own task: that role alone; None when it is
        disabled."""
        values = self.values(role, errors)
        if values is None:
            return None
        if role == areas.BIOS_ROLE:
            return {"areas": {}, "bios": values}
        return {"areas": {role: values}, "bios": {}}

    # ------------------------------------------------------------------------------------ verify
    def verify_options(self, errors):
        """The module's ``verify`` mapping and the controller's part (report file, fail on drift) from the verify
        role's variables over its defaults."""
        values = self.values(VERIFY_ROLE, errors, toggle=False)
        waivers = list(values.get("nodetune_verify_waivers") or [])
        if values.get("nodetune_verify_waivers_file"):
            waivers += self._waivers_file(values["nodetune_verify_waivers_file"])
        host = self._task_vars.get("inventory_hostname")
        module_options = {
            "health": dict((k, v) for k, v in values.items()
                           if k.startswith(("nodetune_health_", "nodetune_inventory_"))),
            "waivers": waivers,
            "textfile_path": values.get("nodetune_verify_textfile_path") or None,
            "node_name": host,
        }
        report_file = None
        if boolean(values.get("nodetune_verify_write_reports", True), strict=False) and host:
            report_file = os.path.join(str(values.get("nodetune_report_dir")), "nodes",
                                       report_file_name(host))  # encoded: a host name is not a path
        controller = {"report_file": report_file,
                      "fail_on_drift": boolean(values.get("nodetune_verify_fail_on_drift", False), strict=False)}
        return module_options, controller

    def _waivers_file(self, name):
        """The waivers file, found as ``lookup('file')`` finds it (role files, then the playbook's folder)."""
        try:
            path = self._action._find_needle("files", name)
            data = self._action._loader.load_from_file(path)
        except AnsibleError as exc:
            raise RoleVariablesError("nodetune_verify_waivers_file=%r cannot be read on the controller: %s"
                                     % (name, exc)) from None
        if isinstance(data, dict) and "waivers" in data:
            data = data["waivers"]
        if data is not None and not isinstance(data, list):
            raise RoleVariablesError("nodetune_verify_waivers_file=%r must hold a list of waivers (or a mapping with "
                                     "a waivers list), got %s" % (name, type(data).__name__))
        return list(data or [])


def refused(result, errors):
    """The task's failure for bad role variables, each named once (an area gathered for the apply and for its
    audit, or a variable checked by its role's spec and by the gathering, may say the same)."""
    errors = list(dict.fromkeys(errors))
    result.update(failed=True, errors=errors,
                  msg="nodetune refused the role variables, nothing was sent to the node: " + "; ".join(errors))
    return result
