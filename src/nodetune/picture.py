"""A picture of a node's layout, and a fleet drift page: SVG inside plain HTML, rendered as strings.

Why pure string rendering: the page must open anywhere (a browser, an AWX artifact, a CI attachment) with no
JavaScript, fonts or network, and the tests read it back as a DOM. Every label is also a table row below the
picture, so the page reads without the drawing (and screen readers get it too).

The node picture shows, per socket and NUMA node, every physical core with its threads. A CPU's fill says whose it
is: housekeeping, a GPU rank (one colour per rank, the colour of its GPU), spare, or an SMT sibling that is (or will
be) offline, greyed out and hatched. A CPU that takes pinned NIC completion IRQs carries a marker on top of that
fill with the number of vectors, so a rank core that also takes IRQs shows both (the default plan spreads the
vectors over every non-housekeeping core, rank cores included). The GPUs and NICs sit on their NUMA node, each GPU
in its rank's colour with its rank numbers and CPUs, each NIC with its HCA and the CPUs its IRQs are pinned to;
their labels wrap to as many lines as they need, nothing is cut.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.nodetune.instinct.plugins.module_utils.audit import outliers as outliers_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import format_cpulist
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import smt_sibling_groups

# Okabe-Ito-like, without the orange of the NIC IRQ marker.
# Neighbouring ranks share a NUMA node, so consecutive colours differ most.
RANK_COLOURS = ("#0072B2", "#009E73", "#CC79A7", "#7B3294", "#B2182B", "#35978F", "#8C510A", "#56B4E9",
                "#1B7837", "#C51B7D", "#2166AC", "#5AAE61", "#762A83", "#D6604D", "#4D9221", "#4393C3")
HOUSEKEEPING = "#6b7a8f"
IRQ = "#E69F00"    # the NIC IRQ marker (and the NIC chips' edge)
SPARE = "#ffffff"
OFFLINE = "#d4d4d4"
MEMORY_ONLY = "#f4f4f4"
NO_RANK_GPU = "#9aa5b1"
INK = "#1d2430"    # the page's text colour

CELL = 30          # one core (its threads side by side)
MARKER_H = 11      # the IRQ marker at the foot of a CPU
PAD = 10
HEADER = 22
LINE = 14          # one line of a GPU/NIC label
CHIP_PAD = 6       # a label's inner margin, left and right
MIN_NODE_WIDTH = 270
MAX_ROW_WIDTH = 1200  # NUMA nodes, sockets and legend items wrap to the next row past this (a 1280-pixel window)
FONT = "font-family:DejaVu Sans,Arial,Helvetica,sans-serif"

CSS = """
body { font-family: DejaVu Sans, Arial, Helvetica, sans-serif; margin: 24px; color: #1d2430; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px 0; } h2 { font-size: 18px; margin: 28px 0 6px 0; }
.summary { color: #4a5566; margin: 0 0 12px 0; }
table { border-collapse: collapse; margin: 8px 0 16px 0; font-size: 13px; }
th, td { border: 1px solid #cfd6e0; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #eef2f7; }
td.drift, span.drift { color: #a33a00; font-weight: bold; } td.ok, span.ok { color: #1b7837; }
td.failed, span.failed { color: #b2182b; font-weight: bold; }
td.pending, span.pending { color: #5e3c99; font-weight: bold; }
svg { display: block; margin: 8px 0; max-width: 100%; height: auto; }
nav a { margin-right: 12px; }
ul.drift-list { list-style: none; margin: 0; padding: 0; }
ul.drift-list li { margin: 1px 0; white-space: nowrap; }
ul.drift-list summary { cursor: pointer; }
ul.drift-list .values { white-space: normal; color: #4a5566; margin: 2px 0 4px 18px; }
span.count { display: inline-block; min-width: 1.4em; padding: 0 6px; border-radius: 9px; background: #fdb863;
             text-align: center; font-size: 12px; }
"""


# --------------------------------------------------------------------------------------------- text
# Advance widths (em) of DejaVu Sans, the first and widest font of FONT, rounded up from chromium's measure;
# a character not listed counts as the widest lower-case letters, so an estimate errs on the long side.
_EM: dict[str, float] = {
    **dict.fromkeys(" ,.·'ijl", 0.32), **dict.fromkeys("IJ/:;\\|f-", 0.36), **dict.fromkeys("()[]t!r", 0.42),
    **dict.fromkeys("ABCDEFGHKLNOPQRSTUVXYZ&", 0.80), **dict.fromkeys("mwMW%@…#+<=>^~×→≥", 1.0)}


def _text_px(text: str, size: float, bold: bool = False) -> float:
    """How wide ``text`` draws at ``size`` pixels, at most (see _EM)."""
    return sum(_EM.get(ch, 0.64) for ch in text) * size * (1.1 if bold else 1.0)


def _split_long(text: str, room: float, size: float) -> list[str]:
    """One part of a label too long for a line: broken after commas and spaces (a cpulist breaks between its
    ranges), else anywhere."""
    tokens: list[str] = []
    word = ""
    for ch in text:
        word += ch
        if ch in ", ":
            tokens.append(word)
            word = ""
    if word:
        tokens.append(word)
    lines: list[str] = []
    current = ""
    for token in tokens:
        if current and _text_px(current + token.rstrip(), size) > room:
            lines.append(current.rstrip())
            current = ""
        while _text_px(token.rstrip(), size) > room:  # one token wider than the line: cut it where it must be
            cut = 1
            while cut < len(token) and _text_px(token[:cut + 1], size) <= room:
                cut += 1
            lines.append(token[:cut])
            token = token[cut:]
        current += token
    if current.strip():
        lines.append(current.rstrip())
    return lines


def wrap(text: str, room: float, size: float = 11) -> list[str]:
    """``text`` as lines no wider than ``room`` pixels: whole " · " parts together where they fit."""
    lines: list[str] = []
    current = ""
    for part in text.split(" · "):
        joined = f"{current} · {part}" if current else part
        if _text_px(joined, size) <= room:
            current = joined
            continue
        if current:
            lines.append(current)
        if _text_px(part, size) <= room:
            current = part
        else:
            *full, current = _split_long(part, room, size)
            lines.extend(full)
    if current:
        lines.append(current)
    return lines


def _luminance(colour: str) -> float:
    def channel(value: int) -> float:
        c = value / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def text_colour(fill: str) -> str:
    """White or the page's ink on ``fill``, whichever contrasts more (WCAG 2 contrast ratio)."""
    lum = _luminance(fill)
    return "#ffffff" if 1.05 / (lum + 0.05) >= (lum + 0.05) / (_luminance(INK) + 0.05) else INK


# --------------------------------------------------------------------------------------------- model
@dataclass
class _Core:
    threads: list[int]
    node: int | None
    package: int | None


@dataclass
class _Device:
    kind: str          # "gpu" or "nic"
    label: str         # what the chip says (wrapped to its width)
    detail: str        # the tooltip
    fill: str
    ident: str         # BDF or netdev name


@dataclass
class _NumaView:
    node: int
    package: int | None
    cores: list[_Core] = field(default_factory=list)
    devices: list[_Device] = field(default_factory=list)
    memory_only: bool = False


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _cpus(cpus: Iterable[int]) -> str:
    return format_cpulist(sorted(set(cpus))) or "-"


class NodeModel:
    """What the picture needs from a Topology (docs/topology.md) and its Layout (docs/layout.md)."""

    def __init__(self, topology: Mapping[str, Any], layout: Mapping[str, Any], host: str = "node") -> None:
        self.host = host
        self.topology = topology
        self.layout = layout
        cpus = {int(c["id"]): c for c in topology.get("cpus") or [] if c.get("id") is not None}
        self.online = {i for i, c in cpus.items() if c.get("online")}
        self.smt_offline = {int(c) for c in layout.get("smt_offline") or []}
        self.offline = (set(cpus) - self.online) | self.smt_offline
        self.housekeeping = set(layout.get("housekeeping") or [])
        self.irq_cpus = set(layout.get("nic_irq_cpus") or [])
        # NIC completion vectors per CPU: each planned entry is one vector and the CPUs of its smp_affinity_list
        # (the planner names one CPU per vector; a vector whose list names several counts on each of them)
        self.irq_count: dict[int, int] = {}
        for entry in layout.get("irq_affinity") or []:
            for cpu in set(entry.get("cpus") or []):
                self.irq_count[int(cpu)] = self.irq_count.get(int(cpu), 0) + 1
        self.ranks: list[int] = []
        self.rank_of: dict[int, int] = {}
        for rank in layout.get("ranks") or []:
            self.ranks.append(int(rank["rank"]))
            for cpu in rank.get("cpus") or []:
                self.rank_of.setdefault(int(cpu), int(rank["rank"]))
        node_of_cpu = {cpu: int(n["id"]) for n in topology.get("numa_nodes") or [] for cpu in n.get("cpus") or []}
        for cpu_id, cpu in cpus.items():
            if cpu.get("numa_node") is not None:
                node_of_cpu[cpu_id] = int(cpu["numa_node"])
        package_of_node = {int(n["node"]): n.get("package") for n in layout.get("numa") or []}
        self.nodes: dict[int, _NumaView] = {}
        for entry in layout.get("numa") or []:
            node_id = int(entry["node"])
            self.nodes[node_id] = _NumaView(node_id, entry.get("package"), memory_only=bool(entry.get("memory_only")))
        for numa in topology.get("numa_nodes") or []:
            node_id = int(numa["id"])
            if node_id not in self.nodes:
                self.nodes[node_id] = _NumaView(node_id, package_of_node.get(node_id),
                                                memory_only=not numa.get("has_cpus"))
        for threads in smt_sibling_groups(dict(topology)):
            node = next((node_of_cpu[t] for t in threads if t in node_of_cpu), None)
            package = next((cpus[t].get("package") for t in threads if t in cpus and cpus[t].get("package")
                            is not None), None)
            if package is None and node is not None:
                package = package_of_node.get(node)
            core = _Core(sorted(threads), node, package)
            if node is None:
                node = -1
            view = self.nodes.setdefault(node, _NumaView(node, package))
            if view.package is None:
                view.package = package
            view.cores.append(core)
        for view in self.nodes.values():
            view.cores.sort(key=lambda c: c.threads[0])
            if view.cores:
                view.memory_only = False
        self._place_devices()

    # ------------------------------------------------------------------------------------ devices
    def rank_colour(self, rank: int) -> str:
        return RANK_COLOURS[rank % len(RANK_COLOURS)]

    def _place_devices(self) -> None:
        ranks_of_gpu: dict[str, list[Mapping[str, Any]]] = {}
        for rank in self.layout.get("ranks") or []:
            ranks_of_gpu.setdefault(str(rank.get("gpu")), []).append(rank)
        for gpu in self.topology.get("gpus") or []:
            bdf = str(gpu.get("bdf"))
            ranks = ranks_of_gpu.get(bdf, [])
            node = gpu.get("numa_node")
            if node is None or int(node) < 0:
                node = ranks[0].get("numa_node") if ranks else -1
            name = gpu.get("name") or gpu.get("device") or gpu.get("vendor") or "GPU"
            if ranks:
                numbers = ",".join(str(r["rank"]) for r in ranks)
                cpus = _cpus(c for r in ranks for c in r.get("cpus") or [])
                label = f"GPU {bdf} {name} · rank {numbers} · CPUs {cpus}"
                fill = self.rank_colour(int(ranks[0]["rank"]))
            else:
                label, fill = f"GPU {bdf} {name} · no rank", NO_RANK_GPU
            partitions = int(gpu.get("partitions") or 1)
            detail = label + (f" · {partitions} partitions" if partitions > 1 else "")
            self._view(int(node)).devices.append(_Device("gpu", label, detail, fill, bdf))
        irq_cpus: dict[str, set[int]] = {}
        vectors: dict[str, int] = {}
        for entry in self.layout.get("irq_affinity") or []:
            device = str(entry.get("device"))
            irq_cpus.setdefault(device, set()).update(int(c) for c in entry.get("cpus") or [])
            vectors[device] = vectors.get(device, 0) + 1
        for nic in self.topology.get("nics") or []:
            bdf = nic.get("bdf")
            if not bdf:
                continue  # virtual interfaces (bonds, bridges) have no place on a NUMA node
            node = nic.get("numa_node")
            name = str(nic.get("name"))
            hca = f" ({nic['ib_device']})" if nic.get("ib_device") else ""
            kind = "IB" if nic.get("type") == "infiniband" else "Ethernet"
            pinned = irq_cpus.get(str(bdf))
            irqs = (f" · {vectors[str(bdf)]} IRQs → CPUs {_cpus(pinned)}" if pinned else " · IRQs not pinned")
            label = f"NIC {name}{hca} {kind}{irqs}"
            self._view(-1 if node is None or int(node) < 0 else int(node)).devices.append(
                _Device("nic", label, f"{label} · {bdf}", "#fff4dc" if pinned else "#f2f2f2", name))

    def _view(self, node: int) -> _NumaView:
        if node not in self.nodes:
            self.nodes[node] = _NumaView(node, None, memory_only=True)
        return self.nodes[node]

    # ------------------------------------------------------------------------------------ roles
    def role(self, cpu: int) -> tuple[str, str, str]:
        """(fill colour, role, role words) of one CPU: offline wins, then housekeeping, a rank, spare. NIC IRQs are
        not a role: they are drawn as a marker over the fill (irq_words)."""
        if cpu in self.offline:
            return OFFLINE, "offline", "offline SMT sibling" if cpu in self.smt_offline else "offline"
        if cpu in self.housekeeping:
            return HOUSEKEEPING, "housekeeping", "housekeeping"
        if cpu in self.rank_of:
            rank = self.rank_of[cpu]
            return self.rank_colour(rank), "rank", f"rank {rank}"
        return SPARE, "spare", "spare"

    def irq_words(self, cpu: int) -> str:
        count = self.irq_count.get(cpu, 0)
        return f", {count} NIC IRQ vector{'' if count == 1 else 's'} pinned here" if count else ""

    def sockets(self) -> list[tuple[int | None, list[_NumaView]]]:
        by_package: dict[int | None, list[_NumaView]] = {}
        for view in sorted(self.nodes.values(), key=lambda v: v.node):
            if view.node == -1 and not view.cores and not view.devices:
                continue
            by_package.setdefault(view.package, []).append(view)
        return sorted(by_package.items(), key=lambda kv: (kv[0] is None, kv[0] if kv[0] is not None else 0))

    def summary(self) -> str:
        cpus = self.topology.get("cpus") or []
        packages = {c.get("package") for c in cpus if c.get("package") is not None}
        gpus = self.topology.get("gpus") or []
        nics = [n for n in self.topology.get("nics") or [] if n.get("bdf")]
        cores = sum(len(v.cores) for v in self.nodes.values())
        planned = len(self.smt_offline & self.online)
        return (f"{len(packages)} sockets, {cores} cores, {len(self.online)}/{len(cpus)} CPUs online"
                + (f" ({planned} SMT siblings to go offline)" if planned else "") + ", "
                f"{len([n for n in self.nodes.values() if n.node >= 0])} NUMA nodes, {len(gpus)} GPUs, "
                f"{len(self.layout.get('ranks') or [])} ranks, {len(nics)} NICs, "
                f"{len(self.irq_cpus)} NIC IRQ cores")


# --------------------------------------------------------------------------------------------- node SVG
def _columns(cores: int) -> int:
    if cores <= 16:
        return 8
    if cores <= 48:
        return 12
    return 16


@dataclass
class _Box:
    """One NUMA node's drawing: its width, its own height (before a row evens them out) and its chips' lines."""

    view: _NumaView
    width: int
    height: int
    chips: list[tuple[_Device, list[str]]]


def _numa_box(view: _NumaView) -> _Box:
    columns = _columns(len(view.cores))
    rows = -(-len(view.cores) // columns) if view.cores else 0
    width = max(MIN_NODE_WIDTH, columns * CELL + 2 * PAD)
    chips = [(d, wrap(d.label, width - 2 * PAD - 2 * CHIP_PAD)) for d in view.devices]
    height = (HEADER + rows * CELL + (PAD if rows else 0)
              + sum(len(lines) * LINE + 6 + 4 for _, lines in chips) + PAD)
    return _Box(view, width, max(height, HEADER + 2 * PAD), chips)


def _rows(widths: Sequence[int], limit: int, gap: int) -> list[list[int]]:
    """Indexes of ``widths`` in rows no wider than ``limit`` (an item wider than it gets a row of its own)."""
    rows: list[list[int]] = []
    current: list[int] = []
    used = 0
    for index, width in enumerate(widths):
        if current and used + gap + width > limit:
            rows.append(current)
            current, used = [], 0
        used += (gap if current else 0) + width
        current.append(index)
    if current:
        rows.append(current)
    return rows


def _irq_marker(cpu: int, count: int, x: float, y: float, width: float) -> str:
    """A count on an orange tab at the foot of a CPU, over its fill, so the rank colour stays visible above it."""
    digits = str(count)
    size = min(8.0, (width - 3) / (0.70 * len(digits)))  # bold digits of DejaVu Sans are 0.70 em wide
    top = y + CELL - 2 - MARKER_H
    return (f'<g class="irq" data-cpu="{cpu}" data-irqs="{count}" pointer-events="none">'
            f'<rect x="{x + 1:.1f}" y="{top}" width="{width - 2:.1f}" height="{MARKER_H}" rx="3" fill="{IRQ}" '
            f'stroke="{INK}" stroke-width="0.6"/>'
            f'<text x="{x + width / 2:.1f}" y="{top + MARKER_H / 2 + size * 0.36:.1f}" font-size="{size:.1f}" '
            f'font-weight="bold" text-anchor="middle" fill="{INK}" style="{FONT}">{digits}</text></g>')


def _numa_svg(model: NodeModel, box: _Box, x: int, y: int, height: int) -> list[str]:
    view, width = box.view, box.width
    threads_per_core = max((len(c.threads) for c in view.cores), default=1)
    title = f"NUMA node {view.node}" if view.node >= 0 else "NUMA node unknown"
    if view.cores:
        title += f" · {len(view.cores)} cores"
    elif view.memory_only:
        title += " · memory only"
    background = MEMORY_ONLY if view.memory_only else "#fbfcfe"
    out = [f'<g class="numa" data-node="{view.node}">',
           f'<rect x="{x}" y="{y}" width="{width}" height="{height}" rx="6" fill="{background}" stroke="#8a96a8"/>',
           f'<text x="{x + PAD}" y="{y + 15}" font-size="12" font-weight="bold" style="{FONT}">{_esc(title)}</text>']
    columns = _columns(len(view.cores))
    markers = []
    for index, core in enumerate(view.cores):
        cx = x + PAD + (index % columns) * CELL
        cy = y + HEADER + (index // columns) * CELL
        share = (CELL - 2) / threads_per_core
        for slot, cpu in enumerate(core.threads):
            fill, role, words = model.role(cpu)
            offline = role == "offline"
            left = cx + 1 + slot * share
            box_attrs = f'x="{left:.1f}" y="{cy + 1}" width="{share:.1f}" height="{CELL - 2}"'
            rank = f' data-rank="{model.rank_of[cpu]}"' if role == "rank" else ""
            out.append(f'<rect class="cpu{" offline" if offline else ""}" data-cpu="{cpu}" data-role="{role}"{rank} '
                       f'{box_attrs} fill="{fill}" stroke="#56606e" stroke-width="0.5">'
                       f'<title>{_esc(f"cpu{cpu}: {words}{model.irq_words(cpu)} (NUMA node {view.node})")}</title>'
                       f'</rect>')
            if offline:
                out.append(f'<rect {box_attrs} fill="url(#hatch)" pointer-events="none"/>')
            if model.irq_count.get(cpu):
                markers.append(_irq_marker(cpu, model.irq_count[cpu], left, cy, share))
    out.extend(markers)
    dy = y + HEADER + (-(-len(view.cores) // columns) * CELL + PAD if view.cores else 0)
    for device, lines in box.chips:
        chip_h = len(lines) * LINE + 6
        ink = text_colour(device.fill)
        texts = "".join(f'<text class="line" x="{x + PAD + CHIP_PAD}" y="{dy + 14 + i * LINE}" font-size="11" '
                        f'fill="{ink}" style="{FONT}">{_esc(line)}</text>' for i, line in enumerate(lines))
        stroke = IRQ if device.kind == "nic" and device.fill == "#fff4dc" else "#56606e"
        out.append(f'<g class="device {device.kind}" data-kind="{device.kind}" data-id="{_esc(device.ident)}">'
                   f'<rect x="{x + PAD}" y="{dy}" width="{width - 2 * PAD}" height="{chip_h}" rx="4" '
                   f'fill="{device.fill}" stroke="{stroke}" stroke-width="0.8"/>{texts}'
                   f'<title>{_esc(device.detail)}</title></g>')
        dy += chip_h + 4
    out.append("</g>")
    return out


def _legend(model: NodeModel, y: int) -> tuple[list[str], int, int]:
    """The legend's rows from ``y``: fills (housekeeping, one swatch per rank, spare, offline) and the IRQ marker;
    returns (SVG parts, width, height)."""
    items: list[tuple[int, str]] = []  # (width, SVG at x=0, y=0)

    def swatch(key: str, words: str, fill: str, extra: str = "") -> None:
        items.append((19 + int(_text_px(words, 11)) + 14,
                      f'<g class="legend-item" data-legend="{key}"><rect width="14" height="14" fill="{fill}" '
                      f'stroke="#56606e"/>{extra}<text x="19" y="11" font-size="11" style="{FONT}">{_esc(words)}'
                      f'</text></g>'))

    swatch("housekeeping", "housekeeping", HOUSEKEEPING)
    ranks = sorted(set(model.ranks))[:len(RANK_COLOURS)]
    if ranks:
        words = "GPU rank cores:" if len(set(model.ranks)) <= len(RANK_COLOURS) else \
            f"GPU rank cores (colours repeat every {len(RANK_COLOURS)} ranks):"
        parts, rx = [f'<text y="11" font-size="11" style="{FONT}">{_esc(words)}</text>'], int(_text_px(words, 11)) + 6
        for rank in ranks:
            fill = model.rank_colour(rank)
            w = max(18, int(_text_px(str(rank), 10)) + 6)
            parts.append(f'<g data-rank="{rank}"><rect x="{rx}" width="{w}" height="14" rx="2" fill="{fill}" '
                         f'stroke="#56606e"/><text x="{rx + w / 2:.1f}" y="11" font-size="10" text-anchor="middle" '
                         f'fill="{text_colour(fill)}" style="{FONT}">{rank}</text></g>')
            rx += w + 2
        items.append((rx + 12, f'<g class="legend-item" data-legend="rank">{"".join(parts)}</g>'))
    swatch("spare", "spare", SPARE)
    swatch("offline", "SMT sibling offline (or to go offline)", OFFLINE,
           '<rect width="14" height="14" fill="url(#hatch)"/>')
    marker = "NIC IRQ vectors pinned to the CPU (how many), over its fill"
    items.append((26 + int(_text_px(marker, 11)) + 14,
                  f'<g class="legend-item" data-legend="irq"><rect y="2" width="20" height="{MARKER_H}" rx="3" '
                  f'fill="{IRQ}" stroke="{INK}" stroke-width="0.6"/><text x="10" y="10.5" font-size="8" '
                  f'font-weight="bold" text-anchor="middle" fill="{INK}" style="{FONT}">3</text>'
                  f'<text x="26" y="11" font-size="11" style="{FONT}">{_esc(marker)}</text></g>'))
    parts_out = ['<g class="legend">']
    width = 0
    rows = _rows([w for w, _ in items], MAX_ROW_WIDTH, 0)
    for row_index, row in enumerate(rows):
        lx = 8
        for index in row:
            parts_out.append(f'<g transform="translate({lx} {y + row_index * 20})">{items[index][1]}</g>')
            lx += items[index][0]
        width = max(width, lx)
    parts_out.append("</g>")
    return parts_out, width, len(rows) * 20


def node_svg(topology: Mapping[str, Any], layout: Mapping[str, Any], host: str = "node") -> str:
    """The node's layout as one SVG element (no XML declaration: it is meant to sit inside HTML). NUMA nodes and
    sockets sit side by side up to MAX_ROW_WIDTH, then wrap; the page scales the SVG down to narrower windows."""
    model = NodeModel(topology, layout, host)
    parts, width, legend_h = _legend(model, 8)
    y = 8 + legend_h + 6
    sockets = []
    for package, views in model.sockets():
        boxes = [_numa_box(v) for v in views]
        rows = _rows([b.width for b in boxes], MAX_ROW_WIDTH - 2 * PAD, PAD)
        heights = [max(boxes[i].height for i in row) for row in rows]
        socket_w = max(sum(boxes[i].width for i in row) + PAD * (len(row) - 1) for row in rows) + 2 * PAD
        socket_h = HEADER + sum(h + PAD for h in heights)
        sockets.append((package, boxes, rows, heights, socket_w, socket_h))
    for page_row in _rows([s[4] for s in sockets], MAX_ROW_WIDTH, 12):
        sx = 8
        for package, boxes, rows, heights, socket_w, socket_h in (sockets[i] for i in page_row):
            label = f"Socket {package}" if package is not None else "Unplaced (no socket known)"
            parts.append(f'<g class="socket" data-package="{_esc(package)}">'
                         f'<rect x="{sx}" y="{y}" width="{socket_w}" height="{socket_h}" rx="8" '
                         f'fill="#eef2f7" stroke="#4a5566"/>'
                         f'<text x="{sx + PAD}" y="{y + 16}" font-size="13" font-weight="bold" style="{FONT}">'
                         f'{_esc(label)}</text>')
            ny = y + HEADER
            for row, row_h in zip(rows, heights, strict=True):
                nx = sx + PAD
                for index in row:
                    parts.extend(_numa_svg(model, boxes[index], nx, ny, row_h))
                    nx += boxes[index].width + PAD
                ny += row_h + PAD
            parts.append("</g>")
            width = max(width, sx + socket_w + 8)
            sx += socket_w + 12
        y += max(sockets[i][5] for i in page_row) + 12
    defs = ('<defs><pattern id="hatch" width="5" height="5" patternUnits="userSpaceOnUse" '
            'patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="5" stroke="#8c8c8c" stroke-width="1.4"/>'
            '</pattern></defs>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="node-layout" data-host="{_esc(host)}" '
            f'width="{width}" height="{y}" viewBox="0 0 {width} {y}" role="img" '
            f'aria-label="{_esc(f"layout of {host}")}">{defs}{"".join(parts)}</svg>')


def node_tables(topology: Mapping[str, Any], layout: Mapping[str, Any]) -> str:
    """The picture's facts as tables: ranks with their GPU, CPUs and NICs; NICs with their IRQ CPUs."""
    rows = []
    for rank in layout.get("ranks") or []:
        nics = ", ".join(list(rank.get("netdevs") or []) + list(rank.get("hcas") or [])) or "-"
        rows.append(f'<tr><td>{_esc(rank["rank"])}</td><td class="gpu">{_esc(rank.get("gpu"))}</td>'
                    f'<td>{_esc(rank.get("name") or "")}</td><td>{_esc(rank.get("numa_node"))}</td>'
                    f'<td>{_esc(_cpus(rank.get("cpus") or []))}</td><td>{_esc(nics)}</td></tr>')
    ranks = ('<table class="ranks"><tr><th>rank</th><th>GPU</th><th>model</th><th>NUMA node</th><th>CPUs</th>'
             '<th>nearest NICs</th></tr>' + "".join(rows) + "</table>") if rows else "<p>No GPU ranks.</p>"
    pinned: dict[str, set[int]] = {}
    for entry in layout.get("irq_affinity") or []:
        pinned.setdefault(str(entry.get("device")), set()).update(entry.get("cpus") or [])
    nic_rows = []
    for nic in topology.get("nics") or []:
        if not nic.get("bdf"):
            continue
        cpus = pinned.get(str(nic["bdf"]))
        nic_rows.append(f'<tr><td class="nic">{_esc(nic["name"])}</td><td>{_esc(nic.get("ib_device") or "-")}</td>'
                        f'<td>{_esc(nic["bdf"])}</td><td>{_esc(nic.get("numa_node"))}</td>'
                        f'<td>{_esc(_cpus(cpus) if cpus else "not pinned")}</td></tr>')
    nics = ('<table class="nics"><tr><th>NIC</th><th>HCA</th><th>PCI</th><th>NUMA node</th><th>IRQ CPUs</th></tr>'
            + "".join(nic_rows) + "</table>") if nic_rows else "<p>No physical NICs.</p>"
    return ranks + nics


def node_section(topology: Mapping[str, Any], layout: Mapping[str, Any], host: str = "node") -> str:
    model = NodeModel(topology, layout, host)
    return (f'<section class="node" id="node-{_esc(host)}"><h2>{_esc(host)}</h2>'
            f'<p class="summary">{_esc(model.summary())}</p>'
            f"{node_svg(topology, layout, host)}{node_tables(topology, layout)}</section>")


def page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title>'
            f"<style>{CSS}</style></head><body><h1>{_esc(title)}</h1>{body}</body></html>\n")


def node_page(topology: Mapping[str, Any], layout: Mapping[str, Any], host: str = "node") -> str:
    """A complete HTML page with one node's picture and tables."""
    return page(f"nodetune layout: {host}", node_section(topology, layout, host))


# --------------------------------------------------------------------------------------------- fleet drift
#: the heat map (a row per node) is drawn up to this many nodes; a larger fleet gets the tables only
MAP_MAX_NODES = 60


@dataclass(frozen=True)
class NodeDrift:
    """One node's verify outcome, as the drift page needs it (built from nodetune.api's NodeResult): its findings,
    or only their ``groups`` (module_utils/plan/finding.py ``group_findings``), which is all the page shows."""

    host: str
    status: str
    findings: Sequence[Mapping[str, Any]] = ()
    message: str | None = None
    groups: Sequence[Mapping[str, Any]] | None = None

    def drift_groups(self) -> list[Mapping[str, Any]]:
        from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import group_findings

        groups = self.groups if self.groups is not None else group_findings([dict(f) for f in self.findings])
        return [g for g in groups if g.get("status") == "drift"]


def drift_records(result: Any) -> list[NodeDrift]:
    """NodeDrift records from a ``nodetune.verify()`` RunResult: each node's findings grouped per check id (the
    per-value findings are not kept: a fleet's would not fit)."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import group_findings

    out = []
    for node in result.nodes.values():
        findings = [{"id": f.id, "target": f.target, "status": f.status, "expected": f.expected,
                     "actual": f.actual, "severity": f.severity, "remedy": f.remedy} for f in node.findings]
        out.append(NodeDrift(node.host, node.status, (), node.message, group_findings(findings)))
    return out


#: the heat map's shades: (fewest targets drifting, fill, legend words); a cell takes the last whose count it reaches
DRIFT_SHADES = ((0, "#d9f0d3", "none drifting"), (1, "#fdb863", "1-3 targets"), (4, "#e66101", "4 or more"))
FAILED_SHADE = "#f4c7c3"


def drift_shade(count: int) -> str:
    return [fill for least, fill, _ in DRIFT_SHADES if count >= least][-1]


def _short_count(count: int) -> str:
    return str(count) if count < 10_000 else f"{count // 1000}k"


def drift_svg(nodes: Sequence[NodeDrift]) -> str:
    """A heat map: one row per node, one column per drifting id, the cell shade by how many targets drift (the
    count written in it), and a legend of the shades below."""
    drifting = {node.host: {str(g["id"]): int(g["counts"]["drift"]) for g in node.drift_groups()} for node in nodes}
    ids = sorted({check for counts in drifting.values() for check in counts})
    cell_w, cell_h = 34, 20
    label_w = int(max([_text_px(n.host, 12) for n in nodes] + [60])) + 16  # long host names stay inside
    slant = int(max((_text_px(i, 11) for i in ids), default=0) * 0.71)  # ids written at 45 degrees
    head_h = slant + 14
    band = max(len(ids) * cell_w, 140)  # a failed node's row says so in words
    parts = []
    for col, finding_id in enumerate(ids):
        x = label_w + col * cell_w + cell_w / 2
        parts.append(f'<text x="{x:.0f}" y="{head_h - 6}" font-size="11" transform="rotate(-45 {x:.0f} {head_h - 6})" '
                     f'style="{FONT}">{_esc(finding_id)}</text>')
    for row, node in enumerate(nodes):
        y = head_h + row * cell_h
        parts.append(f'<text x="{label_w - 8}" y="{y + 14}" font-size="12" text-anchor="end" style="{FONT}" '
                     f'class="host">{_esc(node.host)}</text>')
        if node.status in ("failed", "unreachable"):
            parts.append(f'<rect x="{label_w}" y="{y + 1}" width="{band}" height="{cell_h - 2}" '
                         f'fill="{FAILED_SHADE}"><title>{_esc(f"{node.host}: {node.status}: {node.message}")}</title>'
                         f'</rect><text x="{label_w + 4}" y="{y + 14}" font-size="11" style="{FONT}">'
                         f'{_esc(node.status)}</text>')
            continue
        counts = drifting[node.host]
        for col, finding_id in enumerate(ids):
            count = counts.get(finding_id, 0)
            x = label_w + col * cell_w
            parts.append(f'<rect class="cell" x="{x + 1}" y="{y + 1}" width="{cell_w - 2}" height="{cell_h - 2}" '
                         f'fill="{drift_shade(count)}" data-id="{_esc(finding_id)}" data-count="{count}">'
                         f'<title>{_esc(f"{node.host} {finding_id}: {count} drifting")}</title></rect>')
            if count:
                parts.append(f'<text x="{x + cell_w / 2:.0f}" y="{y + 14}" font-size="10" text-anchor="middle" '
                             f'fill="{text_colour(drift_shade(count))}" pointer-events="none" style="{FONT}">'
                             f'{_short_count(count)}</text>')
    ly = head_h + len(nodes) * cell_h + 10
    legend = [f'<g class="drift-legend"><text x="8" y="{ly + 11}" font-size="11" style="{FONT}">'
              f'targets drifting per node and check:</text>']
    lx = 8 + int(_text_px("targets drifting per node and check:", 11)) + 8
    shades = [(str(least), fill, words) for least, fill, words in DRIFT_SHADES] + [
        ("failed", FAILED_SHADE, "node failed or unreachable")]
    for key, fill, words in shades:
        legend.append(f'<g class="legend-item" data-legend="{key}"><rect x="{lx}" y="{ly}" width="14" height="14" '
                      f'fill="{fill}" stroke="#56606e"/><text x="{lx + 19}" y="{ly + 11}" font-size="11" '
                      f'style="{FONT}">{_esc(words)}</text></g>')
        lx += 19 + int(_text_px(words, 11)) + 14
    legend.append("</g>")
    parts.extend(legend)
    width = max(label_w + max(len(ids) * cell_w + slant, band) + 20, lx + 8)
    height = ly + 14 + 8
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="drift-map" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="drift per node and check">{"".join(parts)}</svg>')


def _drift_list(groups: Sequence[Mapping[str, Any]]) -> str:
    """A node's drifting checks as a short list: each check id with its number of drifting targets; the targets
    and values fold out (a <details> element: no script)."""
    items = []
    for g in groups:
        count = int(g["counts"]["drift"])
        values = f'{g["drift_targets"]}: {g["actual"]}, expected {g["expected"]}'
        items.append(f'<li data-id="{_esc(g["id"])}" data-count="{count}"><details><summary><code>{_esc(g["id"])}'
                     f'</code> <span class="count" title="targets drifting">{count}</span></summary>'
                     f'<div class="values">{_esc(values)}</div></details></li>')
    return f'<ul class="drift-list">{"".join(items)}</ul>'


def drift_section(nodes: Sequence[NodeDrift]) -> str:
    """Counts per check id (nodes and targets drifting), then the drifted nodes (each a short list of its drifting
    ids with their target counts, the targets and values folded) and the failed ones; the heat map for fleets up to
    MAP_MAX_NODES nodes."""
    clean = failed = pending = 0
    by_id: dict[str, list[int]] = {}
    node_rows = []
    for node in nodes:
        if node.status in ("failed", "unreachable"):
            failed += 1
            node_rows.append(f'<tr><td>{_esc(node.host)}</td><td class="failed">{_esc(node.status)}</td>'
                             f'<td>{_esc(node.message or "")}</td></tr>')
            continue
        groups = node.drift_groups()
        if not groups:
            if node.status == "pending":  # configured, not yet booted: neither clean nor drift (docs/verify.md)
                pending += 1
                node_rows.append(f'<tr><td>{_esc(node.host)}</td><td class="pending">pending</td>'
                                 f'<td>{_esc(node.message or "waits for a reboot")}</td></tr>')
            else:
                clean += 1
            continue
        for group in groups:
            entry = by_id.setdefault(str(group["id"]), [0, 0])
            entry[0] += 1
            entry[1] += int(group["counts"]["drift"])
        node_rows.append(f'<tr><td>{_esc(node.host)}</td><td class="drift">drift</td>'
                         f'<td>{_drift_list(groups)}</td></tr>')
    drifted = len(nodes) - clean - failed - pending
    id_rows = "".join(f'<tr><td class="drift">{_esc(check)}</td><td>{n}</td><td>{t}</td></tr>'
                      for check, (n, t) in sorted(by_id.items(), key=lambda item: (-item[1][0], item[0])))
    per_id = ('<table class="drift-ids"><tr><th>id</th><th>nodes drifting</th><th>targets drifting</th></tr>'
              + id_rows + "</table>") if id_rows else "<p>No drift on any node.</p>"
    details = ('<table class="drift"><tr><th>node</th><th>status</th><th>drifting checks: id, targets drifting '
               '(open one for its targets and values)</th></tr>' + "".join(node_rows) + "</table>"
               ) if node_rows else ""
    heat = drift_svg(nodes) if len(nodes) <= MAP_MAX_NODES else ""
    return (f'<section class="fleet-drift" id="drift"><h2>Fleet drift</h2>'
            f'<p class="summary"><span class="ok">{clean} clean</span>, <span class="drift">{drifted} '
            f'drifted</span>, ' + (f'<span class="pending">{pending} pending</span>, ' if pending else '')
            + f'<span class="failed">{failed} failed</span> of {len(nodes)} nodes</p>'
            f"{heat}{per_id}{details}</section>")


def outlier_records(result: Any, groups: Mapping[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """The fleet's outliers (module_utils/audit/outliers.py) from a ``nodetune.verify()`` RunResult's node reports;
    without ``groups`` (host -> group names) the whole fleet is one peer group."""
    reports = {node.host: {"report": node.report} for node in result.nodes.values() if node.report}
    return outliers_mod.fleet_outliers(reports, dict(groups or {}))


def outliers_section(outliers: Sequence[Mapping[str, Any]]) -> str:
    """A table of the nodes that differ from their group's majority."""
    rows = "".join(f'<tr><td>{_esc(o["node"])}</td><td class="drift">{_esc(o["key"])}</td><td>{_esc(o["value"])}</td>'
                   f'<td>{_esc(o["majority"])}</td><td>{_esc(o["group"])} ({o["majority_nodes"]} of '
                   f'{o["group_nodes"]})</td></tr>' for o in outliers)
    body = ('<table class="drift"><tr><th>node</th><th>differs in</th><th>node has</th><th>majority has</th>'
            '<th>group</th></tr>' + rows + "</table>") if rows else "<p>No node differs from its group's majority.</p>"
    return f'<section class="fleet-outliers" id="outliers"><h2>Fleet outliers</h2>{body}</section>'


def fleet_page(layouts: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]],
               drift: Sequence[NodeDrift] | None = None, failures: Sequence[tuple[str, str]] = (),
               title: str = "nodetune fleet layout", outliers: Sequence[Mapping[str, Any]] | None = None) -> str:
    """The drift section (when given), then one picture per distinct layout, naming the nodes that share it
    (a fleet of identical nodes is one drawing, not thousands); ``layouts`` holds (host, topology, layout)."""
    import json

    shapes: dict[str, tuple[Mapping[str, Any], Mapping[str, Any], list[str]]] = {}
    keys: dict[tuple[int, int], str] = {}  # the same objects (hosts of one plan) are keyed once
    for host, topology, layout in layouts:
        key = keys.get((id(topology), id(layout)))
        if key is None:
            key = keys[(id(topology), id(layout))] = json.dumps([layout, _shape(topology)], sort_keys=True,
                                                                default=str)
        shapes.setdefault(key, (topology, layout, []))[2].append(host)
    links = "".join(f'<a href="#node-{_esc(hosts[0])}">{_esc(hosts[0])}'
                    + (f" (+{len(hosts) - 1})" if len(hosts) > 1 else "") + "</a>"
                    for _t, _l, hosts in shapes.values())
    body = f"<nav>{links}</nav>" if links else ""
    if drift is not None:
        body += drift_section(drift)
    if outliers is not None:
        body += outliers_section(outliers)
    for host, message in failures:
        body += f'<section class="node"><h2>{_esc(host)}</h2><p class="failed">{_esc(message)}</p></section>'
    for topology, layout, hosts in shapes.values():
        section = node_section(topology, layout, hosts[0])
        if len(hosts) > 1:
            shared = f'<p class="shared">The same layout on {len(hosts)} nodes: {_esc(", ".join(hosts))}</p>'
            section = section.replace("</h2>", "</h2>" + shared, 1)
        body += section
    return page(title, body)


def _shape(topology: Mapping[str, Any]) -> list[Any]:
    """What the drawing shows of a topology beyond its layout: CPUs and devices with their places."""
    return [[(c.get("id"), c.get("online"), c.get("numa_node"), c.get("package")) for c in topology.get("cpus") or []],
            [(g.get("bdf"), g.get("numa_node")) for g in topology.get("gpus") or []],
            [(n.get("name"), n.get("bdf"), n.get("numa_node")) for n in topology.get("nics") or []]]
