"""nodetune: discover, plan, tune and verify AMD Instinct GPU training nodes.

The pure core lives in the Ansible collection (``nodetune.instinct``'s ``plugins/module_utils``) so that the
modules on the nodes, the filters on the controller and this package share one implementation.

The Python API (docs/api.md) runs the project's playbooks through ansible-runner::

    import nodetune

    result = nodetune.apply("inventories/lab", check=True)
    audit = nodetune.verify("inventories/lab")

The API names are loaded on first use (PEP 562), so that ``nodetune discover --json`` does not pay for them.
"""

from __future__ import annotations

from nodetune._collection import ensure_collection_importable

TYPE_CHECKING = False  # not typing's: importing typing is a large share of a `nodetune discover --json` start
if TYPE_CHECKING:
    from typing import Any

ensure_collection_importable()

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "CancelledError",
    "Finding",
    "FleetReport",
    "HostNotFoundError",
    "Inventory",
    "InventoryError",
    "NodeFailedError",
    "NodeResult",
    "NodetuneError",
    "PLAYBOOK_PYTHON",
    "PlaybookError",
    "ProgressCallback",
    "ReportError",
    "RunResult",
    "SettingChange",
    "TaskEvent",
    "UnreachableError",
    "apply",
    "discover",
    "local_inventory",
    "plan",
    "report",
    "revert",
    "verify",
]
_API_NAMES = frozenset(__all__) - {"__version__"}

if TYPE_CHECKING:
    from nodetune.api import (
        PLAYBOOK_PYTHON,
        CancelledError,
        Finding,
        FleetReport,
        HostNotFoundError,
        Inventory,
        InventoryError,
        NodeFailedError,
        NodeResult,
        NodetuneError,
        PlaybookError,
        ProgressCallback,
        ReportError,
        RunResult,
        SettingChange,
        TaskEvent,
        UnreachableError,
        apply,
        discover,
        local_inventory,
        plan,
        report,
        revert,
        verify,
    )


def __getattr__(name: str) -> Any:
    if name in _API_NAMES:
        from nodetune import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nodetune' has no attribute {name!r}")
