#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: verify
short_description: Audit a node against nodetune's desired state, BIOS-level checks and health thresholds
description:
  - Discovers the node, plans its layout and builds the desired Settings exactly as M(nodetune.instinct.tune) does
    (same code, same variables), then re-reads the node and reports one finding per Setting, plus layout checks
    (the effective affinity of each pinned NIC IRQ), the BIOS-level checks of the bios_check role and health
    checks (GPU temperature and power from hwmon, InfiniBand ports, NVMe PCIe links).
  - Each finding has a stable C(id) (for example C(nvme.scheduler), C(bios.iommu), C(health.gpu_temp)), a
    target, the expected and actual values, a status (V(ok), V(drift), V(not_applicable), V(unsupported),
    V(waived)), a severity and a remedy in words. The ids are listed in docs/verify.md.
  - Never writes node settings and works against a read-only system. The only file it may write is the
    Prometheus textfile named by O(textfile_path), and never in check mode.
  - One module call per node does everything, so an audit of a fleet costs one round trip per host.
version_added: "0.1.0"
author:
  - nodetune contributors (@nodetune)
options:
  root:
    description:
      - The directory to treat as the node's C(/). Simulated nodes and tests use a tree; real nodes use C(/).
    type: path
    default: /
  areas:
    description:
      - Area name to a mapping of that area's role variables, as for M(nodetune.instinct.tune); pass the same value
        as to tune so both compute the same Settings.
      - Not given, the action plugin takes it on the controller from the area roles' variables over their declared
        defaults (coerced and validated as a role's argument spec), exactly as the tune action does, for the areas
        the run's tags select (V(all), V(apply) and V(verify) select every area).
    type: dict
    default: {}
  policy:
    description: Layout planner policy, as for M(nodetune.instinct.tune).
    type: raw
    default: {}
  persist_boot:
    description: Whether the boot-time restore is expected on the node, as for M(nodetune.instinct.tune).
    type: bool
    default: true
  bios:
    description:
      - >-
        The bios_check role's variables (C(nodetune_bios_*)), for example
        C({nodetune_bios_platform: auto, nodetune_bios_smt: "off"}). An empty mapping runs every BIOS-level
        check with its defaults; C(nodetune_bios_check_enabled: false) skips them.
      - Not given, the action plugin gathers it from the bios_check role's variables, as for O(areas).
    type: dict
    default: {}
  health:
    description:
      - >-
        Health thresholds (C(nodetune_health_*)): each GPU sensor against its own hwmon C(tempN_crit) (else
        C(tempN_emergency)) minus C(nodetune_health_gpu_temp_margin_c) (default 5), the GPU's power against its
        own C(power1_cap) plus C(nodetune_health_gpu_power_margin_pct) (default 5); where a GPU has no such
        limit, C(nodetune_health_gpu_temp_max_c) (default none: the sensor is not judged) and
        C(nodetune_health_gpu_power_max_w) (default 750),
        C(nodetune_health_ib_rate_min_gbps) (default none: only the port state is checked),
        C(nodetune_health_checks) (subset of V(gpu_temp), V(gpu_power), V(ib_port), V(pcie_link),
        V(pcie_acs), V(xgmi_links), V(gpu_ras), V(ib_counters), V(memlock), V(gpu_perf_level), V(gpu_power_cap)),
        C(nodetune_health_ib_counter_max), C(nodetune_health_gpu_perf_level), C(nodetune_health_gpu_power_cap_w),
        C(nodetune_health_enabled).
      - >-
        The same mapping carries C(nodetune_inventory_expected), the node's declared inventory (GPU count and
        model, partition modes, xGMI hive size, HCAs, NVMe, CPUs, SMT, NUMA nodes per socket), reported as
        C(inventory.<key>) findings (docs/verify.md).
    type: dict
    default: {}
  learned_inventory:
    description:
      - >-
        The inventory the fleet report learned from the node's group majority at the last verify, where nothing is
        declared (C(expected): key to value, C(groups): key to the group it was learned from). Only for the
        C(check.expected) Setting of C(inventory.json), which verify compares as the apply writes it; the
        C(inventory.<key>) findings of a learned key are added by the fleet report. The action plugin reads it
        from C(nodetune_report_dir)/learned/ with O(role_variables) (docs/verify.md).
    type: dict
  waivers:
    description:
      - Known exceptions. Each entry has C(id) (a finding id), C(target) (optional; omitted or V(*) means every
        target), C(reason) and C(expires) (a date, C(YYYY-MM-DD)). A drifting finding covered by an unexpired
        waiver is reported as V(waived); after the expiry date it is drift again, with a note.
    type: list
    elements: dict
    default: []
  waivers_file:
    description:
      - A JSON (or YAML, where PyYAML is installed on the node) file on the managed node holding a list of waivers,
        added to O(waivers). On the controller, read the file with a lookup and pass O(waivers) instead.
    type: path
  textfile_path:
    description:
      - Where to write the Prometheus textfile for node_exporter's textfile collector, as a path inside O(root)
        (for example C(/var/lib/node_exporter/textfile_collector/nodetune.prom)). Written atomically, never in
        check mode. Unset (the default) writes nothing at all.
      - >-
        The file is rewritten at every run (its C(nodetune_last_verify_timestamp_seconds) sample and its mtime, which
        node_exporter exports as C(node_textfile_mtime_seconds), say when the node was last verified), but only a
        change of its metrics is a change: RV(changed) is true when the file is new or any other line differs, so a
        rerun that finds the node as before reports no change. In check mode RV(changed) says whether it would.
    type: path
  node_name:
    description: Name of the node in the report (the inventory hostname); defaults to the node's hostname.
    type: str
  report_file:
    description:
      - A path on the controller where the action plugin writes the node's JSON report (RV(report), in the
        module's key order, a line per top-level key and per finding), in check mode too (a controller file, not a
        node change). The module itself ignores it. Unset writes no report file.
    type: path
  fail_on_drift:
    description:
      - Fail the host when any finding drifts, after its report (O(report_file)) is written; the result says
        C(failed_on_drift) so that the fleet reports count the node as drifted. Handled by the action plugin.
    type: bool
    default: false
  role_variables:
    description:
      - >-
        Take the health thresholds, waivers (the C(nodetune_verify_waivers_file) read on the controller), the
        textfile path, the report file (under C(nodetune_report_dir)) and C(nodetune_verify_fail_on_drift) from the
        verify role's variables over its defaults, validated against its argument spec, as the verify role does.
        Options given in the task win. Handled by the action plugin.
    type: bool
    default: false
  findings_format:
    description:
      - >-
        How the module hands the findings back. V(json) returns RV(findings) as one JSON text and RV(report)
        without them, which costs a fraction of a list of thousands of dicts to return (a 1,700-finding node:
        about 0.2 s less per call); the action plugin asks for it and turns the text back into the list, in
        RV(findings) and in RV(report), so a playbook always sees lists. Leave it unset.
    type: str
    choices: [list, json]
    default: list
  known_findings:
    description:
      - >-
        With O(findings_format=json): the SHA-256 of the findings the controller already holds for this node (the
        C(findings_sha256) of its report file). Where this audit's findings have that digest they are not sent
        again (RV(findings_known)) and the action plugin writes the new report around the findings it holds; the
        audit itself is the same. The action plugin sets it from the node's report file; leave it unset.
    type: str
