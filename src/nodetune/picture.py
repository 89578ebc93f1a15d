"""A picture of a node's layout, and a fleet drift page: SVG inside plain HTML, rendered as strings.

Why pure string rendering: the page must open anywhere (a browser, an AWX artifact, a CI attachment) with no
JavaScript, fonts or network, and the tests read it back as a DOM. Every label is also a table row below the
picture, so the page reads without the drawing (and screen readers get it too).

The node picture shows, per socket and NUMA node, every physical core with its threads: housekeeping cores, the
cores that take NIC completion IRQs, each GPU rank's cores (one colour per rank), spare cores, and SMT siblings
that are (or will be) offline, greyed out and hatched. The GPUs and NICs sit on their NUMA node, each GPU in its
rank's colour with its rank numbers and CPUs, each NIC with its HCA and the CPUs its IRQs are pinned to.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.nodetune.instinct.plugins.module_utils import outliers as outliers_mod
from ansible_collections.nodetune.instinct.plugins.module_utils.layout import smt_sibling_groups
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import format_cpulist

# Okabe-Ito-like, without the orange of the NIC IRQ cores.
# Neighbouring ranks share a NUMA node, so consecutive colours differ most.
RANK_COLOURS = ("#0072B2", "#009E73", "#CC79A7", "#7B3294", "#B2182B", "#35978F", "#8C510A", "#56B4E9",
                "#1B7837", "#C51B7D", "#2166AC", "#5AAE61", "#762A83", "#D6604D", "#4D9221", "#4393C3")
HOUSEKEEPING = "#6b7a8f"
IRQ = "#E69F00"
SPARE = "#ffffff"
OFFLINE = "#d4d4d4"
MEMORY_ONLY = "#f4f4f4"

CELL = 26          # one core (its threads side by side)
PAD = 10
HEADER = 22
DEVICE_ROW = 20
MIN_NODE_WIDTH = 310
MAX_ROW_WIDTH = 1360  # sockets side by side up to this width, else one below the other
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
svg { display: block; margin: 8px 0; }
nav a { margin-right: 12px; }
"""


# --------------------------------------------------------------------------------------------- model
@dataclass
class _Core:
    threads: list[int]
    node: int | None
    package: int | None


@dataclass
class _Device:
    kind: str          # "gpu" or "nic"
    label: str         # what the chip says
    detail: str        # the tooltip and the table row
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
        self.offline = (set(cpus) - self.online) | set(layout.get("smt_offline") or [])
        self.housekeeping = set(layout.get("housekeeping") or [])
        self.irq_cpus = set(layout.get("nic_irq_cpus") or [])
        self.rank_of: dict[int, int] = {}
        for rank in layout.get("ranks") or []:
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
                label, fill = f"GPU {bdf} {name} · no rank", "#9aa5b1"
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
    def role(self, cpu: int) -> tuple[str, str]:
        """(fill colour, role words) of one CPU; offline wins, then NIC IRQs, housekeeping, rank, spare."""
        if cpu in self.offline:
            return OFFLINE, "offline SMT sibling" if cpu in set(self.layout.get("smt_offline") or []) else "offline"
        if cpu in self.irq_cpus:
            return IRQ, "NIC IRQs"
        if cpu in self.housekeeping:
            return HOUSEKEEPING, "housekeeping"
        if cpu in self.rank_of:
            rank = self.rank_of[cpu]
            return self.rank_colour(rank), f"rank {rank}"
        return SPARE, "spare"

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
        planned = len(set(self.layout.get("smt_offline") or []) & self.online)
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


