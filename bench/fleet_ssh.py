#!/usr/bin/env python3
"""What site.yml costs over real SSH, as a multiple of a one-task ping playbook, pipelining off and on side by side.

Run from the repository root, as root (it adds a user and a sudoers drop-in and starts sshd; Debian's
openssh-server and sudo)::

    .venv/bin/python bench/fleet_ssh.py [--nodes 64] [--repeat 2] [--pipelining off,on]
                                        [--cases ping,site,site (no-op)] [--workdir DIR] [--keep] [--json FILE]

(``bench/run.py --connection ssh`` runs this as its fleet part.) A throw-away sshd on 127.0.0.1 and a non-root
user with passwordless sudo (tests/support/sshd.py, as the SSH test lane uses), started and stopped here; every
node is reached through it with ``become: true`` and the system Python, as a real fleet is. The nodes are the fleet
bench's simulated lab nodes (bench/fleet_cost.py: half MI250, half MI300X, restored to fresh before each first run).

- Each node has its own SSH connection (its own ControlPath), as every host of a real fleet does; the connections
  are opened by an untimed ping and kept (ControlPersist 30 min instead of 60 s, so that the untimed restores
  between runs do not close them): every timed run finds them open, as runs in a row do.
- An untimed site.yml on fresh nodes first: the first run of all also writes the learned inventory files and the
  nodes' bytecode cache, which every later run finds (a real fleet's second run onwards).
- Per round, for each pipelining setting (``ANSIBLE_PIPELINING``, the order alternating by round): ping, site.yml
  on fresh nodes, site.yml again (the no-op rerun), ping first in even rounds and last in odd ones. Ratios are taken
  within a round and a setting (the same minutes of a shared machine), and the medians of the rounds reported.
  ``--cases`` adds ``site (no cache)`` (fresh nodes, the nodes' bytecode cache off through a wrapper of their Python:
  the first run after an install or upgrade) and ``apply (no-op)``.
- CPU: the controller's (``ansible-playbook`` and every child it waited for, plus the SSH connection masters,
  which run detached from it) and the nodes' (sshd and everything below it: the sessions, sudo, the module
  processes, counted by a cgroup of the server's own), read before and after each run, so that the other jobs of a
  shared machine are not counted. The CPU ratio to ping is split into what the nodes and what the controller add:
  here both share the same cores, where a real fleet's nodes each have their own.

Targets (issue 28): site.yml <= 2.5x ping and the no-op rerun <= 1.3x ping, wall time, at 64 nodes, with and without
pipelining.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
import fleet_cost  # noqa: E402

from tests.support import sshd  # noqa: E402

CASES = fleet_cost.CASES
DEFAULT_CASES = ("ping", "site", "site (no-op)")
PLAYBOOKS = {"site": "site.yml", "site (no cache)": "site.yml", "site (no-op)": "site.yml",
             "apply (no-op)": "playbooks/apply.yml"}
FRESH = ("site", "site (no cache)")  # the cases that start from fresh nodes
TARGETS = {"site": 2.5, "site (no cache)": 2.5, "site (no-op)": 1.3}
PIPELINING = ("off", "on")
DEFAULT_SIZES = (64,)
PERSIST = "30m"
COMPRESSION = False  # ssh -C, Ansible's default; the project's ansible.cfg leaves it out (--compression: with it)
# files, folders and links of one node tree by spec (inventories/lab/specs, at this commit), for the /dev/shm check
SPEC_ENTRIES = {"mi250": 30_000, "mi300x": 42_000}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------------------------- CPU
def _cgroup2_mount() -> Path | None:
    with open("/proc/self/mounts", encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            if len(fields) > 2 and fields[2] == "cgroup2":
                return Path(fields[1])
    return None


def _cgroup_of(pid: str) -> str:
    """The process's cgroup v2 path ("0::/path" in /proc/PID/cgroup)."""
    with open(f"/proc/{pid}/cgroup", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("0::"):
                return line[3:].strip()
    raise OSError(f"process {pid} is in no cgroup v2")


@contextlib.contextmanager
def node_cgroup() -> Iterator[Path | None]:
    """A cgroup (v2) of its own for the SSH server, where every session, sudo and module process it forks lands: its
    cpu.stat counts them all. Not its process tree: a child's times reach its parent only when the parent waits for
    it (proc(5) cutime; kernel/exit.c wait_task_zombie), and the tree kept 0.03 s of a 0.4 s command that sudo ran
    over ``ssh -tt`` (as Ansible runs a module without pipelining; Debian's sudo has ``use_pty``) or over a connection
    that then closed (tests/core/test_bench_ssh.py). Made empty, below this process's own; the server joins it
    (:func:`join`) and it is removed after the server stopped. None where no cgroup v2 is writable."""
    mount = _cgroup2_mount()
    group = None
    try:
        if mount is not None:
            group = mount / _cgroup_of("self").lstrip("/") / f"nodetune-bench-ssh-{os.getpid()}"
            group.mkdir()
    except OSError as exc:
        print(f"fleet over SSH: no cgroup for the nodes' CPU ({exc}); node CPU is not measured", file=sys.stderr)
        group = None
    try:
        yield group
    finally:
        if group is not None:
            _remove_cgroup(group)


def join(group: Path | None, pid: str) -> Path | None:
    """Move the process into the group (its children to come follow it); the group, or None where that failed."""
    if group is None:
        return None
    try:
        (group / "cgroup.procs").write_text(pid)
    except OSError as exc:
        print(f"fleet over SSH: the server could not join {group} ({exc}); node CPU is not measured", file=sys.stderr)
        return None
    return group


def _remove_cgroup(group: Path) -> None:
    """Once the server is stopped: what it left running (a session sudo orphaned) is ended, then the group goes."""
    for _attempt in range(50):
        with contextlib.suppress(OSError):
            group.rmdir()
            return
        for pid in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.1)
    print(f"fleet over SSH: could not remove {group}", file=sys.stderr)


