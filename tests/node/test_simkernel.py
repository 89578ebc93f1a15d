"""The lab's simulated kernel (nodetune.lab simkernel.py): writes stay inside the root, multi-file updates are whole
after a kill -9, and cpumasks have the kernel's width (issue 16 items 8, 13 and 14)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine, node
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import parse_cpulist
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError, Root, use_backend
from ansible_collections.nodetune.lab.plugins.module_utils import simkernel, simnode
from ansible_collections.nodetune.lab.plugins.module_utils.simkernel import kernel_cpumask, sim_root

from tests.support.lab_vars import AREAS
from tests.support.specs import small_spec
from tests.support.trees import tree_digest

CPU = "sys/devices/system/cpu"


def mi300x_16() -> dict:
    """A small MI300X node: one socket of 8 cores with SMT (16 CPUs), one GPU, one IB HCA, one NVMe."""
    spec = small_spec(cpu__sockets=1, numa__per_socket=1)
    spec["gpus"], spec["nvme"] = spec["gpus"][:1], spec["nvme"][:1]
    spec["nics"] = [nic for nic in spec["nics"] if nic.get("switch") != "s1"]
    return spec


@pytest.fixture
def sixteen(tmp_path: Path) -> Path:
    dest = tmp_path / "mi300x-16"
    simnode.build(mi300x_16(), str(dest))
    return dest


def movable_irq(root: Path) -> int:
    """An IRQ whose affinity user space may set (not kernel-managed)."""
    for entry in sorted((root / "proc/irq").iterdir(), key=lambda p: (len(p.name), p.name)):
        affinity = entry / "smp_affinity_list"
        if entry.name.isdigit() and affinity.exists() and affinity.stat().st_mode & 0o200:
            return int(entry.name)
    raise AssertionError(f"no movable IRQ in {root}")


# ------------------------------------------------------------------------------------------ 16.14 mask width
@pytest.mark.parametrize(("cpus", "nr_cpu_ids", "printed"), [
    ([0], 16, "0001"), ([0], 4, "1"), ([3, 7], 8, "88"), ([0], 32, "00000001"), ([0], 33, "0,00000001"),
    (list(range(40)), 40, "ff,ffffffff"), ([0], 64, "00000000,00000001"), ([39], 40, "80,00000000"),
])
def test_kernel_cpumask_has_the_width_of_the_kernels_pb_format(cpus: list[int], nr_cpu_ids: int,
                                                              printed: str) -> None:
    assert kernel_cpumask(cpus, nr_cpu_ids) == printed


def test_irq_masks_keep_the_kernel_width_on_a_16_cpu_node(sixteen: Path) -> None:
    irq = movable_irq(sixteen)
    base = sixteen / "proc/irq" / str(irq)
    assert len((base / "smp_affinity").read_text().strip()) == 4  # as built
    sim_root(str(sixteen)).write(f"proc/irq/{irq}/smp_affinity_list", "0")
    assert (base / "smp_affinity").read_text() == "0001\n"
    if (base / "effective_affinity").exists():
        assert (base / "effective_affinity").read_text() == "0001\n"


def test_apply_and_revert_of_a_small_mi300x_node_leave_it_byte_identical(sixteen: Path) -> None:
    pristine = tree_digest(sixteen)
    simkernel.install()
    try:
        state = node.load(str(sixteen), AREAS, {})
        result = engine.apply(state.root, state.settings, services=state.services)
        assert any(a["id"].startswith("irq.") for a in result["actions"]), "the IRQ area moved nothing"
        engine.revert(Root(str(sixteen)), services=state.services)
    finally:
        use_backend(None)
    after = tree_digest(sixteen)
    changed = sorted(p for p in set(pristine) | set(after) if pristine.get(p) != after.get(p))
    # An IRQ stays on the CPU it was pinned to when the wider mask is written back (the_kernel_keeps_an_irq_...):
    # effective_affinity is the kernel's choice, never restored; it only has to lie inside the restored mask.
    assert [p for p in changed if not p.endswith(("/effective_affinity", "/effective_affinity_list"))] == []
    for path in changed:
        if path.endswith("/effective_affinity_list"):
            mask = parse_cpulist((sixteen / path).with_name("smp_affinity_list").read_text())
            assert set(parse_cpulist((sixteen / path).read_text())) <= set(mask), path


def test_the_kernel_keeps_an_irq_on_its_cpu_when_the_new_mask_holds_it(sixteen: Path) -> None:
    # arch/x86/kernel/apic/vector.c, assign_vector_locked(): "If the current target CPU is online and in the new
    # requested affinity mask, there is no point in moving the interrupt" - so a revert to the wide mask leaves it
    irq = movable_irq(sixteen)
    base = sixteen / "proc/irq" / str(irq)
    wide = (base / "smp_affinity_list").read_text().strip()
    kernel = sim_root(str(sixteen))
    kernel.write(f"proc/irq/{irq}/smp_affinity_list", "5")
    assert (base / "effective_affinity_list").read_text().strip() == "5"
    kernel.write(f"proc/irq/{irq}/smp_affinity_list", wide)
    assert (base / "smp_affinity_list").read_text().strip() == wide
    assert (base / "effective_affinity_list").read_text().strip() == "5"
    kernel.write(f"proc/irq/{irq}/smp_affinity_list", "6-7")  # not in the new mask: the allocator picks one of it
    assert (base / "effective_affinity_list").read_text().strip() in ("6", "7")


# ------------------------------------------------------------------------------------------ 16.8 no escape
@pytest.mark.parametrize(("link", "write"), [
    (CPU + "/offline", (CPU + "/cpu3/online", "0")),
    ("proc/irq/{irq}/smp_affinity", ("proc/irq/{irq}/smp_affinity_list", "1")),
    ("proc/irq/{irq}/effective_affinity_list", ("proc/irq/{irq}/smp_affinity_list", "1")),
    (CPU + "/cpu1/cpufreq/energy_performance_preference" + simkernel.EPP_CACHED_SUFFIX,
     (CPU + "/cpu1/cpufreq/scaling_governor", "performance")),
])
def test_simulated_writes_never_follow_a_link_out_of_the_root(sixteen: Path, tmp_path: Path, link: str,
                                                               write: tuple[str, str]) -> None:
    irq = movable_irq(sixteen)
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    path = sixteen / link.format(irq=irq)
    if path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to(outside)  # absolute: the host's own file
    with contextlib.suppress(NodeFileError):  # refused or written inside the root: either way not outside
        sim_root(str(sixteen)).write(write[0].format(irq=irq), write[1])
    assert outside.read_text() == "precious\n"
    assert not (sixteen / simkernel.PENDING).exists()


def test_a_relative_link_climbing_out_is_written_inside_the_root(sixteen: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"  # the root's parent folder: one ".." more than the root
    outside.write_text("precious\n")
    offline = sixteen / CPU / "offline"
    offline.unlink()
    offline.symlink_to("../../../../../outside.txt")
    sim_root(str(sixteen)).write(CPU + "/cpu3/online", "0")
    assert outside.read_text() == "precious\n"
    assert (sixteen / "outside.txt").read_text() == "3\n"  # ".." stops at the root


# ------------------------------------------------------------------------------------------ 16.13 kill -9
def killed_after(steps: int, action: Callable[[], None]) -> int:
    """Run ``action`` in a child process that dies like kill -9 (no cleanup at all) at its ``steps``-th file
    operation; returns the child's exit code (0: it finished before)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        count = [0]

        def dying(call: Callable) -> Callable:
            def wrapper(*args, **kwargs):
                count[0] += 1
                if count[0] > steps:
                    os._exit(9)
                return call(*args, **kwargs)
            return wrapper

        for name in ("open", "write", "replace", "unlink"):
            setattr(os, name, dying(getattr(os, name)))
        try:
            action()
        except BaseException:
            os._exit(1)
        os._exit(0)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def cpu_state(root: Path) -> tuple[list[int], list[int], dict[int, str], str]:
    read = lambda rel: (root / rel).read_text().strip()  # noqa: E731
    present = parse_cpulist(read(CPU + "/present"))
    files = {c: read(f"{CPU}/cpu{c}/online") for c in present if (root / CPU / f"cpu{c}" / "online").exists()}
    return parse_cpulist(read(CPU + "/online")), parse_cpulist(read(CPU + "/offline") or ""), files, \
        read(CPU + "/smt/control")