def _node_size(view: _NumaView) -> tuple[int, int]:
    columns = _columns(len(view.cores))
    rows = -(-len(view.cores) // columns) if view.cores else 0
    width = max(MIN_NODE_WIDTH, columns * CELL + 2 * PAD)
    height = HEADER + rows * CELL + (PAD if rows else 0) + len(view.devices) * (DEVICE_ROW + 4) + PAD
    return width, max(height, HEADER + 2 * PAD)


def _fit(text: str, width: int, char_px: float = 5.6) -> str:
    limit = max(8, int(width / char_px))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _numa_svg(model: NodeModel, view: _NumaView, x: int, y: int, width: int, height: int) -> list[str]:
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
    for index, core in enumerate(view.cores):
        cx = x + PAD + (index % columns) * CELL
        cy = y + HEADER + (index // columns) * CELL
        share = (CELL - 2) / threads_per_core
        for slot, cpu in enumerate(core.threads):
            fill, words = model.role(cpu)
            offline = cpu in model.offline
            box = f'x="{cx + 1 + slot * share:.1f}" y="{cy + 1}" width="{share:.1f}" height="{CELL - 2}"'
            out.append(f'<rect class="cpu{" offline" if offline else ""}" data-cpu="{cpu}" {box} fill="{fill}" '
                       f'stroke="#56606e" stroke-width="0.5">'
                       f'<title>{_esc(f"cpu{cpu}: {words} (NUMA node {view.node})")}</title></rect>')
            if offline:
                out.append(f'<rect {box} fill="url(#hatch)" pointer-events="none"/>')
    dy = y + HEADER + (-(-len(view.cores) // columns) * CELL + PAD if view.cores else 0)
    for device in view.devices:
        dark = device.kind == "gpu" and device.fill not in ("#9aa5b1",)
        text_fill = "#ffffff" if dark else "#1d2430"
        out.append(f'<g class="device {device.kind}" data-kind="{device.kind}" data-id="{_esc(device.ident)}">'
                   f'<rect x="{x + PAD}" y="{dy}" width="{width - 2 * PAD}" height="{DEVICE_ROW}" rx="4" '
                   f'fill="{device.fill}" stroke="#56606e" stroke-width="0.6"/>'
                   f'<text x="{x + PAD + 6}" y="{dy + 14}" font-size="11" fill="{text_fill}" style="{FONT}">'
                   f'{_esc(_fit(device.label, width - 2 * PAD - 12))}</text>'
                   f'<title>{_esc(device.detail)}</title></g>')
        dy += DEVICE_ROW + 4
    out.append("</g>")
    return out


LEGEND = (("housekeeping", HOUSEKEEPING), ("NIC IRQ cores", IRQ), ("GPU rank cores (one colour per rank)",
                                                                     RANK_COLOURS[0]),
          ("spare", SPARE), ("SMT sibling offline (or to go offline)", OFFLINE))


def node_svg(topology: Mapping[str, Any], layout: Mapping[str, Any], host: str = "node") -> str:
    """The node's layout as one SVG element (no XML declaration: it is meant to sit inside HTML)."""
    model = NodeModel(topology, layout, host)
    parts: list[str] = []
    y = 8
    lx = 8
    for words, colour in LEGEND:
        hatch = f'<rect x="{lx}" y="{y}" width="14" height="14" fill="url(#hatch)"/>' if colour == OFFLINE else ""
        parts.append(f'<rect x="{lx}" y="{y}" width="14" height="14" fill="{colour}" stroke="#56606e"/>{hatch}'
                     f'<text x="{lx + 19}" y="{y + 11}" font-size="11" style="{FONT}">{_esc(words)}</text>')
        lx += 26 + int(len(words) * 6.3)
    y += 26
    width = lx
    sockets = []
    for package, views in model.sockets():
        sizes = [_node_size(v) for v in views]
        inner_height = max(h for _, h in sizes)
        socket_width = sum(w for w, _ in sizes) + PAD * (len(sizes) + 1)
        sockets.append((package, views, sizes, inner_height, socket_width))
    side_by_side = sum(s[4] for s in sockets) + 12 * len(sockets) <= MAX_ROW_WIDTH
    sx = 8
    row_height = 0
    for package, views, sizes, inner_height, socket_width in sockets:
        label = f"Socket {package}" if package is not None else "Unplaced (no socket known)"
        parts.append(f'<g class="socket" data-package="{_esc(package)}">'
                     f'<rect x="{sx}" y="{y}" width="{socket_width}" height="{inner_height + HEADER + PAD}" rx="8" '
                     f'fill="#eef2f7" stroke="#4a5566"/>'
                     f'<text x="{sx + PAD}" y="{y + 16}" font-size="13" font-weight="bold" style="{FONT}">'
                     f'{_esc(label)}</text>')
        x = sx + PAD
        for view, (w, _h) in zip(views, sizes, strict=True):
            parts.extend(_numa_svg(model, view, x, y + HEADER, w, inner_height))
            x += w + PAD
        parts.append("</g>")
        width = max(width, sx + socket_width + 8)
        if side_by_side:
            sx += socket_width + 12
            row_height = max(row_height, inner_height + HEADER + PAD + 12)
        else:
            y += inner_height + HEADER + PAD + 12
    y += row_height
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
    or only their ``groups`` (module_utils/finding.py ``group_findings``), which is all the page shows."""

    host: str
    status: str
    findings: Sequence[Mapping[str, Any]] = ()
    message: str | None = None
    groups: Sequence[Mapping[str, Any]] | None = None

    def drift_groups(self) -> list[Mapping[str, Any]]:
        from ansible_collections.nodetune.instinct.plugins.module_utils.finding import group_findings

        groups = self.groups if self.groups is not None else group_findings([dict(f) for f in self.findings])
        return [g for g in groups if g.get("status") == "drift"]


def drift_records(result: Any) -> list[NodeDrift]:
    """NodeDrift records from a ``nodetune.verify()`` RunResult: each node's findings grouped per check id (the
    per-value findings are not kept: a fleet's would not fit)."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.finding import group_findings

    out = []
    for node in result.nodes.values():
        findings = [{"id": f.id, "target": f.target, "status": f.status, "expected": f.expected,
                     "actual": f.actual, "severity": f.severity, "remedy": f.remedy} for f in node.findings]
        out.append(NodeDrift(node.host, node.status, (), node.message, group_findings(findings)))
    return out


def drift_svg(nodes: Sequence[NodeDrift]) -> str:
    """A heat map: one row per node, one column per drifting id, the cell shade by how many targets drift."""
    drifting = {node.host: {str(g["id"]): int(g["counts"]["drift"]) for g in node.drift_groups()} for node in nodes}
    ids = sorted({check for counts in drifting.values() for check in counts})
    label_w, cell_w, cell_h = 160, 26, 20
    slant = int(max((len(i) for i in ids), default=0) * 6.2 * 0.71)  # ids written at 45 degrees
    head_h = slant + 14
    band = max(len(ids) * cell_w, 140)  # a failed node's row says so in words
    width = label_w + max(len(ids) * cell_w + slant, band) + 20
    height = head_h + len(nodes) * cell_h + 10
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
                         f'fill="#f4c7c3"><title>{_esc(f"{node.host}: {node.status}: {node.message}")}</title></rect>'
                         f'<text x="{label_w + 4}" y="{y + 14}" font-size="11" style="{FONT}">'
                         f'{_esc(node.status)}</text>')
            continue
        counts = drifting[node.host]
        for col, finding_id in enumerate(ids):
            count = counts.get(finding_id, 0)
            fill = "#d9f0d3" if count == 0 else ("#fdb863" if count < 4 else "#e66101")
            parts.append(f'<rect class="cell" x="{label_w + col * cell_w + 1}" y="{y + 1}" width="{cell_w - 2}" '
                         f'height="{cell_h - 2}" fill="{fill}" data-id="{_esc(finding_id)}" data-count="{count}">'
                         f'<title>{_esc(f"{node.host} {finding_id}: {count} drifting")}</title></rect>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="drift-map" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="drift per node and check">{"".join(parts)}</svg>')


def drift_section(nodes: Sequence[NodeDrift]) -> str:
    """Counts per check id (nodes and targets drifting), then the drifted nodes (each drifting id with its
    targets, compact) and the failed ones; the heat map for fleets up to MAP_MAX_NODES nodes."""
    clean = failed = 0
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
            clean += 1
            continue
        for group in groups:
            entry = by_id.setdefault(str(group["id"]), [0, 0])
            entry[0] += 1
            entry[1] += int(group["counts"]["drift"])
        what = "; ".join(f'{g["id"]} ({g["drift_targets"]}: {g["actual"]}, expected {g["expected"]})'
                         for g in groups)
        node_rows.append(f'<tr><td>{_esc(node.host)}</td><td class="drift">drift</td><td>{_esc(what)}</td></tr>')
    drifted = len(nodes) - clean - failed
    id_rows = "".join(f'<tr><td class="drift">{_esc(check)}</td><td>{n}</td><td>{t}</td></tr>'
                      for check, (n, t) in sorted(by_id.items(), key=lambda item: (-item[1][0], item[0])))
    per_id = ('<table class="drift-ids"><tr><th>id</th><th>nodes drifting</th><th>targets drifting</th></tr>'
              + id_rows + "</table>") if id_rows else "<p>No drift on any node.</p>"
    details = ('<table class="drift"><tr><th>node</th><th>status</th><th>drifting ids (targets)</th></tr>'
               + "".join(node_rows) + "</table>") if node_rows else ""
    heat = drift_svg(nodes) if len(nodes) <= MAP_MAX_NODES else ""
    return (f'<section class="fleet-drift" id="drift"><h2>Fleet drift</h2>'
            f'<p class="summary"><span class="ok">{clean} clean</span>, <span class="drift">{drifted} '
            f'drifted</span>, <span class="failed">{failed} failed</span> of {len(nodes)} nodes</p>'
            f"{heat}{per_id}{details}</section>")


def outlier_records(result: Any, groups: Mapping[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """The fleet's outliers (module_utils/outliers.py) from a ``nodetune.verify()`` RunResult's node reports;
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
