# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The limits area: locked memory (and open files) for RDMA jobs, for login sessions and for systemd services.

RDMA registers (pins) job memory, which the kernel charges against RLIMIT_MEMLOCK unless the process has
CAP_IPC_LOCK (drivers/infiniband/core/umem.c, ib_umem_get()), so jobs need ``memlock unlimited``. Two different
mechanisms set that limit, and neither changes a process that already runs:

- Login sessions: pam_limits(8) reads /etc/security/limits.conf, then every ``*.conf`` of /etc/security/limits.d
  (and of the vendor directory, a file of /etc winning over the vendor's of the same name), sorted by file name
  (linux-pam modules/pam_limits/pam_limits.c, read_limits_dir()). Lines are ``<domain> <type> <item> <value>``
  (limits.conf(5)); ``-`` sets soft and hard together, ``memlock`` is in KiB, ``unlimited``/``infinity``/``-1``
  are RLIM_INFINITY. A user's own line beats a group line, which beats ``*``; between lines of the same domain the
  later one wins (process_limit(): a source of the same rank overwrites). Upstream pam applies ``*`` to root too;
  Debian's and Ubuntu's pam do not ("group and wildcard limits are not applied to root", their limits.conf), so
  nodetune writes a ``root`` line as well by default. The limits apply when a session opens: running sessions keep
  theirs, and services, which open no pam session, never get them.
- Services: systemd gives each unit its ``LimitMEMLOCK=`` (systemd.exec(5)), by default the manager's
  ``DefaultLimitMEMLOCK=`` from system.conf and the ``system.conf.d`` drop-ins (systemd-system.conf(5); 8M where
  unset). The manager re-reads those files at ``systemctl daemon-reexec`` and, since 2015, at ``daemon-reload``
  too (systemd PR #426, src/core/main.c: MANAGER_RELOAD calls parse_configuration() and set_manager_defaults());
  a unit takes the default when it is loaded, and its process gets the unit's limit when it starts: a running
  slurmd keeps its limit until it is restarted. PID 1 raises its own RLIMIT_MEMLOCK for BPF
  (bump_rlimit_memlock()) and hands the default to its children only, so /proc/1/limits does not show the default:
  verify asks the manager (``systemctl show``) instead.

Apply writes nodetune's own files (:data:`PAM_FILE`, :data:`SYSTEMD_FILE`, a drop-in per listed unit) and never
reloads, re-executes or restarts anything; verify compares the files, then what is in effect: the winning line of
every file the reader reads, the manager's default and each listed unit's loaded limit and running main process
(``/proc/<pid>/limits``). Configured but not in effect is drift, naming the ``daemon-reload`` or restart it needs.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import (
    role_variables,
    Context,
    describe,
    unknown_keys,
    want_bool,
    want_list,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import (
    DRIFT,
    NOT_APPLICABLE,
    OK,
    UNSUPPORTED,
    Finding,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import is_digits
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import FILE, Setting

# The area's declaration: its role (ROLE), variables as an Ansible argument spec, check ids and docs; its
# role's files are generated from it (scripts/gen_role_docs.py) and declarations.py collects every area's.
ROLE = "limits"
DECLARATION = {
    'kind': 'area',
    'order': 72,  # its files are independent of each other and of the other areas' settings
    'builder': 'limits',
    'setting_area': 'limits',
    'finding_prefix': 'limits',
    'check_ids': ['limits.pam', 'limits.systemd', 'limits.unit', 'limits.effective'],
    'galaxy_tags': ['limits', 'rdma'],
    'severity': 'medium',
    'short_description': 'memlock unlimited (and nofile) for login sessions, systemd services and slurmd (opt-in)',
    'description': [
        (
            'RDMA pins job memory, which the kernel charges against the locked-memory limit (RLIMIT_MEMLOCK), '
            "so jobs need C(memlock unlimited) (AMD's RCCL guides: C(ulimit -l unlimited)). nodetune writes "
            'its own files: C(/etc/security/limits.d/99-nodetune-limits.conf) (pam_limits, for login '
            'sessions), C(/etc/systemd/system.conf.d/99-nodetune-limits.conf) with C(DefaultLimitMEMLOCK) '
            '(for services) and, for each unit in C(nodetune_limits_units), '
            'C(/etc/systemd/system/<unit>.d/nodetune-limits.conf) with C(LimitMEMLOCK).'
        ),
        (
            'None of them changes a running process: pam_limits applies them at the next login, systemd '
            'reads them at C(systemctl daemon-reload) (or C(daemon-reexec)) and a service gets them when it is '
            'restarted. nodetune reloads and restarts nothing; verify (C(limits.effective)) reports a limit '
            "that is configured but not in effect as drift naming the reload or restart it needs, from the "
            "manager's value (C(systemctl show)) and the unit's main process (C(/proc/<pid>/limits)), and a "
            'file read after nodetune\'s that sets another value as drift naming that file. With the area on, '
            'its findings replace C(health.memlock). See docs/tuning.md, "Limits".'
        ),
        (
            'Off by default: it sets a site-wide policy (every login, every service) and takes effect only at '
            'the next login, reload or restart. Revert removes the files (and the drop-in directories it made).'
        ),
    ],
    'variables': {
        'nodetune_limits_enabled': {
            'type': 'bool',
            'default': False,
            'description': [
                'Tune this area (opt-in). When false the area is left exactly as it is.',
            ],
        },
        'nodetune_limits_memlock': {
            'type': 'str',
            'default': 'unlimited',
            'description': [
                (
                    'Max locked memory: C(unlimited), or a size in KiB as limits.conf takes it (C(1) to '
                    'C(18014398509481983), e.g. C(67108864) for 64 GiB). Written to the limits.d file for each '
                    'domain (soft and hard), and as C(infinity) or C(<KiB>K) to C(DefaultLimitMEMLOCK) and the '
                    "units' C(LimitMEMLOCK). C(null) leaves memlock alone (no systemd file)."
                ),
            ],
        },
        'nodetune_limits_nofile': {
            'type': 'int',
            'default': None,
            'description': [
                (
                    'Max open files for login sessions (limits.d, soft and hard), from 1 to the node\'s '
                    'C(fs.nr_open): above it setrlimit fails and pam_limits refuses the login, so it is refused '
                    "before any write, and so is C(unlimited). Services keep their units' C(LimitNOFILE). "
                    'C(null) (default) leaves nofile alone.'
                ),
            ],
        },
        'nodetune_limits_domains': {
            'type': 'list',
            'elements': 'str',
            'default': ['*', 'root'],
            'description': [
                (
                    'The limits.conf domains the limits.d lines are written for: C(*) (every user without a line '
                    'of their own), user names, C(@group). C(root) is in the default because Debian\'s and '
                    "Ubuntu's pam_limits do not apply C(*) to root (upstream's does). C([]) writes no limits.d "
                    'file.'
                ),
            ],
        },
        'nodetune_limits_systemd_default': {
            'type': 'bool',
            'default': True,
            'description': [
                (
                    "Write C(DefaultLimitMEMLOCK) to system.conf.d: every service's default, for the services "
                    'that start jobs without a C(LimitMEMLOCK) of their own.'
                ),
            ],
        },
        'nodetune_limits_units': {
            'type': 'list',
            'elements': 'str',
            'default': [],
            'description': [
                (
                    'Service units that start jobs, e.g. C([slurmd.service]): each gets a drop-in with '
                    'C(LimitMEMLOCK), which wins over the default and over the unit file. A name that is not a '
                    "systemd service unit name is refused; a unit the node does not have gets a warning (its "
                    'drop-in takes effect once it is installed). Restart them yourself after C(systemctl '
                    'daemon-reload).'
                ),
            ],
        },
    },
}

AREA = "limits"
VARIABLES = role_variables(ROLE, DECLARATION)
PAM_FILE = "etc/security/limits.d/99-nodetune-limits.conf"
SYSTEMD_FILE = "etc/systemd/system.conf.d/99-nodetune-limits.conf"
UNIT_DROPIN = "etc/systemd/system/%s.d/nodetune-limits.conf"
PAM_ID, SYSTEMD_ID, UNIT_ID, EFFECTIVE_ID = "limits.pam", "limits.systemd", "limits.unit", "limits.effective"
INFINITY = float("inf")
UNLIMITED_WORDS = ("unlimited", "infinity", "-1", "-")  # pam_limits.c process_limit(): RLIM_INFINITY
# 2^64 / 1024: pam_limits takes a KiB value at or above RLIM_INFINITY/1024 as unlimited
MEMLOCK_KIB_MAX = (1 << 54) - 1
# fs/file.c: sysctl_nr_open's default; setrlimit(RLIMIT_NOFILE) above fs.nr_open fails (EPERM), and pam_limits then
# refuses the login (setup_limits() -> PAM_PERM_DENIED)
NR_OPEN_DEFAULT = 1024 * 1024
SYSTEMD_DEFAULT_MEMLOCK = 8 * 1024 * 1024  # systemd-system.conf(5): DefaultLimitMEMLOCK= defaults to 8M
# systemd's unit names (src/basic/unit-name.h VALID_CHARS, unit_name_is_valid()): under UNIT_NAME_MAX (256)
UNIT_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ:-_.\\@")
UNIT_NAME_MAX = 256
# Where pam_limits and systemd read, in their precedence (a later directory's file of the same name loses)
PAM_DIRS = ("etc/security/limits.d", "usr/etc/security/limits.d")
SYSTEM_CONF = ("etc/systemd/system.conf", "run/systemd/system.conf", "usr/local/lib/systemd/system.conf",
               "usr/lib/systemd/system.conf")
SYSTEM_CONF_DIRS = ("etc/systemd/system.conf.d", "run/systemd/system.conf.d", "usr/local/lib/systemd/system.conf.d",
                    "usr/lib/systemd/system.conf.d")
UNIT_DIRS = ("etc/systemd/system", "run/systemd/system", "usr/local/lib/systemd/system", "usr/lib/systemd/system",
             "lib/systemd/system")
ITEMS = {"memlock": "Max locked memory", "nofile": "Max open files"}  # limits.conf item -> /proc/<pid>/limits row
_USER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-$")
HEADER = "# Managed by nodetune (limits area); changes are overwritten. %s\n"


# ------------------------------------------------------------------------------------------------ values
def pam_value(item: str, text: str) -> Optional[float]:
    """A limits.conf value as pam_limits sets it (bytes for memlock, a count for nofile); None where pam_limits
    would skip the line ("wrong limit value")."""
    word = text.strip().lower()
    if word in UNLIMITED_WORDS:
        return INFINITY
    if not is_digits(word):
        return None
    number = int(word)
    if item == "memlock":
        return INFINITY if number >= (1 << 64) // 1024 else float(number * 1024)
    return float(number)


def systemd_limit(text: str) -> Optional[Tuple[float, float]]:
    """``LimitMEMLOCK=``/``DefaultLimitMEMLOCK=`` as (soft, hard) bytes: ``infinity``, bytes with an optional
    K/M/G/T/P/E suffix (base 1024), or ``soft:hard`` (systemd.exec(5), "Process Properties"); None where empty
    (the assignment resets the limit) or not valid."""
    parts = text.strip().split(":")
    if len(parts) > 2 or not text.strip():
        return None
    values = []
    for part in parts:
        part = part.strip()
        if part == "infinity":
            values.append(INFINITY)
            continue
        factor = 1
        if part[-1:].upper() in "KMGTPE" and part[-1:]:
            factor = 1024 ** ("KMGTPE".index(part[-1].upper()) + 1)
            part = part[:-1]
        if not is_digits(part):
            return None
        values.append(float(int(part) * factor))
    return (values[0], values[-1])


def proc_limits(root: Any, pid: int, item: str) -> Optional[Tuple[float, float]]:
    """(soft, hard) of one row of ``/proc/<pid>/limits`` (fs/proc/base.c, proc_pid_limits(): the name padded to
    25 columns, then soft, hard and unit); None where the process or the row is not there."""
    text = root.read("proc/%d/limits" % pid, strip=False)
    for line in (text or "").splitlines():
        if line.startswith(ITEMS[item] + " "):
            words = line[26:].split()
            if len(words) >= 2:
                values = [INFINITY if w == "unlimited" else float(w) if is_digits(w) else None for w in words[:2]]
                if None not in values:
                    return (values[0], values[1])
    return None


# ------------------------------------------------------------------------------------------------ reading
def pam_files(root: Any) -> List[str]:
    """The files pam_limits reads, in its order: limits.conf (the vendor's where /etc has none), then the
    limits.d files of /etc and the vendor directory sorted by name, /etc's winning a name both have."""
    main = "etc/security/limits.conf"
    if not root.exists(main) and root.exists("usr/etc/security/limits.conf"):
        main = "usr/etc/security/limits.conf"
    chosen: Dict[str, str] = {}
    for directory in reversed(PAM_DIRS):  # vendor first, so that /etc replaces a name both have
        for name in root.listdir(directory):
            if name.endswith(".conf"):
                chosen[name] = directory + "/" + name
    return [main] + [chosen[name] for name in sorted(chosen)]


def pam_lines(root: Any) -> List[Tuple[str, int, List[str]]]:
    """(file, line number, fields) of every line pam_limits reads, in its order (comments stripped)."""
    out = []
    for path in pam_files(root):
        for number, line in enumerate((root.read(path, strip=False) or "").splitlines(), 1):
            fields = line.split("#", 1)[0].split(None, 3)
            if fields:
                out.append(("/" + path, number, [f.strip() for f in fields]))
    return out


def pam_limit(root: Any, domain: str, item: str) -> Dict[str, Optional[Tuple[float, str]]]:
    """``{"soft": (value, "file:line"), "hard": ...}`` that pam_limits sets for the lines of exactly ``domain``
    (the later line of that domain wins); a value None where no line sets it, and both None with a ``"none"``
    entry where a ``<domain> -`` line tells pam_limits to set no limit at all for it."""
    found: Dict[str, Optional[Tuple[float, str]]] = {"soft": None, "hard": None}
    for path, number, fields in pam_lines(root):
        if fields[0] != domain:
            continue
        if len(fields) == 2 and fields[1] == "-":  # "no limits" for this domain: pam_limits stops here
            return {"soft": None, "hard": None, "none": (0.0, "%s:%d" % (path, number))}
        if len(fields) != 4 or fields[2].lower() != item:
            continue
        value = pam_value(item, fields[3])
        kinds = {"soft": ("soft",), "hard": ("hard",), "-": ("soft", "hard")}.get(fields[1].lower(), ())
        if value is None:
            continue
        for kind in kinds:
            found[kind] = (value, "%s:%d" % (path, number))
    return found


def _conf_assignments(root: Any, files: List[str], section: str, key: str) -> Optional[Tuple[str, str]]:
    """The last ``key=`` of ``section`` in ``files`` read in order, with its file; None where none sets it (an
    empty assignment resets the setting to its default, so it counts as unset)."""
    value = None
    for path in files:
        current = None
        for line in (root.read(path, strip=False) or "").splitlines():
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("[") and line.endswith("]"):
                current = line[1:-1].strip()
                continue
            name, sep, rest = line.partition("=")
            if sep and current == section and name.strip() == key:
                value = (rest.strip(), "/" + path) if rest.strip() else None
    return value


def _dropins(root: Any, directories: List[str]) -> List[str]:
    """``*.conf`` of ``directories`` (highest precedence first) sorted by file name, the first directory's file
    winning a name several have (systemd-system.conf(5), systemd.unit(5): drop-ins in /etc override those in /run,
    which override /usr/lib's; they apply in lexicographic order whichever directory they are in)."""
    chosen: Dict[str, str] = {}
    for directory in reversed(directories):
        for name in root.listdir(directory):
            if name.endswith(".conf"):
                chosen[name] = directory + "/" + name
    return [chosen[name] for name in sorted(chosen)]


def manager_memlock(root: Any) -> Optional[Tuple[str, str]]:
    """The ``DefaultLimitMEMLOCK=`` the manager reads (value, file): system.conf, then the system.conf.d drop-ins
    (the later assignment wins)."""
    main = next((p for p in SYSTEM_CONF if root.exists(p)), SYSTEM_CONF[0])
    return _conf_assignments(root, [main] + _dropins(root, list(SYSTEM_CONF_DIRS)), "Manager", "DefaultLimitMEMLOCK")


def unit_memlock(root: Any, unit: str) -> Tuple[Optional[str], Optional[Tuple[str, str]]]:
    """(the unit's file, the ``LimitMEMLOCK=`` it loads with and where from): its fragment, then the drop-ins of
    ``<unit>.d/``, ``<template>@.service.d/`` and ``service.d/`` in every unit directory, sorted by file name
    (systemd.unit(5)); the file None where the unit is not installed."""
    fragment = next((d + "/" + unit for d in UNIT_DIRS if root.exists(d + "/" + unit)), None)
    names = [unit + ".d"] + ([unit.split("@", 1)[0] + "@.service.d"] if "@" in unit else []) + ["service.d"]
    chosen: Dict[str, str] = {}
    for name in names:  # the more specific directory's file wins a name several have
        for path in _dropins(root, [d + "/" + name for d in UNIT_DIRS]):
            chosen.setdefault(path.rsplit("/", 1)[1], path)
    files = ([fragment] if fragment else []) + [chosen[n] for n in sorted(chosen)]
    return fragment, _conf_assignments(root, files, "Service", "LimitMEMLOCK")


# ------------------------------------------------------------------------------------------------ build
def _memlock(ctx: Context, config: Dict[str, Any]) -> Optional[float]:
    """nodetune_limits_memlock in bytes (INFINITY for unlimited), None to leave memlock alone."""
    name = "nodetune_limits_memlock"
    value = config.get(name, "unlimited")
    if value is None:
        return None
    text = str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else None
    if text == "unlimited":
        return INFINITY
    if text is not None and is_digits(text) and 0 < int(text) <= MEMLOCK_KIB_MAX:
        return float(int(text) * 1024)
    ctx.error("%s=%s is not valid: expected 'unlimited' or a size in KiB as limits.conf takes it (1 to %d, e.g. "
              "67108864 for 64 GiB), or null to leave memlock alone; RDMA jobs need 'unlimited'"
              % (name, describe(value), MEMLOCK_KIB_MAX))
    return None


def _nofile(ctx: Context, config: Dict[str, Any]) -> Optional[int]:
    name = "nodetune_limits_nofile"
    value = config.get(name)
    if value is None:
        return None
    nr_open = ctx.root.read_int("proc/sys/fs/nr_open") or NR_OPEN_DEFAULT
    text = str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
    if is_digits(text) and 0 < int(text) <= nr_open:
        return int(text)
    ctx.error("%s=%s is not valid: expected a number of open files from 1 to %d (this node's fs.nr_open: above it "
              "setrlimit fails and pam_limits refuses every login; 'unlimited' is not a number of files), or null "
              "to leave nofile alone" % (name, describe(value), nr_open))
    return None


def _domains(ctx: Context, config: Dict[str, Any]) -> List[str]:
    name = "nodetune_limits_domains"
    out = []
    for domain in want_list(ctx, config, name) if name in config else ["*", "root"]:
        text = domain if isinstance(domain, str) else ""
        plain = text[1:] if text.startswith("@") else text
        if text != "*" and not (plain and _USER_CHARS.issuperset(plain) and not plain.startswith("-")):
            ctx.error("%s has %s, which is not a limits.conf domain nodetune writes: expected '*' (every user "
                      "without a line of their own), a user name such as 'root', or '@group'"
                      % (name, describe(domain)))
        elif text not in out:
            out.append(text)
    return out


def valid_unit(unit: Any) -> bool:
    """A systemd service unit name (plain, instance or template), as unit_name_is_valid() takes it."""
    if not isinstance(unit, str) or len(unit) >= UNIT_NAME_MAX or not unit.endswith(".service"):
        return False
    stem = unit[:-len(".service")]
    return bool(stem) and not stem.startswith("@") and UNIT_CHARS.issuperset(stem)


def _units(ctx: Context, config: Dict[str, Any]) -> List[str]:
    name = "nodetune_limits_units"
    out = []
    for unit in want_list(ctx, config, name):
        if not valid_unit(unit):
            hint = " (did you mean '%s.service'?)" % unit if isinstance(unit, str) and valid_unit(unit + ".service") \
                else ""
            ctx.error("%s has %s, which is not a systemd service unit name: expected a name such as "
                      "'slurmd.service' (letters, digits and ':-_.\\@', ending in .service, under %d characters)%s"
                      % (name, describe(unit), UNIT_NAME_MAX, hint))
        elif unit not in out:
            out.append(unit)
    return out


def _systemd_text(value: float) -> str:
    return "infinity" if value == INFINITY else "%dK" % (value // 1024)


def _pam_text(value: float) -> str:
    return "unlimited" if value == INFINITY else "%d" % (value // 1024)


def build(ctx: Context, config: Dict[str, Any]) -> List[Setting]:
    unknown_keys(ctx, config, VARIABLES, AREA)
    memlock = _memlock(ctx, config)
    nofile = _nofile(ctx, config)
    domains = _domains(ctx, config)
    units = _units(ctx, config)
    systemd_default = want_bool(ctx, config, "nodetune_limits_systemd_default", True)
    if ctx.errors:
        return []
    settings: List[Setting] = []
    lines = []
    for domain in domains:
        for item, value in (("memlock", None if memlock is None else _pam_text(memlock)),
                            ("nofile", None if nofile is None else "%d" % nofile)):
            if value is not None:
                lines += ["%s\tsoft\t%s\t%s" % (domain, item, value), "%s\thard\t%s\t%s" % (domain, item, value)]
    if lines:
        text = HEADER % "limits.conf(5); pam_limits applies them at each login." + "\n".join(lines) + "\n"
        settings.append(Setting(PAM_ID, "limits.d", PAM_FILE, text, kind=FILE, compare="content", area=AREA,
                                reason="pam_limits sets these for sessions that open after the change"))
    if memlock is not None and systemd_default:
        text = HEADER % "systemd-system.conf(5)." + "[Manager]\nDefaultLimitMEMLOCK=%s\n" % _systemd_text(memlock)
        settings.append(Setting(SYSTEMD_ID, "DefaultLimitMEMLOCK", SYSTEMD_FILE, text, kind=FILE, compare="content",
                                area=AREA, reason="the manager reads it at daemon-reload or daemon-reexec; services "
                                                  "get it when they are restarted"))
    for unit in units if memlock is not None else []:
        if not any(ctx.root.exists(d + "/" + unit) for d in UNIT_DIRS):
            ctx.warn("limits: %s is not installed on this node; its drop-in takes effect when it is" % unit)
        text = HEADER % "systemd.exec(5)." + "[Service]\nLimitMEMLOCK=%s\n" % _systemd_text(memlock)
        settings.append(Setting(UNIT_ID, unit, UNIT_DROPIN % unit, text, kind=FILE, compare="content", area=AREA,
                                reason="needs systemctl daemon-reload, then a restart of %s (nodetune restarts "
                                       "nothing)" % unit))
    if units and memlock is None:
        ctx.notes.append("limits: nodetune_limits_units are given but nodetune_limits_memlock is null: no drop-in")
    if not settings:
        ctx.notes.append("limits: nodetune_limits_memlock and nodetune_limits_nofile are null; nothing to set")
    elif any(s.id in (SYSTEMD_ID, UNIT_ID) for s in settings):
        ctx.notes.append("limits: systemd takes the new limits at 'systemctl daemon-reload' (or daemon-reexec) and "
                         "a service only when it is restarted; nodetune restarts nothing. pam_limits applies them "
                         "to login sessions that open from now on")
    return settings


# ------------------------------------------------------------------------------------------------ verify
def show_limit(value: Optional[float], item: str = "memlock") -> str:
    """A limit as people read it: ``unlimited``, KiB for memlock (limits.conf's unit), a count for nofile."""
    if value is None:
        return "unset"
    if value == INFINITY:
        return "unlimited"
    return "%d KiB" % (value // 1024) if item == "memlock" else "%d" % value


def _pair(soft: Optional[float], hard: Optional[float], item: str = "memlock") -> str:
    if soft == hard:
        return show_limit(soft, item)
    return "soft %s, hard %s" % (show_limit(soft, item), show_limit(hard, item))


def _pam_expected(text: str) -> List[Tuple[str, str, float]]:
    """(domain, item, value) pairs nodetune's limits.d file sets (soft and hard alike)."""
    out = []
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) == 4 and fields[1] == "hard":
            value = pam_value(fields[2], fields[3])
            if value is not None:
                out.append((fields[0], fields[2], value))
    return out


def pam_findings(root: Any, setting: Setting) -> List[Finding]:
    """What pam_limits will set, line by line of every file it reads, for each domain and item nodetune sets."""
    findings = []
    for domain, item, value in _pam_expected(setting.value):
        found = pam_limit(root, domain, item)
        target = "pam %s %s" % (domain, item)
        if "none" in found:
            findings.append(Finding(EFFECTIVE_ID, target, show_limit(value, item), "no limits ('%s -' at %s)"
                                    % (domain, found["none"][1]), DRIFT, severity="medium", source="setting",
                                    remedy="pam_limits sets no limit at all for %s because of that line: remove it"
                                           % domain))
            continue
        soft, hard = [found[k][0] if found[k] else None for k in ("soft", "hard")]
        wrong = [found[k][1] for k in ("soft", "hard") if found[k] and found[k][0] != value]
        good = soft == value and hard == value
        where = sorted(set(found[k][1] for k in ("soft", "hard") if found[k]))
        findings.append(Finding(
            EFFECTIVE_ID, target, show_limit(value, item), "%s (from %s)" % (_pair(soft, hard, item), ", ".join(where))
            if where else "unset", OK if good else DRIFT, severity="medium", source="setting",
            remedy="" if good else "%s: a line read after nodetune's (pam_limits reads limits.conf, then limits.d "
                                   "by file name; the later line of a domain wins) sets it otherwise: change or "
                                   "remove it, or run the limits area to restore %s"
                                   % (", ".join(wrong) or "no line", "/" + PAM_FILE)))
    return findings


def _show(services: Any, unit: Optional[str], properties: List[str]) -> Dict[str, str]:
    show = getattr(services, "show", None)
    if show is None:
        return {}
    try:
        return show(unit, properties) or {}
    except (OSError, ValueError):
        return {}


def _loaded(props: Dict[str, str], key: str) -> Optional[Tuple[float, float]]:
    """A ``systemctl show`` limit (bytes or ``infinity``; ``<key>Soft`` the soft one) as (soft, hard)."""
    hard = systemd_limit(props.get(key, "")) if props.get(key) else None
    soft = systemd_limit(props.get(key + "Soft", "")) if props.get(key + "Soft") else hard
    if hard is None or soft is None:
        return None
    return (soft[0], hard[1])


def manager_findings(root: Any, setting: Setting, services: Any) -> List[Finding]:
    wanted = systemd_limit(setting.value.rpartition("DefaultLimitMEMLOCK=")[2].split("\n")[0])
    if wanted is None:
        return []
    configured = manager_memlock(root)
    conf = systemd_limit(configured[0]) if configured else None
    expected = _pair(*wanted)
    if conf != wanted:
        actual = "%s (from %s)" % (configured[0], configured[1]) if configured else "unset (systemd's 8M)"
        return [Finding(EFFECTIVE_ID, "DefaultLimitMEMLOCK", expected, actual, DRIFT, severity="medium",
                        source="setting", remedy="a system.conf.d file read after nodetune's (drop-ins by file "
                                                 "name, the later assignment wins) sets it otherwise: change it, "
                                                 "or run the limits area")]
    props = _show(services, None, ["DefaultLimitMEMLOCK", "DefaultLimitMEMLOCKSoft"])
    loaded = _loaded(props, "DefaultLimitMEMLOCK")
    if loaded is None:
        return [Finding(EFFECTIVE_ID, "DefaultLimitMEMLOCK", expected, "configured in %s; the manager's value "
                        "cannot be read (systemd is not running here)" % configured[1], OK, severity="info",
                        source="setting")]
    good = loaded == wanted
    return [Finding(EFFECTIVE_ID, "DefaultLimitMEMLOCK", expected, "manager: %s" % _pair(*loaded),
                    OK if good else DRIFT, severity="medium", source="setting",
                    remedy="" if good else "configured in %s but the manager still has its old default: run "
                                           "'systemctl daemon-reload' (or daemon-reexec); services started before "
                                           "keep their limit until they are restarted" % configured[1])]


def unit_findings(root: Any, setting: Setting, services: Any) -> List[Finding]:
    unit = setting.target
    wanted = systemd_limit(setting.value.rpartition("LimitMEMLOCK=")[2].split("\n")[0])
    if wanted is None:
        return []
    expected = _pair(*wanted)
    fragment, configured = unit_memlock(root, unit)
    if fragment is None:
        return [Finding(EFFECTIVE_ID, unit, expected, "not installed", NOT_APPLICABLE, severity="info",
                        source="setting", remedy="the drop-in takes effect once %s is installed" % unit)]
    conf = systemd_limit(configured[0]) if configured else None
    if conf != wanted:
        actual = "%s (from %s)" % (configured[0], configured[1]) if configured else "unset"
        return [Finding(EFFECTIVE_ID, unit, expected, actual, DRIFT, severity="medium", source="setting",
                        remedy="a drop-in read after nodetune's (drop-ins by file name, e.g. override.conf from "
                               "'systemctl edit') sets LimitMEMLOCK otherwise: change it")]
    props = _show(services, unit, ["LimitMEMLOCK", "LimitMEMLOCKSoft", "MainPID", "NeedDaemonReload"])
    loaded = _loaded(props, "LimitMEMLOCK")
    if loaded is None:
        return [Finding(EFFECTIVE_ID, unit, expected, "configured in %s; the unit's loaded value cannot be read "
                        "(systemd is not running here)" % configured[1], OK, severity="info", source="setting")]
    if loaded != wanted or props.get("NeedDaemonReload") == "yes":
        return [Finding(EFFECTIVE_ID, unit, expected, "loaded: %s" % _pair(*loaded), DRIFT, severity="medium",
                        source="setting", remedy="configured in %s but systemd has not loaded it: run 'systemctl "
                                                 "daemon-reload', then restart %s when its jobs allow (nodetune "
                                                 "restarts nothing)" % (configured[1], unit))]
    pid = int(props["MainPID"]) if is_digits(props.get("MainPID", "")) else 0
    if not pid:
        return [Finding(EFFECTIVE_ID, unit, expected, "loaded: %s; not running (it gets it when it starts)"
                        % _pair(*loaded), OK, severity="medium", source="setting")]
    running = proc_limits(root, pid, "memlock")
    if running is None:
        return [Finding(EFFECTIVE_ID, unit, expected, "loaded: %s; /proc/%d/limits not readable" % (_pair(*loaded),
                        pid), UNSUPPORTED, severity="info", source="setting")]
    good = running == wanted
    return [Finding(EFFECTIVE_ID, unit, expected, "main PID %d: %s" % (pid, _pair(*running)), OK if good else DRIFT,
                    severity="medium", source="setting",
                    remedy="" if good else "loaded, but %s (PID %d) started before and keeps its old limit, and so do "
                                           "the jobs it starts: restart it ('systemctl restart %s') when its jobs "
                                           "allow; nodetune never restarts it" % (unit, pid, unit))]


def effective_findings(root: Any, settings: List[Setting], services: Any = None) -> List[Finding]:
    """``limits.effective``: what the limits area's files make pam_limits and systemd do (the winning line of
    every file they read) and, where systemd answers, what the manager and each listed unit have loaded and what
    the unit's running main process has. Only for the Settings of this area that are in place (the file checks
    report the others)."""
    findings: List[Finding] = []
    for setting in settings:
        if setting.area != AREA or root.read(setting.path, strip=False) != setting.value:
            continue
        if setting.id == PAM_ID:
            findings += pam_findings(root, setting)
        elif setting.id == SYSTEMD_ID:
            findings += manager_findings(root, setting, services)
        elif setting.id == UNIT_ID:
            findings += unit_findings(root, setting, services)
    return findings


def enabled(areas: Optional[Dict[str, Any]]) -> bool:
    """Whether the limits area runs for an areas mapping ({area: {variable: value}}), as tuning.desired_settings
    decides it (the roles pass nodetune_limits_enabled, false by default: the area is opt-in)."""
    config = (areas or {}).get(AREA)
    return isinstance(config, dict) and config.get("nodetune_limits_enabled", True) is not False
