"""Full-size nodes for the API/CLI/picture tests: the documented lab (both nodes of ``inventories/lab`` with its
opt-ins, copied to a temporary folder with its own lab trees) and a synthetic node larger than any lab node.

The results of such nodes are larger than ansible-runner's event limit (~700,000 characters), which is what the
small-node tests never reached. Trees are built in memory where the host has room (``tests.support.trees.scratch_dir``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.support.trees import scratch_dir as scratch_dir  # for this module's users

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "inventories" / "lab"
LAB_HOSTS = ("mi250-01", "mi300x-01")
#: the BIOS-level finding an apply cannot fix on the lab nodes (their kernel command line lacks
#: pci=realloc=off and the MI300X node carries the invalid amd_iommu=on): waived for the "tuned is clean" checks
LAB_WAIVERS = [{"id": "bios.iommu", "reason": "lab command line, not changed by nodetune", "expires": "2099-12-31"}]


def build_full_lab(scratch: Path) -> Path:
    """A copy of inventories/lab under ``scratch/inventories/lab`` whose hosts.yml points at freshly built trees in
    ``scratch/lab/<host>`` (the inventory's own ``inventory_dir/../../lab`` rule); returns the inventory folder."""
    inventory = scratch / "inventories" / "lab"
    shutil.copytree(LAB, inventory)
    for host in LAB_HOSTS:
        spec_name = "mi250.yml" if host.startswith("mi250") else "mi300x.yml"
        simnode.build(simnode.load_spec(str(inventory / "specs" / spec_name)), str(scratch / "lab" / host))
    (inventory / "waivers.yml").write_text(yaml.safe_dump(LAB_WAIVERS))
    return inventory


def big_spec() -> dict[str, Any]:
    """1,152 CPUs (4 sockets x 144 cores, SMT), 16 MI300X, 16 ConnectX-7 HCAs of 240 completion vectors, 8 NVMe:
    about 4,500 IRQs. Its command line is the one AMD's guide asks for, so a tuned node is clean."""
    gpus: list[dict[str, Any]] = []
    nics: list[dict[str, Any]] = [{"name": "eno1", "model": "BCM57416", "bdf": "0000:0a:00.0", "numa_node": 0}]
    for k in range(16):
        bus, numa = 16 * k, k // 4  # one root complex of 16 buses per GPU/HCA pair, four per socket
        gpus.append({"model": "MI300X", "bdf": "0000:%02x:00.0" % (bus + 5), "switch": f"sw{k}", "numa_node": numa})
        nics.append({"name": f"ib{k}", "model": "ConnectX-7", "bdf": "0000:%02x:00.0" % (bus + 3),
                     "switch": f"sw{k}", "numa_node": numa, "comp_vectors": 240})
    nvme = [{"model": "CM7-R", "bdf": "0000:%02x:00.0" % (16 * k + 9), "numa_node": k // 4} for k in range(0, 16, 2)]
    return {"name": "big-01", "platform": {"vendor": "Supermicro", "product": "synthetic 4-socket"},
            "os": {"family": "RedHat", "pretty_name": "Red Hat Enterprise Linux 10.0 (Coughlan)"},
            "kernel": {"release": "6.12.0-55.9.1.el10_0.x86_64",
                       "cmdline": "ro iommu=pt pci=realloc=off pci=disable_acs_redir=pci:1022:14ab;pci:1000:c030"},
            "cpu": {"model": "EPYC 9654", "sockets": 4, "cores_per_socket": 144, "threads_per_core": 2, "smt": "on",
                    "numbering": "split", "caches": False,
                    "cpufreq": {"driver": "amd-pstate-epp", "governor": "powersave", "epp": "balance_performance"},
                    "cpuidle": {"driver": "acpi_idle", "states": ["POLL", "C1", "C2"]}},
            "numa": {"per_socket": 1}, "memory_gb": 4096, "iommu": True,
            "irqbalance": {"installed": True, "enabled": True},
            "gpus": gpus, "nics": nics, "nvme": nvme}


def lab_tuning() -> dict[str, Any]:
    return yaml.safe_load((LAB / "group_vars" / "all" / "tuning.yml").read_text())


def big_inventory(root: Path) -> dict[str, Any]:
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
             "nodetune_lab_backend": "simulated"}  # a simulated node: the lab says so
    return {"all": {"hosts": {"big-01": {"nodetune_root": str(root)}}, "vars": {**local, **lab_tuning()}}}


def interrupts(root: Path) -> int:
    """IRQ lines of the node's /proc/interrupts (the header and the summary rows left out)."""
    lines = (root / "proc" / "interrupts").read_text().splitlines()[1:]
    return sum(1 for line in lines if line.split(":", 1)[0].strip().isdigit())
