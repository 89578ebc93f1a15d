"""The AnsiballZ payload Ansible builds for a module: the files a node receives."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Run apart: Ansible's collection loader cannot take over ``ansible_collections`` once pytest imported it plainly.
PAYLOAD = """
import base64, io, json, re, sys, zipfile
from ansible.executor.module_common import modify_module
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader, module_loader
from ansible.template import Templar

init_plugin_loader([sys.argv[1]])
found = module_loader.find_plugin_with_context(sys.argv[2])
built = modify_module(module_name=sys.argv[2], module_path=found.plugin_resolved_path, module_args={},
                      templar=Templar(loader=DataLoader()), task_vars={"ansible_python_interpreter": sys.executable})
encoded = re.search(rb"zip_data='([A-Za-z0-9+/=]+)'", built.b_module_data).group(1)
archive = zipfile.ZipFile(io.BytesIO(base64.b64decode(encoded)))
print(json.dumps({name: base64.b64encode(archive.read(name)).decode() for name in archive.namelist()}))
"""


def payload_files(module: str) -> dict[str, bytes]:
    """The files of the AnsiballZ payload Ansible builds for ``module`` (what a node receives)."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    done = subprocess.run([sys.executable, "-c", PAYLOAD, str(REPO / "collection"), module], capture_output=True,
                          text=True, timeout=300, check=False, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return {name: base64.b64decode(data) for name, data in json.loads(done.stdout).items()}
