"""Bad layout policies are refused before any planning, with messages that name the setting, the value and
what is valid; topology-dependent mistakes (a CPU that does not exist, too many ranks) likewise."""

from __future__ import annotations

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import (
    LayoutError,
    Policy,
    PolicyError,
    plan,
    validate_policy,
)

from tests.support import topogen


def small_node(**changes) -> dict:
    spec = topogen.Spec(cpu_nodes=2, cores_per_node=4, threads=2,
                        gpus=[topogen.GpuSpec(0), topogen.GpuSpec(1)], nics=[topogen.NicSpec(0, 4)])
    for key, value in changes.items():
        setattr(spec, key, value)
    return topogen.build(spec)


def test_defaults():
    assert validate_policy(None) == Policy()
    assert validate_policy({}) == Policy()
    policy = validate_policy({})
    assert (policy.housekeeping, policy.smt, policy.irq_placement, policy.irqbalance, policy.ranks,
            policy.too_few_cores, policy.omp_threads) == (1, "keep", "local_cores", "disable", "per_partition",
                                                           "error", None)


@pytest.mark.parametrize(("policy", "words"), [
    ({"smt": "off"}, ["'smt'", "'off'", "'keep'", "'offline_siblings'", "'control_off'"]),
    ({"smt": True}, ["'smt'", "True"]),
    ({"irqbalance": "stop"}, ["'irqbalance'", "'stop'", "'disable'", "'ban'"]),
    ({"irq_placement": "cpu1"}, ["'irq_placement'", "'cpu1'", "'local_cores'"]),
    ({"ranks": "per_core"}, ["'ranks'", "'per_core'", "'per_partition'", "'per_gcd'", "'per_device'"]),
    ({"too_few_cores": "spill"}, ["'too_few_cores'", "'spill'", "'error'", "'share'"]),
    ({"rank_threads": "both"}, ["'rank_threads'", "'both'", "'primary'", "'all'"]),
    ({"omp_threads": 0}, ["'omp_threads'", "0", ">= 1"]),
    ({"omp_threads": "eight"}, ["'omp_threads'", "'eight'"]),
    ({"cores_per_rank": -2}, ["'cores_per_rank'", "-2", ">= 1"]),
    ({"irq_cores": "many"}, ["'irq_cores'", "'many'", "'auto'"]),
    ({"housekeeping": "0-3,x"}, ["'housekeeping'", "'0-3,x'", "'x'"]),
    ({"housekeeping": "5-2"}, ["'housekeeping'", "backwards"]),
    ({"housekeeping": ""}, ["'housekeeping'", "empty"]),
    ({"housekeeping": -1}, ["'housekeeping'", "-1", ">= 0"]),
    ({"housekeeping": True}, ["'housekeeping'", "True"]),
    ({"housekeeping": [0, "a"]}, ["'housekeeping'", "'a'"]),
    ({"housekeeping": 1.5}, ["'housekeeping'", "1.5"]),
    ({"smt": "offline_siblings", "rank_threads": "all"}, ["'rank_threads'", "'all'", "smt"]),
    ({"housekeping": 2}, ["'housekeping'", "housekeeping", "smt"]),
])
def test_bad_policy_names_setting_value_and_valid(policy, words):
    with pytest.raises(PolicyError) as err:
        validate_policy(policy)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_policy_must_be_a_mapping():
    with pytest.raises(PolicyError, match="mapping"):
        validate_policy(["smt", "keep"])


def test_integers_from_templated_strings_and_aliases():
    policy = validate_policy({"omp_threads": "4", "cores_per_rank": " 2 ", "irq_cores": "3", "ranks": "per_gcd",
                              "housekeeping": "0,8-9"})
    assert (policy.omp_threads, policy.cores_per_rank, policy.irq_cores, policy.ranks) == (4, 2, 3, "per_partition")
    assert policy.housekeeping == [0, 8, 9]
    assert validate_policy({"housekeeping": [9, 0, 9]}).housekeeping == [0, 9]


def test_housekeeping_cpu_that_does_not_exist():
    topo = small_node()
    with pytest.raises(PolicyError) as err:
        plan(topo, {"housekeeping": "0,999"})
    assert "CPU 999 does not exist" in str(err.value)
    assert "0-15" in str(err.value)  # the CPUs that do exist


def test_housekeeping_cpu_that_is_offline():
    topo = small_node(offline_siblings=(1,))  # core 1's sibling (CPU 9) is offline
    with pytest.raises(PolicyError, match="CPU 9 is offline"):
        plan(topo, {"housekeeping": [0, 9]})


def test_more_ranks_than_cores_is_a_clear_error():
    topo = small_node(gpus=[topogen.GpuSpec(0, partitions=4)])
    with pytest.raises(LayoutError) as err:
        plan(topo)
    message = str(err.value)
    assert "NUMA node 0 has 3 physical cores free after housekeeping for 4 GPU ranks" in message
    assert "too_few_cores" in message and "share" in message
    assert not isinstance(err.value, PolicyError)


def test_cores_per_rank_that_does_not_fit():
    topo = small_node()
    with pytest.raises(LayoutError, match="need"):
        plan(topo, {"cores_per_rank": 4})


def test_unsupported_topology_schema():
    topo = small_node()
    topo["schema"] = 2
    with pytest.raises(LayoutError, match="schema 2"):
        plan(topo)
    with pytest.raises(LayoutError, match="mapping"):
        plan("not a topology")  # type: ignore[arg-type]
