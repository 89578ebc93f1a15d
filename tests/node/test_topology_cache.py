"""The node's structure kept between runs (discover/structure.py; issue 28 item 4): the Topology is the same with and
without it, on the lab's full-size nodes, on every real capture, and after each change that must invalidate it (a CPU
offlined, a device added or replaced, an IRQ added or given to another device, a driver unbound, a NUMA node
overridden, another cpufreq driver, a reboot); a file that is corrupt, of another shape, reached through a link or not
nodetune's own is never trusted; only the tune module outside check mode writes it, and revert removes it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.discover import structure
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.irq import interrupt_rows, parse_interrupts
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.topology import discover
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import ParseError
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root
from ansible_collections.nodetune.instinct.plugins.modules import topology_facts
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests import realdata
from tests.support.inprocess import run_lab_module, run_main
from tests.support.lab_vars import AREAS
from tests.support.specs import LAB_SPECS, small_spec
from tests.support.trees import tree_digest

KEPT = ("cpus", "cpufreq", "l3_domains", "pci", "irqs")  # every section a discovery with values takes from the store
# what the modules' discovery (node.load: the structure without current values) takes from it
KEPT_STRUCTURE = ("cpus", "cpufreq", "cpuidle", "l3_domains", "pci", "irqs")
CPU = "sys/devices/system/cpu"
# The small node, with mlx5 completion vectors that a first user creates (Linux >= 6.5: IRQs added at run time).
SPEC = small_spec(nics=[
    {"name": "ib0", "model": "ConnectX-7", "bdf": "0000:03:00.0", "switch": "s0", "comp_vectors": 8,
     "comp_vectors_at_boot": 2},
    {"name": "ib1", "model": "ConnectX-7", "bdf": "0000:83:00.0", "switch": "s1"},
    {"name": "eno1", "model": "BCM57416", "bdf": "0000:11:00.0"}])


def keep(root: Path, irq_counts: bool = False) -> dict[str, Any]:
    """Discover afresh and keep the structure, as the tune module does; the Topology."""
    store = structure.StructureStore(str(root), writable=True)
    topology = discover(str(root), irq_counts=irq_counts, structure=store)
    assert store.save()
    return topology


def from_store(root: Path, irq_counts: bool = False) -> tuple[dict[str, Any], list[str]]:
    """Discover with the kept structure, read only (verify, check mode); the Topology and the sections taken."""
    store = structure.StructureStore(str(root))
    return discover(str(root), irq_counts=irq_counts, structure=store), store.hits


def fresh(root: Path, irq_counts: bool = False) -> dict[str, Any]:
    return discover(str(root), irq_counts=irq_counts)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("cache") / "node"
    simnode.build(SPEC, str(dest))
    return dest


@pytest.fixture
def node(template: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "node"
    shutil.copytree(template, dest, symlinks=True)
    return dest


# ------------------------------------------------------------------------------------------------ the same Topology
@pytest.mark.parametrize("spec", ["mi250.yml", "mi300x.yml"])
def test_the_full_size_lab_nodes_discover_the_same_with_the_cache(tmp_path: Path, spec: str) -> None:
    root = tmp_path / "node"
    simnode.build(str(LAB_SPECS / spec), str(root))
    without = fresh(root)
    assert keep(root) == without  # the run that reads the structure afresh and keeps it
    with_cache, hits = from_store(root)
    assert hits == list(KEPT)
    assert with_cache == without
    assert from_store(root, irq_counts=True) == (fresh(root, irq_counts=True), list(KEPT))  # topology_facts


def test_every_real_capture_discovers_the_same_with_its_structure_kept(tmp_path: Path) -> None:
    """In memory (the captures are shared): what a store keeps is encoded, decoded and checked as from the file."""
    realdata.require_real()
    for name, root in realdata.all_roots().items():
        store = structure.StructureStore(str(tmp_path))  # kept in memory: never saved
        first = discover(str(root), structure=store)
        again = discover(str(root), structure=store)
        assert first == again == discover(str(root)), name


def test_a_tuned_node_takes_every_kept_section_and_the_same_plan(node: Path, simulated_kernel: Any) -> None:
    from ansible_collections.nodetune.instinct.plugins.module_utils.apply import engine
    from ansible_collections.nodetune.instinct.plugins.module_utils.apply import node as node_mod

    state = node_mod.load(str(node), AREAS, {})
    engine.apply(state.root, state.settings, services=state.services)  # siblings offline, affinities pinned
    keep(node)
    store = structure.StructureStore(str(node))
    cached = node_mod.load(str(node), AREAS, {}, structure=store)
    plain = node_mod.load(str(node), AREAS, {})
    assert store.hits == list(KEPT)
    assert cached.topology == plain.topology and cached.layout == plain.layout
    assert [s.to_dict() for s in cached.settings] == [s.to_dict() for s in plain.settings]


# ------------------------------------------------------------------------------------------------ what invalidates
def offline_sibling(root: Path) -> None:
    """The smt area's write, and what the kernel then shows that the simulated kernel leaves as it was: the primary's
    thread_siblings_list without it (arch/x86/kernel/smpboot.c remove_siblinginfo) and no cache/ of its own."""
    siblings = (root / CPU / "cpu0/topology/thread_siblings_list").read_text().strip()
    sibling = max(int(c) for c in siblings.replace("-", ",").split(","))
    Root(str(root)).write(f"{CPU}/cpu{sibling}/online", "0")
    (root / CPU / "cpu0/topology/thread_siblings_list").write_text("0\n")
    shutil.rmtree(root / CPU / f"cpu{sibling}/cache")


def add_device(root: Path) -> None:
    """A second NVMe drive hot-plugged beside the first (its function's directory and its bus entry)."""
    link = root / "sys/bus/pci/devices/0000:41:00.0"
    real = (link.parent / os.readlink(link)).resolve()
    shutil.copytree(real, real.with_name("0000:41:00.1"), symlinks=True)
    (link.parent / "0000:41:00.1").symlink_to(os.readlink(link)[:-1] + "1")


def replace_device(root: Path) -> None:
    """Another card in the same slot: the same address, a new bus entry (created before the old one goes, as
    kernfs never reuses an inode number), other ids."""
    link = root / "sys/bus/pci/devices/0000:41:00.0"
    target = os.readlink(link)
    (link.parent / "new").symlink_to(target)
    os.replace(link.parent / "new", link)
    (link.parent / target / "device").write_text("0xa80a\n")


def add_irqs(root: Path) -> None:
    simnode.use_comp_vectors(str(root), "ib0")  # mlx5 creates completion vectors at their first user


def reassign_irq(root: Path) -> None:
    """An IRQ number freed by one device and allocated to another on another NUMA node: its row's chip and hardware
    IRQ say so, and its node file."""
    text = (root / "proc/interrupts").read_text()
    lines = text.splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if line.rstrip().endswith(" nvme0q1"))
    number = int(lines[index].split(":", 1)[0])
    lines[index] = lines[index].replace("nvme0q1", "mlx5_comp9@pci:0000:83:00.0").replace(
        "IR-PCI-MSIX-0000:41:00.0", "IR-PCI-MSIX-0000:83:00.0")
    (root / "proc/interrupts").write_text("".join(lines))
    node = root / f"proc/irq/{number}/node"
    node.write_text("3\n" if node.read_text().strip() != "3" else "0\n")


