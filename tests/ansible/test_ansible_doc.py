"""``ansible-doc`` works for every module and every filter of the collection.

The names come from the code, not from a list here: every ``plugins/modules/*.py`` and every filter that a
``FilterModule`` in ``plugins/filter/*.py`` exports. One ``ansible-doc --json`` call per plugin type, from the
repository root (its ansible.cfg puts the collection on the collections path).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "collection" / "ansible_collections" / "nodetune" / "instinct" / "plugins"
COLLECTION = "nodetune.instinct"


def module_names() -> list[str]:
    return sorted(p.stem for p in (PLUGINS / "modules").glob("*.py") if not p.stem.startswith("_"))


def filter_names() -> list[str]:
    names = []
    for path in sorted((PLUGINS / "filter").glob("*.py")):
        plugin = importlib.import_module(f"ansible_collections.nodetune.instinct.plugins.filter.{path.stem}")
        if hasattr(plugin, "FilterModule"):
            names.extend(plugin.FilterModule().filters())
    return sorted(names)


def ansible_doc(kind: str, names: list[str]) -> tuple[dict[str, Any], str]:
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_NOCOLOR="1")
    result = subprocess.run(["ansible-doc", "-t", kind, "--json", *(f"{COLLECTION}.{n}" for n in names)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout), result.stderr


@pytest.mark.parametrize("kind", ["module", "filter"])
def test_every_plugin_has_documentation(kind: str) -> None:
    names = module_names() if kind == "module" else filter_names()
    assert names, f"no {kind} plugins found under {PLUGINS}"
    docs, stderr = ansible_doc(kind, names)
    missing = [n for n in names if f"{COLLECTION}.{n}" not in docs]
    assert not missing, f"ansible-doc -t {kind} found no documentation for {missing}: {stderr[-2000:]}"
    for name in names:
        entry = docs[f"{COLLECTION}.{name}"]
        doc = entry.get("doc") or {}
        assert doc.get("short_description"), f"{name}: no short_description"
        assert doc.get("description"), f"{name}: no description"
        assert entry.get("examples"), f"{name}: no EXAMPLES"
        if kind == "filter":
            assert doc.get("positional") or doc.get("options"), f"{name}: its input is not documented"
        assert "ERROR" not in stderr and "could not" not in stderr.lower(), stderr[-2000:]
