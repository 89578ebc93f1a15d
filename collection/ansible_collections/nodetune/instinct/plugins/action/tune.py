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
  ``--tags nvme`` tunes only the nvme area, ``--skip-tags nvme`` all but it, ``--tags verify`` none (no call, unless
  the task also verifies: then it applies nothing and audits every area).
- ``areas`` given (e.g. ``nodetune_areas`` built by the area roles' own set_fact when you compose them
  yourself): passed through unchanged.
- ``verify: true`` (the tune role with ``nodetune_tune_verify``, as site.yml runs it): the node is audited in the
  same module call right after the apply. The verify role's variables (``nodetune_verify_*``, ``nodetune_health_*``,
  ``nodetune_report_dir``) are gathered and validated the same way, the waivers file is read here on the
  controller, and after the call the node's JSON report is written on the controller and, with
  ``nodetune_verify_fail_on_drift``, the host is failed when it drifts (after its report is written).
- The variables of the role running the task (``tune`` or ``verify``) are validated here against its own
  argument spec: the playbooks import the roles with ``rolespec_validate: false``, since Ansible's own validation
  is one more task, hence one more worker process, per host.

The roles are found next to the role that runs the task (``roles/tune`` -> ``roles/nvme``), else on the
configured roles path, else in the collection's own ``roles/`` (an installed collection ships them there).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import tempfile

from ansible import constants as C
from ansible.errors import AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.nodetune.instinct.plugins.module_utils import report as report_mod

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
VERIFY_TAGS = ("all", "apply", "verify")  # the tags that select every area for an audit (the area roles' own tags)


