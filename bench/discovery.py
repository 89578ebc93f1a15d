#!/usr/bin/env python3
"""Discovery against hwloc: ``nodetune discover --root DIR --json`` against ``lstopo --input DIR``, whole processes.

Run from the repository root (after ``scripts/bootstrap.sh``)::

    .venv/bin/python bench/discovery.py [--repeat 7] [--quick] [--json FILE]

(``bench/run.py`` runs this with the fleet and planner benchmarks.) Roots: every real capture of
``../shared/fixtures/real`` that is a full node root (through tests/realdata.py; the KFD-only, interrupts-only and
composite ones are listed as skipped, with the reason), and each simulated lab node (inventories/lab/specs, built
in /dev/shm where it exists). Both tools read the same tree and print a machine-readable description of it
(JSON; hwloc's XML, ``lstopo --if fsroot --input DIR --of xml -``), so both pay for their start-up, their reads and
their output. The runs are interleaved and the medians of ``--repeat`` kept. Target (issue 8): <= 2x lstopo.

Also printed, to show what bounds the ratio: the start-up of the Python interpreter alone and of ``nodetune`` with
its imports (``nodetune discover --root /nonexistent``, an error after the imports), and per root where a
discovery's time goes (:data:`BREAKDOWN_CHILD`: one discovery per fresh process, as the CLI runs it, its sections
timed): the IRQ section (``/proc/interrupts`` parsed, then three files of each ``/proc/irq/N``) is work lstopo
does not do at all, so the table also gives the ratio the rest of the run would have on its own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

_common.use_repository_code()

REPO = _common.REPO
TARGET = 2.0
NODETUNE = Path(sys.executable).with_name("nodetune")
# Real captures that are not a node root: what they hold instead (tests/realdata.py builds roots around them).
NOT_FULL_ROOTS = {
    "rocm-kfd-mi300x-cpx-2s-epyc": "KFD topology only (no /sys/devices/system, no PCI tree): not a node root",
    "pcp-interrupts-1152cpu": "/proc/interrupts only: not a node root (the planner benchmark uses it)",
    "prometheus-procfs-fixtures": "a composite of many machines' files: not one node's root",
}
SMALL_CAPTURE = "hwloc-opteron"  # the quick mode's one real capture: the quickest to extract


def child_env() -> dict[str, str]:
    """The environment of the timed processes: bytecode caching on, as on a user's machine (this workspace sets
    PYTHONDONTWRITEBYTECODE, which would recompile nodetune's modules at every start)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def lstopo_argv(root: Path) -> list[str]:
    return ["lstopo", "--if", "fsroot", "--input", str(root), "--of", "xml", "-"]


def nodetune_argv(root: Path) -> list[str]:
    return [str(NODETUNE), "discover", "--root", str(root), "--json"]


def real_roots(quick: bool) -> tuple[list[tuple[str, Path]], list[str]]:
    """(name, root) of each full real capture, and the notes for those skipped."""
    from tests import realdata

    notes: list[str] = []
    if not realdata.real_available():
        return [], [f"real captures: {realdata.SKIP_REASON}"]
    roots = []
    for name in realdata.CAPTURES:
        if quick and name != SMALL_CAPTURE:
            continue
        roots.append((f"real {name}", realdata.capture_root(name)))
    for folder, why in NOT_FULL_ROOTS.items():
        if (realdata.REAL_DIR / folder).is_dir():
            notes.append(f"skipped real {folder}: {why}")
    return roots, notes


def simulated_roots(workdir: Path) -> list[tuple[str, Path]]:
    from ansible_collections.nodetune.lab.plugins.module_utils import simnode

    roots = []
    for spec in sorted((REPO / "inventories" / "lab" / "specs").glob("*.yml")):
        dest = workdir / spec.stem
        simnode.build(str(spec), str(dest))
        roots.append((f"simulated {spec.stem}", dest))
    return roots


