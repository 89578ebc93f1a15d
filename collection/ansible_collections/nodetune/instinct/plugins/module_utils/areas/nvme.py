# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The NVMe area: I/O scheduler, then nr_requests within that scheduler's limit; nvme module options.

Order matters and is encoded in the Setting order: switching the scheduler resets ``nr_requests``. The limit of
``nr_requests`` is the hardware tag depth with ``none`` (``mq/0/nr_tags``, 1023 on a default NVMe) and 2048 with
an elevator. The hardware queue count is fixed at probe: there is no ``queue/nr_queues`` file, queues are shaped by
the nvme module options (``write_queues``, ``poll_queues``, ``io_queue_depth``) at the next driver load, so those
go to /etc/modprobe.d with ``reboot_required`` and are never pretended to be applied.
"""

from __future__ import annotations

import fnmatch
from typing import Any, Dict, List, Optional

from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import (
    role_variables,
    Context,
    describe,
    unknown_keys,
    want_str,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import ParseError, ascii_int
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import CHOICE, FILE, INT, Setting

# The area's declaration: its role (ROLE), variables as an Ansible argument spec, check ids and docs; its
# role's files are generated from it (scripts/gen_role_docs.py) and declarations.py collects every area's.
ROLE = "nvme"
DECLARATION = {
    'kind': 'area',
    'order': 30,
    'steps': ['nvme.scheduler', 'nvme.nr_requests'],
    'builder': 'nvme',
    'setting_area': 'nvme',
    'finding_prefix': 'nvme',
    'check_ids': ['nvme.scheduler', 'nvme.nr_requests', 'nvme.module_options'],
    'galaxy_tags': ['nvme', 'storage'],
    'severity': 'medium',
    'short_description': 'NVMe I/O scheduler, nr_requests within its limit, nvme module options',
    'description': [
        (
            'The scheduler is set first, then C(nr_requests): switching the scheduler resets C(nr_requests).'
            ' With C(none) the most C(nr_requests) can be is the hardware tag depth (1023 on a default '
            "NVMe), so the articles' C(echo 1024 > .../nr_requests) after C(echo none > .../scheduler) fails"
            ' with EINVAL; with an elevator the limit is 2048. Both are checked per device before any write,'
            ' and persisted with a udev rule in C(/etc/udev/rules.d/).'
        ),
        (
            "There is no C(queue/nr_queues) file (the articles' C(echo 32 > .../nr_queues) writes nowhere): "
            'NVMe hardware queues are fixed when the driver probes the device. They are shaped with the nvme'
            ' module options (C(write_queues), C(poll_queues), C(io_queue_depth)) in C(/etc/modprobe.d/), '
            'which take effect at the next driver load; nodetune reports C(reboot_required) and never '
            'pretends they applied.'
        ),
    ],
    'variables': {
        'nodetune_nvme_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                'Tune this area. When false the area is left exactly as it is.',
            ],
        },
        'nodetune_nvme_devices': {
            'type': 'str',
            'default': 'nvme*n*',
            'description': [
                (
                    'Shell-style pattern of the NVMe namespaces '
                    '(C(/sys/block) names) to tune.'
                ),
            ],
        },
        'nodetune_nvme_scheduler': {
            'type': 'str',
            'default': 'none',
            'description': [
                (
                    "I/O scheduler of each selected namespace (the articles' C(none)). It must be one the "
                    'device offers (C(queue/scheduler) lists them, e.g. C([none] mq-deadline kyber bfq)); '
                    "load an elevator's module to offer more. C(null) leaves the scheduler alone."
                ),
            ],
        },
        'nodetune_nvme_nr_requests': {
            'type': 'raw',
            'default': 'max',
            'description': [
                (
                    "C(queue/nr_requests) of each selected namespace, an integer from 4 to the scheduler's "
                    'limit, or C(max) (the limit itself). C(null) leaves it alone.'
                ),
                (
                    'The limit is the hardware tag depth with C(none) (1023 by default) and 2048 with an '
                    "elevator; the articles' 1024 with C(none) is refused with that explanation. C(max) is "
                    'the corrected default.'
                ),
            ],
        },
        'nodetune_nvme_module_options': {
            'type': 'dict',
            'default': {},
            'description': [
                (
                    'nvme driver options written to C(/etc/modprobe.d/nodetune-nvme.conf), for example '
                    'C({io_queue_depth: 1024, poll_queues: 4}). Valid keys are C(io_queue_depth) (2..4095), '
                    'C(write_queues) and C(poll_queues) (0..number of CPUs).'
                ),
                (
                    'They take effect at the next driver load (reboot); the run reports C(reboot_required). '
                    'C({}) writes no file.'
                ),
            ],
        },
    },
}
DECLARATION["hints"] = {
    "nodetune_nvme_nr_queues": (
        "nodetune_nvme_nr_queues is not a setting: there is no /sys/block/<dev>/queue/nr_queues file (the article's "
        "'echo 32 > .../nr_queues' writes nowhere). NVMe hardware queues are fixed when the driver probes the device "
        "(one /sys/block/<dev>/mq/<n>/ per queue); shape them with nodetune_nvme_module_options (write_queues, "
        "poll_queues, io_queue_depth), which take effect at the next reboot"),
}

AREA = "nvme"
VARIABLES = role_variables(ROLE, DECLARATION)
SCHED_MAX_REQUESTS = 2048
# single-queue elevators removed in Linux 5.0 (old tuning guides still name them) -> their blk-mq counterparts
LEGACY_SCHEDULERS = {"noop": "none", "deadline": "mq-deadline", "cfq": "bfq"}
MODPROBE_FILE = "etc/modprobe.d/nodetune-nvme.conf"
MODULE_OPTIONS = {  # name -> (low, high) ; high None = number of CPUs
    "io_queue_depth": (2, 4095),
    "write_queues": (0, None),
    "poll_queues": (0, None),
}
NR_QUEUES_HINT = DECLARATION["hints"]["nodetune_nvme_nr_queues"]


def devices(ctx: Context, pattern: str) -> List[Dict[str, Any]]:
    return [d for d in ctx.topology.get("block_devices", [])
            if d.get("kind") == "nvme" and fnmatch.fnmatchcase(d["name"], pattern)]


def nr_requests_limit(ctx: Context, device: Dict[str, Any], scheduler: str) -> int:
    if scheduler != "none":
        return SCHED_MAX_REQUESTS
    tags = ctx.root.read_int("sys/block/%s/mq/0/nr_tags" % device["name"])
    if tags:
        return tags
    if device.get("scheduler") == "none" and device.get("nr_requests"):
        return int(device["nr_requests"])  # with none, the default nr_requests is the tag depth
    return 1023


def build(ctx: Context, config: Dict[str, Any]) -> List[Setting]:
    unknown_keys(ctx, config, VARIABLES, AREA, hints=DECLARATION["hints"])
    pattern = want_str(ctx, config, "nodetune_nvme_devices") or "nvme*n*"
    scheduler = want_str(ctx, config, "nodetune_nvme_scheduler")
    requested = config.get("nodetune_nvme_nr_requests")
    settings: List[Setting] = []
    selected = devices(ctx, pattern)
    if not selected:
        ctx.notes.append("nvme: no NVMe namespace matches %s on this node; nothing to tune" % pattern)
    for device in selected:
        name = device["name"]
        queue = "sys/block/%s/queue/" % name
        active = scheduler or device.get("scheduler") or "none"
        if scheduler is not None:
            offered = device.get("schedulers") or []
            if scheduler not in offered:
                if scheduler in LEGACY_SCHEDULERS:
                    hint = ("'%s' is a legacy single-queue scheduler, gone since Linux 5.0; NVMe uses blk-mq, where "
                            "its counterpart is '%s'" % (scheduler, LEGACY_SCHEDULERS[scheduler]))
                else:
                    hint = "load the elevator's module, e.g. 'modprobe %s', or pick one of those" % scheduler
                ctx.error("nodetune_nvme_scheduler='%s' is not offered by %s (it offers: %s): %s"
                          % (scheduler, name, ", ".join(offered) or "nothing", hint))
                continue
            settings.append(Setting("nvme.scheduler", name, queue + "scheduler", scheduler, compare=CHOICE,
                                    area=AREA, persist="udev",
                                    reason="'%s' for NVMe: the device queues deeply itself" % scheduler,
                                    runtime=False))
        value = _nr_requests(ctx, device, active, requested)
        if value is not None:
            settings.append(Setting("nvme.nr_requests", name, queue + "nr_requests", value, compare=INT, area=AREA,
                                    persist="udev", runtime=False,
                                    reason="queue depth %d within the %s limit of %d"
                                    % (value, active, nr_requests_limit(ctx, device, active))))
    settings.extend(_module_options(ctx, config))
    return settings


def _nr_requests(ctx: Context, device: Dict[str, Any], scheduler: str, requested: Any) -> Optional[int]:
    if requested is None:
        return None
    limit = nr_requests_limit(ctx, device, scheduler)
    if requested == "max":
        return limit
    try:
        value = ascii_int(requested, "nodetune_nvme_nr_requests")
    except ParseError:
        ctx.error("nodetune_nvme_nr_requests=%s is not valid: expected an integer (digits 0-9) or 'max'"
                  % describe(requested))
        return None
    if value < 4:
        ctx.error("nodetune_nvme_nr_requests=%d is too small: the kernel raises values below 4 to 4" % value)
        return None
    if value > limit:
        if scheduler == "none":
            ctx.error("nodetune_nvme_nr_requests=%d is above the limit of %s with scheduler 'none': it is the "
                      "hardware tag depth, %d (writing more fails with EINVAL); use %d or 'max', or an elevator "
                      "such as mq-deadline (limit %d)" % (value, device["name"], limit, limit, SCHED_MAX_REQUESTS))
        else:
            ctx.error("nodetune_nvme_nr_requests=%d is above the limit of %d with scheduler '%s' on %s "
                      "(writing more fails with EINVAL); use 'max'" % (value, limit, scheduler, device["name"]))
        return None
    return value


def _module_options(ctx: Context, config: Dict[str, Any]) -> List[Setting]:
    options = config.get("nodetune_nvme_module_options") or {}
    if not isinstance(options, dict):
        ctx.error("nodetune_nvme_module_options=%s is not valid: expected a mapping such as "
                  "{io_queue_depth: 1024, poll_queues: 4}" % describe(options))
        return []
    if not options:
        return []
    ncpus = len(ctx.topology.get("cpus", [])) or 1
    parts = []
    for name in sorted(options):
        if name == "nr_queues":
            ctx.error(NR_QUEUES_HINT.replace("nodetune_nvme_nr_queues", "nodetune_nvme_module_options.nr_queues"))
            continue
        if name not in MODULE_OPTIONS:
            ctx.error("nodetune_nvme_module_options.%s is not an nvme module option nodetune manages (valid: %s)"
                      % (name, ", ".join(sorted(MODULE_OPTIONS))))
            continue
        low, high = MODULE_OPTIONS[name]
        high = ncpus if high is None else high
        value = options[name]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            ctx.error("nodetune_nvme_module_options.%s=%s is not valid: expected an integer from %d to %d"
                      % (name, describe(value), low, high))
            continue
        parts.append("%s=%d" % (name, value))
    if not parts or len(parts) != len(options):
        return []
    content = ("# Managed by nodetune (nvme area). Takes effect when the nvme driver loads (next reboot).\n"
               "options nvme %s\n" % " ".join(parts))
    return [Setting("nvme.module_options", "nvme", MODPROBE_FILE, content, kind=FILE, compare="content",
                    area=AREA, reboot_required=True, persist="modprobe.d",
                    reason="hardware queues are fixed at probe: module options apply at the next driver load")]
