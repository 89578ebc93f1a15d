"""Issue 24.1: RCCL's NIC selection is node-wide, the same on every local rank, and the job's own value wins.

RCCL/NCCL build a node's intra-node rings from the NICs each rank sees, so the ranks of one node must see the same
NCCL_IB_HCA (NVIDIA/nccl#1478: "You should not set NCCL_IB_HCA differently on each rank"; nv-legate/legate#528);
a per-rank NCCL_SOCKET_IFNAME also breaks the bootstrap where each rail is its own IPoIB subnet. The Layout keeps
each rank's nearest NICs as a report only; the rank table carries the node-wide lists; nodetune-bind never
overrides a value the job exported.
"""

from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import rank_bind
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import Context
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.tuning import desired_settings
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import plan
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root

from tests.support import topogen
from tests.support.topogen import GpuSpec, NicSpec, Spec

NIC_NAMES = ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME")
DEFAULTS = {name: areas.defaults("rocm_env")[name] for name in areas.area_variables("rocm_env")}


def mi300x_like() -> dict:
    """2 NUMA nodes, 4 GPUs and 4 HCAs (with IPoIB netdevs) on each: the nearest NICs differ between halves."""
    return topogen.build(Spec(cpu_nodes=2, cores_per_node=16, threads=1, sockets=2,
                              gpus=[GpuSpec(i // 4) for i in range(8)], nics=[NicSpec(i // 4, 2) for i in range(8)]))


def rank_table(layout: dict, tmp_path: Path, **config: object) -> list[dict]:
    ctx = Context(Root(str(tmp_path)), {}, layout)
    settings = desired_settings(ctx, {"rocm_env": dict(DEFAULTS, **config)}, persist=False)
    [table] = [s.value for s in settings if s.target == "table"]
    return json.loads(table)["ranks"]


def test_the_layout_gives_no_rank_its_own_nic_list() -> None:
    layout = plan(mi300x_like())
    assert layout["nccl_env"]["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}" for i in range(8))
    for rank in layout["ranks"]:
        assert not set(NIC_NAMES) & set(rank["env"]), rank["env"]
    # the nearest NICs stay in the report (rank 0: its node's four)
    assert layout["ranks"][0]["hcas"] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert "nearest NICs: same NUMA node" in layout["ranks"][0]["reason"]


def test_every_rank_of_the_table_gets_the_node_wide_nics(tmp_path: Path) -> None:
    layout = plan(mi300x_like())
    ranks = rank_table(layout, tmp_path)
    assert len(ranks) == 8
    for name in NIC_NAMES:
        assert {r["env"][name] for r in ranks} == {layout["nccl_env"][name]}, name


def test_a_layout_saved_with_per_rank_nics_still_gives_one_node_wide_value(tmp_path: Path) -> None:
    layout = plan(mi300x_like())
    for rank in layout["ranks"]:  # what an older nodetune saved: each rank its nearest HCAs
        rank["env"]["NCCL_IB_HCA"] = "=" + ",".join(rank["hcas"])
    ranks = rank_table(layout, tmp_path)
    assert {r["env"]["NCCL_IB_HCA"] for r in ranks} == {layout["nccl_env"]["NCCL_IB_HCA"]}
    # a node-wide value the user set replaces the Layout's in every rank (rccl.conf and the profile carry it)
    ranks = rank_table(layout, tmp_path, nodetune_rocm_env={"NCCL_IB_HCA": "=mlx5_0,mlx5_4"})
    assert all("NCCL_IB_HCA" not in r["env"] for r in ranks)


def test_nodetune_bind_never_overrides_the_jobs_nic_selection() -> None:
    entry = {"rank": 0, "gpu": "0000:05:00.0", "numa_node": 0, "cpus": [1, 2],
             "env": {"OMP_NUM_THREADS": "2", "NCCL_IB_HCA": "=mlx5_0,mlx5_1", "NCCL_SOCKET_IFNAME": "=ib0,ib1"}}
    job = {"NCCL_IB_HCA": "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7", "OMP_NUM_THREADS": "1"}
    result, env = rank_bind.plan([entry], 0, "LOCAL_RANK", job, ["true"], which=lambda *a, **k: None)
    assert env["NCCL_IB_HCA"] == job["NCCL_IB_HCA"]      # the job's own value wins, without --keep-env
    assert env["NCCL_SOCKET_IFNAME"] == "=ib0,ib1"        # the table's where the job set none
    assert env["OMP_NUM_THREADS"] == "2"                  # a per-rank value still replaces torchrun's default 1
    assert "NCCL_IB_HCA" not in result["env"]             # --dry-run shows only what the launcher set
