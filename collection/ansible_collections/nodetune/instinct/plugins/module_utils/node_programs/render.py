# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Renders a node program (nodetune-check, nodetune-restore) as the one standalone file apply writes to the node.

A program is a module of this package that imports the rules it shares with verify from parse.py and rules.py; its
rendered file is the program's docstring, then those two modules and the program itself, whole, less their own
docstrings, ``from __future__`` lines and imports of nodetune's modules. So the node runs the very functions verify
runs, and needs nothing but the Python standard library. A line scan, not ``ast``: every tune call renders both
programs, and tests/core/test_node_programs.py holds the scan to what ``ast`` finds in each module.
"""

from __future__ import annotations

from ansible_collections.nodetune.instinct.plugins.module_utils import parse
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import rules

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Tuple

#: What a program may import of nodetune's, inlined in this order before it.
INLINED = (parse, rules)
_OURS = "from ansible_collections.nodetune."
_FUTURE = "from __future__ import "


def program_text(program: ModuleType, shebang: str) -> str:
    """The node's standalone file of ``program`` (node_check or node_restore), run by the ``shebang`` line
    (interpreter.shebang)."""
    docstring, body = split_module(source(program))
    parts = [shebang, docstring, "# Rendered by nodetune from %s, whole: edit those modules, not this file.\n"
             % ", ".join(module.__name__.rpartition(".")[2] + ".py" for module in INLINED + (program,)),
             _FUTURE + "annotations\n"]
    for module in INLINED:
        parts.append("\n\n# ---------------------------------------------------------------- %s.py\n"
                     % module.__name__.rpartition(".")[2])
        parts.append(split_module(source(module))[1].strip("\n") + "\n")
    parts.append("\n\n# ---------------------------------------------------------------- the program\n")
    parts.append(body.strip("\n") + "\n")
    return "".join(parts)


def split_module(text: str) -> Tuple[str, str]:
    """(the module's docstring with its line end, the rest less the comment lines before the docstring,
    ``from __future__`` lines and imports of nodetune's modules). Our modules open with comment lines, then a
    docstring whose first line starts with triple quotes and whose last line ends with them."""
    lines = text.splitlines(True)
    start = 0
    while start < len(lines) and not lines[start].startswith('"""'):
        start += 1
    end = start
    while end < len(lines) and not (lines[end].rstrip().endswith('"""') and (end > start or len(
            lines[end].strip()) > 3)):
        end += 1
    body = []  # type: List[str]
    skipping = False
    for line in lines[end + 1:]:
        if skipping:
            skipping = line.strip() != ")"
            continue
        if line.startswith(_OURS):
            skipping = line.rstrip().endswith("(")
            continue
        if line.startswith(_FUTURE):
            continue
        body.append(line)
    return "".join(lines[start:end + 1]), "".join(body)


def source(module: ModuleType) -> str:
    """A module's source text. Inside an Ansible module payload it is imported from a zip archive: ask the loader,
    not the file system."""
    loader = getattr(module, "__loader__", None)
    get_source = getattr(loader, "get_source", None)
    if get_source is not None:
        text = get_source(module.__name__)
        if isinstance(text, bytes):  # ansible-test's import sanity loader gives bytes
            text = text.decode("utf-8")
        if text:
            return text
    with open(module.__file__ or "") as handle:
        return handle.read()
