"""Make ``ansible_collections.nodetune.instinct`` importable from the Python package.

The collection is the single home of the core code (Ansible ships module_utils to nodes from there), so the
package imports it rather than keeping a copy. In a checkout (``pip install -e .``) it sits at
``<repo>/collection``; installed with ``ansible-galaxy`` it is found on Ansible's collections path.

Only ``os``/``sys`` here: this runs on every ``nodetune`` start, and ``pathlib``/``importlib.util`` cost
more start-up time than ``nodetune discover --json`` can spare (docs/benchmarks.md).
"""

from __future__ import annotations

import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTION_PARENT = os.path.join(REPO_ROOT, "collection")
_COLLECTION = os.path.join("ansible_collections", "nodetune", "instinct")


def _holds_collection(parent: str) -> bool:
    return os.path.isdir(os.path.join(parent, _COLLECTION))


def searched() -> list:
    """Where the collection is looked for beyond sys.path: the checkout, then Ansible's own collections paths
    (ANSIBLE_COLLECTIONS_PATH, then its defaults: ~/.ansible/collections, /usr/share/ansible/collections)."""
    candidates = [COLLECTION_PARENT]
    for entry in os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep):
        if entry:
            candidates.append(entry)
    candidates.append(os.path.join(os.path.expanduser("~"), ".ansible", "collections"))
    candidates.append("/usr/share/ansible/collections")
    return candidates


def ensure_collection_importable() -> None:
    if any(_holds_collection(entry or ".") for entry in sys.path if isinstance(entry, str)):
        return
    for parent in searched():
        if _holds_collection(parent):
            sys.path.insert(0, parent)
            # ansible_collections is a namespace package: a fresh search picks up the new path entry.
            sys.modules.pop("ansible_collections", None)
            return
