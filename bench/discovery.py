#!/usr/bin/env python3
"""Discovery's share of a no-op run, and discovery against hwloc (``lstopo --input DIR``), whole processes.

Run from the repository root (after ``scripts/bootstrap.sh``)::

    .venv/bin/python bench/discovery.py [--repeat 7] [--quick] [--json FILE]

(``bench/run.py`` runs this with the fleet and planner benchmarks.) Roots: every real capture of
``../shared/fixtures/real`` that is a full node root (through tests/realdata.py; the KFD-only, interrupts-only and
composite ones are listed as skipped, with the reason), and each simulated lab node (inventories/lab/specs, built
in /dev/shm where it exists). Both tools read the same tree and print a machine-readable description of it
(JSON; hwloc's XML, ``lstopo --if fsroot --input DIR --of xml -``), so both pay for their start-up, their reads and
their output. The runs are interleaved and the medians of ``--repeat`` kept. Issue 8's target, <= 2x lstopo, is
replaced (issue 28 item 4: no more work on interpreter start-up): the comparison is printed, without a verdict.

The target now: **discovery under 5% of a no-op run's node-side time** (:data:`SHARE_TARGET`), on the largest lab
node (by CPUs) and on a 1,152-CPU synthetic node (:func:`synthetic_spec`: the lab MI300X spec with 288 cores per
socket and NPS4). Each node is built, tuned by a first run, then the tune module (``nodetune.lab.tune`` with every
area's lab variables and the verify audit, as site.yml calls it) runs ``--repeat`` times on it as the node runs it:
a fresh process, the module's main with its arguments (:data:`NOOP_CHILD`), less the CPU time of importing the
simulator the lab module adds to the production one (a real node's run never imports it). In that process the discovery
(node.load's ``topology.discover``: the node's structure, without the current values the Settings and checks read
where they use them) is timed; the share is its CPU time over the process's (interpreter, imports, discovery, plan,
the comparison of every Setting, the audit). The IRQ affinities node.load reads right after discovery (for verify)
are timed apart and printed beside the share. AnsiballZ's unpacking is not in it, so the share of
a real run is a little lower than this one. The no-op runs alternate, round by round, between the two ways the
module can discover: with the node's structure cache (discover/structure.py: the first run kept it beside the
journal; the child checks that every kept section was taken from it) and without it (the same module, its store
left out of discover, as before the cache): the two shares side by side, the target judged on the cached one.

Also printed, to show what bounds the ratio: the start-up of the Python interpreter alone and of ``nodetune`` with
its imports (``nodetune discover --root /nonexistent``, an error after the imports), and per root where a
discovery's time goes (:data:`BREAKDOWN_CHILD`: one discovery per fresh process, as the CLI runs it, its sections
timed): the IRQ section (``/proc/interrupts`` parsed, then three files of each ``/proc/irq/N``) is work lstopo
does not do at all, so the table also gives the ratio the rest of the run would have on its own. For the no-op
nodes the same sections are timed with and without the structure cache (``--cached``: a read-only store).
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
TARGET = 2.0  # issue 8's, now informational
SHARE_TARGET = 0.05  # issue 28 item 4: discovery's share of a no-op run's node-side CPU time
NODETUNE = Path(sys.executable).with_name("nodetune")
# Real captures that are not a node root: what they hold instead (tests/realdata.py builds roots around them).
NOT_FULL_ROOTS = {
    "rocm-kfd-mi300x-cpx-2s-epyc": "KFD topology only (no /sys/devices/system, no PCI tree): not a node root",
    "pcp-interrupts-1152cpu": "/proc/interrupts only: not a node root (the planner benchmark uses it)",
    "prometheus-procfs-fixtures": "a composite of many machines' files: not one node's root",
}
SMALL_CAPTURE = "hwloc-opteron"  # the quick mode's one real capture: the quickest to extract
CACHE = "var/lib/nodetune/topology-structure.json"  # discover/structure.py CACHE
CACHED_SECTIONS = ("cpus", "cpufreq", "cpuidle", "l3_domains", "pci", "irqs")  # what a no-op takes from it


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
from ansible_collections.nodetune.instinct.plugins.module_utils.discover import irq as discover_irq
from ansible_collections.nodetune.instinct.plugins.module_utils.discover import topology
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
discover_irq.interrupt_rows = timed(discover_irq.interrupt_rows, "interrupts_parse")
store = None
values = "--no-values" not in sys.argv  # the modules' discovery (node.load) reads the node's structure alone
if "--cached" in sys.argv:
    from ansible_collections.nodetune.instinct.plugins.module_utils.discover.structure import StructureStore
    store = StructureStore(sys.argv[1])  # read only
gc.disable()
t2 = time.perf_counter()
topo = topology.discover(sys.argv[1], irq_counts="--no-irq-counts" not in sys.argv, structure=store, values=values)
t3 = time.perf_counter()
text = encode_json(topo)
t4 = time.perf_counter()
out = {k: v * 1e3 for k, v in spent.items()}
out.update(imports=(t1 - t0) * 1e3, discover=(t3 - t2) * 1e3, json=(t4 - t3) * 1e3, irqs_count=len(topo["irqs"]),
           pci_count=len(topo["pci_devices"]), cpus_count=len(topo["cpus"]), hits=len(store.hits) if store else 0)
print(json.dumps(out))
"""


