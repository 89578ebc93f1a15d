#!/usr/bin/python
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# ruff: noqa: E402  (Ansible module layout: the documentation strings come before the imports)
"""Test helper of the Molecule scenarios (not part of the collection): change a simulated node like an operator.

Why not ansible.builtin.copy: a real kernel answers a write with side effects (a new I/O scheduler resets
nr_requests, a moved IRQ changes its effective CPU, an onlined CPU updates cpu/online), and drift on a real node
comes with them. Writing through the collection's Root layer runs its simulated kernel, so the drift a scenario
injects looks like drift on a real node, not like a hand-edited text file.
"""

DOCUMENTATION = r"""
---
module: simnode_write
short_description: Write runtime attributes and service states of a simulated node through its simulated kernel
description:
  - Each of I(writes) goes through nodetune's C(Root.write), so the simulated kernel's side effects happen as on a
    real node; each of I(services) sets a simulated systemd unit state (enabled, active).
  - Only for simulated nodes (a tree with C(.nodetune-simnode.json)); never for a real root.
options:
  root:
    description: The simulated node's root.
    type: path
    required: true
  writes:
    description: Attribute writes in order, each C({path, value}) with C(path) relative to the root.
    type: list
    elements: dict
    default: []
  services:
    description: Unit name to the wanted state, for example C({irqbalance.service: {enabled: "yes", active: "yes"}}).
    type: dict
    default: {}
  faults:
    description:
      - Hardware and image faults to inject in place (the spec's C(faults) keys, for example C({pcie_acs: true})),
        through the lab's C(simnode.inject_faults): only the files those faults decide are rewritten, the rest of
        the node (tuning, other drift) is kept. The healthy defaults (C(pcie_acs: false), ...) repair them.
    type: dict
    default: {}
author:
  - nodetune contributors
"""

RETURN = r"""
before:
  description: Path (or unit) to the value before the change.
  type: dict
  returned: always
after:
  description: Path (or unit) to the value read back after the change.
  type: dict
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError
from ansible_collections.nodetune.lab.plugins.module_utils.simkernel import sim_root
from ansible_collections.nodetune.lab.plugins.module_utils.simnode import MARKER, SpecError, inject_faults
from ansible_collections.nodetune.lab.plugins.module_utils.simservices import SimServices


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", required=True),
            writes=dict(type="list", elements="dict", default=[]),
            services=dict(type="dict", default={}),
            faults=dict(type="dict", default={}),
        ),
        supports_check_mode=False,
    )
    path = module.params["root"]
    if not os.path.isfile(os.path.join(path, MARKER)):
        module.fail_json(msg=f"{path} is not a simulated node (no {MARKER})")
    root = sim_root(path)
    before, after = {}, {}
    try:
        for item in module.params["writes"]:
            rel, value = str(item["path"]).lstrip("/"), str(item["value"])
            before[rel] = root.read(rel)
            root.write(rel, value)
            after[rel] = root.read(rel)
        services = SimServices(root)
        for unit, wanted in module.params["services"].items():
            before[unit] = services.state(unit)
            services.set_state(unit, dict((k, str(v)) for k, v in wanted.items()))
            after[unit] = services.state(unit)
        if module.params["faults"]:
            result = inject_faults(path, module.params["faults"])
            before["faults"] = []  # the paths the faults rewrote or removed: none before
            after["faults"] = result["written"] + result["removed"]
    except (KeyError, NodeFileError, SpecError) as exc:
        module.fail_json(msg=f"simulated write failed: {exc}", before=before, after=after)
    module.exit_json(changed=before != after, before=before, after=after)


if __name__ == "__main__":
    main()
