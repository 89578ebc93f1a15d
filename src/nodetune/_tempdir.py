"""A temporary folder for the ansible-playbook that nodetune starts, short enough for Ansible's own socket.

ansible-core 2.20+ starts a local RPC server (ansible/_internal/_rpc_host.py) over a Unix socket that Python's
multiprocessing names ``$TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX`` (multiprocessing/connection.py,
arbitrary_address; util.get_temp_dir). A socket's path holds at most 107 bytes (``sun_path`` is 108 with its NUL,
unix(7)), so under a TMPDIR longer than ~75 bytes every ansible command dies with "Local RPC server did not start".
A run that nodetune starts therefore gets a private folder whose path fits, under TMPDIR where it fits there, else
under /tmp; where neither can hold one, one line names TMPDIR and what fits.
"""

from __future__ import annotations

import os
import tempfile

#: The longest path a Unix socket may have, in bytes (sun_path is 108 bytes with its NUL, unix(7)).
SOCKET_PATH_MAX = 107
#: What multiprocessing adds under TMPDIR for a listener's socket (mkdtemp/mktemp names end in 8 characters).
SOCKET_SUFFIX = len("/pymp-XXXXXXXX/listener-XXXXXXXX")
#: Where a run's folder goes when TMPDIR's path is too long (the FHS's /tmp; /dev/shm where /tmp is not there).
FALLBACKS = ("/tmp", "/var/tmp", "/dev/shm")


class TempDirError(RuntimeError):
    """No folder whose path is short enough for Ansible's socket can be made."""


def fits(folder: str) -> bool:
    """Whether Ansible's socket fits under ``folder`` as the ansible-playbook's TMPDIR."""
    return len(os.fsencode(folder)) + SOCKET_SUFFIX <= SOCKET_PATH_MAX


def make_run_dir(prefix: str, tmp_name: str = "tmp") -> tuple[str, str]:
    """``(folder, tmpdir)``: a new private folder (0700) for a run, and inside it ``tmp_name``, the TMPDIR to give
    the ansible-playbook the run starts. In the user's temporary folder where that fits, else in the first of
    :data:`FALLBACKS` where it does. The caller removes ``folder``."""
    tried = []
    for base in (None, *FALLBACKS):
        where = tempfile.gettempdir() if base is None else base
        if not fits(os.path.join(where, prefix + "XXXXXXXX", tmp_name)):
            tried.append(where)
            continue
        try:
            folder = tempfile.mkdtemp(prefix=prefix, dir=base)
        except OSError:
            tried.append(where)
            continue
        tmpdir = os.path.join(folder, tmp_name)
        os.mkdir(tmpdir, 0o700)
        return folder, tmpdir
    limit = SOCKET_PATH_MAX - SOCKET_SUFFIX - len("/" + prefix + "XXXXXXXX/" + tmp_name)
    raise TempDirError(
        f"TMPDIR={os.environ.get('TMPDIR', '')!r}: no temporary folder for ansible-playbook could be made whose path "
        f"fits Ansible's socket (a path of at most {limit} bytes; tried {', '.join(tried)}): set TMPDIR to a short "
        f"folder, e.g. TMPDIR=/tmp")
