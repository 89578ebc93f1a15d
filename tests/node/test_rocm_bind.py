"""The rocm_env area on a simulated MI300X node, and the nodetune-bind launcher it renders.

The node is the lab's MI300X spec (2 sockets, NPS1, 8 MI300X each beside a ConnectX-7 on its PCIe switch) with
fewer cores per socket, no hwloc-only cache files, one NVMe and 8 completion vectors per HCA, so that it builds
in seconds; the full-size node runs in a slow test. What must hold: the env files, the rank table and the
launcher are written once (a second apply changes nothing), verify reports exactly the files that drifted, and
revert restores the tree byte for byte. The launcher runs as a real subprocess: each LOCAL_RANK gets the CPUs of
its GPU's NUMA node, read independently from the tree's sysfs; on this machine's own CPUs it really binds and execs
a program that prints its affinity, environment and arguments.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.nodetune.instinct.plugins.module_utils import interpreter
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine, node
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import rank_bind
from ansible_collections.nodetune.instinct.plugins.module_utils.audit import verify
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import format_cpulist, parse_cpulist
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import SettingError
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.support.trees import tree_digest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("simulated_kernel")  # applies to simulated nodes in-process
# The area's own variables with their declared defaults (the role's defaults also carry the common ones).
DEFAULTS = {name: areas.defaults("rocm_env")[name] for name in areas.area_variables("rocm_env")}
CONFIG = dict(DEFAULTS, nodetune_rocm_profile="multi_node_stable", nodetune_rocm_env={"NCCL_MIN_NCHANNELS": 112})
AREAS = {"rocm_env": CONFIG}
LAUNCHER = "usr/local/bin/nodetune-bind"
TABLE = "etc/nodetune/ranks.json"
FILES = ("etc/rccl.conf", "etc/profile.d/nodetune-rocm.sh", "etc/nodetune/rocm.env", TABLE, LAUNCHER)
SITE_RCCL_CONF = "NCCL_DEBUG=INFO\n"  # what the node had before nodetune: revert must bring it back


def mi300x_spec(cores_per_socket: int | None = 24) -> dict[str, Any]:
    spec = yaml.safe_load((REPO / "inventories/lab/specs/mi300x.yml").read_text())
    if cores_per_socket is not None:
        spec["cpu"].update(caches=False, cores_per_socket=cores_per_socket)
        spec["nvme"] = spec["nvme"][:1]
        for nic in spec["nics"]:
            if nic["model"].startswith("ConnectX"):
                nic["comp_vectors"] = 8
    return spec


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("rocm") / "pristine"
    simnode.build(mi300x_spec(), str(dest))
    (dest / "etc/rccl.conf").write_text(SITE_RCCL_CONF)
    return dest


@pytest.fixture(scope="module")
def tuned(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The node after one apply of the rocm_env area (read-only for the tests that use it)."""
    dest = tmp_path_factory.mktemp("rocm") / "tuned"
    shutil.copytree(pristine, dest, symlinks=True)
    state = node.load(str(dest), AREAS)
    assert engine.apply(state.root, state.settings)["changed"]
    return dest


# ------------------------------------------------------------------------------------------------ the node oracle
def amd_gpus(root: Root) -> dict[str, int]:
    """GPU BDF -> its NUMA node, straight from sysfs (vendor 0x1002; display class, or 0x12 for MI300X)."""
    out = {}
    for bdf in root.listdir("sys/bus/pci/devices"):
        base = f"sys/bus/pci/devices/{bdf}"
        if root.read(base + "/vendor") == "0x1002" and (root.read(base + "/class") or "")[:4] in ("0x03", "0x12"):
            out[bdf] = int(root.read(base + "/numa_node") or -1)
    return out


def node_cpus(root: Root, numa: int) -> set[int]:
    return set(parse_cpulist(root.read(f"sys/devices/system/node/node{numa}/cpulist")))


def hca_numa(root: Root) -> dict[str, int]:
    return {hca: int(root.read(f"sys/class/infiniband/{hca}/device/numa_node") or -1)
            for hca in root.listdir("sys/class/infiniband")}


