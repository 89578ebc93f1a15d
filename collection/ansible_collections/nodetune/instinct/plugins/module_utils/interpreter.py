# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The ``#!`` line of the standalone scripts apply renders onto a node (``nodetune-check``, ``nodetune-bind``,
``nodetune-restore``).

Those scripts are run by anyone on the node (a scheduler's health check, each user's job, systemd at boot), so they
name the node's system Python: the first of ``/usr/bin/python3``, ``/usr/libexec/platform-python`` and
``/usr/bin/python3.N`` (newest first) found under the node's root that is a world-executable file, not inside a
virtualenv, and not older than the scripts need (RHEL 8's 3.6). Never the interpreter this code runs under: with the
CLI on a local root that is the controller's virtualenv, over Ansible it may be a path only root can run ("bad
interpreter: Permission denied" for users). ``/usr/bin/env python3`` remains where the root has none of them.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Any, List, Optional, Tuple

FALLBACK = "/usr/bin/env python3"
CANDIDATES = ("/usr/bin/python3", "/usr/libexec/platform-python")
# The oldest Python the rendered scripts are run on in the tests (tests/node/test_interpreter.py).
OLDEST = (3, 8)
# Kernels before 5.1 (RHEL 8's 4.18) read at most 127 bytes of the #! line (BINPRM_BUF_SIZE 128).
MAX_LINE = 127
_VERSIONED = re.compile(r"^python3\.(\d+)$")
_VERSION = re.compile(r"python(\d+)\.(\d+)$")


def usable(path: Optional[str]) -> bool:
    """Whether ``path`` can stand in a ``#!`` line: absolute, an executable file, no whitespace (the kernel splits
    the line there), short enough for every kernel."""
    if not path or not os.path.isabs(path) or any(c.isspace() for c in path):
        return False
    if len("#!" + path) > MAX_LINE:
        return False
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _host_path(root: Any, path: str) -> Optional[str]:
    """Where ``path`` (absolute on the node) is here, links resolved inside the root; None if it cannot be."""
    if root is None:
        return os.path.realpath(path)
    try:
        return root.real(path)
    except Exception:  # a link loop or escape (rootfs.PathEscapeError): not a candidate
        return None


def _candidates(root: Any) -> List[str]:
    found = _host_path(root, "/usr/bin")
    names = os.listdir(found) if found and os.path.isdir(found) else []
    versioned = sorted((int(m.group(1)), name) for m, name in ((_VERSIONED.match(n), n) for n in names) if m)
    return list(CANDIDATES) + ["/usr/bin/" + name for _minor, name in reversed(versioned)]


def _version(real: str) -> Optional[Tuple[int, int]]:
    """The version its resolved file name says (``python3.6``, ``platform-python3.6``), if it says one."""
    match = _VERSION.search(os.path.basename(real))
    return (int(match.group(1)), int(match.group(2))) if match else None


def _in_virtualenv(root: Any, path: str) -> bool:
    folder = os.path.dirname(path)
    for where in (folder, os.path.dirname(folder)):
        found = _host_path(root, os.path.join(where, "pyvenv.cfg"))
        if found and os.path.isfile(found):
            return True
    return False


def node_python(root: Any = None) -> Optional[str]:
    """The node's system Python, as a path on the node, under ``root`` (a rootfs.Root; None: this machine's /)."""
    for path in _candidates(root):
        real = _host_path(root, path)
        try:
            mode = os.stat(real).st_mode if real else 0
        except OSError:
            continue
        if not stat.S_ISREG(mode) or not mode & stat.S_IXOTH or _in_virtualenv(root, path):
            continue
        version = _version(real)
        if version is None or version >= OLDEST:
            return path
    return None


def shebang(executable: Optional[str] = None, root: Any = None) -> str:
    """``#!<interpreter>\\n`` for a rendered script: ``executable`` where given and usable, else the node's system
    Python under ``root`` (node_python), else ``#!/usr/bin/env python3``."""
    if executable is not None:
        return "#!%s\n" % (executable if usable(executable) else FALLBACK)
    return "#!%s\n" % (node_python(root) or FALLBACK)
