# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""IRQs: ``/proc/interrupts`` joined with ``/proc/irq/N/*`` and with the devices that own them.

``/proc/interrupts`` (kernel/irq/proc.c) prints one count column per *online* CPU, then the chip name,
the hardware IRQ number with the flow handler (``13107201-edge``; ``IR-PCI-MSI-edge`` on kernels < 3.x
fold both into the chip), then the action names joined by ", ". Rows with 1,152 CPU columns exist
(PCP's fixture), so the parser never assumes a width: it reads the header.
"""

from __future__ import annotations

import io
import os

from ansible_collections.nodetune.instinct.plugins.module_utils.discover.cpu import (
    cpulist_or_none,
    cpumask_or_none,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.devices import first_bdf, is_read_only_mode
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.structure import (
    are_ints,
    are_ints_or_none,
    are_strs,
    are_strs_or_none,
    is_record,
    same_length,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import (
    ParseError,
    is_hex,
    leading_decimal,
    number_after,
    parse_int,
    split_number_pair,
)
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError, Root

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: they are postponed, so typing is never imported at run time
    from typing import Any, Dict, List, Optional, Tuple

INTERRUPTS = "proc/interrupts"
_NIC_CONTROL_WORDS = ("async", "misc", "mbx", "aeq", "ctrl", "cmd", "fw", "err", "ptp")
_GPU_NAMES = ("amdgpu", "nvidia")
_IRQ_FILES = ("smp_affinity_list", "effective_affinity_list", "node")
_IRQ_VALUES = _IRQ_FILES[:2]  # what a run with the IRQs' NUMA nodes from the structure store reads
_MANAGED_SINCE = (6, 12)
_COLUMN = 11  # width of one per-CPU count column in /proc/interrupts
# A zero count in its fixed column: nine spaces then "0". Counts never have leading zeros, so nine spaces right
# before a "0" occur only where the count is 0 (a non-zero count puts a non-zero digit before its zeros): deleting
# them leaves exactly the non-zero counts. Most counts are 0, and str.replace skips them at C speed (3-6x faster
# than a regular expression or a strip(" 0") over a 4 KB row of 384 columns).
_ZERO_COUNT = " " * (_COLUMN - 2) + "0"
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def parse_interrupts(text: str, counts: bool = True) -> Tuple[List[int], List[Dict[str, Any]]]:
    """``(cpu ids of the columns, rows)``; rows have ``irq`` (int, or the label such as ``"NMI"``),
    ``counts_total``, ``ncounts``, ``chip``, ``hwirq``, ``name``.

    ``counts=False``: ``counts_total`` is None for the fixed-width rows, whose count columns are then skipped, not
    summed: the sum is most of the parse (a row has a 10-digit column per online CPU, 12.7 KB at 1,152 CPUs), and
    nothing the tune and verify modules plan or check reads it.

    Raises :class:`ParseError` when the text is not /proc/interrupts (no ``CPUn`` header).
    """
    lines = text.splitlines()
    if not lines:
        raise ParseError("/proc/interrupts is empty")
    cpu_ids = _header_cpus(lines[0])
    width = len(cpu_ids)
    span = _COLUMN * width
    rows: List[Dict[str, Any]] = []
    for line in lines[1:]:
        colon = line.find(":")
        if colon < 0:
            continue
        label = line[:colon].strip()
        region = line[colon + 1:colon + 1 + span]
        fixed_width = not region[_COLUMN - 1::_COLUMN].strip() or not region[::_COLUMN].strip()
        if label.isdigit() and len(region) == span and fixed_width:
            # The kernel prints every count in a fixed 10-digit column ("%10u " or " %10u"; counts are
            # 32-bit, so never wider): the name starts right after the last column, no split needed.
            ncounts = width
            tail = line[colon + 1 + span:]
            total = sum(map(int, region.replace(_ZERO_COUNT, "").split())) if counts else None
        else:
            ncounts, total, tail = _split_counts(line[colon + 1:], width)
        chip, hwirq, name = _split_tail(tail)
        rows.append({"irq": int(label) if label.isdigit() else label, "counts_total": total, "ncounts": ncounts,
                     "chip": chip, "hwirq": hwirq, "name": name})
    return cpu_ids, rows


def _header_cpus(line: str) -> List[int]:
    """The CPU of each count column, from the header line (``CPU0 CPU1 ...``); ParseError for anything else."""
    header = line.split()
    if not header or not all(number_after(h, "CPU") is not None for h in header):
        raise ParseError("/proc/interrupts is not valid: it does not start with a 'CPU0 CPU1 ...' header "
                         "(first line %r)" % line[:80])
    return [int(h[3:]) for h in header]


def read_interrupts(root: Root) -> Optional[bytes]:
    """The bytes of /proc/interrupts, or None where it cannot be read (as Root.read). Not decoded: at 1,152 CPUs it is
    14 MB, almost all of it count columns that :func:`interrupt_rows` skips without turning them into text."""
    try:
        fd = os.open(root.real(INTERRUPTS), _READ_FLAGS)
    except (OSError, ValueError, NodeFileError):
        return None
    try:
        size = os.fstat(fd).st_size  # 0 on procfs: the kernel writes it as it is read (seq_file)
        chunks = []
        while True:
            chunk = os.read(fd, size + 1 if size else 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def numbered_tails(data: bytes, checked: bool = False) -> Optional[str]:
    """Each numbered row of /proc/interrupts without its count columns (``"  24: <what follows the counts>"``, one
    line each), found by their fixed width alone, not parsed: the evidence that the IRQ rows are the ones a structure
    store keeps (:func:`read_irqs`). show_interrupts() prints every count as `` %10u`` of an unsigned int (kernel/irq/
    proc.c: never wider), so the text after them starts at the same column in every numbered row. None where the file
    is not plain ASCII with a ``CPUn`` header; a row that is not what the kernel prints gives another text than the
    kept one, never the same. ``checked``: None unless every row has a colon and every numbered row its count columns
    where they belong (what a store keeps is learned from such rows only). :func:`interrupt_tails` gives the same
    text from the file, read a piece at a time."""
    if not data or not data.isascii() or b"\r" in data:
        return None
    end = data.find(b"\n")
    if end < 0:
        return None
    span = _header_span(data[:end])
    out: List[bytes] = []
    if span is None or not _row_tails(data, end + 1, len(data), span, out, checked):
        return None
    return b"\n".join(out).decode("ascii")


def _header_span(header: bytes) -> Optional[int]:
    """The width of the count columns a ``CPU0 CPU1 ...`` header announces; None for any other first line."""
    words = header.split()
    if not words or not all(word.startswith(b"CPU") and word[3:].isdigit() for word in words):
        return None
    return _COLUMN * len(words)


def _row_tails(data: Any, start: int, size: int, span: int, out: List[Any], checked: bool) -> bool:
    """Append the tail of each numbered row of ``data[start:size]`` (whole lines; the last one may end at ``size``)
    to ``out`` as :func:`numbered_tails` gives them (a row without a colon is no row, as interrupt_rows reads it; a
    numbered row too short for its count columns is kept whole); False where ``checked`` and a row is not one the
    kernel prints."""
    find = data.find
    while start < size:
        line_end = find(b"\n", start, size)
        if line_end < 0:
            line_end = size
        colon = find(b":", start, line_end)
        if colon < 0:
            if checked:
                return False
        elif data[start:colon].strip().isdigit():  # not NMI, LOC, ERR...: an IRQ
            counts_at = colon + 1
            if checked and not _fixed_row(data, counts_at, line_end, span):
                return False
            if line_end - counts_at >= span:
                out.append(data[start:counts_at] + data[counts_at + span:line_end])
            else:
                out.append(data[start:line_end])
        start = line_end + 1
    return True


def _fixed_row(data: Any, counts_at: int, line_end: int, span: int) -> bool:
    """Whether a numbered row has a count column per CPU from ``counts_at`` (a space at the start or end of each 11
    characters, whichever side the kernel pads) before its end."""
    return line_end - counts_at >= span and (not data[counts_at:counts_at + span:_COLUMN].strip()
                                             or not data[counts_at + _COLUMN - 1:counts_at + span:_COLUMN].strip())


_TAILS_CHUNK = 1 << 18  # the buffer interrupt_tails reads into (doubled for a longer line)


def interrupt_tails(root: Root) -> Tuple[bool, Optional[str]]:
    """``(readable, numbered_tails(read_interrupts(root)))`` without holding the whole file: it is read into one
    buffer, a piece at a time, and only the rows' tails are kept. At 384 CPUs the file is 4.8 MB, at 1,152 CPUs 14 MB,
    almost all of it count columns; a new process that reads it whole first has the kernel fill that many fresh pages
    (docs/benchmarks.md). ``readable`` is False where the file cannot be read (as read_interrupts gives None)."""
    try:
        fd = os.open(root.real(INTERRUPTS), _READ_FLAGS)
    except (OSError, ValueError, NodeFileError):
        return False, None
    try:
        return True, _streamed_tails(io.FileIO(fd, "r", closefd=False))
    except OSError:
        return False, None
    finally:
        os.close(fd)


def _streamed_tails(reader: Any) -> Optional[str]:
    """:func:`numbered_tails` of what ``reader`` (``readinto``) gives, whole lines at a time in one buffer. The
    buffer holds only file bytes already checked or zeros, so checking all of it is checking what was read."""
    buf = bytearray(_TAILS_CHUNK)
    filled = 0  # the front of buf: the start of a line not ended yet
    span: Optional[int] = None
    out: List[Any] = []
    while True:
        if filled == len(buf):  # a line longer than the buffer
            buf.extend(bytes(len(buf)))
        with memoryview(buf) as view:
            count = reader.readinto(view[filled:])
        if not count:
            break
        end = filled + count
        if buf.find(b"\r", filled, end) >= 0 or not buf.isascii():
            return None
        last = buf.rfind(b"\n", 0, end)
        if last < 0:
            filled = end
            continue
        start = 0
        if span is None:
            header_end = buf.find(b"\n", 0, end)
            span = _header_span(bytes(buf[:header_end]))
            if span is None:
                return None
            start = header_end + 1
        _row_tails(buf, start, last, span, out, False)
        buf[:end - last - 1] = buf[last + 1:end]
        filled = end - last - 1
    if span is None:  # empty, or no line ended
        return None
    _row_tails(buf, 0, filled, span, out, False)
    return b"\n".join(out).decode("ascii")


def interrupt_rows(data: bytes, counts: bool = True) -> List[Dict[str, Any]]:
    """The rows of :func:`parse_interrupts` from the file's bytes. ``counts=False`` on a plain ASCII file (what the
    kernel prints: digits, spaces and names) goes through the bytes line by line: each row's count columns are
    checked at their separators and stepped over, never copied or decoded; the rows are the same."""
    if counts or not data or not data.isascii() or b"\r" in data:
        text = data.decode("utf-8", "replace")
        if "\r" in text:  # universal newlines, as Root.read gives the text
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        return parse_interrupts(text, counts)[1]
    end = data.find(b"\n")
    if end < 0:
        end = len(data)
    header = data[:end].decode("ascii")
    width = len(_header_cpus(header))
    span = _COLUMN * width
    rows: List[Dict[str, Any]] = []
    size, find = len(data), data.find
    start = end + 1
    while start < size:
        end = find(b"\n", start)
        if end < 0:
            end = size
        colon = find(b":", start, end)
        if colon >= 0:
            rows.append(_row_of_bytes(data, start, colon, end, width, span))
        start = end + 1
    return rows


def _row_of_bytes(data: bytes, start: int, colon: int, end: int, width: int, span: int) -> Dict[str, Any]:
    """One row of :func:`interrupt_rows` (``counts=False``): a fixed-width numbered row by its separators, any other
    row as parse_interrupts reads it."""
    label = data[start:colon].strip().decode("ascii")
    counts_at = colon + 1
    if (label.isdigit() and end - counts_at >= span
            and (not data[counts_at + _COLUMN - 1:counts_at + span:_COLUMN].strip()
                 or not data[counts_at:counts_at + span:_COLUMN].strip())):
        ncounts, total, tail = width, None, data[counts_at + span:end].decode("ascii")
    else:
        ncounts, total, tail = _split_counts(data[counts_at:end].decode("ascii"), width)
    chip, hwirq, name = _split_tail(tail)
    return {"irq": int(label) if label.isdigit() else label, "counts_total": total, "ncounts": ncounts,
            "chip": chip, "hwirq": hwirq, "name": name}


def _split_counts(rest: str, width: int) -> Tuple[int, int, str]:
    """(number of counts, their sum, the text after them) for rows that are not fixed-width
    (``ERR:`` and ``MIS:`` have a single count; per-CPU summary rows end with a description)."""
    fields = rest.split(None, width)
    counts = fields[:width]
    if len(counts) == width and "".join(counts).isdigit():
        return width, sum(map(int, counts)), fields[width] if len(fields) > width else ""
    ncounts = 0
    for field in counts:
        if not field.isdigit():
            break
        ncounts += 1
    return ncounts, sum(map(int, counts[:ncounts])), " ".join(fields[ncounts:])


def _split_tail(tail: str) -> Tuple[Optional[str], Optional[str], str]:
    """``"IR-PCI-MSI 13107201-edge      mlx5_comp0@pci:0000:19:00.0"`` -> (chip, hwirq, name)."""
    tail = tail.strip()
    if not tail:
        return None, None, ""
    chip, _sep, after = tail.partition(" ")
    after = after.lstrip()
    token, _sep, rest = after.partition(" ")
    hwirq = _hwirq(token)
    if hwirq is not None:
        rest = rest.lstrip()
        # CONFIG_GENERIC_IRQ_SHOW_LEVEL (arm64) prints "Level"/"Edge" before the name.
        first, _sep, remainder = rest.partition(" ")
        if first in ("Level", "Edge"):
            rest = remainder.lstrip()
        return chip, hwirq, rest
    return chip, None, after


def _hwirq(token: str) -> Optional[str]:
    """The number of a hardware IRQ token, ``13107201-edge`` -> ``13107201``, ``0x1f`` -> ``0x1f``; None for
    anything else (``^(\\d+|0x[0-9a-fA-F]+)(?:-(\\w+))?$``, group 1)."""
    if token.endswith("\n"):  # "$" also matches before a final newline
        token = token[:-1]
    number, dash, flow = token.partition("-")
    if dash and not flow.replace("_", "a").isalnum():  # \\w+: alphanumerics and "_", at least one
        return None
    if number.isdecimal() or number.startswith("0x") and is_hex(number[2:]):
        return number
    return None


def kernel_version(release: Optional[str]) -> Optional[Tuple[int, int]]:
    """``(major, minor)`` of ``6.8.0-45-generic`` (``^(\\d+)\\.(\\d+)``), else None."""
    text = release or ""
    major = leading_decimal(text)
    minor = leading_decimal(text[len(major) + 1:]) if text[len(major):len(major) + 1] == "." else ""
    return (int(major), int(minor)) if major and minor else None


def _nvme_queue(name: str) -> Optional[Tuple[str, str]]:
    """(controller, queue) digit strings of ``nvme0q3`` (``^nvme(\\d+)q(\\d+)$``), else None."""
    return split_number_pair(name, "nvme", "q")


def _names_nic_control(name: str) -> bool:
    """A NIC's control/async vector (``async|misc|mbx|aeq|ctrl|cmd|fw|err|ptp``, any case, anywhere)."""
    if not name.isascii():  # Unicode case folding ("ſ" matches "s"): leave it to the regular expression
        import re

        return re.search("|".join(_NIC_CONTROL_WORDS), name, re.IGNORECASE) is not None
    lower = name.lower()
    return any(word in lower for word in _NIC_CONTROL_WORDS)