# One no-op tune module call in a fresh process, as the node runs it (the module's main, its arguments from a file,
# the profile Ansible's controller gives), with node.load's discovery timed; writes one JSON object to argv[2].
# argv[3]: "cached" (as the module runs), or "fresh" (its structure store left out of discover: no cache read or kept).
NOOP_CHILD = r"""
import contextlib, io, json, resource, sys, time
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import node
spent = {"discover_cpu_s": 0.0, "discoveries": 0, "hits": [], "affinities_cpu_s": 0.0}
discover, read_affinities = node.discover, node.read_affinities
def affinities(*args):  # the IRQ values the Layout and verify read after discovery (node.load)
    start = time.process_time()
    try:
        return read_affinities(*args)
    finally:
        spent["affinities_cpu_s"] += time.process_time() - start
node.read_affinities = affinities
def timed(*args, **kwargs):
    if sys.argv[3] == "fresh":
        kwargs["structure"] = None
    start = time.process_time()
    try:
        return discover(*args, **kwargs)
    finally:
        spent["discover_cpu_s"] += time.process_time() - start
        spent["discoveries"] += 1
        if kwargs.get("structure") is not None:
            spent["hits"] = list(kwargs["structure"].hits)
node.discover = timed
from ansible.module_utils import basic
with open(sys.argv[1], "rb") as handle:
    basic._ANSIBLE_ARGS = handle.read()
basic._ANSIBLE_PROFILE = "legacy"
# Every module the production tune module imports, then what the lab module adds (the simulator: simkernel answers
# the writes of a first run, and a real node never imports it): its CPU time is taken out of the process's.
from ansible_collections.nodetune.lab.plugins.module_utils.production import tune as production
before = time.process_time()
from ansible_collections.nodetune.lab.plugins.modules import tune
spent["simulator_import_cpu_s"] = time.process_time() - before
out = io.StringIO()
try:
    with contextlib.redirect_stdout(out):
        tune.main()
except SystemExit:
    pass
result = json.loads(out.getvalue())
usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
spent["process_cpu_s"] = sum(u.ru_utime + u.ru_stime for u in usage) - spent["simulator_import_cpu_s"]
spent.update(changed=bool(result.get("changed")), failed=bool(result.get("failed")), msg=result.get("msg"))
with open(sys.argv[2], "w") as handle:
    json.dump(spent, handle)
"""


