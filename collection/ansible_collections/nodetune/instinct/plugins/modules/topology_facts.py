#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: topology_facts
short_description: Discover a GPU training node's hardware topology (CPUs, NUMA, GPUs, NICs, NVMe, IRQs)
description:
  - Reads the node's C(/sys) and C(/proc) (or those of a captured or simulated node tree given as O(root)) and
    returns its Topology as the fact C(nodetune_topology), with CPUs and their cores, packages, NUMA nodes, SMT
    siblings; NUMA nodes with distances (sparse ids and CPU-less nodes included); every PCI function with its
    locality, link speed and width, ASPM state and BAR placement; AMD GPUs from PCI and the KFD topology
    (partitions, xGMI hive and peers) and NVIDIA GPUs; network interfaces with IPoIB mode and MTU; InfiniBand HCAs
    with their ports; NVMe namespaces with scheduler, C(nr_requests) and hardware queue count; every IRQ of
    C(/proc/interrupts) with its owning device, affinity and whether the kernel manages it; cpufreq, cpuidle, kernel
    command line, IOMMU, PCIe ASPM policy, irqbalance and the sysctls nodetune tunes.
  - The schema is the stable interface documented in nodetune's C(docs/topology.md) (C(schema) is 1).
  - Read-only; runs the same in check mode. A subsystem the node does not have (no GPU, no InfiniBand, no NVMe on
    a VM) is normal; it is listed in C(absent), never an error. Files it could not read are listed in C(warnings).
version_added: "0.1.0"
author:
  - nodetune contributors (@nodetune)
options:
  root:
    description:
      - The directory to treat as the node's C(/). Real nodes use C(/); tests, Molecule and the lab inventory use a
        simulated or captured node tree (the C(nodetune_root) variable).
      - It must be a directory holding C(sys/) or C(proc/); anything else fails with a message saying so.
    type: path
    default: /
notes:
  - Paths are resolved inside O(root) the way C(openat2(RESOLVE_IN_ROOT)) does; absolute symlinks in a captured tree
    cannot reach the controller's or the node's own C(/sys).
  - The fact can be large on big nodes (one entry per IRQ). Filter it on the controller, for example with
    C(nodetune_topology.irqs | selectattr('kind', 'eq', 'nic_comp')).
seealso:
  - module: nodetune.instinct.tune
  - module: nodetune.instinct.verify
attributes:
  check_mode:
    support: full
    description: Discovery only reads; check mode changes nothing.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
  facts:
    support: full
    description: Returns the fact C(nodetune_topology).
"""

EXAMPLES = r"""
- name: Discover the node
  nodetune.instinct.topology_facts:

- name: Discover a simulated node of the lab inventory
  nodetune.instinct.topology_facts:
    root: "{{ nodetune_root | default('/') }}"

- name: Show the GPUs and their NUMA nodes
  ansible.builtin.debug:
    msg: "{{ nodetune_topology.gpus | map(attribute='bdf') | zip(nodetune_topology.gpus
             | map(attribute='numa_node')) | list }}"

