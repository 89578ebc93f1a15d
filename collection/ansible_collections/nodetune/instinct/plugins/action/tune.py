# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller side of nodetune.instinct.tune: gather and validate the area variables inside the one task.

Why an action plugin: at fleet scale every task costs a worker process per host. Collecting each area's variables
with its own role (an argument-spec validation task plus a set_fact per area, fourteen tasks per host) cost more
than the tune module call itself. Here the same work happens on the controller as part of the tune task:

- ``areas`` (and ``bios``) not given: for every area role (``smt``, ``cpu``, ``irq_affinity``, ``infiniband``,
  ``nvme``, ``sysctl``, ``rocm_env``; ``bios_check`` for ``bios``) the host's variables of that role's namespace
  (``nodetune_nvme_*``...) are taken, over the role's ``defaults/main.yml``, and validated against the role's
  ``meta/argument_specs.yml`` exactly as Ansible validates a role's arguments. Variables of the namespace that the
  role does not know are passed on too, so the module refuses a misspelt one instead of ignoring it.
- An area whose ``nodetune_<role>_enabled`` is false is left out, and so is one the run's tags exclude:
  ``--tags nvme`` tunes only the nvme area, ``--skip-tags nvme`` all but it, ``--tags verify`` none (no call).
- ``areas`` given (e.g. ``nodetune_areas`` built by the area roles' own set_fact when you compose them
  yourself): passed through unchanged.

The roles are found next to the role that runs the task (``roles/tune`` -> ``roles/nvme``), else on the
configured roles path, else in the collection's own ``roles/`` (an installed collection ships them there).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible import constants as C
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

try:
    from ansible.template import trust_as_template
except ImportError:  # ansible-core < 2.19: templates in files are trusted without a mark
    def trust_as_template(value):
        return value

# role -> the variable namespace its set_fact collects (roles/<role>/tasks/main.yml uses the same pattern)
AREA_ROLES = (
    ("smt", r"^nodetune_smt_"),
    ("cpu", r"^nodetune_cpu_"),
    ("irq_affinity", r"^nodetune_(irq_|irqbalance_|os_family$)"),
    ("infiniband", r"^nodetune_(infiniband|ipoib|ib|net_core|neigh)_"),
    ("nvme", r"^nodetune_nvme_"),
    ("sysctl", r"^nodetune_(sysctl|vm|kernel)_"),
    ("rocm_env", r"^nodetune_rocm_"),
)
BIOS_ROLE = ("bios_check", r"^nodetune_bios_")
ALL_TAGS = ("all", "apply")


class RoleVariablesError(Exception):
    pass


def selected(role, task_vars, all_tags=ALL_TAGS):
    """Whether this run's tags select the role's area: --tags all/apply/<role>, and not --skip-tags <role>."""
    run = set(task_vars.get("ansible_run_tags") or ["all"])
    skip = set(task_vars.get("ansible_skip_tags") or [])
    return role not in skip and bool(run & set(tuple(all_tags) + (role,)))


def any_selected(task_vars, all_tags=ALL_TAGS):
    return any(selected(role, task_vars, all_tags) for role, _pattern in AREA_ROLES + (BIOS_ROLE,))