def unbind_driver(root: Path) -> None:
    (root / "sys/bus/pci/devices/0000:41:00.0/driver").unlink()


def override_numa_node(root: Path) -> None:
    """``echo 3 > numa_node`` (pci-sysfs.c numa_node_store, for broken firmware): local_cpulist follows it."""
    device = root / "sys/bus/pci/devices/0000:41:00.0"
    (device / "numa_node").write_text("3\n")
    (device / "local_cpulist").write_text((root / "sys/devices/system/node/node3/cpulist").read_text())


def other_cpufreq_driver(root: Path) -> None:
    """acpi-cpufreq in place of amd-pstate-epp, with CPUs 0 and 1 in one policy (_PSD coordination): policy1 goes."""
    policies = root / CPU / "cpufreq"
    shutil.rmtree(policies / "policy1")
    for policy in policies.glob("policy*"):
        (policy / "scaling_driver").write_text("acpi-cpufreq\n")
    for name in ("affected_cpus", "related_cpus"):
        (policies / "policy0" / name).write_text("0-1\n")


def reboot_with_other_cores(root: Path) -> None:
    """A reboot (the simulated node's, with a new boot_id as the kernel draws at every boot) after which the
    firmware numbers the cores otherwise."""
    simnode.reboot(str(root))
    (root / CPU / "cpu0/topology/core_id").write_text("7\n")


