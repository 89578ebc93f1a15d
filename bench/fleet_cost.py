#!/usr/bin/env python3
"""What site.yml costs over a fleet of simulated nodes, as a multiple of a one-task ping playbook.

Run from the repository root (after ``scripts/bootstrap.sh``)::

    .venv/bin/python bench/fleet_cost.py [--nodes 1,8,32,64] [--repeat 3] [--mitogen auto|yes|no]
                                         [--workdir DIR] [--keep]
                                         [--specs mi250,mi300x] [--cases ping,site,...]

(``bench/run.py`` runs this with the discovery and planner benchmarks.) Builds the largest fleet once (half the
MI250 spec, half the MI300X spec of inventories/lab/specs; each spec is built once and copied, in /dev/shm where it
exists), writes an inventory per fleet size with the lab's opt-ins, and times, with the repository's ansible.cfg:

- ``ping``: one ``ansible.builtin.ping`` task (the unit of cost: one module call per host);
- ``site``: site.yml on fresh nodes (the lab play skips them: they exist), which applies and verifies;
- ``site (no-op)``: site.yml again, nothing to change;
- ``apply (no-op)``: playbooks/apply.yml alone, nothing to change.

``--specs mi300x`` builds every node from that spec alone (the full-size MI300X node: 384 CPUs, 8 GPUs, ~1,064
changes on a first run), ``--cases`` times only the cases named (ping always: the unit). With more than one fleet
size, ``peak MB`` per host closes the table: the least-squares slope of each case's peak over N, beside ping's (the
controller's memory per host; issue 28's goal: <= 0.1 MB per host on a first run and on a rerun).

Each round puts the nodes back to their fresh state (untimed: only the files a run changed are restored), then runs
the four, ping first in even rounds and last in odd ones; the medians of ``--repeat`` rounds are compared.
Targets (issue 13): site <= 2.5x ping, a no-op rerun <= 1.5x ping. With mitogen installed (it is not a
dependency: ``pip install mitogen==0.3.54``), the same runs are repeated with its ``mitogen_linear`` strategy.

Over real SSH (root, with openssh-server and sudo) the fleet is measured by bench/fleet_ssh.py (a throw-away sshd
on 127.0.0.1, a sudo user, ``become: true``, pipelining off and on side by side, the nodes' CPU counted apart from the
controller's; issue 28's targets), which builds its nodes with this module's Fleet; ``bench/run.py --connection ssh``
runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

_common.use_repository_code()
from ansible_collections.nodetune.lab.plugins.module_utils import simnode  # noqa: E402

from tests.support import sshd  # noqa: E402

REPO = _common.REPO
SPECS = ("mi250", "mi300x")
SPEC_DIR = REPO / "inventories" / "lab" / "specs"
PING = "- name: Ping\n  hosts: all\n  gather_facts: false\n  tasks:\n    - name: Ping\n      ansible.builtin.ping:\n"
# "site (no cache)": site.yml with the modules' bytecode cache off (NODETUNE_BYTECODE_CACHE=0), as the first run
# after an install or upgrade costs each node; the other runs find the cache warm, as every later run does.
CASES = ("ping", "site", "site (no cache)", "site (no-op)", "apply (no-op)")
TARGETS = {"site": 2.5, "site (no cache)": 2.5, "site (no-op)": 1.5}
DEFAULT_SIZES = (1, 8, 32, 64)
CONNECTIONS = ("local", "ssh")
LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
NODE_ENTRIES = 40_000  # files, folders and links of one lab node tree (the MI300X spec: 38,937)


# --------------------------------------------------------------------------------------------- the nodes
Manifest = dict[str, tuple[str, int, int, str]]


def snapshot(root: Path) -> Manifest:
    """Every entry below ``root``: kind, size, mtime (ns), link target. Writes change the mtime of a file."""
    manifest: Manifest = {}
    pending = [""]
    while pending:
        rel_dir = pending.pop()
        with os.scandir(root / rel_dir if rel_dir else root) as entries:
            for entry in entries:
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                st = entry.stat(follow_symlinks=False)
                if entry.is_symlink():
                    manifest[rel] = ("link", 0, 0, os.readlink(entry.path))
                elif entry.is_dir(follow_symlinks=False):
                    manifest[rel] = ("dir", 0, 0, "")
                    pending.append(rel)
                else:
                    manifest[rel] = ("file", st.st_size, st.st_mtime_ns, "")
    return manifest


def restore(node: Path, template: Path, manifest: Manifest) -> int:
    """Put ``node`` (a copy of ``template``) back as it was: changed files copied again, new entries removed,
    removed ones recreated. Returns how many entries it touched."""
    current = snapshot(node)
    touched = 0
    for rel in sorted(set(current) - set(manifest), reverse=True):  # children before parents
        path = node / rel
        if current[rel][0] == "dir":
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            path.unlink()
        touched += 1
    for rel in sorted(manifest):
        want, have = manifest[rel], current.get(rel)
        if have == want:
            continue
        path, source = node / rel, template / rel
        if have is not None and have[0] != want[0]:
            if have[0] == "dir":
                shutil.rmtree(path)
            else:
                path.unlink()
        if want[0] == "dir":
            path.mkdir(exist_ok=True)
        elif want[0] == "link":
            if os.path.lexists(path):
                path.unlink()
            os.symlink(want[3], path)
        else:
            shutil.copy2(source, path)
        touched += 1
    return touched


def copy_tree(source: Path, dest: Path) -> None:
    """``cp -a`` (2-3x faster than shutil.copytree on a 39,000-entry node tree); keeps mtimes to the nanosecond."""
    cp = shutil.which("cp")
    if cp and subprocess.run([cp, "-a", str(source), str(dest)], check=False).returncode == 0:
        return
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(source, dest, symlinks=True)


@dataclass
class Node:
    name: str
    path: Path
    spec: str


class Fleet:
    """Simulated nodes in ``workdir``: one template per spec, the nodes are its copies, restorable to fresh."""

    def __init__(self, workdir: Path, connection_vars: dict | None = None, specs: tuple[str, ...] = SPECS) -> None:
        self.workdir = workdir
        self.specs = specs
        self.connection_vars = connection_vars or LOCAL  # how the playbooks reach the nodes
        self.templates: dict[str, Path] = {}
        self.manifests: dict[str, Manifest] = {}
        self.nodes: list[Node] = []

    def build(self, count: int) -> None:
        for index in range(len(self.nodes), count):
            spec = self.specs[index % len(self.specs)]
            template = self._template(spec)
            dest = self.workdir / "nodes" / f"{spec}-{index:03d}"
            if not dest.exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                copy_tree(template, dest)
            else:
                restore(dest, template, self.manifests[spec])
            self.nodes.append(Node(dest.name, dest, spec))

    def _template(self, spec: str) -> Path:
        if spec not in self.templates:
            template = self.workdir / "templates" / spec
            if not template.exists():
                simnode.build(str(SPEC_DIR / f"{spec}.yml"), str(template))
            self.templates[spec] = template
            self.manifests[spec] = snapshot(template)
        return self.templates[spec]

    def restore(self, count: int) -> int:
        return sum(restore(n.path, self.templates[n.spec], self.manifests[n.spec]) for n in self.nodes[:count])

    def inventory(self, count: int) -> Path:
        """An inventory of the first ``count`` nodes, with the lab's opt-ins (group_vars next to it)."""
        group_vars = self.workdir / "group_vars" / "all"
        group_vars.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "inventories" / "lab" / "group_vars" / "all" / "tuning.yml", group_vars / "tuning.yml")
        (group_vars / "reports.yml").write_text(f"nodetune_report_dir: {self.workdir / 'reports'}\n")
        hosts = {n.name: {"nodetune_root": str(n.path), "nodetune_sim_spec": str(SPEC_DIR / f"{n.spec}.yml")}
                 for n in self.nodes[:count]}
        # in a group, not in all's variables: the controller's tasks (delegate_to localhost) stay local over SSH
        inventory = {"all": {"children": {"fleet": {"hosts": hosts, "vars": {
            **self.connection_vars, "nodetune_lab_backend": "simulated"}}}}}
        path = self.workdir / f"hosts-{count}.yml"
        path.write_text(json.dumps(inventory, indent=1))  # JSON is YAML
        (self.workdir / "ping.yml").write_text(PING)
        return path


