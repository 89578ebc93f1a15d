"""The Root layer: nothing escapes the root, errors are typed and say what the kernel meant.

Every tree here is built in a temporary directory; the real machine's files are only read (Root('/')).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils import rootfs
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import (
    BusyError,
    InvalidValueError,
    ManagedIRQError,
    NodeFileError,
    NotFoundError,
    PathEscapeError,
    ReadOnlyError,
    Root,
    RootError,
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A node root inside ``tmp_path/node`` and a decoy ``tmp_path/outside`` that must never be reached."""
    node = tmp_path / "node"
    (node / "etc").mkdir(parents=True)
    (node / "etc/hostname").write_text("inside\n")
    (node / "sys/devices/pci0000:00/0000:00:01.0").mkdir(parents=True)
    (node / "sys/devices/pci0000:00/0000:00:01.0/numa_node").write_text("1\n")
    (node / "sys/bus/pci/devices").mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:00:01.0", node / "sys/bus/pci/devices/0000:00:01.0")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside/hostname").write_text("OUTSIDE\n")
    (tmp_path / "outside/secret").write_text("OUTSIDE\n")
    return node


# ------------------------------------------------------------------------------------------- escapes
def test_dotdot_stops_at_the_root(tree: Path) -> None:
    root = Root(str(tree))
    assert root.read("../../../../etc/hostname") == "inside"
    assert root.read("sys/../../outside/secret") is None
    assert root.real("../..") == str(tree)


def test_absolute_symlink_is_re_anchored_at_the_root(tree: Path) -> None:
    os.symlink("/etc", tree / "sys/etc_link")
    os.symlink(str(tree.parent / "outside"), tree / "sys/abs_outside")
    root = Root(str(tree))
    assert root.read("sys/etc_link/hostname") == "inside"  # /etc of the node, not of the host
    # An absolute link to the real location of the decoy resolves *inside* the root, where it does not exist.
    assert root.read("sys/abs_outside/secret") is None
    assert root.real("sys/abs_outside/secret").startswith(str(tree) + os.sep)


def test_relative_symlink_climbing_out_is_clamped(tree: Path) -> None:
    os.symlink("../../../../../../outside", tree / "sys/up")
    root = Root(str(tree))
    assert root.read("sys/up/secret") is None
    assert root.real("sys/up/secret") == str(tree / "outside/secret")


def test_symlinked_attribute_file_is_not_followed_out_by_bulk_reads(tree: Path) -> None:
    device = tree / "sys/devices/pci0000:00/0000:00:01.0"
    os.symlink(str(tree.parent / "outside/hostname"), device / "vendor")  # absolute link to a host path
    os.symlink("/etc/hostname", device / "label")
    root = Root(str(tree))
    texts = root.read_attrs("sys/bus/pci/devices/0000:00:01.0", ["numa_node", "vendor", "label"])
    assert texts == {"numa_node": "1", "vendor": None, "label": "inside"}
    (many,) = root.read_attrs_many(["sys/bus/pci/devices/0000:00:01.0"], ["vendor", "label"])
    assert many[0] == [None, "inside"]


def test_symlinked_directory_entries_are_not_taken_as_plain_subdirs(tree: Path) -> None:
    irq = tree / "proc/irq"
    (irq / "24").mkdir(parents=True)
    (irq / "24/smp_affinity_list").write_text("0-3\n")
    os.symlink(str(tree.parent / "outside"), irq / "25")
    root = Root(str(tree))
    assert root.subdirs("proc/irq") == ["24"]
    assert root.read_attrs_many(["proc/irq/24", "proc/irq/25"], ["smp_affinity_list", "secret"]) == [
        (["0-3", None], None), ([None, None], None)]


def test_symlink_loops_are_a_path_escape_error(tree: Path) -> None:
    os.symlink("b", tree / "a")
    os.symlink("a", tree / "b")
    root = Root(str(tree))
    with pytest.raises(PathEscapeError, match="too many levels of symbolic links"):
        root.real("a/x")
    with pytest.raises(PathEscapeError):
        root.write("a/x", "1")
    # Read-side calls see a damaged tree as absent files, so discovery never crashes on one.
    assert root.read("a/x") is None
    assert root.listdir("a") == [] and root.subdirs("a") == []
    assert not root.exists("a/x") and not root.isdir("a") and root.mode("a/x") is None
    assert root.read_attrs_many(["a"], ["x", "y"]) == [([None, None], None)]