def fake_numactl(folder: Path) -> Path:
    """A numactl that records its arguments and runs what follows '--' (exec, like the real one)."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "numactl"
    tool.write_text(f"#!{sys.executable}\nimport os, sys\n"
                    f"open({str(folder / 'numactl.args')!r}, 'w').write(' '.join(sys.argv[1:]))\n"
                    "rest = sys.argv[sys.argv.index('--') + 1:]\nos.execvp(rest[0], rest)\n")
    tool.chmod(0o755)
    return bin_dir


def launch(launcher: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(launcher), *args], capture_output=True, text=True, timeout=60,
                          env=env if env is not None else {"PATH": "/nonexistent"}, check=False)


# ------------------------------------------------------------------------------------------------ apply/verify/revert
def drifted(root: Path) -> set[tuple[str, str]]:
    state = node.load(str(root), AREAS)
    return {(f.id, f.target) for f in verify.verify_settings(state, AREAS) if f.status == "drift"}


def test_apply_once_verify_drift_and_revert_byte_identical(pristine: Path, tmp_path: Path) -> None:
    root = tmp_path / "node"
    shutil.copytree(pristine, root, symlinks=True)
    before = tree_digest(root)
    state = node.load(str(root), AREAS)
    first = engine.apply(state.root, state.settings)
    assert sorted(a["path"].lstrip("/") for a in first["actions"] if a["id"].startswith("rocm.")) == sorted(FILES)
    # and the node-local checker with this area's expectations (module_utils/areas/checker_files.py)
    assert {a["id"] for a in first["actions"]} == {"rocm.env", "rocm.ranks", "rocm.bind", "check.expected",
                                                  "check.program"}
    assert stat.S_IMODE((root / LAUNCHER).stat().st_mode) == 0o755
    again = node.load(str(root), AREAS)
    assert engine.apply(again.root, again.settings)["changed"] is False  # idempotent
    assert drifted(root) == set()

    # what happens on nodes: a hand edit of /etc/rccl.conf, a stale table copied from another node, a deleted tool
    with (root / "etc/rccl.conf").open("a") as handle:
        handle.write("NCCL_ALGO=Tree\n")
    table = json.loads((root / TABLE).read_text())
    table["ranks"][0]["cpus"] = [0]
    (root / TABLE).write_text(json.dumps(table))
    (root / LAUNCHER).unlink()
    assert drifted(root) == {("rocm.env", "/etc/rccl.conf"), ("rocm.ranks", "/" + TABLE),
                             ("rocm.bind", "/" + LAUNCHER)}
    state = node.load(str(root), AREAS)
    assert len(engine.apply(state.root, state.settings)["actions"]) == 3
    assert drifted(root) == set()

    engine.revert(Root(str(root)))
    assert tree_digest(root) == before
    assert (root / "etc/rccl.conf").read_text() == SITE_RCCL_CONF


def test_the_rendered_files_carry_the_profile_the_layout_and_the_user(tuned: Path) -> None:
    conf = (tuned / "etc/rccl.conf").read_text()
    for line in ("NCCL_ALGO=Ring\n", "NCCL_BUFFSIZE=8388608\n", "NCCL_DEBUG=WARN\n", "NCCL_MIN_NCHANNELS=112\n",
                 "NCCL_IB_HCA==mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7\n"):
        assert line in conf
    assert "export NCCL_ALGO='Ring'\n" in (tuned / "etc/profile.d/nodetune-rocm.sh").read_text()
    assert 'NCCL_ALGO="Ring"\n' in (tuned / "etc/nodetune/rocm.env").read_text()


# ------------------------------------------------------------------------------------------------ the launcher
@pytest.mark.parametrize("rank", range(8))
def test_each_local_rank_gets_the_cpus_of_its_gpus_numa_node(tuned: Path, tmp_path: Path, rank: int) -> None:
    root = Root(str(tuned))
    gpus = amd_gpus(root)
    assert len(gpus) == 8
    result = launch(tuned / LAUNCHER, "--table", str(tuned / TABLE), "--dry-run", "--", "python", "train.py",
                    env={"LOCAL_RANK": str(rank), "PATH": str(fake_numactl(tmp_path))})
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    numa = gpus[plan["gpu"]]
    cpus = set(plan["cpus"])
    assert plan["rank"] == rank and plan["rank_from"] == "LOCAL_RANK"
    assert cpus and cpus <= node_cpus(root, numa), "the rank's CPUs must be on its GPU's NUMA node"
    assert "GOMP_CPU_AFFINITY" not in plan["env"]  # libgomp would pin the rank to its first CPU
    assert plan["env"]["OMP_NUM_THREADS"] == str(len(cpus))  # one thread per core: primary threads only
    assert plan["env"]["HSA_OVERRIDE_CPU_AFFINITY_DEBUG"] == "0"  # ROCr's helper threads stay on those CPUs
    # one node-wide NIC selection on every rank: RCCL builds the node's rings from what each rank sees (issue 24.1)
    hcas = plan["env"]["NCCL_IB_HCA"].lstrip("=").split(",")
    assert sorted(hcas) == sorted(hca_numa(root)), "every rank must see all the node's HCAs"
    # the default memory policy: the GPU's node first, the others when it is full (issue 24 item 10)
    assert plan["memory_policy"] == "preferred" and plan["memory_nodes"] == [numa]
    assert plan["argv"] == [str(tmp_path / "bin/numactl"), f"--preferred={numa}", "--", "python", "train.py"]


def test_ranks_are_disjoint_and_cover_every_gpu_once(tuned: Path) -> None:
    plans = []
    for rank in range(8):
        result = launch(tuned / LAUNCHER, "--table", str(tuned / TABLE), "--dry-run", "--", "true",
                        env={"SLURM_LOCALID": str(rank), "PATH": "/nonexistent"})
        assert result.returncode == 0, result.stderr
        plans.append(json.loads(result.stdout))
    assert {p["rank_from"] for p in plans} == {"SLURM_LOCALID"}
    assert sorted(p["gpu"] for p in plans) == sorted(amd_gpus(Root(str(tuned))))
    seen: set[int] = set()
    for plan in plans:
        assert not seen & set(plan["cpus"])
        seen |= set(plan["cpus"])
    assert all(p["numactl"] is None for p in plans)  # no numactl on that PATH


def test_the_launcher_really_binds_and_execs_without_a_shell(tmp_path: Path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    table = tmp_path / "ranks.json"
    ranks = [{"rank": i, "gpu": f"0000:0{i}:00.0", "numa_node": 0, "cpus": [cpu],
              "env": {"GOMP_CPU_AFFINITY": str(cpu), "OMP_NUM_THREADS": "1", "NCCL_IB_HCA": "=mlx5_0,mlx5_1"}}
             for i, cpu in enumerate(allowed[:2])]
    table.write_text(rank_bind.table_text(ranks))
    launcher = tmp_path / "nodetune-bind"
    launcher.write_text(rank_bind.script_text(str(table), interpreter.shebang()))
    probe = ("import json, os, sys; print(json.dumps({'cpus': sorted(os.sched_getaffinity(0)), 'args': sys.argv[1:],"
             " 'env': {k: os.environ.get(k) for k in ('GOMP_CPU_AFFINITY', 'OMP_NUM_THREADS', 'NCCL_IB_HCA', 'KEEP')}"
             "}))")
    hostile = ["$(touch PWNED)", "`touch PWNED2`", "a b; touch PWNED3", "'\""]
    bin_dir = fake_numactl(tmp_path)
    for entry in ranks:
        env = {"LOCAL_RANK": str(entry["rank"]), "PATH": str(bin_dir), "KEEP": "mine", "NCCL_IB_HCA": "=mlx5_9"}
        result = subprocess.run([sys.executable, str(launcher), "--", sys.executable, "-c", probe, *hostile],
                                cwd=tmp_path, capture_output=True, text=True, env=env, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        seen = json.loads(result.stdout)
        assert seen["cpus"] == entry["cpus"]
        assert seen["args"] == hostile
        # the rank's values win, except the job's own NIC selection; the rest passes through; a stale table's
        # GOMP_CPU_AFFINITY is dropped
        assert seen["env"] == {**entry["env"], "GOMP_CPU_AFFINITY": None, "KEEP": "mine", "NCCL_IB_HCA": "=mlx5_9"}
        assert (tmp_path / "numactl.args").read_text().startswith("--preferred=0 -- ")
    assert not list(tmp_path.glob("PWNED*"))

    # without numactl: a warning, and the command still runs bound to its CPUs
    env = {"LOCAL_RANK": "0", "PATH": "/nonexistent", "NCCL_IB_HCA": "=mlx5_9"}
    result = subprocess.run([sys.executable, str(launcher), "--keep-env", "NCCL_IB_HCA", "--", sys.executable, "-c",
                             probe], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "numactl not found: memory policy preferred on NUMA node 0 not set" in result.stderr
    seen = json.loads(result.stdout)
    assert seen["cpus"] == ranks[0]["cpus"] and seen["env"]["NCCL_IB_HCA"] == "=mlx5_9"  # --keep-env


GOMP_PROBE = """
import ctypes, ctypes.util, json, os, threading
gomp = ctypes.CDLL(ctypes.util.find_library("gomp") or "libgomp.so.1")
after_load = sorted(os.sched_getaffinity(0))
threads, lock = {}, threading.Lock()
def body(_data):
    with lock:
        threads[gomp.omp_get_thread_num()] = sorted(os.sched_getaffinity(0))
callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(body)
gomp.GOMP_parallel(callback, None, ctypes.c_uint(0), ctypes.c_uint(0))  # 0 threads: OMP_NUM_THREADS decides
pid = os.fork()
if pid == 0:  # a DataLoader-style worker forked after libgomp loaded
    os.write(1, (json.dumps({"child": sorted(os.sched_getaffinity(0))}) + "\\n").encode())
    os._exit(0)
os.waitpid(pid, 0)
print(json.dumps({"after_load": after_load, "threads": threads, "team": gomp.omp_get_max_threads()}))
"""


def libgomp_or_skip() -> None:
    import ctypes.util

    if not ctypes.util.find_library("gomp"):
        pytest.skip("no libgomp on this machine (Debian: apt-get install libgomp1)")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("a rank of at least two CPUs is needed to see libgomp narrow it")


def test_a_rank_and_its_libgomp_threads_keep_the_ranks_whole_cpu_set(tuned: Path, tmp_path: Path) -> None:
    """Issue 14.1, with the real libgomp: the environment the rocm_env area gives a rank, on this machine's CPUs
    (the rank's simulated cpulist, wherever it appears in that environment, becomes this machine's), under
    nodetune-bind. The main thread after libgomp loads, every OpenMP thread and a forked worker keep the set."""
    libgomp_or_skip()
    allowed = sorted(os.sched_getaffinity(0))
    entry = next(e for e in json.loads((tuned / TABLE).read_text())["ranks"] if e["rank"] == 0)
    env = {name: value.replace(entry["cpulist"], format_cpulist(allowed)) for name, value in entry["env"].items()}
    env["OMP_NUM_THREADS"] = str(len(allowed))
    table = tmp_path / "ranks.json"
    table.write_text(rank_bind.table_text([{**entry, "cpus": allowed, "cpulist": format_cpulist(allowed),
                                            "numa_node": None, "env": env}]))
    result = subprocess.run([sys.executable, str(tuned / LAUNCHER), "--table", str(table), "--rank", "0", "--",
                             sys.executable, "-c", GOMP_PROBE], capture_output=True, text=True, timeout=120,
                            env={"PATH": os.defpath}, check=False)
    assert result.returncode == 0, result.stderr
    child, seen = (json.loads(line) for line in result.stdout.splitlines())
    assert seen["after_load"] == allowed, "libgomp narrowed the rank's main thread"
    assert seen["team"] == len(allowed)
    assert seen["threads"] == {str(n): allowed for n in range(len(allowed))}
    assert child["child"] == allowed


def test_the_launcher_drops_an_inherited_gomp_cpu_affinity(tmp_path: Path) -> None:
    """A GOMP_CPU_AFFINITY from the caller (an old profile, a job script) would narrow the rank just the same."""
    libgomp_or_skip()
    allowed = sorted(os.sched_getaffinity(0))
    table = tmp_path / "ranks.json"
    table.write_text(rank_bind.table_text([{"rank": 0, "gpu": "0000:05:00.0", "numa_node": None, "cpus": allowed,
                                            "env": {"OMP_NUM_THREADS": str(len(allowed))}}]))
    launcher = tmp_path / "nodetune-bind"
    launcher.write_text(rank_bind.script_text(str(table), interpreter.shebang()))
    env = {"PATH": os.defpath, "LOCAL_RANK": "0", "GOMP_CPU_AFFINITY": format_cpulist(allowed)}
    result = subprocess.run([sys.executable, str(launcher), "--", sys.executable, "-c", GOMP_PROBE],
                            capture_output=True, text=True, timeout=120, env=env, check=False)
    assert result.returncode == 0, result.stderr
    assert "GOMP_CPU_AFFINITY removed from the environment" in result.stderr
    child, seen = (json.loads(line) for line in result.stdout.splitlines())
    assert seen["after_load"] == allowed and child["child"] == allowed
    # and the same probe with the variable kept shows what it does: the main thread on one CPU
    result = subprocess.run([sys.executable, str(launcher), "--keep-env", "GOMP_CPU_AFFINITY", "--", sys.executable,
                             "-c", GOMP_PROBE], capture_output=True, text=True, timeout=120, env=env, check=False)
    child, seen = (json.loads(line) for line in result.stdout.splitlines())
    assert seen["after_load"] == allowed[:1] and child["child"] == allowed[:1]


def test_cpus_this_process_may_not_use_give_a_clear_error(tuned: Path) -> None:
    last = max(json.loads((tuned / TABLE).read_text())["ranks"], key=lambda e: e["rank"])
    if set(last["cpus"]) & os.sched_getaffinity(0):
        pytest.skip("this machine may run on the simulated rank's CPUs")
    result = launch(tuned / LAUNCHER, "--table", str(tuned / TABLE), "--", "true", env={"LOCAL_RANK": "7"})
    assert result.returncode == 1
    assert f"cannot bind to CPUs {last['cpulist']}" in result.stderr and "--cpu-bind=none" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("env", "args", "status", "message"), [
    ({"LOCAL_RANK": "8"}, [], 1, "LOCAL_RANK=8, but this node's rank table {table} has 8 ranks (0-7)"),
    ({"LOCAL_RANK": "x"}, [], 1, "LOCAL_RANK='x' is not a local rank"),
    ({}, [], 2, "no local rank: none of LOCAL_RANK, SLURM_LOCALID"),
    ({"LOCAL_RANK": "0"}, ["--table", "/nonexistent/ranks.json"], 1, "no rank table at /nonexistent/ranks.json"),
    ({"LOCAL_RANK": "0", "PATH": "/nonexistent"}, ["--", "no-such-program"], 127,
     "command not found: 'no-such-program'"),
    ({"LOCAL_RANK": "0"}, ["--"], 2, "nothing to run"),
])
def test_launcher_errors_are_one_clear_line(tuned: Path, env: dict, args: list[str], status: int,
                                            message: str) -> None:
    table = str(tuned / TABLE)
    argv = args if "--table" in args else ["--table", table, *args]
    if not any(a == "--" for a in argv):
        argv += ["--", "true"]
    result = launch(tuned / LAUNCHER, *argv, env=env)
    assert result.returncode == status
    assert message.format(table=table) in result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1


def test_a_malformed_table_is_refused(tmp_path: Path, tuned: Path) -> None:
    for text, message in (("{", "is not valid JSON"), ('{"version": 2, "ranks": []}', "has version 2"),
                          ('{"version": 1, "ranks": [{"rank": 0}]}', "is malformed")):
        (tmp_path / "t.json").write_text(text)
        result = launch(tuned / LAUNCHER, "--table", str(tmp_path / "t.json"), "--", "true", env={"LOCAL_RANK": "0"})
        assert result.returncode == 1 and message in result.stderr


def test_the_rendered_launcher_names_the_configured_table(pristine: Path, tmp_path: Path) -> None:
    state = node.load(str(pristine), {"rocm_env": dict(CONFIG, nodetune_rocm_ranks_file="/opt/nt/ranks.json",
                                                        nodetune_rocm_bind_file="/opt/nt/bind")})
    launcher = next(s for s in state.settings if s.id == "rocm.bind")
    assert launcher.path == "opt/nt/bind" and launcher.mode == 0o755
    assert next(s for s in state.settings if s.id == "rocm.ranks").path == "opt/nt/ranks.json"
    (tmp_path / "bind").write_text(launcher.value)
    result = launch(tmp_path / "bind", "--", "true", env={"LOCAL_RANK": "0"})
    assert "no rank table at /opt/nt/ranks.json" in result.stderr
    result = launch(tmp_path / "bind", "--", "true", env={"LOCAL_RANK": "0", rank_bind.TABLE_ENV: "/elsewhere.json"})
    assert "no rank table at /elsewhere.json" in result.stderr


def test_nodetune_bind_entry_point_shares_the_launcher(tuned: Path) -> None:
    env = {"LOCAL_RANK": "3", "PATH": "/nonexistent",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO / "collection")])}
    args = ["--table", str(tuned / TABLE), "--dry-run", "--", "python", "train.py"]
    cli = subprocess.run([sys.executable, "-m", "nodetune.cli", "bind", *args], capture_output=True, text=True,
                         env=env, timeout=60, check=False)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == json.loads(launch(tuned / LAUNCHER, *args, env=env).stdout)


def test_no_gpu_no_launcher(tmp_path: Path) -> None:
    spec = mi300x_spec(8)
    spec["gpus"] = []
    simnode.build(spec, str(tmp_path / "cpu-only"))
    state = node.load(str(tmp_path / "cpu-only"), AREAS)
    assert not [s for s in state.settings if s.id in ("rocm.bind", "rocm.ranks")]
    assert any("no GPU ranks" in note for note in state.context.notes)
    state = node.load(str(tmp_path / "cpu-only"), {"rocm_env": dict(DEFAULTS)})
    assert state.settings == []


# ------------------------------------------------------------------------------------------------ the GPU it will use
def rocr_gpus(root: Root) -> list[tuple[str, str]]:
    """ROCr's GPUs in ROCr's order, straight from the tree: the KFD nodes with SIMDs by node id, each GPU's PCI
    address from location_id, and its UUID from amdgpu's own unique_id file (hex), not from KFD's."""
    out = []
    nodes = "sys/class/kfd/kfd/topology/nodes"
    for kfd_node in sorted(root.listdir(nodes), key=int):
        props = dict(line.split(" ", 1) for line in (root.read(f"{nodes}/{kfd_node}/properties") or "").splitlines())
        if int(props["simd_count"]) == 0:
            continue
        location = int(props["location_id"])
        bdf = f"{int(props['domain']):04x}:{location >> 8:02x}:{(location >> 3) & 0x1F:02x}.{location & 7:x}"
        out.append((bdf, "GPU-" + (root.read(f"sys/bus/pci/devices/{bdf}/unique_id") or "")))
    return out


def test_the_table_lists_rocrs_gpus_with_their_uuids(tuned: Path) -> None:
    root = Root(str(tuned))
    table = json.loads((tuned / TABLE).read_text())
    expected = rocr_gpus(root)
    assert len(expected) == 8 and all(len(uuid) == 20 for _bdf, uuid in expected)
    assert [(d["index"], d["gpu"], d["uuid"]) for d in table["devices"]] == [
        (i, bdf, uuid) for i, (bdf, uuid) in enumerate(expected)]
    rank_of_gpu = {e["gpu"]: e["rank"] for e in table["ranks"]}
    assert all(d["rank"] == rank_of_gpu[d["gpu"]] for d in table["devices"])
    assert table["memory_policy"] == "preferred"


ROCR, HIP, CUDA, STEP = "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS"
FOLLOW_CASES = {
    # name: (environment, ROCr index of the GPU the process uses, what decided it, the warning or None)
    "rocr index, another local rank": ({"LOCAL_RANK": "0", ROCR: "3"}, 3, ROCR, "LOCAL_RANK=0 is GPU"),
    "rocr uuid, no rank variable": ({ROCR: "{uuid5}"}, 5, ROCR, None),
    "rocr uuid in capitals": ({ROCR: "{UUID2}"}, 2, ROCR, None),
    "rocr hex index (strtol)": ({"LOCAL_RANK": "3", ROCR: "0x3"}, 3, ROCR, None),
    "hip within rocr": ({"SLURM_LOCALID": "0", ROCR: "4,6", HIP: "1"}, 6, f"{ROCR} and {HIP}",
                        "SLURM_LOCALID=0 is GPU"),
    "cuda when hip is empty": ({"LOCAL_RANK": "2", HIP: "", CUDA: "2"}, 2, CUDA, None),
    "slurm device cgroup: local indexes": ({"SLURM_LOCALID": "1", STEP: "6,7", ROCR: "0,1"}, 7, f"{STEP} and {ROCR}",
                                           "SLURM_LOCALID=1 is GPU"),
    "slurm without cgroup: node indexes": ({"SLURM_LOCALID": "0", STEP: "6,7", ROCR: "6,7"}, 6, ROCR,
                                           "SLURM_LOCALID=0 is GPU"),
    "slurm step gpus alone": ({"SLURM_LOCALID": "5", STEP: "5"}, 5, STEP, None),
    "several visible: device LOCAL_RANK": ({"LOCAL_RANK": "2", ROCR: "0,1,2,3"}, 2, ROCR, None),
    "several visible, rank beyond: the first": ({"LOCAL_RANK": "5", ROCR: "1,0"}, 1, ROCR,
                                                "the first of the 2 it sees"),
    "cuda list indexing rocr's: no gpu": ({"SLURM_LOCALID": "3", ROCR: "4,5", CUDA: "4,5"}, 3, None,
                                          "this process sees no GPU"),
}


@pytest.mark.parametrize("case", FOLLOW_CASES)
def test_the_launcher_follows_the_gpu_the_process_will_use(tuned: Path, case: str) -> None:
    """Issue 24 item 10 / issue 27 item 2: ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES (CUDA_VISIBLE_DEVICES) and
    Slurm's SLURM_STEP_GPUS decide the GPU, read as ROCr and HIP read them; a local rank that names another GPU is
    a warning; where the variables leave no GPU (HIP would find none) the local rank decides, with a warning."""
    tree = Root(str(tuned))
    gpus = rocr_gpus(tree)
    env, index, decided, warning = FOLLOW_CASES[case]
    env = {k: v.format(uuid5=gpus[5][1], UUID2=gpus[2][1].upper()) for k, v in env.items()}
    result = launch(tuned / LAUNCHER, "--table", str(tuned / TABLE), "--dry-run", "--", "true", env=env)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    bdf = gpus[index][0]
    entry = next(e for e in json.loads((tuned / TABLE).read_text())["ranks"] if e["gpu"] == bdf)
    assert (plan["gpu"], plan["rank"], plan["cpus"], plan["gpu_from"]) == (bdf, entry["rank"], entry["cpus"], decided)
    assert set(plan["cpus"]) <= node_cpus(tree, amd_gpus(tree)[bdf])
    if warning is None:
        assert plan["warnings"] == [] and result.stderr == ""
    else:
        assert len(plan["warnings"]) == 1 and warning in plan["warnings"][0], plan["warnings"]
        assert warning in result.stderr and "Traceback" not in result.stderr


def test_gpu_variables_that_leave_no_gpu_and_no_rank_are_an_error(tuned: Path) -> None:
    result = launch(tuned / LAUNCHER, "--table", str(tuned / TABLE), "--", "true", env={ROCR: ""})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "with ROCR_VISIBLE_DEVICES= this process sees no GPU" in result.stderr
    assert "no local rank: none of LOCAL_RANK" in result.stderr


def devices(count: int, shared: int = 0) -> list[dict[str, Any]]:
    """ROCr's GPU list for the filter tests; the last ``shared`` share one unique_id, as CPX partitions do."""
    out = [{"index": i, "gpu": f"0000:{i:02x}:00.0", "uuid": f"GPU-{0x6c3b00 + i:016x}", "rank": i}
           for i in range(count)]
    for device in out[count - shared:]:
        device["uuid"] = out[count - shared]["uuid"]
    return out


