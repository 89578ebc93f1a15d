# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Settings as data: the one list that apply writes and verify compares.

A :class:`Setting` says *what* a node should look like (a kernel attribute's value, a config file's content,
a line in a file, a service state), never *how to get there*. The engine (engine.py) turns the differences into
actions; verify (verify.py) turns them into Findings. Because both consume the same objects, apply and verify
cannot disagree about what "tuned" means (the lesson ansible-lockdown teaches with its shared toggles).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.plan import bootloader

from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs.rules import (  # noqa: F401
    CHOICE,  # the comparisons are the node programs' rules (node_programs/rules.py), named here for the builders
    COMPARES,
    CONTENT,
    CPULIST,
    EXACT,
    INT,
    OD_CLOCK,
    WORDS,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import rules
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.services import format_state, parse_state

# Kinds of Setting
ATTR = "attr"  # a kernel attribute (sysfs/procfs): written with one write(2), never created
FILE = "file"  # a whole config file owned by nodetune (sysctl.d, udev rules, profile.d ...)
LINE = "line"  # one KEY=VALUE line in a file nodetune does not own (/etc/default/irqbalance)
ABSENT = "absent"  # a file that must not exist (e.g. a stale nodetune file)
SERVICE = "service"  # a systemd unit's enabled/active state
BOOT = "boot"  # the boot loader's kernel command line (bootloader.py): value "add -remove" words, set by its tool

KINDS = (ATTR, FILE, LINE, ABSENT, SERVICE, BOOT)

# what a kernel attribute compared this way takes after its value, as a write of its own (attr_writes)
COMMITS = {OD_CLOCK: "c"}

# Apply order: lower first, by check id or id prefix. Each area declares its own (areas/declarations.py: order,
# steps), which fill this table when the areas are imported; a Setting reads it when its order is asked for, so one
# made before that still gets its area's. Ids it does not name (the engine's own) go at 90.
ORDER: Dict[str, int] = {}

_ID = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_\-]+)+$")


class SettingError(ValueError):
    """A Setting (or the variables it came from) is invalid; raised before anything is written."""

    def __init__(self, errors: List[str]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(self.errors))