def _stat_fields(pid: str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None for a process that is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read()
    except OSError:
        return None
    return text[text.rfind(b")") + 2:].decode().split()


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


class SshCpu:
    """CPU used by the SSH side of the runs: the nodes' side (the server's cgroup), and the client's connection
    masters (on the controller: they detach from ansible-playbook, so its wait4 misses them; they live as long as
    the connections, so their own times, proc(5) utime + stime, are what they used)."""

    def __init__(self, server: sshd.SshServer, group: Path | None) -> None:
        self.group = group
        self.master_prefix = f"ssh: {server.folder}/cp/".encode()

    def read(self) -> tuple[float, float]:
        """(the connection masters' CPU s, the nodes' side CPU s, 0 where not measured), cumulative."""
        ticks = 0
        for entry in os.listdir("/proc"):
            fields = _stat_fields(entry) if entry.isdigit() else None
            if fields is not None and fields[1] == "1" and _cmdline(entry).startswith(self.master_prefix):
                ticks += int(fields[11]) + int(fields[12])
        return ticks / CLOCK_TICKS, self._group_usec() / 1e6

    def _group_usec(self) -> int:
        if self.group is None:
            return 0
        for line in (self.group / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1])
        return 0


# --------------------------------------------------------------------------------------------- the runs
@dataclass
class Run:
    wall: float
    controller_cpu: float  # ansible-playbook with its children, and the connection masters
    node_cpu: float  # sshd and everything below it
    masters_cpu: float  # the connection masters alone (part of controller_cpu): SSH's encryption, compression

    @property
    def cpu(self) -> float:
        return self.controller_cpu + self.node_cpu


@dataclass
class Series:
    name: str
    runs: list[Run] = field(default_factory=list)

    def median(self, attribute: str) -> float:
        return statistics.median(getattr(run, attribute) for run in self.runs)


