#!/usr/bin/env python3
"""The fleet report writers at fleet scale: 1,000 and 10,000 nodes' verify results, controller time and memory.

Run from the repository root (after ``scripts/bootstrap.sh``)::

    .venv/bin/python bench/fleet_reports.py [--nodes 1000,10000]

(``bench/run.py`` runs it with the other benchmarks; ``--quick`` uses 100 and 1,000 nodes.) Each fleet size runs
in its own child process, so that its peak memory (the child's maximum resident set) is its own. A node's result
is what a fresh full-size MI300X node's verify returns - about 1,700 findings: a governor and a C-state per CPU,
an affinity per NIC IRQ, the single checks - with 10% of the nodes drifting on a few ids and 1% failed; each
result is built when a writer reads it and not kept (the writers are measured, not the results Ansible already
holds). The writers timed, as the controller runs them:

- ``reports``: the fleet summary and JUnit XML from one pass over the results (``report.fleet_reports``, what
  ``nodetune.instinct.fleet_report`` writes), both written to files;
- ``prometheus``: every node's textfile, summed over the fleet: each node writes its own, on its own CPU, so this
  is reported but not counted as controller time;
- ``play``: the run_once ``nodetune.instinct.fleet_report`` of a play, as the action runs it: the results as
  entries with each host's inventory groups (all, mi300x, a group per rack of 40; ``fleet_reports.play_entries``),
  every output built and written, a failure record per failed node; beside it, each host's groups found in one pass
  over the groups and host by host (as play_entries did before: hosts x memberships);
- ``picture``: the ``nodetune picture`` fleet page from the nodes' grouped findings, all nodes sharing the
  lab MI300X layout;
- ``from files`` (issue 28): the same fleet's per-node report files, as the controller writes them
  (``nodes/<host>.json`` a line per finding, with its checks, run and inventory groups; ``failed/<host>.json`` for
  the failed nodes), in 4 slice folders as 4 ``--limit`` runs leave them, then ``nodetune.report()`` over the 4
  folders into an output folder: every file read and digested one at a time, the newest per node, the outliers and
  learned expectations of 250 racks and the whole fleet (1% of the nodes a GPU fewer), the summary, JUnit,
  Prometheus, the picture's fleet page and a learned file per node written. Timed in its own child process; the
  files are written first (not timed) into a temporary folder on disk.

Targets (issue 12): the controller's writers (reports and picture) for 10,000 nodes under 60 s and 2 GiB, time
growing linearly with the nodes (the time per node at the largest size within 1.5x of the smallest size's); issue
28: the fleet reports from 10,000 nodes' report files under 60 s and 2 GiB. Wall and CPU time are both printed; the
verdicts use CPU time (the process's own), since on a shared machine the wall time mostly measures the other jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

_common.use_repository_code()

DEFAULT_SIZES = (1000, 10000)
TARGET_S, TARGET_BYTES = 60.0, 2 << 30


def _finding(check: str, target: str, drift: bool) -> dict[str, Any]:
    return {"id": check, "target": target, "expected": "performance", "actual": "powersave" if drift else "performance",
            "status": "drift" if drift else "ok", "severity": "medium", "remedy": "run nodetune apply" if drift else "",
            "source": "setting", "waiver": None}


_TEMPLATES: dict[bool, list[dict[str, Any]]] = {}


def node_findings(index: int) -> list[dict[str, Any]]:
    """A full-size MI300X node's findings (~1,700); every tenth node drifts on a few ids. Nodes of a kind share
    their finding dicts (a new list each time): what is measured is the writers, not building the results."""
    drifted = index % 10 == 3
    if drifted not in _TEMPLATES:
        _TEMPLATES[drifted] = _node_findings(drifted)
    return list(_TEMPLATES[drifted])


def _node_findings(drifted: bool) -> list[dict[str, Any]]:
    out = [_finding("cpu.governor", f"cpu{c}", drifted and c < 192) for c in range(384)]
    out += [_finding("cpu.idle_state", f"cpu{c}/C2", False) for c in range(192)]
    out += [_finding("smt.siblings_offline", f"cpu{c}", False) for c in range(192, 384)]
    out += [_finding("irq.nic_local", f"irq {40 + i}", drifted and i % 7 == 0) for i in range(1024)]
    out += [_finding(f"sysctl.net.core.x{i}", f"net.core.x{i}", drifted and i == 0) for i in range(12)]
    out += [_finding(check, f"{bus:02x}", False) for check in ("bios.aspm", "health.gpu_temp") for bus in range(9)]
    return out


class FleetResults(Mapping[str, Any]):
    """``{host: verify result}`` as ``hostvars`` hold them, each built when read (not kept)."""

    def __init__(self, nodes: int) -> None:
        self.hosts = [f"node{i:05d}" for i in range(nodes)]
        self.index = {host: i for i, host in enumerate(self.hosts)}

    def __getitem__(self, host: str) -> Any:
        index = self.index[host]
        if index % 100 == 7:
            return {"failed": True, "msg": f"unreachable: ssh: connect to host {host} port 22: No route to host"}
        findings = node_findings(index)
        summary = {"drift": index % 10 == 3}  # the writers do not read it
        return {"changed": False, "findings": findings,
                "report": {"schema": 1, "node": host, "timestamp": 1767225600.0,
                           "generated_at": "2026-01-01T00:00:00Z", "summary": summary, "findings": findings}}

    def __iter__(self) -> Iterator[str]:
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)


def _lab_layout() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The lab MI300X node's topology, layout and inventory facts (what its verify report carries)."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover
    from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs.node_check import read_facts
    from ansible_collections.nodetune.instinct.plugins.module_utils.plan.layout import plan
    from ansible_collections.nodetune.lab.plugins.module_utils import simnode

    with tempfile.TemporaryDirectory(prefix="nodetune-bench-lab-") as folder:
        spec = simnode.load_spec(str(_common.REPO / "inventories" / "lab" / "specs" / "mi300x.yml"))
        simnode.build(spec, os.path.join(folder, "node"))
        topology = discover(os.path.join(folder, "node"))
        facts = read_facts(os.path.join(folder, "node"))
    return topology, plan(topology, None), facts


SLICES = 4
RACK = 40  # nodes per rack group


def inventory_groups(hosts: list[str]) -> dict[str, list[str]]:
    """The ``groups`` magic variable of the fleet's inventory: all, ungrouped (empty), mi300x and a group per rack
    of RACK hosts."""
    groups = {"all": list(hosts), "ungrouped": [], "mi300x": list(hosts)}
    for start in range(0, len(hosts), RACK):
        groups[f"rack{start // RACK:04d}"] = hosts[start:start + RACK]
    return groups


def write_report_files(nodes: int, folder: Path, facts: dict[str, Any]) -> list[str]:
    """The fleet's report files in SLICES slice folders, as the tune/verify actions and the slices' fleet reports
    write them (report_files.write_report, plugin_utils/fleet_reports.failure_record); returns the folders. The text
    of each kind of node (clean, drifted, a GPU fewer; per slice) is encoded once and its node name put in per file:
    what is measured is the reading, not this."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.audit.report import node_report, report_file_name
    from ansible_collections.nodetune.instinct.plugins.module_utils.json_text import one_per_line
    from ansible_collections.nodetune.instinct.plugins.plugin_utils import fleet_reports
    from ansible_collections.nodetune.instinct.plugins.plugin_utils.report_files import with_checks

    lost = dict(facts, gpu_count=facts["gpu_count"] - 1)
    results = FleetResults(nodes)
    slices = [folder / f"slice-{n}" for n in range(1, SLICES + 1)]
    for path in slices:
        (path / "nodes").mkdir(parents=True)
        (path / "failed").mkdir()
    templates: dict[tuple[int, str, int], str] = {}
    placeholder = "@@NODE@@"
    for index, host in enumerate(results.hosts):
        part = index % SLICES
        rack = index // RACK
        run = {"id": f"bench:{1000 + part}:1767225000", "controller": "bench", "started": 1767225000.0,
               "time": 1767225600.0 + part}
        groups = {"all": nodes, "mi300x": nodes, f"rack{rack:04d}": min(RACK, nodes - rack * RACK)}
        result = results[host]
        if result.get("failed"):
            record = fleet_reports.failure_record(host, result["msg"], {"run": run, "groups": groups})
            (slices[part] / "failed" / report_file_name(host)).write_text(one_per_line(record, "findings", indent=4))
            continue
        kind = "lost" if index % 100 == 51 else ("drifted" if index % 10 == 3 else "clean")
        key = (part, kind, groups[f"rack{rack:04d}"])
        if key not in templates:
            report = node_report(placeholder, result["findings"], {"drift": kind == "drifted"},
                                 timestamp=1767225590.0, extra={"inventory": lost if kind == "lost" else facts})
            report.update(run=run, groups={"all": nodes, "mi300x": nodes, "@@RACK@@": groups[f"rack{rack:04d}"]})
            templates[key] = one_per_line(with_checks(report), "findings", indent=4, ensure_ascii=False)
        text = templates[key].replace(placeholder, host, 1).replace("@@RACK@@", f"rack{rack:04d}", 1)
        (slices[part] / "nodes" / report_file_name(host)).write_text(text)
    return [str(path) for path in slices]