class Setting(object):
    """One desired state of one thing on a node.

    ``id`` is the stable check id (``nvme.scheduler``) shared by apply, verify, waivers and reports;
    ``target`` names the instance (``nvme0n1``, ``irq 142``, ``vm.dirty_ratio``) so that id+target is unique.
    """

    __slots__ = ("id", "target", "path", "value", "kind", "compare", "_order", "area", "persist",
                 "reboot_required", "reason", "mode", "key", "disruptive", "runtime", "after", "effective_ok",
                 "restore_value", "irq_name", "at_effective")

    def __init__(self, id: str, target: str, path: str, value: Any, kind: str = ATTR,
                 compare: str = EXACT, order: Optional[int] = None, area: str = "",
                 persist: Optional[str] = None, reboot_required: bool = False, reason: str = "",
                 mode: int = 0o644, key: Optional[str] = None, disruptive: bool = False,
                 runtime: bool = True, after: Sequence[str] = (), effective_ok: bool = False,
                 restore_value: Optional[str] = None, irq_name: Optional[str] = None,
                 at_effective: Optional[Callable[["Setting", Dict[Tuple[str, str], str]], Optional["Setting"]]] = None
                 ) -> None:
        self.id = id
        self.target = target
        self.path = path.lstrip("/")
        self.value = "" if value is None else str(value)
        self.kind = kind
        self.compare = compare
        self._order = order  # None: the area's (ORDER), looked up when asked for
        self.area = area or id.split(".", 1)[0]
        self.persist = persist
        self.reboot_required = reboot_required
        self.reason = reason
        self.mode = mode
        self.key = key
        self.disruptive = disruptive
        # runtime: a kernel attribute that a reboot resets (restored at boot by nodetune-restore)
        self.runtime = runtime and kind == ATTR
        # what must be in place before this one is written: the paths of files (a unit file before its enable),
        # "service:<unit>" for a service; only those planned in the same run count
        self.after = tuple(after)
        # effective_ok: the kernel may accept a write and keep another value (a cap, a pending request), and the node
        # is then verified at that value: apply writes the node-local checker's expectation with it in the same run
        # (the value kept is journaled for every write, and the builder asks for it next time: Context.journal)
        self.effective_ok = effective_ok
        # what the boot-time restore (nodetune-restore) writes, where not ``value``: the IPoIB MTU's requested one
        self.restore_value = restore_value
        # an IRQ's action name: nodetune-restore and nodetune-check find the IRQ by it, its number changes at boot
        self.irq_name = irq_name
        # a hook, never serialised: the engine calls it after the writes of a run with the values the kernel kept of
        # the effective_ok Settings ({(id, target): value}); it returns this Setting as it must now be, or None
        # (the node-local checker's expectations, areas/checker_files.py: the engine knows no area)
        self.at_effective = at_effective

    @property
    def uid(self) -> str:
        return "%s[%s]" % (self.id, self.target)

    @property
    def order(self) -> int:
        return self._order if self._order is not None else _default_order(self.id)

    @order.setter
    def order(self, value: int) -> None:
        self._order = value

    def to_dict(self) -> Dict[str, Any]:
        data = dict((name.lstrip("_"), getattr(self, name.lstrip("_"))) for name in self.__slots__
                    if name != "at_effective")
        data["mode"] = "%04o" % self.mode
        data["after"] = list(self.after)
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Setting":
        values = dict(data)
        if isinstance(values.get("mode"), str):
            values["mode"] = int(values["mode"], 8)
        return cls(**values)

    def __repr__(self) -> str:
        return "Setting(%s -> %r)" % (self.uid, self.value if self.kind != FILE else "<file>")


def _default_order(setting_id: str) -> int:
    for prefix in sorted(ORDER, key=len, reverse=True):
        if setting_id == prefix or setting_id.startswith(prefix + "."):
            return ORDER[prefix]
    return 90


def key_of(setting: Setting) -> str:
    """What a Setting changes, as its ``after`` names it and the journal keys it: a path, or ``service:<unit>``."""
    return "service:" + setting.target if setting.kind == SERVICE else setting.path


def in_dependency_order(settings: List[Setting]) -> List[Setting]:
    """``settings`` (already in apply order) with each one moved after those it names in ``after``, the rest
    keeping their order. systemd refuses to enable a unit whose file is not there yet ("Failed to enable unit,
    unit ... does not exist", systemctl 252), so the order of the names alone cannot decide."""
    keys = set(key_of(s) for s in settings)
    placed: set = set()
    waiting: Dict[str, List[Setting]] = {}
    out: List[Setting] = []

    def place(setting: Setting) -> None:
        blockers = [k for k in setting.after if k in keys and k not in placed]
        if blockers:
            waiting.setdefault(blockers[0], []).append(setting)
            return
        out.append(setting)
        placed.add(key_of(setting))
        for follower in waiting.pop(key_of(setting), []):
            place(follower)

    for setting in settings:
        place(setting)
    if waiting:
        stuck = sorted(s.uid for group in waiting.values() for s in group)
        raise SettingError(["%s: its 'after' dependencies form a cycle or wait on each other" % uid
                            for uid in stuck])
    return out