def ssh_vars(server: sshd.SshServer) -> dict[str, object]:
    """The SSH lane's host variables, a connection per host (Ansible's default ControlPath is one per address, port
    and user: every node here is 127.0.0.1) and connections that outlive the untimed restores; the project's
    ansible.cfg ssh_args otherwise (ControlMaster, no ``-C``: ``--compression`` puts Ansible's default back)."""
    return {**server.host_vars(), "ansible_ssh_args": f"{'-C ' if COMPRESSION else ''}-o ControlMaster=auto "
                                                      f"-o ControlPersist={PERSIST}",
            "ansible_control_path": f"{server.folder}/cp/{{{{ inventory_hostname }}}}"}


def no_cache_inventory(fleet: fleet_cost.Fleet, inventory: Path) -> Path:
    """The inventory with the nodes' Python behind a wrapper that sets NODETUNE_BYTECODE_CACHE=0 (the controller's
    environment does not reach a node over SSH): the first run after an install or upgrade."""
    wrapper = fleet.workdir / "python3-no-bytecode-cache"
    wrapper.write_text('#!/bin/sh\nNODETUNE_BYTECODE_CACHE=0 exec /usr/bin/python3 "$@"\n')
    wrapper.chmod(0o755)
    data = json.loads(inventory.read_text())
    data["all"]["children"]["fleet"]["vars"]["ansible_python_interpreter"] = str(wrapper)
    path = inventory.with_name(f"{inventory.stem}-no-cache.yml")
    path.write_text(json.dumps(data, indent=1))
    return path


def playbook_env(pipelining: str) -> dict[str, str]:
    return dict(fleet_cost.playbook_env("stock"), ANSIBLE_PIPELINING="True" if pipelining == "on" else "False")


def timed(probe: SshCpu, inventory: Path, playbook: str, env: dict[str, str], label: str) -> Run:
    masters, server = probe.read()
    sample = fleet_cost.run_playbook(inventory, playbook, env, label)
    masters_after, server_after = probe.read()
    return Run(sample.wall, sample.cpu + masters_after - masters, server_after - server, masters_after - masters)


def warm_up(fleet: fleet_cost.Fleet, count: int, inventory: Path) -> None:
    """Open every node's connection, and run site.yml once on fresh nodes (the learned inventory files, the nodes'
    bytecode cache): untimed."""
    env = playbook_env("off")
    fleet_cost.run_playbook(inventory, str(fleet.workdir / "ping.yml"), env, "warm-up ping")
    fleet.restore(count)
    fleet_cost.run_playbook(inventory, "site.yml", env, "warm-up site")


def measure(fleet: fleet_cost.Fleet, probe: SshCpu, count: int, rounds: int, modes: tuple[str, ...],
            cases: tuple[str, ...]) -> dict[str, dict[str, Series]]:
    """``rounds`` interleaved rounds of every case under every pipelining setting over the first ``count`` nodes."""
    inventory = fleet.inventory(count)
    no_cache = no_cache_inventory(fleet, inventory) if "site (no cache)" in cases else inventory
    warm_up(fleet, count, inventory)
    ping = str(fleet.workdir / "ping.yml")
    series = {mode: {case: Series(case) for case in cases} for mode in modes}
    for index in range(rounds):
        for mode in modes if index % 2 == 0 else tuple(reversed(modes)):
            env = playbook_env(mode)
            for case in cases if index % 2 == 0 else cases[1:] + cases[:1]:
                if case in FRESH:
                    fleet.restore(count)
                hosts = no_cache if case == "site (no cache)" else inventory
                run = timed(probe, hosts, PLAYBOOKS.get(case, ping), env, case)  # the case: its warnings
                series[mode][case].runs.append(run)
    return series