def measure(roots: list[tuple[str, Path]], rounds: int) -> list[dict]:
    env = child_env()
    nodetune_check = _common.run_timed(nodetune_argv(roots[0][1]), env=env)  # also writes the bytecode caches
    if nodetune_check.returncode != 0:
        raise SystemExit(f"nodetune discover failed on {roots[0][1]}:\n{nodetune_check.stderr[-2000:]}")
    results = []
    for label, root in roots:
        check = _common.run_timed(lstopo_argv(root), env=env)
        if check.returncode != 0:
            results.append({"root": label, "error": f"lstopo failed: {check.stderr.strip()[:200]}"})
            continue

        def runner(argv: list[str]) -> Callable[[], _common.Sample]:
            def run() -> _common.Sample:
                sample = _common.run_timed(argv, env=env, capture=False)
                if sample.returncode != 0:
                    raise SystemExit(f"{' '.join(argv)} failed (rc={sample.returncode})")
                return sample
            return run

        series = _common.interleaved([("nodetune", runner(nodetune_argv(root))),
                                      ("lstopo", runner(lstopo_argv(root)))], rounds)
        nt, ls = series["nodetune"], series["lstopo"]
        results.append({"root": label, "nodetune_wall_ms": nt.wall * 1e3, "lstopo_wall_ms": ls.wall * 1e3,
                        "nodetune_cpu_ms": nt.cpu * 1e3, "lstopo_cpu_ms": ls.cpu * 1e3,
                        "ratio_wall": _common.ratio(nt.wall, ls.wall), "ratio_cpu": _common.ratio(nt.cpu, ls.cpu),
                        "runs": len(nt.samples), "breakdown_ms": breakdown(root, rounds)})
    return results


# One discovery in a fresh process, as `nodetune discover --json` runs it (GC paused), with its sections timed by
# wrapping the section readers that topology.discover() calls; prints one JSON line of milliseconds.
BREAKDOWN_CHILD = r"""
import gc, json, sys, time
t0 = time.perf_counter()
from ansible_collections.nodetune.instinct.plugins.module_utils import discover_irq, topology
from nodetune.commands.discover import encode_json
t1 = time.perf_counter()
GROUPS = {"read_irqs": "irqs", "read_pci_devices": "pci", "read_cpu_lists": "cpus", "read_numa_nodes": "cpus",
          "read_cpus": "cpus", "read_smt": "cpus", "read_cpufreq": "cpus", "read_cpuidle": "cpus"}
spent = dict.fromkeys(set(GROUPS.values()) | {"interrupts_parse"}, 0.0)
def timed(func, group):
    def run(*args):
        start = time.perf_counter()
        try:
            return func(*args)
        finally:
            spent[group] += time.perf_counter() - start
    return run
for name, group in GROUPS.items():
    setattr(topology, name, timed(getattr(topology, name), group))
discover_irq.parse_interrupts = timed(discover_irq.parse_interrupts, "interrupts_parse")
gc.disable()
t2 = time.perf_counter()
topo = topology.discover(sys.argv[1])
t3 = time.perf_counter()
text = encode_json(topo)
t4 = time.perf_counter()
out = {k: v * 1e3 for k, v in spent.items()}
out.update(imports=(t1 - t0) * 1e3, discover=(t3 - t2) * 1e3, json=(t4 - t3) * 1e3, irqs_count=len(topo["irqs"]),
           pci_count=len(topo["pci_devices"]), cpus_count=len(topo["cpus"]))
print(json.dumps(out))
"""


def breakdown(root: Path, rounds: int) -> dict[str, float]:
    """Medians (ms) of the sections of one discovery per fresh process (see :data:`BREAKDOWN_CHILD`)."""
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "collection"), str(REPO / "src")])
    samples = []
    for _ in range(rounds):
        sample = _common.run_timed([sys.executable, "-c", BREAKDOWN_CHILD, str(root)], env=env)
        if sample.returncode != 0:
            raise SystemExit(f"breakdown failed on {root}:\n{sample.stderr[-2000:]}")
        samples.append(json.loads(sample.stdout))
    import statistics

    return {key: statistics.median(s[key] for s in samples) for key in samples[0]}


def startup(rounds: int) -> dict[str, float]:
    """Medians (ms) of the fixed costs: the bare interpreter, and nodetune up to its first file read."""
    env = child_env()
    series = _common.interleaved([
        ("python", lambda: _common.run_timed([sys.executable, "-c", "pass"], env=env, capture=False)),
        ("nodetune", lambda: _common.run_timed(nodetune_argv(Path("/nonexistent")), env=env, capture=False)),
    ], rounds)
    return {"python_wall_ms": series["python"].wall * 1e3, "nodetune_startup_wall_ms": series["nodetune"].wall * 1e3}


