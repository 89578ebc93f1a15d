"""The Python API: run nodetune's playbooks over an inventory and get typed results back.

Each call is ONE ``ansible-playbook`` run through ansible-runner, in a private data directory that is created in
a temporary folder and removed afterwards (``keep_artifacts=True`` keeps it and returns its path). The results
come from the per-host events of the run (``runner_on_ok``/``_failed``/``_unreachable``): the tune module's
``actions`` become :class:`SettingChange` objects, the verify module's ``findings`` become :class:`Finding`
objects, so the API reports exactly what the modules did, in the same words.

    import nodetune

    result = nodetune.apply("inventories/lab", check=True)        # what would change; writes nothing
    for node in result.nodes.values():
        for change in node.settings:
            print(node.host, change.id, change.target, change.before, "->", change.after)

    audit = nodetune.verify("inventories/lab", limit="mi300x-01")
    for finding in audit.drift:
        print(finding.id, finding.target, finding.expected, finding.actual, finding.remedy)

Failures raise (:class:`InventoryError`, :class:`HostNotFoundError`, :class:`NodeFailedError`,
:class:`UnreachableError`, :class:`PlaybookError`; all :class:`NodetuneError`); the node-level ones carry the
partial :class:`RunResult` as ``.result``. ``raise_on_failure=False`` returns the result instead, for callers
(like the CLI) that report failed nodes next to the others. Drift is a result, not an error.

Only the standard library is imported here at import time: ansible-runner is imported on the first run, so that
``import nodetune`` (and ``nodetune discover --json``) stays fast.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

from nodetune._as_data import MAX_EXTRA_VARS_BYTES, PLAYBOOK_PYTHON
from nodetune._as_data import dump as _dump_as_data
from nodetune._collection import REPO_ROOT
from nodetune._tempdir import TempDirError, make_run_dir

__all__ = [
    "CancelledError",
    "Finding",
    "FleetReport",
    "HostNotFoundError",
    "Inventory",
    "InventoryError",
    "PLAYBOOK_PYTHON",
    "NodeFailedError",
    "NodeResult",
    "NodetuneError",
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

Operation: TypeAlias = Literal["discover", "plan", "apply", "verify", "revert"]
NodeStatus: TypeAlias = Literal["ok", "changed", "drift", "pending", "failed", "unreachable"]
EventStatus: TypeAlias = Literal["started", "ok", "changed", "skipped", "failed", "unreachable"]
#: An inventory: a path (file or directory, as for ``ansible-playbook -i``), a mapping in Ansible's YAML/JSON
#: inventory structure (``{"all": {"hosts": {...}, "vars": {...}}}``), or a sequence of host names.
Inventory: TypeAlias = "str | os.PathLike[str] | Mapping[str, Any] | Sequence[str]"

COLLECTION = "nodetune.instinct"
_TUNE = COLLECTION + ".tune"
_VERIFY = COLLECTION + ".verify"
_TOPOLOGY = COLLECTION + ".topology_facts"
_FLEET = COLLECTION + ".fleet_report"
_HOST_NAME = re.compile(r"^[A-Za-z0-9_.:\-\[\]]+$")
_UNMATCHED = re.compile(r"Could not match supplied host pattern, ignoring: (\S+)")
#: the modules whose results are read from the callback's files, never from runner's size-limited events
_RECORDED = (_TUNE, _VERIFY, _TOPOLOGY, _FLEET)
_CALLBACK_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "callback_plugins")
_RESULTS_ENV = "NODETUNE_RESULTS_DIR"


# --------------------------------------------------------------------------------------------- errors
class NodetuneError(Exception):
    """Base class of every error the API raises on purpose."""


class InventoryError(NodetuneError):
    """The inventory is missing or unusable (nothing was run on any node)."""


class HostNotFoundError(InventoryError):
    """``limit`` (or the inventory) selects no host: nothing was run."""

    def __init__(self, message: str, patterns: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.patterns = list(patterns)


class PlaybookError(NodetuneError):
    """The playbook run failed; ``result`` holds what the nodes reported (None when it never started)."""

    def __init__(self, message: str, result: RunResult | None = None) -> None:
        super().__init__(message)
        self.result = result


class NodeFailedError(PlaybookError):
    """One or more nodes failed (bad variables, a write that failed and was rolled back, ...)."""


class CancelledError(PlaybookError):
    """The run was cancelled by SIGINT or SIGTERM (``signal``) and stopped; ``result`` holds what the nodes
    reported before: the nodes whose module result was read were applied, the others stopped mid-run."""

    def __init__(self, message: str, result: RunResult | None = None, signal: int = 2) -> None:
        super().__init__(message, result)
        self.signal = signal


class UnreachableError(PlaybookError):
    """One or more nodes could not be reached (and any others failed)."""


class ReportError(NodetuneError):
    """:func:`report`: a source that is not a report folder or holds no node report, or an output folder that
    cannot be used (nothing was written)."""


# --------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class TaskEvent:
    """One per-node task event, streamed to the ``progress`` callback while the playbook runs."""

    host: str
    task: str
    status: EventStatus
    action: str | None = None
    message: str | None = None
    #: a failure that the playbook ignores (``ignore_errors``): the node is not failed by it
    ignored: bool = False


@dataclass(frozen=True)
class SettingChange:
    """A Setting the tune module changed (or, in check mode, would change), as its ``actions`` report it."""

    id: str
    target: str
    before: str | None
    after: str
    path: str | None = None
    kind: str = "attr"
    reboot_required: bool = False
    disruptive: bool = False
    reason: str = ""

    @classmethod
    def from_action(cls, action: Mapping[str, Any]) -> SettingChange:
        return cls(id=str(action.get("id", "")), target=str(action.get("target", "")),
                   before=_text_or_none(action.get("before")), after=str(action.get("after", "")),
                   path=action.get("path"), kind=str(action.get("kind", "attr")),
                   reboot_required=bool(action.get("reboot_required")), disruptive=bool(action.get("disruptive")),
                   reason=str(action.get("reason") or ""))


@dataclass(frozen=True)
class Finding:
    """One verify finding (docs/verify.md): a stable ``id`` on a ``target`` with its ``status``."""

    id: str
    target: str
    status: str
    expected: Any = None
    actual: Any = None
    severity: str = "info"
    remedy: str = ""
    source: str = ""
    waiver: Mapping[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        return cls(id=str(data.get("id", "")), target=str(data.get("target", "")), status=str(data.get("status", "")),
                   expected=data.get("expected"), actual=data.get("actual"),
                   severity=str(data.get("severity") or "info"), remedy=str(data.get("remedy") or ""),
                   source=str(data.get("source") or ""), waiver=data.get("waiver"))

    @property
    def uid(self) -> str:
        """``id[target]``: how the reports (JUnit testcases, diff lines) name one finding."""
        return f"{self.id}[{self.target}]"

    def as_dict(self) -> dict[str, Any]:
        """The finding as the verify module writes it (its keys in the module's order)."""
        return {name: getattr(self, name) for name in _FINDING_KEYS}


#: a finding's keys as module_utils/plan/finding.py orders them
_FINDING_KEYS = ("id", "target", "expected", "actual", "status", "severity", "remedy", "source", "waiver")


class _OneCopy:
    """``NodeResult.findings`` and ``NodeResult.report``, kept once: the findings as :class:`Finding` objects, the
    report without them (put back together when asked, transport.report_with). Where the run left them in the
    node's report file (``report_file``: a bounded result, plugin_utils/bounded_result.py) they are read from it on
    first use, so a fleet's RunResult holds only the nodes' findings that are asked for (a full-size node's are
    about 1 MB)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, node: NodeResult | None, owner: type | None = None) -> Any:
        if node is None:
            return None  # the dataclass field's default
        state = node.__dict__
        if state.get("_unread"):
            _read_report_file(node)
        if self.name == "findings":
            return state.setdefault("_findings", [])
        head = state.get("_report")
        if head is None:
            return None
        from ansible_collections.nodetune.instinct.plugins.module_utils.audit.transport import report_with

        return report_with(head, [f.as_dict() for f in state.get("_findings") or []])

    def __set__(self, node: NodeResult, value: Any) -> None:
        state = node.__dict__
        if state.get("_unread"):
            _read_report_file(node)  # what is set replaces what the file holds
        if self.name == "findings":
            state["_findings"] = list(value or [])
            return
        if value is None:
            state["_report"] = None
            return
        head = dict(value)
        findings = head.pop("findings", None)
        state["_report"] = head
        if isinstance(findings, list):
            state["_findings"] = [Finding.from_dict(f) for f in findings if isinstance(f, Mapping)]


def _read_report_file(node: NodeResult) -> None:
    """The node's findings and report from its report file (:class:`_OneCopy`); raises ReportError."""
    node.__dict__.pop("_unread", None)
    try:
        report = json.loads(Path(str(node.report_file)).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReportError(f"{node.host}: its report file {node.report_file} cannot be read: {exc}") from None
    if not isinstance(report, dict) or not isinstance(report.get("findings"), list):
        raise ReportError(f"{node.host}: its report file {node.report_file} holds no list of findings")
    node.report = report


@dataclass
class NodeResult:
    """What one node reported. ``status``: ok, changed, drift (verify), pending (verify: no drift, but a finding
    right in the boot loader that waits for a reboot), failed or unreachable."""

    host: str
    status: NodeStatus = "ok"
    changed: bool = False
    settings: list[SettingChange] = field(default_factory=list)
    #: verify: every finding (read from ``report_file`` on first use where the run left them there)
    findings: list[Finding] = _OneCopy()  # type: ignore[assignment]
    reboot_required: bool = False
    #: why the node failed or could not be reached (None otherwise)
    message: str | None = None
    failed_task: str | None = None
    #: journal entries put back by a revert
    restored: list[str] = field(default_factory=list)
    #: revert: journal entries whose object (device, CPU, IRQ, interface) is gone from the node, not restored
    gone: list[str] = field(default_factory=list)
    #: Settings written without error that read back differently (the kernel clamped or ignored them)
    unconfirmed: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: the check/diff text (``before``/``after``) when the run asked for a diff
    diff: dict[str, str] | None = None
    #: discover and plan: the node's Topology (docs/topology.md)
    topology: dict[str, Any] | None = None
    #: plan: the full Layout (docs/layout.md); apply: the tune module's layout summary
    layout: dict[str, Any] | None = None
    #: verify: counts per status and the drifting ids; ``report``: the per-node JSON report (its findings are
    #: ``findings``: one copy)
    summary: dict[str, Any] | None = None
    report: dict[str, Any] | None = _OneCopy()  # type: ignore[assignment]
    #: verify: the node's report file on the controller, where the run wrote it (``nodetune_report_dir``); the
    #: findings and the report are read from it on first use (a later run that rewrites it changes what is read)
    report_file: str | None = None

    @property
    def drift(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "drift"]

    @property
    def pending(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "pending"]

    @property
    def failed(self) -> bool:
        return self.status in ("failed", "unreachable")

    def _count(self, status: str) -> int:
        """How many findings have ``status``: from the summary while the findings are still in the report file."""
        counts = (self.summary or {}).get("counts") if self.__dict__.get("_unread") else None
        if isinstance(counts, Mapping) and isinstance(counts.get(status), int):
            return int(counts[status])
        return sum(1 for f in self.findings if f.status == status)


@dataclass
class RunResult:
    """The outcome of one call: one :class:`NodeResult` per host that took part, and the run's facts."""

    operation: Operation
    nodes: dict[str, NodeResult]
    rc: int
    check: bool = False
    duration_s: float = 0.0
    #: the private data directory with ansible-runner's artifacts, when ``keep_artifacts=True``
    artifacts_dir: str | None = None
    #: host patterns of ``limit`` that matched no host (the run went ahead for the others)
    unmatched: list[str] = field(default_factory=list)
    #: the playbook's error lines when it failed as a whole (syntax, inventory, undefined variables)
    errors: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[NodeResult]:
        return [n for n in self.nodes.values() if n.status == "failed"]

    @property
    def unreachable(self) -> list[NodeResult]:
        return [n for n in self.nodes.values() if n.status == "unreachable"]

    @property
    def changed(self) -> list[NodeResult]:
        return [n for n in self.nodes.values() if n.changed]

    @property
    def drifted(self) -> list[NodeResult]:
        return [n for n in self.nodes.values() if n.status == "drift"]

    @property
    def drift(self) -> list[Finding]:
        return [f for n in self.nodes.values() for f in n.drift]

    @property
    def pending(self) -> list[NodeResult]:
        """verify: the nodes with no drift whose boot loader holds a change their running kernel has not yet."""
        return [n for n in self.nodes.values() if n.status == "pending"]

    @property
    def reboot_required(self) -> bool:
        return any(n.reboot_required for n in self.nodes.values())

    @property
    def ok(self) -> bool:
        """The run succeeded on every node (drift and changes are results, not failures)."""
        return self.rc == 0 and not self.failed and not self.unreachable and not self.errors

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable data (what ``nodetune ... --json`` prints)."""
        data = dataclasses.asdict(self)
        data["ok"] = self.ok
        data["reboot_required"] = self.reboot_required
        return data


ProgressCallback: TypeAlias = Callable[[TaskEvent], None]


@dataclass
class FleetReport:
    """The fleet reports built from per-node report files (:func:`report`): ``summary`` (as ``summary.json``:
    clean, drifted, pending and failed nodes, ``drift_by_id``, ``outliers``, and per node in ``sources`` the run
    and time of the report it was judged on), the ``junit`` and ``prometheus`` texts, the ``outliers``, the
    findings learned from the group majorities per host, and the files written."""

    summary: dict[str, Any]
    junit: str
    prometheus: str
    outliers: list[dict[str, Any]]
    learned_findings: dict[str, list[Finding]]
    #: the fleet files written into ``output`` (summary.json, junit.xml, fleet.prom, fleet.html)
    files: list[str] = field(default_factory=list)
    #: the learned-expectation files (``learned/<host>.json``) and node reports written or removed in ``output``
    learned_files: list[str] = field(default_factory=list)

    @property
    def sources(self) -> dict[str, dict[str, Any]]:
        """Host -> the run (``run``), times (``time``: when its controller took it; ``timestamp``: the node's own)
        and ``file`` of the report it was judged on."""
        return dict(self.summary.get("sources") or {})

    @property
    def unreadable(self) -> list[dict[str, str]]:
        """The report files that could not be read (their nodes are failed): ``node``, ``file``, ``error``."""
        return list(self.summary.get("unreadable") or [])

    @property
    def failed(self) -> dict[str, str]:
        return dict(self.summary.get("failed") or {})

    @property
    def drifted(self) -> dict[str, list[str]]:
        return dict(self.summary.get("drifted") or {})

    @property
    def pending(self) -> dict[str, list[str]]:
        return dict(self.summary.get("pending") or {})

    @property
    def ok(self) -> bool:
        """Every node's newest report was read and none failed (drift is a result, not a failure)."""
        return not self.failed and not self.unreadable

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["ok"] = self.ok
        return data


# --------------------------------------------------------------------------------------------- public calls
def discover(inventory: Inventory, *, limit: str | None = None, forks: int | None = None,
             extra_vars: Mapping[str, Any] | None = None, tags: Sequence[str] | None = None,
             progress: ProgressCallback | None = None, keep_artifacts: bool = False,
             raise_on_failure: bool = True) -> RunResult:
    """Each node's Topology (``NodeResult.topology``), read-only (playbooks/discover.yml)."""
    return _run("discover", inventory, limit=limit, forks=forks, extra_vars=extra_vars, tags=tags,
                progress=progress, keep_artifacts=keep_artifacts, raise_on_failure=raise_on_failure)


def plan(inventory: Inventory, *, limit: str | None = None, forks: int | None = None,
         extra_vars: Mapping[str, Any] | None = None, tags: Sequence[str] | None = None,
         progress: ProgressCallback | None = None, keep_artifacts: bool = False,
         raise_on_failure: bool = True) -> RunResult:
    """Each node's Topology, full Layout and the changes an apply would make, read-only (playbooks/plan.yml).

    The layout is planned from the inventory's variables exactly as the apply plans it."""
    return _run("plan", inventory, check=True, limit=limit, forks=forks, extra_vars=extra_vars, tags=tags,
                progress=progress, keep_artifacts=keep_artifacts, raise_on_failure=raise_on_failure)


def apply(inventory: Inventory, check: bool = False, diff: bool = True, *, limit: str | None = None,
          forks: int | None = None, extra_vars: Mapping[str, Any] | None = None, tags: Sequence[str] | None = None,
          skip_tags: Sequence[str] | None = None, progress: ProgressCallback | None = None,
          keep_artifacts: bool = False, raise_on_failure: bool = True) -> RunResult:
    """Tune the nodes (playbooks/apply.yml); ``check=True`` only reports what would change and writes nothing.

    ``tags`` selects areas as the playbook does (``tags=["nvme"]`` tunes only the nvme area)."""
    return _run("apply", inventory, check=check, diff=diff, limit=limit, forks=forks, extra_vars=extra_vars,
                tags=tags, skip_tags=skip_tags, progress=progress, keep_artifacts=keep_artifacts,
                raise_on_failure=raise_on_failure)


def verify(inventory: Inventory, *, limit: str | None = None, forks: int | None = None,
           extra_vars: Mapping[str, Any] | None = None, tags: Sequence[str] | None = None,
           report_dir: str | os.PathLike[str] | None = None, progress: ProgressCallback | None = None,
           keep_artifacts: bool = False, raise_on_failure: bool = True) -> RunResult:
    """Audit the nodes (playbooks/verify.yml): ``NodeResult.findings``; never changes a node.

    Drift does not raise: a drifted node has status ``drift`` and ``RunResult.drift`` lists the findings. The
    fleet reports (JUnit, summary, per-node JSON) are written only when ``report_dir`` is given."""
    defaults: dict[str, Any] = {"nodetune_verify_fail_on_drift": False,
                                "nodetune_verify_write_reports": report_dir is not None}
    if report_dir is not None:
        defaults["nodetune_report_dir"] = str(Path(report_dir).resolve())
    return _run("verify", inventory, limit=limit, forks=forks, extra_vars={**defaults, **(extra_vars or {})},
                tags=tags, progress=progress, keep_artifacts=keep_artifacts, raise_on_failure=raise_on_failure)


def revert(inventory: Inventory, check: bool = False, *, limit: str | None = None, forks: int | None = None,
           extra_vars: Mapping[str, Any] | None = None, progress: ProgressCallback | None = None,
           keep_artifacts: bool = False, raise_on_failure: bool = True) -> RunResult:
    """Put the nodes back as they were before nodetune first changed them (playbooks/revert.yml):
    ``NodeResult.restored`` lists the journal entries put back."""
    return _run("revert", inventory, check=check, diff=True, limit=limit, forks=forks, extra_vars=extra_vars,
                progress=progress, keep_artifacts=keep_artifacts, raise_on_failure=raise_on_failure)


def report(sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
           output: str | os.PathLike[str] | None = None, *, top: int = 10, suite_name: str = "nodetune verify",
           picture: bool = True) -> FleetReport:
    """The fleet reports from the per-node report files of any number of runs, ``--limit`` slices or controllers
    (docs/fleet.md): each source is a report folder (``nodetune_report_dir``: ``nodes/<host>.json``, and the
    ``failed/<host>.json`` of nodes that failed in a run) or a folder of node reports. The newest report of each
    node wins, by the time its controller recorded; the outliers and the learned expectations take the inventory
    groups each node's newest report recorded. No Ansible run: only files are read.

    With ``output`` (a folder, created if missing): ``summary.json``, ``junit.xml``, ``fleet.prom``, ``fleet.html``
    (the picture's drift and outliers sections, unless ``picture=False``) and the learned expectations
    (``learned/<host>.json``) are written there. Raises :class:`ReportError` before writing anything for a source
    that is no folder or holds no node report, or an output that is not a folder."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.audit.report import markup_text
    from ansible_collections.nodetune.instinct.plugins.plugin_utils import fleet_reports

    given = [sources] if isinstance(sources, str | os.PathLike) else list(sources)
    if not given or not all(isinstance(s, str | os.PathLike) and str(s) for s in given):
        raise ValueError(f"sources must be one or more report folders (paths), got {sources!r}")
    if isinstance(top, bool) or not isinstance(top, int) or top < 0:
        raise ValueError(f"top must be a whole number >= 0 (how many drift ids the summary ranks), got {top!r}")
    dest = None
    if output is not None:
        dest = Path(output).expanduser().resolve()
        if dest.exists() and not dest.is_dir():
            raise ReportError(f"output {str(output)!r} is a file: give a folder for the fleet reports")
        if not dest.exists() and not dest.parent.is_dir():
            raise ReportError(f"output {str(output)!r}: its parent folder {str(dest.parent)!r} does not exist")
    try:
        outputs = fleet_reports.build(fleet_reports.file_entries(str(Path(s).expanduser().resolve()) for s in given),
                                      top=top, suite_name=suite_name)
    except fleet_reports.ReportSourceError as exc:
        raise ReportError(str(exc)) from None
    result = FleetReport(summary=outputs.summary, junit=outputs.junit, prometheus=outputs.prometheus,
                         outliers=outputs.outliers,
                         learned_findings={host: [Finding.from_dict(f) for f in found]
                                           for host, found in outputs.learned.items()})
    if dest is None:
        return result
    try:
        result.files, result.learned_files = fleet_reports.write_files(str(dest), outputs)
        if picture:
            page = dest / "fleet.html"
            page.write_text(markup_text(_fleet_page(outputs)), encoding="utf-8")
            result.files = sorted([*result.files, str(page)])
    except OSError as exc:
        raise ReportError(f"the fleet reports could not be written into {str(dest)!r}: {exc}") from None
    return result


def _fleet_page(outputs: Any) -> str:
    """The picture's fleet page from the nodes' digests: the drift and outliers sections (report files hold no
    topology to draw)."""
    from nodetune import picture

    records = []
    for digest in outputs.digests:
        if digest["outcome"] != "ok":
            status = "failed"
        else:
            status = "drift" if any(g["status"] == "drift" for g in digest["groups"]) else "ok"
        records.append(picture.NodeDrift(digest["host"], status, (), digest["message"] or None, digest["groups"]))
    return picture.fleet_page([], records, title="nodetune fleet report", outliers=outputs.outliers)


def local_inventory(root: str | os.PathLike[str], name: str | None = None) -> dict[str, Any]:
    """A one-host inventory for a node tree (or ``/``) on this machine: local connection, ``nodetune_root``.

    Raises InventoryError when ``root`` is not a directory."""
    path = Path(root).expanduser()
    if not path.is_dir():
        raise InventoryError(f"--root {str(root)!r}: no such directory (give the node's root: '/' or a node tree)")
    resolved = path.resolve()
    host = name or ("localhost" if str(resolved) == "/" else _host_name_for(resolved.name))
    return {"all": {"hosts": {host: {
        "ansible_connection": "local",
        "ansible_python_interpreter": PLAYBOOK_PYTHON,
        "nodetune_root": str(resolved),
    }}}}


# --------------------------------------------------------------------------------------------- the run
@dataclass(frozen=True)
class _Source:
    """Where the playbooks come from: the repository checkout, or an installed collection."""

    project_dir: str | None
    playbook: Callable[[str], str]


def _playbook_source() -> _Source:
    if os.path.isfile(os.path.join(REPO_ROOT, "playbooks", "apply.yml")):
        return _Source(REPO_ROOT, lambda name: f"playbooks/{name}.yml")
    # Installed without the repository: the collection ships the playbooks (scripts/build_collection.sh).
    return _Source(None, lambda name: f"{COLLECTION}.{name}")


def _run(operation: Operation, inventory: Inventory, *, check: bool = False, diff: bool = False,
         limit: str | None = None, forks: int | None = None, extra_vars: Mapping[str, Any] | None = None,
         tags: Sequence[str] | None = None, skip_tags: Sequence[str] | None = None,
         progress: ProgressCallback | None = None, keep_artifacts: bool = False,
         raise_on_failure: bool = True) -> RunResult:
    _check_arguments(limit, forks, extra_vars, tags, skip_tags)
    started = time.monotonic()
    try:
        work, ansible_tmp = make_run_dir("nodetune-run-")
    except TempDirError as exc:
        raise PlaybookError(f"nodetune {operation}: {exc}") from None
    try:
        inventory_path = _prepare_inventory(inventory, work)
        collector = _Collector(operation, progress, os.path.join(work, "results"))
        rc = _run_runner(operation, work, ansible_tmp, inventory_path, collector, check=check, diff=diff, limit=limit,
                         forks=forks, extra_vars=extra_vars, tags=tags, skip_tags=skip_tags,
                         keep_artifacts=keep_artifacts)
        result = collector.result(rc, check=check)
        result.duration_s = round(time.monotonic() - started, 3)
        if collector.cancelled is not None:
            _raise_cancelled(result, collector.cancelled)
        if keep_artifacts:
            _scrub_environment_copies(work)
            result.artifacts_dir = work
    finally:
        if not keep_artifacts:
            shutil.rmtree(work, ignore_errors=True)
    _raise_for(result, limit, raise_on_failure)
    return result


def _check_arguments(limit: str | None, forks: int | None, extra_vars: Mapping[str, Any] | None,
                     tags: Sequence[str] | None, skip_tags: Sequence[str] | None) -> None:
    if forks is not None and (isinstance(forks, bool) or not isinstance(forks, int) or forks < 1):
        raise ValueError(f"forks must be an integer >= 1, got {forks!r}")
    if limit is not None and (not isinstance(limit, str) or not limit.strip()):
        raise ValueError(f"limit must be a non-empty host pattern string, got {limit!r}")
    if extra_vars is not None and not isinstance(extra_vars, Mapping):
        raise ValueError(f"extra_vars must be a mapping of variable names to values, got {type(extra_vars).__name__}")
    for what, value in (("tags", tags), ("skip_tags", skip_tags)):
        if value is not None and (isinstance(value, str) or not all(isinstance(t, str) and t for t in value)):
            raise ValueError(f"{what} must be a list of tag names, got {value!r}")
    from ansible_collections.nodetune.instinct.plugins.plugin_utils import variable_names

    # A misspelt variable would be kept as another one (the real one keeps its default) and an unknown tag would
    # make the run a no-op that passes: refused before anything runs.
    errors = variable_names.undeclared(name for name in extra_vars or {} if isinstance(name, str))
    errors += variable_names.tag_errors(tags or [], skip_tags or [], others=variable_names.PLAYBOOK_TAGS)
    if errors:
        raise ValueError("; ".join(errors))


def _prepare_inventory(inventory: Inventory, work: str) -> str:
    """The inventory as a path ansible-playbook can read: a given path as is, data written as JSON."""
    if isinstance(inventory, str | os.PathLike):
        path = Path(inventory).expanduser()
        if not path.exists():
            hint = " (a host list is given as a list of names, not a string)" if "," in str(inventory) else ""
            raise InventoryError(f"inventory {str(inventory)!r} does not exist{hint}")
        return str(path.resolve())
    if isinstance(inventory, Mapping):
        data: Any = dict(inventory)
        if not data:
            raise InventoryError("the inventory mapping is empty: give at least {'all': {'hosts': {...}}}")
    elif isinstance(inventory, Sequence):
        hosts = list(inventory)
        bad = [h for h in hosts if not isinstance(h, str) or not _HOST_NAME.match(h)]
        if not hosts or bad:
            raise InventoryError(f"a host list must be non-empty host names; not valid: {bad!r}" if bad
                                 else "the host list is empty")
        data = {"all": {"hosts": {h: None for h in hosts}}}
    else:
        raise InventoryError(f"inventory must be a path, a mapping or a list of host names, not "
                             f"{type(inventory).__name__}")
    folder = Path(work, "inventory")
    folder.mkdir()
    path = folder / "hosts.yml"
    try:
        path.write_text(_dump_as_data(data), encoding="utf-8")
    except (TypeError, ValueError) as exc:
        raise InventoryError(f"the inventory mapping cannot be written as YAML data: {exc}") from None
    return str(path)


def _with_private_reports(operation: Operation, work: str, extra_vars: Mapping[str, Any] | None
                          ) -> Mapping[str, Any] | None:
    """A run that writes no report of its own (all but verify, unless told to verify or where) keeps the detail of
    its bounded results (a tune result's changes: plugin_utils/bounded_result.py) in the run's folder, read back
    before it is removed: never in a shared report folder, where a run beside it could replace them."""
    if operation == "verify" or {"nodetune_report_dir", "nodetune_tune_verify"} & set(extra_vars or {}):
        return extra_vars
    return {**(extra_vars or {}), "nodetune_report_dir": os.path.join(work, "reports")}


def _write_extra_vars(work: str, extra_vars: Mapping[str, Any]) -> None:
    """``env/extravars``, which ansible-runner passes as ``-e @FILE``: data that is never templated (and not on
    the command line, where every user of the machine can read it)."""
    folder = Path(work, "env")
    folder.mkdir(exist_ok=True)
    path = folder / "extravars"
    try:
        text = _dump_as_data(dict(extra_vars), MAX_EXTRA_VARS_BYTES)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"extra_vars cannot be written as YAML data: {exc}") from None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def _runner_env(results_dir: str, ansible_tmp: str) -> dict[str, str]:
    """The venv's bin first on PATH (ansible-playbook of this Python), plain text output, the results callback
    (on the callback path before the user's own; it needs no ``callbacks_enabled`` entry), and a TMPDIR in the
    run's folder whose path fits Ansible's socket (nodetune._tempdir)."""
    bindir = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "")
    callbacks = os.environ.get("ANSIBLE_CALLBACK_PLUGINS", "")
    return {
        "PATH": bindir + (os.pathsep + path if path else ""),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_CALLBACK_PLUGINS": _CALLBACK_DIR + (os.pathsep + callbacks if callbacks else ""),
        _RESULTS_ENV: results_dir,
        "TMPDIR": ansible_tmp,
    }


def _run_runner(operation: Operation, work: str, ansible_tmp: str, inventory_path: str, collector: _Collector, *,
                check: bool,
                diff: bool, limit: str | None, forks: int | None, extra_vars: Mapping[str, Any] | None,
                tags: Sequence[str] | None, skip_tags: Sequence[str] | None, keep_artifacts: bool) -> int:
    import ansible_runner  # type: ignore[import-untyped]  # deferred: heavy, and only a run needs it

    source = _playbook_source()
    options = [flag for flag, wanted in (("--check", check), ("--diff", diff)) if wanted]
    kwargs: dict[str, Any] = {}
    # The repository's ansible.cfg applies from its project_dir (collections and roles paths); an installed
    # collection's playbooks run from an empty project folder with the user's own configuration.
    kwargs["project_dir"] = source.project_dir or os.path.join(work, "project")
    os.makedirs(kwargs["project_dir"], exist_ok=True)
    extra_vars = _with_private_reports(operation, work, extra_vars)
    if extra_vars:
        _write_extra_vars(work, extra_vars)
    env = _runner_env(collector.results_dir, ansible_tmp)
    playbook_bin = shutil.which("ansible-playbook", path=env["PATH"])
    if playbook_bin:
        from nodetune._supervise import write_launcher

        kwargs["binary"] = write_launcher(work, os.getpid(), playbook_bin, source.playbook(operation))
    try:
        with _cancel_on_signals(work) as cancelled:
            runner = ansible_runner.run(
                private_data_dir=work, playbook=source.playbook(operation), inventory=inventory_path, limit=limit,
                forks=forks, tags=",".join(tags) if tags else None,
                skip_tags=",".join(skip_tags) if skip_tags else None, cmdline=" ".join(options) or None,
                envvars=env, quiet=True, fact_cache_type="memory", suppress_output_file=not keep_artifacts,
                settings={"pexpect_timeout": 1}, cancel_callback=lambda: _cancelled(work, cancelled),
                event_handler=lambda event: collector.handle(event, keep_artifacts), **kwargs)
    except Exception as exc:  # runner's own configuration errors (not the playbook's)
        raise PlaybookError(f"nodetune {operation}: ansible-runner could not start the playbook: {exc}") from exc
    if cancelled:
        collector.cancelled = int(cancelled[0])
    return int(runner.rc) if runner.rc is not None else 1


@contextmanager
def _cancel_on_signals(work: str) -> Iterator[list[float]]:
    """SIGINT and SIGTERM during the run cancel it: the run's supervisor (nodetune._supervise) stops the playbook's
    whole process tree. The list holds the signal received and when. Only in the main thread, where Python
    delivers signals."""
    import signal
    import threading

    from nodetune._supervise import cancel

    received: list[float] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def on_signal(signum: int, frame: Any) -> None:
        del frame
        if not received:
            received.extend((signum, time.monotonic()))
            cancel(work)

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _cancelled(work: str, received: list[float]) -> bool:
    """runner's cancel callback: once the supervisor has stopped the tree (or after 10 s), runner kills what is
    left of the playbook's process group."""
    from nodetune._supervise import running

    if not received:
        return False
    return not running(work) or time.monotonic() - received[1] > 10


def _scrub_environment_copies(work: str) -> None:
    """ansible-runner saves the calling process's whole environment in artifacts/<id>/command: keep only the
    variable names, so that kept artifacts hold no secrets."""
    for command in Path(work, "artifacts").glob("*/command"):
        try:
            data = json.loads(command.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("env"), dict):
            data["env"] = sorted(data["env"])
            command.write_text(json.dumps(data))


# --------------------------------------------------------------------------------------------- events
class _Collector:
    """Turns runner events into NodeResults and TaskEvents as they arrive, and the nodetune modules' results into
    the NodeResults' content from the callback's files once the run is over."""

    def __init__(self, operation: Operation, progress: ProgressCallback | None, results_dir: str) -> None:
        self.operation = operation
        self.progress = progress
        self.results_dir = results_dir
        self.nodes: dict[str, NodeResult] = {}
        self.output: list[str] = []
        self.cancelled: int | None = None
        #: per host, the nodetune module calls the events reported (action, task), in order
        self.expected: dict[str, list[tuple[str, str]]] = {}

    def handle(self, event: Mapping[str, Any], keep: bool) -> bool:
        text = event.get("stdout")
        if text:
            self.output.append(str(text))
        kind = str(event.get("event", ""))
        data = event.get("event_data") or {}
        host = data.get("host")
        if not host or not kind.startswith("runner_"):
            return keep
        node = self.nodes.setdefault(str(host), NodeResult(host=str(host)))
        res = data.get("res") or {}
        task = str(data.get("task") or "")
        action = data.get("resolved_action") or data.get("task_action")
        ignored = bool(data.get("ignore_errors"))
        status: EventStatus | None = None
        message = None
        if kind == "runner_on_start":
            status = "started"
        elif kind in ("runner_on_ok", "runner_item_on_ok"):
            status = "changed" if res.get("changed") else "ok"
            if kind == "runner_on_ok":
                self._absorb_event(node, str(action or ""), task, res)
        elif kind == "runner_on_skipped":
            status = "skipped"
        elif kind in ("runner_on_failed", "runner_item_on_failed"):
            status, message = "failed", _failure_message(res)
            if not ignored and kind == "runner_on_failed" and node.status != "unreachable":
                node.status, node.message, node.failed_task = "failed", message, task
                self._absorb_event(node, str(action or ""), task, res)
        elif kind == "runner_on_unreachable":
            status, message = "unreachable", _failure_message(res)
            node.status, node.message, node.failed_task = "unreachable", message, task
        if status is not None and self.progress is not None:
            self.progress(TaskEvent(host=str(host), task=task, status=status, action=action, message=message,
                                    ignored=ignored and status == "failed"))
        return keep

    def _absorb_event(self, node: NodeResult, action: str, task: str, res: Mapping[str, Any]) -> None:
        if action in _RECORDED or _short_action(action) in _RECORDED:
            # read from the callback's file after the run: the event's copy may be runner's truncated {}
            self.expected.setdefault(node.host, []).append((_short_action(action), task))
        else:
            node.warnings.extend(str(w) for w in res.get("warnings") or [])

    def _absorb_files(self) -> None:
        """Each recorded module call's result from its file; a node whose result is missing or unreadable is
        failed with the reason (its verdict cannot be known). The fleet report's learned findings go to the nodes
        it names once every node's own result is in."""
        fleet: list[Mapping[str, Any]] = []
        for host, calls in self.expected.items():
            node = self.nodes[host]
            records = _read_records(self.results_dir, host)
            for action, task in calls:
                record = records.get(action)
                problem = record if isinstance(record, str) else None
                if record is None:
                    problem = "no result file was written for it"
                if problem is None and action == _FLEET:
                    assert isinstance(record, dict)
                    fleet.append(record["result"])
                elif problem is None:
                    assert isinstance(record, dict)
                    problem = _absorb(node, action, record["result"])
                if problem is not None and node.status == "failed" and node.message:
                    continue  # the task failed and said why: a missing result adds nothing but noise
                if problem is not None and node.status != "unreachable":
                    reason = (f"nodetune could not read the result of task {task!r} ({problem}); the node is not "
                              "judged (run again with keep_artifacts=True to inspect the run)")
                    node.message = reason if node.status != "failed" else f"{node.message}; {reason}"
                    node.status, node.failed_task = "failed", node.failed_task or task
        for res in fleet:
            _absorb_learned(self.nodes, res)

    def result(self, rc: int, check: bool) -> RunResult:
        self._absorb_files()
        killed = _killed_by(rc)  # the playbook itself killed (kill -9): its nodes' unfinished calls have no result
        if self.cancelled is not None or killed:
            why = "stopped by the cancel" if self.cancelled is not None else f"ansible-playbook was killed ({killed})"
            for node in self.nodes.values():
                if node.host not in self.expected and node.status not in ("failed", "unreachable"):
                    node.status, node.message = "failed", (f"{why} before its result: what it wrote is in its "
                                                           "journal ('nodetune revert' restores it)")
        for node in self.nodes.values():
            if node.status in ("failed", "unreachable"):
                continue
            if self.operation == "verify" and node._count("drift"):
                node.status = "drift"
            elif self.operation == "verify" and node._count("pending"):
                node.status = "pending"
            elif node.changed and self.operation in ("apply", "revert"):
                node.status = "changed"
        text = "\n".join(self.output)
        unmatched = sorted(set(_UNMATCHED.findall(text)))
        errors = []
        if rc != 0 and not any(n.failed for n in self.nodes.values()):
            errors = [line.strip() for line in text.splitlines() if re.match(r"\s*(\[ERROR\]|ERROR!)", line)]
            if not errors:
                errors = [line for line in text.splitlines() if line.strip()][-5:]
        return RunResult(operation=self.operation, nodes=dict(sorted(self.nodes.items())), rc=rc, check=check,
                         unmatched=unmatched, errors=errors)


def _killed_by(rc: int) -> str | None:
    """The signal's name when the supervisor reports the playbook killed by one (exit code 128 + N)."""
    import signal

    try:
        return signal.Signals(rc - 128).name if 128 < rc < 128 + 65 else None
    except ValueError:
        return None


def _short_action(action: str) -> str:
    """``ansible.legacy.x``/``x`` forms of a nodetune action name its collection's FQCN."""
    name = action.rsplit(".", 1)[-1]
    full = COLLECTION + "." + name
    return full if full in _RECORDED else action


def _read_records(results_dir: str, host: str) -> dict[str, dict[str, Any] | str]:
    """The host's last recorded result per action (not the ignored failures), or why it could not be read."""
    from nodetune.callback_plugins.nodetune_results import host_folder

    out: dict[str, dict[str, Any] | str] = {}
    folder = Path(host_folder(results_dir, host))
    for path in sorted(folder.glob("[0-9]*.json")) if folder.is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            # which action it held is unknown: every action of the host is then unreadable, none is guessed
            return {action: f"{path.name} is not readable JSON: {exc}" for action in _RECORDED}
        if not isinstance(record, dict) or not isinstance(record.get("result"), dict):
            return {action: f"{path.name} holds no result" for action in _RECORDED}
        if record.get("status") != "ignored":
            out[_short_action(str(record.get("action") or ""))] = record
    return out


def _absorb(node: NodeResult, action: str, res: Mapping[str, Any]) -> str | None:
    """Take what the nodetune modules return into the node's result; returns why it cannot, or None."""
    from ansible_collections.nodetune.instinct.plugins.plugin_utils.bounded_result import restored

    node.warnings.extend(str(w) for w in res.get("warnings") or [])
    if action == _TOPOLOGY:
        facts = res.get("ansible_facts") or {}
        node.topology = facts.get("nodetune_topology")
    elif action == _TUNE:
        res = restored(res)  # a bounded result: its changes are in the run's spill file (the findings stay there)
        node.settings = [SettingChange.from_action(a) for a in res.get("actions") or []]
        node.changed = node.changed or bool(res.get("changed"))
        node.reboot_required = bool(res.get("reboot_required"))
        node.restored = [str(r) for r in res.get("restored") or []]
        node.gone = [str(g) for g in res.get("gone") or []]
        node.notes.extend(node.gone)  # the plain table's message column shows notes
        node.unconfirmed = list(res.get("unconfirmed") or [])
        node.notes.extend(str(n) for n in res.get("notes") or [])
        if isinstance(res.get("diff"), Mapping):
            node.diff = {k: str(v) for k, v in res["diff"].items() if k in ("before", "after")}
        if isinstance(res.get("layout"), Mapping):
            node.layout = dict(res["layout"])
        if isinstance(res.get("verify"), Mapping):
            return _absorb_audit(node, res["verify"])
    elif action == _VERIFY:
        if res.get("failed") and not res.get("failed_on_drift") and "findings" not in res:
            return None  # the module failed before its audit: the event's failure message says why
        return _absorb_audit(node, res)
    return None


def _absorb_learned(nodes: Mapping[str, NodeResult], res: Mapping[str, Any]) -> None:
    """The fleet report's ``learned_findings``: a node that differs from its group's majority where nothing is
    declared gets the ``inventory.<key>`` drift finding in its findings, report and summary (docs/verify.md)."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.audit.outliers import with_learned

    learned = res.get("learned_findings")
    for host, findings in (learned.items() if isinstance(learned, Mapping) else ()):
        node = nodes.get(str(host))
        if node is None or node.failed or not isinstance(findings, list):
            continue
        dicts = [dict(f) for f in findings if isinstance(f, Mapping)]
        report = node.report
        merged = with_learned(report if report is not None else {
            "findings": [f.as_dict() for f in node.findings], "summary": node.summary or {}}, dicts)
        node.summary = merged["summary"]
        if report is not None:
            node.report = merged  # its findings with it: one copy
        else:
            node.findings = [Finding.from_dict(f) for f in merged["findings"]]


def _absorb_audit(node: NodeResult, res: Mapping[str, Any]) -> str | None:
    """A verify result into the node: bounded (``findings_file``), its findings and report stay in the report file
    until asked for; else decoded from the transport (module_utils/audit/transport.py), kept once."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.audit import transport

    node.summary = res.get("summary")
    node.notes.extend(str(n) for n in res.get("notes") or [])
    if res.get("findings_file") and transport.FINDINGS not in res:
        path = str(res["findings_file"])
        if not os.path.isfile(path):
            return f"its report file {path} is gone"
        node.report_file = path
        node.__dict__["_unread"] = True
        if isinstance(node.summary, Mapping) and "drift_ids_total" in node.summary:
            node.summary = (node.report or {}).get("summary")  # more drifting ids than a bounded result names
        return None
    try:
        findings = transport.decode(res.get(transport.FINDINGS))
    except transport.TransportError:
        return "its findings are not valid JSON"
    if findings is None:
        return "it holds no list of findings"
    report = res.get(transport.REPORT)
    if isinstance(report, Mapping):
        node.report = transport.report_with(report, findings)
    else:
        node.findings = [Finding.from_dict(f) for f in findings if isinstance(f, Mapping)]
    return None


def _failure_message(res: Mapping[str, Any]) -> str:
    message = str(res.get("msg") or "").strip()
    errors = res.get("errors")
    if isinstance(errors, list) and errors and not message:
        message = "; ".join(str(e) for e in errors)
    return message or "failed without a message (see the run's artifacts: keep_artifacts=True)"


def _raise_cancelled(result: RunResult, signum: int) -> None:
    """Always raised (whatever raise_on_failure): a cancelled run has no verdict, only what was done."""
    import signal

    done = [n.host for n in result.nodes.values() if n.status in ("ok", "changed", "drift")]
    name = signal.Signals(signum).name
    raise CancelledError(f"nodetune {result.operation}: cancelled by {name}; the run was stopped"
                         + (f" (finished on: {', '.join(done)})" if done else ""), result, signum)


def _raise_for(result: RunResult, limit: str | None, raise_on_failure: bool) -> None:
    """Errors that mean nothing ran always raise; node failures raise unless raise_on_failure is False."""
    if not result.nodes and result.rc != 0:
        if any("no hosts" in e for e in result.errors) or result.unmatched:
            where = f"limit {limit!r}" if limit else "the inventory"
            names = ", ".join(result.unmatched) or limit or "-"
            raise HostNotFoundError(f"{where} matches no host of the inventory (not found: {names})",
                                    result.unmatched)
        raise PlaybookError(f"nodetune {result.operation} failed before reaching any node: "
                            + ("; ".join(result.errors) or f"ansible-playbook exited with {result.rc}"), result)
    if not raise_on_failure:
        return
    lines = [f"{n.host}: {n.message}" for n in result.unreachable + result.failed]
    if result.unreachable:
        raise UnreachableError(f"nodetune {result.operation}: {len(result.unreachable)} node(s) unreachable"
                               + (f", {len(result.failed)} failed" if result.failed else "") + ": "
                               + "; ".join(lines), result)
    if result.failed:
        raise NodeFailedError(f"nodetune {result.operation}: {len(result.failed)} node(s) failed: "
                              + "; ".join(lines), result)
    if result.rc != 0 or result.errors:
        raise PlaybookError(f"nodetune {result.operation}: the playbook failed (rc {result.rc}): "
                            + ("; ".join(result.errors) or "no error message"), result)


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _host_name_for(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.\-]", "-", name).strip("-.")
    return cleaned or "node"
