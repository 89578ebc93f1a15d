# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""nodetune-check: is this node still what nodetune left, and does it still have what its group declares?

    nodetune-check [--root DIR] [--config-dir DIR] [--nhc] [--quiet]

Reads the expectations nodetune's apply wrote into ``/etc/nodetune/check.d/`` (one ``<area>.json`` per tuned area:
each Setting's path, value and how to compare; ``inventory.json``: the declared inventory, and where nothing is
declared the one learned from the node's group majority at the last verify) and compares them with
the live node. One line per problem, starting with the finding id verify uses (``nvme.scheduler``,
``inventory.gpu_count``); with ``--nhc`` in the form LBNL NHC's ``die`` takes (``nodetune: <id> <target>: ...``,
one line, first problem and the count). Exit status 0: clean; 1: drift; 2: the expectations cannot be read.

For a scheduler between Ansible runs: Slurm ``HealthCheckProgram`` / prolog, or an NHC check (docs/verify.md).
It only reads, never writes, and needs nothing but the Python standard library.

This file is both a module of the nodetune collection (verify reads the inventory facts with the very same code)
and, rendered by apply with the rules it imports inlined (render.py), the standalone ``/usr/local/sbin/nodetune-check``
on each node: it compares values by the rules verify compares them by (rules.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

from ansible_collections.nodetune.instinct.plugins.module_utils.parse import ParseError, parse_cpulist
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs.rules import (
    created_later,
    irq_numbers,
    list_names,
    normalize,
    read_line,
    read_text,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: a health check runs often, keep imports few
    from typing import Any, Dict, List, Optional, Tuple

PROG = "nodetune-check"
CONFIG_DIR = "etc/nodetune/check.d"  # inside --root
INVENTORY_FILE = "inventory.json"
EXIT_CLEAN = 0
EXIT_DRIFT = 1
EXIT_CONFIG = 2

# The inventory keys an operator may declare: key -> (kind, what it is). Kinds: int, str, smt.
INVENTORY_KEYS = {
    "gpu_count": ("int", "number of GPUs (PCI functions of AMD/NVIDIA display or accelerator class)"),
    "gpu_model": ("str", "GPU model every GPU must be, e.g. MI300X (from the PCI device id)"),
    "compute_partition": ("str", "amdgpu current_compute_partition of every GPU: SPX, DPX, QPX or CPX"),
    "memory_partition": ("str", "amdgpu current_memory_partition of every GPU: NPS1, NPS2 or NPS4"),
    "xgmi_hive_size": ("int", "GPUs in each GPU's xGMI hive (KFD hive_id)"),
    "hca_count": ("int", "number of RDMA devices (/sys/class/infiniband)"),
    "hca_rate": ("int", "link rate of every RDMA port in Gb/s, e.g. 400 (NDR)"),
    "hca_width": ("str", "link width of every RDMA port, e.g. 4X"),
    "nvme_count": ("int", "number of NVMe controllers (/sys/class/nvme)"),
    "cpu_count": ("int", "logical CPUs present (/sys/devices/system/cpu/present), online or not"),
    "smt": ("smt", "SMT state: on or off (/sys/devices/system/cpu/smt/active)"),
    "numa_per_socket": ("int", "NUMA nodes with CPUs per socket (the BIOS NPS setting)"),
}
PARTITION_MODES = {"compute_partition": ("SPX", "DPX", "TPX", "QPX", "CPX"),
                   "memory_partition": ("NPS1", "NPS2", "NPS4", "NPS8")}
# PCI device id -> model, as discover_devices.AMD_GPU_NAMES (a unit test keeps the two equal).
AMD_GPU_NAMES = {
    "0x66a1": "MI50/MI60", "0x738c": "MI100", "0x7408": "MI250X", "0x740c": "MI250X/MI250", "0x740f": "MI210",
    "0x74a0": "MI300A", "0x74a1": "MI300X", "0x74a5": "MI325X", "0x74b5": "MI300X VF",
}
_GPU_CLASSES = ("0x0300", "0x0302", "0x0380", "0x1200")
_VENDOR_AMD = "0x1002"
_VENDOR_NVIDIA = "0x10de"
_KFD_NODES = "sys/class/kfd/kfd/topology/nodes"
_KFD_LINK_XGMI = "11"
SYSTEMD_CONFIG_DIRS = ("etc/systemd/system", "run/systemd/system")  # enablement links (runtime ones in run/)


class CheckConfigError(Exception):
    """The expectations (check.d) cannot be read or are not what apply writes."""


# ------------------------------------------------------------------------------------------------ reading
def _word(root: str, rel: str) -> Optional[str]:
    text = read_text(root, rel)
    return text.strip() if text is not None else None


def _listdir(root: str, rel: str) -> List[str]:
    return sorted(list_names(root, rel) or [])


def _cpulist(text: Optional[str]) -> List[int]:
    """A cpulist's CPUs; none where it is not one."""
    try:
        return parse_cpulist(text)
    except ParseError:
        return []


def _props(text: Optional[str]) -> Dict[str, str]:
    out = {}
    for line in (text or "").splitlines():
        words = line.split()
        if len(words) == 2:
            out[words[0]] = words[1]
    return out


def _gpus(root: str) -> List[Tuple[str, str]]:
    """(bdf, PCI device id) of every GPU, as discovery classifies them."""
    out = []
    base = "sys/bus/pci/devices"
    for bdf in _listdir(root, base):
        klass = _word(root, "%s/%s/class" % (base, bdf)) or ""
        if not klass.startswith(_GPU_CLASSES):
            continue
        vendor = _word(root, "%s/%s/vendor" % (base, bdf))
        if vendor == _VENDOR_AMD or (vendor == _VENDOR_NVIDIA and not klass.startswith("0x1200")):
            out.append((bdf, _word(root, "%s/%s/device" % (base, bdf)) or ""))
    return out


def _gpu_of_node(props: Dict[str, str]) -> Tuple[Optional[str], Optional[int]]:
    """The physical GPU of a KFD GPU node: its PCI domain, bus and device. A partitioned GPU (CPX, DPX ...) is one
    KFD node per partition, each with the GPU's location_id and its partition's node id ORed in: into the low bits
    (the PCI function's) in earlier kernels, into bits 31:28 in later ones (kfd_topology.c, kfd_topology_add_device:
    ``location_id = pci_dev_id(pdev)``, then ``|= node_id`` / ``|= node_id << 28`` where ``num_nodes > 1``), so
    bus and device (PCI_DEVID's bits 15:3) name the GPU in both."""
    try:
        location = int(props.get("location_id", ""))
    except ValueError:
        return props.get("domain"), None
    return props.get("domain"), (location & 0xFFFF) >> 3


def _hive_sizes(root: str) -> List[int]:
    """For each GPU in a hive (KFD nodes with a hive_id), how many GPUs share its hive: a GPU's partitions count
    once (:func:`_gpu_of_node`)."""
    members = {}  # type: Dict[str, set]
    for node in _listdir(root, _KFD_NODES):
        props = _props(read_text(root, "%s/%s/properties" % (_KFD_NODES, node)))
        hive = props.get("hive_id", "0")
        if hive in ("0", "") or props.get("simd_count", "0") == "0":
            continue
        members.setdefault(hive, set()).add(_gpu_of_node(props))
    return [len(gpus) for gpus in members.values() for _gpu in gpus]


def _ib_ports(root: str) -> Tuple[int, List[Tuple[str, Optional[int], Optional[str]]]]:
    """The RDMA device count and (device/port, rate Gb/s, width) of each port. ``rate`` reads like
    ``400 Gb/sec (4X NDR)``."""
    base = "sys/class/infiniband"
    devices = _listdir(root, base)
    ports = []
    for dev in devices:
        for port in _listdir(root, "%s/%s/ports" % (base, dev)):
            text = _word(root, "%s/%s/ports/%s/rate" % (base, dev, port)) or ""
            words = text.split()
            rate = None  # type: Optional[int]
            if words and words[0].replace(".", "", 1).isdigit():
                rate = int(float(words[0]))
            width = None
            if "(" in text:
                width = text.split("(", 1)[1].split()[0].rstrip(")") or None
            ports.append(("%s/%s" % (dev, port), rate, width))
    return len(devices), ports


def _numa_per_socket(root: str) -> Optional[int]:
    base = "sys/devices/system/node"
    nodes = 0
    sockets = set()
    for name in _listdir(root, base):
        if not (name.startswith("node") and name[4:].isdigit()):
            continue
        cpus = _cpulist(read_text(root, "%s/%s/cpulist" % (base, name)))
        if not cpus:
            continue
        nodes += 1
        package = _word(root, "sys/devices/system/cpu/cpu%d/topology/physical_package_id" % cpus[0])
        sockets.add(package)
    if not nodes or not sockets:
        return None
    return nodes // len(sockets) if nodes % len(sockets) == 0 else None


def _distinct(values: List[Any]) -> List[Any]:
    return sorted(set(v for v in values if v is not None), key=str)


def read_facts(root: str = "/") -> Dict[str, Any]:
    """What the node has, in the inventory keys' terms, plus versions (for the fleet's outliers). Per-device
    values are lists of the distinct values seen (``hca_rate: [200, 400]`` means mixed). Only reads."""
    gpus = _gpus(root)
    pci = "sys/bus/pci/devices/"
    hca_count, ports = _ib_ports(root)
    smt_active = _word(root, "sys/devices/system/cpu/smt/active")
    amdgpu = _word(root, "sys/module/amdgpu/version")
    return {
        "gpu_count": len(gpus),
        "gpu_model": _distinct([AMD_GPU_NAMES.get(device, device) for _bdf, device in gpus]),
        "compute_partition": _distinct([_word(root, pci + bdf + "/current_compute_partition") for bdf, _d in gpus]),
        "memory_partition": _distinct([_word(root, pci + bdf + "/current_memory_partition") for bdf, _d in gpus]),
        "xgmi_hive_size": _distinct(_hive_sizes(root)),
        "hca_count": hca_count,
        "hca_rate": _distinct([rate for _port, rate, _width in ports]),
        "hca_width": _distinct([width for _port, _rate, width in ports]),
        "nvme_count": len([n for n in _listdir(root, "sys/class/nvme") if n.startswith("nvme")]),
        "cpu_count": len(_cpulist(read_text(root, "sys/devices/system/cpu/present"))) or None,
        "smt": {"1": "on", "0": "off"}.get(smt_active or ""),
        "numa_per_socket": _numa_per_socket(root),
        "versions": {
            "kernel": _word(root, "proc/sys/kernel/osrelease"),
            "amdgpu": amdgpu or None,  # empty for the in-tree driver
            "rocm": _word(root, "opt/rocm/.info/version"),
            "gpu_vbios": ",".join(_distinct([_word(root, pci + bdf + "/vbios_version") for bdf, _d in gpus])) or None,
            "hca_fw": ",".join(_distinct([_word(root, "sys/class/infiniband/%s/fw_ver" % dev)
                                          for dev in _listdir(root, "sys/class/infiniband")])) or None,
        },
    }


# ------------------------------------------------------------------------------------------------ comparing
def _model_matches(expected: str, actual: str) -> bool:
    """``MI250`` matches ``MI250X/MI250`` (one device id, two boards), and so does ``MI250X/MI250`` itself (the name
    an expectation learned from the group majority has)."""
    names = [name.strip().upper() for name in str(actual).split("/")]
    return expected.upper() in names or expected.strip().upper() == "/".join(names)


def compare_inventory(expected: Dict[str, Any], facts: Dict[str, Any]) -> List[Tuple[str, Any, Any]]:
    """(key, expected, actual) for every declared key the node does not match. A list of actual values (per
    device) matches only when every device has the expected value."""
    problems = []
    for key in sorted(expected):
        want = expected[key]
        actual = facts.get(key)
        if isinstance(actual, list):
            if key == "gpu_model":
                good = bool(actual) and all(_model_matches(str(want), a) for a in actual)
            else:
                good = actual == [want]
            shown = ",".join(str(a) for a in actual) if actual else None
        else:
            good = actual == want
            shown = actual
        if not good:
            problems.append((key, want, shown))
    return problems


def _irq_numbers(root: str, names: List[str]) -> Dict[str, int]:
    return irq_numbers(names, lambda rel: list_names(root, rel), lambda rel: read_text(root, rel))


def _masked(root: str, base: str, unit: str) -> bool:
    """``systemctl mask``: the unit's name in a config folder is a link to /dev/null (or an empty file)."""
    path = os.path.join(root, base, unit)
    try:
        if os.path.islink(path):
            return os.readlink(path) == "/dev/null"
        return os.path.isfile(path) and os.path.getsize(path) == 0
    except OSError:
        return False


def unit_enabled(root: str, unit: str) -> str:
    """``yes`` or ``no``, as verify counts systemctl is-enabled (``enabled``, ``enabled-runtime``: yes; masked,
    disabled, not installed: no), read from systemd's links alone (no systemctl, no D-Bus at job boundaries): a
    link named after the unit in a ``*.wants/`` or ``*.requires/`` folder of /etc/systemd/system or
    /run/systemd/system (where systemctl enable puts it, systemd.unit(5)), unless the unit is masked there."""
    if any(_masked(root, base, unit) for base in SYSTEMD_CONFIG_DIRS):
        return "no"
    for base in SYSTEMD_CONFIG_DIRS:
        for name in _listdir(root, base):
            if name.endswith((".wants", ".requires")) and os.path.lexists(os.path.join(root, base, name, unit)):
                return "yes"
    return "no"


def _current(root: str, entry: Dict[str, Any], irqs: Dict[str, int]) -> Optional[str]:
    kind = entry["kind"]
    path = entry.get("path") or ""
    if kind == "service":
        return "enabled=" + unit_enabled(root, entry["target"])
    if entry.get("irq_name"):
        number = irqs.get(entry["irq_name"])
        if number is None:
            return None
        path = "proc/irq/%d/smp_affinity_list" % number
    if kind == "absent":
        return "present" if os.path.lexists(os.path.join(root, path)) else "absent"
    if kind == "file":
        try:
            with open(os.path.join(root, path), "rb") as handle:
                return "sha256:" + hashlib.sha256(handle.read()).hexdigest()
        except (IOError, OSError):
            return None
    text = read_text(root, path)
    if kind == "line":
        return read_line(text, entry.get("key") or "")
    return normalize(entry.get("compare") or "exact", text)


def _still_named(root: str, entry: Dict[str, Any]) -> bool:
    """The IRQ number apply saw still carries the action (/proc/irq/N/<name>/, kernel/irq/proc.c): the usual case,
    which spares parsing /proc/interrupts (megabytes on a 384-CPU node)."""
    directory = (entry.get("path") or "").rpartition("/")[0]
    if not directory:
        return False
    if os.path.isdir(os.path.join(root, directory, entry["irq_name"])):
        return True
    # an action that does not carry its device (amdgpu): the number must still be that device's, not another GPU's
    action, _sep, bdf = entry["irq_name"].partition("@pci:")
    return bool(bdf) and os.path.isdir(os.path.join(root, directory, action)) and os.path.exists(
        os.path.join(root, "sys/bus/pci/devices", bdf, "msi_irqs", directory.rpartition("/")[2]))


def check_settings(root: str, entries: List[Dict[str, Any]]) -> List[Tuple[str, str, str, Optional[str]]]:
    """(id, target, expected, actual) of every expected Setting the node no longer has."""
    moved = set(id(e) for e in entries if e.get("irq_name") and not _still_named(root, e))
    irqs = _irq_numbers(root, [e["irq_name"] for e in entries if id(e) in moved]) if moved else {}
    problems = []
    for entry in entries:
        if entry.get("irq_name") and id(entry) not in moved:
            entry = dict(entry, irq_name=None)  # its number is still right: read the recorded path
        actual = _current(root, entry, irqs)
        if actual is None and entry.get("irq_name") not in (None, *irqs) and _created_later(root, entry):
            continue  # pending, not drift: its device is there and will create it (mlx5: on first use, Linux 6.5+)
        if actual != entry["value"]:
            problems.append((entry["id"], entry["target"], entry["value"], actual))
    return problems


def _created_later(root: str, entry: Dict[str, Any]) -> bool:
    bdf = entry["irq_name"].partition("@pci:")[2]
    return created_later(entry["id"], entry["irq_name"],
                         bool(bdf) and os.path.isdir(os.path.join(root, "sys/bus/pci/devices", bdf)))


def load_config(root: str, config_dir: str) -> Tuple[List[Dict[str, Any]], Dict[str, Any], Dict[str, str]]:
    """The Setting entries of every ``<area>.json``, the expected inventory (empty where none) and, of its keys
    learned from the group majority rather than declared, the group (``learned``)."""
    directory = os.path.join(root, config_dir)
    if not os.path.isdir(directory):
        raise CheckConfigError("%s does not exist: run the nodetune apply on this node first" % directory)
    entries = []  # type: List[Dict[str, Any]]
    inventory = {}  # type: Dict[str, Any]
    learned = {}  # type: Dict[str, str]
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(directory, name)) as handle:
                data = json.load(handle)
        except (IOError, OSError, ValueError) as exc:
            raise CheckConfigError("%s cannot be read: %s" % (os.path.join(directory, name), exc)) from None
        if name == INVENTORY_FILE:
            inventory = dict(data.get("expected") or {})
            learned = dict(data.get("learned") or {})
        else:
            entries.extend(data.get("settings") or [])
    return entries, inventory, learned


# ------------------------------------------------------------------------------------------------ the program
def _shown(value: Any) -> str:
    """A value on one line: as JSON (quoted, escaped) where it holds a line break or another control character, so
    that a value read from the node never starts a line of its own (NHC and the scheduler read the first)."""
    text = str(value)
    return json.dumps(text) if any(c < " " or c == "\x7f" for c in text) else text


def problems(root: str, config_dir: str = CONFIG_DIR) -> List[str]:
    """One line per problem, each starting with its finding id."""
    entries, inventory, learned = load_config(root, config_dir)
    lines = []
    for sid, target, want, actual in check_settings(root, entries):
        shown = "absent" if actual is None else _shown(actual)
        lines.append("%s %s: expected %s, found %s" % (sid, target, _shown(want), shown))
    if inventory:
        for key, want, actual in compare_inventory(inventory, read_facts(root)):
            origin = " (learned: the majority of group %s)" % learned[key] if key in learned else ""
            lines.append("inventory.%s node: expected %s, found %s%s" % (key, want, actual, origin))
    return lines


def _argument(argv: List[str], name: str, default: str) -> str:
    if name in argv:
        index = argv.index(name)
        if index + 1 >= len(argv):
            raise CheckConfigError("%s needs a value" % name)
        return argv[index + 1]
    return default


USAGE = "usage: %s [--root DIR] [--config-dir DIR] [--nhc] [--quiet]\n" % PROG


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if "-h" in args or "--help" in args:
        sys.stdout.write(USAGE + (__doc__ or ""))
        return EXIT_CLEAN
    known = ("--root", "--config-dir", "--nhc", "--quiet")
    for index, arg in enumerate(args):
        if arg.startswith("-") and arg not in known and (index == 0 or args[index - 1] not in known[:2]):
            sys.stderr.write(USAGE + "%s: error: unknown option %s\n" % (PROG, arg))
            return EXIT_CONFIG
    nhc = "--nhc" in args
    try:
        root = _argument(args, "--root", "/")
        lines = problems(root, _argument(args, "--config-dir", CONFIG_DIR))
    except CheckConfigError as exc:
        sys.stderr.write("%s: error: %s\n" % (PROG, exc))
        if nhc:
            sys.stdout.write("nodetune: cannot check: %s\n" % exc)
        return EXIT_CONFIG
    if nhc:
        if lines:  # NHC's die takes one message: the first problem and how many more
            more = " (+%d more: run nodetune-check)" % (len(lines) - 1) if len(lines) > 1 else ""
            sys.stdout.write("nodetune: %s%s\n" % (lines[0], more))
    elif "--quiet" not in args:
        for line in lines:
            sys.stdout.write(line + "\n")
    return EXIT_DRIFT if lines else EXIT_CLEAN


if __name__ == "__main__":
    raise SystemExit(main())
