"""The benchmark command's smoke mode: ``bench/run.py --quick`` runs every part and prints its ratio lines.

Benchmarks are not CI tests (timings on shared machines are noise), so nothing here asserts a duration or a
verdict: only that each comparison ran side by side and printed its ratios, with the machine and its load.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
NUMBER = r"[0-9]+(?:\.[0-9]+)?"
VERDICT = r"(?:OK|OVER)"


def test_quick_run_prints_every_ratio_line(tmp_path: Path) -> None:
    figures = tmp_path / "figures.json"
    # its temporary folders in the test's (in memory where the suite runs there: tests/conftest.py): a smoke run's
    # figures are not read, and the report writers' thousands of files cost the disk most
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               TMPDIR=str(scratch))
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "run.py"), "--quick", "--mitogen", "no",
                           "--json", str(figures)], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    lines = out.splitlines()

    assert re.search(r"^machine: \d+ CPUs, .+; load average ", out, re.M)
    summary = lines[next(i for i, line in enumerate(lines) if line.startswith("summary ("))]
    assert "load average" in summary

    expected = [
        rf"ratio fleet\[stock\] N=1 site: {NUMBER}x ping wall, {NUMBER}x ping CPU \(target <= 2.5x\): {VERDICT}",
        rf"ratio fleet\[stock\] N=1 site \(no cache\): {NUMBER}x ping wall, {NUMBER}x ping CPU \(target <= 2.5x\): "
        rf"{VERDICT}",
        rf"ratio fleet\[stock\] N=1 site \(no-op\): {NUMBER}x ping wall, {NUMBER}x ping CPU \(target <= 1.5x\): "
        rf"{VERDICT}",
        rf"ratio discovery share of a no-op run, lab mi300x: {NUMBER}% of the tune module's process CPU \({NUMBER} of "
        rf"{NUMBER} ms, less {NUMBER} ms importing the lab's simulator, then {NUMBER} ms for the IRQ affinities the "
        rf"Layout and verify read; target < 5%\): {VERDICT}",
        rf"ratio discovery share of a no-op run, synthetic 1152 CPUs: {NUMBER}% of the tune module's process CPU "
        rf"\({NUMBER} of {NUMBER} ms, less {NUMBER} ms importing the lab's simulator, then {NUMBER} ms for the IRQ "
        rf"affinities the Layout and verify read; target < 5%\): {VERDICT}",
        rf"ratio planner: largest plan\(\) {NUMBER} ms CPU median \(1152 CPUs, \d+ IRQs; target < 50 ms\): {VERDICT}",
        rf"ratio planner growth: time per CPU \+ IRQ x{NUMBER} from 64 to 1152 CPUs .*: {VERDICT}",
        rf"ratio fleet reports N=1000: {NUMBER} s CPU \({NUMBER} s wall\), {NUMBER} MiB peak \(target < 60 s and "
        rf"2 GiB at 10,000 nodes\): {VERDICT}",
        rf"ratio fleet reports growth: CPU time per node x{NUMBER} from 100 to 1000 nodes \(target <= 1.5, "
        rf"linear\): {VERDICT}",
        rf"ratio fleet report of a play N=1000: {NUMBER} s CPU \(the run_once fleet_report: the results with their "
        rf"inventory groups, every output built and written\); each host's inventory groups in one pass {NUMBER} ms, "
        rf"host by host {NUMBER} s(?: \(x{NUMBER}\))? \(informational\)",
        rf"ratio fleet reports from files N=1000: {NUMBER} s CPU \({NUMBER} s wall\), {NUMBER} MiB peak; from the "
        rf"results {NUMBER} s CPU \(target < 60 s and 2 GiB at 10,000 nodes\): {VERDICT}",
    ]
    summary_lines = lines[lines.index(summary) + 1:]
    for pattern in expected:
        assert any(re.fullmatch(pattern, line) for line in summary_lines), f"no summary line matches {pattern}\n{out}"

    data = json.loads(figures.read_text())
    assert data["quick"] is True and data["machine"]["nproc"] >= 1
    assert set(data["fleet"]["strategies"]["stock"]["1"]) == {"ping", "site", "site (no cache)", "site (no-op)",
                                                              "apply (no-op)"}
    assert [r["node"] for r in data["discovery"]["noop_share"]] == ["lab mi300x", "synthetic 1152 CPUs"]
    roots = {r["root"] for r in data["discovery"].get("roots", [])}
    assert not shutil.which("lstopo") or {"simulated mi250", "simulated mi300x"} <= roots
    assert data["planner"]["cases"][-1]["cpus"] >= 384
    assert [row["nodes"] for row in data["reports"]["sizes"]] == [100, 1000]
    assert [row["nodes"] for row in data["reports"]["from_files"]] == [100, 1000]
