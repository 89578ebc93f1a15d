"""nodetune: discover, plan, tune and verify AMD Instinct GPU training nodes.

The pure core lives in the Ansible collection (``nodetune.instinct``'s ``plugins/module_utils``) so that the
modules on the nodes, the filters on the controller and this package share one implementation.
"""

from nodetune._collection import ensure_collection_importable

ensure_collection_importable()

__version__ = "0.1.0"
