#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: fleet_report
short_description: Write the fleet's verify reports (JUnit XML, summary, Prometheus) on the controller
description:
  - >-
    Reads every host's registered verify result from C(hostvars) (as stored, not templated) and writes the fleet
    JUnit XML (C(junit.xml), a testsuite per node, a testcase per check id whatever the number of CPUs or IRQs it
    covers, the drifting targets listed compactly; drift is a failure, C(not_applicable),
    C(unsupported) and C(waived) are skipped, a node without a result is an error) and C(summary.json) (nodes clean,
    drifted and failed, totals per status, per drifting id the nodes and targets, the most frequent drift ids) into
    O(dest), atomically. Each host's findings are read once and grouped per check id; the per-value detail is in the
    per-node JSON reports.
  - >-
    Learns each inventory group's majority where nothing is declared (docs/verify.md): a host that differs gets the
    C(inventory.<key>) drift finding a declaration would give, marked C(source: learned), in its report file
    (C(nodes/<host>.json)), the summary and the JUnit XML, and in RV(learned_findings); each host's learned
    expectation is kept in C(learned/<host>.json) under O(dest) for the next apply, which writes it into
    C(nodetune-check)'s files.
  - >-
    Also writes C(fleet.prom), the fleet's Prometheus text (nodes per verdict, per drifting check id its nodes and
    targets, outliers per key, per node its verdict and the time of its newest report), and, for a host that failed
    in this run, C(failed/<host>.json): its last report stays in C(nodes/), and the failure, newer, is what a fleet
    report over report files shows until a later run succeeds.
  - >-
    With O(sources), builds the same reports from the per-node report files that any number of runs, C(--limit)
    slices (AWX / Automation Platform job slicing) or controllers wrote, instead of from this play's results: the
    newest report of each node wins, and the outliers take the inventory groups each node's newest report recorded
    (docs/fleet.md). The same code as C(nodetune report DIR...).
  - >-
    Runs on the controller only (an action plugin, it never contacts a node) and writes in check mode too, since the
    reports are controller files, not node changes. Use it once per play (C(run_once)).
  - The verify role and the tune role (with C(nodetune_tune_verify)) run it; it replaces a C(copy) of the templated
    XML, which cost seconds per play and grew with the fleet.
version_added: "0.1.0"
author:
  - nodetune contributors (@nodetune)
options:
  dest:
    description:
      - The report directory on the controller (C(nodetune_report_dir)); created if missing. A relative path is
        relative to the folder ansible-playbook runs in.
    type: path
  hosts:
    description: The hosts to report on; defaults to C(ansible_play_hosts_all) (which keeps failed hosts).
    type: list
    elements: str
  sources:
    description:
      - Report folders (each the C(nodetune_report_dir) of a run or slice, holding C(nodes/<host>.json)) to build
        the reports from, instead of the play's registered results; O(hosts) and O(var) are then not used.
      - The learned expectations are written into O(dest) (C(learned/<host>.json)); a node report is rewritten only
        where it lies in O(dest)C(/nodes).
    type: list
    elements: path
  var:
    description:
      - The registered variable holding each host's verify result; a dotted path reaches inside a result
        (V(tune_result.verify) for the audit the tune module makes with its C(verify) option).
    type: str
    default: nodetune_verify_result
  write:
    description: Write the files. V(false) only returns the summary.
    type: bool
    default: true
  suite_name:
    description: The name of the JUnit C(testsuites) element.
    type: str
    default: nodetune verify
  top:
    description: How many drift ids to list in the summary, most frequent (by number of nodes) first.
    type: int
    default: 10
attributes:
  check_mode:
    description: Writes the controller files in check mode too; nodes are never touched.
    support: full
  diff_mode:
    description: No diff.
    support: none
  action:
    description: An action plugin, it runs on the controller.
    support: full
seealso:
  - module: nodetune.instinct.verify
  - plugin: nodetune.instinct.nodetune_fleet_reports
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Write the fleet reports
  nodetune.instinct.fleet_report:
    dest: "{{ playbook_dir }}/out/reports"
  run_once: true
  register: fleet

- name: Fleet summary
  ansible.builtin.debug:
    msg: "{{ fleet.summary.text }}"
  run_once: true

# After the slices of a sliced job template (AWX / Automation Platform): one play on localhost
- name: Find the slices' report folders
  ansible.builtin.find:
    paths: /reports/run-42
    patterns: "slice-*"
    file_type: directory
  register: slices

- name: The fleet reports of every slice
  nodetune.instinct.fleet_report:
    sources: "{{ slices.files | map(attribute='path') | sort }}"
    dest: /reports/run-42/fleet
  register: fleet
"""

RETURN = r"""
summary:
  description:
    - C(nodes), C(clean) (hosts), C(drifted) (host to its drifting ids), C(failed) (host to the reason), C(counts),
      C(findings) (totals per status), C(drift_by_id) (per drifting id, on how many nodes and targets),
      C(top_drift_ids), C(outliers), C(text) (lines to print).
    - C(sources) (host to the C(run), C(time), C(timestamp) and C(file) of the report it was judged on), C(runs)
      (per run, its nodes), C(unreadable) (report files that could not be read; their nodes are failed),
      C(group_sizes_differ) (groups whose inventory size the reports give differently).
  type: dict
  returned: always
files:
  description: The files written.
  type: list
  elements: str
  returned: when O(write) is true
learned_findings:
  description:
    - Host to its C(inventory.<key>) drift findings learned from its group's majority (C(source) V(learned)); the
      API adds them to the host's result.
  type: dict
  returned: always
learned_files:
  description: The learned-expectation files and node reports this run wrote or removed under O(dest).
  type: list
  elements: str
  returned: when O(write) is true
"""