# --------------------------------------------------------------------------------------------- the runs
def mitogen_strategy_dir() -> Path | None:
    """The strategy plugins folder of an installed mitogen, or None."""
    try:
        import ansible_mitogen  # type: ignore[import-not-found]
    except ImportError:
        return None
    folder = Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"
    return folder if folder.is_dir() else None


def playbook_env(strategy: str) -> dict[str, str]:
    env = _common.ansible_env(ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="0")
    env.pop("ANSIBLE_CONFIG", None)  # the repository's ansible.cfg (cwd), as a user runs it
    if strategy == "mitogen":
        folder = mitogen_strategy_dir()
        if folder is None:
            raise SystemExit("mitogen is not installed in this Python environment (pip install mitogen==0.3.54)")
        env.update(ANSIBLE_STRATEGY_PLUGINS=str(folder), ANSIBLE_STRATEGY="mitogen_linear")
    return env


def run_playbook(inventory: Path, playbook: str, env: dict[str, str], label: str) -> _common.Sample:
    sample = _common.run_timed(["ansible-playbook", "-i", str(inventory), playbook], env=env)
    if sample.returncode != 0:
        raise SystemExit(f"{label}: {playbook} failed (rc={sample.returncode}):\n{sample.stdout[-4000:]}"
                         f"{sample.stderr[-2000:]}")
    recap = sample.stdout[sample.stdout.rfind("PLAY RECAP"):]
    if label.endswith("(no-op)") and re.search(r"changed=[1-9]", recap):
        print(f"warning: {label} changed something:\n{recap}", file=sys.stderr)
    if label in ("site", "site (no cache)") and not re.search(r"changed=[1-9]", recap):
        print(f"warning: {label} on fresh nodes changed nothing (were they fresh?):\n{recap}", file=sys.stderr)
    return sample