def synthetic_spec() -> dict:
    """1,152 CPUs: the lab MI300X spec with 2 x 288 cores x 2 threads and 4 NUMA nodes per socket (each device on
    the NUMA node of its bus's root complex)."""
    import yaml

    spec = yaml.safe_load((REPO / "inventories" / "lab" / "specs" / "mi300x.yml").read_text())
    spec.update(name="synthetic1152", hostname="synthetic-1152")
    spec["cpu"].update(cores_per_socket=288, cores_per_l3=8)
    spec["numa"] = {"per_socket": 4, "distance_remote": 32}
    for kind in ("gpus", "nics", "nvme"):
        for device in spec[kind]:
            device.pop("numa_node", None)
    return spec


def module_args(root: Path) -> dict:
    """The tune module's arguments as the tune action gives them on a lab node in site.yml: every enabled area
    with its declared defaults under the lab's group_vars, the BIOS-level checks, and the verify audit."""
    import yaml
    from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as declaration

    values: dict = {}
    for role in (*declaration.AREAS, declaration.BIOS_ROLE, "verify"):
        values.update(yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()) or {})
    for path in sorted((REPO / "inventories" / "lab" / "group_vars" / "all").glob("*.yml")):
        values.update(yaml.safe_load(path.read_text()) or {})
    areas = {}
    for role in declaration.AREAS:
        config = {k: v for k, v in values.items() if k in declaration.ROLES[role]["variables"]}
        if config.get(f"nodetune_{role}_enabled", True):
            areas[role] = config
    bios = {k: v for k, v in values.items() if k in declaration.ROLES[declaration.BIOS_ROLE]["variables"]}
    health = {k: v for k, v in values.items() if k.startswith(("nodetune_health_", "nodetune_inventory_"))}
    return {"ANSIBLE_MODULE_ARGS": {
        "root": str(root), "areas": areas, "bios": bios, "policy": {}, "persist_boot": True,
        "verify": {"health": health, "waivers": [], "node_name": root.name, "findings_format": "json"}}}


def noop_share(workdir: Path, rounds: int) -> list[dict]:
    """Per node (the largest lab node, the 1,152-CPU synthetic one): the no-op tune call's process CPU, its
    discovery's, and the share (medians of ``rounds``)."""
    import statistics

    from ansible_collections.nodetune.lab.plugins.module_utils import simnode

    def cpus(spec: dict) -> int:
        return spec["cpu"]["sockets"] * spec["cpu"]["cores_per_socket"] * spec["cpu"]["threads_per_core"]

    lab = [simnode.load_spec(str(path)) for path in sorted((REPO / "inventories" / "lab" / "specs").glob("*.yml"))]
    largest = max(lab, key=cpus)
    cases = [(f"lab {largest['name']}", largest), ("synthetic 1152 CPUs", synthetic_spec())]
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "collection"), str(REPO / "src")])
    env["NODETUNE_BYTECODE_CACHE"] = "0"  # imports from the checkout's __pycache__, as a warm node cache gives
    results = []
    for label, spec in cases:
        root = workdir / ("noop-" + spec["name"])
        simnode.build(spec, str(root))
        args = workdir / (root.name + ".args.json")
        args.write_text(json.dumps(module_args(root)))
        call = (label, args, workdir / (root.name + ".out.json"), env)
        noop_run(*call, "cached", first=True)  # tunes the fresh node and keeps its structure beside the journal
        if not (root / CACHE).is_file():
            raise SystemExit(f"the first tune run on {label} kept no structure cache ({CACHE})")
        samples: dict[str, list[dict]] = {"fresh": [], "cached": []}
        for index in range(rounds):
            for mode in (MODES if index % 2 == 0 else MODES[::-1]):
                samples[mode].append(noop_run(*call, mode))
        modes = {}
        for mode, taken in samples.items():
            modes[mode] = {"noop_cpu_ms": statistics.median(s["process_cpu_s"] for s in taken) * 1e3,
                           "affinities_cpu_ms": statistics.median(s["affinities_cpu_s"] for s in taken) * 1e3,
                           "simulator_cpu_ms": statistics.median(s["simulator_import_cpu_s"] for s in taken) * 1e3,
                           "discover_cpu_ms": statistics.median(s["discover_cpu_s"] for s in taken) * 1e3,
                           "share": statistics.median(s["discover_cpu_s"] / s["process_cpu_s"] for s in taken),
                           "runs": len(taken),
                           "breakdown_ms": breakdown(root, rounds, irq_counts=False, cached=mode == "cached")}
        topo_cpus = len(list((root / "sys/devices/system/cpu").glob("cpu[0-9]*")))
        irqs = len([name for name in os.listdir(root / "proc/irq") if name.isdigit()])
        results.append({"node": label, "cpus": topo_cpus, "irqs": irqs, "modes": modes})
    return results