attributes:
  check_mode:
    description: Runs the same audit; only the Prometheus textfile is not written (RV(changed) says whether it would).
    support: full
  diff_mode:
    description: The Prometheus textfile's old and new text when its metrics change; no node setting is ever changed.
    support: full
notes:
  - Metrics in the textfile are C(nodetune_drift{check="<id>",target="<target>"}) (1 = drift, else 0),
    C(nodetune_findings{status="<status>"}) and C(nodetune_last_verify_timestamp_seconds).
  - The module does not fail on drift; with O(fail_on_drift) (the verify role sets it from
    C(nodetune_verify_fail_on_drift)) the action plugin fails the host after its report is written.
seealso:
  - module: nodetune.instinct.tune
"""

EXAMPLES = r"""
- name: Audit a node with the same variables the tune role used
  nodetune.instinct.verify:
    root: /
    areas:
      nvme:
        nodetune_nvme_scheduler: none
    bios: {}
    health:
      nodetune_health_gpu_power_max_w: 750
    waivers:
      - id: health.ib_port
        target: mlx5_3/1
        reason: port 1 of the storage HCA is not cabled
        expires: 2026-12-31
    textfile_path: /var/lib/node_exporter/textfile_collector/nodetune.prom
    node_name: "{{ inventory_hostname }}"
  register: audit

- name: Show what drifted
  ansible.builtin.debug:
    msg: "{{ audit.findings | selectattr('status', 'eq', 'drift') | map(attribute='id') | list }}"
