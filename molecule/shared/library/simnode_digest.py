#!/usr/bin/python
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# ruff: noqa: E402  (Ansible module layout: the documentation strings come before the imports)
"""Test helper of the Molecule scenarios (not part of the collection): a digest of a whole node tree.

Why: "check mode writes nothing" and "a refused run leaves the node untouched" are claims about every byte under
the root - content, mode, symlink targets, files created or removed (a journal, a lock) - so the scenarios compare
a manifest of the whole tree taken before with one taken after, and name the paths that differ.
"""

DOCUMENTATION = r"""
---
module: simnode_digest
short_description: Digest of every entry under a directory tree; optionally saved and compared (test helper)
description:
  - Walks I(root) without following symlinks and records, per entry, its type, mode and content hash (file), its
    target (symlink) or just that it is a directory. Never writes under I(root).
  - With I(manifest) the per-entry records are saved to that file (outside the tree); with I(compare_to) the tree is
    compared with a manifest saved earlier and the differing paths are returned.
options:
  root:
    description: The tree to digest.
    type: path
    required: true
  manifest:
    description: Save the manifest (JSON) to this file. Must not be inside I(root).
    type: path
  compare_to:
    description: A manifest saved earlier; return C(identical) and C(differences).
    type: path
author:
  - nodetune contributors
"""

RETURN = r"""
digest:
  description: sha256 over the sorted manifest.
  type: str
  returned: always
entries:
  description: Number of entries under the root.
  type: int
  returned: always
identical:
  description: Whether the tree equals the manifest given in I(compare_to).
  type: bool
  returned: when compare_to is set
differences:
  description: Up to 50 differing entries, each "added PATH", "removed PATH" or "changed PATH (before -> after)".
  type: list
  elements: str
  returned: when compare_to is set
"""

import hashlib
import json
import os
import stat

from ansible.module_utils.basic import AnsibleModule


def manifest_of(root):
    entries = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            info = os.lstat(full)
            mode = f"{stat.S_IMODE(info.st_mode):o}"
            if stat.S_ISLNK(info.st_mode):
                entries[rel] = "link " + os.readlink(full)
            elif stat.S_ISDIR(info.st_mode):
                entries[rel] = "dir " + mode
            else:
                with open(full, "rb") as handle:
                    entries[rel] = f"file {mode} {hashlib.sha256(handle.read()).hexdigest()[:16]}"
    return entries


def differences(before, after, limit=50):
    out = []
    for path in sorted(set(before) | set(after)):
        if path not in before:
            out.append(f"added {path}")
        elif path not in after:
            out.append(f"removed {path}")
        elif before[path] != after[path]:
            out.append(f"changed {path} ({before[path]} -> {after[path]})")
        if len(out) >= limit:
            out.append("... (more differences not shown)")
            break
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", required=True),
            manifest=dict(type="path"),
            compare_to=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    root = os.path.realpath(module.params["root"])
    if not os.path.isdir(root):
        module.fail_json(msg=f"root {root} is not a directory")
    entries = manifest_of(root)
    text = json.dumps(entries, sort_keys=True)
    result = dict(changed=False, digest=hashlib.sha256(text.encode()).hexdigest(), entries=len(entries))
    if module.params["compare_to"]:
        try:
            with open(module.params["compare_to"]) as handle:
                before = json.load(handle)
        except (OSError, ValueError) as exc:
            module.fail_json(msg="cannot read the manifest {}: {}".format(module.params["compare_to"], exc))
        result["differences"] = differences(before, entries)
        result["identical"] = not result["differences"]
    if module.params["manifest"]:
        path = os.path.realpath(module.params["manifest"])
        if path == root or path.startswith(root + os.sep):
            module.fail_json(msg=f"the manifest {path} must not be inside the tree {root}")
        with open(path, "w") as handle:
            handle.write(text)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
