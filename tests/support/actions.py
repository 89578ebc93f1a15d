"""The tune and verify action plugins on the controller, with the module call recorded instead of run."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar


def action(plugin: Any, args: dict[str, Any], role: str | None = None, check: bool = False,
           transport: str = "local") -> Any:
    """The plugin's action for a task with ``args``: the module calls it makes are recorded in ``.calls``."""
    task = SimpleNamespace(args=args, async_val=0, check_mode=check, diff=False,
                           _role=SimpleNamespace(_role_name=role) if role else None)
    connection = SimpleNamespace(transport=transport, _shell=SimpleNamespace(tmpdir="/nonexistent"))
    module = plugin.ActionModule(task, connection, SimpleNamespace(check_mode=check), DataLoader(),
                                 Templar(loader=DataLoader(), variables={}), None)
    module.calls = []

    def record(module_name: str, module_args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        module.calls.append((module_name, module_args))
        return {"changed": False}

    module._execute_module = record
    return module


def host(**variables: Any) -> dict[str, Any]:
    """The task variables of inventory host node1 on the local connection."""
    return {"inventory_hostname": "node1", "ansible_connection": "local", **variables}