@pytest.mark.parametrize(("value", "expected"), [
    ("3,1", [3, 1]),
    ("0x2,07", [2, 7]),                       # strtol with base 0: hex and octal
    (" 4 , 5", [4, 5]),                       # entries are trimmed
    ("2,", [2]),                              # nothing after a trailing comma
    ("1,1,2", [1]),                           # a repeated index ends the list
    ("1,9,2", [1]),                           # so does one out of range
    ("1,x,2", [1]),                           # and one that is no number
    ("1,,2", [1]),                            # and an empty one
    ("", []),                                 # set but empty: no GPU at all
    ("0,1,2,3,4,5,6,7,0", list(range(8))),    # at most as many entries as GPUs are read
    ("gpu-00000000006c3b03,0", [3, 0]),       # a UUID, whatever its case
    ("GPU-00000000006C3B0", []),              # a prefix of several GPUs' UUIDs names none
    ("GPU-", []),                             # shorter than 5 characters
])
def test_rocr_visible_devices_is_read_as_rocr_reads_it(value: str, expected: list[int]) -> None:
    """ROCR-Runtime's RvdFilter (runtime/hsa-runtime/core/runtime/amd_filter_device.cpp)."""
    assert [d["index"] for d in rank_bind.rocr_filter(devices(8), value)] == expected