CHANGES: dict[str, tuple[Callable[[Path], None], set[str]]] = {
    "CPU offlined": (offline_sibling, {"cpus", "cpufreq", "l3_domains", "pci"}),
    "device added": (add_device, {"pci"}),
    "device replaced at its address": (replace_device, {"pci"}),
    "IRQs added": (add_irqs, {"irqs"}),
    "IRQ given to another device": (reassign_irq, {"irqs"}),
    "driver unbound": (unbind_driver, {"pci"}),
    "NUMA node overridden": (override_numa_node, {"pci"}),
    "another cpufreq driver": (other_cpufreq_driver, {"cpufreq"}),
    "reboot": (reboot_with_other_cores, set(KEPT)),
}


def test_a_simulated_reboot_alone_discards_every_kept_section(node: Path) -> None:
    """Nothing but a reboot of the lab node: its new boot_id makes every section read afresh (the kernel's boot_id
    changes at every boot, drivers/char/random.c; the lab's nodes had none before, so a reboot kept them all)."""
    before = keep(node)
    boot_id = (node / structure.BOOT_ID).read_text()
    simnode.reboot(str(node))
    assert (node / structure.BOOT_ID).read_text() != boot_id
    with_cache, hits = from_store(node)
    assert hits == [] and with_cache == fresh(node)
    assert before["cpus"] == with_cache["cpus"]  # the same machine, read again


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_that_invalidates_gives_the_same_topology_as_without_the_cache(node: Path, simulated_kernel: Any,
                                                                                change: str) -> None:
    assert (node / structure.BOOT_ID).is_file()  # the simulated kernel has one, as every kernel does
    before = keep(node)
    act, invalidated = CHANGES[change]
    act(node)  # (the CPU's offlining through the simulated kernel)
    after = fresh(node)
    assert after != before  # the change shows in the Topology
    with_cache, hits = from_store(node)
    assert with_cache == after
    assert set(KEPT) - set(hits) == invalidated, hits


def test_an_unchanged_node_takes_everything_and_a_rewrite_by_the_next_run_keeps_it(node: Path) -> None:
    keep(node)
    assert from_store(node)[1] == list(KEPT)
    add_irqs(node)
    store = structure.StructureStore(str(node), writable=True)
    discover(str(node), irq_counts=False, structure=store)
    assert store.hits == ["cpus", "cpufreq", "l3_domains", "pci"] and store.save()  # only the IRQs read again
    assert from_store(node) == (fresh(node), list(KEPT))


# ------------------------------------------------------------------------------------------------ never trusted
def rewrite(root: Path, change: Callable[[dict[str, Any]], Any]) -> None:
    path = root / structure.CACHE
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def section(name: str, change: Callable[[Any], Any]) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        value = json.loads(doc["sections"][name]["structure"])
        doc["sections"][name]["structure"] = json.dumps(change(value))
    return edit


