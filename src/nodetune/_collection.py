"""Make ``ansible_collections.nodetune.instinct`` importable from the Python package.

The collection is the single home of the core code (Ansible ships module_utils to nodes from there), so the
package imports it rather than keeping a copy. In a checkout (``pip install -e .``) it sits at
``<repo>/collection``; installed with ``ansible-galaxy`` it is found on Ansible's collections path.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
COLLECTION_PARENT = REPO_ROOT / "collection"


def ensure_collection_importable() -> None:
    try:
        if importlib.util.find_spec("ansible_collections.nodetune.instinct") is not None:
            return
    except ModuleNotFoundError:
        pass
    candidates = [COLLECTION_PARENT]
    for entry in os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep):
        if entry:
            candidates.append(Path(entry))
    candidates.append(Path.home() / ".ansible" / "collections")
    for parent in candidates:
        if (parent / "ansible_collections" / "nodetune" / "instinct").is_dir():
            sys.path.insert(0, str(parent))
            importlib.invalidate_caches()
            # ansible_collections is a namespace package: a fresh search picks up the new path entry.
            sys.modules.pop("ansible_collections", None)
            return