def _owner(row: Dict[str, Any], msi_owner: Dict[int, str], nvme_bdf: Dict[str, Optional[str]],
           netdev_bdf: Dict[str, Optional[str]], chip_bdf: Optional[Dict[str, Optional[str]]] = None) -> Optional[str]:
    """The PCI function raising this IRQ: ``msi_irqs/`` first (authoritative), then the BDF the kernel
    prints in the chip (``IR-PCI-MSIX-0000:31:00.0``, kernels >= 5.x) or in the action name
    (``mlx5_comp3@pci:0000:41:00.0``), then NVMe queue and netdev names. ``chip_bdf`` remembers the BDF of each
    chip text (one per device, shared by all its vectors)."""
    owner = msi_owner.get(row["irq"])
    if owner:
        return owner
    chip = row["chip"] or ""
    if chip_bdf is not None and chip in chip_bdf:
        bdf = chip_bdf[chip]
    else:
        found = first_bdf(chip)
        bdf = found.lower() if found is not None else None
        if chip_bdf is not None:
            chip_bdf[chip] = bdf
    if bdf is not None:
        return bdf
    name = row["name"]
    found = first_bdf(name)
    if found is not None:
        return found.lower()
    queue = _nvme_queue(name)
    if queue is not None:
        return nvme_bdf.get("nvme" + queue[0])
    for netdev, bdf in netdev_bdf.items():
        if bdf and (name.startswith(netdev + "-") or ("-" + netdev + "-") in name):
            return bdf
    return None