# The verify role's namespace, less what the role itself registers (nodetune_verify_result) or passes to its report
# tasks (nodetune_verify_result_var): a play that verified once must verify again without them read as settings.
VERIFY_ROLE = ("verify", r"^nodetune_verify_(?!result$|result_var$)|^nodetune_health_|^nodetune_report_dir$")


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
    ALL_TAGS = ALL_TAGS  # tags that select every area (the verify action uses VERIFY_TAGS)

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        present = args.get("state", "present") == "present"
        errors = self._own_role_errors(task_vars)
        controller = {}
        try:
            if present and ("areas" not in args or "bios" not in args):
                collected, area_errors = self._collect(args, task_vars)
                errors.extend(area_errors)
                args.update(collected)
            verify = args.pop("verify", None)
            if present and verify is not None and not isinstance(verify, dict) and boolean(verify, strict=False):
                args["verify"], controller = self._verify_options(task_vars, errors)
                self._audit_scope(args, task_vars, errors)
            elif isinstance(verify, dict) and present:
                args["verify"] = dict(verify)  # a copy: the transport format is set on it below
        except RoleVariablesError as exc:
            result.update(failed=True, msg="nodetune: %s" % exc)
            return result
        if errors:
            return refused(result, errors)
        if present and not args.get("areas") and not args.get("bios") and not args.get("verify") \
                and not any_selected(task_vars, self.ALL_TAGS):
            result.update(skipped=True, changed=False,
                          msg="no nodetune area selected by this run's tags (%s); nothing to do"
                              % ", ".join(task_vars.get("ansible_run_tags") or []))
            return result
        compact = isinstance(args.get("verify"), dict) and "findings_format" not in args["verify"] \
            and not self._task.async_val
        if compact:
            args["verify"]["findings_format"] = "json"
        result.update(self._execute_module(module_name=self.MODULE_NAME, module_args=args,
                                           task_vars=task_vars))
        if isinstance(result.get("verify"), dict):
            # The findings stay one JSON text in the registered result (verify.findings; the report files and the
            # fleet reports decode it): carried as ~1,700 dicts per node they cost Ansible ~0.15 s of controller
            # CPU per node (measured at 16 nodes), more than the audit itself.
            finish_audit(result, result["verify"], controller)
        return result

    # ------------------------------------------------------------------------------------------ own role
    def _own_role_errors(self, task_vars):
        """The running role's own variables checked against its argument spec (``main``), as Ansible's validation
        task would; nothing outside a role, or where Ansible validates anyway."""
        role = getattr(self._task, "_role", None)
        role_path = task_vars.get("role_path")
        if role is None or not role_path or getattr(role, "_should_validate", False):
            return []
        spec = self._load(os.path.join(role_path, "meta", "argument_specs.yml")) or {}
        options = ((spec.get("argument_specs") or {}).get("main") or {}).get("options") or {}
        values = dict((name, task_vars[name]) for name in options if name in task_vars)
        return spec_errors(options, self._templar.template(values), os.path.basename(role_path))

    # ------------------------------------------------------------------------------------------ verify
    def _verify_options(self, task_vars, errors):
        """The module's ``verify`` mapping and the controller's part (report file, fail on drift) from the verify
        role's variables over its defaults, validated against its argument spec."""
        role, pattern = VERIFY_ROLE
        values = self._role_variables(role, pattern, task_vars, errors, toggle=False)
        known = self._role_options(role, task_vars)
        for name in sorted(values):
            if name not in known:
                errors.append("%s is not a variable of the verify role (see roles/verify/README.md; known: %s)"
                              % (name, ", ".join(sorted(n for n in known if n.startswith("nodetune_")))))
        waivers = list(values.get("nodetune_verify_waivers") or [])
        if values.get("nodetune_verify_waivers_file"):
            waivers += self._waivers_file(values["nodetune_verify_waivers_file"])
        host = task_vars.get("inventory_hostname")
        module_options = {
            "health": dict((k, v) for k, v in values.items() if k.startswith("nodetune_health_")),
            "waivers": waivers,
            "textfile_path": values.get("nodetune_verify_textfile_path") or None,
            "node_name": host,
        }
        report_file = None
        if boolean(values.get("nodetune_verify_write_reports", True), strict=False) and host:
            report_file = os.path.join(str(values.get("nodetune_report_dir")), "nodes",
                                       report_mod.report_file_name(host))  # encoded: a host name is not a path
        controller = {"report_file": report_file,
                      "fail_on_drift": boolean(values.get("nodetune_verify_fail_on_drift", False), strict=False)}
        return module_options, controller

    def _role_options(self, role, task_vars):
        spec = self._load(os.path.join(self._find_role(role, task_vars), "meta", "argument_specs.yml")) or {}
        return ((spec.get("argument_specs") or {}).get("main") or {}).get("options") or {}

    def _waivers_file(self, name):
        """The waivers file, found as ``lookup('file')`` finds it (role files, then the playbook's folder)."""
        try:
            path = self._find_needle("files", name)
            data = self._loader.load_from_file(path)
        except AnsibleError as exc:
            raise RoleVariablesError("nodetune_verify_waivers_file=%r cannot be read on the controller: %s"
                                     % (name, exc)) from None
        if isinstance(data, dict) and "waivers" in data:
            data = data["waivers"]
        if data is not None and not isinstance(data, list):
            raise RoleVariablesError("nodetune_verify_waivers_file=%r must hold a list of waivers (or a mapping with "
                                     "a waivers list), got %s" % (name, type(data).__name__))
        return list(data or [])

    # ------------------------------------------------------------------------------------------ collection
    def _collect(self, args, task_vars):
        return self._gather(args, task_vars, self.ALL_TAGS)

    def _collect_for_audit(self, args, task_vars):
        """``areas`` and ``bios`` as an audit takes them: every area the tags select for a verify run, and a
        disabled bios_check passed as such (the verify module, unlike tune, runs the BIOS-level checks on an empty
        mapping)."""
        collected, errors = self._gather(args, task_vars, VERIFY_TAGS)
        if "bios" not in args and not collected.get("bios"):
            role, _pattern = BIOS_ROLE
            if selected(role, task_vars, VERIFY_TAGS) and self._find_role(role, task_vars, required=False):
                collected["bios"] = {"nodetune_bios_check_enabled": False}
        return collected, errors

    def _audit_scope(self, args, task_vars, errors):
        """The audit after the apply covers what a verify run with the same tags covers: ``--tags verify`` applies
        nothing and audits every area, ``--tags nvme`` applies and audits nvme. Where that differs from what is
        applied, the module is told (``verify.areas``/``verify.bios``) and discovers the node for the audit."""
        given = dict((key, self._task.args[key]) for key in ("areas", "bios") if key in self._task.args)
        audit, audit_errors = self._collect_for_audit(given, task_vars)
        errors.extend(audit_errors)
        for key in ("areas", "bios"):
            if key in audit and audit[key] != args.get(key):
                args["verify"][key] = audit[key]

    def _gather(self, args, task_vars, all_tags):
        collected = {}
        errors = []
        if "areas" not in args:
            areas = {}
            for role, pattern in AREA_ROLES:
                if not selected(role, task_vars, all_tags):
                    continue
                values = self._role_variables(role, pattern, task_vars, errors)
                if values is not None:
                    areas[role] = values
            collected["areas"] = areas
        if "bios" not in args:
            role, pattern = BIOS_ROLE
            values = None
            # Without the bios_check role (an ad-hoc call from elsewhere) the BIOS-level checks are simply not run.
            if selected(role, task_vars, all_tags) and self._find_role(role, task_vars, required=False):
                values = self._role_variables(role, pattern, task_vars, errors)
            collected["bios"] = values or {}
        return collected, errors

    def _role_variables(self, role, pattern, task_vars, errors, toggle=True):
        """The role's variables for this host (its defaults under the host's values), validated; None if disabled.
        Gathered once per task (the apply and its audit ask for the same roles)."""
        memo = self.__dict__.setdefault("_nodetune_roles", {})
        key = (role, toggle)
        if key not in memo:
            found = []
            memo[key] = (self._read_role_variables(role, pattern, task_vars, found, toggle), found)
        values, found = memo[key]
        errors.extend(found)
        return values

    def _read_role_variables(self, role, pattern, task_vars, errors, toggle):
        role_dir = self._find_role(role, task_vars)
        defaults = self._load(os.path.join(role_dir, "defaults", "main.yml")) or {}
        spec = self._load(os.path.join(role_dir, "meta", "argument_specs.yml")) or {}
        options = ((spec.get("argument_specs") or {}).get("main") or {}).get("options") or {}
        namespace = re.compile(pattern)
        names = set(name for name in task_vars if namespace.search(name)) | set(defaults)
        values = dict((name, task_vars[name] if name in task_vars else defaults[name]) for name in names)
        values = self._templar.template(values)
        enabled = "nodetune_%s_enabled" % role
        try:
            if toggle and not boolean(values.get(enabled, True), strict=True):
                return None
        except TypeError:
            errors.append("%s=%r is not valid: expected true or false" % (enabled, values.get(enabled)))
            return None
        errors.extend(spec_errors(options, dict((k, v) for k, v in values.items() if k in options), role))
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


