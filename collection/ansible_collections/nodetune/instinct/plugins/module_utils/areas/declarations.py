# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Every nodetune role and variable, declared once.

An area's name is its role's name and its tag; ``finding_prefix`` is the prefix of its check ids (kept as the
stable ids were published: ``irq.``, ``ib.``, ``rocm.``), ``builder`` the module_utils module whose ``build()``
turns its variables into Settings (in the order of ``AREAS``), ``severity`` the severity of its drift findings,
``order`` where its Settings are applied (lower first) and ``steps`` the order of its check ids within the area
(setting.ORDER: SMT before IRQ affinity, governor before EPP, scheduler before nr_requests, irqbalance stopped
before IRQs are pinned). ``check_ids`` are every check id the area reports (stable: waivers and reports name them;
check_ids.py reads them here), ``check_id_pattern`` the form of its open-ended ones with how to say it
(``sysctl.<key>``), ``galaxy_tags`` its role's Galaxy tags.
Each variable has its type, default, choices and description as in an Ansible argument spec.

From this one declaration:

- ``scripts/gen_role_docs.py`` writes each role's ``defaults/main.yml``, ``meta/argument_specs.yml``,
  ``meta/main.yml`` and ``README.md`` (and an area role's ``tasks/main.yml``), the area tags of the tune and verify
  roles' ``meta: noop`` task, and ``areas/builders.py``, the static imports of the builders that tuning.py runs; a test
  fails when they differ (adding an area: docs/areas.md);
- the action plugins take each role's variables for a host over these defaults, coerce and validate them as
  Ansible validates a role's arguments, and refuse any ``nodetune_*`` variable that nothing declares (the
  playbooks', the lab's and the registered ones are declared below too), naming the nearest real one;
- on the node, each area builder refuses a variable it does not know (``area_variables``).

