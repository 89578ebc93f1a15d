"""Reports land where users can write: verify from the collection installed READ-ONLY, run as a non-root user
(``nobody``, uid 65534), as in an execution environment. The default report folder (``out/reports``) is relative to the
folder ansible-playbook runs in, never inside the installed collection (it used to be ``role_path/../../out``:
inside the collection, where a read-only install or another user cannot write).

The user is switched with ``setpriv``, keeping only the capability to READ any file (``CAP_DAC_READ_SEARCH``):
this project's Python may live under ``/root`` (pyenv), which ``nobody`` cannot enter; writing still obeys the
file permissions, which is what the test is about.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.support.specs import small_mi250_spec as small_spec

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
USER = "nobody"


def as_nobody(*argv: str) -> list[str]:
    user = pwd.getpwnam(USER)
    return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
            "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", *argv]


def _can_run_as_nobody() -> str | None:
    """Why the test cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root to run ansible-playbook as the 'nobody' user (setpriv)"
    if not shutil.which("setpriv"):
        return "setpriv (util-linux) is not installed"
    try:
        pwd.getpwnam(USER)
    except KeyError:
        return f"no {USER!r} user on this machine"
    probe = subprocess.run(as_nobody(sys.executable, "-c", "import ansible, nodetune"),
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"{USER!r} cannot use this Python and its packages ({sys.executable}): {probe.stderr.strip()[-200:]}"
    return None


@pytest.fixture()
def scratch() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="nodetune-ro-"))
    folder.chmod(0o755)  # others may enter: the node tree and the work folder below belong to nobody
    try:
        yield folder
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(folder)], check=False)
        shutil.rmtree(folder, ignore_errors=True)


def test_verify_from_a_read_only_collection_as_a_non_root_user(scratch: Path) -> None:
    reason = _can_run_as_nobody()
    if reason:
        pytest.skip(reason)
    env_build = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    build = subprocess.run(["bash", str(REPO / "scripts" / "build_collection.sh"), str(scratch / "dist")],
                           cwd=REPO, env=env_build, capture_output=True, text=True, timeout=600, check=False)
    assert build.returncode == 0, build.stderr
    collections = scratch / "collections"
    (scratch / "empty.cfg").write_text("[defaults]\n")
    env_install = dict(env_build, ANSIBLE_CONFIG=str(scratch / "empty.cfg"), ANSIBLE_COLLECTIONS_PATH=str(collections))
    # not from the repository: its ansible.cfg's collections path already holds nodetune.instinct
    install = subprocess.run(["ansible-galaxy", "collection", "install", build.stdout.strip().splitlines()[-1],
                              "-p", str(collections)], cwd=scratch, env=env_install, capture_output=True, text=True,
                             timeout=600, check=False)
    assert install.returncode == 0, install.stdout + install.stderr
    assert (collections / "ansible_collections" / "nodetune" / "instinct" / "playbooks" / "verify.yml").is_file()
    subprocess.run(["chmod", "-R", "a-w,a+rX", str(collections)], check=True)  # installed read-only

    work = scratch / "work"
    node = scratch / "node"
    work.mkdir()
    simnode.build(small_spec(), str(node))
    (work / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = False\n")
    (work / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"ro-node": {
        "nodetune_root": str(node), "ansible_connection": "local",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}}))
    subprocess.run(["chown", "-R", f"{USER}:", str(work), str(node)], check=True)
    env = {"PATH": os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin", "HOME": str(work),
           "ANSIBLE_CONFIG": str(work / "ansible.cfg"), "ANSIBLE_COLLECTIONS_PATH": str(collections),
           "ANSIBLE_HOME": str(work / ".ansible"),
           "ANSIBLE_REMOTE_TMP": str(work / ".ansible" / "tmp"), "ANSIBLE_NOCOLOR": "1", "LANG": "C.UTF-8"}
    before = sorted(str(p) for p in collections.rglob("*"))

    verify = subprocess.run(as_nobody("env", "-i", *(f"{k}={v}" for k, v in env.items()),
                                      "ansible-playbook", "-i", "hosts.yml", "nodetune.instinct.verify"),
                            cwd=work, capture_output=True, text=True, timeout=600, check=False)
    assert verify.returncode == 0, verify.stdout[-4000:] + verify.stderr[-2000:]
    reports = work / "out" / "reports"
    assert (reports / "nodes" / "ro-node.json").is_file() and (reports / "junit.xml").is_file()
    assert (reports / "summary.json").stat().st_uid == pwd.getpwnam(USER).pw_uid
    assert sorted(str(p) for p in collections.rglob("*")) == before  # nothing written into the collection
