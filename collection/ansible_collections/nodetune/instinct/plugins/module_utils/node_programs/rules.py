# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The rules nodetune's node programs follow, and verify and apply with them: one source.

How a value read from the node compares with the desired one (cpulists, bracketed choices, ASCII integers, amdgpu's
clock table), the ``KEY=value`` line reader, which IRQ an action name is, and which missing IRQ is pending. verify,
apply and the areas import these functions; nodetune-check (node_check.py) and nodetune-restore (node_restore.py)
are rendered onto the node with this module and parse.py inlined (render.py), so that verify and the node programs
cannot disagree on a value. Standard library only, like everything a node program inlines.
"""

from __future__ import annotations

import os

from ansible_collections.nodetune.instinct.plugins.module_utils.parse import (
    ParseError,
    ascii_int,
    is_digits,
    od_clock_command,
    parse_choice,
    parse_cpulist,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: a node program runs often, keep imports few
    from typing import Callable, Dict, List, Optional

# How the current value is compared with the desired one (Setting.compare)
EXACT = "exact"
INT = "int"
CHOICE = "choice"  # "[none] mq-deadline": compare the bracketed (active) entry
CPULIST = "cpulist"  # "0-3" == "0,1,2,3"
WORDS = "words"  # whitespace-normalised ("4096\t87380" == "4096 87380")
CONTENT = "content"  # whole file text
# amdgpu's pp_od_clk_voltage: written as a command ("s 1 1900"), committed with a second write ("c"), read back as a
# table; compared as the command that sets its maximum GFX clock (parse.od_clock_command)
OD_CLOCK = "od_clock"
COMPARES = (EXACT, INT, CHOICE, CPULIST, WORDS, CONTENT, OD_CLOCK)

# The pinned IRQs a driver creates after probe, so that one not there while its device is, is pending: NIC
# completion vectors (mlx5 creates each on first use since Linux 6.5, commit f14c1a14e632: mlx5_comp_eqn_get() ->
# create_comp_eq(), drivers/net/ethernet/mellanox/mlx5/core/eq.c). Not a GPU's (irq.gpu_local): amdgpu requests its
# vector when it binds (amdgpu_irq_init(), drivers/gpu/drm/amd/amdgpu/amdgpu_irq.c) and frees it only when it lets
# go of the device (amdgpu_irq_fini_hw()), so one missing while its GPU is there means amdgpu is not bound to it.
LATE_IRQ_IDS = ("irq.nic_local",)


def normalize(compare: str, text: Optional[str]) -> Optional[str]:
    """The comparable form of a value read from the node (None = absent), for a comparison named in COMPARES.
    Numbers are ASCII digits only (parse.py): ``'٣'`` is not CPU 3 and ``'4_092'`` is not 4092."""
    if text is None:
        return None
    if compare == CHOICE:
        return parse_choice(text)[0]
    if compare == CPULIST:
        try:
            return ",".join(str(c) for c in parse_cpulist(text))
        except ParseError:
            return text.strip()
    if compare == INT:
        try:
            return str(ascii_int(text.strip()))
        except ParseError:
            return text.strip()
    if compare == WORDS:
        return " ".join(text.split())
    if compare == CONTENT:
        return text
    if compare == OD_CLOCK:
        return od_clock_command(text)
    return text.strip()


def read_line(text: Optional[str], key: str) -> Optional[str]:
    """Value of the last ``KEY=value`` line (shell-variable files), unquoted; None where unset."""
    if text is None:
        return None
    value = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(key + "="):
            value = stripped[len(key) + 1:].strip().strip("\"'")
    return value


def read_text(root: str, rel: str) -> Optional[str]:
    """A file under ``root`` as text (undecodable bytes replaced); None where it cannot be read."""
    # os.open/os.read: no buffered text wrapper per file (a 384-CPU node has a thousand small files to read)
    try:
        fd = os.open(root.rstrip("/") + "/" + rel, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def list_names(root: str, rel: str) -> Optional[List[str]]:
    """The names in a folder under ``root``; None where it cannot be listed (absent, not a folder)."""
    try:
        return os.listdir(os.path.join(root, rel))
    except OSError:
        return None


def created_later(setting_id: str, irq_name: str, device_present: bool) -> bool:
    """Whether an IRQ that does not exist is pending, not missing: one of the kinds a driver creates after probe
    (LATE_IRQ_IDS) whose PCI device (named in it, ``@pci:<BDF>``) is there."""
    return setting_id in LATE_IRQ_IDS and "@pci:" in irq_name and device_present


def irq_numbers(names: List[str], listdir: Callable[[str], Optional[List[str]]],
                read: Callable[[str], Optional[str]]) -> Dict[str, int]:
    """Action name -> IRQ number: the one rule nodetune-check, nodetune-restore and verify (area_persist.irq_numbers)
    find IRQs by; ``listdir(rel)`` and ``read(rel)`` read under the node's root (None: absent).

    A name that carries its PCI device is looked for among that device's msi_irqs and their /proc/irq/N/<action>/
    folders (kernel/irq/proc.c, register_handler_proc()), where the action is the name itself
    (``mlx5_comp3@pci:<BDF>``) or, for a driver whose action does not carry its device, the part before ``@pci:``
    (``amdgpu@pci:<BDF>``: every GPU's vector is named ``amdgpu``). /proc/interrupts (megabytes on a 384-CPU node)
    is read only for a name without a device or whose device lists no msi_irqs, and matched by the whole name (so
    never an amdgpu one: its line does not say whose it is); a vector its driver has not created yet (mlx5, Linux
    6.5+) does not cost that read every time."""
    numbers = {}  # type: Dict[str, int]
    listed = set()  # type: set
    by_device = {}  # type: Dict[str, List[str]]
    for name in names:
        by_device.setdefault(name.partition("@pci:")[2], []).append(name)
    for bdf in sorted(set(by_device) - {""}):
        wanted = by_device[bdf]
        vectors = listdir("sys/bus/pci/devices/%s/msi_irqs" % bdf)
        if vectors is None:
            continue
        listed.update(wanted)
        # an action folder's name -> the names it answers: the name itself, or its driver's part (amdgpu@pci:...)
        by_action = {}  # type: Dict[str, List[str]]
        for name in wanted:
            by_action.setdefault(name, []).append(name)
            by_action.setdefault(name.partition("@pci:")[0], []).append(name)
        left = set(wanted)
        for vector in sorted(vectors):  # the first vector (in this order) that answers a name is its IRQ
            if not left:
                break
            if not vector or not all("0" <= c <= "9" for c in vector):
                continue
            for action in listdir("proc/irq/" + vector) or ():
                for name in by_action.get(action, ()):
                    if name in left:
                        numbers[name] = int(vector)
                        left.discard(name)
    if all(name in listed for name in names):
        return numbers
    for line in (read("proc/interrupts") or "").splitlines()[1:]:
        head, _sep, rest = line.partition(":")
        head = head.strip()
        if is_digits(head):
            words = rest.rsplit(None, 1)  # the action name is the last word; the per-CPU counts come first
            if words:
                numbers.setdefault(words[-1], int(head))
    return numbers