def test_a_cpx_partitions_uuid_names_no_gpu_on_the_real_capture() -> None:
    """The real MI300X CPX capture (ROCm k8s-device-plugin testdata): KFD gives each of a GPU's partitions the
    GPU's unique_id, so ROCr finds several GPUs for its UUID and ends the list there; indexes still work."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import Context
    from ansible_collections.nodetune.instinct.plugins.module_utils.areas.rocm_env import rocr_devices
    from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover

    from tests import realdata

    root = realdata.kfd_root()
    listed = rocr_devices(Context(Root(str(root)), discover(str(root)), {}), [])
    assert [d["kfd_node"] for d in listed] == list(range(2, 65)) and [d["index"] for d in listed] == list(range(63))
    first = [d for d in listed if d["gpu"] == "0000:05:00.0"]
    assert len(first) == 8 and len({d["uuid"] for d in first}) == 1 and first[0]["uuid"].startswith("GPU-")
    assert rank_bind.rocr_filter(listed, first[0]["uuid"]) == []
    assert rank_bind.rocr_filter(listed, "9,0") == [listed[9], listed[0]]
    assert rank_bind.rocr_filter(devices(4, shared=2), "GPU-00000000006c3b02") == []


@pytest.mark.parametrize(("value", "expected"), [
    ("1", [6]),
    ("1,0", [6, 4]),
    ("1,1,0", [6, 4]),                        # a repeated index is skipped
    ("01", []),                               # an index must be written as the number itself
    ("2", []),                                # indexes count what ROCr exposes, not the node's GPUs
    ("0,5,1", [4]),                           # the first bad entry ends the list
    ("GPU-00000000006c3b06", [6]),            # a UUID, in ROCr's lower-case hex
    ("GPU-00000000006C3B06", []),             # HIP's UUID match is case-sensitive
])
def test_hip_visible_devices_indexes_what_rocr_exposes(value: str, expected: list[int]) -> None:
    """ROCm/clr's Device::init (rocclr/device/rocm/rocdevice.cpp) on top of ROCR_VISIBLE_DEVICES=4,6."""
    exposed = rank_bind.rocr_filter(devices(8), "4,6")
    assert [d["index"] for d in rank_bind.hip_filter(exposed, value)] == expected


