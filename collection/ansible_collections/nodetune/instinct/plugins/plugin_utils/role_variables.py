# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller side of the tune and verify action plugins: a host's role variables, taken, coerced and validated.

Every role and variable is declared once (an area's in ``module_utils/areas/<area>.py``, collected with the others in
``module_utils/areas/declarations.py``). For a host, a role's variables are the host's values over the declared
defaults, templated, then coerced and validated as Ansible validates a role's arguments (``-e
nodetune_smt_offline_allowed=true`` is a boolean, ``-e nodetune_vm_dirty_ratio=20`` an integer); what cannot be
coerced is refused, naming the variable, its value and what is valid. Before any of that, a ``nodetune_*`` variable
that nothing declares is refused with the nearest real name, and a run that would write to the controller's own ``/``
is refused without ``nodetune_controller_allowed``.

Tags: a run's ``--tags``/``--skip-tags`` select the areas (``selected``); the tune role's one task is tagged
``always`` and a ``meta: noop`` task beside it carries every area's tag (``--list-tags`` shows them). A tag that
selects no area where one was meant is refused (``tag_errors``), as is a run whose tags select none.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import os
import re
import socket
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from ansible.errors import AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas
from ansible_collections.nodetune.instinct.plugins.plugin_utils import variable_names
from ansible_collections.nodetune.instinct.plugins.module_utils.audit.report import report_file_name
from ansible_collections.nodetune.instinct.plugins.plugin_utils.report_files import learned_path, read_learned
from ansible_collections.nodetune.instinct.plugins.plugin_utils import fleet_reports

try:
    from ansible.template import trust_as_template
except ImportError:  # ansible-core < 2.19: every template is trusted
    def trust_as_template(value):
        return value

ALL_TAGS = ("all", "apply")
VERIFY_TAGS = ("all", "apply", "verify")  # the tags that select every area for an audit
RESOLVE_TIMEOUT = 2.0  # seconds for one name lookup: a name that does not resolve in time is not this machine

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
    return variable_names.undeclared(name for name in task_vars if isinstance(name, str))


def tag_errors(task_vars, all_tags=None):
    """Tags that select no area where one was meant: ``-t NVME``, a Cyrillic ``nvmе``, ``--skip-tags SMT``. With
    ``all_tags`` (a task that applies or audits what the tags select) and no area selected, every tag that is
    neither a nodetune tag nor one of the collection's playbooks: such a run would otherwise do nothing and pass."""
    strict = all_tags is not None and not any_selected(task_vars, all_tags)
    return variable_names.tag_errors(task_vars.get("ansible_run_tags") or [], task_vars.get("ansible_skip_tags") or [],
                                     strict=strict, others=variable_names.PLAYBOOK_TAGS)


def refused_tags(result, errors):
    result.update(failed=True, errors=errors,
                  msg="nodetune refused this run's tags, nothing was sent to the node: " + "; ".join(errors))
    return result


def controller_refusal(task_vars, root, transport, check_mode, allowed):
    """Why a writing run must not go ahead on the controller's own ``/`` (None when it may): a local connection,
    or a host name or ``ansible_host`` that is this machine (see :func:`is_controller`)."""
    if check_mode or allowed or os.path.realpath(str(root or "/")) != "/":
        return None
    host = task_vars.get("inventory_hostname")
    connection = str(task_vars.get("ansible_connection") or "").rsplit(".", maxsplit=1)[-1]  # ansible.builtin.local
    if transport == "local" or connection == "local":
        how = "local connection"
    else:
        name = next((n for n in (task_vars.get("ansible_host"), host) if is_controller(n)), None)
        if name is None:
            return None
        how = "%s is this machine" % name
    return ("nodetune_root=%r on %s is the root of the machine Ansible runs on (%s): tuning the controller itself "
            "is refused unless %s: true is set; point nodetune_root at the node's tree, or use check mode (--check), "
            "which needs no opt-in" % (str(root or "/"), host, how, areas.CONTROLLER_OPT_IN))