def set_key(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc.__setitem__(key, value)


CORRUPT: dict[str, tuple[Callable[[dict[str, Any]], Any], set[str]]] = {
    "another version": (set_key("version", structure.VERSION + 1), set(KEPT)),
    "another format": (set_key("format", "something else"), set(KEPT)),
    "another boot": (set_key("boot_id", "0"), set(KEPT)),
    "sections not a mapping": (set_key("sections", []), set(KEPT)),
    "a section without evidence": (lambda doc: doc["sections"]["cpus"].pop("evidence"), {"cpus"}),
    "a structure that is not JSON": (lambda doc: doc["sections"]["pci"].update(structure="{"), {"pci"}),
    "CPU ids as text": (section("cpus", lambda v: dict(v, ids=[str(i) for i in v["ids"]])), {"cpus"}),
    "a CPU id true": (section("cpus", lambda v: dict(v, ids=[True] + v["ids"][1:])), {"cpus"}),
    "columns of other lengths": (section("cpus", lambda v: dict(v, names=v["names"][1:])), {"cpus"}),
    "an extra key": (section("pci", lambda v: dict(v, extra=1)), {"pci"}),
    "a missing key": (section("cpufreq", lambda v: {k: x for k, x in v.items() if k != "owned"}), {"cpufreq"}),
    "IRQ nodes as text": (section("irqs", lambda v: dict(v, nodes=["0"] * len(v["nodes"]))), {"irqs"}),
    "one IRQ node too few": (section("irqs", lambda v: dict(v, nodes=v["nodes"][1:])), {"irqs"}),
    "an IRQ number true": (section("irqs", lambda v: dict(v, irq=[True] + v["irq"][1:])), {"irqs"}),
    "an IRQ name missing": (section("irqs", lambda v: dict(v, name=v["name"][:-1])), {"irqs"}),
    "L3 domains of text": (section("l3_domains", lambda v: dict(v, domains=[["0-3"]])), {"l3_domains"}),
    "PCI bindings of three": (section("pci", lambda v: dict(v, bound=[b + [None] for b in v["bound"]])), {"pci"}),
}


@pytest.mark.parametrize("corruption", list(CORRUPT))
def test_a_corrupt_or_foreign_shape_is_ignored(node: Path, corruption: str) -> None:
    keep(node)
    change, ignored = CORRUPT[corruption]
    rewrite(node, change)
    with_cache, hits = from_store(node)
    assert with_cache == fresh(node)
    assert set(KEPT) - set(hits) == ignored


@pytest.mark.parametrize("text", ["", "{", "[]", "null", '{"format": "nodetune topology structure"}', "\udcff",
                                  "[" * 100000])
def test_a_file_that_is_not_a_structure_file_is_ignored(node: Path, text: str) -> None:
    path = node / structure.CACHE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    path.chmod(0o600)
    assert from_store(node) == (fresh(node), [])


def test_links_are_never_followed_to_read_or_write(node: Path, tmp_path: Path) -> None:
    keep(node)
    cache = node / structure.CACHE
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy2(cache, elsewhere / cache.name)  # a valid file, reached through a link
    cache.unlink()
    cache.symlink_to(elsewhere / cache.name)
    assert from_store(node) == (fresh(node), [])
    store = structure.StructureStore(str(node), writable=True)
    discover(str(node), irq_counts=False, structure=store)
    assert not store.save() and cache.is_symlink()  # refused, the link and its target left as they were
    assert json.loads((elsewhere / cache.name).read_text())["format"] == structure.FORMAT
    shutil.rmtree(node / "var/lib/nodetune")
    (node / "var/lib/nodetune").symlink_to(elsewhere)  # the folder on the way is a link
    assert from_store(node) == (fresh(node), [])
    assert not store.save()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o602])
def test_a_file_others_may_read_or_write_is_not_nodetunes(node: Path, mode: int) -> None:
    keep(node)
    (node / structure.CACHE).chmod(mode)
    assert from_store(node) == (fresh(node), [])