# ------------------------------------------------------------------------------------------------ memory policy
def test_the_memory_policy_is_preferred_and_a_job_may_choose_another(tuned: Path, tmp_path: Path) -> None:
    """Strict --membind OOMs a rank once its node is full (an MI250 NPS4 node holds an eighth of the memory):
    the table's default is preferred; --memory-policy picks another for one job; a bad value is refused."""
    bin_dir = fake_numactl(tmp_path)
    entry = next(e for e in json.loads((tuned / TABLE).read_text())["ranks"] if e["rank"] == 4)
    numa = entry["numa_node"]
    seen = {}
    for policy in (None, "membind", "interleave", "none", "preferred"):
        args = ["--memory-policy", policy] if policy else []
        result = launch(tuned / LAUNCHER, "--table", str(tuned / TABLE), *args, "--dry-run", "--", "true",
                        env={"LOCAL_RANK": "4", "PATH": str(bin_dir)})
        assert result.returncode == 0, result.stderr
        plan = json.loads(result.stdout)
        seen[policy] = plan["argv"][1:-2] if plan["numactl"] else []
        assert plan["memory_policy"] == (policy or "preferred")
    assert seen == {None: [f"--preferred={numa}"], "preferred": [f"--preferred={numa}"],
                    "membind": [f"--membind={numa}"], "interleave": [f"--interleave={numa}"], "none": []}
    bad = launch(tuned / LAUNCHER, "--table", str(tuned / TABLE), "--memory-policy", "strict", "--", "true",
                 env={"LOCAL_RANK": "4"})
    assert bad.returncode == 2 and "--memory-policy: invalid choice: 'strict'" in bad.stderr
    assert "preferred" in bad.stderr and "interleave" in bad.stderr