# --------------------------------------------------------------------------------------------- the report
def figures(series: dict[str, Series], count: int) -> dict[str, dict[str, object]]:
    """Medians per case and the ratios to ping, each taken within a round (the same minutes for both sides): wall,
    CPU, and the CPU ratio's excess over 1 split into what the nodes and what the controller added."""
    ping = series["ping"]
    out: dict[str, dict[str, object]] = {}
    for name, case in series.items():
        pairs = list(zip(case.runs, ping.runs, strict=True))
        rounds_x = [round(_common.ratio(run.wall, base.wall), 2) for run, base in pairs]
        out[name] = {
            "wall_s": round(case.median("wall"), 3), "cpu_s": round(case.median("cpu"), 3),
            "controller_cpu_s": round(case.median("controller_cpu"), 3),
            "node_cpu_s": round(case.median("node_cpu"), 3), "ssh_masters_cpu_s": round(case.median("masters_cpu"), 3),
            "wall_x_ping": round(statistics.median(rounds_x), 2), "wall_x_ping_rounds": rounds_x,
            "cpu_x_ping": round(statistics.median(_common.ratio(run.cpu, base.cpu) for run, base in pairs), 2),
            "cpu_x_ping_from_nodes": round(statistics.median(
                _common.ratio(run.node_cpu - base.node_cpu, base.cpu) for run, base in pairs), 2),
            "cpu_x_ping_from_controller": round(statistics.median(
                _common.ratio(run.controller_cpu - base.controller_cpu, base.cpu) for run, base in pairs), 2),
            "wall_s_per_node": round(case.median("wall") / count, 3),
            "controller_cpu_s_per_node": round(case.median("controller_cpu") / count, 3),
            "node_cpu_s_per_node": round(case.median("node_cpu") / count, 3),
            "ssh_masters_cpu_s_per_node": round(case.median("masters_cpu") / count, 4),
            "runs": [{"wall_s": round(run.wall, 3), "controller_cpu_s": round(run.controller_cpu, 3),
                      "node_cpu_s": round(run.node_cpu, 3), "ssh_masters_cpu_s": round(run.masters_cpu, 3)}
                     for run in case.runs]}
    return out


def report(count: int, by_mode: dict[str, dict[str, dict[str, object]]]) -> tuple[str, list[str]]:
    """The table of every run and setting, the ratios side by side, and the ratio lines with their verdicts."""
    rows = []
    for mode, cases in by_mode.items():
        for name, fig in cases.items():
            rows.append([f"{name}, pipelining {mode}", fig["wall_s"], fig["wall_x_ping"], fig["cpu_s"],
                         fig["cpu_x_ping"], fig["wall_s_per_node"], fig["controller_cpu_s_per_node"],
                         fig["node_cpu_s_per_node"], fig["ssh_masters_cpu_s_per_node"]])
    text = _common.table(["run", "wall s", "x ping", "cpu s", "x ping", "wall s/node", "ctl cpu s/node",
                          "nodes cpu s/node", "ssh masters cpu s/node"], rows)
    modes = list(by_mode)
    names = [name for name in next(iter(by_mode.values())) if name != "ping"]
    side = [[name, *(_ratio_cell(by_mode[mode][name]) for mode in modes)] for name in names]
    text += ("\n\nx ping: wall (each round); CPU = 1 + what the nodes add + what the controller adds\n"
             + _common.table(["run", *(f"pipelining {mode}" for mode in modes)], side))
    lines = []
    for mode in modes:
        for name, target in TARGETS.items():
            fig = by_mode[mode].get(name)
            if fig is None:
                continue
            each = ", ".join(f"{value:.2f}" for value in fig["wall_x_ping_rounds"])
            lines.append(f"ratio fleet[ssh, pipelining {mode}] N={count} {name}: {fig['wall_x_ping']:.2f}x ping wall "
                         f"(rounds: {each}), {fig['cpu_x_ping']:.2f}x ping CPU (target <= {target:g}x): "
                         f"{_common.verdict(fig['wall_x_ping'], target)}")
    return text, lines


def _ratio_cell(fig: dict[str, object]) -> str:
    each = "/".join(f"{value:.2f}" for value in fig["wall_x_ping_rounds"])
    return (f"{fig['wall_x_ping']:.2f}x ({each}); CPU {fig['cpu_x_ping']:.2f}x = 1 "
            f"{fig['cpu_x_ping_from_nodes']:+.2f} nodes {fig['cpu_x_ping_from_controller']:+.2f} ctl")