- name: Stop when the node has no GPU
  ansible.builtin.assert:
    that: "'gpus' not in nodetune_topology.absent"
    fail_msg: "{{ inventory_hostname }} has no GPU (absent: {{ nodetune_topology.absent | join(', ') }})"
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to the host's variables.
  returned: always
  type: dict
  contains:
    nodetune_topology:
      description:
        - The node's Topology (docs/topology.md, schema 1). Lists are sorted (CPUs by id, PCI functions by address,
          IRQs by number), so two discoveries of an unchanged node are identical.
        - CPU sets are sorted lists of ints; C(null) means the node does not expose a value; NUMA node C(-1) is the
          kernel's "unknown".
      returned: always
      type: dict
      contains:
        schema:
          description: Schema version of this dict.
          type: int
          sample: 1
        root:
          description: The root the node was read from.
          type: str
          sample: /
        cpus:
          description: One entry per CPU directory (C(id), C(online), C(hotpluggable), C(core_id), C(package), C(die),
            C(numa_node), C(thread_siblings)).
          type: list
          elements: dict
          sample: [{id: 0, online: true, hotpluggable: false, core_id: 0, package: 0, die: 0, numa_node: 0,
                    thread_siblings: [0, 96]}]
        cpu_lists:
          description: The kernel's CPU lists C(online), C(offline), C(possible), C(present), C(isolated),
            C(nohz_full) (null where the node has no such file).
          type: dict
        smt:
          description: C(control) (C(on), C(off), C(forceoff), C(notsupported), C(notimplemented) or null), C(active),
            C(threads_per_core).
          type: dict
          sample: {control: "on", active: true, threads_per_core: 2}
        numa_nodes:
          description: C(id), C(cpus), C(distances) (keyed by node id as a string), C(memory_kb), C(has_cpus).
          type: list
          elements: dict
        pci_devices:
          description: C(bdf), C(vendor), C(device), C(class), C(driver), C(numa_node), C(local_cpus), C(link),
            C(aspm), C(msi_irqs), C(bars_above_4g), C(bar_bytes_max).
          type: list
          elements: dict
        gpus:
          description: C(bdf), C(vendor) (C(amd) or C(nvidia)), C(device), C(name), C(numa_node), C(local_cpus),
            C(driver), C(drm_card), C(render_node), C(kfd_nodes), C(partitions), C(gpu_ids), C(hive_id),
            C(xgmi_peers), C(hwmon), C(link).
          type: list
          elements: dict
        nics:
          description: C(name), C(bdf), C(driver), C(numa_node), C(mtu), C(type), C(operstate), C(ipoib_mode),
            C(ib_device), C(ib_port), C(speed_mbps).
          type: list
          elements: dict
        ib_devices:
          description: C(name), C(bdf), C(numa_node), C(fw_ver), C(node_guid), C(ports) (C(port), C(state),
            C(phys_state), C(rate), C(rate_gbps), C(link_layer)), C(netdevs).
          type: list
          elements: dict
        block_devices:
          description: C(name), C(kind) (C(nvme) or C(disk)), C(controller), C(bdf), C(numa_node), C(scheduler),
            C(schedulers), C(nr_requests), C(hw_queues), C(rotational), C(read_ahead_kb), C(max_hw_sectors_kb).
          type: list
          elements: dict
        irqs:
          description: C(irq), C(chip), C(hwirq), C(name), C(device), C(counts_total), C(smp_affinity_list),
            C(effective_affinity_list), C(node), C(managed), C(kind) (C(nic_comp), C(nic_async), C(nvme_queue),
            C(nvme_admin), C(gpu), C(other)).
          type: list
          elements: dict
        cpufreq:
          description: C(driver), C(governors) (governor to CPUs), C(available_governors), C(amd_pstate_status),
            C(epp), C(available_epp), C(boost).
          type: dict
        cpuidle:
          description: C(driver) and C(states) (C(index), C(name), C(disabled_cpus), C(cpus_with_state)).
          type: dict
        kernel:
          description: C(cmdline) and C(release).
          type: dict
        iommu:
          description: C(present), C(devices), C(groups).
          type: dict
        pcie_aspm:
          description: C(policy) and C(available).
          type: dict
        irqbalance:
          description: C(installed), C(enabled), C(config_file), C(banned_cpulist).
          type: dict
        sysctl:
          description: Current values of the sysctls nodetune tunes, as the kernel prints them (absent keys omitted).
          type: dict
          sample: {vm.dirty_ratio: "20", kernel.numa_balancing: "1"}
        absent:
          description: Subsystems the node does not have (C(cpus), C(cpufreq), C(cpuidle), C(numa), C(pci), C(gpus),
            C(infiniband), C(nics), C(nvme), C(irqs), C(kfd), C(smt_control)).
          type: list
          elements: str
          sample: [gpus, infiniband, kfd]
        warnings:
          description: What discovery could not read or had to infer (never fatal).
          type: list
          elements: str
"""

from ansible_collections.nodetune.instinct.plugins.module_utils import bytecode_cache

bytecode_cache.install()  # first: the imports below then load from the node's bytecode cache

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.structure import StructureStore
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover


def main():
    module = AnsibleModule(
        argument_spec=dict(root=dict(type="path", default="/")),
        supports_check_mode=True,
    )
    try:
        # the structure the tune module kept, where still valid (read only: a facts module writes nothing)
        topology = discover(module.params["root"], structure=StructureStore(module.params["root"]))
    except NodeFileError as exc:
        module.fail_json(msg="nodetune topology_facts: %s" % exc, root=module.params["root"])
    module.exit_json(changed=False, ansible_facts=dict(nodetune_topology=topology))


if __name__ == "__main__":
    main()