def noop_run(label: str, args: Path, out: Path, env: dict[str, str], mode: str, first: bool = False) -> dict:
    """One tune module call (:data:`NOOP_CHILD`) in ``mode``; after the ``first``, a no-op, and with the cache, one
    that took every kept section from it."""
    sample = _common.run_timed([sys.executable, "-c", NOOP_CHILD, str(args), str(out), mode], env=env)
    data = json.loads(out.read_text()) if sample.returncode == 0 and out.is_file() else None
    if data is None or data["failed"]:
        raise SystemExit(f"the tune module failed on {label}: {(data or {}).get('msg')}\n{sample.stderr[-2000:]}")
    if not first and data["changed"]:
        raise SystemExit(f"the tune module changed {label} again: not a no-op")
    if mode == "cached" and not first and sorted(data["hits"]) != sorted(CACHED_SECTIONS):
        raise SystemExit(f"the no-op on {label} took {data['hits']} from the structure cache, not every kept "
                         f"section ({', '.join(CACHED_SECTIONS)})")
    return data


MODES = ("fresh", "cached")
MODE_TEXT = {"fresh": "no cache", "cached": "cache"}


def share_report(rows: list[dict]) -> tuple[str, list[str]]:
    """The table: per node, the share without and with the structure cache side by side, then where a discovery's
    time goes in each (:func:`breakdown`); and the ratio lines (the target judged with the cache)."""
    table_rows = []
    for r in rows:
        fresh, cached = r["modes"]["fresh"], r["modes"]["cached"]
        table_rows.append([r["node"], r["cpus"], r["irqs"],
                           f"{fresh['noop_cpu_ms']:.0f} / {cached['noop_cpu_ms']:.0f}",
                           f"{fresh['discover_cpu_ms']:.1f} / {cached['discover_cpu_ms']:.1f}",
                           f"{fresh['share'] * 100:.1f}% / {cached['share'] * 100:.1f}%"])
    text = _common.table(["node", "CPUs", "IRQs", "no-op CPU ms (no cache / cache)",
                          "discovery CPU ms (no cache / cache)", "share (no cache / cache)"], table_rows)
    parts = []
    for r in rows:
        for mode in MODES:
            b = r["modes"][mode]["breakdown_ms"]
            other = max(0.0, b["discover"] - b["irqs"] - b["pci"] - b["cpus"])  # medians of separate samples
            parts.append([f"{r['node']}, {MODE_TEXT[mode]}", f"{b['discover']:.1f}",
                          f"{b['irqs']:.1f} ({b['interrupts_parse']:.1f})", f"{b['pci']:.1f}", f"{b['cpus']:.1f}",
                          f"{other:.1f}"])
    text += "\n\nwhere a discovery's time goes (ms, wall, one discovery per fresh process, medians)\n" + _common.table(
        ["node", "discovery", "IRQs (of it /proc/interrupts)", "PCI", "CPUs", "other"], parts)
    lines = []
    for r in rows:  # the verdict on the module as it runs (with the cache); the figure without it beside
        fresh, cached = r["modes"]["fresh"], r["modes"]["cached"]
        lines.append(f"ratio discovery share of a no-op run, {r['node']}: {cached['share'] * 100:.1f}% of the tune "
                     f"module's process CPU ({cached['discover_cpu_ms']:.0f} of {cached['noop_cpu_ms']:.0f} ms, "
                     f"less {cached['simulator_cpu_ms']:.0f} ms importing the lab's simulator, "
                     f"then {cached['affinities_cpu_ms']:.1f} ms for the IRQ affinities the Layout and verify read; "
                     f"target < {SHARE_TARGET * 100:g}%): {'OK' if cached['share'] < SHARE_TARGET else 'OVER'}")
        lines.append(f"ratio discovery share of a no-op run without the structure cache, {r['node']}: "
                     f"{fresh['share'] * 100:.1f}% of the tune module's process CPU ({fresh['discover_cpu_ms']:.0f} "
                     f"of {fresh['noop_cpu_ms']:.0f} ms; informational: the figure before the cache)")
    return text, lines


