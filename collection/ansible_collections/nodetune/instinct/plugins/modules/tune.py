#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: tune
short_description: Apply nodetune's Settings to a node, journaled and all-or-nothing, or revert them
description:
  - Discovers the node's topology, plans its NUMA/IRQ/SMT layout, builds the desired Settings from the area
    variables the nodetune roles collect, and applies them in dependency order in one module call.
  - Every Setting is validated before anything is written; bad input fails with a message naming the variable,
    its value and what is valid, and the node is left untouched.
  - The previous value of everything it changes is kept in a journal under the root
    (C(var/lib/nodetune/journal.json), mode 0600). The first value ever seen is the baseline that I(state=reverted)
    restores. If a write fails, the changes of this run are restored before the module fails.
  - In check mode it returns the planned actions and the diff and writes nothing (not even the journal or lock).
  - A lock (C(flock) on the root directory itself, held from the read of the node and the journal to the last
    journal update) serializes concurrent runs on one node; O(lock_timeout) bounds the wait.
  - A journal that does not have the shape nodetune writes is refused with the reason and kept as it is.
  - Outside check mode it keeps the compiled code of its own payload in C(~/.cache/nodetune/bytecode) of the user it
    runs as (0700, entries keyed by the SHA-256 of their source, used only when that user owns them and nobody else
    can write them), so later calls do not recompile it; C(NODETUNE_BYTECODE_CACHE=0) in the task's C(environment)
    turns that off. It is not a node Setting and revert leaves it.
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
      - Area name (an area role declared in the collection's C(plugins/module_utils/areas/), for example V(nvme)
        or V(sysctl)) to a mapping of that area's role variables (for example
        C(nodetune_nvme_scheduler)). Areas not listed are not touched; an unknown name is refused, listing the known
        ones.
      - The roles of this collection build this mapping; see each role's README for its variables.
    type: dict
    default: {}
  policy:
    description:
      - >-
        Layout planner policy (see docs/layout.md), for example C({housekeeping: 1}). The SMT and irqbalance choices
        come from the smt and irq_affinity areas.
      - A mapping (or a JSON object as text); a C(key=value) string such as C(housekeeping=1) is refused.
    type: raw
    default: {}
  persist_boot:
    description:
      - >-
        Re-apply the runtime settings a reboot resets at boot (the C(nodetune-restore.service) unit, its program and
        its list of settings); V(false) where nothing boots the node with systemd. The role variable
        C(nodetune_persist_boot).
    type: bool
    default: true
  state:
    description:
      - V(present) applies the Settings; V(reverted) restores the journal baseline byte-exact and removes the files
        nodetune created.
    type: str
    choices: [present, reverted]
    default: present
  return_layout:
    description: Return the full Layout (large on big nodes) instead of a summary.
    type: bool
    default: false
  full_diff:
    description:
      - >-
        In diff mode, return every value on its own line and every file whole (thousands of lines on a fresh
        full-size node). By default the diff is grouped per setting id (a revert's per path shape), targets written
        compactly, a file as its path, settings count, size and SHA-256 digest (a small configuration file with its
        lines), and cut at 200 rendered lines per node. The role variable C(nodetune_full_diff).
    type: bool
    default: false
  lock_timeout:
    description: Seconds to wait for another nodetune run on the same node to finish (V(0) tries once).
    type: int
    default: 30
  bios:
    description:
      - The bios_check role's variables (C(nodetune_bios_*)). With I(state=present)
        the BIOS-level checks run read-only before anything is written; drifting findings are warnings with
        C(nodetune_bios_policy=warn) (the default) and make the module fail before any write with
        C(nodetune_bios_policy=fail). An empty mapping skips them (M(nodetune.instinct.verify) reports them).
    type: dict
    default: {}
  verify:
    description:
      - >-
        Also audit the node right after the apply, in the same call, exactly as M(nodetune.instinct.verify) does
        (the same findings, waivers, summary and report), and return it as RV(verify). site.yml uses this: at fleet
        scale each module call costs a process start and a discovery per host, so apply-then-verify is one call.
        After a run that changed the node, the node is discovered again before the audit; in check mode the audit
        sees the node as it is (what would change shows as drift).
      - >-
        The health thresholds and waivers are validated before anything is written. The tune action plugin builds
        this mapping from the verify role's variables when the task says C(verify: true) (the tune role does with
        C(nodetune_tune_verify)), writes the node's report on the controller and fails the host on drift with
        C(nodetune_verify_fail_on_drift), after the report is written.
    type: dict
    suboptions:
      areas:
        description:
          - >-
            The areas to audit, where they differ from O(areas) (the action plugin passes them when the run's tags
            select areas for a verify run that they do not select for an apply - C(--tags verify) applies nothing
            and audits every area). Not given, the applied O(areas) are audited.
        type: dict
      bios:
        description: The BIOS-level check variables of the audit, where they differ from O(bios).
        type: dict
      health:
        description: Health thresholds, as the O(nodetune.instinct.verify#module:health) option.
        type: dict
        default: {}
      waivers:
        description: Known exceptions, as the O(nodetune.instinct.verify#module:waivers) option.
        type: list
        elements: dict
        default: []
      textfile_path:
        description: The Prometheus textfile, as the O(nodetune.instinct.verify#module:textfile_path) option.
        type: path
      node_name:
        description: Name of the node in the report; defaults to the node's hostname.
        type: str
      learned_inventory:
        description:
          - >-
            The inventory learned from the node's group majority at the last verify, as the
            O(nodetune.instinct.verify#module:learned_inventory) option: the apply writes it, under any key
            C(nodetune_inventory_expected) does not declare, into C(/etc/nodetune/check.d/inventory.json) for
            C(nodetune-check). The action plugin reads it from C(nodetune_report_dir)/learned/.
        type: dict
      findings_format:
        description:
          - As the O(nodetune.instinct.verify#module:findings_format) option (the action plugin asks for V(json)).
        type: str
        choices: [list, json]
        default: list
      known_findings:
        description:
          - As the O(nodetune.instinct.verify#module:known_findings) option (the action plugin sets it).
        type: str
attributes:
  check_mode:
    description: Returns the planned actions and the diff; writes nothing, not even the journal or the lock.
    support: full
  diff_mode:
    description:
      - >-
        Returns before and after of what it changes (or would change), grouped and at most 200 lines per node
        (O(full_diff): every value). A revert returns each journal entry's current value and the baseline it
        restores (in check mode too); with O(verify) and a Prometheus textfile that changes, the textfile too.
    support: full
notes:
  - Disruptive changes (offlining CPUs, stopping irqbalance, IPoIB MTU changes) need their area's opt-in variable.
  - Settings that need a reboot (nvme module options) are reported with RV(reboot_required), never pretended applied.
"""

EXAMPLES = r"""
- name: Tune a node (check mode shows the plan)
  nodetune.instinct.tune:
    root: /
    areas:
      cpu:
        nodetune_cpu_governor: performance
        nodetune_cpu_idle_states_disabled: [C2]
      nvme:
        nodetune_nvme_scheduler: none
        nodetune_nvme_nr_requests: max
      sysctl:
        nodetune_vm_dirty_ratio: 20
        nodetune_vm_dirty_background_ratio: 10
  check_mode: true
  diff: true

- name: Put the node back as it was before nodetune
  nodetune.instinct.tune:
    root: /
    state: reverted
"""

RETURN = r"""
changed:
  description: Whether any Setting was (or, in check mode, would be) changed.
  type: bool
  returned: always
actions:
  description: The changes, in the order applied; each with id, target, path, kind, before, after, reason.
  type: list
  elements: dict
  returned: always
  sample: [{id: nvme.scheduler, target: nvme0n1, path: /sys/block/nvme0n1/queue/scheduler, before: mq-deadline,
            after: none, kind: attr, reboot_required: false, disruptive: false, reason: "..."}]
reboot_required:
  description: True when a change takes effect only after a reboot (e.g. nvme module options).
  type: bool
  returned: always
settings:
  description: Number of Settings nodetune manages on this node.
  type: int
  returned: state=present
layout:
  description: Summary of the planned layout (or the full Layout with O(return_layout)).
  type: dict
  returned: state=present
unconfirmed:
  description: Settings written without error that read back differently (the kernel clamped or ignored them).
  type: list
  elements: dict
  returned: when changed and not in check mode
restored:
  description:
    - Journal entries restored (state=reverted).
    - When some entries could not be restored, the module fails naming each of them, after trying every entry, and
      this lists the ones it did restore.
  type: list
  elements: str
  returned: state=reverted
gone:
  description:
    - Journal entries revert could not restore because their object (a device, CPU, IRQ or network interface) no
      longer exists on the node, each with its path and original value; they are dropped from the journal, and each
      is also a warning.
  type: list
  elements: str
  returned: state=reverted, when there are any
notes:
  description: Informational lines, e.g. areas not applicable on this node.
  type: list
  elements: str
  returned: state=present
bios:
  description: BIOS-level findings in status drift (see M(nodetune.instinct.verify) for the ids).
  type: list
  elements: dict
  returned: when O(bios) is set and state=present
verify:
  description:
    - The audit after the apply (with O(verify)), the result of M(nodetune.instinct.verify) - C(drift), C(findings),
      C(summary), C(report), C(notes) and, with a textfile, C(textfile).
    - Called through the action plugin (the tune role), C(findings) is ONE JSON text (decode it with
      C(from_json)) and C(report) holds everything but the findings; the node's report file and the fleet reports
      have them in full. A list of ~1,700 findings per node costs Ansible more controller CPU to carry than the
      audit costs to make.
  type: dict
  returned: when O(verify) is set and state=present
journal:
  description: Path of the journal under the root.
  type: str
  returned: always
"""

from ansible_collections.nodetune.instinct.plugins.module_utils import bytecode_cache

bytecode_cache.install(writes=True)  # first: the imports below then load from the node's bytecode cache

from contextlib import nullcontext

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.nodetune.instinct.plugins.module_utils.audit import audit as audit_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import bios as bios_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import diff_view
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine
from ansible_collections.nodetune.instinct.plugins.module_utils import failures
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import infiniband
from ansible_collections.nodetune.instinct.plugins.module_utils.discover import structure as structure_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import services as services_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import LayoutError
from ansible_collections.nodetune.instinct.plugins.module_utils.apply.node import (
    layout_summary,
    load,
    with_managed_cpus,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError, Root
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import SettingError


# Each refusal before or during the apply, and what the task says (failures.py); a subclass before its base.
REFUSALS = (
    (audit_mod.WaiverError, "nodetune refused the verify waivers, nothing was written: ", None),
    (bios_mod.BiosConfigError, "nodetune refused the BIOS-level or health check variables, nothing was written: ",
     failures.errors_of),
    (engine.JournalError, "nodetune refused the node's journal: ", failures.errors_of),
    (SettingError, "nodetune refused the settings, nothing was written: ", failures.errors_of),
    (LayoutError, "nodetune could not plan this node, nothing was written: ", None),
    (engine.ApplyError, "", lambda exc: {"setting": exc.setting.uid if exc.setting else None,
                                         "rolled_back": exc.rolled_back, "rollback_errors": exc.rollback_errors}),
    (engine.LockedError, "", None),
    (NodeFileError, "nodetune: ", failures.path_of),
)


def check_bios(module, state, config):
    """BIOS-level findings before any write: fail (policy fail) or warn (policy warn) on drift."""
    if not config:
        return []
    drift = [f.to_dict() for f in bios_mod.check(state.topology, state.layout, config) if f.status == "drift"]
    lines = ["%s[%s]: expected %s, found %s (%s)" % (f["id"], f["target"], f["expected"], f["actual"], f["remedy"])
             for f in drift]
    if drift and bios_mod.policy(config) == "fail":
        module.fail_json(msg="nodetune_bios_policy is 'fail' and %d BIOS-level check(s) drift, nothing was written: %s"
                         % (len(drift), "; ".join(lines)), bios=drift)
    for line in lines:
        module.warn("BIOS-level check: " + line)
    return drift


def audit_scope(params):
    """The areas and BIOS-level variables the audit covers: the verify option's own where given."""
    options = params["verify"] or {}
    areas = options["areas"] if options.get("areas") is not None else params["areas"]
    bios = options["bios"] if options.get("bios") is not None else params["bios"]
    return areas, bios


def expected_inventory(params):
    """The declared inventory (verify role's nodetune_inventory_expected) for the node-local checker's files."""
    return ((params["verify"] or {}).get("health") or {}).get("nodetune_inventory_expected")


def learned_inventory(params):
    """The inventory the fleet report learned from the group majority, for the node-local checker's files too."""
    return (params["verify"] or {}).get("learned_inventory")


def audit_after_apply(module, params, state, result, waivers, run_command, readings):
    """The verify result of the node as the apply left it. A run that wrote something discovers the node again
    (offlined siblings change the online CPUs, drivers renumber nothing but answer anew), and so does an audit of
    other areas than the applied ones; one that wrote nothing, or ran in check mode, audits the state it just
    read, with the Settings' values the apply read (``readings``)."""
    areas, bios = audit_scope(params)
    if not (result.get("changed") and not module.check_mode) and areas == params["areas"]:
        state.readings = readings
    else:
        state = load(params["root"], areas, params["policy"], run_command, persist_boot=params["persist_boot"],
                     expected_inventory=expected_inventory(params), learned_inventory=learned_inventory(params),
                     structure=state.structure)
    options = params["verify"]
    return audit_mod.audit(state, areas, bios, options["health"], waivers,
                           node_name=options["node_name"], textfile_path=options["textfile_path"],
                           check_mode=module.check_mode, warn=module.warn,
                           findings_format=options["findings_format"],
                           known_findings=options["known_findings"])


def keep_structure(root_path, state, rediscover):
    """Keep the node's structure for the next run (discover/structure.py), beside the journal only: a node nodetune
    never changed keeps nothing of it, and revert removes the structure with the journal. A run that changed the node
    and did not discover it again (no audit) does so first, taking what is unchanged from what it just read: the
    next run, a no-op, then finds it current and writes nothing."""
    if not state.root.exists(engine.JOURNAL):
        return
    if rediscover:
        try:
            discover(root_path, irq_counts=False, structure=state.structure, values=False)
        except NodeFileError:  # the apply stands; the next run discovers afresh
            return
    state.structure.save()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", default="/"),
            areas=dict(type="dict", default={}),
            policy=dict(type="raw", default={}),
            state=dict(type="str", choices=["present", "reverted"], default="present"),
            persist_boot=dict(type="bool", default=True),
            return_layout=dict(type="bool", default=False),
            full_diff=dict(type="bool", default=False),
            lock_timeout=dict(type="int", default=30),
            bios=dict(type="dict", default={}),
            verify=dict(type="dict", options=dict(
                areas=dict(type="dict"),
                bios=dict(type="dict"),
                health=dict(type="dict", default={}),
                waivers=dict(type="list", elements="dict", default=[]),
                textfile_path=dict(type="path"),
                node_name=dict(type="str"),
                findings_format=dict(type="str", choices=["list", "json"], default="list"),
                known_findings=dict(type="str"),
                learned_inventory=dict(type="dict"),
            )),
        ),
        supports_check_mode=True,
    )
    params = module.params

    def run_command(argv):
        return module.run_command(argv, check_rc=False)

    try:
        if params["state"] == "reverted":
            root = Root(params["root"])
            root.check_node()
            if not module.check_mode:
                structure_mod.forget(params["root"])
            try:
                result = engine.revert(root, check_mode=module.check_mode,
                                       services=services_mod.for_root(root, run_command),
                                       lock_timeout=params["lock_timeout"])
            except engine.ApplyError as exc:  # every entry was tried: say which ones were put back
                module.fail_json(msg=str(exc), restored=exc.rolled_back, rollback_errors=exc.rollback_errors,
                                 gone=exc.gone)
            for entry in result.get("gone", []):
                module.warn(entry)
            changes = result.pop("changes", [])
            if module._diff and changes:
                restored = set(result.get("restored") or [])  # the gone ones dropped
                changes = diff_view.from_revert(c for c in changes if c.get("key") in restored)
                headers = diff_view.REVERT_HEADERS
                result["diff"] = diff_view.full(changes, headers) if params["full_diff"] \
                    else diff_view.bounded(changes, headers=headers)
            module.exit_json(**result)
        audit_options = params["verify"]
        waivers = None
        if audit_options is not None:  # refused here, before any write, like every other input
            waivers = audit_mod.prepare(audit_scope(params)[1], audit_options["health"], audit_options["waivers"])
        # The lock is held from discovery on: Settings computed from a node that a concurrent revert is changing
        # would tune it to a half-reverted picture. Check mode writes nothing and takes no lock.
        with nullcontext() if module.check_mode else engine.NodeLock(Root(params["root"]), params["lock_timeout"]):
            state = load(params["root"], params["areas"], params["policy"], run_command,
                         persist_boot=params["persist_boot"], expected_inventory=expected_inventory(params),
                         learned_inventory=learned_inventory(params),
                         structure=structure_mod.StructureStore(params["root"], writable=not module.check_mode))
            bios_drift = check_bios(module, state, params["bios"])
            readings = {}
            result = engine.apply(state.root, state.settings, check_mode=module.check_mode, services=state.services,
                                  lock_held=not module.check_mode, readings=readings)
        if audit_options is not None:
            try:
                result["verify"] = audit_after_apply(module, params, state, result, waivers, run_command, readings)
            except (SettingError, LayoutError, NodeFileError) as exc:  # the apply stands: say so, with its result
                detail = "; ".join(exc.errors) if isinstance(exc, SettingError) else str(exc)
                module.fail_json(msg="nodetune applied the tuning (%d change(s), journaled) but could not audit the "
                                     "node after it: %s; audit it with playbooks/verify.yml"
                                     % (len(result.get("actions") or []), detail), **result)
        if not module.check_mode:
            keep_structure(params["root"], state, result.get("changed") and audit_options is None)
    except Exception as exc:  # the refusals REFUSALS names; failure() raises any other again
        module.fail_json(**failures.failure(exc, REFUSALS))

    textfile_diff = (result.get("verify") or {}).pop("diff", None)
    if textfile_diff:  # a report file nodetune writes on the node: part of what this call changed
        result["changed"] = True
    if not module._diff:
        result.pop("diff", None)
    elif not params["full_diff"] or textfile_diff:
        changes = diff_view.from_actions(result.get("actions") or [])
        if textfile_diff:
            changes.append(diff_view.Change("verify.textfile", "prometheus", textfile_diff["after_header"], "file",
                                            textfile_diff["before"] or None, textfile_diff["after"]))
        result["diff"] = diff_view.full(changes) if params["full_diff"] else diff_view.bounded(changes)
    result["settings"] = len(state.settings)
    result["layout"] = with_managed_cpus(state) if params["return_layout"] else layout_summary(state.layout)
    result["notes"] = state.context.notes
    if params["bios"]:
        result["bios"] = bios_drift
    for warning in state.context.warnings + list(state.layout.get("warnings") or []):
        module.warn(warning)
    for item in result.get("unconfirmed") or []:
        if item["id"] == "ib.mtu":
            module.warn(infiniband.cap_message(item["target"], item["expected"], item["actual"]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