def mi250_spec() -> dict[str, Any]:
    """The lab's MI250 node (2 sockets in NPS4: 8 NUMA nodes), small: 2 GCDs, 16 cores per socket."""
    spec = yaml.safe_load((REPO / "inventories/lab/specs/mi250.yml").read_text())
    spec["cpu"].update(caches=False, cores_per_socket=16, cores_per_l3=4)
    spec["nvme"], spec["gpus"] = spec["nvme"][:1], spec["gpus"][:2]
    return spec


def test_the_memory_policy_setting_reaches_the_table_and_a_bad_value_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "mi250"
    simnode.build(mi250_spec(), str(root))
    config = dict(CONFIG, nodetune_rocm_bind_memory_policy="interleave")
    state = node.load(str(root), {"rocm_env": config})
    table = json.loads(next(s for s in state.settings if s.id == "rocm.ranks").value)
    assert table["memory_policy"] == "interleave"
    tree = Root(str(root))
    package_of = {int(n[4:]): tree.read(f"sys/devices/system/cpu/cpu{min(node_cpus(tree, int(n[4:])))}/topology/"
                                         "physical_package_id")
                  for n in tree.listdir("sys/devices/system/node") if n.startswith("node")}
    assert len(package_of) == 8  # NPS4
    for entry in table["ranks"]:
        socket = sorted(n for n, package in package_of.items() if package == package_of[entry["numa_node"]])
        assert len(socket) == 4 and entry["interleave_nodes"] == socket
        assert entry["numactl"] == [f"--physcpubind={entry['cpulist']}", f"--interleave={format_cpulist(socket)}"]
    before = tree_digest(root)
    with pytest.raises(SettingError) as refused:
        node.load(str(root), {"rocm_env": dict(CONFIG, nodetune_rocm_bind_memory_policy="strict")})
    assert ("nodetune_rocm_bind_memory_policy='strict' is not valid: choose one of preferred, membind, interleave, "
            "none") in str(refused.value)
    assert tree_digest(root) == before