"""

RETURN = r"""
changed:
  description:
    - Whether the Prometheus textfile's metrics changed (or, in check mode, would); false without O(textfile_path).
      Verify never changes a node setting.
  type: bool
  returned: always
drift:
  description: True when any finding is in status drift.
  type: bool
  returned: always
findings:
  description: >-
    Every finding of the node (from the module: not with RV(findings_known); where the action plugin writes the
    node's report file, it keeps them there and returns C(findings_file)).
  type: list
  elements: dict
  returned: always
  sample: [{id: nvme.scheduler, target: nvme0n1, expected: none, actual: mq-deadline, status: drift,
            severity: medium, remedy: "run the nodetune apply ...", source: setting, waiver: null}]
summary:
  description: Counts per status, the drift flag and the sorted drifting ids.
  type: dict
  returned: always
  sample: {counts: {ok: 40, drift: 1, not_applicable: 2, unsupported: 0, waived: 1}, drift: true,
           drift_ids: [nvme.scheduler]}
report:
  description: The per-node JSON report (schema 1) with node, root, timestamp, summary, findings, platform, notes.
  type: dict
  returned: always
findings_sha256:
  description: The SHA-256 of the findings' JSON text (the action plugin keeps it in the node's report file).
  type: str
  returned: with O(findings_format=json)
findings_known:
  description: >-
    True where the findings are those of O(known_findings) and are left out of the result: the action plugin writes
    the node's new report file around the findings that file holds.
  type: bool
  returned: when the findings have the digest O(known_findings)
notes:
  description: Informational lines (areas not applicable, expired waivers).
  type: list
  elements: str
  returned: always
textfile:
  description: >-
    Where the Prometheus textfile went: C(path), C(written), C(changed) (its metrics changed, or would in check
    mode) and C(reason) when not written.
  type: dict
  returned: when O(textfile_path) is set
"""

from ansible_collections.nodetune.instinct.plugins.module_utils import bytecode_cache

bytecode_cache.install()  # first: the imports below then load from the node's bytecode cache

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.nodetune.instinct.plugins.module_utils.audit import audit as audit_mod
from ansible_collections.nodetune.instinct.plugins.module_utils import failures
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.structure import StructureStore
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import LayoutError
from ansible_collections.nodetune.instinct.plugins.module_utils.apply.node import load
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import SettingError


# What the task says for each refusal (failures.py); the bios/health variable errors are SettingErrors too.
REFUSALS = (
    (SettingError, "nodetune verify: invalid variables: ", failures.errors_of),
    (audit_mod.WaiverError, "nodetune verify: ", None),
    (LayoutError, "nodetune verify could not plan this node: ", None),
    (NodeFileError, "nodetune verify: ", failures.path_of),
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", default="/"),
            areas=dict(type="dict", default={}),
            policy=dict(type="raw", default={}),
            persist_boot=dict(type="bool", default=True),
            bios=dict(type="dict", default={}),
            health=dict(type="dict", default={}),
            waivers=dict(type="list", elements="dict", default=[]),
            waivers_file=dict(type="path"),
            textfile_path=dict(type="path"),
            node_name=dict(type="str"),
            report_file=dict(type="path"),
            fail_on_drift=dict(type="bool", default=False),
            role_variables=dict(type="bool", default=False),
            findings_format=dict(type="str", choices=["list", "json"], default="list"),
            known_findings=dict(type="str"),
            learned_inventory=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    params = module.params

    def run_command(argv):
        return module.run_command(argv, check_rc=False)

    try:
        waivers = audit_mod.prepare(params["bios"], params["health"], params["waivers"], params["waivers_file"])
        state = load(params["root"], params["areas"], params["policy"], run_command,
                     expected_inventory=params["health"].get("nodetune_inventory_expected"),
                     persist_boot=params["persist_boot"], learned_inventory=params["learned_inventory"],
                     structure=StructureStore(params["root"]))  # read only: verify never writes it
        result = audit_mod.audit(state, params["areas"], params["bios"], params["health"], waivers,
                                 node_name=params["node_name"], textfile_path=params["textfile_path"],
                                 check_mode=module.check_mode, warn=module.warn,
                                 findings_format=params["findings_format"],
                                 known_findings=params["known_findings"])
    except Exception as exc:  # the refusals REFUSALS names; failure() raises any other again
        module.fail_json(**failures.failure(exc, REFUSALS))
    for warning in state.context.warnings:
        module.warn(warning)
    if not module._diff:
        result.pop("diff", None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
