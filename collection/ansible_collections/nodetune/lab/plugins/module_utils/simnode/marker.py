# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The marker at a simulated tree's root (``.nodetune-simnode.json``: the generator and the normalised spec) and
the checks every entry point makes on a destination before it builds, reboots, changes or removes anything
there (never ``/``, never a directory that is not a simulated node)."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional


MARKER = ".nodetune-simnode.json"
GENERATOR = "nodetune.simnode"
GENERATOR_VERSION = 8  # bump whenever the trees change shape: present-state rebuilds older trees


class SimNodeError(Exception):
    """A tree cannot be built, rebooted or removed at that destination (the message says why)."""


def _is_empty_dir(path: str) -> bool:
    try:
        return not os.listdir(path)
    except OSError:
        return False


def read_marker(dest: str) -> Optional[Dict[str, Any]]:
    """The marker of a simulated tree at ``dest`` (its spec and generator), or None where there is none."""
    try:
        with open(os.path.join(dest, MARKER), "r", encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("generator") != GENERATOR or not isinstance(data.get("spec"), dict):
        return None
    return data


def is_simnode(dest: str) -> bool:
    return read_marker(dest) is not None


def _check_dest(dest: Any, must_exist: bool = False) -> str:
    if not isinstance(dest, str) or not dest.strip():
        raise SimNodeError("dest must be a non-empty path, got %r" % (dest,))
    if "\x00" in dest:
        raise SimNodeError("dest %r contains a NUL byte" % dest)
    real = os.path.realpath(os.path.expanduser(dest))
    if real == "/" or real == os.path.realpath(os.sep):
        raise SimNodeError("dest %r is the real root file system; a simulated node must live in its own "
                           "directory (e.g. ./lab/<host>)" % dest)
    if must_exist and not os.path.isdir(real):
        raise SimNodeError("dest %s is not a simulated node: the directory does not exist" % dest)
    if os.path.exists(real) and not os.path.isdir(real):
        raise SimNodeError("dest %s exists and is not a directory" % dest)
    return real


def _marker_bytes(spec: Dict[str, Any]) -> bytes:
    return (json.dumps({"generator": GENERATOR, "version": GENERATOR_VERSION, "spec": spec}, indent=1,
                       sort_keys=True) + "\n").encode()