def breakdown(root: Path, rounds: int, irq_counts: bool = True, cached: bool = False) -> dict[str, float]:
    """Medians (ms) of the sections of one discovery per fresh process (see :data:`BREAKDOWN_CHILD`); without
    ``irq_counts`` as the tune and verify modules discover (node.load: no IRQ counts, the structure without current
    values); ``cached``: with the node's structure cache, every kept section taken from it."""
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "collection"), str(REPO / "src")])
    samples = []
    for _ in range(rounds):
        sample = _common.run_timed([sys.executable, "-c", BREAKDOWN_CHILD, str(root)]
                                   + ([] if irq_counts else ["--no-irq-counts", "--no-values"])
                                   + (["--cached"] if cached else []),
                                   env=env)
        if sample.returncode != 0:
            raise SystemExit(f"breakdown failed on {root}:\n{sample.stderr[-2000:]}")
        samples.append(json.loads(sample.stdout))
        if cached and samples[-1]["hits"] != len(CACHED_SECTIONS):
            raise SystemExit(f"breakdown on {root}: {samples[-1]['hits']} sections from the structure cache, not "
                             f"{len(CACHED_SECTIONS)}")
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
        lines.append(f"discovery {r['root']}: {r['ratio_wall']:.2f}x lstopo wall, {r['ratio_cpu']:.2f}x lstopo CPU "
                     f"(informational: issue 8's <= {TARGET:g}x is replaced by the no-op share)")
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
    workdir = _common.shm_dir("nodetune-discovery-")
    try:
        shares = noop_share(workdir, rounds)
        text, lines = share_report(shares)
        print(f"\ndiscovery's share of a no-op run (median of {rounds}; {_common.load_text()})\n{text}\n"
              + "\n".join(lines), flush=True)
        if out is not None:
            out.extend(lines)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    figures = {"noop_share": shares}
    if shutil.which("lstopo") is None:
        note = "discovery: lstopo (hwloc) is not installed: nothing to compare with (apt-get install hwloc)"
        print(note)
        return {**figures, "note": note}
    return {**figures, **against_lstopo(rounds, quick)}


def against_lstopo(rounds: int, quick: bool) -> dict:
    workdir = _common.shm_dir("nodetune-discovery-")
    old_tmp = tempfile.tempdir
    try:
        tempfile.tempdir = str(workdir)  # real captures extract here too (tests/realdata.py uses mkdtemp)
        real, notes = real_roots(quick)
        roots = real + simulated_roots(workdir)
        results = measure(roots, rounds)
        fixed = startup(rounds)
        text, lines = report(results, fixed)
        print(f"\ndiscovery against lstopo (median of {rounds}; {_common.load_text()})\n{text}")
        for note in notes:
            print(note)
        print("\n".join(lines), flush=True)
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