def _virtio_queue(name: str) -> bool:
    """A virtio-net queue vector, ``virtio<N>-input.<K>`` / ``virtio<N>-output.<K>`` (drivers/virtio/virtio_pci_common.c
    names vectors ``<device>-<vq>``; drivers/net/virtio_net.c names the queues ``input.K``/``output.K``), or the
    ``virtio<N>-virtqueues`` vector all queues share when MSI-X vectors are short. ``virtio<N>-config`` (config
    changes) is not one."""
    device, _sep, queue = name.partition("-")
    if not device[len("virtio"):].isdigit():
        return False
    direction, dot, index = queue.partition(".")
    return queue == "virtqueues" or (direction in ("input", "output") and bool(dot) and index.isdigit())


def _kind(name: str, device_class: Optional[str], is_gpu: bool) -> str:
    queue = _nvme_queue(name)
    if queue is not None:
        return "nvme_admin" if queue[1] == "0" else "nvme_queue"
    if name.startswith("mlx5_"):
        # mlx5_comp<N>@pci:<BDF> are the completion vectors; mlx5_async (and mlx5_pages_eq/mlx5_cmd_eq of older
        # kernels) carry firmware events and commands (drivers/net/ethernet/mellanox/mlx5/core/pci_irq.c, eq.c)
        return "nic_comp" if name.startswith("mlx5_comp") else "nic_async"
    if is_gpu or name.startswith(_GPU_NAMES):
        return "gpu"
    if device_class and device_class.startswith("0x02"):
        if name.startswith("virtio"):
            return "nic_comp" if _virtio_queue(name) else "nic_async"
        return "nic_async" if _names_nic_control(name) else "nic_comp"
    return "other"


