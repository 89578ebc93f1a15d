# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The ``#!`` line of the standalone scripts apply renders onto a node (``nodetune-check``, ``nodetune-bind``).

``/usr/bin/env python3`` is the platform's Python 3, which on RHEL 8 is 3.6: too old for these scripts and older
than what ansible-core requires on targets. The interpreter the module itself runs under is the one Ansible's
interpreter discovery (or ``ansible_python_interpreter``) chose on this node, known to run nodetune's code, so the
scripts name it; ``/usr/bin/env python3`` remains only where that path cannot be written into a ``#!`` line.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

FALLBACK = "/usr/bin/env python3"
# Kernels before 5.1 (RHEL 8's 4.18) read at most 127 bytes of the #! line (BINPRM_BUF_SIZE 128).
MAX_LINE = 127


def usable(path: Optional[str]) -> bool:
    """Whether ``path`` can stand in a ``#!`` line: absolute, an executable file, no whitespace (the kernel splits
    the line there), short enough for every kernel."""
    if not path or not os.path.isabs(path) or any(c.isspace() for c in path):
        return False
    if len("#!" + path) > MAX_LINE:
        return False
    return os.path.isfile(path) and os.access(path, os.X_OK)


def shebang(executable: Optional[str] = None) -> str:
    """``#!<interpreter>\\n`` for a rendered script: ``executable`` (default: the running interpreter,
    ``sys.executable``) where usable, else ``#!/usr/bin/env python3``."""
    path = sys.executable if executable is None else executable
    return "#!%s\n" % (path if usable(path) else FALLBACK)
