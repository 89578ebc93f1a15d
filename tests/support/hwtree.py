"""Tiny hand-made node trees for the bios/health tests: only the files those checks read, laid out as sysfs does.

Discovery reads them (so the tests also prove that the checks use the Topology's real field names), and each test
states the truth it wrote (a link trained at x8, a BAR below 4 GiB...) instead of re-computing the checks' logic.
"""

from __future__ import annotations

import os
from pathlib import Path


class Tree:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "sys").mkdir(parents=True, exist_ok=True)
        (root / "proc").mkdir(parents=True, exist_ok=True)

    def file(self, rel: str, text: str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text if text.endswith("\n") else text + "\n")
        return path

    def link(self, rel: str, target: str) -> None:
        """A symlink with an absolute target inside the node (the Root re-anchors it at the tree)."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)

    # ------------------------------------------------------------------ CPUs and NUMA
    def cpus(self, packages: int = 2, nodes_per_package: int = 1, cores_per_node: int = 2, threads: int = 2,
             smt_control: str | None = "on", offline: tuple[int, ...] = ()) -> list[int]:
        """CPUs numbered N and N+cores for siblings; returns the CPU ids."""
        cores = packages * nodes_per_package * cores_per_node
        ids = list(range(cores * threads))
        node_cpus: dict[int, list[int]] = {}
        base = "sys/devices/system/cpu"
        for cpu in ids:
            core = cpu % cores
            node = core // cores_per_node
            package = node // nodes_per_package
            siblings = [core + t * cores for t in range(threads)]
            node_cpus.setdefault(node, []).append(cpu)
            if cpu != 0:
                self.file(f"{base}/cpu{cpu}/online", "0" if cpu in offline else "1")
            if cpu in offline:
                continue
            online_siblings = [s for s in siblings if s not in offline]
            self.file(f"{base}/cpu{cpu}/topology/thread_siblings_list", ",".join(map(str, online_siblings)))
            self.file(f"{base}/cpu{cpu}/topology/core_id", str(core))
            self.file(f"{base}/cpu{cpu}/topology/physical_package_id", str(package))
        online = [c for c in ids if c not in offline]
        self.file(f"{base}/online", _cpulist(online))
        self.file(f"{base}/possible", _cpulist(ids))
        self.file(f"{base}/present", _cpulist(ids))
        if offline:
            self.file(f"{base}/offline", _cpulist(list(offline)))
        if smt_control is not None:
            self.file(f"{base}/smt/control", smt_control)
        for node, cpus in node_cpus.items():
            self.file(f"sys/devices/system/node/node{node}/cpulist", _cpulist(cpus))
        return ids

    def memory_node(self, node: int) -> None:
        self.file(f"sys/devices/system/node/node{node}/cpulist", "")

    # ------------------------------------------------------------------ PCI
    def pci(self, bdf: str, vendor: str, device: str, klass: str, link: tuple | None = None,
            resource: str | None = None, aspm: tuple[int, int] | None = None, numa: int = 0) -> str:
        """A PCI function; ``link`` = (current_speed, max_speed, current_width, max_width) as kernel text."""
        rel = f"sys/devices/pci0000:00/{bdf}"
        self.file(f"{rel}/vendor", vendor)
        self.file(f"{rel}/device", device)
        self.file(f"{rel}/class", klass)
        self.file(f"{rel}/numa_node", str(numa))
        if link is not None:
            for name, value in zip(("current_link_speed", "max_link_speed", "current_link_width", "max_link_width"),
                                   link, strict=True):
                self.file(f"{rel}/{name}", str(value))
        if resource is not None:
            self.file(f"{rel}/resource", resource)
        if aspm is not None:
            self.file(f"{rel}/link/l0s_aspm", str(aspm[0]))
            self.file(f"{rel}/link/l1_aspm", str(aspm[1]))
        self.link(f"sys/bus/pci/devices/{bdf}", "/" + rel)
        return rel

    def gpu(self, bdf: str, device: str = "0x74a1", link: tuple | None = ("32.0 GT/s PCIe", "32.0 GT/s PCIe", 16, 16),
            bar_start: int = 0x38000000000, aspm: tuple[int, int] | None = None,
            hwmon: dict[str, str] | None = None, numa: int = 0) -> str:
        """An AMD GPU with a 64-bit prefetchable BAR at ``bar_start`` (256 GiB) and optional hwmon files."""
        end = bar_start + (256 << 30) - 1
        resource = f"0x{bar_start:016x} 0x{end:016x} 0x000000000014220c\n" + "0x0000000000000000 " * 2 + "0x0\n"
        # MI300X enumerates as a processing accelerator (0x1200), MI200 as a display controller (0x0380)
        rel = self.pci(bdf, "0x1002", device, "0x120000" if device.startswith("0x74a") else "0x038000", link,
                       resource, aspm, numa)
        if hwmon is not None:
            for name, value in hwmon.items():
                self.file(f"{rel}/hwmon/hwmon3/{name}", value)
        return rel

    def ib(self, hca: str, bdf: str, ports: dict[int, tuple[str, str, str]],
           link: tuple | None = ("32.0 GT/s PCIe", "32.0 GT/s PCIe", 16, 16), aspm: tuple[int, int] | None = None,
           numa: int = 0) -> None:
        """A ConnectX HCA; ``ports`` = {port: (state, phys_state, rate)} as sysfs prints them."""
        rel = self.pci(bdf, "0x15b3", "0x1021", "0x020700", link, None, aspm, numa)
        for port, (state, phys, rate) in ports.items():
            base = f"{rel}/infiniband/{hca}/ports/{port}"
            self.file(f"{base}/state", state)
            self.file(f"{base}/phys_state", phys)
            self.file(f"{base}/rate", rate)
            self.file(f"{base}/link_layer", "InfiniBand")
        self.link(f"sys/class/infiniband/{hca}", f"/{rel}/infiniband/{hca}")

    def nvme(self, name: str, bdf: str, link: tuple) -> None:
        rel = self.pci(bdf, "0x144d", "0xa824", "0x010802", link)
        controller = "nvme" + name[len("nvme"):].split("n")[0]  # nvme0n1 -> nvme0
        self.file(f"{rel}/nvme/{controller}/{name}/queue/scheduler", "[none] mq-deadline")
        self.link(f"sys/block/{name}", f"/{rel}/nvme/{controller}/{name}")
        self.link(f"sys/class/nvme/{controller}", f"/{rel}/nvme/{controller}")

    # ------------------------------------------------------------------ node-wide
    def cmdline(self, text: str) -> None:
        self.file("proc/cmdline", text)

    def iommu(self, units: int = 1, groups: int = 4) -> None:
        for unit in range(units):
            (self.root / f"sys/class/iommu/ivhd{unit}").mkdir(parents=True, exist_ok=True)
        for group in range(groups):
            (self.root / f"sys/kernel/iommu_groups/{group}").mkdir(parents=True, exist_ok=True)

    def aspm_policy(self, text: str) -> None:
        self.file("sys/module/pcie_aspm/parameters/policy", text)


def _cpulist(cpus: list[int]) -> str:
    cpus = sorted(cpus)
    ranges: list[str] = []
    start = prev = None
    for cpu in cpus:
        if start is None:
            start = prev = cpu
        elif cpu == prev + 1:
            prev = cpu
        else:
            ranges.append(f"{start}-{prev}" if start != prev else str(start))
            start = prev = cpu
    if start is not None:
        ranges.append(f"{start}-{prev}" if start != prev else str(start))
    return ",".join(ranges)