def _cpus(parsed: Dict[str, Optional[Tuple[int, ...]]], text: str, irq: int, file_name: str,
          warnings: List[str]) -> Optional[List[int]]:
    """cpulist_or_none of ``proc/irq/<irq>/<file_name>`` (a new list each time); a text that does not parse is
    given to it again for each IRQ, so that each file gets its warning."""
    cpus = parsed.get(text)
    if cpus is not None:
        return list(cpus)
    found = cpulist_or_none(text, "proc/irq/%d/%s" % (irq, file_name), warnings)
    if found is not None:
        parsed[text] = tuple(found)
    return found


def read_irqs(root: Root, pci_devices: List[Dict[str, Any]], gpu_bdfs: List[str],
              nvme_bdf: Dict[str, Optional[str]], netdev_bdf: Dict[str, Optional[str]],
              release: Optional[str], warnings: List[str], counts: bool = True,
              store: Any = None, values: bool = True) -> Optional[List[Dict[str, Any]]]:
    """IRQ rows with a number; None where the node has no /proc/interrupts. ``counts=False``: no ``counts_total``
    (None), see :func:`parse_interrupts`. The affinities are read afresh unless ``values=False``: they are then None
    until :func:`read_affinities` reads those of the IRQs a caller needs.

    From ``store``, where /proc/interrupts has the same rows (:func:`numbered_tails`): the rows (irq, chip, hardware
    IRQ, name: unless ``counts``, which need the whole parse), each IRQ's NUMA node and the mode of its affinity file
    (which says whether the kernel manages it). The node is fixed when the descriptor is allocated
    (kernel/irq/irqdesc.c alloc_desc; /proc/irq/N/node shows it, kernel/irq/proc.c), and so is the mode:
    register_irq_proc() creates /proc/irq/N once per descriptor, when its first handler is added (``if (desc->dir)
    return``), its affinity files without a write bit where irq_can_set_affinity_usr() says no (a managed IRQ, 6.12+).
    A number freed and allocated again for another device comes back with another hardware IRQ (x86 PCI-MSI puts the
    requester id in it, pci_msi_domain_calc_hwirq) or chip, and for the same device with its node and flags again."""
    data: Optional[bytes] = None
    evidence: Optional[str] = None
    if store is not None and not counts:  # the rows' tails alone: the file is read whole only where they are new
        readable, evidence = interrupt_tails(root)
        if not readable:
            return None
    elif store is not None:
        data = read_interrupts(root)
        evidence = numbered_tails(data) if data is not None else None
    known = store.known("irqs", evidence, _valid_irqs) if evidence is not None else None
    if known is not None and not counts:
        numbered = [{"irq": irq, "chip": chip, "hwirq": hwirq, "name": name, "counts_total": None}
                    for irq, chip, hwirq, name in zip(known["irq"], known["chip"], known["hwirq"], known["name"])]
    else:
        if data is None:
            data = read_interrupts(root)
        if data is None:
            return None
        try:
            rows = interrupt_rows(data, counts)
        except ParseError as exc:
            warnings.append(str(exc))
            return None
        numbered = [row for row in rows if isinstance(row["irq"], int)]
    msi_owner = {irq: dev["bdf"] for dev in pci_devices for irq in dev["msi_irqs"]}
    class_of = {dev["bdf"]: dev["class"] for dev in pci_devices}
    gpus = set(gpu_bdfs)
    version = kernel_version(release)
    mode_is_truth = version is not None and version >= _MANAGED_SINCE
    if known is not None and not values:
        files: List[Tuple[List[Optional[str]], Optional[int]]] = [
            ([None, None, None], mode) for mode in known["modes"]]
    else:
        root.subdirs("proc/irq")  # resolves every proc/irq/N at once (see Root.subdirs)
        names = _IRQ_VALUES if known is not None else _IRQ_FILES
        files = root.read_attrs_many(["proc/irq/%d" % row["irq"] for row in numbered], names, names[0])
        if known is not None:
            files = [(texts, mode) for (texts, _mode), mode in zip(files, known["modes"])]
    irqs: List[Dict[str, Any]] = []
    # Thousands of IRQs share a few affinity and node texts and one chip text per device: each is parsed once.
    cpus_of: Dict[str, Optional[Tuple[int, ...]]] = {}
    node_of: Dict[Optional[str], Optional[int]] = {}
    chip_bdf: Dict[str, Optional[str]] = {}
    nodes: List[Optional[int]] = []
    modes: List[Optional[int]] = []
    for index, (row, (texts, affinity_mode)) in enumerate(zip(numbered, files)):
        number = row["irq"]
        affinity_text, effective_text = texts[0], texts[1]
        affinity: Optional[List[int]] = None
        if not values:
            effective_text = None
        elif affinity_text is None:
            rel = "proc/irq/%d" % number
            mode_of: Dict[str, Optional[int]] = {}
            mask = root.read_attrs(rel, ("smp_affinity",), mode_of)["smp_affinity"]
            affinity = cpumask_or_none(mask, rel + "/smp_affinity", warnings)
            if known is None:
                affinity_mode = mode_of["smp_affinity"]
        else:
            affinity = _cpus(cpus_of, affinity_text, number, "smp_affinity_list", warnings)
        modes.append(affinity_mode)
        device = _owner(row, msi_owner, nvme_bdf, netdev_bdf, chip_bdf)
        name = row["name"]
        kind = _kind(name, class_of.get(device or ""), device in gpus)
        if is_read_only_mode(affinity_mode) or kind == "nvme_queue":
            managed: Optional[bool] = True
        elif kind == "nvme_admin" or (affinity_mode is not None and mode_is_truth):
            managed = False
        else:
            managed = None
        if known is not None:
            node = known["nodes"][index]
        elif texts[2] in node_of:
            node = node_of[texts[2]]
        else:
            node = node_of[texts[2]] = parse_int(texts[2])
        nodes.append(node)
        irqs.append({
            "irq": number,
            "chip": row["chip"],
            "hwirq": row["hwirq"],
            "name": name,
            "device": device,
            "counts_total": row["counts_total"],
            "smp_affinity_list": affinity,
            "effective_affinity_list": None if effective_text is None else _cpus(
                cpus_of, effective_text, number, "effective_affinity_list", warnings),
            "node": node,
            "managed": managed,
            "kind": kind,
        })
    # learned from rows read whole and checked; where the rows changed between the two reads, nothing is learned
    if known is None and evidence is not None and data is not None and numbered_tails(data, checked=True) == evidence:
        kept: Dict[str, List[Any]] = {key: [row[key] for row in numbered] for key in _ROW_KEYS}
        store.learn("irqs", evidence, dict(kept, nodes=nodes, modes=modes))
    irqs.sort(key=lambda r: r["irq"])
    return irqs


