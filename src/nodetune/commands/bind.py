"""``nodetune bind [--table FILE] [--rank N] ... -- COMMAND``: run one local rank bound to its GPU's CPUs and memory.

The same code as the ``nodetune-bind`` launcher that the rocm_env area renders onto each node
(``module_utils/areas/rank_bind.py``): this entry point is for nodes where the ``nodetune`` package is installed.
"""

from __future__ import annotations

import argparse
from typing import Any

from ansible_collections.nodetune.instinct.plugins.module_utils.areas import rank_bind


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "bind",
        help="run a command as one local rank, on its GPU's CPUs and NUMA memory node (the rank table's entry)",
        description="Run COMMAND on the CPUs and NUMA node of the GPU it will use (named by ROCR_VISIBLE_DEVICES, "
                    "HIP_VISIBLE_DEVICES or SLURM_STEP_GPUS, else by --rank or LOCAL_RANK/SLURM_LOCALID): CPU "
                    "affinity, the memory policy through numactl (where numactl exists; preferred by default) and "
                    "the rank's environment from the node's rank table (written by the rocm_env area). The command "
                    "is executed directly, without a shell.",
    )
    rank_bind.add_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """The launcher's own codes (2 for a usage error, as nodetune-bind on the nodes keeps) follow the CLI's
    contract here: a usage error is a failure, 1; 2 means drift for every nodetune verb. 127 (the command was not
    found) is kept, as exec-style launchers report it."""
    code = rank_bind.run(args)
    return 1 if code == rank_bind.EXIT_USAGE else code
