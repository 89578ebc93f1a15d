# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Every nodetune role and variable, declared once: each area's in its own module (``areas/<module>.py``: ``ROLE``
and ``DECLARATION``, beside its builder), collected here in the order of ``areas/builders.py``; the roles that are not
areas (bios_check, tune, verify) and the variables every role shares are declared here.

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
  playbooks', the lab's and the registered ones are declared below too), naming the nearest real one
  (plugin_utils/variable_names.py: that matching runs on the controller only);
- on the node, each area builder refuses a variable it does not know (``area_common.role_variables``).

Standard library only: this module is part of the payload of the modules sent to the nodes.
"""

from __future__ import absolute_import, division, print_function

from typing import Any, Dict, Iterable, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.areas import builders as _builders

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

# The roles that are not areas (each area's declaration is in its module: areas/<module>.py, DECLARATION)
OTHER_ROLES = {}  # type: Dict[str, Dict[str, Any]]

OTHER_ROLES['bios_check'] = {
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

OTHER_ROLES['tune'] = {
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
            "C(plugins/module_utils/areas/) (every variable is documented in its role's README). A "
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

OTHER_ROLES['verify'] = {
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


def roles_of(area_modules: Iterable[Any]) -> Dict[str, Dict[str, Any]]:
    """Every role's declaration by its name: each area's (its module's ``ROLE`` and ``DECLARATION``), in the order
    given, then the roles that are not areas."""
    roles = dict((module.ROLE, module.DECLARATION) for module in area_modules)  # type: Dict[str, Dict[str, Any]]
    roles.update(OTHER_ROLES)
    return roles


def areas_of(roles: Dict[str, Dict[str, Any]]) -> Tuple[str, ...]:
    return tuple(name for name, role in roles.items() if role["kind"] == "area")


ROLES = roles_of(_builders.MODULES.values())
AREAS = areas_of(ROLES)
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


#: the tags that select areas: an area's name, bios_check, and those that select every area
TAGS = AREAS + (BIOS_ROLE, "all", "apply", "verify")


def owner(name: str) -> Optional[str]:
    """The role that declares a variable (None for the common, playbook and lab ones)."""
    for role, declared in ROLES.items():
        if name in declared["variables"]:
            return role
    return None