def test_nul_bytes_are_refused(tree: Path) -> None:
    with pytest.raises(PathEscapeError, match="NUL"):
        Root(str(tree)).real("etc/host\x00name")
    with pytest.raises(RootError, match="NUL"):
        Root("/tmp\x00/x")


# ------------------------------------------------------------------------------------------- bad roots
def test_missing_root_is_a_clear_root_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-node"
    with pytest.raises(RootError) as err:
        Root(str(missing))
    assert str(missing) in str(err.value)
    assert "does not exist" in str(err.value)


def test_a_file_as_root_is_a_root_error(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(os.urandom(256))
    with pytest.raises(RootError, match="not a directory"):
        Root(str(garbage))


@pytest.mark.parametrize("value", ["", None, 3])
def test_non_path_roots_are_refused(value: object) -> None:
    with pytest.raises(RootError, match="non-empty path"):
        Root(value)  # type: ignore[arg-type]


def test_garbage_file_content_reads_without_crashing(tree: Path) -> None:
    (tree / "sys/blob").write_bytes(b"\xff\xfe\x00binary\x80")
    root = Root(str(tree))
    assert "binary" in (root.read("sys/blob") or "")
    assert root.read_int("sys/blob", default=-5) == -5


# ------------------------------------------------------------------------------------------- typed errors
def test_reading_a_missing_file_strictly_is_not_found(tree: Path) -> None:
    with pytest.raises(NotFoundError) as err:
        Root(str(tree)).read_strict("sys/kernel/mm/transparent_hugepage/enabled")
    assert err.value.errno == errno.ENOENT
    assert err.value.path == "sys/kernel/mm/transparent_hugepage/enabled"
    assert "no such file" in str(err.value)


def test_writing_a_0444_irq_affinity_file_is_a_managed_irq_error(tree: Path) -> None:
    irq = tree / "proc/irq/42"
    irq.mkdir(parents=True)
    (irq / "smp_affinity_list").write_text("0-7\n")
    (irq / "smp_affinity_list").chmod(0o444)  # what kernels >= 6.12 show for managed IRQs
    root = Root(str(tree))
    with pytest.raises(ManagedIRQError) as err:
        root.write("proc/irq/42/smp_affinity_list", "3")
    assert "manages this IRQ" in str(err.value)
    assert (irq / "smp_affinity_list").read_text() == "0-7\n"  # nothing was written
    assert root.mode("proc/irq/42/smp_affinity_list") == 0o444


def test_writing_another_0444_file_is_read_only(tree: Path) -> None:
    target = tree / "sys/devices/pci0000:00/0000:00:01.0/numa_node"
    target.chmod(0o444)
    with pytest.raises(ReadOnlyError, match="read-only"):
        Root(str(tree)).write("sys/bus/pci/devices/0000:00:01.0/numa_node", "0")


def test_writing_a_missing_attribute_is_not_found(tree: Path) -> None:
    with pytest.raises(NotFoundError):
        Root(str(tree)).write("sys/block/nvme0n1/queue/nr_queues", "32")


@pytest.mark.parametrize(("code", "rel", "kind"), [
    (errno.EIO, "proc/irq/7/smp_affinity", ManagedIRQError),
    (errno.EPERM, "proc/irq/7/smp_affinity_list", ManagedIRQError),
    (errno.EINVAL, "sys/class/net/ib0/mtu", InvalidValueError),
    (errno.ENOSPC, "proc/irq/7/smp_affinity_list", InvalidValueError),
    (errno.EBUSY, "sys/devices/system/cpu/cpu0/cpufreq/energy_performance_preference", BusyError),
    (errno.EROFS, "proc/sys/vm/dirty_ratio", ReadOnlyError),
    (errno.EPERM, "sys/devices/system/cpu/cpu3/online", ReadOnlyError),
    (errno.ENOENT, "sys/block/nvme0n1/queue/scheduler", NotFoundError),
    (errno.EIO, "sys/class/net/ib0/mtu", NodeFileError),
])
def test_os_errors_are_classified(code: int, rel: str, kind: type) -> None:
    error = rootfs._classify(OSError(code, os.strerror(code)), rel, "writing", "1")
    assert type(error) is kind
    assert error.errno == code
    assert rel in str(error) and "'1'" in str(error)


# ------------------------------------------------------------------------------------------- reads
def test_read_attrs_reports_modes_from_the_same_open(tree: Path) -> None:
    irq = tree / "proc/irq/9"
    irq.mkdir(parents=True)
    for name, mode in (("smp_affinity_list", 0o444), ("effective_affinity_list", 0o644)):
        (irq / name).write_text("1\n")
        (irq / name).chmod(mode)
    root = Root(str(tree))
    modes: dict[str, int | None] = {}
    texts = root.read_attrs("proc/irq/9", ["smp_affinity_list", "effective_affinity_list", "node"], modes)
    assert texts == {"smp_affinity_list": "1", "effective_affinity_list": "1", "node": None}
    assert modes == {"smp_affinity_list": 0o444, "effective_affinity_list": 0o644, "node": None}
    [(values, mode)] = root.read_attrs_many(["proc/irq/9"], ["smp_affinity_list", "node"], "smp_affinity_list")
    assert values == ["1", None] and stat.S_IMODE(mode or 0) == 0o444


def test_large_files_are_read_whole(tree: Path) -> None:
    big = "x" * 200_000
    (tree / "proc").mkdir()
    (tree / "proc/interrupts").write_text(big)
    root = Root(str(tree))
    assert root.read_attrs("proc", ["interrupts"])["interrupts"] == big
    assert root.read("proc/interrupts") == big


def test_listing_and_links(tree: Path) -> None:
    root = Root(str(tree))
    assert root.listdir("sys/bus/pci/devices") == ["0000:00:01.0"]
    assert root.listdir("sys/class/infiniband") == []  # absent is normal
    assert root.inner("sys/bus/pci/devices/0000:00:01.0") == "sys/devices/pci0000:00/0000:00:01.0"
    assert root.readlink_name("sys/bus/pci/devices/0000:00:01.0") == "0000:00:01.0"
    assert root.readlink_name("sys/bus/pci/devices/0000:00:01.0/driver") is None
    assert root.isdir("sys/bus/pci/devices/0000:00:01.0") and not root.exists("sys/class/net/ib0")


def test_write_file_is_atomic_and_creates_its_directories(tree: Path) -> None:
    root = Root(str(tree))
    root.write_file("etc/sysctl.d/90-nodetune.conf", "vm.dirty_ratio = 10\n", mode=0o640)
    written = tree / "etc/sysctl.d/90-nodetune.conf"
    assert written.read_text() == "vm.dirty_ratio = 10\n" and stat.S_IMODE(written.stat().st_mode) == 0o640
    root.write_file("/etc/sysctl.d/90-nodetune.conf", "vm.dirty_ratio = 20\n")
    assert written.read_text() == "vm.dirty_ratio = 20\n" and stat.S_IMODE(written.stat().st_mode) == 0o644
    assert not [p for p in (tree / "etc/sysctl.d").iterdir() if p.name.startswith(rootfs.TEMP_PREFIX)]
    assert root.remove("etc/sysctl.d/90-nodetune.conf") is True
    assert root.remove("etc/sysctl.d/90-nodetune.conf") is False
    assert root.remove("etc/nosuch/90-nodetune.conf") is False


# A link at the file or at any directory on its way: absolute (re-anchored inside the root), relative, dangling.
LINKS = [("etc/sysctl.d/90-nodetune.conf", "/etc/hostname", "etc/sysctl.d/90-nodetune.conf"),
         ("etc/sysctl.d/90-nodetune.conf", "../hostname", "etc/sysctl.d/90-nodetune.conf"),
         ("etc/sysctl.d/90-nodetune.conf", "/etc/nosuch", "etc/sysctl.d/90-nodetune.conf"),
         ("etc/sysctl.d", "/etc", "etc/sysctl.d/hostname"),
         ("etc/sysctl.d", "../../outside", "etc/sysctl.d/hostname"),
         ("etc", "../outside", "etc/hostname")]


@pytest.mark.parametrize("link, target, rel", LINKS)
def test_whole_files_are_never_written_or_removed_through_a_link(tree: Path, link: str, target: str,
                                                                  rel: str) -> None:
    (tree / "etc/sysctl.d").mkdir()
    if link == "etc":
        (tree / "etc").rename(tree / "etc.real")
    elif link == "etc/sysctl.d":
        (tree / "etc/sysctl.d").rmdir()
    os.symlink(target, tree / link)
    root = Root(str(tree))
    for attempt in (lambda: root.refuse_links(rel), lambda: root.write_file(rel, "x\n"), lambda: root.remove(rel)):
        with pytest.raises(rootfs.SymlinkError, match="is a symbolic link .* nodetune does not write or delete files "
                                                      "through symbolic links") as info:
            attempt()
        assert info.value.path == link and "/" + rel in str(info.value)
    assert (tree / "etc.real/hostname" if link == "etc" else tree / "etc/hostname").read_text() == "inside\n"
    assert (tree.parent / "outside/hostname").read_text() == "OUTSIDE\n"
    assert os.readlink(tree / link) == target
    assert not list(tree.rglob(rootfs.TEMP_PREFIX + "*"))


def test_a_link_swapped_in_for_a_directory_is_not_followed_into(tree: Path) -> None:
    """The directory is checked and opened in one step (O_NOFOLLOW under its parent's fd): a link that replaces it
    after any earlier check is refused, not followed."""
    (tree / "etc/sysctl.d").mkdir()
    root = Root(str(tree))
    root.refuse_links("etc/sysctl.d/90-nodetune.conf")  # the plan's check passes
    (tree / "etc/sysctl.d").rmdir()
    os.symlink("/etc", tree / "etc/sysctl.d")
    with pytest.raises(rootfs.SymlinkError):
        root.write_file("etc/sysctl.d/hostname", "x\n")
    assert (tree / "etc/hostname").read_text() == "inside\n"


def test_remove_takes_only_the_regular_file_nodetune_wrote(tree: Path) -> None:
    root = Root(str(tree))
    root.write_file("etc/nodetune/a.conf", "mine\n")
    digest = rootfs.sha256_text("mine\n")
    (tree / "etc/nodetune/a.conf").write_text("mine\nand the operator's\n")
    with pytest.raises(rootfs.UnexpectedFileError, match="its content changed since nodetune wrote it"):
        root.remove("etc/nodetune/a.conf", sha256=digest)
    assert (tree / "etc/nodetune/a.conf").exists()
    (tree / "etc/nodetune/a.conf").write_text("mine\n")
    assert root.remove("etc/nodetune/a.conf", sha256=digest) is True
    os.mkfifo(tree / "etc/nodetune/fifo")
    (tree / "etc/nodetune/dir").mkdir()
    for name in ("fifo", "dir"):
        with pytest.raises(rootfs.UnexpectedFileError, match="not a regular file"):
            root.remove("etc/nodetune/" + name)
        assert (tree / "etc/nodetune" / name).exists()


@pytest.mark.parametrize("rel", ["", "/", "..", "etc/../..", "etc/nodetune/../.."])
def test_whole_file_paths_need_a_name_below_the_root(tree: Path, rel: str) -> None:
    root = Root(str(tree))
    for attempt in (lambda: root.write_file(rel, "x\n"), lambda: root.remove(rel)):
        with pytest.raises(PathEscapeError, match="names the root itself"):
            attempt()
    assert (tree / "etc/hostname").read_text() == "inside\n"


def test_dotdot_in_a_whole_file_path_stops_at_the_root(tree: Path) -> None:
    root = Root(str(tree))
    root.write_file("../../../outside/secret", "x\n")
    assert (tree / "outside/secret").read_text() == "x\n"
    assert (tree.parent / "outside/secret").read_text() == "OUTSIDE\n"
    assert root.remove("etc/../../outside/secret") is True and not (tree / "outside/secret").exists()


def test_kernel_attributes_are_still_written_through_sysfs_links(tree: Path) -> None:
    """/sys/block/X and /sys/bus/pci/devices/BDF are links: Root.write resolves them inside the root."""
    root = Root(str(tree))
    root.write("sys/bus/pci/devices/0000:00:01.0/numa_node", "0")
    assert (tree / "sys/devices/pci0000:00/0000:00:01.0/numa_node").read_text() == "0"


def test_host_root_reads_the_real_machine_read_only() -> None:
    root = Root("/")
    assert root.is_host
    assert root.read("proc/sys/kernel/ostype") == "Linux"
    assert root.real("../../proc/../proc/self/..") == "/proc"
    assert "self" in root.listdir("proc")
