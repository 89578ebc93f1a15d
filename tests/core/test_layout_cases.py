"""The planner on hand-built nodes: the seeds' mistakes, odd localities, every policy option."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import plan

from tests.support import topogen
from tests.support.topogen import GpuSpec, NicSpec, NvmeSpec, Spec


def ranks_by_gpu(layout: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for rank in layout["ranks"]:
        out.setdefault(rank["gpu"], []).append(rank)
    return out


# --- SMT: never the seed's fixed {8..15} --------------------------------------------------------------------


def test_siblings_numbered_n_plus_cores_are_offlined_not_8_to_15():
    topo = topogen.build(Spec(cpu_nodes=2, cores_per_node=8, threads=2, sibling_style="offset"))
    layout = plan(topo, {"smt": "offline_siblings"})
    assert layout["smt_offline"] == list(range(16, 32))
    assert layout["smt_control"] is None


def test_adjacent_siblings_offline_the_odd_cpus():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=8, threads=2, sibling_style="adjacent"))
    layout = plan(topo, {"smt": "offline_siblings"})
    assert layout["smt_offline"] == list(range(1, 16, 2))


def test_smt_control_off_instead_of_a_list():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=4, threads=2))
    layout = plan(topo, {"smt": "control_off"})
    assert layout["smt_control"] == "off" and layout["smt_offline"] == []
    # the ranks and IRQs already avoid the threads that smt/control=off takes away
    assert layout["housekeeping"] == [0]


def test_smt_control_off_without_control_file_falls_back_to_a_list():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=4, threads=2))
    topo["smt"]["control"] = None
    layout = plan(topo, {"smt": "control_off"})
    assert layout["smt_control"] is None and layout["smt_offline"] == [4, 5, 6, 7]
    assert any("control_off" in w for w in layout["warnings"])


@pytest.mark.parametrize("control", ["notsupported", "forceoff"])
def test_nothing_to_offline_where_smt_is_unavailable(control):
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=4, threads=1))
    topo["smt"]["control"] = control
    layout = plan(topo, {"smt": "offline_siblings"})
    assert layout["smt_offline"] == [] and layout["smt_control"] is None


def test_cpus_without_online_file_are_not_listed_and_warned():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=4, threads=2))
    for cpu in topo["cpus"]:
        if cpu["id"] == 5:
            cpu["hotpluggable"] = False
    layout = plan(topo, {"smt": "offline_siblings"})
    assert layout["smt_offline"] == [4, 6, 7]
    assert any("CPUs 5 cannot be offlined" in w for w in layout["warnings"])


def test_offline_cpus_known_through_an_online_sibling_stay_in_the_offline_set():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=2, threads=2))  # cores {0,2} {1,3}
    for cpu in topo["cpus"]:
        if cpu["id"] == 3:
            cpu.update(online=False, core_id=None, package=None, die=None, numa_node=None, thread_siblings=None)
    topo["cpu_lists"]["online"] = [0, 1, 2]
    layout = plan(topo, {"smt": "offline_siblings", "housekeeping": 0})
    assert layout["smt_offline"] == [2, 3]  # CPU 3 is still listed by CPU 1's thread_siblings
    assert {r for r in layout["numa"][0]["cpus"]} == {0, 1}


# --- ranks -----------------------------------------------------------------------------------------------------


def mi300x_like() -> dict:
    """2 sockets x 96 cores, SMT on (384 CPUs), 4 GPUs and 4 NICs per NUMA node (NPS1)."""
    return topogen.build(Spec(
        cpu_nodes=2, cores_per_node=96, threads=2, sockets=2,
        gpus=[GpuSpec(i // 4) for i in range(8)],
        nics=[NicSpec(i // 4, comp_vectors=63) for i in range(8)],
        nvmes=[NvmeSpec(0, 32), NvmeSpec(1, 32)],
    ))


def test_mi300x_like_default_spreads_the_nic_vectors_over_the_whole_node():
    """Issue 14.2: 4 NICs x 63 vectors per node over 95 non-housekeeping cores: at most ceil(252/95) = 3 each."""
    layout = plan(mi300x_like())
    load: dict[int, int] = {}
    for entry in layout["irq_affinity"]:
        load[entry["cpus"][0]] = load.get(entry["cpus"][0], 0) + 1
    assert max(load.values()) == 3 and len(load) == 2 * 95
    for node in layout["numa"]:
        assert node["per_rank_cores"] == 23 and node["irq_mode"] == "spread"
    assert "node 0: 252 vectors, at most 3 per core (bound ceil(252 / 95) = 3)" in layout["reasons"]["nic_irqs"]
    assert "set_irq_affinity_bynode" in layout["irq_affinity"][0]["reason"]


def test_mi300x_like_split():
    layout = plan(mi300x_like(), {"irq_cores": "auto"})
    # the explicit reservation trades per-core IRQ load for rank cores free of interrupts, and says so
    assert any("252 NIC completion vectors on 7 reserved cores, up to 36 per core" in w and "at most 3" in w
               for w in layout["warnings"])
    assert "7 reserved cores kept off the rank cores" in layout["reasons"]["nic_irqs"]
    # per node: 96 cores - 1 housekeeping - 4 reserved for 4 NICs = 91 -> 22 cores per rank, 7 left for IRQs
    for node in layout["numa"]:
        assert node["per_rank_cores"] == 22
        assert len(node["irq_cpus"]) == 7 and node["irq_mode"] == "reserved"
    assert [r["cpus"][0] for r in layout["ranks"]] == [8, 30, 52, 74, 104, 126, 148, 170]
    assert layout["ranks"][0]["cpus"] == list(range(8, 30))
    assert layout["numa"][0]["irq_cpus"] == list(range(1, 8))
    assert layout["housekeeping"] == [0, 96, 192, 288]  # SMT kept: the housekeeping cores' two threads
    # nearest NICs reported per rank; RCCL gets one node-wide selection (issue 24.1)
    assert layout["ranks"][0]["hcas"] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert layout["ranks"][4]["netdevs"] == ["ib4", "ib5", "ib6", "ib7"]
    assert layout["nccl_env"]["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}" for i in range(8))
    assert layout["ranks"][4]["numactl"] == ["--physcpubind=104-125", "--preferred=1"]
    assert len(layout["irq_affinity"]) == 8 * 63 and len(layout["managed_irqs"]) == 64


def test_cores_per_rank_leaves_the_rest_to_irqs():
    layout = plan(mi300x_like(), {"cores_per_rank": 16, "irq_cores": "auto"})
    assert {len(r["cpus"]) for r in layout["ranks"]} == {16}
    assert len(layout["numa"][0]["irq_cpus"]) == 95 - 64


def test_rank_order_follows_kfd_nodes():
    topo = topogen.build(Spec(cpu_nodes=2, cores_per_node=8, gpus=[GpuSpec(0), GpuSpec(1), GpuSpec(0)]))
    topo["gpus"][0]["kfd_nodes"], topo["gpus"][1]["kfd_nodes"], topo["gpus"][2]["kfd_nodes"] = [3], [1], [2]
    layout = plan(topo)
    # HIP device order is ROCr's agent order, which is the KFD topology node order, not the BDF order
    assert [r["gpu"] for r in layout["ranks"]] == ["0000:11:00.0", "0000:12:00.0", "0000:10:00.0"]
    assert [r["kfd_node"] for r in layout["ranks"]] == [1, 2, 3]


def test_partitions_share_a_bdf_and_get_one_rank_each():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=16, threads=1, gpus=[GpuSpec(0, partitions=4)]))
    layout = plan(topo)
    ranks = layout["ranks"]
    assert [r["partition"] for r in ranks] == [0, 1, 2, 3] and {r["gpu"] for r in ranks} == {"0000:10:00.0"}
    # 15 free cores / 4 = 3 each; the 3 left over sit next to housekeeping (spare), ranks take the rest
    assert [r["cpus"] for r in ranks] == [[4, 5, 6], [7, 8, 9], [10, 11, 12], [13, 14, 15]]
    assert layout["numa"][0]["spare"] == [1, 2, 3]
    per_device = plan(topo, {"ranks": "per_device"})
    assert len(per_device["ranks"]) == 1 and per_device["ranks"][0]["cpus"] == list(range(1, 16))


def test_two_entries_for_one_bdf_are_merged():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=8, threads=1, gpus=[GpuSpec(0, partitions=2)]))
    first = copy.deepcopy(topo["gpus"][0])
    first["kfd_nodes"], first["partitions"] = [1], 1
    second = copy.deepcopy(first)
    second["kfd_nodes"] = [2]
    topo["gpus"] = [second, first]
    assert [r["kfd_node"] for r in plan(topo)["ranks"]] == [1, 2]


def test_gpu_on_a_cpu_less_node_binds_to_the_nearest_node_with_cpus():
    topo = topogen.build(Spec(cpu_nodes=2, memory_nodes=1, cores_per_node=4, threads=1, gpus=[GpuSpec(1)]))
    memory_node = topo["numa_nodes"][2]
    assert memory_node["cpus"] == []
    memory_node["distances"] = {"0": 30, "1": 20, "2": 10}
    topo["gpus"][0]["numa_node"] = 2
    [rank] = plan(topo)["ranks"]
    assert rank["numa_node"] == 1 and set(rank["cpus"]) <= {4, 5, 6, 7}
    assert "numa_node 2 has no online CPUs" in rank["reason"]


def test_gpu_with_unknown_node_uses_local_cpus():
    topo = topogen.build(Spec(cpu_nodes=2, cores_per_node=4, threads=1, gpus=[GpuSpec(1, unknown_numa=True)]))
    [rank] = plan(topo)["ranks"]
    assert rank["numa_node"] == 1 and rank["gpu_numa_node"] == -1 and set(rank["cpus"]) <= {4, 5, 6, 7}
    assert "local_cpus" in rank["reason"]


def test_gpus_with_no_locality_at_all_are_balanced_with_a_warning():
    topo = topogen.build(Spec(cpu_nodes=2, cores_per_node=4, threads=1, gpus=[GpuSpec(0), GpuSpec(0), GpuSpec(0)]))
    for gpu in topo["gpus"][1:]:
        gpu["numa_node"], gpu["local_cpus"] = -1, None
    for dev in topo["pci_devices"]:
        dev["numa_node"], dev["local_cpus"] = -1, None
    layout = plan(topo)
    assert [r["numa_node"] for r in layout["ranks"]] == [0, 1, 0]
    assert any("no known NUMA node" in w for w in layout["warnings"])


def test_narrow_local_cpus_are_respected():
    """numa_node -1 and local_cpus covering only part of the node (e.g. sub-NUMA clustering off in firmware)."""
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=8, threads=1, gpus=[GpuSpec(0), GpuSpec(0)]))
    topo["gpus"][1]["numa_node"], topo["gpus"][1]["local_cpus"] = -1, [1, 2, 3]
    layout = plan(topo, {"housekeeping": 1})
    by_gpu = ranks_by_gpu(layout)
    assert set(by_gpu["0000:11:00.0"][0]["cpus"]) <= {1, 2, 3}
    assert not set(by_gpu["0000:10:00.0"][0]["cpus"]) & {1, 2, 3}


def test_share_fallback_binds_ranks_to_the_whole_node():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=3, threads=1, gpus=[GpuSpec(0, partitions=4)]))
    layout = plan(topo, {"too_few_cores": "share"})
    assert all(r["shared"] and r["cpus"] == [1, 2] for r in layout["ranks"])
    assert all(r["env"]["OMP_NUM_THREADS"] == "1" for r in layout["ranks"])
    assert any("share" in w for w in layout["warnings"])


def test_explicit_housekeeping_reserves_whole_cores():
    topo = topogen.build(Spec(cpu_nodes=2, cores_per_node=4, threads=2, gpus=[GpuSpec(0), GpuSpec(1)]))
    layout = plan(topo, {"housekeeping": "0,13"})  # 13 is the sibling of CPU 5
    assert layout["housekeeping"] == [0, 5, 8, 13]
    assert layout["ranks"][0]["cpus"] == [1, 2, 3] and layout["ranks"][1]["cpus"] == [4, 6, 7]


def test_omp_threads_and_rank_threads_all():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=5, threads=2, gpus=[GpuSpec(0), GpuSpec(0)]))
    layout = plan(topo, {"rank_threads": "all", "omp_threads": 3})
    assert layout["ranks"][0]["cpus"] == [1, 2, 6, 7]
    assert layout["ranks"][0]["env"] == {"OMP_NUM_THREADS": "3"}  # no GOMP_CPU_AFFINITY: it pins to one CPU


# --- IRQs --------------------------------------------------------------------------------------------------------


def test_nic_irqs_round_robin_on_reserved_cores_away_from_ranks():
    topo = topogen.build(Spec(cpu_nodes=2, cores_per_node=10, threads=2,
                              gpus=[GpuSpec(0), GpuSpec(0)], nics=[NicSpec(0, 6), NicSpec(1, 3)]))
    layout = plan(topo, {"irq_cores": "auto"})
    node0 = layout["numa"][0]
    # 10 cores - 1 housekeeping - 1 for the NIC = 8 -> 4 per rank, and 1 left: CPU 1 takes the NIC's IRQs
    assert node0["per_rank_cores"] == 4 and node0["irq_cpus"] == [1]
    on_nic0 = [e for e in layout["irq_affinity"] if e["device"] == "0000:80:00.0"]
    assert [e["cpus"] for e in on_nic0] == [[1]] * 6
    # node 1 has no GPU: its NIC's vectors spread over all 9 non-housekeeping cores, one each
    on_nic1 = [e["cpus"][0] for e in layout["irq_affinity"] if e["device"] == "0000:81:00.0"]
    assert on_nic1 == [11, 12, 13] and layout["numa"][1]["irq_mode"] == "all_cores"
    assert all("reason" in e and "completion vector" in e["reason"] for e in layout["irq_affinity"])


def test_async_vectors_and_managed_queues_are_never_placed():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=4, nics=[NicSpec(0, 2)], nvmes=[NvmeSpec(0, 3)]))
    layout = plan(topo)
    names = {e["name"] for e in layout["irq_affinity"]}
    assert names == {"mlx5_comp0@pci:0000:80:00.0", "mlx5_comp1@pci:0000:80:00.0"}
    assert [e["name"] for e in layout["irq_left_alone"]] == ["mlx5_async0@pci:0000:80:00.0"]
    assert [(m["name"], m["source"]) for m in layout["managed_irqs"]] == [
        ("nvme0q1", "effective_affinity_list"), ("nvme0q2", "effective_affinity_list"),
        ("nvme0q3", "effective_affinity_list")]


def test_irqs_recognised_by_name_when_kind_is_missing():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=4, nics=[NicSpec(0, 2)], nvmes=[NvmeSpec(0, 2)]))
    for irq in topo["irqs"]:
        irq["kind"], irq["managed"], irq["device"] = None, None, None
        irq["effective_affinity_list"] = None
    layout = plan(topo)
    assert len(layout["irq_affinity"]) == 2
    assert [m["source"] for m in layout["managed_irqs"]] == ["smp_affinity_list"] * 2


def test_nic_with_unknown_node_follows_its_local_cpus():
    topo = topogen.build(Spec(cpu_nodes=2, cores_per_node=4, threads=1, nics=[NicSpec(1, 3, unknown_numa=True)]))
    layout = plan(topo)
    assert {e["cpus"][0] for e in layout["irq_affinity"]} == {5, 6, 7}


def test_leave_policy_places_nothing():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=4, nics=[NicSpec(0, 2)]))
    layout = plan(topo, {"irq_placement": "leave"})
    assert layout["irq_affinity"] == [] and len(layout["irq_left_alone"]) == 3


def test_irqbalance_ban_lists_irq_cpus_with_siblings_and_the_pinned_irqs():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=6, threads=2, gpus=[GpuSpec(0)], nics=[NicSpec(0, 2)]))
    layout = plan(topo, {"irqbalance": "ban", "irq_cores": "auto"})
    assert layout["nic_irq_cpus"] == [1]
    # the NIC vectors' reserved core 1 and the GPU vector's rank core 2, each with its SMT sibling
    assert [e["cpus"] for e in layout["gpu_irq_affinity"]] == [[2]]
    assert layout["irqbalance"]["banned_cpulist"] == [1, 2, 7, 8]
    pinned = layout["irq_affinity"] + layout["gpu_irq_affinity"]
    assert layout["irqbalance"]["banned_irqs"] == sorted(e["irq"] for e in pinned)
    assert plan(topo)["irqbalance"]["banned_cpulist"] is None


# --- GPU vectors (amdgpu: one per PCI function) -------------------------------------------------------------------


def gpu_vectors(layout: dict) -> dict[str, list[int]]:
    return {e["device"]: e["cpus"] for e in layout["gpu_irq_affinity"]}


def test_each_gpu_vector_goes_to_the_first_core_of_its_own_rank():
    topo = topogen.build(Spec(cpu_nodes=2, cores_per_node=8, threads=2,
                              gpus=[GpuSpec(0), GpuSpec(0), GpuSpec(1)], nics=[NicSpec(0, 4)]))
    layout = plan(topo)
    ranks = {r["gpu"]: r for r in layout["ranks"]}
    assert gpu_vectors(layout) == {bdf: [rank["cpus"][0]] for bdf, rank in ranks.items()}
    assert len({cpus[0] for cpus in gpu_vectors(layout).values()}) == 3
    for entry in layout["gpu_irq_affinity"]:
        assert entry["name"] == "amdgpu" and entry["numa_node"] == ranks[entry["device"]]["numa_node"]
        assert entry["rank"] == ranks[entry["device"]]["rank"]
        assert f"rank {entry['rank']}" in entry["reason"] and "KFD" in entry["reason"]
    # not NIC vectors: the NIC-only keys stay as they were
    assert {e["device"] for e in layout["irq_affinity"]} == {"0000:80:00.0"}
    assert set(layout["nic_irq_cpus"]) == {e["cpus"][0] for e in layout["irq_affinity"]}


def test_a_partitioned_gpu_has_one_vector_on_its_first_partitions_rank():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=16, threads=1, gpus=[GpuSpec(0, partitions=4)]))
    layout = plan(topo)
    assert [r["cpus"][0] for r in layout["ranks"]] == [4, 7, 10, 13]
    [entry] = layout["gpu_irq_affinity"]
    assert entry["cpus"] == [4] and entry["rank"] == 0


def test_gpus_of_shared_ranks_spread_over_the_shared_cores():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=3, threads=1, gpus=[GpuSpec(0)] * 3))
    layout = plan(topo, {"too_few_cores": "share"})
    assert all(r["shared"] and r["cpus"] == [1, 2] for r in layout["ranks"])
    # one GPU per core while cores last, then the least-taken core again
    assert [gpu_vectors(layout)[bdf] for bdf in sorted(gpu_vectors(layout))] == [[1], [2], [1]]
    assert all("shared cores" in e["reason"] for e in layout["gpu_irq_affinity"])


def test_gpu_vectors_left_alone_by_policy_or_without_a_device():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=4, threads=1, gpus=[GpuSpec(0), GpuSpec(0)]))
    left = plan(topo, {"irq_placement": "leave"})
    assert left["gpu_irq_affinity"] == []
    leave = ("amdgpu", "policy irq_placement 'leave'")
    assert [(e["name"], e["reason"]) for e in left["irq_left_alone"]] == [leave, leave]
    # an amdgpu vector whose PCI device discovery could not tell: no rank, so no core to choose
    topo["irqs"][-1]["device"] = None
    layout = plan(topo)
    assert [e["device"] for e in layout["gpu_irq_affinity"]] == ["0000:10:00.0"]
    [alone] = [e for e in layout["irq_left_alone"] if e["name"] == "amdgpu"]
    assert alone["irq"] == topo["irqs"][-1]["irq"] and "device is unknown" in alone["reason"]


def test_gpu_vector_recognised_by_name_when_kind_is_missing_and_managed_ones_are_not_moved():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=4, threads=1, gpus=[GpuSpec(0)]))
    topo["irqs"][-1]["kind"] = None
    assert [e["cpus"] for e in plan(topo)["gpu_irq_affinity"]] == [[1]]
    topo["irqs"][-1]["managed"] = True  # a read-only affinity: reported as managed, never written
    layout = plan(topo)
    assert layout["gpu_irq_affinity"] == [] and [m["name"] for m in layout["managed_irqs"]] == ["amdgpu"]


def test_too_few_cores_for_irq_reservation_shares_with_a_warning():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=3, threads=1,
                              gpus=[GpuSpec(0), GpuSpec(0)], nics=[NicSpec(0, 2)]))
    layout = plan(topo, {"irq_cores": "auto"})
    assert layout["numa"][0]["irq_mode"] == "shared"
    assert any("share the rank cores" in w for w in layout["warnings"])


# --- NCCL NICs ---------------------------------------------------------------------------------------------------


def test_nccl_nics_same_node_then_same_socket_then_any():
    topo = topogen.build(Spec(cpu_nodes=4, cores_per_node=4, threads=1, sockets=2,
                              gpus=[GpuSpec(0), GpuSpec(1), GpuSpec(2)], nics=[NicSpec(0, 1)]))
    layout = plan(topo)
    hcas = [r["hcas"] for r in layout["ranks"]]
    assert hcas[0] == ["mlx5_0"]  # same node
    assert hcas[1] == ["mlx5_0"] and "same socket" in layout["ranks"][1]["reason"]
    assert hcas[2] == ["mlx5_0"] and "all NICs" in layout["ranks"][2]["reason"]


def test_down_hcas_and_netdevs_are_not_offered():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=4, gpus=[GpuSpec(0)], nics=[NicSpec(0, 1), NicSpec(0, 1)]))
    topo["ib_devices"][0]["ports"][0]["state"] = "DOWN"
    topo["nics"][0]["operstate"] = "down"
    layout = plan(topo)
    assert layout["ranks"][0]["hcas"] == ["mlx5_1"] and layout["ranks"][0]["netdevs"] == ["ib1"]
    assert layout["nccl_env"] == {"NCCL_IB_HCA": "=mlx5_1", "NCCL_SOCKET_IFNAME": "=ib1"}


def test_no_nics_no_nccl_variables():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=4, gpus=[GpuSpec(0)]))
    [rank] = plan(topo)["ranks"]
    assert set(rank["env"]) == {"OMP_NUM_THREADS"}


# --- odd topologies ----------------------------------------------------------------------------------------------


def test_no_numa_information_is_one_node_with_a_warning():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=4, gpus=[GpuSpec(0)]))
    topo["numa_nodes"] = []
    for cpu in topo["cpus"]:
        cpu["numa_node"] = None
    layout = plan(topo)
    assert layout["ranks"][0]["numa_node"] == 0
    assert any("no NUMA information" in w for w in layout["warnings"])


def test_empty_topology_plans_nothing():
    layout = plan({"schema": 1, "cpus": []})
    assert layout["ranks"] == [] and layout["smt_offline"] == [] and layout["irq_affinity"] == []


def test_sparse_node_ids_and_cpu_numbering():
    topo = topogen.build(Spec(cpu_nodes=3, sparse_node_ids=True, cpu_gap=16, cores_per_node=4, threads=1,
                              gpus=[GpuSpec(2)]))
    layout = plan(topo)
    assert [n["node"] for n in layout["numa"]] == [0, 3, 5]
    assert layout["ranks"][0]["numa_node"] == 5 and layout["ranks"][0]["cpus"] == [41, 42, 43]


def test_nccl_prefers_fabric_netdevs_and_the_node_env_lists_every_nic():
    topo = topogen.build(Spec(cpu_nodes=2, cores_per_node=4, gpus=[GpuSpec(0), GpuSpec(1)],
                              nics=[NicSpec(0, 1), NicSpec(1, 1, ib=False)]))
    topo["pci_devices"].append({"bdf": "0000:0b:00.0", "numa_node": 0, "local_cpus": [0, 1, 2, 3]})
    topo["nics"].append({"name": "eno1", "bdf": "0000:0b:00.0", "type": "ether", "operstate": "up",
                         "ib_device": None, "numa_node": 0})
    layout = plan(topo)
    # eno1 (a management port) shares node 0 with ib0, but NCCL gets the fabric: IPoIB and the RoCE port eth1
    assert layout["ranks"][0]["netdevs"] == ["ib0"]
    assert layout["ranks"][1]["netdevs"] == ["eth1"]
    assert layout["nccl_env"] == {"NCCL_SOCKET_IFNAME": "=eth1,ib0", "NCCL_IB_HCA": "=mlx5_0,mlx5_1"}
    del topo["nics"][:2]
    assert plan(topo)["nccl_env"]["NCCL_SOCKET_IFNAME"] == "=eno1"  # no fabric netdev: plain Ethernet


# --- L3 domains --------------------------------------------------------------------------------------------------


def test_ranks_get_whole_l3_domains_where_the_counts_allow():
    """Issue 14.3: 16 cores in two 8-core L3 domains (an EPYC 7763 NPS4 node), two ranks of 7 cores: each rank
    fills one domain (the housekeeping core's domain and the other), none straddles or shares a domain."""
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=16, threads=1, gpus=[GpuSpec(0), GpuSpec(0)]))
    topo["l3_domains"] = [list(range(0, 8)), list(range(8, 16))]
    layout = plan(topo)
    assert [r["cpus"] for r in layout["ranks"]] == [list(range(1, 8)), list(range(8, 15))]
    # without cache information the node is one domain: the blocks stay contiguous after the leftover core
    del topo["l3_domains"]
    assert [r["cpus"] for r in plan(topo)["ranks"]] == [list(range(2, 9)), list(range(9, 16))]


def test_a_rank_larger_than_a_domain_takes_whole_domains_first():
    topo = topogen.build(Spec(cpu_nodes=1, cores_per_node=32, threads=1, gpus=[GpuSpec(0), GpuSpec(0)]))
    topo["l3_domains"] = [list(range(i, i + 8)) for i in range(0, 32, 8)]
    layout = plan(topo, {"cores_per_rank": 12})
    l3_of = {cpu: i for i, domain in enumerate(topo["l3_domains"]) for cpu in domain}
    spans = [sorted({l3_of[c] for c in r["cpus"]}) for r in layout["ranks"]]
    assert [len(s) for s in spans] == [2, 2] and not set(spans[0]) & set(spans[1])
