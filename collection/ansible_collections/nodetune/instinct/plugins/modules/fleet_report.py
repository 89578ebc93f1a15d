#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: fleet_report
short_description: Write the fleet's verify reports (JUnit XML, summary) on the controller
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
"""

RETURN = r"""
summary:
  description:
    - C(nodes), C(clean) (hosts), C(drifted) (host to its drifting ids), C(failed) (host to the reason), C(counts),
      C(findings) (totals per status), C(drift_by_id) (per drifting id, on how many nodes and targets),
      C(top_drift_ids), C(text) (lines to print).
  type: dict
  returned: always
files:
  description: The files written.
  type: list
  elements: str
  returned: when O(write) is true
"""
