"""The collection's CPU list and layout filters: behaviour, errors, documentation, and use from Ansible."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.nodetune.instinct.plugins.filter import layout_filters as lf
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import plan
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import topogen

REPO = Path(__file__).resolve().parents[2]
FILTER_DIR = REPO / "collection" / "ansible_collections" / "nodetune" / "instinct" / "plugins" / "filter"
FILTERS = lf.FilterModule().filters()
ENV = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "collection"), ANSIBLE_NOCOLOR="1")
BIN = Path(sys.executable).parent


def test_cpulist_expand_and_compress():
    assert FILTERS["cpulist_expand"]("0-3,8,10-14:2/3") == [0, 1, 2, 3, 8, 10, 11, 13, 14]
    assert FILTERS["cpulist_expand"]([3, "1", 3]) == [1, 3]
    assert FILTERS["cpulist_expand"]("") == [] and FILTERS["cpulist_expand"](None) == []
    assert FILTERS["cpulist_compress"]([8, 3, 2, 1, 0]) == "0-3,8"
    assert FILTERS["cpulist_compress"]("8,0-3,2") == "0-3,8"
    assert FILTERS["cpulist"]([0, 2, 3]) == "0,2-3"


@pytest.mark.parametrize(("name", "value", "words"), [
    ("cpulist_expand", "0-3,x", ["cpulist_expand", "'x'"]),
    ("cpulist_expand", [1, -2], ["cpulist_expand", "-2"]),
    ("cpulist_expand", [True], ["cpulist_expand", "None"]),
    ("cpulist_compress", {"a": 1}, ["cpulist_compress", "dict"]),
    ("cpumask_to_cpulist", "zz", ["cpumask_to_cpulist", "'zz'", "hex"]),
    ("smt_siblings", "not a topology", ["smt_siblings", "topology fact"]),
    ("numa_layout", {"cpus": []}, None),
])
def test_bad_input_is_a_filter_error_naming_the_value(name, value, words):
    if words is None:  # a valid (empty) topology plans to nothing
        assert FILTERS[name](value)["ranks"] == []
        return
    with pytest.raises(AnsibleFilterError) as err:
        FILTERS[name](value)
    for word in words:
        assert word in str(err.value)


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 1200), max_size=80))
def test_cpulist_and_cpumask_round_trip(cpus):
    text = FILTERS["cpulist_compress"](sorted(cpus))
    assert FILTERS["cpulist_expand"](text) == sorted(cpus)
    mask = FILTERS["cpulist_to_cpumask"](text)
    assert all(len(word) == 8 for word in mask.split(","))
    assert FILTERS["cpumask_to_cpulist"](mask) == text


def test_cpumask_kernel_format():
    assert FILTERS["cpulist_to_cpumask"]("0-3,33") == "00000002,0000000f"
    assert FILTERS["cpulist_to_cpumask"]([0], 96) == "00000000,00000000,00000001"
    assert FILTERS["cpumask_to_cpulist"]("0x00000001,00000000") == "32"
    with pytest.raises(AnsibleFilterError, match="nr_cpus"):
        FILTERS["cpulist_to_cpumask"]([0], 0)


def test_smt_siblings_are_the_true_cores():
    topo = topogen.build(topogen.Spec(cpu_nodes=2, cores_per_node=3, threads=2, sibling_style="offset"))
    assert FILTERS["smt_siblings"](topo) == topo["_truth"]["cores"] == [[0, 6], [1, 7], [2, 8], [3, 9], [4, 10],
                                                                         [5, 11]]


def test_layout_filters_are_the_planner_halves():
    topo = topogen.build(topogen.Spec(cpu_nodes=2, cores_per_node=6, gpus=[topogen.GpuSpec(0)],
                                      nics=[topogen.NicSpec(1, 2)], nvmes=[topogen.NvmeSpec(0, 2)]))
    policy = {"smt": "offline_siblings", "irqbalance": "ban"}
    whole = plan(topo, policy)
    assert FILTERS["node_layout"](topo, policy) == whole
    numa, irq = FILTERS["numa_layout"](topo, policy), FILTERS["irq_layout"](topo, policy)
    for part in (numa, irq):
        assert all(part[k] == whole[k] for k in part)
    assert {"smt_offline", "smt_control", "housekeeping", "ranks", "numa"} <= set(numa)
    assert {"irq_affinity", "managed_irqs", "irqbalance", "nic_irq_cpus", "gpu_irq_affinity"} <= set(irq)
    assert irq["gpu_irq_affinity"] and "ranks" not in irq
    with pytest.raises(AnsibleFilterError, match="numa_layout: policy setting 'smt'"):
        FILTERS["numa_layout"](topo, {"smt": "off"})


def test_every_filter_has_its_documentation_file_and_ansible_doc_shows_it():
    names = sorted(FILTERS)
    assert set(names) <= {p.stem for p in FILTER_DIR.glob("*.yml")}
    command = [str(BIN / "ansible-doc"), "-t", "filter", "--json"] + ["nodetune.instinct." + n for n in names]
    out = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=120, check=True)
    docs = json.loads(out.stdout)
    for name in names:
        doc = docs["nodetune.instinct." + name]
        assert doc["doc"]["name"] == name and doc["doc"]["short_description"]
        assert doc["examples"] and doc["return"]["_value"]["type"]


def test_filters_from_a_playbook_template(tmp_path):
    """The filters resolve through the collection path, as a playbook uses them."""
    topo = topogen.build(topogen.Spec(cpu_nodes=1, cores_per_node=4, gpus=[topogen.GpuSpec(0)]))
    (tmp_path / "topo.json").write_text(json.dumps(topo))
    playbook = tmp_path / "play.yml"
    playbook.write_text("""
- hosts: localhost
  gather_facts: false
  vars:
    topo: "{{ lookup('file', 'topo.json') | from_json }}"
  tasks:
    - ansible.builtin.copy:
        dest: "{{ playbook_dir }}/out.json"
        content: "{{ {'expand': '0-2,5' | nodetune.instinct.cpulist_expand,
                  'mask': '0-3' | nodetune.instinct.cpulist_to_cpumask,
                  'cores': topo | nodetune.instinct.smt_siblings | length,
                  'rank0': (topo | nodetune.instinct.numa_layout({'housekeeping': 1})).ranks[0].cpus
                             | nodetune.instinct.cpulist } | to_json }}"
""")
    out = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook),
                          "-e", f"ansible_python_interpreter={sys.executable}"],
                         env=ENV, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    assert result == {"expand": [0, 1, 2, 5], "mask": "0000000f", "cores": 4, "rank0": "1-3"}