# --------------------------------------------------------------------------------------------- the whole part
def fleet_folder(sizes: list[int], workdir: Path | None) -> Path:
    if workdir:
        workdir.mkdir(parents=True, exist_ok=True)
        return workdir
    largest = max(sizes)
    entries = sum(SPEC_ENTRIES[fleet_cost.SPECS[i % len(fleet_cost.SPECS)]] for i in range(largest))
    return _common.shm_dir("nodetune-fleet-ssh-", inodes=entries + sum(SPEC_ENTRIES.values()))


def run(sizes: list[int], rounds: int, modes: tuple[str, ...] = PIPELINING, cases: tuple[str, ...] = DEFAULT_CASES,
        workdir: Path | None = None, keep: bool = False, out: list[str] | None = None) -> dict:
    """Measure every fleet size under every pipelining setting; print as it goes; return the figures (and the ratio
    lines in ``out``)."""
    why = sshd.refusal()
    if why:
        raise SystemExit(f"fleet over SSH: {why}")
    folder = fleet_folder(sizes, workdir)
    folder.chmod(0o755)  # the SSH user reaches the nodes' folder (root writes them, through sudo)
    results: dict = {"connection": "ssh", "sizes": sizes, "rounds": rounds, "pipelining": list(modes),
                     "cases": list(cases), "ssh": {}}
    try:
        with node_cgroup() as group, sshd.sshd_server() as server:
            group = join(group, (server.folder / "sshd.pid").read_text().strip())
            fleet = fleet_cost.Fleet(folder, ssh_vars(server))
            build = _common.timed_call(lambda: fleet.build(max(sizes)))
            print(f"fleet over SSH: {max(sizes)} simulated nodes in {folder} ({build.wall:.0f} s to build), sshd on "
                  f"127.0.0.1:{server.port}, user {server.user} with sudo, ssh {'with' if COMPRESSION else 'without'} "
                  f"-C; {_common.load_text()}{_common.storage_note(folder)}", flush=True)
            probe = SshCpu(server, group)
            for count in sizes:
                series = measure(fleet, probe, count, rounds, modes, cases)
                by_mode = {mode: figures(series[mode], count) for mode in modes}
                text, lines = report(count, by_mode)
                print(f"\nfleet[ssh] N={count} (median of {rounds}; {_common.load_text()})\n{text}")
                print("\n".join(lines), flush=True)
                if out is not None:
                    out.extend(lines)
                results["ssh"][str(count)] = by_mode
    finally:
        if not workdir and not keep:
            shutil.rmtree(folder, ignore_errors=True)
        elif keep:
            print(f"kept {folder}")
    return results


def parse_modes(text: str) -> tuple[str, ...]:
    modes = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not modes or set(modes) - set(PIPELINING):
        raise argparse.ArgumentTypeError(f"--pipelining takes off, on or off,on; got {text!r}")
    return modes


parse_cases = fleet_cost.parse_cases  # the same cases, over SSH


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=fleet_cost.parse_sizes, default=list(DEFAULT_SIZES),
                        help="fleet sizes, comma-separated (default 64)")
    parser.add_argument("--repeat", type=int, default=2, help="rounds; medians are kept (default 2)")
    parser.add_argument("--pipelining", type=parse_modes, default=PIPELINING,
                        help="ANSIBLE_PIPELINING settings compared side by side (default off,on)")
    parser.add_argument("--cases", type=parse_cases, default=DEFAULT_CASES,
                        help=f"the runs to time, comma-separated, of {', '.join(CASES)} (default "
                             f"{', '.join(DEFAULT_CASES)}; ping is always timed)")
    parser.add_argument("--workdir", type=Path, help="keep the nodes here (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="do not delete the temporary folder")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--compression", action="store_true",
                        help="ssh -C on every connection (Ansible's default ssh_args; the project's ansible.cfg "
                             "leaves it out)")
    args = parser.parse_args()
    global COMPRESSION
    COMPRESSION = args.compression
    print(_common.machine_text(_common.machine()))
    results = run(args.nodes, max(1, args.repeat), args.pipelining, args.cases, args.workdir, args.keep)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