def test_a_file_of_another_user_is_not_nodetunes(node: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    keep(node)
    os.chown(node / structure.CACHE, 65534, 65534)
    assert from_store(node) == (fresh(node), [])


def test_the_file_is_written_atomically_with_mode_0600(node: Path) -> None:
    keep(node)
    path = node / structure.CACHE
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


# ------------------------------------------------------------------------------------------------ who writes it
def adhoc(module: str, args: dict[str, Any], check: bool = False) -> tuple[int, dict[str, Any]]:
    """The module run in this process as on a lab node (tests/support/inprocess.py): the test is about the modules."""
    name = module.rsplit(".", 1)[1]
    if name == "topology_facts":
        result = run_main(topology_facts.main, args, check=check)
    else:
        result = run_lab_module(name, args, check=check)
    return result["rc"], result


def test_only_the_tune_module_outside_check_mode_writes_it_and_revert_removes_it(node: Path) -> None:
    cache = node / structure.CACHE
    args = {"root": str(node), "areas": AREAS, "verify": {}}  # as site.yml calls it: apply, then audit
    read_only = (("nodetune.instinct.verify", {"root": str(node), "areas": AREAS}),
                 ("nodetune.instinct.topology_facts", {"root": str(node)}))
    rc, result = adhoc("nodetune.instinct.tune", args, check=True)
    assert rc == 0 and result["changed"] and not cache.exists()
    for module, module_args in read_only:
        rc, result = adhoc(module, module_args)
        assert rc == 0 and not cache.exists(), module
    rc, result = adhoc("nodetune.instinct.tune", args)
    assert rc == 0 and result["changed"]
    written = cache.stat()
    assert written.st_mode & 0o777 == 0o600
    for module, module_args in (("nodetune.instinct.tune", args), *read_only):
        rc, result = adhoc(module, module_args)
        assert rc == 0 and not result["changed"], module  # read, not written again: the node is as it was kept
        assert (cache.stat().st_ino, cache.stat().st_mtime_ns) == (written.st_ino, written.st_mtime_ns), module
    rc, result = adhoc("nodetune.instinct.tune", {"root": str(node), "state": "reverted"}, check=True)
    assert rc == 0 and cache.exists()
    rc, result = adhoc("nodetune.instinct.tune", {"root": str(node), "state": "reverted"})
    assert rc == 0 and result["changed"] and not (node / "var/lib/nodetune").exists()
    # apply.yml's call (no audit): the run that changes the node keeps its structure as the apply left it, so the
    # no-op after it writes nothing at all
    rc, result = adhoc("nodetune.instinct.tune", {"root": str(node), "areas": AREAS})
    assert rc == 0 and result["changed"] and cache.exists()
    tuned = tree_digest(node)
    rc, result = adhoc("nodetune.instinct.tune", {"root": str(node), "areas": AREAS})
    assert rc == 0 and not result["changed"] and tree_digest(node) == tuned


# ------------------------------------------------------------------------------------------------ /proc/interrupts
def interrupt_texts() -> dict[str, bytes]:
    texts = {
        "empty": b"", "blank": b"\n", "no header": b"garbage\n", "no final newline": b"CPU0 CPU1\n 1: 1 2 x y",
        "mixed rows": b"           CPU0       CPU1\n  24:          5          7  IR-PCI-MSIX-0000:41:00.0    0-edge  "
                      b"    mlx5_comp0@pci:0000:41:00.0\n NMI:          1          2   Non-maskable interrupts\n"
                      b" ERR:          3\n",
        "short row": b"           CPU0       CPU1\n  24:          5\n",
        "arm64 levels": b"           CPU0       CPU1\n  11:       1234          0     GICv3  27 Level     arch_timer\n",
        "carriage returns": b"           CPU0\r\n   0:         34   IO-APIC   2-edge      timer\r\n",
        "not ASCII": "           CPU0\n   0:         34   IO-APIC   2-edge      tïmer\n".encode(),
    }
    return texts


@pytest.mark.parametrize("name", list(interrupt_texts()))
def test_interrupt_rows_from_bytes_are_parse_interrupts_rows(name: str) -> None:
    data = interrupt_texts()[name]
    text = data.decode("utf-8", "replace").replace("\r\n", "\n")
    for counts in (False, True):
        try:
            expected: Any = parse_interrupts(text, counts)[1]
        except ParseError as exc:
            expected = str(exc)
        try:
            found: Any = interrupt_rows(data, counts)
        except ParseError as exc:
            found = str(exc)
        assert found == expected, (name, counts)


def test_interrupt_rows_of_large_nodes_are_parse_interrupts_rows(tmp_path: Path) -> None:
    datas = {}
    for spec in ("mi250.yml", "mi300x.yml"):
        simnode.build(str(LAB_SPECS / spec), str(tmp_path / spec))
        datas[spec] = (tmp_path / spec / "proc/interrupts").read_bytes()
    if realdata.real_available():
        datas["pcp 1152 CPUs"] = realdata.read_bz2_text(realdata.PCP_INTERRUPTS).encode()
    for name, data in datas.items():
        assert interrupt_rows(data, counts=False) == parse_interrupts(data.decode(), counts=False)[1], name
