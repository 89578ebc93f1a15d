"""The small simulated node tests build (``small_spec``), and the few variants a test's checks are written against.

Each variant says why its shape differs; a new test takes ``small_spec(**changes)`` unless it truly needs one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

LAB_SPECS = Path(__file__).resolve().parents[2] / "inventories" / "lab" / "specs"

#: a change that removes the key: ``small_spec(memory_gb=DELETE)``
DELETE = object()


def small_spec(**changes: Any) -> dict[str, Any]:
    """A 32-CPU, 4-node machine with every kind of device: fast to build, for tests that change trees.

    ``changes`` set keys, nested with ``__``: ``small_spec(cpu__sockets=1, numa__per_socket=1)``."""
    spec: dict[str, Any] = {
        "name": "tiny",
        "kernel": {"release": "6.12.0-55.9.1.el10_0.x86_64", "cmdline": "BOOT_IMAGE=/vmlinuz ro iommu=pt"},
        "os": {"family": "RedHat"},
        "cpu": {"model": "EPYC 9654", "sockets": 2, "cores_per_socket": 8, "smt": "on",
                "cpufreq": {"driver": "amd-pstate-epp", "governor": "powersave"}},
        "numa": {"per_socket": 2},
        "memory_gb": 64,
        "gpus": [{"model": "MI300X", "bdf": "0000:05:00.0", "switch": "s0"},
                 {"model": "MI300X", "bdf": "0000:85:00.0", "switch": "s1"}],
        "nics": [{"name": "ib0", "model": "ConnectX-7", "bdf": "0000:03:00.0", "switch": "s0"},
                 {"name": "ib1", "model": "ConnectX-7", "bdf": "0000:83:00.0", "switch": "s1"},
                 {"name": "eno1", "model": "BCM57416", "bdf": "0000:11:00.0"}],
        "nvme": [{"model": "CM7-R", "bdf": "0000:41:00.0"}, {"model": "CM7-R", "bdf": "0000:c1:00.0", "max_queues": 8}],
    }
    for key, value in changes.items():
        target = spec
        parts = key.split("__")
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        if value is DELETE:
            target.pop(parts[-1], None)
        else:
            target[parts[-1]] = value
    return spec


# The small node as the audit wants it: the verify, BIOS, health, stability, inventory and outlier tests count the
# findings on a tuned copy, so nothing but the fault a test injects may show. It differs in
#   kernel  iommu=pt and pci=realloc=off (DOMAIN.md, BIOS-level checks: else bios.iommu) and ACS redirect disabled
#           for the root and switch ports (with the IOMMU on the kernel enables it at boot: health.pcie_acs, as the
#           lab specs note);
#   nics    the two ConnectX-7 HCAs alone: the stability tests expect every NIC to be an RDMA device behind a switch.
# The rest (Ubuntu's kernel, 512 GB, NPS1, EPP, 8 completion vectors, one NVMe drive at 11:00.0) keeps the tree the
# tests were written on: it builds byte for byte the tree of their former hand-written spec.
AUDIT_SPEC: dict[str, Any] = small_spec(
    name="mini300x",
    os={"family": "Debian"},
    kernel={"release": "6.8.0-60-generic",
            "cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda ro iommu=pt pci=realloc=off "
                       "pci=disable_acs_redir=pci:1022:14ab;pci:1000:c030"},
    cpu__cpufreq__epp="balance_performance",
    numa__per_socket=1,
    memory_gb=512,
    nics=[{"name": "ib0", "model": "ConnectX-7", "bdf": "0000:03:00.0", "switch": "s0", "comp_vectors": 8},
          {"name": "ib1", "model": "ConnectX-7", "bdf": "0000:83:00.0", "switch": "s1", "comp_vectors": 8}],
    nvme=[{"model": "CM7-R", "bdf": "0000:11:00.0"}],
)


def _lab_spec(name: str) -> dict[str, Any]:
    return yaml.safe_load((LAB_SPECS / f"{name}.yml").read_text())


def small_mi250_spec() -> dict[str, Any]:
    """The lab's MI250 node (inventories/lab/specs/mi250.yml) made small: 16 cores per socket, two GPUs, one HCA
    beside Broadcom's eno1, two NVMe, on amd-pstate in active mode so that the EPP rules run.

    The tests that run playbooks, the API or the CLI on it take the lab's own variables (tuning.yml), and assert
    what those change on the lab's shape (test_playbooks.py): siblings cpu32-63, IPoIB in datagram mode at MTU
    2044, C2 to disable, irqbalance to stop."""
    spec = _lab_spec("mi250")
    spec.update(name="small", hostname="small-01")
    spec["cpu"].update(cores_per_socket=16, cores_per_l3=4,
                       cpufreq={"driver": "amd-pstate-epp", "governor": "powersave"})
    spec["gpus"], spec["nics"], spec["nvme"] = spec["gpus"][:2], spec["nics"][:2], spec["nvme"][:2]
    return spec


def small_mi300x_spec() -> dict[str, Any]:
    """The lab's MI300X node (inventories/lab/specs/mi300x.yml) made small, with SMT off in the BIOS as AMD asks.

    The kernel command line playbook test starts from the lab's boot entries (amd_iommu=on, no pci=realloc) in
    RHEL's boot loader entries (boot/loader/entries), the case the kernel_cmdline area fixes."""
    spec = _lab_spec("mi300x")
    spec.update(name="small300", hostname="small300-01")
    spec["cpu"].update(cores_per_socket=16, cores_per_l3=8, smt="notsupported")
    spec["gpus"], spec["nics"], spec["nvme"] = spec["gpus"][:2], spec["nics"][:2], spec["nvme"][:1]
    return spec