def test_each_memory_policy_reaches_the_process_through_the_real_numactl(tmp_path: Path) -> None:
    """On this machine's kernel: the policy the exec'd program runs under, from its /proc/self/numa_maps (the
    task's policy where a mapping has none of its own: fs/proc/task_mmu.c, show_numa_map)."""
    numactl = shutil.which("numactl")
    if numactl is None or not Path("/sys/devices/system/node/node0").is_dir():
        pytest.skip("needs numactl (Debian: apt-get install numactl) and NUMA node 0")
    allowed = sorted(os.sched_getaffinity(0))
    table = tmp_path / "ranks.json"
    table.write_text(rank_bind.table_text([{"rank": 0, "gpu": "0000:05:00.0", "numa_node": 0, "cpus": allowed,
                                            "interleave_nodes": [0], "env": {}}], memory_policy="membind"))
    probe = "print(open('/proc/self/numa_maps').readline().split()[1])"
    seen = {}
    for policy in (None, "preferred", "interleave", "none"):
        args = ["--memory-policy", policy] if policy else []
        result = subprocess.run([sys.executable, str(REPO / "collection/ansible_collections/nodetune/instinct/plugins"
                                                     "/module_utils/areas/rank_bind.py"), "--table", str(table), *args,
                                 "--", sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                                env={"LOCAL_RANK": "0", "PATH": os.path.dirname(numactl)}, check=False)
        assert result.returncode == 0, result.stderr
        seen[policy] = result.stdout.strip()
    assert seen == {None: "bind:0", "preferred": "prefer:0", "interleave": "interleave:0", "none": "default"}


# ------------------------------------------------------------------------------------------------ slow: full size
@pytest.mark.slow
def test_the_full_lab_mi300x_ranks_are_the_documented_ones(shared_tree: Callable[[Any], Path]) -> None:
    """docs/layout.md: ranks 0-3 get 1-23, 24-46, 48-70, 72-94; ranks 4-7 97-119 ... 168-190 (NIC vectors spread
    over the node, each rank in whole 8-core L3 domains where the counts allow, issue 14)."""
    state = node.load(str(shared_tree(mi300x_spec(None))), AREAS)
    table = json.loads(next(s for s in state.settings if s.id == "rocm.ranks").value)
    assert [e["cpulist"] for e in table["ranks"]] == ["1-23", "24-46", "48-70", "72-94",
                                                      "97-119", "120-142", "144-166", "168-190"]
    assert [e["numa_node"] for e in table["ranks"]] == [0, 0, 0, 0, 1, 1, 1, 1]


@pytest.mark.slow
def test_the_module_renders_what_verify_expects(tmp_path: Path) -> None:
    """Through ansible-playbook the launcher is rendered from the module's zipped copy of rank_bind.py: a verify in
    this process (reading the file system copy) must find no drift, and a second run must change nothing."""
    from tests.support.playbooks import LAB_TUNING, ok, playbook, recap, write_inventory

    root = tmp_path / "node"
    simnode.build(mi300x_spec(8), str(root))
    host = {"nodetune_root": str(root), "nodetune_rocm_profile": "multi_node"}
    inventory = write_inventory(tmp_path, {"node1": host})
    first = ok(playbook(inventory, "playbooks/apply.yml", "--tags", "rocm_env"))
    assert recap(first, "node1")["changed"] == 1
    assert "RCCL_LL128_FORCE_ENABLE" in first.stdout + first.stderr  # the LL128 note reaches the user
    assert recap(ok(playbook(inventory, "playbooks/apply.yml", "--tags", "rocm_env")), "node1")["changed"] == 0
    lab = {k: v for k, v in yaml.safe_load(LAB_TUNING.read_text()).items() if k.startswith("nodetune_rocm_")}
    areas = {"rocm_env": {**DEFAULTS, **lab, "nodetune_rocm_profile": "multi_node"}}
    state = node.load(str(root), areas)
    assert {s.id for s in state.settings} >= {"rocm.env", "rocm.ranks", "rocm.bind"}
    assert [f.target for f in verify.verify_settings(state, areas) if f.status == "drift"] == []
    assert (root / LAUNCHER).read_text() == rank_bind.script_text("/" + TABLE, interpreter.shebang(root=state.root))