_CONVERSION = re.compile(r"argument '([^']+)' is of type \S+ and we were unable to convert to (\w+)")


def spec_errors(options, values, role):
    """The role's variables checked against its argument spec, as Ansible's validation task would, with the
    messages made to name the value: Ansible's own type message shows a class name instead of the value."""
    validated = ArgumentSpecValidator(options).validate(values, validate_role_argument_spec=True)
    errors = []
    for message in validated.error_messages:
        match = _CONVERSION.search(message)
        if match and match.group(1) in values:
            name, kind = match.group(1), match.group(2)
            message = "%s=%r is not valid: expected a %s" % (name, _plain(values[name]), kind)
        line = "%s (role %s)" % (message, role)
        if line not in errors:
            errors.append(line)
    return errors


def _plain(value):
    """A tagged string (ansible-core 2.19 data tagging) shown as the plain value it holds."""
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


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


def refused(result, errors):
    """The task's failure for bad role variables, each named once (an area gathered for the apply and for its
    audit, or a variable checked by its role's spec and by the gathering, may say the same)."""
    errors = list(dict.fromkeys(errors))
    result.update(failed=True, errors=errors,
                  msg="nodetune refused the role variables, nothing was sent to the node: " + "; ".join(errors))
    return result


# --------------------------------------------------------------------------------------------- audit results
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
    """The node's report as ``to_nice_json(sort_keys=false)`` would write it."""
    write_text(path, json.dumps(report, indent=4, sort_keys=False, separators=(",", ": ")) + "\n")


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
