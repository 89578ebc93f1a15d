"""A throw-away OpenSSH server on 127.0.0.1 for the SSH lane (tests/real/test_ssh.py, bench --connection ssh).

As root: a non-root user with passwordless sudo (its home in a temporary folder, a sudoers.d drop-in), a host key
and a client key made with ssh-keygen, an sshd_config of its own (a free port on 127.0.0.1 only, public keys only)
and ``/usr/sbin/sshd -D -e`` started as a child. Everything goes on leaving the context manager: the server and
every session process it forked (ControlPersist masters keep sessions open for 60 s), the user, its home, the
drop-in and the temporary folder. Only 127.0.0.1 is ever listened on or connected to.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SSHD = Path("/usr/sbin/sshd")
SUDOERS_D = Path("/etc/sudoers.d")
PRIVSEP_DIR = Path("/run/sshd")  # Debian's sshd refuses to start without it; systemd makes it, here nobody does
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
               "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10")


def refusal() -> str | None:
    """Why this machine cannot host the server (None when it can)."""
    if os.geteuid() != 0:
        return "the SSH lane needs root (it adds a user, a sudoers drop-in and starts sshd)"
    missing = [tool for tool, found in (("/usr/sbin/sshd (Debian: openssh-server)", SSHD.is_file()),
                                        ("sudo", shutil.which("sudo")), ("ssh", shutil.which("ssh")),
                                        ("ssh-keygen", shutil.which("ssh-keygen")),
                                        ("useradd/userdel", shutil.which("useradd") and shutil.which("userdel")))
               if not found]
    if missing:
        return f"the SSH lane needs {', '.join(missing)} (scripts/lib/setup.sh installs openssh-server and sudo)"
    if not SUDOERS_D.is_dir():
        return f"sudo reads no drop-ins here ({SUDOERS_D} is missing)"
    return None


@dataclass
class SshServer:
    user: str
    port: int
    key: Path  # the client's private key (root's, on the controller)
    folder: Path  # the temporary folder: keys, config, log, the user's home; traversable by the user

    def ssh(self, *command: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ssh", *SSH_OPTIONS, "-i", str(self.key), "-p", str(self.port),
                               f"{self.user}@127.0.0.1", *command],
                              capture_output=True, text=True, timeout=timeout, check=False)

    def host_vars(self) -> dict[str, Any]:
        """Inventory variables that reach a node over this server, as root through sudo, with the node's own
        (system) Python: the modules must run there, not in the controller's virtual environment."""
        return {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": self.port,
                "ansible_user": self.user, "ansible_ssh_private_key_file": str(self.key),
                "ansible_ssh_common_args": " ".join(SSH_OPTIONS[:-2]),  # ConnectTimeout is Ansible's own timeout
                "ansible_control_path_dir": str(self.folder / "cp"),  # the masters' sockets go with the folder
                "ansible_become": True, "ansible_python_interpreter": "/usr/bin/python3"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc): the sshd sessions it forked."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, pending = [], [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """The server and its sessions: the sessions first (the listener's children), then the listener by its pid."""
    for pid in [*_descendants(proc.pid), proc.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    for pid in _descendants(proc.pid) if proc.poll() is None else []:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _user_pids(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    pids.append(int(entry))
    return pids


@contextlib.contextmanager
def sshd_server(parent: str | None = None) -> Iterator[SshServer]:
    """A running server and its user; everything removed on exit. Call :func:`refusal` first."""
    folder = Path(tempfile.mkdtemp(prefix="nodetune-ssh-", dir=parent))
    folder.chmod(0o755)  # the user's home is inside: sshd and the user must reach it
    user = f"ntssh{secrets.token_hex(3)}"
    home, dropin = folder / "home", SUDOERS_D / f"nodetune-ssh-{user}"
    made_privsep = not PRIVSEP_DIR.exists()
    proc: subprocess.Popen[bytes] | None = None
    added = False
    try:
        # '*' as password: no password login, yet not a locked account ('!'), which sshd refuses without PAM
        _run("useradd", "--home-dir", str(home), "--create-home", "--shell", "/bin/sh", "--user-group",
             "--password", "*", user)
        added = True
        dropin.write_text(f"{user} ALL=(ALL:ALL) NOPASSWD: ALL\n")
        dropin.chmod(0o440)
        _run("visudo", "-cqf", str(dropin))
        key, host_key = folder / "client_ed25519", folder / "host_ed25519"
        for path, comment in ((key, "nodetune-ssh-client"), (host_key, "nodetune-ssh-host")):
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path))
        ssh_dir = home / ".ssh"
        ssh_dir.mkdir(mode=0o700)
        (ssh_dir / "authorized_keys").write_text(Path(f"{key}.pub").read_text())
        (ssh_dir / "authorized_keys").chmod(0o600)
        shutil.chown(ssh_dir, user, user)
        shutil.chown(ssh_dir / "authorized_keys", user, user)
        (folder / "cp").mkdir(mode=0o700)
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
        port = free_port()
        config = folder / "sshd_config"
        config.write_text("\n".join([
            f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}", f"PidFile {folder / 'sshd.pid'}",
            "AuthorizedKeysFile .ssh/authorized_keys", "PubkeyAuthentication yes", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "UsePAM no", "PermitRootLogin no", f"AllowUsers {user}",
            "Subsystem sftp internal-sftp", "MaxStartups 100:30:200", "MaxSessions 100", ""]))
        _run(str(SSHD), "-t", "-f", str(config))
        with open(folder / "sshd.log", "wb") as log:
            proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stdout=log, stderr=log,
                                    stdin=subprocess.DEVNULL)
        server = SshServer(user, port, key, folder)
        deadline = time.monotonic() + 30
        while True:  # until it accepts a login (it binds within a moment of starting)
            probe = server.ssh("true", timeout=15)
            if probe.returncode == 0:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd on 127.0.0.1:{port} did not accept a login: {probe.stderr.strip()}\n"
                                   f"{(folder / 'sshd.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield server
    finally:
        if proc is not None:
            _stop(proc)
        if added:
            uid = int(subprocess.run(["id", "-u", user], capture_output=True, text=True, check=False).stdout or -1)
            for pid in _user_pids(uid) if uid > 0 else []:  # a sudo or session a killed sshd left behind
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            subprocess.run(["userdel", "--force", user], capture_output=True, timeout=60, check=False)
        dropin.unlink(missing_ok=True)
        if made_privsep:
            with contextlib.suppress(OSError):
                PRIVSEP_DIR.rmdir()
        shutil.rmtree(folder, ignore_errors=True)
