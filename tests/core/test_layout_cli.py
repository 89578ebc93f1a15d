"""``nodetune plan``: the stable JSON keys, the human tables, policy files and clean errors."""

from __future__ import annotations

import json

import pytest

from nodetune import cli, layout_tables
from tests.support import topogen

STABLE_KEYS = {"smt_offline", "smt_control", "housekeeping", "ranks", "irq_affinity", "managed_irqs", "irqbalance"}


@pytest.fixture
def topology_file(tmp_path):
    topo = topogen.build(topogen.Spec(cpu_nodes=2, cores_per_node=6, threads=2,
                                      gpus=[topogen.GpuSpec(0), topogen.GpuSpec(1, partitions=2)],
                                      nics=[topogen.NicSpec(0, 4), topogen.NicSpec(1, 4)],
                                      nvmes=[topogen.NvmeSpec(0, 2)]))
    path = tmp_path / "topology.json"
    path.write_text(json.dumps(topo))
    return path


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_has_the_documented_stable_keys(capsys, topology_file):
    code, out, err = run_cli(capsys, "plan", "--topology", str(topology_file), "--json")
    assert code == 0, err
    layout = json.loads(out)
    assert set(layout) >= STABLE_KEYS
    for rank in layout["ranks"]:
        assert {"gpu", "numa_node", "cpus", "env"} <= set(rank)
    for entry in layout["irq_affinity"]:
        assert {"irq", "device", "cpus", "reason"} <= set(entry)


def test_policy_file_yaml(capsys, tmp_path, topology_file):
    policy = tmp_path / "policy.yml"
    policy.write_text("smt: offline_siblings\nhousekeeping: 2\nirqbalance: ban\n")
    code, out, err = run_cli(capsys, "plan", "--topology", str(topology_file), "--policy", str(policy), "--json")
    assert code == 0, err
    layout = json.loads(out)
    assert layout["policy"]["housekeeping"] == 2 and layout["smt_offline"] == list(range(12, 24))
    assert layout["irqbalance"]["banned_cpulist"]


def test_human_view_has_a_table_per_numa_node(capsys, topology_file):
    code, out, err = run_cli(capsys, "plan", "--topology", str(topology_file))
    assert code == 0, err
    assert "NUMA node 0" in out and "NUMA node 1" in out
    # the default spreads the NIC vectors over the node's cores (issue 14.2)
    assert "rank 0" in out and "housekeeping" in out and "NIC IRQs (spread)" in out
    assert "irqbalance" in out


def test_node_rows_read_the_layout(topology_file):
    from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import plan

    layout = plan(json.loads(topology_file.read_text()))
    rows = layout_tables.node_rows(layout, layout["numa"][1])
    roles = [r[0] for r in rows]
    assert roles == ["housekeeping", "rank 1", "rank 2", "NIC IRQs (spread)"]
    assert rows[1][2].startswith("GPU 0000:11:00.0 partition 0/2")
    reserved = plan(json.loads(topology_file.read_text()), {"irq_cores": "auto"})
    assert [r[0] for r in layout_tables.node_rows(reserved, reserved["numa"][1])][-1] == "NIC IRQs (reserved)"


@pytest.mark.parametrize(("policy_text", "message"), [
    ('{"smt": "off"}', "policy error: policy setting 'smt' = 'off' is not valid"),
    ("housekeeping: '0-3,x'", "policy error: policy setting 'housekeeping'"),
    ("- a list", "must hold a mapping"),
    ("smt: [unclosed", "neither JSON nor YAML"),
])
def test_bad_policy_file_is_one_clear_line(capsys, tmp_path, topology_file, policy_text, message):
    policy = tmp_path / "policy.yml"
    policy.write_text(policy_text)
    code, out, err = run_cli(capsys, "plan", "--topology", str(topology_file), "--policy", str(policy))
    assert code == 1 and out == ""
    assert message in err and "Traceback" not in err


def test_missing_files_and_bad_roots(capsys, tmp_path, topology_file):
    code, _, err = run_cli(capsys, "plan", "--topology", str(topology_file), "--policy", str(tmp_path / "nope.yml"))
    assert code == 1 and "cannot read the policy file" in err
    code, _, err = run_cli(capsys, "plan", "--root", str(tmp_path))
    assert code == 1 and "nodetune plan: error:" in err and "Traceback" not in err


def test_too_few_cores_is_an_error_exit(capsys, tmp_path):
    topo = topogen.build(topogen.Spec(cpu_nodes=1, cores_per_node=2, gpus=[topogen.GpuSpec(0, partitions=4)]))
    path = tmp_path / "t.json"
    path.write_text(json.dumps(topo))
    code, _, err = run_cli(capsys, "plan", "--topology", str(path))
    assert code == 1 and "too_few_cores" in err
