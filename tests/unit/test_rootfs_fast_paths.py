"""The Root layer's fast paths (memoised directories, O_NOFOLLOW opens) keep the walk's answers.

Reads, existence checks and resolution of plain paths skip the component-by-component walk; a link in the last
component must still be resolved inside the root, never followed to the host, and paths that are not plain
(``..``, hidden names, NUL) must take the walk.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import Root


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