def report(results: list[dict], fixed: dict[str, float]) -> tuple[str, list[str]]:
    rows = []
    for r in results:
        if "error" in r:
            rows.append([r["root"], "-", "-", "-", "-", "-", r["error"]])
            continue
        rows.append([r["root"], f"{r['nodetune_wall_ms']:.0f}", f"{r['lstopo_wall_ms']:.0f}",
                     f"{r['ratio_wall']:.2f}", f"{r['nodetune_cpu_ms']:.0f}", f"{r['lstopo_cpu_ms']:.0f}",
                     f"{r['ratio_cpu']:.2f}"])
    text = _common.table(["root", "nodetune ms", "lstopo ms", "x wall", "nodetune CPU ms", "lstopo CPU ms",
                          "x CPU"], rows)
    text += (f"\nfixed costs: Python interpreter start {fixed['python_wall_ms']:.0f} ms, nodetune start-up with its "
             f"imports {fixed['nodetune_startup_wall_ms']:.0f} ms (wall, medians)")
    text += "\n\nwhere a discovery's time goes (ms, wall, one discovery per fresh process, medians)\n" + bounds_table(
        results, fixed)
    lines = []
    for r in results:
        if "error" in r:
            continue
        lines.append(f"ratio discovery {r['root']}: {r['ratio_wall']:.2f}x lstopo wall, {r['ratio_cpu']:.2f}x "
                     f"lstopo CPU (target <= {TARGET:g}x): {_common.verdict(r['ratio_wall'], TARGET)}")
    return text, lines


def bounds_table(results: list[dict], fixed: dict[str, float]) -> str:
    """Per root: the sections of a discovery, and the ratio to lstopo of the run without the IRQ section."""
    rows = []
    for r in results:
        if "error" in r:
            continue
        b = r["breakdown_ms"]
        irqs = b["irqs"]
        other = b["discover"] - irqs - b["pci"] - b["cpus"]
        # The IRQ section's share of the child's run (start-up included), applied to the interleaved median: the
        # children run apart from the interleaved rounds, under another moment's load.
        child_total = fixed["python_wall_ms"] + b["imports"] + b["discover"] + b["json"]
        without_irqs = r["nodetune_wall_ms"] * (1 - irqs / child_total)
        rows.append([r["root"], f"{r['lstopo_wall_ms']:.0f}", f"{fixed['python_wall_ms']:.0f}", f"{b['imports']:.1f}",
                     f"{irqs:.1f} ({b['interrupts_parse']:.1f})", f"{b['irqs_count']:.0f}", f"{b['pci']:.1f}",
                     f"{b['cpus']:.1f}", f"{other:.1f}", f"{b['json']:.1f}",
                     f"{_common.ratio(without_irqs, r['lstopo_wall_ms']):.2f}"])
    return _common.table(["root", "lstopo", "python start", "imports", "IRQs (of it /proc/interrupts)", "IRQ rows",
                          "PCI", "CPUs", "other", "JSON", "x lstopo without IRQs"], rows)


def run(rounds: int, quick: bool, out: list[str] | None = None) -> dict:
    if shutil.which("lstopo") is None:
        note = "discovery: lstopo (hwloc) is not installed: nothing to compare with (apt-get install hwloc)"
        print(note)
        return {"note": note}
    workdir = _common.shm_dir("nodetune-discovery-")
    old_tmp = tempfile.tempdir
    try:
        tempfile.tempdir = str(workdir)  # real captures extract here too (tests/realdata.py uses mkdtemp)
        real, notes = real_roots(quick)
        roots = real + simulated_roots(workdir)
        results = measure(roots, rounds)
        fixed = startup(rounds)
        text, lines = report(results, fixed)
        print(f"\ndiscovery (median of {rounds}; {_common.load_text()})\n{text}")
        for note in notes:
            print(note)
        print("\n".join(lines), flush=True)
        if out is not None:
            out.extend(lines)
        return {"rounds": rounds, "roots": results, "fixed_ms": fixed, "skipped": notes}
    finally:
        tempfile.tempdir = old_tmp
        from tests import realdata

        realdata.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="runs of each tool per root (default 7)")
    parser.add_argument("--quick", action="store_true", help="one small real capture and the simulated nodes")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()
    print(_common.machine_text(_common.machine()))
    results = run(max(1, args.repeat), args.quick)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
