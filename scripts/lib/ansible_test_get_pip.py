"""Write the local stand-in for the pip bootstrap script that ``ansible-test --venv`` wants.

ansible-test bootstraps pip into each empty sanity-test venv by running ``get-pip.py``, which it downloads from a
host that is not reachable from our machines and caches at ``~/.ansible/test/cache/get_pip_<ver>.py``. The version
it asks for comes from its own ``python_requirements.get_venv_packages``; we ask the same function, so an
ansible-core upgrade that moves the pin keeps working. The stand-in does what get-pip.py does with the arguments
ansible-test passes (pip options and ``pip==<ver>``, plus ``--no-setuptools --no-wheel``): ensurepip, then a pip
install of the requested pins from the package index.

Idempotent: rewrites the file only when its content differs. Prints the path.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

STANDIN = '''\
"""Local stand-in for get-pip.py, written by nodetune's scripts/lib/ansible_test_get_pip.py (pip {version})."""
import subprocess
import sys

# get-pip.py options that mean "do not also install setuptools/wheel": our stand-in never does.
GET_PIP_ONLY = ("--no-setuptools", "--no-wheel")


def main():
    pip_args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY]
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
    return subprocess.call([sys.executable, "-m", "pip", "install"] + pip_args)


if __name__ == "__main__":
    sys.exit(main())
'''


def requested_pip_version(python_version: str) -> str:
    from ansible_test._internal.python_requirements import get_venv_packages

    return get_venv_packages(types.SimpleNamespace(version=python_version))["pip"]


def main() -> int:
    python_version = sys.argv[1] if len(sys.argv) > 1 else f"{sys.version_info[0]}.{sys.version_info[1]}"
    version = requested_pip_version(python_version)
    # The same name ansible_test/_util/target/setup/requirements.py looks for.
    path = Path.home() / ".ansible" / "test" / "cache" / f"get_pip_{version.replace('.', '_')}.py"
    content = STANDIN.format(version=version)
    if not path.is_file() or path.read_text() != content:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
