#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sim_node
short_description: Build, reboot or remove a simulated node (a directory tree shaped like a real node's /sys and /proc)
description:
  - Builds, in one call, a directory tree that looks like a real GPU training node's C(/sys), C(/proc) and a little of
    C(/etc) (2x EPYC, Instinct GPUs with their KFD topology, ConnectX InfiniBand HCAs, NVMe drives, their IRQs), from
    a small spec. nodetune's tests, Molecule scenarios and the default lab inventory run against such trees
    (C(nodetune_root)) instead of a real machine; C(lstopo --input) reads them too.
  - The spec schema (sockets, cores, SMT, NUMA nodes per socket, cpufreq driver and governor, GPUs/NICs/NVMe with
    their PCI addresses, sysctls) is documented in the collection's C(plugins/module_utils/simnode/spec.py); the lab
    inventory's C(inventories/lab/specs/*.yml) are complete examples. Every field is validated; a bad spec fails
    with a message naming each field, its value and what is valid.
  - The tree's root holds C(.nodetune-simnode.json) with the normalised spec. The module never touches a directory
    without it, except an empty or missing one; C(/) is always refused.
  - I(state=present) is idempotent; with the same spec and generator the tree is left alone (C(changed=false)),
    including the changes roles made to it. I(state=rebooted) simulates a reboot, I(state=absent) deletes the tree.
version_added: "0.1.0"
author:
  - nodetune contributors (@nodetune)
options:
  spec:
    description:
      - The node spec as a mapping. Mutually exclusive with I(spec_file).
    type: dict
  spec_file:
    description:
      - A YAML (needs PyYAML where the module runs) or JSON file holding the node spec. Mutually exclusive with
        I(spec).
    type: path
  dest:
    description:
      - The directory that becomes the simulated node's root (the value to use as C(nodetune_root)).
      - Must be missing, empty, or a simulated node built earlier. C(/) is refused.
    type: path
    required: true
  state:
    description:
      - V(present) builds the tree, or rebuilds it when the spec (or the generator version) changed.
      - V(rebooted) simulates a reboot of an existing tree. Every runtime file under C(sys/), C(proc/) and C(run/) goes
        back to its boot value; C(etc/), C(usr/) and C(var/) are kept and act as at a real boot (C(etc/sysctl.d) values
        are applied, C(ATTR{}) assignments of C(etc/udev/rules.d) rules for NVMe block devices too, C(options nvme) in
        C(etc/modprobe.d) sets the NVMe queue count and depth, irqbalance runs again if it is enabled).
        Each reboot draws a new C(proc/sys/kernel/random/boot_id), as the kernel does at every boot (so the node's
        kept topology structure is read afresh); C(changed) is true when any other runtime file differed from its boot
        value.
      - V(absent) deletes the tree (only a tree with the marker file).
    type: str
    choices: [present, rebooted, absent]
    default: present
  force:
    description:
      - With I(state=present), rebuild the tree even when the spec is unchanged, discarding everything roles wrote
        into it (a fresh node). It never overrides the refusal to replace a directory that is not a simulated node.
    type: bool
    default: false
attributes:
  check_mode:
    description: Reports what would be built, rebooted (with the runtime paths that would be reset) or removed.
    support: full
  diff_mode:
    description: Trees hold tens of thousands of files; no diff is returned.
    support: none
notes:
  - Simulated service state for irqbalance is kept as files, the way systemd lays it out
    (C(etc/systemd/system/multi-user.target.wants/irqbalance.service) = enabled,
    C(run/systemd/units/invocation:irqbalance.service) = running); see C(plugins/module_utils/simnode/__init__.py).
  - A tree is plain files; kernel side effects of writes are emulated by the collection's root layer for trees
    carrying the marker (C(plugins/module_utils/simkernel.py)).
"""

EXAMPLES = r"""
- name: Build the lab's MI300X node under ./lab/mi300x-01
  nodetune.lab.sim_node:
    spec_file: inventories/lab/specs/mi300x.yml
    dest: "{{ playbook_dir }}/../lab/mi300x-01"

- name: Build a small node from an inline spec
  nodetune.lab.sim_node:
    dest: /tmp/nodes/tiny
    spec:
      name: tiny
      cpu: {model: EPYC 7763, sockets: 1, cores_per_socket: 8, smt: "on"}
      numa: {per_socket: 1}
      gpus:
        - {model: MI300X, bdf: "0000:05:00.0", numa_node: 0}
      nics:
        - {name: ib0, model: ConnectX-7, bdf: "0000:03:00.0", numa_node: 0}
      nvme:
        - {model: PM1733, bdf: "0000:41:00.0"}

- name: Simulate a reboot (runtime files back to boot values, persistent config applied)
  nodetune.lab.sim_node:
    dest: /tmp/nodes/tiny
    state: rebooted

- name: Remove the simulated node
  nodetune.lab.sim_node:
    dest: /tmp/nodes/tiny
    state: absent
"""

RETURN = r"""
changed:
  description: Whether the tree was (or, in check mode, would be) built, rebuilt, reset by the reboot or removed.
  type: bool
  returned: always
dest:
  description: The absolute path of the simulated node's root.
  type: str
  returned: always
  sample: /work/nodetune/lab/mi300x-01
action:
  description: >-
    What was done: V(built), V(rebuilt), V(unchanged), V(rebooted), V(removed) or V(absent) (nothing to remove).
  type: str
  returned: always
  sample: built
summary:
  description: Counts of the node (as discovery should find them), for I(state=present).
  type: dict
  returned: when state is present
  sample: {cpus: 384, cpus_online: 384, sockets: 2, numa_nodes: 2, gpus: 8, nics: 9, ib_devices: 8, nvme: 8,
           irqs: 1094, pci_devices: 92}
entries:
  description: Number of files, links and directories written (0 when nothing was written).
  type: int
  returned: when state is present
reset:
  description: For I(state=rebooted), the runtime paths (relative to dest) that differed from their boot value.
  type: list
  elements: str
  returned: when state is rebooted
  sample: [proc/sys/vm/dirty_ratio, sys/block/nvme0n1/queue/scheduler]
applied:
  description: For I(state=rebooted), what the boot applied from persistent files (sysctl.d, udev rules).
  type: list
  elements: str
  returned: when state is rebooted
  sample: ["sysctl vm.dirty_ratio=20"]
notes:
  description: For I(state=rebooted), persistent settings the simulation could not apply, and why.
  type: list
  elements: str
  returned: when state is rebooted
boot_restore:
  description:
    - For I(state=rebooted), what the simulated nodetune-restore.service did at boot (it runs when the unit is
      enabled and state files exist); C(pending) names the IRQs whose driver has not created them yet (mlx5
      completion vectors a NIC's C(comp_vectors_at_boot) leaves out), which are not failures.
  type: dict
  returned: when state is rebooted
  sample: {ran: true, applied: 214, pinned: [], failed: [], pending: []}
"""

from ansible_collections.nodetune.instinct.plugins.module_utils import bytecode_cache

bytecode_cache.install()  # first: the imports below then load from the node's bytecode cache

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.nodetune.lab.plugins.module_utils import simnode


def _present(module, dest, spec_source):
    try:
        spec = simnode.load_spec(spec_source)
    except simnode.SpecError as exc:
        module.fail_json(msg=str(exc), dest=dest)
    current = simnode.state_of(dest, spec)
    if current == "foreign":
        module.fail_json(msg="dest %s is a non-empty directory (or file) that is not a simulated node (no %s); "
                             "refusing to replace it - choose an empty or new directory" % (dest, simnode.MARKER),
                         dest=dest)
    summary = simnode.summary(spec)
    if current == "current" and not module.params["force"]:
        return dict(changed=False, action="unchanged", dest=dest, summary=summary, entries=0)
    action = "built" if current == "absent" else "rebuilt"
    if module.check_mode:
        return dict(changed=True, action=action, dest=dest, summary=summary, entries=0)
    result = simnode.build(spec, dest)
    return dict(changed=True, action=action, dest=result["dest"], summary=result["summary"],
                entries=result["entries"])


def _rebooted(module, dest):
    result = simnode.reboot(dest, check_only=module.check_mode)
    return dict(changed=bool(result["changed"]), action="rebooted", dest=result["dest"], reset=result["changed"],
                applied=result["applied"], notes=result["notes"], boot_restore=result["boot_restore"])


def _absent(module, dest):
    current = simnode.state_of(dest)
    if current == "absent":
        return dict(changed=False, action="absent", dest=dest)
    if current == "foreign":
        module.fail_json(msg="dest %s is not a simulated node (no %s); refusing to delete it"
                             % (dest, simnode.MARKER), dest=dest)
    if not module.check_mode:
        simnode.remove(dest)
    return dict(changed=True, action="removed", dest=dest)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            spec=dict(type="dict"),
            spec_file=dict(type="path"),
            dest=dict(type="path", required=True),
            state=dict(type="str", default="present", choices=["present", "rebooted", "absent"]),
            force=dict(type="bool", default=False),
        ),
        mutually_exclusive=[("spec", "spec_file")],
        required_if=[("state", "present", ("spec", "spec_file"), True)],
        supports_check_mode=True,
    )
    dest = module.params["dest"]
    state = module.params["state"]
    try:
        if state == "present":
            source = module.params["spec"] if module.params["spec"] is not None else module.params["spec_file"]
            result = _present(module, dest, source)
        elif state == "rebooted":
            result = _rebooted(module, dest)
        else:
            result = _absent(module, dest)
    except (simnode.SimNodeError, simnode.SpecError) as exc:
        module.fail_json(msg=str(exc), dest=dest)
    except OSError as exc:
        module.fail_json(msg="simulated node %s: %s failed: %s" % (dest, state, exc.strerror or exc), dest=dest)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
