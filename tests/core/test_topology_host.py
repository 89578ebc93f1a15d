"""Discovery of the machine running the tests (root "/"), read-only.

Oracles independent of discovery: the Python runtime's own CPU count and affinity, ``lstopo`` on the live
system, and a plain count of the numbered rows of /proc/interrupts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import ABSENT_NAMES, discover


@pytest.fixture(scope="module")
def host() -> dict:
    if not os.path.isdir("/sys/devices/system/cpu"):
        pytest.skip("this machine has no /sys/devices/system/cpu (not Linux, or /sys not mounted)")
    return discover("/")


def test_host_discovery_succeeds_and_reports_what_is_absent(host: dict) -> None:
    assert host["schema"] == 1 and host["root"] == "/"
    assert set(host["absent"]) <= set(ABSENT_NAMES)
    for name, items in (("gpus", host["gpus"]), ("nics", host["nics"]), ("pci", host["pci_devices"]),
                        ("infiniband", host["ib_devices"]), ("numa", host["numa_nodes"])):
        assert (name in host["absent"]) == (not items), name
    json.dumps(host)


def test_host_cpus_match_the_runtime(host: dict) -> None:
    online = {c["id"] for c in host["cpus"] if c["online"]}
    assert len(online) == os.cpu_count()
    assert set(os.sched_getaffinity(0)) <= online


def test_host_irqs_match_proc_interrupts(host: dict) -> None:
    with open("/proc/interrupts") as handle:
        numbers = [int(m.group(1)) for m in re.finditer(r"^\s*(\d+):", handle.read(), re.M)]
    discovered = [i["irq"] for i in host["irqs"]]
    # IRQs can come and go between the two reads; the bulk must agree.
    assert len(set(numbers) ^ set(discovered)) <= 2
    assert all(i["smp_affinity_list"] is None or set(i["smp_affinity_list"]) for i in host["irqs"])


def test_host_agrees_with_lstopo(host: dict) -> None:
    if shutil.which("lstopo") is None:
        pytest.skip("lstopo (Debian package hwloc) is not installed")
    result = subprocess.run(["lstopo", "--of", "xml", "-"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    tree = ET.fromstring(result.stdout)
    pus = {int(o.get("os_index", "-1")) for o in tree.iter("object") if o.get("type") == "PU"}
    nodes = {int(o.get("os_index", "-1")) for o in tree.iter("object") if o.get("type") == "NUMANode"}
    assert pus == {c["id"] for c in host["cpus"] if c["online"]}
    if host["numa_nodes"]:
        assert nodes == {n["id"] for n in host["numa_nodes"]}


def test_host_discovery_is_repeatable(host: dict) -> None:
    again = discover("/")
    for key in ("cpus", "numa_nodes", "pci_devices", "gpus", "nics", "block_devices", "kernel", "absent"):
        assert again[key] == host[key], key


@pytest.mark.parametrize("chunk", [1 << 18, 64, 1])
def test_host_interrupts_read_in_pieces_give_the_rows_of_a_whole_read(host: dict, chunk: int,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel makes /proc/interrupts as it is read (seq_file: a read stops at a row's end where the next row does
    not fit): the tails read into a small buffer, grown from one byte, are those of the whole file."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.discover import irq
    from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root

    monkeypatch.setattr(irq, "_TAILS_CHUNK", chunk)
    root = Root("/")
    for _attempt in range(3):  # an IRQ can come or go between the reads
        readable, tails = irq.interrupt_tails(root)
        data = irq.read_interrupts(root)
        whole = irq.numbered_tails(data)
        numbers = [int(m.group(1)) for m in re.finditer(rb"^\s*(\d+):", data or b"", re.M)]
        if tails == whole:
            break
    assert readable and whole is not None and tails == whole
    assert [int(line.partition(":")[0]) for line in tails.splitlines()] == numbers
