# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The apply engine: diff, journal, all-or-nothing writes, revert.

Modelled on linux-system-roles' habit of recording each write as an action that only runs outside check mode:
:func:`plan_actions` is pure reading, so check mode shows the exact plan for free; :func:`apply` executes that same
plan. Before the first write the previous value of everything about to change is put in the journal
(``var/lib/nodetune/journal.json`` under the root, mode 0600). The first value ever seen for a path is the
*baseline* and survives later runs, so revert always returns a node to what it was before nodetune touched it.
If a write fails, what this run already changed is restored in reverse order before the error is raised.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.plan import bootloader
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.sysctl_boot import (
    KERNEL_PAIRS,
    pair_problem,
    pair_restore,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import (
    TEMP_PREFIX,
    NodeFileError,
    Root,
    sha256_text,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import _classify as classify_os_error
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.services import format_state, parse_state
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import rules
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import parse_choice
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.journal import (
    JOURNAL,
    STATE_DIR,
    JournalError,
    journal_problems,
    load_journal,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import (
    ABSENT,
    ATTR,
    BOOT,
    CHOICE,
    COMMITS,
    FILE,
    LINE,
    SERVICE,
    Setting,
    SettingError,
    attr_writes,
    check_shape,
    desired,
    in_dependency_order,
    key_of,
    normalize,
    read_current,
    set_line,
)

LEGACY_LOCK = STATE_DIR + "/lock"  # the lock file of earlier versions: revert removes it
MAX_RUNS_KEPT = 20


class ApplyError(Exception):
    """A write failed; ``setting`` names it and ``rolled_back`` lists what was restored. ``gone``: revert's entries
    whose object (device, CPU, IRQ, interface) no longer exists, dropped from the journal."""

    def __init__(self, message: str, setting: Optional[Setting] = None,
                 rolled_back: Optional[List[str]] = None, rollback_errors: Optional[List[str]] = None,
                 gone: Optional[List[str]] = None) -> None:
        super().__init__(message)
        self.setting = setting
        self.rolled_back = rolled_back or []
        self.rollback_errors = rollback_errors or []
        self.gone = gone or []


class LockedError(Exception):
    """Another nodetune run holds the node's lock."""


class Action(object):
    """One planned change: a Setting whose current value differs from its desired value."""

    __slots__ = ("setting", "before", "after")

    def __init__(self, setting: Setting, before: Optional[str], after: str) -> None:
        self.setting = setting
        self.before = before
        self.after = after

    def to_dict(self) -> Dict[str, Any]:
        s = self.setting
        return {
            "id": s.id,
            "target": s.target,
            "path": "/" + s.path if s.kind != SERVICE else None,
            "kind": s.kind,
            "before": self.before,
            "after": self.after,
            "reboot_required": s.reboot_required,
            "disruptive": s.disruptive,
            "reason": s.reason,
        }


# --------------------------------------------------------------------------------------------- planning
def plan_actions(root: Root, settings: List[Setting], services: Any = None,
                 readings: Optional[Dict[int, Optional[str]]] = None) -> List[Action]:
    """The ordered list of changes that would bring the node to ``settings`` (reads only). ``readings`` receives
    each Setting's current value (by ``id``), for an audit of the same Settings while nothing is written."""
    check_shape(settings)
    missing = []
    current = []
    for setting in settings:
        before = read_current(root, setting, services)
        if readings is not None:
            readings[id(setting)] = before
        # A value read proves the file exists: only an attribute that gave none costs a second look.
        if setting.kind == ATTR and before is None:
            missing.append(_unknown_original(root, setting))
        if setting.kind == SERVICE and services is None:
            missing.append("%s: no service manager available for this root" % setting.uid)
        if setting.kind == BOOT and before is None:
            missing.append("%s: the node's boot loader is not %s any more, or has no boot entry"
                           % (setting.uid, setting.key))
        elif setting.kind == BOOT and bootloader.runner(root, services) is None:
            missing.append("%s: nodetune runs boot loader tools only on the node itself (root /) or on a simulated "
                           "lab node, not on %s" % (setting.uid, root.path))
        if setting.kind in (FILE, LINE, ABSENT):
            # Refused before any write, so that nothing is half-applied; write_file checks again at the write.
            try:
                root.refuse_links(setting.path, "removing" if setting.kind == ABSENT else "writing")
            except NodeFileError as exc:
                missing.append("%s: %s" % (setting.uid, exc))
        current.append(before)
    if missing:
        raise SettingError(missing)
    actions = []
    before_of = dict((id(s), before) for s, before in zip(settings, current))
    in_order = in_dependency_order(sorted(settings, key=lambda s: (s.order, s.id, s.target)))
    written = set()
    for setting in in_order:
        before = before_of[id(setting)]
        after = desired(setting)
        # A command attribute (setting.COMMITS) is committed again when what its ``after`` names is written in this
        # run, whatever it reads: amdgpu enters performance determinism at a clock only on a commit of
        # pp_od_clk_voltage, not when power_dpm_force_performance_level changes (smu_v13_0_6_set_performance_level)
        if setting.kind == BOOT and before != after:
            # shown as every boot entry's arguments now and once the tool ran (the verdict compares the requirement)
            actions.append(Action(setting, bootloader.shown(root, setting.key or ""),
                                  bootloader.predicted(root, setting.key or "", setting.value) or after))
            written.add(key_of(setting))
        elif before != after or (setting.compare in COMMITS and written.intersection(setting.after)):
            actions.append(Action(setting, before, after))
            written.add(key_of(setting))
    return actions


def _unknown_original(root: Root, setting: Setting) -> str:
    """Why an attribute that gave no value cannot be set: absent, or present but unreadable. Nothing is written
    without its original: revert could not put it back."""
    where = "/" + setting.path
    if not root.exists(setting.path):
        return "%s: %s does not exist on this node, so it cannot be set" % (setting.uid, where)
    try:
        root.read_strict(setting.path)
        why = "it holds no value nodetune can restore"
    except NodeFileError as exc:
        why = str(exc)
    return ("%s: %s exists but its current value cannot be read (%s); nodetune writes nothing whose original it "
            "cannot keep for revert" % (setting.uid, where, why))


def diff_text(actions: List[Action]) -> Dict[str, str]:
    """Ansible diff dict (before/after as text) describing the actions, one line per Setting."""
    before_lines, after_lines = [], []
    for action in actions:
        s = action.setting
        if s.kind == FILE:
            before_lines.append("# %s %s\n%s" % (s.uid, "/" + s.path, action.before or "<absent>\n"))
            after_lines.append("# %s %s\n%s" % (s.uid, "/" + s.path, action.after))
        else:
            where = s.target if s.kind == SERVICE else "/" + s.path
            before_lines.append("%s %s = %s\n" % (s.uid, where, "<absent>" if action.before is None else action.before))
            after_lines.append("%s %s = %s\n" % (s.uid, where, action.after))
    return {"before": "".join(before_lines), "after": "".join(after_lines),
            "before_header": "node (current)", "after_header": "node (nodetune)"}


# --------------------------------------------------------------------------------------------- journal
def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# Boot-independent facts that tell one node from another: a journal copied from node A must not put A's originals
# on node B. The host name is only shown (a renamed host is the same node).
IDENTITY_FACTS = (("machine_id", "etc/machine-id"), ("product_uuid", "sys/class/dmi/id/product_uuid"),
                  ("product_serial", "sys/class/dmi/id/product_serial"))


def node_identity(root: Root) -> Dict[str, Optional[str]]:
    """This node's identity facts (None where absent or unreadable) and its host name."""
    facts = {}
    for name, path in IDENTITY_FACTS:
        value = root.read(path)
        facts[name] = value if value and value != "uninitialized" else None
    facts["hostname"] = root.read("proc/sys/kernel/hostname") or root.read("etc/hostname")
    return facts


def load_own_journal(root: Root) -> Dict[str, Any]:
    """:func:`load_journal`, refused (JournalError, kept) where it was taken on another node. A journal of an
    earlier version has no identity: accepted, and apply records this node's when it next saves it."""
    journal = load_journal(root)
    recorded = journal.get("identity") or {}
    here = node_identity(root)
    known = [name for name, _path in IDENTITY_FACTS if recorded.get(name) and here.get(name)]
    differ = [name for name in known if recorded[name] != here[name]]
    unknown_here = not known and any(recorded.get(name) for name, _path in IDENTITY_FACTS)
    if differ or unknown_here:
        raise JournalError(["the journal %s was taken on another node (%s), not on this one (%s); refusing to put "
                            "another node's originals here, nothing was written or deleted (move it aside to go on)"
                            % ("/" + JOURNAL, _describe(recorded), _describe(here))])
    return journal


def _describe(identity: Dict[str, Any]) -> str:
    facts = ["%s %s" % (name, identity[name]) for name, _path in IDENTITY_FACTS if identity.get(name)]
    host = "host name %s" % (identity.get("hostname") or "unknown")
    return ", ".join(facts + [host]) if facts else "no identity facts, " + host


def save_journal(root: Root, journal: Dict[str, Any]) -> None:
    root.write_file(JOURNAL, json.dumps(journal, indent=1, sort_keys=True) + "\n", mode=0o600)


def _baseline_key(setting: Setting) -> str:
    if setting.kind == SERVICE:
        return "service:" + setting.target
    return setting.path


def _snapshot(root: Root, setting: Setting, services: Any) -> Dict[str, Any]:
    """What is needed to put ``setting``'s object back exactly as it is now."""
    if setting.kind == SERVICE:
        return {"kind": SERVICE, "unit": setting.target, "state": format_state(services.state(setting.target)),
                "order": setting.order}
    if setting.kind == BOOT:
        return dict(bootloader.snapshot(root, setting.key or ""), order=setting.order)
    if setting.kind == ATTR:
        raw = root.read(setting.path)
        restore = raw
        if raw is not None and setting.compare == CHOICE:
            restore = parse_choice(raw)[0]
        if raw is not None and setting.compare in COMMITS:
            restore = normalize(setting, raw)  # pp_od_clk_voltage: the command that sets what its table reads
        if restore is None:  # unreadable since the plan (EIO, EACCES): refused before any write of this run
            raise SettingError([_unknown_original(root, setting)])
        snap = {"kind": ATTR, "restore": restore, "order": setting.order}
        if setting.compare in COMMITS:
            snap["compare"] = setting.compare
        return snap
    # FILE, LINE, ABSENT: whole-file snapshots
    content = root.read(setting.path, strip=False)
    return {"kind": FILE, "exists": content is not None, "content": content,
            "mode": "%04o" % (root.mode(setting.path) or 0o644), "order": setting.order}


def _snapshot_partner(root: Root, setting: Setting) -> Optional[Tuple[str, Dict[str, Any]]]:
    """The other form of an exclusive pair (sysctl_boot.KERNEL_PAIRS) that writing ``setting`` changes: its path and
    snapshot, journaled with it so that revert can put the pair back (None for any other Setting)."""
    partner = KERNEL_PAIRS.get(setting.path) if setting.kind == ATTR else None
    value = root.read(partner) if partner else None
    if partner is None or value is None:
        return None
    return partner, {"kind": ATTR, "restore": value, "order": setting.order}


def _missing_dirs(root: Root, rel_dir: str) -> List[str]:
    """Directories (relative) that writing into ``rel_dir`` would create, shallowest first."""
    created = []
    parts = [p for p in rel_dir.split("/") if p]
    for depth in range(1, len(parts) + 1):
        sub = "/".join(parts[:depth])
        if not root.isdir(sub):
            created.append(sub)
    return created


# --------------------------------------------------------------------------------------------- lock
class NodeLock(object):
    """flock on the root directory itself: serialises concurrent nodetune runs on one node.

    The root directory always exists and is never removed, so the lock is never unlinked while held (a lock file
    that revert deleted let a third run in beside the holder), creates nothing (no empty state dir after a
    kill -9) and is the same inode whichever path or link names the root.
    """

    def __init__(self, root: Root, timeout: float = 30.0) -> None:
        self.root = root
        self.timeout = max(0.0, float(timeout))
        self.fd: Optional[int] = None

    def __enter__(self) -> "NodeLock":
        try:
            self.fd = os.open(self.root.path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError as exc:
            raise classify_os_error(exc, "/", "opening the root to lock it") from None
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() >= deadline:
                    os.close(self.fd)
                    self.fd = None
                    raise LockedError("another nodetune run holds the lock on %s (waited %g s, lock_timeout)"
                                      % (self.root.path, self.timeout)) from exc
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def __exit__(self, *exc: Any) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


# --------------------------------------------------------------------------------------------- leftovers
def _sweep_temp_files(root: Root, dirs: List[str]) -> List[str]:
    """Remove nodetune's own temporary files left in ``dirs`` by an interrupted run; returns what went."""
    removed = []
    for rel in sorted(set(dirs)):
        if not root.isdir(rel):
            continue
        for name in root.listdir(rel):
            path = rel + "/" + name if rel else name
            if name.startswith(TEMP_PREFIX) and os.path.isfile(root.real(path)) \
                    and not os.path.islink(os.path.join(root.real(rel), name)):
                with contextlib.suppress(NodeFileError):
                    if root.remove(path):
                        removed.append(path)
    return removed


def _file_dirs(baseline: Dict[str, Dict[str, Any]], settings: Optional[List[Setting]] = None) -> List[str]:
    """The directories nodetune writes whole files into (kernel attributes are written in place: no temp files)."""
    keys = [key for key, snap in baseline.items() if snap.get("kind") == FILE]
    keys += [s.path for s in settings or [] if s.kind in (FILE, LINE, ABSENT)]
    return [os.path.dirname(key) for key in keys] + [STATE_DIR]


# --------------------------------------------------------------------------------------------- writing
def _write(root: Root, setting: Setting, services: Any) -> Optional[str]:
    """Write one Setting; returns the text of the whole file it wrote (None for anything else)."""
    if setting.kind == ATTR:
        for text in attr_writes(setting.compare, setting.value):
            root.write(setting.path, text)
    elif setting.kind == FILE:
        root.write_file(setting.path, setting.value, mode=setting.mode)
        return setting.value
    elif setting.kind == LINE:
        text = set_line(root.read(setting.path, strip=False), setting.key or "", setting.value)
        root.write_file(setting.path, text, mode=root.mode(setting.path) or setting.mode)
        return text
    elif setting.kind == ABSENT:
        root.remove(setting.path)
    elif setting.kind == SERVICE:
        services.set_state(setting.target, parse_state(setting.value))
    elif setting.kind == BOOT:
        bootloader.write(root, setting.key or "", setting.value, bootloader.runner(root, services))
    return None


def _note_written(baseline: Dict[str, Dict[str, Any]], key: str, text: Optional[str]) -> None:
    """Remember what nodetune wrote to a file it created: revert deletes the file only while it still holds that."""
    snap = baseline.get(key)
    if snap is None or snap.get("kind") != FILE or snap.get("exists") is not False:
        return
    if text is None:
        snap.pop("sha256", None)  # removed (ABSENT): nothing of nodetune's left there
    else:
        snap["sha256"] = sha256_text(text)


def _restore(root: Root, key: str, snap: Dict[str, Any], services: Any,
             snaps: Optional[Dict[str, Dict[str, Any]]] = None) -> None:
    """Put ``key`` back as ``snap`` has it; ``snaps``: the snapshots it was taken with (the baseline, or a run's
    before_run), where the other form of an exclusive pair is found."""
    kind = snap["kind"]
    if kind == SERVICE:
        if snap.get("state") is not None:
            services.set_state(snap["unit"], parse_state(snap["state"]))
    elif kind == BOOT:
        if not bootloader.is_restored(root, snap):
            bootloader.restore(root, snap, bootloader.runner(root, services))
    elif kind == ATTR and key in KERNEL_PAIRS:
        _restore_pair(root, key, snaps if snaps is not None else {key: snap})
    elif kind == ATTR:
        if snap.get("restore") is not None and _attr_state(root, key, snap) != normalize_raw(snap["restore"]):
            for text in attr_writes(snap.get("compare") or "", snap["restore"]):
                root.write(key, text)
    else:
        if snap.get("exists"):
            if root.read(key, strip=False) != snap["content"] or root.mode(key) != int(snap["mode"], 8):
                root.write_file(key, snap["content"], mode=int(snap["mode"], 8))
        else:
            # Only the regular file nodetune wrote (a journal of an earlier version has no digest: any regular file);
            # a link, another kind of file or edited content raises, and the caller reports it.
            root.remove(key, sha256=snap.get("sha256"))


def _restore_pair(root: Root, key: str, snaps: Dict[str, Dict[str, Any]]) -> None:
    """Both forms of ``key``'s exclusive pair as they were, by writing the form that was in use: the kernel zeroes
    the other, and refuses a bytes form's 0 (EINVAL), so writing each snapshot back in turn cannot work. Raises
    NodeFileError where the pair still differs (a journal of an earlier version without the other form)."""
    values = dict((path, (snaps.get(path) or {}).get("restore")) for path in (key, KERNEL_PAIRS[key]))

    def differs() -> bool:
        return any(value is not None and normalize_raw(root.read(path)) != normalize_raw(value)
                   for path, value in values.items())

    if differs():
        # written even where that form already reads as wanted: the write is what zeroes the other form
        for path, value in pair_restore(values):
            root.write(path, value)
    if differs():
        raise NodeFileError(pair_problem(values, dict((path, normalize_raw(root.read(path))) for path in values)),
                            key)


def _attr_state(root: Root, key: str, snap: Dict[str, Any]) -> Optional[str]:
    """A journaled kernel attribute's current value in its snapshot's form: a command attribute's (pp_od_clk_voltage)
    as the command that sets what it reads back, any other as normalize_raw has it."""
    compare = snap.get("compare")
    if compare in COMMITS:
        return rules.normalize(compare, root.read(key))
    return normalize_raw(root.read(key))


def normalize_raw(text: Optional[str]) -> Optional[str]:
    if text is None:
        return None
    active, options = parse_choice(text)
    if len(options) > 1 and active is not None:
        return active
    return text.strip()


def apply(root: Root, settings: List[Setting], check_mode: bool = False, services: Any = None,
          fault: Optional[Callable[[Setting], None]] = None, lock_timeout: float = 30.0,
          lock_held: bool = False, readings: Optional[Dict[int, Optional[str]]] = None) -> Dict[str, Any]:
    """Bring the node to ``settings``. Returns changed, actions, diff, reboot_required.

    The node's lock is held from the re-read of the node and the journal to the last journal update.
    ``lock_held``: the caller holds it already (the tune module takes it before discovery, so that the Settings
    are computed from a node no other run is changing); a second flock would wait for the first.
    ``fault`` is a test hook called before each write (fault injection); production passes None.
    ``readings`` receives the values read before any write (:func:`plan_actions`).
    """
    actions = plan_actions(root, settings, services, readings)
    load_own_journal(root)  # a journal nodetune cannot trust is refused in check mode and on a tuned node too
    result = {
        "changed": bool(actions),
        "actions": [a.to_dict() for a in actions],
        "diff": diff_text(actions),
        "reboot_required": any(a.setting.reboot_required for a in actions),
        "journal": "/" + JOURNAL,
    }
    if check_mode or not actions:
        return result
    with contextlib.nullcontext() if lock_held else NodeLock(root, lock_timeout):
        if not lock_held:  # re-plan under the lock: another run may have changed the node since the plan above
            actions = plan_actions(root, settings, services)
        journal_before = root.read(JOURNAL, strip=False)
        journal = load_own_journal(root)
        journal.setdefault("identity", node_identity(root))  # new, or of an earlier version: this node's from now on
        _sweep_temp_files(root, _file_dirs(journal["baseline"], settings))
        if journal.get("created") is None:
            journal["created"] = _now()
            # The state dir is nodetune's even where an interrupted run left it behind (empty): revert removes it
            # when empty, with the parents this run creates.
            state_dirs = sorted(set(_missing_dirs(root, STATE_DIR)) | {STATE_DIR})
            journal["created_dirs"] = sorted(set(journal.get("created_dirs", [])) | set(state_dirs))
        baseline = journal["baseline"]
        before_run: Dict[str, Dict[str, Any]] = {}
        new_dirs: List[str] = []
        for action in actions:
            setting = action.setting
            key = _baseline_key(setting)
            snap = _snapshot(root, setting, services)
            before_run[key] = snap
            if key not in baseline:
                baseline[key] = snap
            partner = _snapshot_partner(root, setting)
            if partner is not None:
                before_run.setdefault(*partner)
                baseline.setdefault(*partner)
            if setting.kind in (FILE, LINE):
                new_dirs.extend(d for d in _missing_dirs(root, os.path.dirname(setting.path)) if d not in new_dirs)
        journal["created_dirs"] = sorted(set(journal.get("created_dirs", [])) | set(new_dirs))
        if not actions:
            return _replanned(result, actions)
        done: List[Action] = []
        _save_or_roll_back(root, journal, done, before_run, services, journal_before)  # before the first write
        for action in actions:
            _write_or_roll_back(root, action, done, before_run, services, fault, journal_before, journal)
            done.append(action)
        _note_unchanged_files(root, settings, baseline)
        checked = unconfirmed(root, [a.setting for a in done], services)
        for action in _at_effective(root, settings, done, checked, services):
            key = _baseline_key(action.setting)
            if key not in before_run:  # not written earlier in this run: its baseline goes to disk first
                before_run[key] = _snapshot(root, action.setting, services)
                baseline.setdefault(key, before_run[key])
                _save_or_roll_back(root, journal, done, before_run, services, journal_before)
            _write_or_roll_back(root, action, done, before_run, services, fault, journal_before, journal)
            done = [a for a in done if a.setting.uid != action.setting.uid] + [action]
        _remember_effective(journal, done, checked)
        journal["runs"] = (journal.get("runs", []) + [{
            "time": _now(), "changed": [a.setting.uid for a in done]}])[-MAX_RUNS_KEPT:]
        _save_or_roll_back(root, journal, done, before_run, services, journal_before)
    result["actions"] = [a.to_dict() for a in done]
    result["diff"] = diff_text(done)
    result["unconfirmed"] = checked
    return result


def _write_or_roll_back(root: Root, action: Action, done: List[Action], before_run: Dict[str, Dict[str, Any]],
                        services: Any, fault: Optional[Callable[[Setting], None]], journal_before: Optional[str],
                        journal: Dict[str, Any]) -> None:
    """Write one action; on failure put back this run's earlier writes and raise ApplyError saying so."""
    try:
        if fault is not None:
            fault(action.setting)
        written = _write(root, action.setting, services)
        if action.setting.kind in (FILE, LINE, ABSENT):
            for snaps in (journal["baseline"], before_run):  # revert's and this run's rollback's view of the file
                _note_written(snaps, action.setting.path, written)
    except (NodeFileError, OSError) as exc:
        rolled, problems = _rollback(root, done, before_run, services)
        if not problems:
            _forget_run(root, journal_before, journal)
        raise ApplyError("%s: writing %r to %s failed: %s. Restored %d earlier change(s) of this run%s."
                         % (action.setting.uid, action.setting.value if action.setting.kind != FILE
                            else "<file>", action.setting.target if action.setting.kind == SERVICE
                            else "/" + action.setting.path, exc, len(rolled),
                            "" if not problems else "; could NOT restore: " + "; ".join(problems)),
                         action.setting, rolled, problems) from exc


def _save_or_roll_back(root: Root, journal: Dict[str, Any], done: List[Action], before_run: Dict[str, Dict[str, Any]],
                       services: Any, journal_before: Optional[str]) -> None:
    """Save the journal; where that fails (a full or read-only file system), put back this run's writes and raise
    ApplyError saying so: a change the journal on disk does not fully describe is not left behind."""
    try:
        save_journal(root, journal)
    except (NodeFileError, OSError) as exc:
        error = exc if isinstance(exc, NodeFileError) else classify_os_error(exc, JOURNAL, "writing")
        rolled, problems = _rollback(root, done, before_run, services)
        if not problems:
            # (a journal that cannot be put back is the one saved before the first write: it holds this run's
            # originals too, which are the node's values again)
            with contextlib.suppress(NodeFileError, OSError):
                _forget_run(root, journal_before, journal)
        raise ApplyError("saving the journal %s failed: %s. %s%s."
                         % ("/" + JOURNAL, error, "Restored %d change(s) of this run" % len(rolled) if done
                            else "Nothing was written", "" if not problems
                            else "; could NOT restore: " + "; ".join(problems)),
                         None, rolled, problems) from exc


def _note_unchanged_files(root: Root, settings: List[Setting], baseline: Dict[str, Dict[str, Any]]) -> None:
    """The digest of a created file this run found as wanted but whose digest the journal lacks (a run killed
    between the write and the journal update, a journal of an earlier version): it holds exactly the Setting's text."""
    for setting in settings:
        snap = baseline.get(setting.path)
        if setting.kind == FILE and snap is not None and snap.get("kind") == FILE and snap.get("exists") is False \
                and "sha256" not in snap and root.read(setting.path, strip=False) == setting.value:
            snap["sha256"] = sha256_text(setting.value)


def _at_effective(root: Root, settings: List[Setting], done: List[Action], checked: List[Dict[str, Any]],
                  services: Any) -> List[Action]:
    """The Settings to write again now that the kernel kept other values of this run's writes, for the Settings
    whose builder verifies them at that value (Setting.effective_ok: a capped IPoIB MTU, a pending memory
    partition): each Setting's own at_effective hook says how it changes (the node-local checker's expectations), so
    that the next run has nothing to change."""
    verified_at_effective = set(a.setting.uid for a in done if a.setting.effective_ok)
    effective = dict(((item["id"], item["target"]), item["actual"]) for item in checked
                     if "%s[%s]" % (item["id"], item["target"]) in verified_at_effective
                     and item["actual"] is not None)
    if not effective:
        return []
    before = dict((a.setting.uid, a.before) for a in done)
    out = []
    for setting in settings:
        patched = setting.at_effective(setting, effective) if setting.at_effective is not None else None
        if patched is not None and read_current(root, patched, services) != desired(patched):
            out.append(Action(patched, before.get(setting.uid, read_current(root, setting, services)),
                              desired(patched)))
    return out


def _replanned(result: Dict[str, Any], actions: List[Action]) -> Dict[str, Any]:
    """The result when another run changed the node between the plan and the lock: what is left to do."""
    result.update(changed=bool(actions), actions=[a.to_dict() for a in actions], diff=diff_text(actions),
                  reboot_required=any(a.setting.reboot_required for a in actions))
    return result


def _remember_effective(journal: Dict[str, Any], done: List[Action], checked: List[Dict[str, Any]]) -> None:
    """Keep what the kernel made of each write it accepted but capped (e.g. the IPoIB MTU under a 2K broadcast
    group), so that the next plan can ask for the effective value instead of rewriting it on every run."""
    effective = journal.setdefault("effective", {})
    for action in done:
        effective.pop(action.setting.uid, None)
    for item in checked:
        uid = "%s[%s]" % (item["id"], item["target"])
        effective[uid] = {"requested": item["expected"], "effective": item["actual"]}
    if not effective:
        journal.pop("effective", None)


def _rollback(root: Root, done: List[Action], before_run: Dict[str, Dict[str, Any]],
              services: Any) -> Tuple[List[str], List[str]]:
    # In apply order, as revert does, not in reverse: dependencies point the same way going back. SMT siblings
    # must be online before IRQ affinities naming them can be restored, and the scheduler must be switched back
    # before nr_requests (switching resets it).
    rolled, problems = [], []
    for action in done:
        key = _baseline_key(action.setting)
        try:
            _restore(root, key, before_run[key], services, before_run)
            rolled.append(action.setting.uid)
        except (NodeFileError, OSError) as exc:
            problems.append("%s (%s)" % (action.setting.uid, exc))
    return rolled, problems


def _forget_run(root: Root, journal_before: Optional[str], journal: Dict[str, Any]) -> None:
    """After a full rollback, put the journal back as it was (or remove it and its dirs if it was new)."""
    if journal_before is not None:
        root.write_file(JOURNAL, journal_before, mode=0o600)
        return
    root.remove(JOURNAL)
    _remove_dirs(root, journal.get("created_dirs", []))


def _remove_dirs(root: Root, dirs: List[str]) -> None:
    for rel in sorted(dirs, key=lambda d: -d.count("/")):
        # not empty (someone else's files) or already gone: leave it
        with contextlib.suppress(OSError):
            os.rmdir(root.real(rel))


def unconfirmed(root: Root, settings: List[Setting], services: Any = None) -> List[Dict[str, Any]]:
    """Settings written without error whose re-read value differs (the kernel clamped or ignored it)."""
    out = []
    for setting in settings:
        now = read_current(root, setting, services)
        if now != desired(setting):
            out.append({"id": setting.id, "target": setting.target, "expected": desired(setting), "actual": now})
    return out


# --------------------------------------------------------------------------------------------- revert
def revert(root: Root, check_mode: bool = False, services: Any = None, lock_timeout: float = 30.0) -> Dict[str, Any]:
    """Put back every baseline value, remove nodetune's files and directories, then the journal.

    The journal is read under the node's lock (an apply running beside would otherwise extend a journal this
    revert then deletes, losing the originals it had just recorded). A journal that does not validate is refused
    and kept."""
    if check_mode:
        return _revert_plan(root, load_own_journal(root), services)
    with NodeLock(root, lock_timeout):
        journal = load_own_journal(root)
        if not root.exists(JOURNAL):
            return _clean_leftovers(root)
        result = _revert_plan(root, journal, services)
        problems = []
        failed = set()
        gone: List[str] = []
        for key, snap in _ordered(journal["baseline"]):
            if _is_gone(root, key, snap):  # looked at now: an earlier entry (a CPU put online) may bring it back
                gone.append(key)
                continue
            try:
                _restore(root, key, snap, services, journal["baseline"])
            except (NodeFileError, OSError) as exc:
                if not any(problem.endswith(": %s" % exc) for problem in problems):  # both forms of a pair say it
                    problems.append("%s: %s" % (key, exc))
                failed.add(key)
        _drop_gone(result, journal, gone)
        if problems:
            if gone:  # kept without the entries that can never be restored (and with this node's identity)
                journal.setdefault("identity", node_identity(root))
                with contextlib.suppress(NodeFileError, OSError):  # unsaved: the next revert names them again
                    save_journal(root, journal)
            # The journal stays as it is (every entry but the gone ones, the ones restored included: restoring them
            # again changes nothing), so that the operator can deal with what is named and revert again.
            # rolled_back: the entries this revert did put back.
            raise ApplyError("revert could not restore: %s; the journal %s is kept: deal with what is named and "
                             "revert again%s" % ("; ".join(problems), "/" + JOURNAL,
                                                 "".join("; " + entry for entry in result.get("gone", []))),
                             rollback_errors=problems, gone=result.get("gone"),
                             rolled_back=[key for key in result["restored"] if key not in failed])
        _sweep_temp_files(root, _file_dirs(journal["baseline"]))
        root.remove(JOURNAL)
        root.remove(LEGACY_LOCK)
        _remove_dirs(root, journal.get("created_dirs", []))
    return result


def _ordered(baseline: Dict[str, Dict[str, Any]]) -> List[Tuple[str, Dict[str, Any]]]:
    # Same dependency order as apply: the scheduler goes back before nr_requests (switching resets it),
    # SMT siblings come back before IRQ affinities are restored onto them.
    return sorted(baseline.items(), key=lambda kv: (int(kv[1].get("order", 90)), kv[0]))


def _revert_plan(root: Root, journal: Dict[str, Any], services: Any) -> Dict[str, Any]:
    if not journal["baseline"] and not root.exists(JOURNAL):
        return {"changed": False, "restored": [], "msg": "no journal: nodetune never changed this node"}
    pending = [key for key, snap in _ordered(journal["baseline"]) if not _is_restored(root, key, snap, services)]
    result = {"changed": True, "restored": pending, "journal": "/" + JOURNAL}
    gone = [key for key in pending if _is_gone(root, key, journal["baseline"][key])]
    if gone:
        result["restored"] = [key for key in pending if key not in gone]
        result["gone"] = [_gone_entry(key, journal["baseline"][key]) for key in gone]
    # what each restore changes, read here (under the lock in a real revert): the diff of --check --diff
    result["changes"] = [_revert_change(root, key, journal["baseline"][key], services) for key in result["restored"]]
    return result


def _revert_change(root: Root, key: str, snap: Dict[str, Any], services: Any) -> Dict[str, Any]:
    """One baseline entry's restore as a change: its current value (``before``) and the baseline's (``after``);
    None is absent (a file nodetune created is removed)."""
    kind = snap["kind"]
    if kind == SERVICE:
        current = format_state(services.state(snap["unit"])) if services is not None else None
        return {"key": key, "path": None, "target": snap["unit"], "kind": SERVICE, "before": current,
                "after": snap.get("state")}
    if kind == ATTR:
        return {"key": key, "path": "/" + key, "kind": ATTR, "before": _attr_state(root, key, snap),
                "after": snap.get("restore")}
    if kind == BOOT:
        before, after = bootloader.restore_change(root, snap)
        return {"key": key, "path": "/" + key, "kind": BOOT, "before": before, "after": after}
    return {"key": key, "path": "/" + key, "kind": FILE, "before": root.read(key, strip=False),
            "after": snap["content"] if snap.get("exists") else None}


def _is_gone(root: Root, key: str, snap: Dict[str, Any]) -> bool:
    """A kernel attribute whose object (device, CPU, IRQ, interface) no longer exists: it cannot be restored, ever
    (a whole file that is missing is restored by creating it)."""
    return snap["kind"] == ATTR and not root.exists(key)


def _gone_entry(key: str, snap: Dict[str, Any]) -> str:
    return ("/%s: not restored (original %s): it no longer exists on this node, its device, CPU, IRQ or interface "
            "is gone" % (key, snap.get("restore")))


def _drop_gone(result: Dict[str, Any], journal: Dict[str, Any], gone: List[str]) -> None:
    """Report the entries whose object is gone and take them out of the journal: revert can finish without them."""
    result.pop("gone", None)
    if gone:
        result["gone"] = [_gone_entry(key, journal["baseline"].pop(key)) for key in gone]
        result["restored"] = [key for key in result["restored"] if key not in gone]


def _clean_leftovers(root: Root) -> Dict[str, Any]:
    """No journal: remove what an interrupted first run can leave (a temporary file, an empty state dir)."""
    removed = _sweep_temp_files(root, [STATE_DIR])
    if root.remove(LEGACY_LOCK):
        removed.append(LEGACY_LOCK)
    if root.isdir(STATE_DIR) and not root.listdir(STATE_DIR):
        _remove_dirs(root, [STATE_DIR])
        removed.append(STATE_DIR + "/")
    result: Dict[str, Any] = {"changed": bool(removed), "restored": [],
                              "msg": "no journal: nodetune never changed this node"}
    if removed:
        result["removed"] = ["/" + path for path in removed]
        result["msg"] += "; removed what an interrupted run left: " + ", ".join(result["removed"])
    return result


def _is_restored(root: Root, key: str, snap: Dict[str, Any], services: Any) -> bool:
    kind = snap["kind"]
    if kind == SERVICE:
        return services is None or format_state(services.state(snap["unit"])) == snap.get("state")
    if kind == ATTR:
        return _attr_state(root, key, snap) == normalize_raw(snap.get("restore"))
    if kind == BOOT:
        return bootloader.is_restored(root, snap)
    if snap.get("exists"):
        return root.read(key, strip=False) == snap["content"]
    return not root.exists(key)


__all__ = ["Action", "ApplyError", "JournalError", "LockedError", "NodeLock", "apply", "plan_actions", "revert",
           "diff_text", "load_journal", "load_own_journal", "node_identity", "journal_problems", "unconfirmed",
           "normalize"]