def is_controller(name: object) -> bool:
    """Whether a host name or address reaches the machine Ansible runs on: ``localhost`` in any case (and
    ``*.localhost``), this machine's own names, and any name or address that is (or resolves to) a loopback,
    unspecified or IPv4-mapped loopback address, or one of this machine's own addresses. A name that does not
    resolve within :data:`RESOLVE_TIMEOUT` is not taken as this machine (Ansible cannot reach it by that name)."""
    text = str(name or "").strip().rstrip(".").lower()
    if not text:
        return False
    if text == "localhost" or text.endswith(".localhost"):
        return True
    own_names = {socket.gethostname().lower(), str(_bounded(socket.getfqdn, "")).lower()} - {""}
    if text in own_names:
        return True
    found = _resolve(text)
    if any(address.is_loopback or address.is_unspecified for address in found):
        return True  # 0.0.0.0 and :: reach this machine too
    own = _interface_addresses().union(*(_resolve(own_name) for own_name in own_names))
    return bool(found & own)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address ``text`` writes (an IPv4-mapped IPv6 address as its IPv4 one), None for a name."""
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])  # fe80::1%eth0: the scope is no part of it
    except ValueError:
        return None
    return getattr(address, "ipv4_mapped", None) or address


def _bounded(function: Callable[[], Any], default: Any) -> Any:
    """``function()``, or ``default`` when it fails or outlasts :data:`RESOLVE_TIMEOUT` (a name lookup can hang on
    an unreachable DNS server; the thread is left to end on its own)."""
    out = [default]

    def call():
        with suppress(Exception):
            out[0] = function()

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(RESOLVE_TIMEOUT)
    return default if worker.is_alive() else out[0]


def _resolve(name: str) -> set:
    literal = _address(name)
    if literal is not None:
        return {literal}
    infos = _bounded(lambda: socket.getaddrinfo(name, None), [])
    return {address for address in (_address(str(info[4][0])) for info in infos) if address is not None}


def _interface_addresses() -> set:
    """This machine's own addresses, as the kernel lists them (Linux; none elsewhere)."""
    found = set()
    with suppress(OSError), open("/proc/net/fib_trie") as handle:
        last = None
        for line in handle:  # "|-- 10.0.0.5" then "/32 host LOCAL" for an address of this machine
            words = line.split()
            if words[:1] == ["|--"]:
                last = words[1]
            elif "LOCAL" in words and last:
                found.add(_address(last))
    with suppress(OSError, ValueError), open("/proc/net/if_inet6") as handle:
        for line in handle:
            found.add(ipaddress.IPv6Address(int(line.split()[0], 16)))
    return found - {None}


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
    # null means "leave it alone" (each area's builder skips it): Ansible's validator takes null only where the
    # default is null (`nodetune_vm_dirty_ratio=None is not valid: expected a int`), so nulls are not validated and
    # stay null, never replaced by the default.
    nulls = set(name for name, value in values.items() if value is None and name in options)
    validated = ArgumentSpecValidator(areas.argument_spec(options)).validate(
        dict((name, value) for name, value in values.items() if name not in nulls), validate_role_argument_spec=True)
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
                   if name in validated.validated_parameters and name not in nulls)
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
    def report_dir(self):
        """``nodetune_report_dir`` where the run writes reports (``nodetune_verify_write_reports``), else None: the
        controller folder that keeps a host's detail (bounded_result.py). Only these two variables are read, so
        that an apply alone is not refused for the verify role's others."""
        declared = areas.ROLES[VERIFY_ROLE]["variables"]
        values = {}
        for name in ("nodetune_verify_write_reports", "nodetune_report_dir"):
            if name in self._task_vars:
                values[name] = self._task_vars[name]
            elif "default" in declared.get(name, {}):
                values[name] = _trusted(declared[name]["default"])
        values = self._action._templar.template(values)
        if not values.get("nodetune_report_dir") or \
                not boolean(values.get("nodetune_verify_write_reports", True), strict=False):
            return None
        return str(values["nodetune_report_dir"])

    def verify_options(self, errors):
        """The module's ``verify`` mapping and the controller's part (report file, fail on drift) from the verify
        role's variables over its defaults; with ``learned_inventory`` where the last fleet report learned the
        host's inventory from its group majority (report_files.read_learned)."""
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
        if host and values.get("nodetune_report_dir"):
            try:  # what the last fleet report learned from the group majority, for the checker's inventory.json
                learned = read_learned(learned_path(values["nodetune_report_dir"], host))
            except ValueError as exc:
                raise RoleVariablesError(str(exc)) from None
            if learned:
                module_options["learned_inventory"] = learned
        controller = {"report_file": report_file,
                      "fail_on_drift": boolean(values.get("nodetune_verify_fail_on_drift", False), strict=False)}
        if report_file:  # which run wrote the report, and the host's groups: fleet reports over many runs need them
            controller["report_extra"] = fleet_reports.report_context(self._task_vars)
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
