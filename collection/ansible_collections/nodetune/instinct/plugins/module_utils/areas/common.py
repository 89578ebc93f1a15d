# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What every area builder shares: the node context and variable validation.

An area builder (``areas/<name>.py: build(ctx, config)``) turns one role's variables into Settings. ``config`` is
keyed by the role variables' own names (``nodetune_nvme_scheduler``), so every error can name the variable the
user set, its value and what is valid. Builders never raise on the first problem: they collect all errors in
``ctx.errors`` so one run reports every mistake, and the engine refuses to write anything while any remain.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.parse import ParseError, ascii_int
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root

CPU_DIR = "sys/devices/system/cpu"


class Errors(object):
    """The smallest context the ``want_*`` validators need: somewhere to collect every error."""

    def __init__(self) -> None:
        self.errors: List[str] = []

    def error(self, message: str) -> None:
        self.errors.append(message)


class Context(object):
    """Everything a builder may look at: the root, the discovered Topology and the planned Layout.

    ``journal``: the node's journal as plain data, read once by the caller (apply/node.py) for every builder that
    asks (the areas sit below the apply engine, which imports them); without one, a plan sees no journal."""

    def __init__(self, root: Root, topology: Dict[str, Any], layout: Optional[Dict[str, Any]] = None,
                 services: Any = None, journal: Optional[Dict[str, Any]] = None) -> None:
        self.root = root
        self.topology = topology
        self.layout = layout or {}
        self.services = services
        self.errors: List[str] = []
        self.warnings: List[str] = []
        self.notes: List[str] = []  # informational, e.g. "no cpufreq: cpu.governor not applicable"
        self._journal: Dict[str, Any] = journal or {}

    def error(self, message: str) -> None:
        self.errors.append(message)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def journal(self) -> Dict[str, Any]:
        """The node's journal (the baseline of a value, what the kernel kept of a write); an empty one where there is
        none or it does not validate (apply refuses such a journal itself, before any write)."""
        return self._journal

    def effective_records(self) -> Dict[str, Dict[str, Any]]:
        """What the kernel made of nodetune's writes that read back otherwise, by Setting uid (the journal's
        ``effective``)."""
        effective = self.journal().get("effective")
        if not isinstance(effective, dict):
            return {}
        return dict((uid, record) for uid, record in effective.items() if isinstance(record, dict))

    # ------------------------------------------------------------------ topology helpers
    def cpus_after_layout(self) -> List[int]:
        """CPUs that are online once the Layout's SMT step ran: per-CPU settings go to these only."""
        offline = set(self.layout.get("smt_offline") or [])
        if self.layout.get("smt_control") == "off":
            offline |= set(self.secondary_threads())
        return [c["id"] for c in self.topology.get("cpus", []) if c.get("online") and c["id"] not in offline]

    def secondary_threads(self) -> List[int]:
        out = set()
        for cpu in self.topology.get("cpus", []):
            siblings = cpu.get("thread_siblings") or []
            if len(siblings) > 1:
                out.update(s for s in siblings if s != min(siblings))
        return sorted(out)


def describe(value: Any) -> str:
    return repr(value) if not isinstance(value, str) else "'%s'" % value


def want_str(ctx: Context, config: Dict[str, Any], name: str, choices: Optional[Iterable[str]] = None,
             allow_none: bool = True) -> Optional[str]:
    value = config.get(name)
    if value is None:
        if not allow_none:
            ctx.error("%s must be set" % name)
        return None
    if not isinstance(value, str) or not value:
        ctx.error("%s=%s is not valid: expected a non-empty string" % (name, describe(value)))
        return None
    if choices is not None:
        options = list(choices)
        if value not in options:
            ctx.error("%s=%s is not valid: choose one of %s" % (name, describe(value), ", ".join(options)))
            return None
    return value


def want_int(ctx: Context, config: Dict[str, Any], name: str, low: Optional[int] = None,
             high: Optional[int] = None, allow_none: bool = True) -> Optional[int]:
    value = config.get(name)
    if value is None:
        if not allow_none:
            ctx.error("%s must be set" % name)
        return None
    try:
        number = ascii_int(value, name)
    except ParseError:
        ctx.error("%s=%s is not valid: expected an integer written with the digits 0-9" % (name, describe(value)))
        return None
    if (low is not None and number < low) or (high is not None and number > high):
        ctx.error("%s=%s is out of range: valid values are %s to %s"
                  % (name, describe(value), low if low is not None else "-inf", high if high is not None else "inf"))
        return None
    return number


def want_bool(ctx: Context, config: Dict[str, Any], name: str, default: bool = False) -> bool:
    value = config.get(name, default)
    if isinstance(value, bool):
        return value
    ctx.error("%s=%s is not valid: expected true or false" % (name, describe(value)))
    return default


def want_list(ctx: Context, config: Dict[str, Any], name: str) -> List[Any]:
    value = config.get(name)
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    ctx.error("%s=%s is not valid: expected a list" % (name, describe(value)))
    return []


def unknown_keys(ctx: Context, config: Dict[str, Any], known: Iterable[str], area: str,
                 hints: Optional[Dict[str, str]] = None) -> None:
    """Refuse variables the area does not know (typos would otherwise be silently ignored)."""
    known_set = set(known) | {"nodetune_%s_enabled" % area}
    for key in sorted(config):
        if key in known_set:
            continue
        if hints and key in hints:
            ctx.error(hints[key])
        else:
            ctx.error("%s is not a setting of the %s area (known: %s)" % (key, area, ", ".join(sorted(known_set))))


def role_variables(role: str, declaration: Dict[str, Any]) -> Tuple[str, ...]:
    """The variables an area's builder takes: its declaration's, without its ``nodetune_<role>_enabled`` toggle."""
    toggle = "nodetune_%s_enabled" % role
    return tuple(name for name in declaration["variables"] if name != toggle)


def choices(declaration: Dict[str, Any], variable: str) -> Tuple[Any, ...]:
    """A variable's allowed values, as its declaration writes them once (the builder validates by them too)."""
    return tuple(declaration["variables"][variable]["choices"])
