"""The layout picture: what it draws (read back as a DOM), and how it looks in a real headless browser.

The browser test renders a fleet page (drift section + the two full-size lab nodes' pictures) in Debian's chromium
at two window sizes. For each it dumps the DOM the browser built, with a small measuring script added to the test's
copy of the page (the page itself has no script): every text of the drawings must lie inside its SVG, every GPU/NIC
label inside its chip, every IRQ count inside its marker, and the page must not scroll sideways. It then takes a
screenshot, checks the PNG is a real picture of the window's size and prints its path. Where chromium is absent it
skips and says so (scripts/test.sh installs it: NODETUNE_TEST_DEB_PACKAGES in scripts/lib/setup.sh).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
import zlib
from collections import Counter
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import format_cpulist
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import plan
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from nodetune import picture
from nodetune.cli import main
from tests.support.specs import small_mi250_spec as small_spec
from tests.support.trees import scratch_dir

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "out" / "pictures"  # git-ignored: stays after the run, for a person to look at
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[Path, dict[str, Any], dict[str, Any]]]:
    scratch = scratch_dir()
    try:
        root = scratch / "pic-node"
        simnode.build(small_spec(), str(root))
        topology = discover(str(root))
        yield root, topology, plan(topology, {"smt": "offline_siblings"})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class Dom(HTMLParser):
    """The elements of a page: (tag, attributes) in order, plus all text, and each GPU/NIC chip's text lines."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        # (data-host of the drawing, data-id of the chip) -> the lines it draws, its width
        self.chip_lines: dict[tuple[str, str], list[str]] = {}
        self.chip_width: dict[tuple[str, str], float] = {}
        self._host = ""
        self._chip: tuple[str, str] | None = None
        self._in: str | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        self.elements.append((tag, attributes))
        if tag == "svg":
            self._host = attributes.get("data-host", "")
        elif tag == "g" and "data-kind" in attributes:
            self._chip = (self._host, attributes["data-id"])
        elif tag == "rect" and self._chip is not None:
            self.chip_width.setdefault(self._chip, float(attributes["width"]))
        self._in = tag if self._chip is not None and tag == "text" else None

    def handle_endtag(self, tag: str) -> None:
        if tag == "g":
            self._chip = None
        self._in = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._chip is not None and self._in == "text":
            self.chip_lines.setdefault(self._chip, []).append(data)

    def devices(self, kind: str) -> set[str]:
        return {a["data-id"] for tag, a in self.elements if tag == "g" and a.get("data-kind") == kind}

    def cpus(self, offline: bool) -> set[int]:
        return {int(a["data-cpu"]) for tag, a in self.elements
                if tag == "rect" and "data-cpu" in a and ("offline" in a.get("class", "").split()) == offline}

    def cpu_rects(self) -> dict[int, dict[str, str]]:
        return {int(a["data-cpu"]): a for tag, a in self.elements
                if tag == "rect" and "data-cpu" in a and "cpu" in a.get("class", "").split()}

    def irq_markers(self) -> dict[int, int]:
        """CPU -> the vector count its IRQ marker shows."""
        return {int(a["data-cpu"]): int(a["data-irqs"]) for tag, a in self.elements
                if tag == "g" and "irq" in a.get("class", "").split()}

    def irq_markers_by_host(self) -> dict[str, dict[int, int]]:
        """Per node drawing (its data-host), CPU -> the vector count its IRQ marker shows."""
        found: dict[str, dict[int, int]] = {}
        host = None
        for tag, a in self.elements:
            if tag == "svg":
                host = a.get("data-host")
                if host is not None:
                    found[host] = {}
            elif host is not None and tag == "g" and "irq" in a.get("class", "").split():
                found[host][int(a["data-cpu"])] = int(a["data-irqs"])
        return found

    def legend(self) -> dict[str, str]:
        """The legend items of the page (data-legend) -> the fill of the swatch each draws (the first of a page's
        drawings that shows the item)."""
        items: dict[str, str] = {}
        for index, (tag, a) in enumerate(self.elements):
            if tag == "g" and "legend-item" in a.get("class", "").split() and a["data-legend"] not in items:
                items[a["data-legend"]] = next(b.get("fill", "") for t, b in self.elements[index:] if t == "rect")
        return items