class ActionModule(ActionBase):
    """Also the base of any module that takes the same ``areas``/``bios`` (set MODULE_NAME and ALL_TAGS)."""

    TRANSFERS_FILES = False
    _requires_connection = True
    MODULE_NAME = "nodetune.instinct.tune"
    ALL_TAGS = ALL_TAGS  # tags that select every area (a verify action would use ("all", "verify"))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        if args.get("state", "present") == "present" and ("areas" not in args or "bios" not in args):
            try:
                collected, errors = self._collect(args, task_vars)
            except RoleVariablesError as exc:
                result.update(failed=True, msg="nodetune: %s" % exc)
                return result
            if errors:
                result.update(failed=True, errors=errors,
                              msg="nodetune refused the role variables, nothing was sent to the node: "
                                  + "; ".join(errors))
                return result
            args.update(collected)
            if not args.get("areas") and not args.get("bios") and not any_selected(task_vars, self.ALL_TAGS):
                result.update(skipped=True, changed=False,
                              msg="no nodetune area selected by this run's tags (%s); nothing to do"
                                  % ", ".join(task_vars.get("ansible_run_tags") or []))
                return result
        result.update(self._execute_module(module_name=self.MODULE_NAME, module_args=args,
                                           task_vars=task_vars))
        return result

    # ------------------------------------------------------------------------------------------ collection
    def _collect(self, args, task_vars):
        collected = {}
        errors = []
        if "areas" not in args:
            areas = {}
            for role, pattern in AREA_ROLES:
                if not selected(role, task_vars, self.ALL_TAGS):
                    continue
                values = self._role_variables(role, pattern, task_vars, errors)
                if values is not None:
                    areas[role] = values
            collected["areas"] = areas
        if "bios" not in args:
            role, pattern = BIOS_ROLE
            values = None
            # Without the bios_check role (an ad-hoc call from elsewhere) the BIOS-level checks are simply not run.
            if selected(role, task_vars, self.ALL_TAGS) and self._find_role(role, task_vars, required=False):
                values = self._role_variables(role, pattern, task_vars, errors)
            collected["bios"] = values or {}
        return collected, errors

    def _role_variables(self, role, pattern, task_vars, errors):
        """The role's variables for this host (its defaults under the host's values), validated; None if disabled."""
        role_dir = self._find_role(role, task_vars)
        defaults = self._load(os.path.join(role_dir, "defaults", "main.yml")) or {}
        spec = self._load(os.path.join(role_dir, "meta", "argument_specs.yml")) or {}
        options = ((spec.get("argument_specs") or {}).get("main") or {}).get("options") or {}
        namespace = re.compile(pattern)
        names = set(name for name in task_vars if namespace.search(name)) | set(defaults)
        values = dict((name, task_vars[name] if name in task_vars else defaults[name]) for name in names)
        values = self._templar.template(values)
        toggle = "nodetune_%s_enabled" % role
        try:
            if not boolean(values.get(toggle, True), strict=True):
                return None
        except TypeError:
            errors.append("%s=%r is not valid: expected true or false" % (toggle, values.get(toggle)))
            return None
        validated = ArgumentSpecValidator(options).validate(
            dict((k, v) for k, v in values.items() if k in options), validate_role_argument_spec=True)
        errors.extend("%s (role %s)" % (message, role) for message in validated.error_messages)
        return values

    def _find_role(self, role, task_vars, required=True):
        candidates = []
        if task_vars.get("role_path"):
            candidates.append(os.path.join(os.path.dirname(task_vars["role_path"]), role))
        # An installed collection ships the roles next to its plugins (<collection>/roles), where a playbook of the
        # collection that calls this action outside a role (playbooks/plan.yml) finds them.
        shipped = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles")
        for base in list(C.DEFAULT_ROLES_PATH or []) + [os.path.join(self._loader.get_basedir(), "roles"), shipped]:
            candidates.append(os.path.join(base, role))
        for candidate in candidates:
            if os.path.isfile(os.path.join(candidate, "meta", "argument_specs.yml")):
                return candidate
        if not required:
            return None
        raise RoleVariablesError("areas were not given and the %s role was not found next to the running role or on "
                                 "the roles path (%s); put the nodetune roles on the roles path or pass areas"
                                 % (role, ", ".join(candidates)))

    def _load(self, path):
        """A role's defaults or argument spec. Parsed with libyaml where it can be: every host's task runs in its
        own worker process, so the parse is repeated per host and per task, and Ansible's loader (origin tags
        on every value) cost ~0.1 s of controller CPU per node for the 16 files of the area roles. Strings are
        trusted as templates, as Ansible's loader trusts files on the controller; anything libyaml does not take
        as a plain mapping (a vault, an Ansible-specific tag) goes through Ansible's loader."""
        if not os.path.isfile(path):
            return None
        data = _fast_yaml(path)
        if data is None:
            data = self._loader.load_from_file(path)
        return data


def _fast_yaml(path):
    try:
        import yaml
    except ImportError:
        return None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        with open(path, "rb") as handle:
            data = yaml.load(handle, Loader=loader)
    except (yaml.YAMLError, OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return _trusted(data)


def _trusted(value):
    if isinstance(value, dict):
        return dict((key, _trusted(item)) for key, item in value.items())
    if isinstance(value, list):
        return [_trusted(item) for item in value]
    if isinstance(value, str):
        return trust_as_template(value)
    return value