_ROW_KEYS = ("irq", "chip", "hwirq", "name")


def _valid_irqs(kept: Any) -> bool:
    return is_record(kept, {"irq": are_ints, "chip": are_strs_or_none, "hwirq": are_strs_or_none, "name": are_strs,
                            "nodes": are_ints_or_none, "modes": are_ints_or_none}) and same_length(*kept.values())


def read_affinities(root: Root, irqs: List[Dict[str, Any]], warnings: List[str],
                    names: Tuple[str, ...] = _IRQ_VALUES) -> None:
    """Read the current ``smp_affinity_list`` and ``effective_affinity_list`` (``names``: those of them) of ``irqs``
    (entries of a Topology discovered with ``values=False``) into them, as a discovery with values reads them."""
    if not irqs:
        return
    files = root.read_attrs_many(["proc/irq/%d" % irq["irq"] for irq in irqs], names)
    cpus_of: Dict[str, Optional[Tuple[int, ...]]] = {}
    for irq, (texts, _mode) in zip(irqs, files):
        number = irq["irq"]
        for name, text in zip(names, texts):
            if text is not None:
                irq[name] = _cpus(cpus_of, text, number, name, warnings)
            elif name == "smp_affinity_list":  # older kernels have the mask alone
                rel = "proc/irq/%d/smp_affinity" % number
                irq[name] = cpumask_or_none(root.read(rel), rel, warnings)
            else:
                irq[name] = None