def squeeze(text: str) -> str:
    """A label without the spaces and separators where lines may break: wrapped lines and the one-line label
    compare equal when no character was lost."""
    return text.replace("·", "").replace(" ", "")


def drift_records() -> list[picture.NodeDrift]:
    finding = {"id": "nvme.scheduler", "target": "nvme0n1", "status": "drift", "expected": "none",
               "actual": "mq-deadline", "remedy": "run the nodetune apply"}
    return [picture.NodeDrift("node-a", "ok", [{**finding, "status": "ok", "actual": "none"}]),
            picture.NodeDrift("node-b", "drift", [finding, {**finding, "id": "cpu.governor", "target": "cpu3"}]),
            picture.NodeDrift("node-c", "unreachable", [], "ssh: connect to host node-c port 22: No route to host")]


def test_node_picture_draws_every_core_gpu_and_nic(node: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    _, topology, layout = node
    dom = Dom(picture.node_page(topology, layout, "pic-node"))
    assert dom.devices("gpu") == {g["bdf"] for g in topology["gpus"]}
    assert dom.devices("nic") == {n["name"] for n in topology["nics"] if n["bdf"]}
    assert dom.cpus(offline=True) == set(layout["smt_offline"])
    assert dom.cpus(offline=False) | dom.cpus(offline=True) == {c["id"] for c in topology["cpus"]}
    for rank in layout["ranks"]:  # each GPU chip names its rank and the rank's CPUs
        cpus = format_cpulist(rank["cpus"])
        assert f"rank{rank['rank']}CPUs{cpus}" in squeeze("".join(dom.chip_lines[("pic-node", rank["gpu"])]))
    # the NIC chip names the CPUs its completion IRQs are pinned to
    text = squeeze("".join(line for lines in dom.chip_lines.values() for line in lines))
    assert squeeze(f"IRQs → CPUs {picture._cpus(layout['nic_irq_cpus'])}") in text or len(topology["nics"]) > 1


def test_rank_cores_keep_their_colour_and_carry_an_irq_marker(node: tuple[Path, dict[str, Any], dict[str, Any]]
                                                               ) -> None:
    """The default plan spreads NIC vectors over rank cores too: such a core is drawn in its rank's colour (it used
    to be painted over in the IRQ orange, so no rank core showed) with a marker counting its vectors."""
    _, topology, layout = node
    rank_of = {cpu: r["rank"] for r in layout["ranks"] for cpu in r["cpus"]}
    assert set(rank_of) & set(layout["nic_irq_cpus"]), "the default plan puts NIC vectors on rank cores"
    dom = Dom(picture.node_page(topology, layout, "pic-node"))
    rects = dom.cpu_rects()
    for cpu, rank in rank_of.items():
        assert rects[cpu].get("data-rank") == str(rank), cpu
        assert rects[cpu]["fill"] == picture.RANK_COLOURS[rank % len(picture.RANK_COLOURS)], cpu
    for cpu in layout["housekeeping"]:
        assert rects[cpu]["fill"] == picture.HOUSEKEEPING
    vectors = Counter(cpu for entry in layout["irq_affinity"] for cpu in entry["cpus"])
    assert dom.irq_markers() == dict(vectors)
    assert set(dom.irq_markers()) == set(layout["nic_irq_cpus"])


@pytest.fixture(scope="module")
def lab_nodes() -> Iterator[list[tuple[str, dict[str, Any], dict[str, Any]]]]:
    """The two full-size lab nodes (inventories/lab/specs), planned with the lab's SMT opt-in."""
    from tests.support import fullsize

    scratch = fullsize.scratch_dir("nodetune-picture-nodes-")
    try:
        nodes = []
        for host, spec in (("mi250-01", "mi250.yml"), ("mi300x-01", "mi300x.yml")):
            simnode.build(simnode.load_spec(str(fullsize.LAB / "specs" / spec)), str(scratch / host))
            topology = discover(str(scratch / host))
            nodes.append((host, topology, plan(topology, {"smt": "offline_siblings"})))
        yield nodes
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def gpu_label(topology: dict[str, Any], layout: dict[str, Any], bdf: str) -> str:
    gpu = next(g for g in topology["gpus"] if g["bdf"] == bdf)
    ranks = [r for r in layout["ranks"] if r["gpu"] == bdf]
    cpus = format_cpulist(sorted(c for r in ranks for c in r["cpus"]))
    return f"GPU {bdf} {gpu['name']} · rank {','.join(str(r['rank']) for r in ranks)} · CPUs {cpus}"


def test_gpu_labels_of_the_lab_nodes_are_whole(lab_nodes: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> None:
    """MI250 chips used to end "rank 0 · CPUs 17…": every GPU's label is drawn whole, on as many lines as it needs,
    each line within the chip by the width estimate (the browser test measures them)."""
    for host, topology, layout in lab_nodes:
        page = picture.node_page(topology, layout, host)
        assert "…" not in page
        dom = Dom(page)
        for gpu in topology["gpus"]:
            lines = dom.chip_lines[(host, gpu["bdf"])]
            assert squeeze("".join(lines)) == squeeze(gpu_label(topology, layout, gpu["bdf"])), (host, lines)
            room = dom.chip_width[(host, gpu["bdf"])] - 2 * picture.CHIP_PAD
            assert all(picture._text_px(line, 11) <= room for line in lines), (host, lines)


def test_wrap_breaks_between_parts_and_cpu_ranges() -> None:
    cpus = format_cpulist(range(0, 256, 2))  # 128 single CPUs: far wider than a chip
    label = f"GPU 0000:26:00.0 MI250X/MI250 · rank 0,1,2,3 · CPUs {cpus}"
    lines = picture.wrap(label, 250)
    assert len(lines) > 3 and lines[0] == "GPU 0000:26:00.0 MI250X/MI250"
    assert all(picture._text_px(line, 11) <= 250 for line in lines)
    assert squeeze("".join(lines)) == squeeze(label)
    ranges = set(cpus.split(","))
    for line in lines[2:]:  # the cpulist's lines break after a comma, never inside a CPU number or range
        assert {piece for piece in line.removeprefix("CPUs ").split(",") if piece} <= ranges, line
    unbreakable = picture.wrap("x" * 100, 50)  # no place to break: cut where the line is full
    assert len(unbreakable) > 1 and "".join(unbreakable) == "x" * 100
    assert all(picture._text_px(line, 11) <= 50 for line in unbreakable)


def test_legends_say_what_fills_shades_and_markers_mean(node: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    """The node legend: housekeeping, a swatch per rank in its colour, spare, offline and the IRQ marker; the heat
    map's legend: a swatch per shade (the shades it draws) and the failed band."""
    _, topology, layout = node
    dom = Dom(picture.fleet_page([("pic-node", topology, layout)], drift_records()))
    legend = dom.legend()
    assert {"housekeeping", "rank", "spare", "offline", "irq"} <= set(legend)
    assert legend["housekeeping"] == picture.HOUSEKEEPING and legend["irq"] == picture.IRQ
    swatches = {a["data-rank"]: next(b["fill"] for t, b in dom.elements[i:] if t == "rect")
                for i, (tag, a) in enumerate(dom.elements) if tag == "g" and "data-rank" in a}
    assert swatches == {str(r["rank"]): picture.RANK_COLOURS[r["rank"]] for r in layout["ranks"]}
    shades = {legend[key] for key in ("0", "1", "4")}
    assert shades == {fill for _, fill, _ in picture.DRIFT_SHADES} and legend["failed"] == picture.FAILED_SHADE
    cells = {a["fill"] for tag, a in dom.elements if tag == "rect" and "data-count" in a}
    assert cells and cells <= shades


def test_text_is_escaped_and_drift_page_counts(node: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    _, topology, layout = node
    page = picture.fleet_page([("<b>x</b>", topology, layout)], drift_records())
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    dom = Dom(page)
    cells = {(a["data-id"], a["data-count"]) for tag, a in dom.elements if tag == "rect" and "data-count" in a}
    assert cells == {("cpu.governor", "0"), ("nvme.scheduler", "0"), ("cpu.governor", "1"), ("nvme.scheduler", "1")}
    assert "1 clean" in page and "1 drifted" in page and "1 failed" in page
    # the drifted node's cell is a short list: each drifting check id with its count, the values folded away
    items = [(a["data-id"], a["data-count"]) for tag, a in dom.elements if tag == "li" and "data-id" in a]
    assert items == [("nvme.scheduler", "1"), ("cpu.governor", "1")]
    assert '<code>nvme.scheduler</code> <span class="count" title="targets drifting">1</span></summary>' in page
    assert '<div class="values">nvme0n1: mq-deadline, expected none</div></details>' in page


def test_picture_command_for_a_local_tree(node: tuple[Path, dict[str, Any], dict[str, Any]], tmp_path: Path) -> None:
    root, topology, _ = node
    output = tmp_path / "node.html"
    assert main(["picture", "--root", str(root), "-o", str(output)]) == 0
    assert Dom(output.read_text()).devices("gpu") == {g["bdf"] for g in topology["gpus"]}


# --------------------------------------------------------------------------------------------- the browser
def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def png_facts(data: bytes) -> tuple[int, int, int]:
    """(width, height, distinct byte values of the decoded image data): a blank page has two or three."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    chunks, offset = [], 8
    while offset < len(data):
        length = struct.unpack(">I", data[offset:offset + 4])[0]
        kind = data[offset + 4:offset + 8]
        if kind == b"IDAT":
            chunks.append(data[offset + 8:offset + 8 + length])
        offset += 12 + length
    raw = zlib.decompress(b"".join(chunks))
    return width, height, len(set(raw))


def chromium(browser: str, page: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="nodetune-chromium-") as profile:
        return subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()],
                              capture_output=True, text=True, timeout=120, check=False)


#: added to the test's copy of the page before --dump-dom: marks every drawn text that sticks out of its SVG, every
#: chip line out of its chip and every IRQ count out of its marker (data-out), and notes the page's scroll width
MEASURE = """<script>
function out(inner, outer) {
  var a = inner.getBoundingClientRect(), b = outer.getBoundingClientRect();
  return a.left < b.left - 0.5 || a.right > b.right + 0.5 || a.top < b.top - 0.5 || a.bottom > b.bottom + 0.5;
}
document.querySelectorAll("svg").forEach(function (svg) {
  svg.querySelectorAll("text").forEach(function (t) { if (out(t, svg)) t.setAttribute("data-out", "svg"); });
});
document.querySelectorAll("g.device, g.irq").forEach(function (g) {
  var frame = g.querySelector("rect");
  g.querySelectorAll("text").forEach(function (t) {
    t.setAttribute("data-width", t.getComputedTextLength().toFixed(1));
    if (out(t, frame)) t.setAttribute("data-out", g.getAttribute("class"));
  });
});
var root = document.documentElement;
document.body.setAttribute("data-scroll-width", root.scrollWidth);
document.body.setAttribute("data-client-width", root.clientWidth);
</script>"""
WINDOWS = ((1280, 800), (1920, 1080))


@pytest.mark.slow
def test_fleet_page_in_headless_chromium(lab_nodes: list[tuple[str, dict[str, Any], dict[str, Any]]],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The lab's two full-size nodes on one fleet page, at 1280x800 and 1920x1080: every GPU's rank label whole
    and inside its chip, the legends there, an IRQ marker on each CPU the layouts give vectors (with its count
    inside it), no text outside its drawing, no sideways scrolling; the screenshots real pictures of the window."""
    browser = find_chromium()
    if browser is None:
        pytest.skip("no chromium on PATH: install Debian's chromium (scripts/test.sh does, as a test-only package)")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page = SCREENSHOTS / "fleet-layout.html"
    page.write_text(picture.fleet_page(lab_nodes, drift_records()))
    measured = SCREENSHOTS / "fleet-layout-measured.html"
    measured.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    irq_cpus = {}  # the CPUs of each drawn node (its first host's section) that take NIC vectors, with how many
    for host, _topology, layout in lab_nodes:
        irq_cpus[host] = dict(Counter(cpu for entry in layout["irq_affinity"] for cpu in entry["cpus"]))
    for width, height in WINDOWS:
        dumped = chromium(browser, measured, "--dump-dom", f"--window-size={width},{height}")
        assert dumped.returncode == 0, dumped.stderr[-2000:]
        dom = Dom(dumped.stdout)  # the DOM as the browser built and measured it
        body = next(a for tag, a in dom.elements if tag == "body")
        assert "data-scroll-width" in body, "the measuring script did not run"
        assert int(body["data-scroll-width"]) <= int(body["data-client-width"]), (width, body)
        outside = [(a.get("data-out"), a) for tag, a in dom.elements if tag == "text" and "data-out" in a]
        assert not outside, (width, outside[:5])
        for host, topology, layout in lab_nodes:
            assert dom.devices("gpu") >= {g["bdf"] for g in topology["gpus"]}
            for gpu in topology["gpus"]:  # every GPU's rank label complete, drawn whole
                lines = dom.chip_lines[(host, gpu["bdf"])]
                assert squeeze("".join(lines)) == squeeze(gpu_label(topology, layout, gpu["bdf"])), (width, lines)
        assert dom.irq_markers_by_host() == irq_cpus  # a marker on each CPU the layout gives vectors, its count
        assert {"housekeeping", "rank", "spare", "offline", "irq", "0", "1", "4", "failed"} <= set(dom.legend())
        widths = [float(a["data-width"]) for tag, a in dom.elements if tag == "text" and "data-width" in a]
        assert widths and min(widths) > 0, "the chips' text was not laid out"

        png = SCREENSHOTS / f"fleet-layout-{width}x{height}.png"
        png.unlink(missing_ok=True)
        shot = chromium(browser, page, f"--screenshot={png}", f"--window-size={width},{height}", "--hide-scrollbars")
        assert shot.returncode == 0 and png.is_file(), shot.stderr[-2000:]
        size_w, size_h, distinct = png_facts(png.read_bytes())
        assert (size_w, size_h) == (width, height)
        assert distinct > 64 and png.stat().st_size > 20_000, "the screenshot looks blank"
        with capsys.disabled():
            print(f"\nlayout picture screenshot: {png} (page: {page})")


def test_fleet_page_aggregates_instead_of_drawing_every_node(node: tuple[Path, dict[str, Any], dict[str, Any]]
                                                              ) -> None:
    """200 identical nodes, each with a governor drifting on 64 CPUs: one drawing naming the 200 nodes, counts per
    check id, each drifted node listed once with its targets compact; no per-CPU row, no 200-row heat map."""
    _, topology, layout = node
    hosts = [f"n{i:03d}" for i in range(200)]
    findings = [{"id": "cpu.governor", "target": f"cpu{c}", "status": "drift", "expected": "performance",
                 "actual": "powersave"} for c in range(64)]
    drift = [picture.NodeDrift(h, "drift" if i % 2 else "ok", findings if i % 2 else [], None)
             for i, h in enumerate(hosts)]
    page = picture.fleet_page([(h, topology, layout) for h in hosts], drift)
    dom = Dom(page)
    assert page.count('<section class="node"') == 1 and "The same layout on 200 nodes" in page
    assert "100 drifted" in page and "100 clean" in page
    assert '<td class="drift">cpu.governor</td><td>100</td><td>6400</td>' in page
    assert page.count('<li data-id="cpu.governor" data-count="64">') == 100
    assert page.count('<div class="values">cpu0-63: powersave, expected performance</div>') == 100
    assert "drift-map" not in page
    assert not any(tag == "rect" and "data-count" in a for tag, a in dom.elements)


@pytest.mark.slow
def test_picture_of_the_untuned_full_lab_shows_it_drifted(tmp_path: Path) -> None:
    """The documented lab, both full-size nodes freshly built: the fleet page says 2 drifted (it used to draw
    "2 clean": the audits were larger than ansible-runner's event limit and read as empty)."""
    from tests.support import fullsize

    scratch = fullsize.scratch_dir("nodetune-picture-lab-")
    try:
        inventory = fullsize.build_full_lab(scratch)
        page = tmp_path / "lab.html"
        assert main(["picture", "-i", str(inventory), "-o", str(page)]) == 0
        html = page.read_text()
        assert "0 clean</span>, <span class=\"drift\">2 drifted</span>" in html
        assert '<td class="drift">cpu.governor</td><td>2</td>' in html
        assert html.count('<section class="node"') == 2  # two different layouts: two drawings
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_a_pending_node_is_counted_as_pending_not_clean() -> None:
    # kernel_cmdline: configured, not yet booted; the page said "clean" for it (issue 26 item 1: its own status)
    pending = {"id": "kernel_cmdline.running", "target": "/proc/cmdline", "status": "pending", "expected": "iommu=pt",
               "actual": "", "severity": "warning", "remedy": "reboot"}
    page = picture.drift_section([picture.NodeDrift("node-a", "ok", []),
                                  picture.NodeDrift("node-p", "pending", [pending])])
    assert "1 clean" in page and "1 pending" in page and "0 drifted" in page
    assert '<td class="pending">pending</td>' in page
