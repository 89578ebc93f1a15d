"""The slurm area (issue 27 items 1 and 3): gres.conf from the layout, and read-only checks of the limits jobs get.

The oracles are not nodetune's: hwloc (``lstopo``/``hwloc-calc --input <tree>``, Debian's ``hwloc``) numbers the
cores as Slurm does (gres.conf(5), Cores: "the logical core number (Core L#) seen in lstopo -l"), on the lab nodes
and on the real captures with unusual CPU numbering; Slurm's own parser (``slurmd -G``, Debian's ``slurmd``) reads
the written file against the lab node's topology (hwloc's ``HWLOC_FSROOT``). Each skips with its reason where the tool
is absent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine
from ansible_collections.nodetune.instinct.plugins.module_utils.apply.node import load
from ansible_collections.nodetune.instinct.plugins.module_utils.areas import slurm as area_slurm
from ansible_collections.nodetune.instinct.plugins.module_utils.areas.common import Context
from ansible_collections.nodetune.instinct.plugins.module_utils.audit.verify import verify_settings
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover
from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import node_check
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import parse_cpulist, parse_key_value
from ansible_collections.nodetune.instinct.plugins.module_utils.plan import layout
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.finding import DRIFT, OK
from ansible_collections.nodetune.instinct.plugins.module_utils.plan.setting import SettingError
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests import realdata
from tests.support.specs import small_spec
from tests.support.trees import tree_digest

pytestmark = pytest.mark.usefixtures("simulated_kernel")  # applies to simulated nodes in-process

ON = {"slurm": {"nodetune_slurm_enabled": True}}
ALWAYS = {"slurm": {"nodetune_slurm_enabled": True, "nodetune_slurm_gres": "always"}}
FRAGMENT = "etc/slurm/nodetune-gres.conf"
# the captures whose Linux CPU order is not hwloc's core order (sockets taking turns), a Bulldozer one (a compute
# unit's two cores are thread siblings), and plain ones
CAPTURES = ["knit", "nto", "hwloc-opteron", "utillinux-x7550", "nri-server", "hwloc-e5", "utillinux-epyc7451",
            "nri-4s", "nri-desktop"]
LINE = re.compile(r"^Name=gpu Type=(\S+) File=/dev/dri/renderD(\d+)(?: Cores=(\S+))?$")


# ------------------------------------------------------------------------------------------------ helpers
def build(tmp_path: Path, name: str = "node", **changes: Any) -> Path:
    dest = tmp_path / name
    simnode.build(small_spec(**changes), str(dest))
    return dest


def context(root: Path, policy: dict[str, Any] | None = None) -> Context:
    topology = discover(str(root))
    return Context(Root(str(root)), topology, layout.plan(topology, policy or {}))


def gres_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        match = LINE.match(line)
        assert match, line
        out.append({"type": match.group(1), "minor": int(match.group(2)),
                    "cores": parse_cpulist(match.group(3)) if match.group(3) else []})
    return out


def lstopo_cores(root: Path) -> dict[int, int]:
    """Linux CPU -> hwloc's logical core index, from lstopo's XML (objects in the order of hwloc's tree walk)."""
    if shutil.which("lstopo") is None:
        pytest.skip("lstopo (Debian package hwloc) is not installed: apt-get install hwloc for the hwloc oracle")
    done = subprocess.run(["lstopo", "--input-format", "fsroot", "--input", str(root), "--of", "xml", "-"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out: dict[int, int] = {}
    cores = [o for o in ET.fromstring(done.stdout).iter("object") if o.get("type") == "Core"]
    for position, core in enumerate(cores):
        for pu in core.iter("object"):
            if pu.get("type") == "PU":
                out[int(pu.get("os_index"))] = position
    assert out, "hwloc saw no cores: the oracle is empty"
    return out


def hwloc_calc(root: Path, cpus: list[int]) -> list[int]:
    """``hwloc-calc --input <tree> --intersect core --physical-input pu:N ...``: the logical cores of these CPUs."""
    if shutil.which("hwloc-calc") is None:
        pytest.skip("hwloc-calc (Debian package hwloc) is not installed: apt-get install hwloc for the hwloc oracle")
    done = subprocess.run(["hwloc-calc", "--input", str(root), "--intersect", "core", "--physical-input"]
                          + [f"pu:{cpu}" for cpu in cpus], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [int(word) for word in done.stdout.strip().split(",") if word]


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# ------------------------------------------------------------------------------------------------ hwloc's order
@pytest.mark.parametrize("numbering", ["interleaved", "split", "adjacent"])
def test_slurm_core_indexes_are_hwlocs_on_the_lab_nodes(tmp_path: Path, numbering: str) -> None:
    root = build(tmp_path, cpu__numbering=numbering)
    topology = discover(str(root))
    ours = area_slurm.logical_cores(topology, area_slurm.cache_sets(Root(str(root)), topology))
    assert ours == lstopo_cores(root)


@pytest.mark.parametrize("name", CAPTURES)
def test_slurm_core_indexes_are_hwlocs_on_the_real_captures(name: str) -> None:
    root = realdata.capture_root(name)
    topology = discover(str(root))
    ours = area_slurm.logical_cores(topology, area_slurm.cache_sets(Root(str(root)), topology))
    assert ours == lstopo_cores(root)


def test_the_captures_really_number_cpus_otherwise_than_hwloc() -> None:
    """The comparison above is meaningful: on these captures the Linux CPU order of the cores is not their hwloc
    order (a conversion that returned each core's rank in Linux order would fail there)."""
    unusual = []
    for name in ("knit", "nto", "utillinux-x7550", "nri-server"):
        root = realdata.capture_root(name)
        hw = lstopo_cores(root)
        firsts = sorted(set(min(c for c in hw if hw[c] == index) for index in hw.values()))
        if [hw[cpu] for cpu in firsts] != list(range(len(firsts))):
            unusual.append(name)
    assert unusual == ["knit", "nto", "utillinux-x7550", "nri-server"]


def test_a_bulldozer_compute_unit_is_two_cores_as_hwloc_says() -> None:
    """AMD family 15h lists a compute unit's two cores as thread siblings with two core ids: hwloc makes two cores."""
    topology = discover(str(realdata.capture_root("hwloc-opteron")))
    cpu0 = next(c for c in topology["cpus"] if c["id"] == 0)
    assert len(cpu0["thread_siblings"]) == 2
    index = area_slurm.logical_cores(topology)
    assert index[cpu0["thread_siblings"][0]] != index[cpu0["thread_siblings"][1]]


# ------------------------------------------------------------------------------------------------ the file
def test_every_line_names_the_render_node_and_the_cores_hwloc_calc_gives(tmp_path: Path) -> None:
    """A node whose sockets take turns (CPU 2k on socket 0): Slurm's core indexes differ from the Linux CPUs."""
    root = build(tmp_path, cpu__numbering="interleaved")
    ctx = context(root)
    settings = area_slurm.build(ctx, ALWAYS["slurm"])
    assert ctx.errors == [] and [s.id for s in settings] == ["slurm.gres"]
    lines = gres_lines(settings[0].value)
    ranks = ctx.layout["ranks"]
    assert len(lines) == len(ranks) == 2
    differs = 0
    for line, rank in zip(lines, ranks, strict=True):
        gpu = next(g for g in ctx.topology["gpus"] if g["bdf"] == rank["gpu"])
        assert f"renderD{line['minor']}" == gpu["render_node"]
        assert line["type"] == "mi300x"
        assert line["cores"] == hwloc_calc(root, rank["cpus"])
        differs += line["cores"] != rank["cpus"]
    assert differs == 2, "the interleaved node's rank CPUs are not their Slurm core indexes"
    assert settings[0].value.startswith("# Managed by nodetune")
    assert "Include /etc/slurm/nodetune-gres.conf" in settings[0].value


def test_numa_cores_are_every_core_of_the_gpus_node(tmp_path: Path) -> None:
    root = build(tmp_path, cpu__numbering="interleaved")
    ctx = context(root)
    settings = area_slurm.build(ctx, dict(ALWAYS["slurm"], nodetune_slurm_gres_cores="numa"))
    for line, rank in zip(gres_lines(settings[0].value), ctx.layout["ranks"], strict=True):
        node = next(n for n in ctx.topology["numa_nodes"] if n["id"] == rank["numa_node"])
        assert line["cores"] == hwloc_calc(root, node["cpus"])
        assert set(hwloc_calc(root, rank["cpus"])) < set(line["cores"])


def test_a_cpx_gpu_gets_one_line_per_partition_with_its_own_render_node(tmp_path: Path) -> None:
    """MI300X in CPX mode: 8 partitions per GPU, each a KFD node with its own DRM render node (partition 0 the PCI
    device's, the others amdgpu_xcp platform devices), each its own rank."""
    root = build(tmp_path, cpu__cores_per_socket=16, numa__per_socket=1, faults__compute_partition="CPX")
    ctx = context(root)
    settings = area_slurm.build(ctx, ALWAYS["slurm"])
    lines = gres_lines(settings[0].value)
    assert [line["minor"] for line in lines] == list(range(128, 144))
    for minor in range(128, 144):
        assert (root / f"sys/class/drm/renderD{minor}").exists()
    first = ctx.topology["gpus"][0]
    assert len(first["kfd_nodes"]) == 8 and first["render_node"] == "renderD128"
    assert (root / "sys/bus/pci/devices" / first["bdf"] / "drm/renderD128").exists()
    assert not (root / "sys/bus/pci/devices" / first["bdf"] / "drm/renderD129").exists()
    cores = [tuple(line["cores"]) for line in lines]
    assert all(cores) and len(set(cores)) == 16, "every partition has cores of its own"
    assert [line["cores"] for line in lines] == [hwloc_calc(root, r["cpus"]) for r in ctx.layout["ranks"]]
    # ranks per_device: a GPU's partitions share its rank's cores, still one line (one device file) each
    ctx = context(root, {"ranks": "per_device"})
    lines = gres_lines(area_slurm.build(ctx, ALWAYS["slurm"])[0].value)
    assert len(lines) == 16 and len(set(tuple(line["cores"]) for line in lines)) == 2


def test_the_real_cpx_capture_gives_one_line_per_kfd_partition() -> None:
    """ROCm's MI300X CPX capture (KFD topology only): 63 partitions, each with the render minor KFD gives it."""
    root = realdata.kfd_root()
    topology = discover(str(root))
    text = area_slurm.gres_text(Root(str(root)), topology, {}, area_slurm.DEFAULT_PATH, None, "rank")
    lines = gres_lines(text)
    expected = []
    for node in sorted(int(n) for n in os.listdir(root / "sys/class/kfd/kfd/topology/nodes")):
        props = parse_key_value((root / "sys/class/kfd/kfd/topology/nodes" / str(node) / "properties").read_text())
        if props.get("simd_count", "0") != "0":
            expected.append(int(props["drm_render_minor"]))
    assert len(lines) == 63 and [line["minor"] for line in lines] == sorted(expected)
    assert all(line["cores"] == [] for line in lines)  # no CPU topology in the capture: no Cores= (any core)


def test_a_gpu_without_a_render_node_is_refused(tmp_path: Path) -> None:
    root = build(tmp_path)
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    props = next(n / "properties" for n in nodes.iterdir() if "simd_count 0\n" not in (n / "properties").read_text())
    props.write_text(re.sub(r"drm_render_minor \d+", "drm_render_minor 0", props.read_text()))
    ctx = context(root)
    assert area_slurm.build(ctx, ALWAYS["slurm"]) == []
    assert "has no drm_render_minor" in ctx.errors[0] and "nodetune_slurm_gres: never" in ctx.errors[0]


# ------------------------------------------------------------------------------------------------ Slurm's parser
def test_slurmd_parses_the_file_on_the_lab_nodes_topology(tmp_path: Path) -> None:
    """Debian's slurmd -G reads slurm.conf, then gres.conf and the fragment it includes, converts each Cores= to
    CPUs with hwloc (HWLOC_FSROOT: the lab node) and stats each File= (a private /dev with the render nodes)."""
    if shutil.which("slurmd") is None or shutil.which("unshare") is None:
        pytest.skip("slurmd (Debian package slurmd) or unshare is not installed: Slurm's own parser cannot run")
    if os.geteuid() != 0:
        pytest.skip("a private mount namespace for /dev/dri needs root")
    root = build(tmp_path, cpu__numbering="interleaved", cpu__cores_per_socket=16, numa__per_socket=1,
                 faults__compute_partition="CPX")
    ctx = context(root)
    text = area_slurm.build(ctx, ALWAYS["slurm"])[0].value
    conf = tmp_path / "etc"
    conf.mkdir()
    (conf / "nodetune-gres.conf").write_text(text)
    (conf / "gres.conf").write_text("Include %s\n" % (conf / "nodetune-gres.conf"))
    (conf / "slurm.conf").write_text("ClusterName=lab\nSlurmctldHost=localhost\nGresTypes=gpu\n"
                                     "NodeName=lab1 Sockets=2 CoresPerSocket=16 ThreadsPerCore=2 Gres=gpu:mi300x:16\n"
                                     "PartitionName=gpu Nodes=lab1\n")
    # slurmd wants character devices (drm's major 226, the render minor): made in a tmpfs of a private namespace;
    # /dev/shm goes along (the test's folders are there when the suite runs in memory: tests/conftest.py)
    devices = " ".join(str(n) for n in range(128, 144))
    script = ("set -e; mount --make-rprivate /; d=$(mktemp -d); mount -t tmpfs tmpfs $d; mkdir $d/dri $d/shm; "
              f"for n in {devices}; do mknod $d/dri/renderD$n c 226 $n; done; "
              "for f in null zero urandom; do : > $d/$f; mount --bind /dev/$f $d/$f; done; "
              "mount --rbind /dev/shm $d/shm; mount --rbind $d /dev; "
              "exec slurmd -G -N lab1")
    env = dict(os.environ, SLURM_CONF=str(conf / "slurm.conf"), HWLOC_FSROOT=str(root))
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "error" not in output.lower(), output
    parsed = re.findall(r"Gres Name=gpu Type=(\S+) Count=1 .*File=/dev/dri/renderD(\d+) Cores=(\S+) CoreCnt=(\d+)",
                        output)
    expected = gres_lines(text)
    assert [(t, int(m), parse_cpulist(c)) for t, m, c, _n in parsed] == [
        ("mi300x", line["minor"], line["cores"]) for line in expected]
    assert {int(n) for *_rest, n in parsed} == {64}  # slurmd counted the lab node's CPUs (not this machine's)
    # Linux CPU numbers where core indexes belong: the first rank's second-thread CPUs are beyond the 32 cores
    linux = ",".join(str(c) for c in range(32, 40))
    (conf / "nodetune-gres.conf").write_text(f"Name=gpu Type=mi300x File=/dev/dri/renderD128 Cores={linux}\n")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert "Invalid GRES data for gpu, Cores=32" in done.stdout + done.stderr


# ------------------------------------------------------------------------------------------------ the area's rules
@pytest.mark.parametrize(("variable", "value", "says"), [
    ("nodetune_slurm_gres", "yes", "choose one of auto, always, never"),
    ("nodetune_slurm_gres_path", "etc/slurm/x.conf", "absolute, normalised file path"),
    ("nodetune_slurm_gres_path", "/etc/slurm/../x.conf", "absolute, normalised file path"),
    ("nodetune_slurm_gres_path", "/etc/slurm/my gres.conf", "without spaces"),
    ("nodetune_slurm_gres_path", "/etc/slurm/slurm.conf", "not slurm.conf itself"),
    ("nodetune_slurm_gres_type", "mi300x:8", "no ':', ',', '=' or spaces"),
    ("nodetune_slurm_gres_cores", "all", "choose one of rank, numa"),
    ("nodetune_slurm_gres_file", "/x", "is not a setting of the slurm area"),
])
def test_bad_values_are_refused_before_any_write(tmp_path: Path, variable: str, value: Any, says: str) -> None:
    root = build(tmp_path)
    before = tree_digest(root)
    with pytest.raises(SettingError) as caught:
        load(str(root), {"slurm": dict(ALWAYS["slurm"], **{variable: value})})
    message = str(caught.value)
    assert variable in message and says in message and (str(value) in message or variable.endswith("_file"))
    assert tree_digest(root) == before


def test_auto_writes_only_where_slurm_is_set_up_and_never_writes_nothing(tmp_path: Path) -> None:
    root = build(tmp_path)
    ctx = context(root)
    assert area_slurm.build(ctx, ON["slurm"]) == []
    assert any("no slurm.conf" in note for note in ctx.notes)
    write(root, "etc/slurm-llnl/slurm.conf", "ClusterName=lab\n")
    assert [s.path for s in area_slurm.build(context(root), ON["slurm"])] == [FRAGMENT]
    ctx = context(root)
    assert area_slurm.build(ctx, dict(ON["slurm"], nodetune_slurm_gres="never")) == []
    assert any("never" in note for note in ctx.notes)


def test_apply_check_mode_verify_second_apply_and_revert(tmp_path: Path) -> None:
    root = build(tmp_path)
    write(root, "etc/slurm/slurm.conf", "ClusterName=lab\nPropagateResourceLimitsExcept=MEMLOCK\n")
    before = tree_digest(root)
    state = load(str(root), ON)
    dry = engine.apply(state.root, state.settings, check_mode=True, services=state.services)
    assert dry["changed"] and tree_digest(root) == before
    assert "Name=gpu Type=mi300x File=/dev/dri/renderD128" in dry["diff"]["after"]
    first = engine.apply(state.root, state.settings, services=state.services)
    assert first["changed"] and (root / FRAGMENT).read_text() == state.settings[0].value
    state = load(str(root), ON)
    found = dict((f.id, f) for f in verify_settings(state, ON) if f.id.startswith("slurm."))
    assert found["slurm.gres"].status == OK and found["slurm.propagate_limits"].status == OK
    assert found["slurm.gres_include"].status == DRIFT and "Include /etc/slurm/nodetune-gres.conf" in \
        found["slurm.gres_include"].remedy
    write(root, "etc/slurm/gres.conf", "AutoDetect=off\nInclude /etc/slurm/nodetune-gres.conf\n")
    (root / FRAGMENT).write_text("Name=gpu File=/dev/dri/renderD128\n")  # hand-edited
    found = dict((f.id, f) for f in verify_settings(load(str(root), ON), ON) if f.id.startswith("slurm."))
    assert found["slurm.gres"].status == DRIFT and found["slurm.gres_include"].status == OK
    assert [p for p in node_check.problems(str(root)) if p.startswith("slurm.gres ")]  # HealthCheckProgram sees it
    engine.apply(state.root, state.settings, services=state.services)
    assert engine.apply(state.root, load(str(root), ON).settings, services=state.services)["changed"] is False
    engine.revert(Root(str(root)))
    assert not (root / FRAGMENT).exists() and (root / "etc/slurm/gres.conf").exists()


def test_revert_puts_back_a_gres_conf_nodetune_took_over(tmp_path: Path) -> None:
    root = build(tmp_path)
    write(root, "etc/slurm/slurm.conf", "ClusterName=lab\n")
    write(root, "etc/slurm/gres.conf", "AutoDetect=rsmi\n")
    areas = {"slurm": dict(ON["slurm"], nodetune_slurm_gres_path="/etc/slurm/gres.conf")}
    state = load(str(root), areas)
    engine.apply(state.root, state.settings, services=state.services)
    assert (root / "etc/slurm/gres.conf").read_text().startswith("# Managed by nodetune")
    assert not any(f.id == "slurm.gres_include" for f in verify_settings(load(str(root), areas), areas))
    engine.revert(Root(str(root)))
    assert (root / "etc/slurm/gres.conf").read_text() == "AutoDetect=rsmi\n"


# ------------------------------------------------------------------------------------------------ read-only checks
@pytest.mark.parametrize(("lines", "status", "says"), [
    ("", DRIFT, "unset: ALL, Slurm's default"),
    ("PropagateResourceLimitsExcept=MEMLOCK", OK, "PropagateResourceLimitsExcept=MEMLOCK"),
    ("propagateresourcelimitsexcept=STACK,memlock", OK, "STACK,memlock"),
    ("PropagateResourceLimits=NONE", OK, "PropagateResourceLimits=NONE"),
    ("PropagateResourceLimits=CORE,MEMLOCK", DRIFT, "CORE,MEMLOCK"),
    ("PropagateResourceLimitsExcept=STACK", DRIFT, "PropagateResourceLimitsExcept=STACK"),
    ("PropagateResourceLimits=NONE\nPropagateResourceLimitsExcept=MEMLOCK", DRIFT, "both"),
    ("Include limits.conf", OK, "/etc/slurm/limits.conf:1"),  # an Include is read in its place
])
def test_propagate_limits(tmp_path: Path, lines: str, status: str, says: str) -> None:
    root = build(tmp_path)
    write(root, "etc/slurm/slurm.conf", f"ClusterName=lab  # comment\n{lines}\n")
    write(root, "etc/slurm/limits.conf", "PropagateResourceLimitsExcept=MEMLOCK\n")
    found = [f for f in area_slurm.readonly_findings(Root(str(root)), [], ON) if f.id == "slurm.propagate_limits"]
    assert [f.status for f in found] == [status] and says in found[0].actual
    assert ("PropagateResourceLimitsExcept=MEMLOCK" in found[0].remedy) == (status == DRIFT)


SLURMD = "[Unit]\nDescription=Slurm node daemon\n\n[Service]\nExecStart=/usr/sbin/slurmd -D -s\n%s\n"


@pytest.mark.parametrize(("files", "status", "says"), [
    ({"usr/lib/systemd/system/slurmd.service": SLURMD % "LimitMEMLOCK=infinity"}, OK, "infinity"),
    ({"usr/lib/systemd/system/slurmd.service": SLURMD % "LimitMEMLOCK=infinity",
      "etc/systemd/system/slurmd.service.d/override.conf": "[Service]\nLimitMEMLOCK=64K\n"}, DRIFT,
     "64K (/etc/systemd/system/slurmd.service.d/override.conf)"),
    ({"usr/lib/systemd/system/slurmd.service": SLURMD % "",
      "etc/systemd/system/slurmd.service.d/nodetune-limits.conf": "[Service]\nLimitMEMLOCK=infinity\n"}, OK,
     "nodetune-limits.conf"),
    ({"usr/lib/systemd/system/slurmd.service": SLURMD % ""}, DRIFT, "8M (systemd's default)"),
    ({"usr/lib/systemd/system/slurmd.service": SLURMD % "",
      "etc/systemd/system.conf.d/memlock.conf": "[Manager]\nDefaultLimitMEMLOCK=infinity\n"}, OK,
     "DefaultLimitMEMLOCK"),
])
def test_slurmd_memlock_reads_the_unit_and_its_drop_ins(tmp_path: Path, files: dict[str, str], status: str,
                                                        says: str) -> None:
    root = build(tmp_path)
    (root / "etc/systemd/system.conf.d/90-memlock.conf").unlink()  # the lab image's DefaultLimitMEMLOCK=infinity
    for rel, text in files.items():
        write(root, rel, text)
    found = [f for f in area_slurm.readonly_findings(Root(str(root)), [], ON) if f.id == "slurm.slurmd_memlock"]
    assert [f.status for f in found] == [status] and says in found[0].actual
    assert ("LimitMEMLOCK=infinity" in found[0].remedy) == (status == DRIFT)


def test_no_slurm_files_no_findings_and_the_area_off_checks_nothing(tmp_path: Path) -> None:
    root = build(tmp_path)
    assert area_slurm.readonly_findings(Root(str(root)), [], ON) == []
    write(root, "etc/slurm/slurm.conf", "ClusterName=lab\n")
    assert len(area_slurm.readonly_findings(Root(str(root)), [], ON)) == 1
    assert area_slurm.readonly_findings(Root(str(root)), [], {}) == []
    assert area_slurm.readonly_findings(Root(str(root)), [], {"slurm": {"nodetune_slurm_enabled": False}}) == []
