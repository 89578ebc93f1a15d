# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Expected inventory: what a node of a group should have (``nodetune_inventory_expected``), checked by verify.

The facts are read by node_check.read_facts, the very code the node-local ``nodetune-check`` runs, so verify and
the scheduler's health check cannot disagree. One finding per declared key, id ``inventory.<key>``
(``inventory.gpu_count``, ``inventory.hca_rate``...), target ``node``. The facts of every node also go into its
report (``inventory``), where the fleet report finds each group's outliers (outliers.py).

The declaration is validated before discovery (plan/inventory.py). Apply writes the validated inventory to
``/etc/nodetune/check.d/inventory.json`` for ``nodetune-check``: that file, with every tuned area's expected Settings
beside it, is areas/checker_files.py's.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_check
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import DRIFT, OK, Finding
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.inventory import (  # noqa: F401 (in __all__)
    KEYS,
    LEARNED,
    VARIABLE,
    InventoryConfigError,
    validate,
    validate_learned,
)

SOURCE = "inventory"
REMEDIES = {
    "gpu_count": "a GPU is missing or was not probed: check dmesg for amdgpu errors and lspci, reseat or replace "
                 "it; keep jobs off the node (ranks are planned from the GPUs found)",
    "gpu_model": "the node has another GPU model than its group declares: move it to the right group, or fix the "
                 "declaration",
    "compute_partition": "set the compute partition (amd-smi set --compute-partition MODE) and reload amdgpu; the "
                         "rank layout depends on it",
    "memory_partition": "set the memory partition (amd-smi set --memory-partition MODE) and reload amdgpu",
    "xgmi_hive_size": "a GPU is not in the xGMI hive: check amd-smi xgmi and dmesg for xGMI link training errors",
    "hca_count": "an RDMA device is missing: check lspci, dmesg (mlx5_core) and the HCA firmware",
    "hca_rate": "a port trained at another rate: check the cable, transceiver and switch port (ibstat, mlxlink)",
    "hca_width": "a port trained narrower: check the cable, transceiver and switch port (ibstat, mlxlink)",
    "nvme_count": "an NVMe drive is missing: check lspci, nvme list and dmesg",
    "cpu_count": "CPUs are missing: check the BIOS core settings and maxcpus=/nr_cpus= on the kernel command line",
    "smt": "SMT differs: the smt area (nodetune_smt_policy) or the BIOS SMT option",
    "numa_per_socket": "the BIOS NUMA-nodes-per-socket (NPS) setting differs",
}


def findings(expected: Dict[str, Any], facts: Dict[str, Any]) -> List[Finding]:
    """One finding per declared key (already validated): ok, or drift with the expected and actual values."""
    bad = dict((key, actual) for key, _want, actual in node_check.compare_inventory(expected, facts))
    out = []
    for key in sorted(expected):
        drift = key in bad
        actual = bad[key] if drift else expected[key]
        out.append(Finding("inventory." + key, "node", expected[key], "none" if actual is None else actual,
                           DRIFT if drift else OK, severity="high", source=SOURCE,
                           remedy=REMEDIES[key] if drift else ""))
    return out


def check(root_path: str, health: Optional[Dict[str, Any]]) -> Tuple[List[Finding], Dict[str, Any]]:
    """The inventory findings of a node and its facts (for the report and the fleet's outliers)."""
    expected = validate((health or {}).get(VARIABLE))
    facts = node_check.read_facts(root_path)
    return findings(expected, facts), facts


# the declaration's names too, for the checks and reports that take them with the findings
__all__ = ["KEYS", "LEARNED", "REMEDIES", "SOURCE", "VARIABLE", "InventoryConfigError", "check", "findings", "validate",
           "validate_learned"]