def measure(fleet: Fleet, count: int, rounds: int, strategy: str, cases: tuple[str, ...] = CASES
            ) -> dict[str, _common.Series]:
    """Medians of ``rounds`` interleaved rounds of the cases over the first ``count`` nodes."""
    inventory = fleet.inventory(count)
    env = playbook_env(strategy)
    ping = str(fleet.workdir / "ping.yml")
    series = {name: _common.Series(name) for name in cases}
    for index in range(rounds):
        order = list(cases) if index % 2 == 0 else list(cases[1:]) + [cases[0]]
        for case in order:
            if case in ("site", "site (no cache)"):
                fleet.restore(count)  # fresh nodes
            playbook = {"ping": ping, "site": "site.yml", "site (no cache)": "site.yml", "site (no-op)": "site.yml",
                        "apply (no-op)": "playbooks/apply.yml"}[case]
            case_env = dict(env, NODETUNE_BYTECODE_CACHE="0") if case == "site (no cache)" else env
            series[case].samples.append(run_playbook(inventory, playbook, case_env, case))
    return series


def report(count: int, strategy: str, series: dict[str, _common.Series]) -> tuple[str, list[str], dict]:
    """The table for one fleet size, its ratio lines, and the figures as data."""
    ping = series["ping"]
    rows, figures = [], {}
    for name, s in series.items():
        wall_x, cpu_x = _common.ratio(s.wall, ping.wall), _common.ratio(s.cpu, ping.cpu)
        rows.append([name, s.wall, wall_x, s.cpu, cpu_x, s.wall / count, s.cpu / count, s.max_rss_mb])
        figures[name] = {"wall_s": round(s.wall, 3), "cpu_s": round(s.cpu, 3), "wall_x_ping": round(wall_x, 2),
                         "cpu_x_ping": round(cpu_x, 2), "wall_s_per_node": round(s.wall / count, 3),
                         "cpu_s_per_node": round(s.cpu / count, 3), "max_rss_mb": round(s.max_rss_mb, 1),
                         "runs": len(s.samples)}
    # peak MB: the largest process of the run (the controller's main process, which keeps every host's registered
    # result to the end of the play); its growth with N is the controller's memory per host
    text = _common.table(["run", "wall s", "x ping", "cpu s", "x ping", "wall s/node", "cpu s/node", "peak MB"], rows)
    lines = []
    for name, target in TARGETS.items():
        if name not in figures:
            continue
        fig = figures[name]
        lines.append(f"ratio fleet[{strategy}] N={count} {name}: {fig['wall_x_ping']:.2f}x ping wall, "
                     f"{fig['cpu_x_ping']:.2f}x ping CPU (target <= {target:g}x): "
                     f"{_common.verdict(fig['wall_x_ping'], target)}")
    return text, lines, figures


