"""The Root layer's fast paths (memoised directories, O_NOFOLLOW opens) keep the walk's answers.

Reads, existence checks and resolution of plain paths skip the component-by-component walk; a link in the last
component must still be resolved inside the root, never followed to the host, and paths that are not plain
(``..``, hidden names, NUL) must take the walk.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import PathEscapeError, Root


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    node = tmp_path / "node"
    (node / "etc").mkdir(parents=True)
    (node / "etc/hostname").write_text("inside\n")
    (node / "sys/class").mkdir(parents=True)
    (node / "sys/class/value").write_text("1\r\n2\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside/hostname").write_text("OUTSIDE\n")
    return node


def test_a_link_as_last_component_is_resolved_inside_the_root(tree: Path) -> None:
    os.symlink(str(tree.parent / "outside/hostname"), tree / "sys/class/to_host")  # absolute, to a host path
    os.symlink("/etc/hostname", tree / "sys/class/to_etc")  # absolute: the node's /etc
    os.symlink("../../etc/hostname", tree / "sys/class/relative")
    root = Root(str(tree))
    root.read("sys/class/value")  # the directory is memoised now: the fast path is taken below
    assert root.read("sys/class/to_host") is None
    assert root.exists("sys/class/to_host") is False
    assert root.read("sys/class/to_etc") == "inside" and root.exists("sys/class/to_etc")
    assert root.read("sys/class/relative") == "inside"
    assert root.real("sys/class/to_host").startswith(str(tree) + os.sep)


def test_fast_and_walked_answers_agree(tree: Path) -> None:
    root = Root(str(tree))
    for rel in ("sys/class/value", "/sys/class/value", "sys/class/missing", "sys/nothing/value", "etc/hostname"):
        assert root.inner(rel) == root._walk(rel, True), rel
        assert root.exists(rel) == os.path.exists(tree / rel.lstrip("/")), rel
    assert root.read("sys/./class/value") == root.read("sys/class/value") == "1\n2"  # universal newlines kept
    assert root.read("sys/class/../../etc/hostname") == "inside"
    assert root.read("etc/host\x00name") is None


def test_a_directory_created_after_a_miss_is_found(tree: Path) -> None:
    root = Root(str(tree))
    assert root.read("sys/later/value") is None
    (tree / "sys/later").mkdir()
    (tree / "sys/later/value").write_text("3\n")
    assert root.read("sys/later/value") == "3" and root.exists("sys/later/value")


def test_the_host_root_reads_through_the_kernel() -> None:
    root = Root("/")
    assert root.read("proc/self/stat") is not None
    assert root.read("proc/no/such/file") is None
    assert root.exists("proc/self") and not root.exists("proc/no/such/file")


# ------------------------------------------------------------------------------------------- batched reads
def _irq_tree(tree: Path, count: int) -> Path:
    irq = tree / "proc/irq"
    for number in range(count):
        (irq / str(number)).mkdir(parents=True)
        (irq / str(number) / "smp_affinity_list").write_text(f"{number}\n")
        (irq / str(number) / "node").write_text("0\n")
    return irq


def test_a_batch_reads_relative_to_the_directory_its_dirs_share(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A large batch opens the shared directory once and each file relative to it (the kernel walks two
    components per file, not the whole path), and answers as reading each file alone does."""
    irq = _irq_tree(tree, 20)
    os.symlink(str(tree.parent / "outside"), irq / "25")  # a link out of the root: read as absent
    os.symlink("../../etc", irq / "26")  # a link inside the root: followed inside it
    for number, target in ((3, str(tree.parent / "outside/hostname")), (4, "/etc/hostname")):
        (irq / str(number) / "node").unlink()
        os.symlink(target, irq / str(number) / "node")  # linked out of the root (absent); to the node's /etc
    os.symlink("loop", irq / "5" / "loop")
    os.symlink("loop", irq / "5" / "node2")
    dirs = [f"proc/irq/{n}" for n in [*range(20), 25, 26, 40]] + ["proc/irq/5/loop", "proc/nothing/1"]
    names = ["smp_affinity_list", "node", "hostname"]
    root = Root(str(tree))
    root.subdirs("proc/irq")
    opened = []
    real_open = os.open

    def spy(path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        opened.append((path, dir_fd))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", spy)
    root.read_attrs_many(dirs[:20], names)
    monkeypatch.undo()
    assert opened[0] == (str(irq), None) and opened[1] == ("0/smp_affinity_list", opened[1][1])
    by_full_path = [path for path, fd in opened[1:] if fd is None]
    assert opened[1][1] is not None and {fd for _path, fd in opened[1:] if fd is not None} == {opened[1][1]}
    # only the two linked attributes, resolved inside the root then read by their full path
    assert by_full_path and all(path.startswith(str(tree) + os.sep) for path in by_full_path)
    assert len(by_full_path) < 6
    batch = root.read_attrs_many(dirs, names, "smp_affinity_list")
    alone = Root(str(tree))
    expected = [([alone.read(d + "/" + n) for n in names], alone.mode(d + "/smp_affinity_list")) for d in dirs]
    assert batch == expected
    assert batch[3][0] == ["3", None, None] and batch[4][0] == ["4", "inside", None]
    assert batch[20] == ([None, None, None], None) and batch[21][0] == [None, None, "inside"]


def test_a_small_batch_and_a_missing_shared_directory_read_by_full_path(tree: Path) -> None:
    _irq_tree(tree, 20)
    root = Root(str(tree))
    assert root.read_attrs_many(["proc/irq/1", "proc/irq/2"], ["node"]) == [(["0"], None), (["0"], None)]
    missing = [f"proc/gone/{n}" for n in range(20)]
    assert root.read_attrs_many(missing, ["a", "b"]) == [([None, None], None)] * 20


def test_a_link_met_on_the_fast_path_counts_towards_the_limit(tree: Path) -> None:
    links = tree / "sys/class"
    for hop in range(41):
        os.symlink(f"l{hop + 1}", links / f"l{hop}")
    (links / "l41").write_text("end\n")
    root = Root(str(tree))
    root.read("sys/class/value")  # sys/class is memoised: l1 is met on the fast path
    assert root.read("sys/class/l1") == "end"  # 40 links (the walk's limit), then the file
    with pytest.raises(PathEscapeError, match="too many levels of symbolic links resolving 'sys/class/l0'"):
        root.real("sys/class/l0")  # 41 links
    assert Root(str(tree))._walk("sys/class/l1", True) == root.inner("sys/class/l1") == "sys/class/l41"


def test_a_link_in_the_last_component_is_looked_at_once(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A /sys/bus/pci/devices/<BDF> entry: one lstat says it is a link, the walk goes on from its target."""
    device = tree / "sys/devices/pci0000:00/0000:00:01.0"
    device.mkdir(parents=True)
    (tree / "sys/bus/pci/devices").mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:00:01.0", tree / "sys/bus/pci/devices/0000:00:01.0")
    root = Root(str(tree))
    root.listdir("sys/bus/pci/devices")
    seen = []
    real_lstat = os.lstat

    def spy(path: str) -> os.stat_result:
        seen.append(path)
        return real_lstat(path)

    monkeypatch.setattr(os, "lstat", spy)
    assert root.inner("sys/bus/pci/devices/0000:00:01.0") == "sys/devices/pci0000:00/0000:00:01.0"
    monkeypatch.undo()
    assert seen.count(str(tree / "sys/bus/pci/devices/0000:00:01.0")) == 1


def test_a_batch_dir_that_resolves_to_the_root_reads_inside_it(tree: Path) -> None:
    """A directory linked to the node's "/" is the root itself: its files are read inside the root, never from the
    host's "/" (a relative open of "/name" would ignore the directory it is relative to)."""
    _irq_tree(tree, 20)
    os.symlink("/", tree / "proc/irq/30")
    (tree / "hostname").write_text("node-root\n")
    (tree.parent / "hostname").write_text("outside\n")
    root = Root(str(tree))
    root.subdirs("proc/irq")
    batch = root.read_attrs_many([f"proc/irq/{n}" for n in [*range(20), 30]], ["hostname", "etc"])
    assert batch[-1] == (["node-root", None], None)
    assert root.read_attrs_many(["proc/irq/30"], ["hostname"]) == [(["node-root"], None)]


def _devices(tree: Path, count: int) -> list[str]:
    """``count`` PCI-like function folders under one bus folder, each with a different ``msi_irqs`` and ``driver``:
    a plain folder of vectors, none, an empty one, a file, links inside and out of the root, a loop."""
    bus = tree / "sys/devices/pci0000:00"
    drivers = tree / "sys/bus/pci/drivers"
    (drivers / "amdgpu").mkdir(parents=True)
    (tree.parent / "outside/vectors").mkdir(parents=True)
    (tree.parent / "outside/vectors/99").write_text("")
    rels = []
    for index in range(count):
        device = bus / f"0000:00:{index:02x}.0"
        device.mkdir(parents=True)
        kind = index % 7
        if kind == 0:
            (device / "msi_irqs").mkdir()
            for vector in (index + 100, index + 30):
                (device / "msi_irqs" / str(vector)).write_text("msix\n")
            os.symlink("../../../bus/pci/drivers/amdgpu", device / "driver")
        elif kind == 1:
            (device / "msi_irqs").mkdir()  # empty: MSI enabled, every vector freed
        elif kind == 2:
            (device / "msi_irqs").write_text("not a folder\n")
            (device / "driver").write_text("not a link\n")
        elif kind == 3:
            os.symlink("../0000:00:00.0/msi_irqs", device / "msi_irqs")  # a link inside the root: followed there
            os.symlink("/sys/bus/pci/drivers/amdgpu", device / "driver")
        elif kind == 4:
            os.symlink(str(tree.parent / "outside/vectors"), device / "msi_irqs")  # to the host: re-anchored
            os.symlink(str(tree.parent / "outside"), device / "driver")
        elif kind == 5:
            os.symlink("msi_irqs", device / "msi_irqs")  # a loop
        rels.append(f"sys/devices/pci0000:00/{device.name}")
    rels.append("sys/devices/pci0000:00/0000:00:ff.0")  # no such function
    return rels


@pytest.mark.parametrize("count", [3, 40])  # a batch of few (full paths) and of many (relative to a shared fd)
def test_batched_listings_and_links_answer_as_one_at_a_time(tree: Path, count: int) -> None:
    rels = _devices(tree, count)
    one_at_a_time = Root(str(tree))
    listed = [one_at_a_time.listdir(rel + "/msi_irqs") for rel in rels]
    drivers = [one_at_a_time.readlink_name(rel + "/driver") for rel in rels]
    batched = Root(str(tree))
    assert batched.listdir_many(rels, "msi_irqs") == listed
    assert batched.readlink_names_many(rels, "driver") == drivers
    # what the cases are: vectors sorted as names, none for a file, a loop or a missing function; the host's
    # folder never listed; a driver's name from its link, none where it is not a link
    assert listed[-1] == [] and drivers[-1] is None
    if count < 7:
        return
    assert listed[0] == ["100", "30"] and listed[1] == [] and listed[2] == [] and listed[5] == []
    assert listed[3] == listed[0] and "99" not in listed[4]
    assert drivers[0] == "amdgpu" == drivers[3] and drivers[1] is None and drivers[2] is None
    assert drivers[4] == "outside"  # the name of the link's target, as readlink_name gives it


def test_batched_listings_of_unresolvable_folders_are_empty(tree: Path) -> None:
    os.symlink("loop", tree / "sys/loop")
    root = Root(str(tree))
    assert root.listdir_many(["sys/loop/x", "sys/class"], "value") == [[], []]
    assert root.readlink_names_many(["sys/loop/x"], "driver") == [None]


def test_the_host_root_lists_in_batches_through_the_kernel(tree: Path) -> None:
    rels = [str(p).lstrip("/") for p in (tree, tree / "sys", tree / "nothing")]
    os.symlink("class", tree / "sys/link")
    host = Root("/")
    assert host.listdir_many(rels, "sys") == [host.listdir(rel + "/sys") for rel in rels] == [["class", "link"], [], []]
    assert host.listdir_many([str(tree / "sys").lstrip("/")], "link") == [["value"]]  # a link: followed
    assert host.readlink_names_many([str(tree / "sys").lstrip("/")], "link") == ["class"]