def check_shape(settings: List[Setting]) -> None:
    """Structural validation of a Setting list (ids, kinds, no two values for one path)."""
    errors: List[str] = []
    seen: Dict[str, Setting] = {}
    for setting in settings:
        if not _ID.match(setting.id):
            errors.append("setting id %r is not valid: ids look like 'area.name' (e.g. 'nvme.scheduler')"
                          % setting.id)
        if setting.kind not in KINDS:
            errors.append("%s: kind %r is not one of %s" % (setting.uid, setting.kind, ", ".join(KINDS)))
        if setting.compare not in COMPARES:
            errors.append("%s: compare %r is not one of %s" % (setting.uid, setting.compare, ", ".join(COMPARES)))
        if "\x00" in setting.value or "\x00" in setting.path:
            errors.append("%s: NUL byte in path or value" % setting.uid)
        if setting.kind == ATTR and "\n" in setting.value.strip():
            errors.append("%s: a kernel attribute value cannot span lines: %r" % (setting.uid, setting.value))
        if setting.kind == SERVICE:  # services have no path: the unit is the thing set
            key = "service:" + setting.target
        elif setting.kind == LINE:
            key = "%s:%s" % (setting.path, setting.key)
        else:
            key = setting.path
        other = seen.get(key)
        if other is not None and other.value != setting.value:
            errors.append("%s and %s both set %s to different values (%r, %r)"
                          % (other.uid, setting.uid, key, other.value, setting.value))
        seen[key] = setting
    if errors:
        raise SettingError(errors)


def normalize(setting: Setting, text: Optional[str]) -> Optional[str]:
    """The comparable form of a value read from the node (``None`` = absent)."""
    return rules.normalize(setting.compare, text)


def attr_writes(compare: str, value: str) -> List[str]:
    """The write(2)s that set a kernel attribute to ``value``: the value, then its commit where the attribute takes
    one (rocm_smi_lib's rsmi_perf_determinism_mode_set writes "s 1 <clock>" then "c" to pp_od_clk_voltage; amdgpu
    parses one command per write, amdgpu_set_pp_od_clk_voltage)."""
    commit = COMMITS.get(compare)
    return [value] if commit is None else [value, commit]


def set_line(text: Optional[str], key: str, value: str) -> str:
    """Return ``text`` with ``KEY="value"`` set: the last existing assignment replaced, else appended."""
    lines = (text or "").splitlines()
    new_line = '%s="%s"' % (key, value)
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].strip().startswith(key + "="):
            lines[index] = new_line
            break
    else:
        lines.append(new_line)
    return "\n".join(lines) + "\n"


def read_current(root: Root, setting: Setting, services: Any = None) -> Optional[str]:
    """The node's current value for a Setting, in comparable form (None = absent / unknown)."""
    if setting.kind == SERVICE:
        if services is None:
            return None
        wanted = parse_state(setting.value)
        return format_state(services.state(setting.target), sorted(wanted))
    if setting.kind == ABSENT:
        return "present" if root.exists(setting.path) else "absent"
    if setting.kind == BOOT:
        return bootloader.current(root, setting.key or "", setting.value)
    if setting.kind == LINE:
        return rules.read_line(root.read(setting.path, strip=False), setting.key or "")
    if setting.kind == FILE:
        return root.read(setting.path, strip=False)
    return normalize(setting, root.read(setting.path))


def desired(setting: Setting) -> str:
    """The desired value in comparable form."""
    if setting.kind == SERVICE:
        wanted = parse_state(setting.value)
        return format_state(wanted, sorted(wanted))
    if setting.kind == LINE:
        return setting.value
    if setting.kind == ABSENT:
        return "absent"
    if setting.kind == BOOT:
        return bootloader.describe(*bootloader.requirement(setting.value))
    return normalize(setting, setting.value) or ""


def matches(root: Root, setting: Setting, services: Any = None) -> bool:
    return read_current(root, setting, services) == desired(setting)


# the comparisons (node_programs/rules.py) are named here for the builders, with the Setting they describe
__all__ = ["ABSENT", "ATTR", "BOOT", "CHOICE", "COMMITS", "COMPARES", "CONTENT", "CPULIST", "EXACT", "FILE", "INT",
           "KINDS", "LINE", "OD_CLOCK", "ORDER", "SERVICE", "WORDS", "Setting", "SettingError", "attr_writes",
           "check_shape", "desired", "in_dependency_order", "key_of", "matches", "normalize", "read_current",
           "set_line"]