def slope(points: list[tuple[int, float]]) -> float:
    """The least-squares slope of ``(n, value)`` points (0 for fewer than two sizes)."""
    if len({n for n, _value in points}) < 2:
        return 0.0
    mean_n = sum(n for n, _value in points) / len(points)
    mean_v = sum(v for _n, v in points) / len(points)
    return (sum((n - mean_n) * (v - mean_v) for n, v in points)
            / sum((n - mean_n) ** 2 for n, _value in points))


def memory_report(by_size: dict[str, dict]) -> tuple[str, dict[str, float]]:
    """Peak MB per fleet size and case, and its growth per host (the slope over N) beside ping's."""
    sizes = sorted(by_size, key=int)
    names = list(by_size[sizes[0]])
    growth = {name: slope([(int(n), by_size[n][name]["max_rss_mb"]) for n in sizes]) for name in names}
    rows = [[name, *(by_size[n][name]["max_rss_mb"] for n in sizes), growth[name]] for name in names]
    text = _common.table(["peak MB", *(f"N={n}" for n in sizes), "MB/host"], rows)
    return text, {name: round(value, 4) for name, value in growth.items()}


# --------------------------------------------------------------------------------------------- what bounds it
def module_costs(fleet: Fleet, rounds: int) -> dict[str, _common.Series]:
    """CPU of the module processes alone, per call, on one node of each spec: ping's; site.yml's one call (tune with
    the audit) on a fresh node (the writes) and on a tuned node (a no-op); verify.yml's (the audit alone). Each is
    the AnsiballZ file Ansible ran (kept with
    ANSIBLE_KEEP_REMOTE_FILES), run again as is, so it includes the interpreter start, the unpacking and the
    imports Ansible compiles at every call (AnsiballZ has no bytecode cache). What the controller adds per task is
    the rest of a ping run's cost per node."""
    import glob

    env = dict(playbook_env("stock"), ANSIBLE_KEEP_REMOTE_FILES="1")
    series: dict[str, _common.Series] = {}
    for node in {n.spec: n for n in reversed(fleet.nodes)}.values():
        remote_tmp = fleet.workdir / "remote-tmp" / node.spec
        shutil.rmtree(remote_tmp, ignore_errors=True)
        inventory = fleet.workdir / f"hosts-{node.name}.yml"
        inventory.write_text(json.dumps({"all": {"hosts": {node.name: {
            "nodetune_root": str(node.path), "nodetune_sim_spec": str(SPEC_DIR / f"{node.spec}.yml")}}, "vars": {
            "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
            "nodetune_lab_backend": "simulated", "ansible_remote_tmp": str(remote_tmp)}}}))
        restore(node.path, fleet.templates[node.spec], fleet.manifests[node.spec])
        for playbook in (str(fleet.workdir / "ping.yml"), "site.yml", "playbooks/verify.yml"):
            run_playbook(inventory, playbook, env, f"module files ({node.spec})")
        files = {}
        for module in ("ping", "tune", "verify"):
            found = sorted(glob.glob(str(remote_tmp / "ansible-tmp-*" / f"AnsiballZ_{module}.py")))
            if not found:
                raise SystemExit(f"no AnsiballZ_{module}.py kept under {remote_tmp}")
            files[module] = found[0]

        def call(module: str, fresh: bool = False, spec: str = node.spec, path: Path = node.path,
                 files: dict[str, str] = files, cache: bool = True) -> _common.Sample:
            if fresh:
                restore(path, fleet.templates[spec], fleet.manifests[spec])
            env = dict(os.environ) if cache else dict(os.environ, NODETUNE_BYTECODE_CACHE="0")
            sample = _common.run_timed([sys.executable, files[module]], cwd=path.parent, env=env)
            if sample.returncode != 0 or '"failed": true' in sample.stdout:
                raise SystemExit(f"{files[module]} failed:\n{sample.stdout[-2000:]}{sample.stderr[-2000:]}")
            return sample

        cases = [(f"{node.spec} ping", lambda call=call: call("ping")),
                 (f"{node.spec} tune+verify (fresh node)", lambda call=call: call("tune", fresh=True)),
                 (f"{node.spec} tune+verify (no-op)", lambda call=call: call("tune")),
                 (f"{node.spec} tune+verify (no-op, no cache)", lambda call=call: call("tune", cache=False)),
                 (f"{node.spec} verify alone", lambda call=call: call("verify"))]
        series.update(_common.interleaved(cases, rounds, rotate=False))
        shutil.rmtree(remote_tmp, ignore_errors=True)
        restore(node.path, fleet.templates[node.spec], fleet.manifests[node.spec])
    return series