Standard library only: this module is part of the payload of the modules sent to the nodes.
"""

from __future__ import absolute_import, division, print_function

import difflib
import unicodedata
from typing import Any, Dict, Iterable, List, Optional, Tuple

COMMON_VARIABLES = {
    'nodetune_root': {
        'type': 'str',
        'default': '/',
        'description': [
            (
                "The directory the node's C(/) is at. Real nodes use C(/); simulated lab nodes and tests use"
                ' a tree.'
            ),
        ],
    },
    'nodetune_layout_policy': {
        'type': 'dict',
        'default': {},
        'description': [
            (
                'Layout planner policy, for example C({housekeeping: 1, ranks: per_gcd}) (see '
                'docs/layout.md); unknown keys and malformed cpulists are refused before any write, and so '
                'is a C(key=value) string such as C(housekeeping=1) (a mapping is required). The SMT '
                "and irqbalance choices come from the C(smt) and C(irq_affinity) roles' variables."
            ),
        ],
    },
}

ROLES = {}

ROLES['smt'] = {
    'kind': 'area',
    'order': 10,
    'builder': 'smt',
    'setting_area': 'smt',
    'finding_prefix': 'smt',
    'check_ids': ['smt.control', 'smt.siblings_offline'],
    'galaxy_tags': ['cpu', 'smt'],
    'severity': 'high',
    'short_description': 'SMT siblings offlined per the planned layout, or smt/control=off (opt-in)',
    'description': [
        (
            "AMD's guides run Instinct training nodes with SMT off (best done in the BIOS). From Linux, "
            'nodetune either offlines the secondary thread of every core that the layout planner chose (the '
            'lowest-numbered thread of each C(thread_siblings_list) stays online, so CPU0 is never '
            'offlined), or writes C(off) to C(/sys/devices/system/cpu/smt/control), which offlines all '
            'secondary threads at once.'
        ),
        (
            "The articles' C(for i in {8..15}) loop is wrong on almost every machine: sibling numbering is "
            'C(N) and C(N+cores) on most EPYC servers. nodetune never uses a fixed range.'
        ),
        (
            'Offlining CPUs is disruptive (processes and IRQs on them move), so it needs '
            'C(nodetune_smt_offline_allowed=true). The default policy C(keep) changes nothing.'
        ),
        (
            'Offlined CPUs are brought back online at boot by the kernel; C(nodetune-restore.service) '
            're-applies them.'
        ),
    ],
    'variables': {
        'nodetune_smt_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                'Tune this area. When false the area is left exactly as it is.',
            ],
        },
        'nodetune_smt_policy': {
            'type': 'str',
            'default': 'keep',
            'choices': ['keep', 'offline_siblings', 'control_off'],
            'description': [
                (
                    'C(keep) leaves SMT as it is. C(offline_siblings) offlines the secondary threads the '
                    'layout planner chose (through C(cpuN/online)). C(control_off) writes C(off) to '
                    'C(smt/control).'
                ),
                (
                    'The layout planner reads the same variable, so NIC IRQs and GPU ranks are placed on the'
                    ' threads that stay online.'
                ),
            ],
        },
        'nodetune_smt_offline_allowed': {
            'type': 'bool',
            'default': False,
            'description': [
                (
                    'Opt-in for the disruptive part. Without it, a policy that would take CPUs offline is '
                    'refused before any write, with a message saying how many CPUs it would offline.'
                ),
            ],
        },
    },
}

ROLES['cpu'] = {
    'kind': 'area',
    'order': 20,
    'steps': ['cpu.governor', 'cpu.epp', 'cpu.idle_state'],
    'builder': 'cpu',
    'setting_area': 'cpu',
    'finding_prefix': 'cpu',
    'check_ids': ['cpu.governor', 'cpu.epp', 'cpu.idle_state'],
    'galaxy_tags': ['cpu', 'cpufreq'],
    'severity': 'medium',
    'short_description': 'cpufreq governor, amd-pstate aware EPP and idle states disabled by name',
    'description': [
        (
            'The governor and EPP are written per online CPU (after the SMT step of the layout), idle states'
            ' through C(cpuN/cpuidle/stateK/disable), chosen by C(stateK/name) because index 2 is not C2 on '
            'every machine. None of these survives a reboot, so nodetune re-applies them at boot with '
            'C(nodetune-restore.service).'
        ),
        (
            'In amd-pstate active mode (driver C(amd-pstate-epp)) the C(performance) governor forces EPP to '
            'C(performance) and the kernel refuses other values (EBUSY): such a request is refused before '
            'any write.'
        ),
        (
            'A node without cpufreq (VM, driver not loaded) or '
            'without cpuidle gets a note, not an error.'
        ),
    ],
    'variables': {
        'nodetune_cpu_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                'Tune this area. When false the area is left exactly as it is.',
            ],
        },
        'nodetune_cpu_governor': {
            'type': 'str',
            'default': 'performance',
            'description': [
                (
                    "cpufreq governor for every online CPU (the articles' C(cpupower frequency-set -g "
                    'performance)).'
                ),
                (
                    "Must be one of the node's C(scaling_available_governors); in amd-pstate active mode "
                    'only C(performance) and C(powersave) exist. C(null) leaves the governor alone.'
                ),
            ],
        },
        'nodetune_cpu_epp': {
            'type': 'str',
            'default': None,
            'description': [
                (
                    'Energy/performance preference (C(energy_performance_preference)) for every online CPU, '
                    "one of the node's C(energy_performance_available_preferences) (typically C(default), "
                    'C(performance), C(balance_performance), C(balance_power), C(power)).'
                ),
                (
                    'Leave C(null) with the C(performance) governor in amd-pstate active mode (EPP is then '
                    'forced to C(performance)); set it with the C(powersave) governor to steer amd-pstate.'
                ),
            ],
        },
        'nodetune_cpu_idle_states_disabled': {
            'type': 'list',
            'elements': 'str',
            'default': ['C2'],
            'description': [
                (
                    'Names of idle states (C(cpuN/cpuidle/stateK/name)) to disable on every online CPU. '
                    "AMD's Instinct guides disable C2 (C(cpupower idle-set -d 2)) for low wake-up latency."
                ),
                (
                    'A name the node does not have is skipped with a warning. C([]) leaves idle states '
                    'alone.'
                ),
            ],
        },
    },
}

ROLES['irq_affinity'] = {
    'kind': 'area',
    'order': 40,
    'steps': ['irq.irqbalance', 'irq.nic_local', 'irq.gpu_local'],
    'builder': 'irq',
    'setting_area': 'irq',
    'finding_prefix': 'irq',
    'check_ids': ['irq.irqbalance', 'irq.nic_local', 'irq.gpu_local', 'irq.managed'],
    'galaxy_tags': ['irq', 'networking'],
    'severity': 'high',
    'short_description': 'irqbalance out of the way; NIC completion and GPU IRQs pinned to local cores',
    'description': [
        (
            'The layout planner puts each NIC completion vector (C(mlx5_comp*)) on one physical core of the '
            "NIC's own NUMA node, primary SMT thread only, skipping the async vector and the housekeeping "
            'cores. B(By default the vectors spread round-robin over every other core of the node, the GPU '
            'rank cores included) (layout policy C(irq_cores: 0)), as mlnx-tools\' '
            "C(set_irq_affinity_bynode.sh) does: no core takes more than ceil(vectors / cores), where "
            'reserving a few cores away from the ranks (C(irq_cores: auto) or a number) piles dozens of '
            'vectors on each of them; a rank loses a little CPU time to the few it carries. The articles\' '
            "loop that writes CPU 1 to every mlx5 IRQ is wrong, and mlnx-tools' C(set_irq_affinity.sh) is "
            'not NUMA-aware. See docs/layout.md.'
        ),
        (
            'Each GPU\'s C(amdgpu) vector (one per PCI function, not kernel-managed) goes to a core of its '
            "own rank, on its GPU's NUMA node, one GPU per core: the amdgpu handler runs there and the KFD "
            'event work it queues on a CPU next to it (same L3), beside the rank they wake (C(irq.gpu_local)). '
            "Left alone it stays wherever the kernel's default or irqbalance put it, possibly another NUMA "
            'node.'
        ),
        (
            'B(By default irqbalance is stopped and disabled) (C(nodetune_irqbalance_mode=disable)): it '
            'rewrites hand-set affinities at its next rebalance, so deterministic pinning needs it out of '
            'the way. This is the documented default of the pinned layout; C(ban) keeps irqbalance running '
            'but off the pinned CPUs instead.'
        ),
        (
            'Kernel-managed IRQs (NVMe queues, many multi-queue drivers) cannot be moved (EIO/EPERM): they '
            'are reported, never written. Affinities do not survive a reboot; C(nodetune-restore.service) '
            're-applies them at boot, finding each IRQ by its action name (numbers change between boots).'
        ),
        (
            'mlx5 creates its completion vectors on first use since Linux 6.5 (commit f14c1a14e632), so after '
            'a reboot only those in use exist: the others are pending, not errors, for the boot restore and for '
            'verify (C(not_applicable)), and C(nodetune-irq-repin.timer) pins each one within 10 s of its '
            'creation, once (a later move is drift for verify). See docs/tuning.md.'
        ),
    ],
    'variables': {
        'nodetune_irq_affinity_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                'Tune this area. When false the area is left exactly as it is.',
            ],
        },
        'nodetune_irqbalance_mode': {
            'type': 'str',
            'default': 'disable',
            'choices': ['disable', 'ban', 'leave'],
            'description': [
                (
                    'C(disable) stops and disables C(irqbalance.service) (the default for deterministic '
                    'pinning), once C(nodetune_irqbalance_stop_allowed) allows it.'
                ),
                (
                    'C(ban) keeps irqbalance running and sets C(IRQBALANCE_BANNED_CPULIST) to the CPUs that '
                    'take pinned NIC IRQs and C(IRQBALANCE_ARGS) to C(--policyscript=/usr/local/sbin/'
                    'nodetune-irqbalance-policy), which tells irqbalance C(ban=true) for each pinned IRQ, named '
                    'by its action in C(/etc/nodetune/irqbalance-banned) (without it irqbalance would move them '
                    'off the banned CPUs; C(--banirq=N) went stale at the next boot, as IRQ numbers change), in '
                    'C(/etc/default/irqbalance) (Debian family) or C(/etc/sysconfig/irqbalance) (RHEL, '
                    'SUSE). irqbalance reads the file when it starts, so restart it once yourself.'
                ),
                (
                    'C(leave) does not touch irqbalance; pinned affinities then only last until its next '
                    'rebalance.'
                ),
                'Nothing is done for irqbalance where it is not installed.',
            ],
        },
        'nodetune_irqbalance_stop_allowed': {
            'type': 'bool',
            'default': False,
            'description': [
                (
                    'Opt-in for the disruptive part of C(disable). Stopping a service is opt-in (the safety '
                    'rules), so with C(false) a node whose irqbalance is running or enabled gets a warning, '
                    'and neither irqbalance nor the NIC and GPU IRQs are touched (pins would not survive '
                    "irqbalance's next rebalance); verify reports the area as not applicable with the "
                    'reason. Nodes where irqbalance is already stopped and disabled, or not installed, are '
                    'pinned either way.'
                ),
            ],
        },
        'nodetune_irq_pin_nic': {
            'type': 'bool',
            'default': True,
            'description': [
                (
                    'Pin NIC completion vectors as the layout planner placed them '
                    '(C(/proc/irq/N/smp_affinity_list)).'
                ),
            ],
        },
        'nodetune_irq_pin_gpu': {
            'type': 'bool',
            'default': True,
            'description': [
                (
                    "Pin each GPU's C(amdgpu) vector to the core of its rank the layout planner chose "
                    '(C(irq.gpu_local)); re-applied at boot like the NIC vectors. C(false) leaves the GPU '
                    'vectors where they are.'
                ),
            ],
        },
        'nodetune_os_family': {
            'type': 'str',
            'default': None,
            'description': [
                (
                    'Which irqbalance configuration file C(ban) edits when the node has none yet; one of '
                    'C(Debian) (C(/etc/default/irqbalance)), C(RedHat) or C(Suse) '
                    '(C(/etc/sysconfig/irqbalance)); any other value is refused before anything is written.'
                ),
                (
                    'C(null) uses the file the node already has, else the Debian location. Facts are not '
                    'gathered, so set it per group on RHEL-family fleets.'
                ),
            ],
        },
    },
}

ROLES['infiniband'] = {
    'kind': 'area',
    'order': 50,
    'steps': ['ib.mtu'],
    'builder': 'infiniband',
    'setting_area': 'infiniband',
    'finding_prefix': 'ib',
    'check_ids': ['ib.mtu'],  # and its caps and thresholds as sysctl.<key>, as the sysctl area's
    'galaxy_tags': ['infiniband', 'networking'],
    'severity': 'medium',
    'short_description': 'IPoIB MTU by mode, socket buffer caps and neighbour table thresholds',
    'description': [
        (
            'IPoIB in datagram mode carries at most the IB link MTU minus the 4-byte IPoIB header: 4092 with'
            " a 4K IB MTU, 2044 with 2K. The articles' C(ifconfig ib0 mtu 4096) fails with EINVAL, so 4096 "
            'is refused with the reason. Connected mode allows up to 65520, but ConnectX-4 and later use '
            "Enhanced IPoIB, which is datagram only. The subnet manager's broadcast group MTU can cap it "
            'further.'
        ),
        (
            "Changing an MTU briefly drops the interface's traffic, so it is opt-in: C(nodetune_ipoib_mtu) "
            'is C(null) (left alone) by default, and a change needs '
            'C(nodetune_ipoib_mtu_change_allowed=true).'
        ),
        (
            'C(net.core.rmem_max)/C(wmem_max) only cap what applications ask for with SO_RCVBUF/SO_SNDBUF; '
            "TCP autotuning is bounded by C(net.ipv4.tcp_rmem)/C(tcp_wmem) (set those with the sysctl role's"
            ' C(nodetune_sysctl_extra) if you need them). Sysctls persist in C(/etc/sysctl.d/).'
        ),
    ],
    'variables': {
        'nodetune_infiniband_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                'Tune this area. When false the area is left exactly as it is.',
            ],
        },
        'nodetune_ipoib_mtu': {
            'type': 'raw',
            'default': None,
            'description': [
                (
                    "MTU of every IPoIB interface, an integer or C(max) (the largest the interface's mode "
                    'allows, IB link MTU - 4 in datagram mode, 65520 in connected mode). C(null) leaves MTUs'
                    ' alone.'
                ),
                (
                    "Values above the mode's limit are refused before any write (4096 in datagram mode is "
                    'the classic mistake, use 4092 or C(max)); values below 1280 are refused too (IPv6 needs'
                    ' 1280).'
                ),
            ],
        },
        'nodetune_ipoib_mtu_change_allowed': {
            'type': 'bool',
            'default': False,
            'description': [
                (
                    "Opt-in for changing an interface's MTU (it briefly "
                    "drops the interface's traffic)."
                ),
            ],
        },
        'nodetune_ib_link_mtu': {
            'type': 'int',
            'default': 4096,
            'choices': [256, 512, 1024, 2048, 4096],
            'description': [
                (
                    'The InfiniBand link MTU of the fabric (set by the subnet manager); the IPoIB datagram '
                    'limit is this minus 4.'
                ),
            ],
        },
        'nodetune_net_core_rmem_max': {
            'type': 'int',
            'default': 2097152,
            'description': [
                (
                    "C(net.core.rmem_max), the cap of SO_RCVBUF (the articles' 2 MiB). C(null) leaves it "
                    'alone.'
                ),
                (
                    'A cap is "at least": a node whose own cap is larger keeps it (nodetune never lowers '
                    'it). A node without an InfiniBand/RDMA device gets nothing from this area.'
                ),
            ],
        },
        'nodetune_net_core_wmem_max': {
            'type': 'int',
            'default': 2097152,
            'description': [
                (
                    "C(net.core.wmem_max), the cap of SO_SNDBUF (the articles' 2 MiB). C(null) leaves it "
                    'alone.'
                ),
                'At least, like C(nodetune_net_core_rmem_max).',
            ],
        },
        'nodetune_neigh_gc_thresh1': {
            'type': 'int',
            'default': None,
            'description': [
                'C(net.ipv4.neigh.default.gc_thresh1); C(null) leaves it alone.',
            ],
        },
        'nodetune_neigh_gc_thresh2': {
            'type': 'int',
            'default': None,
            'description': [
                'C(net.ipv4.neigh.default.gc_thresh2); C(null) leaves it alone.',
            ],
        },
        'nodetune_neigh_gc_thresh3': {
            'type': 'int',
            'default': 10240,
            'description': [
                (
                    'C(net.ipv4.neigh.default.gc_thresh3), the hard cap of neighbour (ARP) entries (the '
                    "articles' 10240, for large fabrics)."
                ),
                (
                    "nodetune keeps C(gc_thresh1 <= gc_thresh2 <= gc_thresh3), comparing with the node's "
                    'current values for the ones left C(null), and refuses an order that breaks it.'
                ),
            ],
        },
    },
}

ROLES['nvme'] = {
    'kind': 'area',
    'order': 30,
    'steps': ['nvme.scheduler', 'nvme.nr_requests'],
    'builder': 'nvme',
    'setting_area': 'nvme',
    'finding_prefix': 'nvme',
    'check_ids': ['nvme.scheduler', 'nvme.nr_requests', 'nvme.module_options'],
    'galaxy_tags': ['nvme', 'storage'],
    'severity': 'medium',
    'short_description': 'NVMe I/O scheduler, nr_requests within its limit, nvme module options',
    'description': [
        (
            'The scheduler is set first, then C(nr_requests): switching the scheduler resets C(nr_requests).'
            ' With C(none) the most C(nr_requests) can be is the hardware tag depth (1023 on a default '
            "NVMe), so the articles' C(echo 1024 > .../nr_requests) after C(echo none > .../scheduler) fails"
            ' with EINVAL; with an elevator the limit is 2048. Both are checked per device before any write,'
            ' and persisted with a udev rule in C(/etc/udev/rules.d/).'
        ),
        (
            "There is no C(queue/nr_queues) file (the articles' C(echo 32 > .../nr_queues) writes nowhere): "
            'NVMe hardware queues are fixed when the driver probes the device. They are shaped with the nvme'
            ' module options (C(write_queues), C(poll_queues), C(io_queue_depth)) in C(/etc/modprobe.d/), '
            'which take effect at the next driver load; nodetune reports C(reboot_required) and never '
            'pretends they applied.'
        ),
    ],
    'variables': {
        'nodetune_nvme_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                'Tune this area. When false the area is left exactly as it is.',
            ],
        },
        'nodetune_nvme_devices': {
            'type': 'str',
            'default': 'nvme*n*',
            'description': [
                (
                    'Shell-style pattern of the NVMe namespaces '
                    '(C(/sys/block) names) to tune.'
                ),
            ],
        },
        'nodetune_nvme_scheduler': {
            'type': 'str',
            'default': 'none',
            'description': [
                (
                    "I/O scheduler of each selected namespace (the articles' C(none)). It must be one the "
                    'device offers (C(queue/scheduler) lists them, e.g. C([none] mq-deadline kyber bfq)); '
                    "load an elevator's module to offer more. C(null) leaves the scheduler alone."
                ),
            ],
        },
        'nodetune_nvme_nr_requests': {
            'type': 'raw',
            'default': 'max',
            'description': [
                (
                    "C(queue/nr_requests) of each selected namespace, an integer from 4 to the scheduler's "
                    'limit, or C(max) (the limit itself). C(null) leaves it alone.'
                ),
                (
                    'The limit is the hardware tag depth with C(none) (1023 by default) and 2048 with an '
                    "elevator; the articles' 1024 with C(none) is refused with that explanation. C(max) is "
                    'the corrected default.'
                ),
            ],
        },
        'nodetune_nvme_module_options': {
            'type': 'dict',
            'default': {},
            'description': [
                (
                    'nvme driver options written to C(/etc/modprobe.d/nodetune-nvme.conf), for example '
                    'C({io_queue_depth: 1024, poll_queues: 4}). Valid keys are C(io_queue_depth) (2..4095), '
                    'C(write_queues) and C(poll_queues) (0..number of CPUs).'
                ),
                (
                    'They take effect at the next driver load (reboot); the run reports C(reboot_required). '
                    'C({}) writes no file.'
                ),
            ],
        },
    },
}

ROLES['sysctl'] = {
    'kind': 'area',
    'order': 60,
    'builder': 'sysctl',
    'setting_area': 'sysctl',
    'finding_prefix': 'sysctl',
    # one id per key: sysctl.<key> (vm.dirty_ratio, nodetune_sysctl_extra's keys)
    'check_ids': [],
    'check_id_pattern': (r'^sysctl\.[a-z0-9_]+(\.[a-z0-9_\-]+)+$', 'sysctl.<key> such as sysctl.vm.dirty_ratio'),
    'galaxy_tags': ['sysctl', 'kernel'],
    'severity': 'low',
    'short_description': (
        'VM writeback ratios, NUMA balancing and extra '
        'sysctls, at runtime and in sysctl.d'
    ),
    'description': [
        (
            'Each value is written under C(/proc/sys) and persisted in C(/etc/sysctl.d/), which '
            'systemd-sysctl applies at boot.'
        ),
        (
            'C(vm.dirty_ratio) and C(vm.dirty_bytes) are two views of one limit (the kernel zeroes one when '
            'the other is written), likewise the background pair. Each pair takes one form: the one given is '
            'written and verified, the other is neither, and giving both (or either key through '
            'C(nodetune_sysctl_extra)) is refused. To use the bytes form, set the ratio variable to C(null). '
            'The background limit must stay below the limit.'
        ),
        (
            "The ratio defaults 20/10 are the kernel's own defaults. On large-memory nodes (1-2 TiB) they "
            'allow hundreds of GiB of dirty page cache before writeback starts; docs/tuning.md ("Writeback '
            'limits") gives a bytes-based setting for such nodes and where it comes from.'
        ),
    ],
    'variables': {
        'nodetune_sysctl_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                'Tune this area. When false the area is left exactly as it is.',
            ],
        },
        'nodetune_vm_dirty_ratio': {
            'type': 'int',
            'default': 20,
            'description': [
                (
                    'C(vm.dirty_ratio), percent of memory (1-100) that may be dirty before writers are '
                    "throttled (20 is the kernel's own default). Exclusive with C(nodetune_vm_dirty_bytes). "
                    'C(null) leaves it alone. Where a site sysctl.d file read after nodetune\'s sets '
                    'C(vm.dirty_bytes), nodetune leaves the pair alone and warns (that file would win at boot).'
                ),
            ],
        },
        'nodetune_vm_dirty_background_ratio': {
            'type': 'int',
            'default': 10,
            'description': [
                (
                    'C(vm.dirty_background_ratio) (0-100), where background writeback starts (10 is the '
                    "kernel's own default); must be below C(nodetune_vm_dirty_ratio). C(null) leaves it alone."
                ),
            ],
        },
        'nodetune_vm_dirty_bytes': {
            'type': 'int',
            'default': None,
            'description': [
                (
                    "C(vm.dirty_bytes), dirty memory in bytes (at least 8192, the kernel's two-page minimum) at "
                    'which writers are throttled. Exclusive with C(nodetune_vm_dirty_ratio), which must then be '
                    'C(null). For a 1-2 TiB training node, e.g. C(34359738368) (32 GiB), see docs/tuning.md. '
                    'C(null) (the default) uses the ratio.'
                ),
            ],
        },
        'nodetune_vm_dirty_background_bytes': {
            'type': 'int',
            'default': None,
            'description': [
                (
                    'C(vm.dirty_background_bytes), dirty memory in bytes at which background writeback starts; '
                    'below C(nodetune_vm_dirty_bytes). Exclusive with C(nodetune_vm_dirty_background_ratio), '
                    'which must then be C(null). E.g. C(4294967296) (4 GiB) on a 1-2 TiB node. C(null) (the '
                    'default) uses the ratio.'
                ),
            ],
        },
        'nodetune_kernel_numa_balancing': {
            'type': 'int',
            'default': 0,
            'description': [
                (
                    "C(kernel.numa_balancing), 0 or 1. AMD's MI300X guide turns automatic NUMA balancing off"
                    ' (0) for pinned ranks. C(null) leaves it alone.'
                ),
            ],
        },
        'nodetune_sysctl_extra': {
            'type': 'dict',
            'default': {},
            'description': [
                (
                    'More sysctls, key to value, for example C({"net.ipv4.tcp_rmem": "4096 87380 '
                    '16777216"}). Each key must exist under C(/proc/sys) on the node; values are single '
                    'lines.'
                ),
                (
                    'Where the kernel stores another value than written (C(fs.pipe-max-size) rounds up to a power '
                    'of two pages, C(kernel.sched_rr_timeslice_ms) 0 means 100) nodetune sets, and verifies, '
                    'the stored value and says so. Caps (C(*mem_max), C(somaxconn), C(fs.file-max), the max '
                    'field of C(tcp_rmem)/C(tcp_wmem) ...) are at least the node\'s own: never lowered.'
                ),
            ],
        },
    },
}

ROLES['rocm_env'] = {
    'kind': 'area',
    'order': 70,
    'builder': 'rocm_env',
    'setting_area': 'rocm_env',
    'finding_prefix': 'rocm',
    'check_ids': ['rocm.env', 'rocm.ranks', 'rocm.bind'],
    'galaxy_tags': ['rocm', 'rccl'],
    'severity': 'medium',
    'short_description': (
        'RCCL/ROCr/PyTorch environment with real names, the '
        "articles' scenario profiles, per-rank binding"
    ),
    'description': [
        (
            "The environment is built from a scenario profile (C(nodetune_rocm_profile)), then this node's "
            'NIC lists from its Layout (C(nodetune_rocm_layout_env)), then your own C(nodetune_rocm_env) on '
            "top, every value checked against nodetune's catalogue of what RCCL, ROCr, HIP and PyTorch "
            'really read (docs/rocm.md). It is written to C(/etc/rccl.conf) (RCCL reads its KEY=VALUE lines '
            'verbatim and never lets them override the environment; C(NCCL_*)/C(RCCL_*) names only), a '
            "login-shell profile script (single-quoted values) and an environment file for systemd's "
            'C(EnvironmentFile=) and Slurm job scripts (double-quoted values). No profile and no variables -'
            ' no env file.'
        ),
        (
            'Names from the articles that nothing reads are refused with the real name (C(RCCL_ALGO) -> '
            'C(NCCL_ALGO), C(RCCL_BUFFSIZE) -> C(NCCL_BUFFSIZE), C(RCCL_DEBUG) -> C(NCCL_DEBUG)...), or with'
            ' why they have no effect (C(NCCL_TIMEOUT): the collective timeout is set in code, '
            'C(init_process_group(timeout=...)); C(HSA_AMD_ENABLE_ASYNC_IO), C(AMD_ZSTD_ACCELERATION)...; '
            'C(HCCL_OVER_OFI) belongs to Habana Gaudi). Values RCCL would misread are refused too '
            '(C(NCCL_BUFFSIZE=4M) reads as 4 bytes, C(NCCL_NET_GDR_LEVEL=phb) is ignored: the level names '
            'are case-sensitive).'
        ),
        (
            'Where the Layout has GPU ranks, the rank table (C(/etc/nodetune/ranks.json)) and the launcher '
            'C(nodetune-bind) are written: C(nodetune-bind -- python train.py) reads LOCAL_RANK (or '
            "SLURM_LOCALID) and runs the command on its GPU's CPUs and NUMA memory node, with its "
            "OMP_NUM_THREADS and the node's NIC lists (the same on every rank; a value the job set wins)."
        ),
    ],
    'variables': {
        'nodetune_rocm_env_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                'Tune this area. When false the area is left exactly as it is.',
            ],
        },
        'nodetune_rocm_profile': {
            'type': 'str',
            'default': 'none',
            'choices': [
                'none',
                'single_node_small',
                'single_node_large',
                'multi_node',
                'mixed_precision',
                'multi_node_stable',
            ],
            'description': [
                (
                    'A scenario from the articles, with the names RCCL reads - C(single_node_small) (< 1B '
                    'parameters): C(NCCL_PROTO=LL), C(NCCL_BUFFSIZE=1048576); C(single_node_large) (1-10B): '
                    'C(NCCL_PROTO=LL128), C(NCCL_ALGO=Tree), C(NCCL_BUFFSIZE=4194304); C(multi_node) (> '
                    '10B): C(NCCL_PROTO=LL128), C(NCCL_ALGO=Ring), C(NCCL_BUFFSIZE=8388608); '
                    'C(mixed_precision) (FP16/FP8): C(NCCL_PROTO=Simple), C(NCCL_ALGO=Ring), '
                    "C(NCCL_BUFFSIZE=2097152); C(multi_node_stable) (the third article's deadlock fix): "
                    'C(NCCL_ALGO=Ring), C(NCCL_BUFFSIZE=8388608), C(NCCL_DEBUG=WARN). C(none) sets nothing.'
                ),
                (
                    'LL128 is used by RCCL only on topologies on its list unless '
                    'C(RCCL_LL128_FORCE_ENABLE=1) is set: the run warns about it and does not set it for '
                    'you.'
                ),
            ],
        },
        'nodetune_rocm_env': {
            'type': 'dict',
            'default': {},
            'description': [
                (
                    "Your variables, name to value, on top of the profile and the Layout's values, for "
                    'example C({NCCL_MIN_NCHANNELS: 112, NCCL_DEBUG: WARN}). Names must be in the catalogue '
                    '(docs/rocm.md); values are checked (lists, enums, plain decimal integers, 0/1 flags; a '
                    'YAML C(true) for a flag is written as 1) and must be single lines.'
                ),
            ],
        },
        'nodetune_rocm_env_policy': {
            'type': 'str',
            'default': 'error',
            'choices': ['error', 'warn'],
            'description': [
                (
                    'What a wrong or unknown name gets - C(error) refuses the run, C(warn) keeps it with a '
                    'warning. Invalid values are refused either way.'
                ),
            ],
        },
        'nodetune_rocm_layout_env': {
            'type': 'list',
            'elements': 'str',
            'default': ['NCCL_IB_HCA', 'NCCL_SOCKET_IFNAME'],
            'description': [
                (
                    "Which NIC lists to take from this node's Layout (every usable HCA and fabric netdev, "
                    'exact-match C(=) lists), into the env files when they are written, and the same '
                    'lists into every rank of the rank table (RCCL needs all ranks of a node to see the same '
                    'NICs; nodetune-bind never overrides a value the job set). A name you set in '
                    'C(nodetune_rocm_env) wins '
                    "over the Layout's. Drop C(NCCL_SOCKET_IFNAME) where the IPoIB interfaces carry no IP "
                    "address (RCCL's bootstrap needs one)."
                ),
            ],
        },
        'nodetune_rocm_bind': {
            'type': 'bool',
            'default': True,
            'description': [
                (
                    'Write the rank table and the C(nodetune-bind) '
                    'launcher where the Layout has GPU ranks.'
                ),
            ],
        },
        'nodetune_rocm_bind_memory_policy': {
            'type': 'str',
            'default': 'preferred',
            'choices': ['preferred', 'membind', 'interleave', 'none'],
            'description': [
                (
                    "The NUMA memory policy C(nodetune-bind) gives each rank (C(numactl), where installed; a job "
                    'overrides it with C(--memory-policy)) - C(preferred): memory from the NUMA node of the '
                    "rank's GPU first, from the other nodes when it is full, never an out-of-memory kill for that; "
                    'C(membind): from that node only (an allocation fails once it is full: on an MI250 host in '
                    'NPS4 a node holds an eighth of the memory); C(interleave): spread over the NUMA nodes of the '
                    "rank's socket; C(none): the kernel's default (first touch)."
                ),
            ],
        },
        'nodetune_rocm_profile_file': {
            'type': 'str',
            'default': '/etc/profile.d/nodetune-rocm.sh',
            'description': [
                "The login-shell profile script (C(export NAME='value') lines).",
                (
                    'Refused when it names an existing file nodetune did not create (other than this default), '
                    'a directory or a link; a new file may be created only in /etc, /etc/nodetune/..., '
                    '/etc/profile.d, /etc/default, /etc/sysconfig, /usr/local/bin, /usr/local/sbin, '
                    '/usr/local/etc/... or /opt/<dir>/...'
                ),
            ],
        },
        'nodetune_rocm_rccl_conf_file': {
            'type': 'str',
            'default': '/etc/rccl.conf',
            'description': [
                (
                    'The RCCL configuration file (C(NAME=value) lines, '
                    'C(NCCL_*) and C(RCCL_*) names only).'
                ),
                (
                    'Refused when it names an existing file nodetune did not create (other than this default), '
                    'a directory or a link; a new file may be created only in /etc, /etc/nodetune/..., '
                    '/etc/profile.d, /etc/default, /etc/sysconfig, /usr/local/bin, /usr/local/sbin, '
                    '/usr/local/etc/... or /opt/<dir>/...'
                ),
            ],
        },
        'nodetune_rocm_env_file': {
            'type': 'str',
            'default': '/etc/nodetune/rocm.env',
            'description': [
                (
                    'The environment file (C(NAME="value") lines) for systemd\'s C(EnvironmentFile=) and '
                    'Slurm job scripts (C(set -a; . /etc/nodetune/rocm.env; set +a)).'
                ),
                (
                    'Refused when it names an existing file nodetune did not create (other than this default), '
                    'a directory or a link; a new file may be created only in /etc, /etc/nodetune/..., '
                    '/etc/profile.d, /etc/default, /etc/sysconfig, /usr/local/bin, /usr/local/sbin, '
                    '/usr/local/etc/... or /opt/<dir>/...'
                ),
            ],
        },
        'nodetune_rocm_ranks_file': {
            'type': 'str',
            'default': '/etc/nodetune/ranks.json',
            'description': [
                (
                    'The rank table C(nodetune-bind) reads (one entry '
                    'per local rank, from the Layout).'
                ),
                (
                    'Refused when it names an existing file nodetune did not create (other than this default), '
                    'a directory or a link; a new file may be created only in /etc, /etc/nodetune/..., '
                    '/etc/profile.d, /etc/default, /etc/sysconfig, /usr/local/bin, /usr/local/sbin, '
                    '/usr/local/etc/... or /opt/<dir>/...'
                ),
            ],
        },
        'nodetune_rocm_bind_file': {
            'type': 'str',
            'default': '/usr/local/bin/nodetune-bind',
            'description': [
                (
                    'The launcher (a standalone Python 3 script,'
                    ' standard library only).'
                ),
                (
                    'Refused when it names an existing file nodetune did not create (other than this default), '
                    'a directory or a link; a new file may be created only in /etc, /etc/nodetune/..., '
                    '/etc/profile.d, /etc/default, /etc/sysconfig, /usr/local/bin, /usr/local/sbin, '
                    '/usr/local/etc/... or /opt/<dir>/...'
                ),
            ],
        },
    },
}

ROLES['gpu'] = {
    'kind': 'area',
    'order': 75,
    'steps': ['gpu.compute_partition', 'gpu.memory_partition', 'gpu.power_cap', 'gpu.perf_level',
              'gpu.determinism_clock'],
    'builder': 'gpu',
    'setting_area': 'gpu',
    'finding_prefix': 'gpu',
    'check_ids': ['gpu.compute_partition', 'gpu.memory_partition', 'gpu.power_cap', 'gpu.perf_level',
                  'gpu.determinism_clock'],
    'galaxy_tags': ['gpu', 'rocm'],
    'severity': 'medium',
    'short_description': 'AMD GPU performance determinism, power cap, compute and memory partitions (opt-in)',
    'description': [
        (
            "Performance determinism as C(rocm-smi --setperfdeterminism) sets it (rocm_smi_lib's "
            'rsmi_perf_determinism_mode_set): C(perf_determinism) to C(power_dpm_force_performance_level), '
            'then C(s 1 <MHz>) and C(c) to C(pp_od_clk_voltage). The power cap through hwmon C(power1_cap) '
            '(microwatts, within C(power1_cap_min) and C(power1_cap_max)). The compute and memory partitions '
            'of MI300-series GPUs (C(current_compute_partition), C(current_memory_partition)).'
        ),
        (
            'Everything is off by default. A partition switch is disruptive and needs '
            'C(nodetune_gpu_partition_allowed=true) too: a compute partition switch is refused while KFD '
            'processes are open (amdgpu refuses it with EBUSY; nodetune names the PIDs first), and a memory '
            'partition is a request amdgpu applies when the driver reloads, reported as C(reboot_required). '
            'Every previous value is journaled and a revert puts it back, the level before the clock.'
        ),
        (
            'amdgpu resets all of these when it loads; nodetune does not re-apply them at boot, so verify '
            'reports them after a reboot until the next apply. See docs/rocm.md, "GPU area".'
        ),
    ],
    'variables': {
        'nodetune_gpu_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                'Tune this area. When false the area is left exactly as it is.',
            ],
        },
        'nodetune_gpu_perf_determinism': {
            'type': 'bool',
            'default': False,
            'description': [
                (
                    'Put every AMD GPU in performance determinism at C(nodetune_gpu_perf_determinism_mhz) '
                    '(C(false) leaves the performance level and clocks alone).'
                ),
            ],
        },
        'nodetune_gpu_perf_determinism_mhz': {
            'type': 'int',
            'default': None,
            'description': [
                (
                    'The maximum GFX clock of performance determinism, in MHz. C(null) takes the clock AMD '
                    'validates for the model (MI300X: 1900, as its pre-training validation runs '
                    'C(rocm-smi --setperfdeterminism 1900)); other models need it set.'
                ),
                (
                    "It must lie in the GPU's GFX clock range (C(pp_od_clk_voltage)'s C(OD_RANGE), or the "
                    'levels of C(pp_dpm_sclk)): others are refused before any write, naming the range.'
                ),
            ],
        },
        'nodetune_gpu_power_cap_w': {
            'type': 'int',
            'default': None,
            'description': [
                (
                    'Power cap of every AMD GPU in watts, written to hwmon C(power1_cap) in microwatts. It '
                    "must lie within the GPU's C(power1_cap_min) and C(power1_cap_max) (750 W on MI300X), "
                    'else it is refused before any write. C(null) leaves the cap alone.'
                ),
            ],
        },
        'nodetune_gpu_compute_partition': {
            'type': 'str',
            'default': None,
            'choices': [None, 'SPX', 'DPX', 'TPX', 'QPX', 'CPX'],
            'description': [
                (
                    'Compute partition of every MI300-series GPU; it must be one the GPU lists in '
                    'C(available_compute_partition) for its memory partition. Refused while KFD processes '
                    'are open. Needs C(nodetune_gpu_partition_allowed). C(null) leaves it alone.'
                ),
            ],
        },
        'nodetune_gpu_memory_partition': {
            'type': 'str',
            'default': None,
            'choices': [None, 'NPS1', 'NPS2', 'NPS3', 'NPS4', 'NPS6', 'NPS8'],
            'description': [
                (
                    'Memory partition of every MI300-series GPU, one of C(available_memory_partition). amdgpu '
                    'takes it as a request that applies when the driver reloads: the run reports '
                    'C(reboot_required) and verify checks the current mode until then. Needs '
                    'C(nodetune_gpu_partition_allowed). C(null) leaves it alone.'
                ),
            ],
        },
        'nodetune_gpu_partition_allowed': {
            'type': 'bool',
            'default': False,
            'description': [
                (
                    'Opt-in for the disruptive part: without it a compute or memory partition that differs '
                    "from the GPU's is refused before any write, naming the GPUs and the switch."
                ),
            ],
        },
    },
}

ROLES['limits'] = {
    'kind': 'area',
    'order': 72,  # its files are independent of each other and of the other areas' settings
    'builder': 'limits',
    'setting_area': 'limits',
    'finding_prefix': 'limits',
    'check_ids': ['limits.pam', 'limits.systemd', 'limits.unit', 'limits.effective'],
    'galaxy_tags': ['limits', 'rdma'],
    'severity': 'medium',
    'short_description': 'memlock unlimited (and nofile) for login sessions, systemd services and slurmd (opt-in)',
    'description': [
        (
            'RDMA pins job memory, which the kernel charges against the locked-memory limit (RLIMIT_MEMLOCK), '
            "so jobs need C(memlock unlimited) (AMD's RCCL guides: C(ulimit -l unlimited)). nodetune writes "
            'its own files: C(/etc/security/limits.d/99-nodetune-limits.conf) (pam_limits, for login '
            'sessions), C(/etc/systemd/system.conf.d/99-nodetune-limits.conf) with C(DefaultLimitMEMLOCK) '
            '(for services) and, for each unit in C(nodetune_limits_units), '
            'C(/etc/systemd/system/<unit>.d/nodetune-limits.conf) with C(LimitMEMLOCK).'
        ),
        (
            'None of them changes a running process: pam_limits applies them at the next login, systemd '
            'reads them at C(systemctl daemon-reload) (or C(daemon-reexec)) and a service gets them when it is '
            'restarted. nodetune reloads and restarts nothing; verify (C(limits.effective)) reports a limit '
            "that is configured but not in effect as drift naming the reload or restart it needs, from the "
            "manager's value (C(systemctl show)) and the unit's main process (C(/proc/<pid>/limits)), and a "
            'file read after nodetune\'s that sets another value as drift naming that file. With the area on, '
            'its findings replace C(health.memlock). See docs/tuning.md, "Limits".'
        ),
        (
            'Off by default: it sets a site-wide policy (every login, every service) and takes effect only at '
            'the next login, reload or restart. Revert removes the files (and the drop-in directories it made).'
        ),
    ],
    'variables': {
        'nodetune_limits_enabled': {
            'type': 'bool',
            'default': False,
            'description': [
                'Tune this area (opt-in). When false the area is left exactly as it is.',
            ],
        },
        'nodetune_limits_memlock': {
            'type': 'str',
            'default': 'unlimited',
            'description': [
                (
                    'Max locked memory: C(unlimited), or a size in KiB as limits.conf takes it (C(1) to '
                    'C(18014398509481983), e.g. C(67108864) for 64 GiB). Written to the limits.d file for each '
                    'domain (soft and hard), and as C(infinity) or C(<KiB>K) to C(DefaultLimitMEMLOCK) and the '
                    "units' C(LimitMEMLOCK). C(null) leaves memlock alone (no systemd file)."
                ),
            ],
        },
        'nodetune_limits_nofile': {
            'type': 'int',
            'default': None,
            'description': [
                (
                    'Max open files for login sessions (limits.d, soft and hard), from 1 to the node\'s '
                    'C(fs.nr_open): above it setrlimit fails and pam_limits refuses the login, so it is refused '
                    "before any write, and so is C(unlimited). Services keep their units' C(LimitNOFILE). "
                    'C(null) (default) leaves nofile alone.'
                ),
            ],
        },
        'nodetune_limits_domains': {
            'type': 'list',
            'elements': 'str',
            'default': ['*', 'root'],
            'description': [
                (
                    'The limits.conf domains the limits.d lines are written for: C(*) (every user without a line '
                    'of their own), user names, C(@group). C(root) is in the default because Debian\'s and '
                    "Ubuntu's pam_limits do not apply C(*) to root (upstream's does). C([]) writes no limits.d "
                    'file.'
                ),
            ],
        },
        'nodetune_limits_systemd_default': {
            'type': 'bool',
            'default': True,
            'description': [
                (
                    "Write C(DefaultLimitMEMLOCK) to system.conf.d: every service's default, for the services "
                    'that start jobs without a C(LimitMEMLOCK) of their own.'
                ),
            ],
        },
        'nodetune_limits_units': {
            'type': 'list',
            'elements': 'str',
            'default': [],
            'description': [
                (
                    'Service units that start jobs, e.g. C([slurmd.service]): each gets a drop-in with '
                    'C(LimitMEMLOCK), which wins over the default and over the unit file. A name that is not a '
                    "systemd service unit name is refused; a unit the node does not have gets a warning (its "
                    'drop-in takes effect once it is installed). Restart them yourself after C(systemctl '
                    'daemon-reload).'
                ),
            ],
        },
    },
}

ROLES['kernel_cmdline'] = {
    'kind': 'area',
    'order': 73,  # the drop-in (73) before the boot entries (74): revert removes it, then regenerates grub.cfg
    'steps': ['kernel_cmdline.dropin', 'kernel_cmdline.configured'],
    'builder': 'kernel_cmdline',
    'setting_area': 'kernel_cmdline',
    'finding_prefix': 'kernel_cmdline',
    'check_ids': ['kernel_cmdline.dropin', 'kernel_cmdline.configured', 'kernel_cmdline.running'],
    'galaxy_tags': ['grub', 'iommu'],
    'severity': 'medium',
    'short_description': 'iommu=pt, pci=realloc=off and no amd_iommu=on on the kernel command line (opt-in, reboot)',
    'description': [
        (
            "AMD's Instinct guides ask for C(iommu=pt) (MI300X; MI200 where the IOMMU is on) and "
            'C(pci=realloc=off) (MI300X) on the kernel command line; C(amd_iommu=on) is not a value the kernel '
            "knows (it logs C(AMD-Vi: Unknown option)) and is removed. The defaults follow the node's GPUs "
            '(C(nodetune_kernel_cmdline_platform)); C(nodetune_kernel_cmdline_args) replaces them.'
        ),
        (
            'On BootLoaderSpec nodes (RHEL 9 and later, Fedora: C(/boot/loader/entries)) through C(grubby '
            '--update-kernel=ALL --remove-args=... --args=...), every entry\'s previous options journaled; on GRUB '
            'nodes (Debian, Ubuntu) through the drop-in C(/etc/default/grub.d/99-nodetune-kernel-cmdline.cfg), '
            'which grub-mkconfig sources after C(/etc/default/grub), then C(update-grub). A node with neither is '
            'refused before any write.'
        ),
        (
            'Opt-in (C(nodetune_kernel_cmdline_allowed)): the change takes effect at the next boot, so apply '
            'reports C(reboot_required) and reboots nothing. Verify compares every boot entry '
            '(C(kernel_cmdline.configured)) and C(/proc/cmdline) (C(kernel_cmdline.running)): a node configured '
            'but not rebooted is C(pending), and so are the C(bios.iommu) findings the next boot fixes. Revert '
            'puts every entry back. See docs/tuning.md, "Kernel command line".'
        ),
    ],
    'variables': {
        'nodetune_kernel_cmdline_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                (
                    'Look at this area. When false the area is left exactly as it is. Nothing is changed unless '
                    'C(nodetune_kernel_cmdline_allowed) is true as well.'
                ),
            ],
        },
        'nodetune_kernel_cmdline_allowed': {
            'type': 'bool',
            'default': False,
            'description': [
                (
                    'Opt-in for changing the boot loader (a reboot is needed for it to take effect). With '
                    'C(false) the area changes nothing, and says in a note what the boot entries lack.'
                ),
            ],
        },
        'nodetune_kernel_cmdline_platform': {
            'type': 'str',
            'default': 'auto',
            'choices': ['auto', 'mi250', 'mi300x', 'generic'],
            'description': [
                (
                    "Whose advice the default arguments follow: C(auto) from the GPUs' PCI device ids (as "
                    'bios_check detects them), C(mi300x) (C(iommu=pt pci=realloc=off)), C(mi250) (C(iommu=pt)), '
                    'C(generic) (none).'
                ),
            ],
        },
        'nodetune_kernel_cmdline_args': {
            'type': 'list',
            'elements': 'str',
            'default': None,
            'description': [
                (
                    'The kernel parameters to have, each one word (C(key=value) or a bare C(key)), replacing the '
                    "platform's. A parameter set to another value on the node is replaced (grubby's C(--args) "
                    'replaces a word of the same key; the GRUB drop-in filters it out). C(null) takes the '
                    "platform's advice. A word with blanks, quotes, C($) or a backslash, an C(amd_iommu=) option "
                    'the kernel does not know, or two values for one key are refused before any write.'
                ),
            ],
        },
        'nodetune_kernel_cmdline_extra_args': {
            'type': 'list',
            'elements': 'str',
            'default': [],
            'description': [
                (
                    'More parameters on top of C(nodetune_kernel_cmdline_args), e.g. '
                    "C([pci=disable_acs_redir=pci:1022:14ab;pci:1000:c030]) (health.pcie_acs's remedy names the "
                    "node's ports). A word GRUB would misread (C(;)) is single-quoted in grub.cfg."
                ),
            ],
        },
        'nodetune_kernel_cmdline_remove_args': {
            'type': 'list',
            'elements': 'str',
            'default': ['amd_iommu=on'],
            'description': [
                (
                    'Parameters to take out of every boot entry: a C(key=value) word as written, or a bare C(key) '
                    'with every value. C(null) or C([]) removes nothing.'
                ),
            ],
        },
    },
}

ROLES['slurm'] = {
    'kind': 'area',
    'order': 76,  # one file of its own, independent of the other areas' settings
    'builder': 'slurm',
    'setting_area': 'slurm',
    'finding_prefix': 'slurm',
    'check_ids': ['slurm.gres', 'slurm.gres_include', 'slurm.propagate_limits', 'slurm.slurmd_memlock'],
    'galaxy_tags': ['slurm', 'gpu'],
    'severity': 'medium',
    'short_description': "Slurm gets the layout: a gres.conf fragment with each GPU's cores, and job limit checks "
                         '(opt-in)',
    'description': [
        (
            'Writes a gres.conf fragment (C(nodetune_slurm_gres_path), which the site includes from its '
            'gres.conf with C(Include <path>)) with one C(Name=gpu Type=<model> File=/dev/dri/renderD<N> '
            "Cores=<list>) line per GPU, GCD or partition, the cores being the GPU's rank cores from the layout "
            "(or its NUMA node's). C(Cores=) are Slurm's core indexes, which are hwloc's logical core indexes "
            '(gres.conf(5): "a logical core index must be specified instead of the physical core index"), not '
            'Linux CPU numbers: nodetune converts them. C(File=) is the render node KFD names for each partition '
            '(C(drm_render_minor)).'
        ),
        (
            'Read-only checks, where the files exist: C(slurm.propagate_limits) (slurm.conf\'s '
            "C(PropagateResourceLimits) default ALL carries a login node's small memlock limit into every job), "
            "C(slurm.slurmd_memlock) (slurmd.service's effective C(LimitMEMLOCK) from its unit file and "
            'drop-ins) and C(slurm.gres_include) (whether gres.conf includes the fragment).'
        ),
        (
            'Off by default. slurmd reads the file at its next start or C(scontrol reconfigure): nodetune '
            'restarts nothing. Revert puts back what was there. See docs/slurm.md.'
        ),
    ],
    'variables': {
        'nodetune_slurm_enabled': {
            'type': 'bool',
            'default': False,
            'description': [
                'Tune this area (opt-in). When false the area is left exactly as it is.',
            ],
        },
        'nodetune_slurm_gres': {
            'type': 'str',
            'default': 'auto',
            'choices': ['auto', 'always', 'never'],
            'description': [
                (
                    'C(auto) writes the gres.conf fragment where the node has a slurm.conf (in C(/etc/slurm) or '
                    'C(/etc/slurm-llnl)) and AMD GPUs; C(always) wherever it has AMD GPUs; C(never) writes none '
                    "(sites that leave gres.conf to Slurm's C(AutoDetect=rsmi)). The read-only checks run "
                    'either way.'
                ),
            ],
        },
        'nodetune_slurm_gres_path': {
            'type': 'str',
            'default': '/etc/slurm/nodetune-gres.conf',
            'description': [
                (
                    'The file nodetune owns and writes. Slurm reads only the gres.conf beside slurm.conf: add '
                    "C(Include /etc/slurm/nodetune-gres.conf) to it (verify reports C(slurm.gres_include) until "
                    'then), or point this at that gres.conf to let nodetune own all of it. An absolute path '
                    "without spaces, quotes, C(#) or C(=) (Slurm's Include takes one word)."
                ),
                (
                    "In Slurm's configuration folders, C(/etc/slurm) or C(/etc/slurm-llnl) (and their subfolders), "
                    'unless C(nodetune_slurm_gres_path_anywhere) is true. Refused before anything is written: '
                    "nodetune's own files and folders (C(/var/lib/nodetune), C(/etc/nodetune), C(nodetune-*) "
                    'programs and units, a file another area writes), a link, a directory, a special file, and an '
                    'existing file nodetune did not create, unless it is a C(gres.conf).'
                ),
            ],
        },
        'nodetune_slurm_gres_path_anywhere': {
            'type': 'bool',
            'default': False,
            'description': [
                (
                    "Let C(nodetune_slurm_gres_path) name a file outside Slurm's configuration folders (a Slurm "
                    'built with another C(--sysconfdir), such as C(/usr/local/etc/slurm)). nodetune\'s own files '
                    'and the other refusals stay.'
                ),
            ],
        },
        'nodetune_slurm_gres_type': {
            'type': 'str',
            'default': 'auto',
            'description': [
                (
                    "The gres C(Type=), which slurm.conf's C(Gres=gpu:<type>:<count>) must name. C(auto): the "
                    "GPU's model lower case, other characters as C(_) (C(mi300x), C(mi250x_mi250)). Letters, "
                    "digits, C(_), C(.) and C(-) only."
                ),
            ],
        },
        'nodetune_slurm_gres_cores': {
            'type': 'str',
            'default': 'rank',
            'choices': ['rank', 'numa'],
            'description': [
                (
                    "C(rank): each GPU's C(Cores=) are its rank's cores from the layout (disjoint from "
                    'housekeeping and from the other GPUs). C(numa): every core of its NUMA node.'
                ),
            ],
        },
    },
}

ROLES['bios_check'] = {
    'kind': 'check',
    'finding_prefix': 'bios',
    'galaxy_tags': ['bios', 'pcie', 'iommu'],
    'short_description': (
        'Read-only BIOS-level checks (PCIe links, ASPM, IOMMU and '
        'kernel command line, SMT, NPS, Above 4G)'
    ),
    'description': [
        (
            'Run alone (C(roles: [nodetune.instinct.bios_check])) it checks the node read-only, in one '
            'module call. The C(tune) role checks them before writing anything (a warning per drifting '
            'check, or a failure with C(nodetune_bios_policy=fail)); the C(verify) role reports them as '
            'findings C(bios.pcie_link), C(bios.aspm), C(bios.iommu), C(bios.smt), C(bios.nps), '
            'C(bios.above_4g). Nothing is written: the OS can only observe what the firmware set up.'
        ),
        (
            "The platform comes from the GPUs' PCI device ids (MI210/MI250/MI250X 0x740f/0x740c/0x7408: the "
            'MI200 guide; MI300X/MI325X 0x74a1/0x74a5/0x74b5: the MI300X guide), unless '
            'C(nodetune_bios_platform) says otherwise. Other nodes get the platform-independent checks only.'
        ),
        (
            "Platform rules (AMD's guides as corrected in DOMAIN.md): MI300X wants the IOMMU on with "
            'C(iommu=pt), and C(pci=realloc=off), and NPS1. MI250 wants the IOMMU off below 256 logical CPUs'
            ' (on with C(iommu=pt) is equivalent) and on with C(iommu=pt) from 256 (x2APIC), and suggests '
            'NPS4. C(amd_iommu=on), copied from many guides, is not a valid value (the kernel logs "Unknown '
            'option" and ignores it): it is reported with the truth.'
        ),
        (
            'Every platform: GPU and NIC PCIe links at their maximum speed and width, ASPM off on GPU and '
            'NIC links (and no power-saving ASPM policy), SMT as C(nodetune_bios_smt) says (siblings the '
            "C(smt) role takes offline count as off), and every GPU's 64-bit BAR above 4 GiB (Above 4G "
            'decoding).'
        ),
    ],
    'variables': {
        'nodetune_bios_check_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                (
                    'Run the BIOS-level checks. When false, '
                    'tune and verify skip them.'
                ),
            ],
        },
        'nodetune_bios_policy': {
            'type': 'str',
            'default': 'warn',
            'choices': ['warn', 'fail'],
            'description': [
                (
                    'What the tune role does when a check drifts before applying. C(warn) prints a warning '
                    'per finding and applies; C(fail) fails the node before any write, listing the findings.'
                    ' Verify always reports them.'
                ),
            ],
        },
        'nodetune_bios_platform': {
            'type': 'str',
            'default': 'auto',
            'choices': ['auto', 'mi250', 'mi300x', 'generic'],
            'description': [
                (
                    'The platform whose guide applies. C(auto) detects it from the GPU device ids; '
                    'C(generic) applies no platform rule (IOMMU and NPS are then checked only where their '
                    'own variables are set).'
                ),
            ],
        },
        'nodetune_bios_checks': {
            'type': 'list',
            'elements': 'str',
            'default': ['pcie_link', 'aspm', 'iommu', 'smt', 'nps', 'above_4g'],
            'choices': ['pcie_link', 'aspm', 'iommu', 'smt', 'nps', 'above_4g'],
            'description': [
                (
                    'The checks to run. A known exception on some nodes is better expressed as a verify '
                    'waiver.'
                ),
            ],
        },
        'nodetune_bios_smt': {
            'type': 'str',
            'default': 'off',
            'choices': ['off', 'on', 'any'],
            'description': [
                (
                    "The SMT state wanted. AMD's guides run Instinct nodes with SMT off (in the BIOS, or "
                    'siblings taken offline by the C(smt) role); C(any) skips the check. Quote C("off") and '
                    'C("on") in YAML.'
                ),
            ],
        },
        'nodetune_bios_nps': {
            'type': 'str',
            'default': 'auto',
            'choices': ['auto', 'any', '1', '2', '4'],
            'description': [
                (
                    'NUMA nodes per socket wanted (counted from the NUMA nodes that hold CPUs; memory-only '
                    'CXL/pmem nodes do not count). C(auto) is 1 on MI300X and 4 on MI250 (only suggested '
                    'there, so low severity); C(any) skips the check.'
                ),
            ],
        },
        'nodetune_bios_iommu': {
            'type': 'str',
            'default': 'auto',
            'choices': ['auto', 'on', 'off', 'any'],
            'description': [
                (
                    'The IOMMU state wanted; C(on) also requires C(iommu=pt) (or C(iommu.passthrough=1)) on '
                    'the kernel command line. C(auto) applies the platform rule; C(any) skips the check.'
                ),
            ],
        },
        'nodetune_bios_pci_realloc_off': {
            'type': 'raw',
            'default': 'auto',
            'choices': ['auto', True, False],
            'description': [
                (
                    'Require C(pci=realloc=off) on the kernel command line. C(auto) requires it on MI300X '
                    'only.'
                ),
            ],
        },
        'nodetune_bios_aspm': {
            'type': 'str',
            'default': 'off',
            'choices': ['off', 'any'],
            'description': [
                (
                    'C(off) reports GPU and NIC links with L0s or L1 ASPM enabled (C(link/l0s_aspm), '
                    'C(link/l1_aspm)) and a C(powersave)/C(powersupersave) kernel ASPM policy. '
                    'C(pcie_aspm=off) on the kernel command line does not disable ASPM (it keeps the '
                    "firmware's setting). C(any) skips the check."
                ),
            ],
        },
    },
}

ROLES['tune'] = {
    'kind': 'runner',
    'galaxy_tags': ['tuning', 'hpc'],
    'short_description': "Discover, plan and apply the node's tuning in one module call (or revert it)",
    'description': [
        (
            "Runs C(nodetune.instinct.tune) once per node: it discovers the node's topology from C(/sys) and"
            ' C(/proc), plans its NUMA/IRQ/SMT layout, builds the desired Settings of every tuning area, '
            'validates all of them, then applies them in dependency order, all or nothing. This is the only '
            'task that contacts the node.'
        ),
        (
            # the generator writes each declared area role in place of <the area roles>
            'The area roles (<the area roles>) and C(bios_check) need not run before it: the tune action '
            'plugin takes their variables on the controller, inside this same task, over their defaults, and '
            'validates them as '
            "Ansible validates a role's arguments; all of them are declared once in the collection's "
            "C(plugins/module_utils/areas/declarations.py) (every variable is documented in its role's README). A "
            'C(nodetune_*) variable that nothing declares is refused before any write, with the nearest real'
            ' name.'
        ),
        (
            'Every value changed is journaled under the root (C(/var/lib/nodetune/journal.json), mode 0600);'
            ' the first value ever seen is the baseline that C(nodetune_state=reverted) restores byte for '
            'byte. Check mode (C(--check --diff)) shows the exact changes and writes nothing.'
        ),
        (
            "Its task is tagged C(always) and the action plugin honours the run's tags per area - C(--tags "
            'nvme) applies only the nvme area, C(--skip-tags smt) all but smt, and a run whose tags select '
            'no area (C(--tags verify)) skips the call - except with C(nodetune_tune_verify), where C(--tags'
            ' verify) applies nothing and audits every area, as playbooks/verify.yml would. A first C(meta: '
            "noop) task carries every area's tag, so that C(--list-tags) shows them (it costs no worker "
            'process); it is tagged C(never) too, so that a run without C(--tags) does not print its empty '
            'header once per host.'
        ),
        (
            'Prints one summary for the whole play (a C(run_once) task, not one per host): nodes changed, '
            'unchanged and failed, the changes by check id, the nodes that need a reboot, and notes such as '
            'areas that do not apply. The per-node details are in the task result (C(-v)) and, with '
            "C(--diff), each change's before and after."
        ),
        (
            'With C(nodetune_tune_verify) (site.yml sets it) the same module call also audits the node right'
            " after the apply, with the C(verify) role's variables, and the C(verify) role's fleet reports "
            'are written: apply and verify cost one module call per node.'
        ),
    ],
    'variables': {
        'nodetune_state': {
            'type': 'str',
            'default': 'present',
            'choices': ['present', 'reverted'],
            'description': [
                (
                    'C(present) applies the tuning. C(reverted) restores every value nodetune ever changed '
                    'to the baseline from the journal and removes the files it created '
                    '(playbooks/revert.yml).'
                ),
            ],
        },
        'nodetune_tune_verify': {
            'type': 'bool',
            'default': False,
            'description': [
                (
                    'Also verify each node in the same module call, right after the apply, with the '
                    "C(verify) role's variables (C(nodetune_verify_*), C(nodetune_health_*), "
                    'C(nodetune_report_dir)); the node reports, the fleet JUnit XML and summary are written '
                    'as the C(verify) role writes them, and with C(nodetune_verify_fail_on_drift) a drifting'
                    ' node fails. site.yml sets it; playbooks/verify.yml alone is the audit-only run.'
                ),
            ],
        },
    },
}

ROLES['verify'] = {
    'kind': 'runner',
    'galaxy_tags': ['audit', 'drift', 'junit', 'prometheus'],
    'short_description': (
        'Audit every node against its desired state; per-node '
        'JSON, fleet JUnit XML, Prometheus textfile'
    ),
    'description': [
        (
            'Runs C(nodetune.instinct.verify) once per node with the very variables the apply uses, so apply'
            " and verify compute the same desired Settings: its action plugin gathers the area roles' and "
            "C(bios_check)'s variables on the controller inside that one task, over each role's defaults and"
            " validated against its argument spec, exactly as the C(tune) role's task does (the area roles "
            'need not run first), with C(nodetune_layout_policy). It never writes node settings and works on'
            ' a read-only system; the only file it may write on a node is the Prometheus textfile '
            '(C(nodetune_verify_textfile_path)), never in check mode.'
        ),
        (
            'Each finding has a stable id (C(nvme.scheduler), C(irq.nic_local), C(bios.iommu), '
            'C(health.gpu_temp), ...; see docs/verify.md), a target, expected and actual values, a status '
            '(C(ok), C(drift), C(not_applicable), C(unsupported), C(waived)), a severity and a remedy.'
        ),
        (
            'On the controller: one JSON report per node (C(<nodetune_report_dir>/nodes/<host>.json), '
            'written by the verify task itself), then, once, the fleet JUnit XML (C(junit.xml): a testsuite '
            'per node, a testcase per check id; drift is a failure, not_applicable/unsupported/waived are '
            'skipped) and C(summary.json), and prints the fleet summary (nodes clean, drifted, failed; the '
            'most frequent drift ids). The reports are written even in check mode (they are controller '
            'files, not node changes).'
        ),
        (
            'A node where verify could not run fails, and so does, with C(nodetune_verify_fail_on_drift), a '
            "node that drifted, after its report is written; the fleet reports are written in the block's "
            'C(always), so they count every node and CI gets both the reports and a failing exit code.'
        ),
        (
            'site.yml does not run this role: there the C(tune) role verifies each node in its own module '
            "call (C(nodetune_tune_verify)) with this role's variables and writes these same reports."
        ),
        (
            'With C(serial), the reports cover the current batch '
            'only (each batch overwrites them).'
        ),
        (
            'Tagged C(always), like the C(tune) role: C(--tags nvme) verifies only the nvme area (with the '
            'layout, BIOS-level and health checks); C(--skip-tags nvme) every area but it.'
        ),
    ],
    'variables': {
        'nodetune_verify_fail_on_drift': {
            'type': 'bool',
            'default': False,
            'description': [
                (
                    'Fail every node that has a finding in status C(drift), after the reports are written '
                    '(for CI and cron). Waived findings do not count.'
                ),
            ],
        },
        'nodetune_verify_waivers': {
            'type': 'list',
            'elements': 'dict',
            'default': [],
            'description': [
                (
                    'Known exceptions: each C({id, target, reason, expires}), for example C({id: '
                    'health.ib_port, target: mlx5_3/1, reason: "port not cabled", expires: 2026-12-31}). '
                    'C(target) omitted or C(*) covers every target of the id. A drifting finding covered by '
                    'an unexpired waiver is reported as C(waived); after C(expires) it is drift again, with '
                    'a note.'
                ),
            ],
        },
        'nodetune_verify_waivers_file': {
            'type': 'str',
            'default': '',
            'description': [
                (
                    'A YAML or JSON file on the controller with a list of waivers (same fields), added to '
                    'C(nodetune_verify_waivers). Empty for none.'
                ),
            ],
        },
        'nodetune_verify_textfile_path': {
            'type': 'str',
            'default': '',
            'description': [
                (
                    "Path, inside the node's root, of the Prometheus textfile to write for node_exporter's "
                    'textfile collector, for example '
                    'C(/var/lib/node_exporter/textfile_collector/nodetune.prom): '
                    'C(nodetune_drift{check}) 0 or 1 and C(nodetune_drift_targets{check}) per check id, '
                    'C(nodetune_findings{status}) and '
                    'C(nodetune_last_verify_timestamp_seconds). Empty (the default) writes nothing on the '
                    'node. Never written in check mode.'
                ),
            ],
        },
        'nodetune_verify_write_reports': {
            'type': 'bool',
            'default': True,
            'description': [
                (
                    'Write the per-node JSON, C(junit.xml) and '
                    'C(summary.json) on the controller.'
                ),
            ],
        },
        'nodetune_report_dir': {
            'type': 'str',
            'default': 'out/reports',
            'description': [
                (
                    'Controller directory for the reports. A relative path is relative to the folder '
                    'ansible-playbook runs in (ansible-runner and execution environments: the project folder), '
                    'never to the installed collection, which may be read-only: the default C(out/reports) is '
                    "the checkout's git-ignored C(out/reports) when run from the checkout."
                ),
            ],
        },
        'nodetune_health_enabled': {
            'type': 'bool',
            'default': True,
            'description': [
                (
                    'Report the health findings (GPU temperature and power, InfiniBand ports, NVMe PCIe '
                    'links).'
                ),
            ],
        },
        'nodetune_health_checks': {
            'type': 'list',
            'elements': 'str',
            'default': ['gpu_temp', 'gpu_power', 'ib_port', 'pcie_link', 'pcie_acs', 'xgmi_links', 'gpu_ras',
                        'ib_counters', 'memlock', 'gpu_perf_level', 'gpu_power_cap'],
            'choices': ['gpu_temp', 'gpu_power', 'ib_port', 'pcie_link', 'pcie_acs', 'xgmi_links', 'gpu_ras',
                        'ib_counters', 'memlock', 'gpu_perf_level', 'gpu_power_cap'],
            'description': [
                (
                    'The health checks to run. C(pcie_link) covers NVMe drives; GPU and NIC links are '
                    'C(bios.pcie_link).'
                ),
            ],
        },
        'nodetune_health_gpu_temp_margin_c': {
            'type': 'float',
            'default': 5,
            'description': [
                (
                    'Each GPU temperature sensor (edge, junction, memory) is compared with its own hwmon limit, '
                    'C(tempN_crit) (else C(tempN_emergency)), minus this margin in degrees Celsius; at or above '
                    'it is drift (C(health.gpu_temp)). 0 to below 100.'
                ),
            ],
        },
        'nodetune_health_gpu_power_margin_pct': {
            'type': 'float',
            'default': 5,
            'description': [
                (
                    "A GPU's power (C(power1_average), else C(power1_input)) above its own C(power1_cap) plus "
                    'this percentage is drift (C(health.gpu_power)). 0 to below 100.'
                ),
            ],
        },
        'nodetune_health_gpu_temp_max_c': {
            'type': 'float',
            'default': None,
            'description': [
                (
                    'Only for a temperature sensor that exposes no C(tempN_crit)/C(tempN_emergency) limit: at or '
                    'above this (degrees Celsius) is drift. C(null) (default) leaves such a sensor unjudged '
                    '(C(health.gpu_temp) is V(unsupported) where no sensor of a GPU has a limit): amdgpu hides '
                    'the limits of MI300X before Linux 6.7, and one fixed number would false-alarm on a junction '
                    'or HBM temperature that is normal under load.'
                ),
            ],
        },
        'nodetune_health_gpu_power_max_w': {
            'type': 'float',
            'default': 750,
            'description': [
                (
                    'Fallback only, for a GPU that exposes no C(power1_cap): a power above this (watts) is '
                    'drift. 750 W is the largest Instinct OAM board power (MI300X).'
                ),
            ],
        },
        'nodetune_health_ib_rate_min_gbps': {
            'type': 'float',
            'default': None,
            'description': [
                (
                    'An InfiniBand port slower than this (Gb/s, e.g. 400 for NDR) is drift '
                    '(C(health.ib_port)); C(null) only checks that every port is ACTIVE and LinkUp.'
                ),
            ],
        },
        'nodetune_health_ib_counter_max': {
            'type': 'dict',
            'default': {'symbol_error': 10, 'link_downed': 10, 'port_rcv_errors': 10, 'port_xmit_discards': 100},
            'description': [
                (
                    'The most errors each InfiniBand port counter (C(ports/N/counters/<name>)) may show before '
                    'C(health.ib_counters) drifts (a count above it is drift). Keys: C(symbol_error), '
                    'C(link_downed), C(port_rcv_errors), C(port_xmit_discards), each a whole number, 0 or more; '
                    'a key left out keeps its default.'
                ),
                (
                    'The defaults are the thresholds infiniband-diags ships for C(ibqueryerrors) and '
                    'C(ibcheckerrs) (rdma-core C(infiniband-diags/etc/error_thresholds): C(SymbolErrorCounter=10), '
                    'C(LinkDownedCounter=10), C(PortRcvErrors=10), C(PortXmitDiscards=100); '
                    'https://github.com/linux-rdma/rdma-core/blob/master/infiniband-diags/etc/error_thresholds). '
                    'Without a threshold file C(ibqueryerrors) reports any non-zero count, which a healthy fabric '
                    'does not keep: transmit discards come with congestion and a few symbol errors with long-lived '
                    'optical links. The counters count since they were last cleared (C(perfquery -x -R)); set 0 '
                    'for a zero-tolerance check right after clearing them.'
                ),
            ],
        },
        'nodetune_health_gpu_perf_level': {
            'type': 'str',
            'default': None,
            'description': [
                (
                    "Every AMD GPU's C(power_dpm_force_performance_level) (e.g. V(auto), V(high), "
                    'V(perf_determinism)) must be this (C(health.gpu_perf_level)); C(null) does not check it.'
                ),
            ],
        },
        'nodetune_health_gpu_power_cap_w': {
            'type': 'float',
            'default': None,
            'description': [
                (
                    "Every AMD GPU's hwmon C(power1_cap) must be this many watts, within 1 W "
                    '(C(health.gpu_power_cap)); C(null) does not check it.'
                ),
            ],
        },
        'nodetune_inventory_expected': {
            'type': 'dict',
            'default': {},
            'description': [
                (
                    'What every node of the group has (set it in group_vars): any of C(gpu_count), '
                    'C(gpu_model) (e.g. V(MI300X)), C(compute_partition) (V(SPX), V(DPX), V(TPX), V(QPX), '
                    'V(CPX)), C(memory_partition) (V(NPS1), V(NPS2), V(NPS4), V(NPS8)), C(xgmi_hive_size), '
                    'C(hca_count), C(hca_rate) (Gb/s of every RDMA port, e.g. 400), C(hca_width) (e.g. V(4X)),'
                    ' C(nvme_count), C(cpu_count) (logical CPUs present), C(smt) (V(on)/V(off)), '
                    'C(numa_per_socket). Verify reports each declared key as C(inventory.<key>) (drift with '
                    'the expected and actual value and a remedy). An undeclared key is learned from the '
                    "majority of the node's inventory group where it has one (3 nodes or more): "
                    'C(inventory.<key>) drift with C(source: learned) (docs/verify.md).'
                ),
                (
                    'An unknown key or a value of the wrong kind (a GPU count that is not a number) is refused'
                    ' before anything is written. The apply writes it, with the expected Settings, to '
                    'C(/etc/nodetune/check.d/) for the node-local C(nodetune-check) (docs/verify.md); a run '
                    'without the verify role (playbooks/apply.yml) leaves the inventory file as it was.'
                ),
            ],
        },
    },
}

ROLES["nvme"]["hints"] = {
    "nodetune_nvme_nr_queues": (
        "nodetune_nvme_nr_queues is not a setting: there is no /sys/block/<dev>/queue/nr_queues file (the article's "
        "'echo 32 > .../nr_queues' writes nowhere). NVMe hardware queues are fixed when the driver probes the device "
        "(one /sys/block/<dev>/mq/<n>/ per queue); shape them with nodetune_nvme_module_options (write_queues, "
        "poll_queues, io_queue_depth), which take effect at the next reboot"),
}

# Opt-in to tune the controller itself (the local connection, or localhost, with root /): see
# plugin_utils/role_variables.py controller_refusal().
CONTROLLER_OPT_IN = "nodetune_controller_allowed"
COMMON_VARIABLES[CONTROLLER_OPT_IN] = {
    "type": "bool",
    "default": False,
    "description": [
        "Allow a run that writes (not check mode) to tune the machine Ansible runs on: a host on the local "
        "connection, or named C(localhost)/C(127.0.0.1), whose C(nodetune_root) is C(/). Without it such a run "
        "is refused before anything is written, so that a wrong or missing C(nodetune_root) never tunes the "
        "controller by accident. Check mode (C(--check)), discovery and verify need no opt-in.",
    ],
}
# Boot persistence of the runtime settings (areas/persist.py): off where the node has no systemd to run it at boot.
PERSIST_BOOT = "nodetune_persist_boot"
COMMON_VARIABLES[PERSIST_BOOT] = {
    "type": "bool",
    "default": True,
    "description": [
        "Re-apply at boot the runtime settings a reboot resets (SMT, IRQ affinity, cpufreq governor and EPP, idle "
        "states, IPoIB MTU): nodetune writes their list to C(/etc/nodetune/boot-restore.d/), the "
        "C(/usr/local/sbin/nodetune-restore) program and the C(nodetune-restore.service) unit, and enables the "
        "unit. Set it to V(false) where nothing boots the node with systemd (a container, an image whose boot "
        "re-tunes it another way): those files and the unit are then neither written nor verified, and the "
        "runtime settings last until the next reboot. The files that the system itself reads at boot are "
        "written either way: C(/etc/sysctl.d/), the udev rule for NVMe and C(/etc/modprobe.d/). Turning it off "
        "leaves what an earlier run installed until a revert.",
    ],
}
# How much a diff shows (module_utils/apply/diff_view.py): grouped and bounded, or every value.
FULL_DIFF = "nodetune_full_diff"
COMMON_VARIABLES[FULL_DIFF] = {
    "type": "bool",
    "default": False,
    "description": [
        "With C(--diff): show every value on its own line and every file whole (thousands of lines on a fresh "
        "full-size node; C(nodetune apply --full-diff) sets it). By default each node's diff is grouped per setting "
        "id (a revert's per path shape) with its targets written compactly, a file nodetune writes is shown as its "
        "path, settings count, size and SHA-256 digest (a small configuration file with its lines), and the diff "
        "stops at 200 lines per node, saying what it left out. For verify, the Prometheus textfile's diff.",
    ],
}
# the common variables each kind of role takes
COMMON_BY_KIND = {
    "area": ("nodetune_root", "nodetune_layout_policy", CONTROLLER_OPT_IN, PERSIST_BOOT),
    "check": ("nodetune_root", "nodetune_layout_policy"),
    "runner": ("nodetune_root", "nodetune_layout_policy", CONTROLLER_OPT_IN, PERSIST_BOOT, FULL_DIFF),
}
COMMON_BY_ROLE = {"verify": ("nodetune_root", "nodetune_layout_policy", PERSIST_BOOT, FULL_DIFF)}

# Variables of the playbooks, extra-vars of the Python API/CLI, of the lab, and set by the roles themselves: not
# role arguments, but declared so that a misspelt one is caught like any other.
PLAYBOOK_VARIABLES = {
    "nodetune_hosts": "host pattern a playbook runs on (default: all)",
    "nodetune_serial": "hosts per batch of apply.yml/revert.yml: a number, a percentage or a list of ramps",
    "nodetune_max_fail_percentage": "stop a rollout when more than this percentage of a batch failed",
}
LAB_VARIABLES = {
    "nodetune_lab_backend": "lab: who answers the node's writes, kernel (default) or simulated (a nodetune.lab node: "
                            "the tune and verify actions run nodetune.lab's modules with the simulated kernel)",
    "nodetune_sim_spec": "lab: the spec file a simulated node is built from (inventories/lab)",
    "nodetune_sim_force": "lab: rebuild the simulated nodes fresh (playbooks/lab.yml)",
    "nodetune_sim_state": "lab: present, rebooted or absent (playbooks/lab.yml)",
    "nodetune_lab_hosts": "lab: the hosts playbooks/lab.yml builds (site.yml sets it)",
    "nodetune_try_nodes": "lab: the lab machines nodetune.lab.try simulates (mi300x, mi250; docs/try.md)",
    "nodetune_try_dir": "lab: the folder nodetune.lab.try builds its simulated nodes in (default ./nodetune-try)",
}
SET_BY_ROLES = {
    "nodetune_topology": "fact returned by nodetune.instinct.topology_facts",
    "nodetune_verify_result": "registered by the verify role",
    "nodetune_verify_result_var": "the result the verify role's reports read (set by the tune role)",
}
OTHER_VARIABLES = dict(PLAYBOOK_VARIABLES, **dict(LAB_VARIABLES, **SET_BY_ROLES))
# Variables of earlier versions, refused with what replaced them.
REMOVED_VARIABLES = {
    "nodetune_areas": "nodetune_areas is no longer used: each area role applies its own area (roles: "
                      "[nodetune.instinct.nvme]) and the tune role takes every area's variables itself; to pass the "
                      "variables by hand, give the module's areas option",
    "nodetune_bios": "nodetune_bios is no longer used: the tune and verify roles take the nodetune_bios_* variables "
                     "themselves; to pass them by hand, give the module's bios option",
}

AREAS = tuple(name for name, role in ROLES.items() if role["kind"] == "area")
BIOS_ROLE = "bios_check"
PERSIST_ORDER = 80  # the persistence files, written after every area's runtime values


def apply_order() -> Dict[str, int]:
    """Check id (or id prefix) -> apply order, from each area's ``order`` and ``steps``."""
    order = {"persist": PERSIST_ORDER}
    for name in AREAS:
        declared = ROLES[name]
        steps = declared.get("steps") or [declared["finding_prefix"]]
        for index, step in enumerate(steps):
            order[step] = declared["order"] + index
    return order


