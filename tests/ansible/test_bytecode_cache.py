"""The bytecode cache of the modules' imports on the node (module_utils/bytecode_cache.py, issue 13 item 6).

It is loaded code, so the tests prove both sides: a trusted entry for the exact source IS used (a planted entry
changes what runs), and an entry or folder that is not trusted, or a different source, is NOT used.
"""

from __future__ import annotations

import importlib
import json
import marshal
import os
import re
import subprocess
import sys
import zipfile
from importlib.util import MAGIC_NUMBER
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils import bytecode_cache
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.support.specs import small_spec

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "nt_cache_probe"


def make_payload(path: Path, value: str) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(PACKAGE + "/__init__.py", "")
        archive.writestr(PACKAGE + "/mod.py", f"VALUE = {value!r}\n")
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return Path(bytecode_cache.trusted_folder(str(tmp_path / "cache" / "bytecode")))


def load(archive: Path, folder: Path) -> tuple[object, bytecode_cache.PayloadFinder]:
    """Import the probe through a fresh finder, as a new module process would."""
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    finder = bytecode_cache.PayloadFinder(str(archive), str(folder), prefixes=(PACKAGE,))
    sys.meta_path.insert(0, finder)
    try:
        return importlib.import_module(PACKAGE + ".mod").VALUE, finder
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def entry_of(folder: Path) -> Path:
    (entry,) = folder.glob(PACKAGE + ".mod.py.*.pyc")
    return entry


def plant(entry: Path, source: str) -> None:
    """Replace an entry's code, keeping its (valid) header: what a writer of the folder could do."""
    digest = entry.name.split(".")[-3]
    entry.write_bytes(MAGIC_NUMBER + digest.encode() + marshal.dumps(compile(source, "planted", "exec")))


def test_a_miss_compiles_and_stores_then_the_next_process_loads_the_entry(tmp_path: Path, folder: Path) -> None:
    archive = make_payload(tmp_path / "p.zip", "from source")
    value, finder = load(archive, folder)
    assert value == "from source" and (finder.hits, finder.misses) == (0, 2)
    entry = entry_of(folder)
    assert entry.stat().st_mode & 0o777 == 0o600
    value, finder = load(archive, folder)
    assert value == "from source" and (finder.hits, finder.misses) == (2, 0)
    plant(entry, "VALUE = 'planted'")
    assert load(archive, folder)[0] == "planted"  # a trusted entry for this exact source is what runs


def test_an_entry_others_may_write_or_a_folder_others_may_read_is_not_used(tmp_path: Path, folder: Path) -> None:
    archive = make_payload(tmp_path / "p.zip", "from source")
    load(archive, folder)
    entry = entry_of(folder)
    plant(entry, "VALUE = 'planted'")
    entry.chmod(0o666)
    assert load(archive, folder)[0] == "from source"
    folder.chmod(0o755)
    assert bytecode_cache.trusted_folder(str(folder)) is None
    link = tmp_path / "link"
    link.symlink_to(folder)
    folder.chmod(0o700)
    assert bytecode_cache.trusted_folder(str(link)) is None
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # writable by all, no sticky bit: another user could swap the folder
    assert bytecode_cache.trusted_folder(str(shared / "bytecode")) is None


def test_a_changed_source_is_a_new_key_and_the_old_entry_goes(tmp_path: Path, folder: Path) -> None:
    load(make_payload(tmp_path / "p.zip", "one"), folder)
    old = entry_of(folder)
    value, finder = load(make_payload(tmp_path / "p.zip", "two"), folder)
    assert value == "two" and (finder.hits, finder.misses) == (1, 1)  # the package is unchanged
    assert not old.exists() and entry_of(folder) != old
    entry_of(folder).write_bytes(b"truncated")
    assert load(tmp_path / "p.zip", folder)[0] == "two"  # an unreadable entry is compiled again


def test_install_is_a_no_op_outside_a_payload_and_when_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert bytecode_cache.payload_archive(bytecode_cache.__file__) is None  # this checkout, not a zip
    assert bytecode_cache.install() is None
    monkeypatch.setenv(bytecode_cache.SWITCH, "0")
    assert bytecode_cache.install() is None
    assert not any(isinstance(f, bytecode_cache.PayloadFinder) for f in sys.meta_path)


# The real AnsiballZ wrappers of production modules, run the way Ansible runs them on a node. Run apart: Ansible's
# collection loader cannot take over ``ansible_collections`` once pytest imported it plainly.
BUILD = """
import json, sys
from ansible.executor.module_common import modify_module
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader, module_loader
from ansible.template import Templar

init_plugin_loader([sys.argv[1]])
module, args, out = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
found = module_loader.find_plugin_with_context(module)
built = modify_module(module_name=module, module_path=found.plugin_resolved_path, module_args=args,
                      templar=Templar(loader=DataLoader()), task_vars={"ansible_python_interpreter": sys.executable})
open(out, "wb").write(built.b_module_data)
"""


def test_the_real_module_payloads_use_the_cache_and_only_a_tune_run_writes_it(tmp_path: Path) -> None:
    node = tmp_path / "tiny"
    simnode.build(small_spec(), str(node))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    wrappers = {}
    for name, module, args in (("facts", "nodetune.instinct.topology_facts", {"root": str(node)}),
                               ("check", "nodetune.instinct.tune", {"root": str(node), "_ansible_check_mode": True}),
                               ("tune", "nodetune.instinct.tune", {"root": str(node)})):
        wrappers[name] = tmp_path / f"AnsiballZ_{name}.py"
        done = subprocess.run([sys.executable, "-c", BUILD, str(REPO / "collection"), module, json.dumps(args),
                               str(wrappers[name])], capture_output=True, text=True, timeout=300, check=False, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "cache"

    def run(name: str, **extra: str) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NODETUNE_BYTECODE")}
        env.update({bytecode_cache.FOLDER: str(folder)}, **extra)
        ran = subprocess.run([sys.executable, str(wrappers[name])], capture_output=True, text=True, timeout=300,
                             check=False, env=env, cwd=tmp_path)
        return json.loads(ran.stdout)

    facts = run("facts")
    assert not facts.get("failed"), facts
    for name in ("check", "tune"):
        assert not run(name, **{bytecode_cache.SWITCH: "0"}).get("failed")
    assert not run("check").get("failed")
    assert not folder.exists()  # switched off, read-only modules and check mode: nothing written
    assert not run("tune").get("failed")
    names = sorted(p.name for p in folder.iterdir())
    topology_entry = "ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology.py."
    assert any(n.startswith(topology_entry) for n in names)
    assert all(re.fullmatch(r"[\w.]+\.py\.[0-9a-f]{40}\.[\w-]+\.pyc", n) for n in names), names
    assert run("facts")["ansible_facts"] == facts["ansible_facts"]
    assert not run("tune").get("failed")
    assert sorted(p.name for p in folder.iterdir()) == names  # all hits: nothing new written
    (topology,) = folder.glob(topology_entry + "*")
    plant(topology, "raise RuntimeError('served from the cache')")
    assert "served from the cache" in json.dumps(run("facts"))  # the read-only module loads the tune run's entries
    topology.chmod(0o664)  # not trusted any more: compiled from the payload again
    assert run("facts")["ansible_facts"] == facts["ansible_facts"]
