"""The nodetune modules run in this process, the way Ansible runs them on a node, for tests about the module.

Starting ``ansible`` or ``ansible-playbook`` costs a controller, a worker and a module process per call; a test about
what the module does with its arguments needs none of them. The module's own ``main()`` runs here: its arguments
reach ``AnsibleModule`` through ansible-core's unit-test entry (``ansible.module_utils.testing.patch_module_args``,
ansible-core >= 2.19), and the JSON it prints on exit is the result Ansible would get. A lab module runs as
``nodetune.lab.<name>`` does: the production module with the lab's simulated kernel installed.

The action plugin in front of a module (``lab_action``) is the controller's half, with the module call made here
instead of through a connection (``tests/support/actions.py`` records the call instead). A few real
``ansible-playbook`` runs stay in the suite as smoke tests of the whole path.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from typing import Any
from unittest import mock

from ansible.module_utils import _internal as module_utils_internal
from ansible.module_utils.common import warnings as module_warnings
from ansible.module_utils.testing import patch_module_args
from ansible_collections.nodetune.instinct.plugins.module_utils import rootfs
from ansible_collections.nodetune.lab.plugins.module_utils import simkernel

from tests.support.actions import action


def run_main(main: Callable[[], None], args: dict[str, Any], check: bool = False, diff: bool = False) -> dict[str, Any]:
    """The result of a module's ``main()`` given ``args``, with its exit code as ``rc`` (0: exit_json)."""
    printed = io.StringIO()
    payload = dict(args, _ansible_check_mode=check, _ansible_diff=diff)
    code: Any = 0
    # as on a node: warnings go into the result, not to this process's display, and only this run's
    # (module_utils/common/warnings.py keeps them in module globals, which a module process starts empty)
    with patch_module_args(payload), contextlib.redirect_stdout(printed), \
            mock.patch.object(module_utils_internal, "is_controller", False), \
            mock.patch.object(module_warnings, "_global_warnings", {}), \
            mock.patch.object(module_warnings, "_global_deprecations", {}):
        try:
            main()
        except SystemExit as exited:
            code = exited.code
    result = json.loads(printed.getvalue())
    result["rc"] = code or 0
    return result


def _lab_main(name: str) -> Callable[[], None]:
    if name == "tune":
        from ansible_collections.nodetune.lab.plugins.module_utils.production import tune as production
    elif name == "verify":
        from ansible_collections.nodetune.lab.plugins.module_utils.production import verify as production
    else:
        raise ValueError(f"nodetune.lab has no module {name!r} to run in process")
    return production.main


def run_lab_module(name: str, args: dict[str, Any], check: bool = False, diff: bool = False) -> dict[str, Any]:
    """``nodetune.lab.<name>`` (tune, verify) in process: the production module with the simulated kernel."""
    main = _lab_main(name)
    earlier = rootfs._default_backend  # a test module's own simulated_kernel fixture keeps its backend
    simkernel.install()
    try:
        return run_main(main, args, check=check, diff=diff)
    finally:
        rootfs.use_backend(earlier)


def lab_action(plugin: Any, args: dict[str, Any], role: str | None = None, check: bool = False,
               diff: bool = False) -> Any:
    """The plugin's action for a task with ``args`` whose module call runs the lab's module here: each call is
    recorded in ``.calls`` as (module name, arguments, result)."""
    run = action(plugin, args, role=role, check=check)
    run._task.diff = diff

    def execute(module_name: str, module_args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        collection, _, name = module_name.rpartition(".")
        assert collection == "nodetune.lab", f"{module_name}: only a lab node's module runs in process"
        result = run_lab_module(name, module_args, check=check, diff=diff)
        run.calls.append((module_name, module_args, result))
        return {k: v for k, v in result.items() if k != "rc"}

    run._execute_module = execute
    return run


#: what ``ansible localhost -c local -e nodetune_lab_backend=simulated`` gives the task
ADHOC_VARS = {"inventory_hostname": "localhost", "ansible_connection": "local", "nodetune_lab_backend": "simulated"}


def adhoc(module: str, args: dict[str, Any], check: bool = False, diff: bool = False) -> tuple[int, dict[str, Any]]:
    """As ``tests.support.playbooks.adhoc`` (``ansible localhost -m MODULE -a ARGS`` on a lab node), in this process:
    the module's action plugin, its module call run here. The rc is ``ansible``'s (2: the host failed); the result
    gets under "_output" what the default callback prints: the warnings, the diff (with ``diff``), the result line."""
    from ansible_collections.nodetune.instinct.plugins.action import tune as tune_action
    from ansible_collections.nodetune.instinct.plugins.action import verify as verify_action

    plugins = {"nodetune.instinct.tune": tune_action, "nodetune.instinct.verify": verify_action}
    run = lab_action(plugins[module], args, check=check, diff=diff)
    result = run.run(task_vars=dict(ADHOC_VARS))
    return (2 if result.get("failed") else 0), dict(result, _output=printed(result, diff))


def printed(result: dict[str, Any], diff: bool) -> str:
    """The default callback's lines for a result: ``[WARNING]: ...``, the diff, ``localhost | STATUS => {...}``."""
    from ansible.plugins.callback import CallbackBase

    lines = [f"[WARNING]: {_message(warning)}" for warning in result.get("warnings") or []]
    if diff and result.get("diff") and result.get("changed"):
        lines.append(CallbackBase()._get_diff(result["diff"]))
    status = "FAILED!" if result.get("failed") else "CHANGED" if result.get("changed") else "SUCCESS"
    lines.append(f"localhost | {status} => {json.dumps(result, indent=4, sort_keys=True)}")
    return "\n".join(lines)


def _message(warning: Any) -> str:
    """A warning's text: a string, or ansible-core 2.19's WarningSummary ({"event": {"msg": ...}})."""
    return warning["event"]["msg"] if isinstance(warning, dict) else str(warning)
