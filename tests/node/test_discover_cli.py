"""``nodetune discover`` and the ``topology_facts`` module: same Topology, clear errors, no tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover

from nodetune.cli import main

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "collection"
MODULE = COLLECTION / "ansible_collections/nodetune/instinct/plugins/modules/topology_facts.py"


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A small node: 4 CPUs (2 cores x 2 threads), one NUMA node, one NVMe queue IRQ, no PCI."""
    root = tmp_path / "node"
    cpu = root / "sys/devices/system/cpu"
    cpu.mkdir(parents=True)
    (cpu / "online").write_text("0-3\n")
    for c in range(4):
        topo = cpu / f"cpu{c}/topology"
        topo.mkdir(parents=True)
        (topo / "core_id").write_text(f"{c % 2}\n")
        (topo / "physical_package_id").write_text("0\n")
        (topo / "thread_siblings_list").write_text(f"{c % 2},{c % 2 + 2}\n")
    numa = root / "sys/devices/system/node/node0"
    numa.mkdir(parents=True)
    (numa / "cpulist").write_text("0-3\n")
    (root / "proc/irq/40").mkdir(parents=True)
    (root / "proc/irq/40/smp_affinity_list").write_text("1\n")
    (root / "proc/interrupts").write_text(
        "".join(f"{'CPU' + str(c):>11}" for c in range(4)) + "\n"
        " 40:" + "          0" * 4 + "  IR-PCI-MSIX-0000:81:00.0    1-edge      nvme0q1\n")
    return root


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from nodetune.cli import main; sys.exit(main(sys.argv[1:]))"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(COLLECTION)]))
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=120)


# ------------------------------------------------------------------------------------------- CLI
def test_json_is_the_topology(node: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["discover", "--root", str(node), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == discover(str(node))
    assert err == ""


def test_human_summary(node: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["discover", "--root", str(node)]) == 0
    out = capsys.readouterr().out
    assert "4 online of 4 (0-3)" in out
    assert "2 cores, 1 socket, 2 threads per core" in out
    assert "node0" in out and "4 CPUs: 0-3" in out
    assert "1 (0 NIC completion, 1 managed)" in out
    assert "absent" in out and "gpus" in out and "infiniband" in out


def test_a_device_without_numa_locality_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """sysfs numa_node -1 (and a virtual NIC's none): one wording, never "node -1" beside "node None"."""
    from nodetune.commands.discover import summary_lines

    topology = {"root": "/", "cpus": [], "numa_nodes": [], "smt": {"threads_per_core": 1, "control": None},
                "gpus": [], "ib_devices": [], "block_devices": [], "irqs": [], "absent": [], "warnings": [],
                "nics": [{"name": "eth0", "type": "ether", "mtu": 1500, "numa_node": -1, "ipoib_mode": None,
                          "bdf": "0000:00:03.0"},
                         {"name": "ifb0", "type": "ether", "mtu": 1500, "numa_node": None, "ipoib_mode": None,
                          "bdf": None}]}
    text = "\n".join(value for _label, value in summary_lines(topology))
    assert "node -1" not in text and "node None" not in text and text.count("no NUMA node") == 2


@pytest.mark.parametrize("kind", ["missing", "file", "empty"])
def test_bad_roots_give_one_clear_line_and_exit_1(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "x"
    if kind == "file":
        target.write_bytes(os.urandom(64))
    elif kind == "empty":
        target.mkdir()
    result = run_cli("discover", "--root", str(target), "--json")
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("nodetune discover: error: ") and str(target) in lines[0]
    assert "Traceback" not in result.stderr


def test_json_path_imports_neither_rich_nor_ansible(node: Path) -> None:
    code = ("import sys, io, contextlib; from nodetune.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): rc = main(sys.argv[1:])\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'ansible', 'yaml', 'jinja2'))\n"
            "print(rc, heavy)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(COLLECTION)]))
    result = subprocess.run([sys.executable, "-c", code, "discover", "--root", str(node), "--json"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.stdout.strip() == "0 []", result.stderr


def test_cli_on_a_real_capture() -> None:
    from tests import realdata

    root = realdata.capture_root("hwloc-e5")
    result = run_cli("discover", "--root", str(root), "--json")
    assert result.returncode == 0, result.stderr
    topo = json.loads(result.stdout)
    assert len(topo["cpus"]) == 16 and [n["id"] for n in topo["numa_nodes"]] == [0, 1]
    human = run_cli("discover", "--root", str(root))
    assert "mlx4_0/1 ACTIVE 56 Gb/sec (4X FDR) (InfiniBand)" in human.stdout
    assert "ib0 infiniband, mtu 2044, node 1, ipoib connected, 0000:82:00.0" in human.stdout


# ------------------------------------------------------------------------------------------- module
def run_module(args: dict, tmp_path: Path) -> dict:
    """Run the module file the way Ansible runs it on a node (arguments in a JSON file)."""
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=str(COLLECTION))
    result = subprocess.run([sys.executable, str(MODULE), str(args_file)], capture_output=True, text=True, env=env,
                            timeout=120)
    return json.loads(result.stdout)


def test_module_returns_the_fact_in_check_mode(node: Path, tmp_path: Path) -> None:
    before = sorted((p, p.stat().st_mtime_ns) for p in node.rglob("*"))
    result = run_module({"root": str(node), "_ansible_check_mode": True}, tmp_path)
    assert result["changed"] is False and not result.get("failed")
    assert result["ansible_facts"]["nodetune_topology"] == json.loads(json.dumps(discover(str(node))))
    assert sorted((p, p.stat().st_mtime_ns) for p in node.rglob("*")) == before


def test_module_fails_clearly_on_a_bad_root(tmp_path: Path) -> None:
    result = run_module({"root": str(tmp_path / "nope")}, tmp_path)
    assert result["failed"] is True
    assert "does not exist or is not a directory" in result["msg"] and str(tmp_path / "nope") in result["msg"]


@pytest.mark.slow
def test_module_documentation_renders() -> None:
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTION))
    result = subprocess.run([str(Path(sys.executable).with_name("ansible-doc")), "-t", "module",
                             "nodetune.instinct.topology_facts"], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "nodetune_topology" in result.stdout and "EXAMPLES" in result.stdout and "RETURN VALUES" in result.stdout