def test_smt_off_killed_at_any_point_leaves_whole_cpu_lists(sixteen: Path) -> None:
    before = cpu_state(sixteen)
    present = before[0]
    secondaries = list(range(8, 16))
    steps = 0
    while True:
        code = killed_after(steps, lambda: sim_root(str(sixteen)).write(CPU + "/smt/control", "off"))
        sim_root(str(sixteen))  # the next run (or lab module) finishes a staged update
        online, offline, files, control = cpu_state(sixteen)
        assert (online, control) in ((present, "on"), ([c for c in present if c not in secondaries], "off")), steps
        assert sorted(online + offline) == present and not set(online) & set(offline), steps
        assert all(value == ("1" if c in online else "0") for c, value in files.items()), steps
        assert not [p.name for p in (sixteen / "run").iterdir() if p.name.startswith(".nodetune-simkernel")]
        if code == 0:
            break
        assert code == 9
        sim_root(str(sixteen)).write(CPU + "/smt/control", "on")
        assert cpu_state(sixteen) == before
        steps += 1
    assert steps > 10  # the kill landed between every file of the update


def test_a_run_attaching_beside_an_update_waits_for_it(sixteen: Path) -> None:
    """A Root attaching to a simulated node replays a killed run's update (simkernel.recover), and it does so before
    the run takes the node's lock. It must wait for an update another process is making, not delete its staged
    file: that race failed the concurrent apply/revert test of the safety catalogue about every other run."""
    import multiprocessing
    import threading

    root = sim_root(str(sixteen))
    staging = Path(simkernel._run_file(root, simkernel._STAGING_NAME))
    context = multiprocessing.get_context("fork")
    held, release = context.Event(), context.Event()

    def writer() -> None:  # another process, in the middle of a multi-file update
        with simkernel._update_lock(root):
            staging.write_text("[]")
            held.set()
            release.wait(30)
            staging.unlink()  # its update done, as _put_all leaves it

    child = context.Process(target=writer)
    child.start()
    try:
        assert held.wait(30)
        attaching = threading.Thread(target=lambda: sim_root(str(sixteen)))
        attaching.start()
        attaching.join(0.5)
        assert attaching.is_alive() and staging.exists()  # waiting, the writer's file untouched
    finally:
        release.set()
        child.join(30)
    attaching.join(30)
    assert not attaching.is_alive() and child.exitcode == 0 and not staging.exists()
