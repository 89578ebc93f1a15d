# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The ROCm/RCCL environment area (first version): node-wide env files with names something really reads.

RCCL reads ``NCCL_*`` names (and ``/etc/rccl.conf``, which never overrides the environment); most ``RCCL_*``
names in the articles are read by nothing. A wrong name is refused (or warned about under the ``warn`` policy)
with the name to use instead. Values are shell-quoted in the profile script.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List

from ansible_collections.nodetune.instinct.plugins.module_utils.area_common import (
    Context,
    describe,
    unknown_keys,
    want_str,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.setting import FILE, Setting

AREA = "rocm_env"
VARIABLES = ("nodetune_rocm_env", "nodetune_rocm_env_policy", "nodetune_rocm_profile_file",
             "nodetune_rocm_rccl_conf_file", "nodetune_rocm_env_file")
_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# Interface / HCA lists as NCCL parses them: optional '^' (exclude) and '=' (exact match) prefixes, then
# comma-separated names, each with an optional ':port' (NCCL_IB_HCA=mlx5_0:1,mlx5_1:1).
_IFACE_LIST = re.compile(r"^\^?=?[A-Za-z0-9_.\-]+(:[0-9]+)?(,[A-Za-z0-9_.\-]+(:[0-9]+)?)*$")
INTERFACE_VARIABLES = ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
PATH_VARIABLES = (
    ("nodetune_rocm_profile_file", "etc/profile.d/nodetune-rocm.sh"),
    ("nodetune_rocm_rccl_conf_file", "etc/rccl.conf"),
    ("nodetune_rocm_env_file", "etc/nodetune/rocm.env"),
)

# Names from the articles that nothing reads: -> the real name, or None ("has no effect").
WRONG_NAMES = {
    "RCCL_PROTO": "NCCL_PROTO",
    "RCCL_ALGO": "NCCL_ALGO",
    "RCCL_TOPO_FILE": "NCCL_TOPO_FILE",
    "RCCL_NET_PLUGIN": "NCCL_NET_PLUGIN",
    "RCCL_SOCKET_IFNAME": "NCCL_SOCKET_IFNAME",
    "RCCL_BUFFSIZE": "NCCL_BUFFSIZE",
    "RCCL_NSOCKS_PERTHREAD": "NCCL_NSOCKS_PERTHREAD",
    "RCCL_TOPO_DUMP_FILE": "NCCL_TOPO_DUMP_FILE",
    "RCCL_NET_GDR_LEVEL": "NCCL_NET_GDR_LEVEL",
    "RCCL_DEBUG": "NCCL_DEBUG",
    "RCCL_TIMEOUT": None,
    "NCCL_TIMEOUT": None,
    "HSA_AMD_ENABLE_ASYNC_IO": None,
    "HSA_AMD_ENABLE_UM_PRE_REGISTER": None,
    "HSA_AMD_SEVM_PRE_ALLOC": None,
    "AMD_ZSTD_ACCELERATION": None,
    "AMD_LZ4_ACCELERATION": None,
    "HCCL_OVER_OFI": None,
}
NO_EFFECT_WHY = {
    "RCCL_TIMEOUT": "the collective timeout is set in code: init_process_group(timeout=...)",
    "NCCL_TIMEOUT": "the collective timeout is set in code: init_process_group(timeout=...)",
    "HCCL_OVER_OFI": "it belongs to Habana Gaudi's HCCL, not ROCm",
}


def shell_quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


def check_names(ctx: Context, env: Dict[str, Any], policy: str) -> Dict[str, str]:
    good: Dict[str, str] = {}
    for name in sorted(env):
        value = env[name]
        if not isinstance(name, str) or not _NAME.match(name):
            ctx.error("nodetune_rocm_env key %s is not an environment variable name (A-Z, 0-9, _)" % describe(name))
            continue
        if isinstance(value, (dict, list)) or value is None:
            ctx.error("nodetune_rocm_env['%s']=%s is not valid: expected a single value" % (name, describe(value)))
            continue
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if "\n" in text or "\x00" in text:
            ctx.error("nodetune_rocm_env['%s'] contains a newline or NUL byte" % name)
            continue
        if name in INTERFACE_VARIABLES and not _IFACE_LIST.match(text):
            ctx.error("nodetune_rocm_env['%s']=%s is not valid: expected interface or HCA names (letters, digits, "
                      "'_', '.', '-', optional ':port'), comma-separated, with an optional '^' (exclude) or '=' "
                      "(exact) prefix, e.g. 'ib0,ib1' or 'mlx5_0:1,mlx5_1:1'" % (name, describe(value)))
            continue
        if name in WRONG_NAMES:
            real = WRONG_NAMES[name]
            if real:
                message = "nodetune_rocm_env: %s is read by nothing (RCCL reads NCCL_* names); use %s" % (name, real)
            else:
                message = "nodetune_rocm_env: %s has no effect: no ROCm, RCCL or PyTorch component reads it%s" % (
                    name, ("; " + NO_EFFECT_WHY[name]) if name in NO_EFFECT_WHY else "")
            if policy == "warn":
                ctx.warn(message + " (kept because nodetune_rocm_env_policy is 'warn')")
            else:
                ctx.error(message)
                continue
        good[name] = text
    return good


def file_path(ctx: Context, config: Dict[str, Any], name: str, default: str) -> str:
    """A file the area writes: an absolute, normalised path (it is written inside nodetune_root)."""
    value = want_str(ctx, config, name)
    if value is None:
        return default
    parts = value.split("/")
    if not value.startswith("/") or ".." in parts or "." in parts or "" in parts[1:] or "\x00" in value:
        ctx.error("%s=%s is not valid: expected an absolute, normalised file path such as '/%s' (no '..', '.' "
                  "or '//'; nodetune writes it inside nodetune_root)" % (name, describe(value), default))
        return default
    return value


def build(ctx: Context, config: Dict[str, Any]) -> List[Setting]:
    unknown_keys(ctx, config, VARIABLES, AREA)
    policy = want_str(ctx, config, "nodetune_rocm_env_policy", ("error", "warn")) or "error"
    env = config.get("nodetune_rocm_env") or {}
    if not isinstance(env, dict):
        ctx.error("nodetune_rocm_env=%s is not valid: expected a mapping of variable name to value" % describe(env))
        return []
    good = check_names(ctx, env, policy)
    if not good:
        return []
    header = "# Managed by nodetune (rocm_env area). Local changes are reported as drift and overwritten.\n"
    errors_before = len(ctx.errors)
    profile, rccl_conf, env_file = [file_path(ctx, config, name, default) for name, default in PATH_VARIABLES]
    if len(ctx.errors) > errors_before:
        return []
    script = header + "".join("export %s=%s\n" % (k, shell_quote(v)) for k, v in sorted(good.items()))
    # /etc/rccl.conf: RCCL reads KEY=VALUE lines and never overrides the environment; NCCL_/RCCL_ names only.
    rccl = header + "".join("%s=%s\n" % (k, v) for k, v in sorted(good.items())
                            if k.startswith(("NCCL_", "RCCL_")) and " " not in v)
    plain = header + "".join("%s=%s\n" % (k, shell_quote(v)) for k, v in sorted(good.items()))
    return [
        Setting("rocm.env", "profile", profile, script, kind=FILE, compare="content", area=AREA, runtime=False,
                reason="login shells get the tuned RCCL/HSA environment"),
        Setting("rocm.env", "rccl.conf", rccl_conf, rccl, kind=FILE, compare="content", area=AREA, runtime=False,
                reason="RCCL reads /etc/rccl.conf for processes started without the profile"),
        Setting("rocm.env", "env_file", env_file, plain, kind=FILE, compare="content", area=AREA, runtime=False,
                reason="EnvironmentFile= for systemd units and Slurm prolog/TaskProlog"),
    ]