def files_child(nodes: int, sources: list[str]) -> dict[str, Any]:
    """``nodetune.report()`` over the slice folders into a new output folder: seconds and peak memory."""
    import nodetune

    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with tempfile.TemporaryDirectory(prefix="nodetune-bench-fleet-out-") as out:
        wall, cpu = time.perf_counter(), time.process_time()
        done = nodetune.report(sources, out)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        sizes = {Path(f).name: os.path.getsize(f) for f in done.files}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"nodes": nodes, "seconds": round(wall, 3), "cpu_seconds": round(cpu, 3), "peak_rss_bytes": peak,
            "baseline_rss_bytes": base_rss, "summary_counts": done.summary["counts"],
            "outliers": len(done.outliers), "learned_nodes": len(done.learned_findings), "file_bytes": sizes}


def child(nodes: int, layout_file: str) -> dict[str, Any]:
    """One fleet size, in this process: seconds per writer and the peak resident memory."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.audit import report
    from ansible_collections.nodetune.instinct.plugins.plugin_utils import fleet_reports

    from nodetune import picture

    results = FleetResults(nodes)
    topology, layout, _facts = json.loads(Path(layout_file).read_text())
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}

    def now() -> tuple[float, float]:
        return time.perf_counter(), time.process_time()

    def timed(name: str, started: tuple[float, float]) -> None:
        wall[name] = time.perf_counter() - started[0]
        cpu[name] = time.process_time() - started[1]

    with tempfile.TemporaryDirectory(prefix="nodetune-bench-reports-") as out:
        started = now()
        digests = report.digest_results(results)
        summary = report.fleet_summary({}, digests=digests)
        junit = report.junit_xml({}, digests=digests)
        Path(out, "summary.json").write_text(json.dumps(summary, indent=4, sort_keys=True) + "\n")
        Path(out, "junit.xml").write_text(junit)
        timed("reports", started)
        junit_bytes = len(junit)
        del junit

        started = now()
        series = 0
        for host in results:
            result = results[host]
            if isinstance(result.get("findings"), list):
                text = report.prometheus_text(result["findings"], timestamp=1767225600.0)
                series = max(series, sum(1 for line in text.splitlines() if line and not line.startswith("#")))
        timed("prometheus", started)

        # The run_once fleet_report of a play (the action's path): the results as entries with each host's
        # inventory groups, every output built and written, the failed nodes' records.
        groups = inventory_groups(results.hosts)
        started = now()
        run = {"id": "bench:1:1767225000", "controller": "bench", "started": 1767225000.0, "time": 1767225600.0}
        play_dir = os.path.join(out, "play")
        outputs = fleet_reports.build(fleet_reports.play_entries(((host, results[host]) for host in results.hosts),
                                                                 groups, run, play_dir))
        fleet_reports.write_files(play_dir, outputs, fleet_reports.play_failures(outputs.summary["failed"], groups,
                                                                                 run))
        timed("play", started)
        del outputs
        # Each host's inventory groups, side by side: in one pass over the groups (play_entries), and host by host
        # through every group (what play_entries did before, and report_context does for the one host it has)
        started = now()
        one_pass = fleet_reports.groups_of_hosts(groups)
        timed("groups in one pass", started)
        started = now()
        host_by_host = {host: fleet_reports.host_groups(groups, host) for host in results.hosts}
        timed("groups host by host", started)
        if one_pass != host_by_host:
            raise SystemExit("groups_of_hosts and host_groups disagree")
        del one_pass, host_by_host

        started = now()
        records = [picture.NodeDrift(d["host"], "failed" if d["outcome"] != "ok" else
                                     ("drift" if any(g["status"] == "drift" for g in d["groups"]) else "ok"),
                                     (), d["message"] or None, d["groups"]) for d in digests]
        page = picture.fleet_page([(d["host"], topology, layout) for d in digests if d["outcome"] == "ok"], records)
        Path(out, "fleet.html").write_text(page)
        timed("picture", started)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"nodes": nodes, "seconds": {k: round(v, 3) for k, v in wall.items()},
            "cpu_seconds": {k: round(v, 3) for k, v in cpu.items()},
            "total_s": round(wall["reports"] + wall["picture"], 3),
            "total_cpu_s": round(cpu["reports"] + cpu["picture"], 3), "peak_rss_bytes": peak,
            "baseline_rss_bytes": base_rss,
            "summary_counts": summary["counts"], "junit_bytes": junit_bytes, "page_bytes": len(page),
            "max_prometheus_series_per_node": series}


def run(sizes: list[int], ratio_lines: list[str]) -> dict[str, Any]:
    """Each size in a child process, from the results then from report files; prints one line per size and kind,
    and the ratio lines."""
    print(f"\nfleet reports: sizes {','.join(map(str, sizes))}; {_common.load_text()}", flush=True)
    rows = []
    from_files = []
    lab = _lab_layout()
    with tempfile.NamedTemporaryFile("w", prefix="nodetune-bench-layout-", suffix=".json") as layout_file:
        layout_file.write(json.dumps(lab))
        layout_file.flush()
        for nodes in sizes:
            rows.append(_run_child(nodes, layout_file.name))
            from_files.append(_run_files_child(nodes, lab[2]))
    first, last = rows[0], rows[-1]
    growth = (last["total_cpu_s"] / last["nodes"]) / (first["total_cpu_s"] / first["nodes"])
    budget = TARGET_S * last["nodes"] / 10000
    ok = last["total_cpu_s"] < budget and last["peak_rss_bytes"] < TARGET_BYTES
    ratio_lines.append(f"ratio fleet reports N={last['nodes']}: {last['total_cpu_s']:.1f} s CPU "
                       f"({last['total_s']:.1f} s wall), {last['peak_rss_bytes'] / (1 << 20):.0f} MiB peak "
                       f"(target < 60 s and 2 GiB at 10,000 nodes): {'OK' if ok else 'OVER'}")
    ratio_lines.append(f"ratio fleet reports growth: CPU time per node x{growth:.2f} from {first['nodes']} to "
                       f"{last['nodes']} nodes (target <= 1.5, linear): {'OK' if growth <= 1.5 else 'OVER'}")
    cpu = last["cpu_seconds"]
    faster = _common.ratio(cpu["groups host by host"], cpu["groups in one pass"])
    ratio_lines.append(f"ratio fleet report of a play N={last['nodes']}: {cpu['play']:.1f} s CPU (the run_once "
                       f"fleet_report: the results with their inventory groups, every output built and written); "
                       f"each host's inventory groups in one pass {cpu['groups in one pass'] * 1e3:.0f} ms, host "
                       f"by host {cpu['groups host by host']:.2f} s"
                       f"{f' (x{faster:.0f})' if faster != float('inf') else ''} (informational)")
    files = from_files[-1]
    budget = TARGET_S * files["nodes"] / 10000
    ok = files["cpu_seconds"] < budget and files["peak_rss_bytes"] < TARGET_BYTES
    ratio_lines.append(f"ratio fleet reports from files N={files['nodes']}: {files['cpu_seconds']:.1f} s CPU "
                       f"({files['seconds']:.1f} s wall), {files['peak_rss_bytes'] / (1 << 20):.0f} MiB peak; from "
                       f"the results {last['total_cpu_s']:.1f} s CPU (target < 60 s and 2 GiB at 10,000 nodes): "
                       f"{'OK' if ok else 'OVER'}")
    return {"sizes": rows, "growth_per_node": round(growth, 3), "from_files": from_files}


def _run_files_child(nodes: int, facts: dict[str, Any]) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="nodetune-bench-report-files-"))
    try:
        started = time.perf_counter()
        sources = write_report_files(nodes, folder, facts)
        written = time.perf_counter() - started
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--files-child", str(nodes), *sources],
                              capture_output=True, text=True, check=False, timeout=1800)
        if proc.returncode != 0:
            raise SystemExit(f"fleet reports from files N={nodes} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        row["files_bytes"] = sum(p.stat().st_size for p in folder.glob("slice-*/*/*.json"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"  N={nodes} from report files: {row['seconds']:.2f} s ({row['cpu_seconds']:.2f} s CPU), peak memory "
          f"{row['peak_rss_bytes'] / (1 << 20):.0f} MiB; {row['files_bytes'] / (1 << 20):.0f} MiB of report files "
          f"in {SLICES} slice folders (written in {written:.1f} s, not timed); nodes {row['summary_counts']}, "
          f"outliers {row['outliers']}, learned on {row['learned_nodes']} nodes", flush=True)
    return row


def _run_child(nodes: int, layout_file: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(nodes), layout_file],
                          capture_output=True, text=True, check=False, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"fleet reports N={nodes} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    parts = ", ".join(f"{name} {sec:.2f} s ({row['cpu_seconds'][name]:.2f} s CPU)"
                      for name, sec in row["seconds"].items())
    print(f"  N={nodes}: {parts}; controller total {row['total_s']:.2f} s wall, {row['total_cpu_s']:.2f} s CPU, "
          f"peak memory "
          f"{row['peak_rss_bytes'] / (1 << 20):.0f} MiB; Prometheus series per node "
          f"{row['max_prometheus_series_per_node']}; nodes {row['summary_counts']}", flush=True)
    return row


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--nodes takes whole numbers, comma-separated, got {text!r}") from None
    if len(sizes) < 2 or any(n < 1 for n in sizes):
        raise argparse.ArgumentTypeError(f"--nodes takes at least two sizes >= 1 (growth is their ratio), got {text!r}")
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=parse_sizes, default=list(DEFAULT_SIZES), help="fleet sizes (1000,10000)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--files-child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(int(args.child[0]), args.child[1])))
        return 0
    if args.files_child:
        print(json.dumps(files_child(int(args.files_child[0]), args.files_child[1:])))
        return 0
    lines: list[str] = []
    run(args.nodes, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