def enabled_variable(role: str) -> str:
    return "nodetune_%s_enabled" % role


def area_variables(area: str) -> Tuple[str, ...]:
    """The variables an area's builder takes (without its ``nodetune_<area>_enabled`` toggle)."""
    return tuple(name for name in ROLES[area]["variables"] if name != enabled_variable(area))


def hints(role: str) -> Dict[str, str]:
    """Names users try that are not variables, with the truth about them."""
    return dict(ROLES[role].get("hints") or {})


def role_options(role: str) -> Dict[str, Dict[str, Any]]:
    """The role's argument-spec options: the common variables it takes, then its own."""
    declared = ROLES[role]
    names = COMMON_BY_ROLE.get(role, COMMON_BY_KIND[declared["kind"]])
    options = dict((name, COMMON_VARIABLES[name]) for name in names)
    options.update(declared["variables"])
    return options


def argument_spec(options: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Options as ``ArgumentSpecValidator`` takes them (no documentation keys)."""
    keep = ("type", "default", "choices", "elements", "required")
    return dict((name, dict((k, v) for k, v in option.items() if k in keep)) for name, option in options.items())


def defaults(role: str) -> Dict[str, Any]:
    return dict((name, option["default"]) for name, option in role_options(role).items() if "default" in option)


def known_variables() -> List[str]:
    names = set(COMMON_VARIABLES) | set(OTHER_VARIABLES)
    for role in ROLES.values():
        names.update(role["variables"])
    return sorted(names)


# Letters of other scripts that look like Latin ones (Cyrillic, Greek; full-width forms are folded by NFKC): a name
# or tag typed with one of them is a misspelling of the Latin one, not another name.
_LOOKALIKES = dict(zip(
    "АВЕКМНОРСТХаеорсухіјѕԁһӏкԛԝΑΒΕΖΗΙΚΜΝΟΡΤΥΧαικνορτυχı",
    "abekmhopctxaeopcyxijsdhlkqwabezhikmnoptyxaikvoptuxi"))


def folded(name: str) -> str:
    """``name`` as it reads: full-width forms and look-alike letters as their Latin ones, case folded."""
    text = unicodedata.normalize("NFKC", name)
    return "".join(_LOOKALIKES.get(char, char) for char in text).casefold()


def _nearest(name: str, known: Iterable[str]) -> Optional[str]:
    """The known name ``name`` reads as, or else the closest one."""
    reads, known = folded(name), list(known)
    near = [reads] if reads in known else difflib.get_close_matches(reads, known, n=1, cutoff=0.6)
    return near[0] if near else None


def _notes(name: str, *notes: str) -> str:
    """``notes`` in parentheses, after what sets ``name`` apart from nodetune's ASCII lower-case names."""
    foreign = ["U+%04X %s" % (ord(char), unicodedata.name(char, "?")) for char in name if ord(char) > 127]
    if foreign:
        notes = ("it holds %s" % ", ".join(dict.fromkeys(foreign)),) + notes
    elif name != name.lower():
        notes = ("names are lower case",) + notes
    return " (%s)" % "; ".join(notes)


def undeclared(names: Iterable[str]) -> List[str]:
    """One error per ``nodetune_*`` name that no role, playbook or lab declares, with the nearest real name. A name
    that reads as ``nodetune_*`` once case and look-alike letters are folded (``Nodetune_smt_enabled``, a Cyrillic
    ``о``) is one too: Ansible would keep it as another variable and the real one would keep its default."""
    known = known_variables()
    known_set = set(known)
    all_hints = dict(REMOVED_VARIABLES)  # type: Dict[str, str]
    for role in ROLES:
        all_hints.update(hints(role))
    errors = []
    for name in sorted(set(names)):
        if name in known_set or not (name.startswith("nodetune_") or folded(name).startswith("nodetune_")):
            continue
        if name in all_hints:
            errors.append(all_hints[name])
            continue
        near = _nearest(name, known)
        errors.append("%s is not a nodetune variable%s%s" % (
            name, "; did you mean %s?" % near if near else "",
            _notes(name, "every variable is listed in roles/<role>/README.md")))
    return errors


#: the tags that select areas: an area's name, bios_check, and those that select every area
TAGS = AREAS + (BIOS_ROLE, "all", "apply", "verify")
#: tags of the collection's playbooks that select no area (site.yml's lab play, discover.yml) and Ansible's own
PLAYBOOK_TAGS = ("lab", "discover", "always", "never", "tagged", "untagged")


def tag_errors(tags: Iterable[str], skip_tags: Iterable[str] = (), strict: bool = True,
               others: Iterable[str] = ()) -> List[str]:
    """One error per tag that selects no area. ``strict``: every tag not in TAGS or ``others``; else only those
    that read as one of TAGS once case and look-alike letters are folded (``NVME``, ``nvmе`` with a Cyrillic ``е``),
    which select nothing where the user meant an area (``-t NVME`` makes apply a no-op, ``--skip-tags SMT`` skips
    nothing)."""
    errors = []
    for option, given in (("--tags", tags), ("--skip-tags", skip_tags)):
        for tag in given:
            if tag in TAGS or tag in others:
                continue
            if (strict and option == "--tags") or folded(tag) in TAGS:
                near = _nearest(tag, TAGS)
                errors.append("%s %s selects no nodetune area%s%s" % (
                    option, tag, "; did you mean %s?" % near if near else "",
                    _notes(tag, "valid tags: " + ", ".join(TAGS))))
    return errors


def owner(name: str) -> Optional[str]:
    """The role that declares a variable (None for the common, playbook and lab ones)."""
    for role, declared in ROLES.items():
        if name in declared["variables"]:
            return role
    return None