def bound_report(costs: dict[str, _common.Series], ping_task_cpu: float) -> tuple[str, dict]:
    """The module processes' CPU per call, and what site.yml's one module call per node must cost at least."""
    rows, figures = [], {}
    for name, s in costs.items():
        rows.append([name, s.wall, s.cpu])
        figures[name] = {"wall_s": round(s.wall, 3), "cpu_s": round(s.cpu, 3)}
    text = _common.table(["module process (one call)", "wall s", "cpu s"], rows)
    specs = sorted({name.split()[0] for name in costs})
    for spec in specs:
        ping = costs[f"{spec} ping"].cpu
        controller = max(ping_task_cpu - ping, 0.0)  # what a task costs the controller per host, beyond the module
        full = controller + costs[f"{spec} tune+verify (fresh node)"].cpu
        noop = controller + costs[f"{spec} tune+verify (no-op)"].cpu
        figures[f"{spec} floor"] = {"controller_cpu_s_per_task": round(controller, 3), "site_cpu_s": round(full, 3),
                                    "site_x_ping": round(full / ping_task_cpu, 2), "noop_cpu_s": round(noop, 3),
                                    "noop_x_ping": round(noop / ping_task_cpu, 2)}
        text += (f"\n{spec}: a ping task costs {ping_task_cpu:.2f} s CPU per node ({ping:.2f} s its module process, "
                 f"{controller:.2f} s the controller); site.yml's one module call per node costs, with a ping task's "
                 f"controller share, {full:.2f} s = {full / ping_task_cpu:.1f}x ping on a fresh node, {noop:.2f} s = "
                 f"{noop / ping_task_cpu:.1f}x ping on a tuned one (run_once report tasks and play set-up on top)")
    return text, figures


def strategies(choice: str) -> list[str]:
    if choice == "no":
        return ["stock"]
    if choice == "yes" or mitogen_strategy_dir() is not None:
        return ["stock", "mitogen"]
    return ["stock"]


def run(sizes: list[int], rounds: int, mitogen: str, workdir: Path | None, keep: bool,
        out: list[str] | None = None, bound: bool = True,
        specs: tuple[str, ...] = SPECS, cases: tuple[str, ...] = CASES) -> dict:
    """Measure every fleet size with every strategy over the local connection (bench/fleet_ssh.py measures over
    SSH, with this module's fleet); print as it goes; return the figures (and ratio lines in ``out``)."""
    return _run(sizes, rounds, mitogen, workdir, keep, out, bound, None, specs, cases)


