# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""JSON files that a person can read and that cost little to write.

``json.dumps`` with ``indent`` runs the pure-Python encoder, several times slower than the C one, and nodetune's
big files (a node's report with ~1,700 findings, the checker's expected Settings) are written at every run. Here
each top-level key has its own line and each item of the one long list its own line, every line encoded by the C
encoder: still valid JSON, and one finding or Setting per line, which ``grep`` can use.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: they are postponed, so typing is never imported at run time
    from typing import Any, Dict


def one_per_line(document: Dict[str, Any], listed: str, sort_keys: bool = False, indent: int = 1,
                 ensure_ascii: bool = True) -> str:
    """``document`` as JSON text ending in a newline: a line per top-level key, and a line per item of
    ``document[listed]`` (a list). Keys keep their order unless ``sort_keys`` (which sorts nested keys too)."""
    encode = json.JSONEncoder(sort_keys=sort_keys, separators=(", ", ": "), ensure_ascii=ensure_ascii).encode
    pad = " " * indent
    keys = sorted(document) if sort_keys else list(document)
    lines = []
    for key in keys:
        value = document[key]
        name = encode(key)
        if key == listed and isinstance(value, list) and value:
            items = (",\n" + pad * 2).join(encode(item) for item in value)
            lines.append("%s%s: [\n%s%s\n%s]" % (pad, name, pad * 2, items, pad))
        else:
            lines.append("%s%s: %s" % (pad, name, encode(value)))
    return "{\n" + ",\n".join(lines) + "\n}\n" if lines else "{}\n"
