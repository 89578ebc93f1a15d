"""The layout picture: what it draws (read back as a DOM), and how it looks in a real headless browser.

The browser test renders a fleet page (drift section + one node's picture) in Debian's chromium, dumps the DOM
the browser built and takes a screenshot; it asserts the page shows every GPU and NIC of the node and that the
PNG is a real picture, and prints the screenshot's path. Where chromium is absent it skips and says so
(scripts/test.sh installs it: NODETUNE_TEST_DEB_PACKAGES in scripts/lib/setup.sh).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
import zlib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.layout import plan
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import format_cpulist
from ansible_collections.nodetune.instinct.plugins.module_utils.topology import discover
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from nodetune import picture
from nodetune.cli import main
from tests.integration.test_api import scratch_dir
from tests.integration.test_playbooks import small_spec

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
    """The elements of a page: (tag, attributes) in order, plus all text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def devices(self, kind: str) -> set[str]:
        return {a["data-id"] for tag, a in self.elements if tag == "g" and a.get("data-kind") == kind}

    def cpus(self, offline: bool) -> set[int]:
        return {int(a["data-cpu"]) for tag, a in self.elements
                if tag == "rect" and "data-cpu" in a and ("offline" in a.get("class", "").split()) == offline}


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
    text = " ".join(dom.text)
    for rank in layout["ranks"]:  # each GPU chip names its rank and the rank's CPUs
        cpus = format_cpulist(rank["cpus"])
        assert f"rank {rank['rank']} · CPUs {cpus}" in text
    # the NIC chip names the CPUs its completion IRQs are pinned to
    assert f"IRQs → CPUs {picture._cpus(layout['nic_irq_cpus'])}" in text or len(topology["nics"]) > 1


def test_text_is_escaped_and_drift_page_counts(node: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    _, topology, layout = node
    page = picture.fleet_page([("<b>x</b>", topology, layout)], drift_records())
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    dom = Dom(page)
    cells = {(a["data-id"], a["data-count"]) for tag, a in dom.elements if tag == "rect" and "data-count" in a}
    assert cells == {("cpu.governor", "0"), ("nvme.scheduler", "0"), ("cpu.governor", "1"), ("nvme.scheduler", "1")}
    assert "1 clean" in page and "1 drifted" in page and "1 failed" in page


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


@pytest.mark.slow
def test_fleet_page_in_headless_chromium(node: tuple[Path, dict[str, Any], dict[str, Any]],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    browser = find_chromium()
    if browser is None:
        pytest.skip("no chromium on PATH: install Debian's chromium (scripts/test.sh does, as a test-only package)")
    _, topology, layout = node
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page = SCREENSHOTS / "fleet-layout.html"
    page.write_text(picture.fleet_page([("pic-node", topology, layout)], drift_records()))
    png = SCREENSHOTS / "fleet-layout.png"
    png.unlink(missing_ok=True)

    dumped = chromium(browser, page, "--dump-dom")
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = Dom(dumped.stdout)  # the DOM as the browser built it from the page
    assert dom.devices("gpu") == {g["bdf"] for g in topology["gpus"]}
    assert dom.devices("nic") == {n["name"] for n in topology["nics"] if n["bdf"]}
    text = " ".join(dom.text)
    for gpu in topology["gpus"]:
        assert f"GPU {gpu['bdf']}" in text
    for nic in topology["nics"]:
        if nic["bdf"]:
            assert f"NIC {nic['name']}" in text

    shot = chromium(browser, page, f"--screenshot={png}", "--window-size=1400,1500", "--hide-scrollbars")
    assert shot.returncode == 0 and png.is_file(), shot.stderr[-2000:]
    width, height, distinct = png_facts(png.read_bytes())
    assert (width, height) == (1400, 1500)
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
    assert page.count("cpu.governor (cpu0-63: powersave, expected performance)") == 100
    assert "drift-map" not in page
    assert not any(tag == "rect" and "data-count" in a for tag, a in dom.elements)


@pytest.mark.slow
def test_picture_of_the_untuned_full_lab_shows_it_drifted(tmp_path: Path) -> None:
    """The documented lab, both full-size nodes freshly built: the fleet page says 2 drifted (it used to draw
    "2 clean": the audits were larger than ansible-runner's event limit and read as empty)."""
    from tests.integration import fullsize

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