def _run(sizes: list[int], rounds: int, mitogen: str, workdir: Path | None, keep: bool, out: list[str] | None,
         bound: bool, server: sshd.SshServer | None, specs: tuple[str, ...] = SPECS,
         cases: tuple[str, ...] = CASES) -> dict:
    folder = workdir or _common.shm_dir("nodetune-fleet-", inodes=NODE_ENTRIES * (max(sizes) + len(specs)))
    if server:
        folder.chmod(0o755)  # the SSH user reaches the nodes' folder (root writes them, through sudo)
    results: dict = {"sizes": sizes, "rounds": rounds, "connection": "ssh" if server else "local", "strategies": {}}
    try:
        fleet = Fleet(folder, server.host_vars() if server else None, specs)
        build = _common.timed_call(lambda: fleet.build(max(sizes)))
        print(f"fleet: {max(sizes)} simulated nodes in {folder} ({build.wall:.0f} s to build); "
              f"{_common.load_text()}{_common.storage_note(folder)}", flush=True)
        for strategy in strategies(mitogen):
            results["strategies"][strategy] = {}
            for count in sizes:
                series = measure(fleet, count, rounds, strategy, cases)
                label = f"{strategy}, ssh" if server else strategy
                text, lines, figures = report(count, label, series)
                print(f"\nfleet[{label}] N={count} (median of {rounds}; {_common.load_text()})\n{text}")
                print("\n".join(lines), flush=True)
                if out is not None:
                    out.extend(lines)
                results["strategies"][strategy][str(count)] = figures
            if len(sizes) > 1:
                text, growth = memory_report(results["strategies"][strategy])
                print(f"\nfleet[{strategy}] controller memory: peak MB by fleet size, growth per host\n{text}",
                      flush=True)
                results.setdefault("peak_mb_per_host", {})[strategy] = growth
        if bound:
            costs = module_costs(fleet, rounds)
            largest = results["strategies"]["stock"][str(max(sizes))]["ping"]["cpu_s_per_node"]
            text, figures = bound_report(costs, largest)
            print(f"\nfleet: what bounds it (module processes, median of {rounds}; ping task at N={max(sizes)}; "
                  f"{_common.load_text()})\n{text}", flush=True)
            results["module_costs"] = figures
        if strategies(mitogen) == ["stock"] and mitogen != "no":
            note = "fleet: mitogen not installed, stock strategy only (pip install mitogen==0.3.54 to compare)"
            print(note)
            results["note"] = note
    finally:
        if not workdir and not keep:
            shutil.rmtree(folder, ignore_errors=True)
        elif keep:
            print(f"kept {folder}")
    return results


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--nodes takes fleet sizes like 1,8,32,64, got {text!r}") from None
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError(f"--nodes takes fleet sizes >= 1, got {text!r}")
    return sizes


def parse_specs(text: str) -> tuple[str, ...]:
    specs = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [spec for spec in specs if not (SPEC_DIR / f"{spec}.yml").is_file()]
    if not specs or unknown:
        raise argparse.ArgumentTypeError(f"--specs takes lab specs of {SPEC_DIR} (mi250, mi300x), got {text!r}")
    return specs


def parse_cases(text: str) -> tuple[str, ...]:
    wanted = {part.strip() for part in text.split(",") if part.strip()}
    unknown = sorted(wanted - set(CASES))
    if unknown:
        raise argparse.ArgumentTypeError(f"--cases takes {', '.join(CASES)}; not a case: {', '.join(unknown)}")
    return tuple(case for case in CASES if case in wanted or case == "ping")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=parse_sizes, default=list(DEFAULT_SIZES),
                        help="fleet sizes, comma-separated (default 1,8,32,64)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds per fleet size; medians are kept (default 3)")
    parser.add_argument("--mitogen", choices=("auto", "yes", "no"), default="auto",
                        help="also run with mitogen's strategy: where installed (auto), always, never")
    parser.add_argument("--workdir", type=Path, help="keep the nodes here (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="do not delete the temporary folder")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--no-bound", action="store_true", help="skip timing the module processes alone")
    parser.add_argument("--specs", type=parse_specs, default=SPECS,
                        help="the lab specs the nodes are built from, in turn (default mi250,mi300x)")
    parser.add_argument("--cases", type=parse_cases, default=CASES,
                        help="the runs to time, comma-separated (default every one; ping is always timed)")
    args = parser.parse_args()
    print(_common.machine_text(_common.machine()))
    results = run(args.nodes, max(1, args.repeat), args.mitogen, args.workdir, args.keep, bound=not args.no_bound,
                  specs=args.specs, cases=args.cases)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
