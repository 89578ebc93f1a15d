"""nodetune_results: each host's full result of the nodetune modules, written to a file by the controller.

Why: ansible-runner replaces any event result larger than ``MAX_EVENT_RES`` (700,000 characters) with ``{}``. The
audit of a 384-CPU node (one finding per CPU and per IRQ) and the apply of a fresh MI300X node with its diff are
larger than that, so an API that read its verdicts from the events saw an empty result and called the node
clean. This callback runs inside ansible-playbook, where results are whole, and writes every result of the
nodetune modules to ``$NODETUNE_RESULTS_DIR/<host, %-quoted>/<sequence>.json``; the API reads its verdicts from
those files, and a node whose file is missing or unreadable is failed, never ok.

Enabled only where the API sets ``NODETUNE_RESULTS_DIR`` (it needs no ``callbacks_enabled`` entry, so that a
user's own list is left alone); without it, it does nothing.
"""

from __future__ import annotations

import json
import os
import tempfile
from urllib.parse import quote

from ansible.module_utils.common.json import AnsibleJSONEncoder  # type: ignore[import-untyped]
from ansible.plugins.callback import CallbackBase  # type: ignore[import-untyped]

#: the modules whose results the API reads (the others are small and read from the events)
RECORDED_ACTIONS = ("nodetune.instinct.tune", "nodetune.instinct.verify", "nodetune.instinct.topology_facts",
                    "nodetune.instinct.fleet_report")  # its learned findings go to the nodes it names
ENV_DIR = "NODETUNE_RESULTS_DIR"


def host_folder(results_dir: str, host: str) -> str:
    """The host's folder: the name %-quoted, so that no host name (``../x``, ``a/b``) leaves ``results_dir``."""
    name = quote(host, safe="")
    return os.path.join(results_dir, name if name not in (".", "..") else quote(name.replace(".", "%2E"), safe=""))


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "nodetune_results"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self) -> None:
        super().__init__()
        self._dir = os.environ.get(ENV_DIR) or None
        self._sequence = 0

    def _record(self, result, status: str) -> None:
        action = getattr(result._task, "action", None) or getattr(result._task, "resolved_action", None)
        resolved = getattr(result._task, "resolved_action", None) or action
        if self._dir is None or (action not in RECORDED_ACTIONS and resolved not in RECORDED_ACTIONS):
            return
        self._sequence += 1
        folder = host_folder(self._dir, result._host.get_name())
        os.makedirs(folder, exist_ok=True)
        record = {"host": result._host.get_name(), "task": result._task.get_name(), "action": resolved,
                  "status": status, "result": result._result}
        handle, tmp = tempfile.mkstemp(prefix=".result-", dir=folder)
        try:
            with os.fdopen(handle, "w") as out:
                json.dump(record, out, cls=AnsibleJSONEncoder)
            os.rename(tmp, os.path.join(folder, f"{self._sequence:06d}.json"))
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def v2_runner_on_ok(self, result) -> None:
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False) -> None:
        self._record(result, "ignored" if ignore_errors else "failed")
