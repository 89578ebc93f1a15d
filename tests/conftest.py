from __future__ import annotations

import inspect

import pytest

from tests import realdata
from tests.support import cache

# Every test is in one group: its folder, which is also its marker (``pytest tests/core`` and ``pytest -m core``
# select the same tests).
#   core       pure code on data, in-process: parsers, the planner on saved topologies, checks, reports, the lab's
#              own pieces; no simulated node tree
#   node       in-process on simulated node trees (or real captures): discovery, apply, verify and revert on a tree
#              built for the test or shared by the session
#   ansible    starts Ansible or runs through its objects: playbooks, modules through Ansible, plugins, the
#              API/CLI over ansible-runner, ansible-doc/-galaxy, and the pins of each ansible-core line
#   scenarios  whole sequences: Molecule scenarios, the benchmark's smoke run
#   real       the real lanes: this machine's kernel, systemd as PID 1 in a container, real SSH
#              (opt-in: NODETUNE_REAL_LANES=1; skipped, saying why, anywhere else)
GROUPS = ("core", "node", "ansible", "scenarios", "real")
# What a core test file must not name: the lab's node builder, the session's trees, the simulated kernel, the tree
# helpers, the real captures (tests/core/test_test_layout.py holds every file to its folder).
NODE_MARKS = ("simnode.", "shared_tree", "fresh_tree", "simulated_kernel", "tests.support.trees", "realdata.",
              "real_capture")


def group_of(rel: str) -> str | None:
    """The group of a test file by its path under the repository (``tests/<group>/test_x.py``), else None."""
    parts = rel.split("/")
    return parts[1] if len(parts) == 3 and parts[0] == "tests" and parts[1] in GROUPS else None


def _reads_real_captures(item) -> bool:
    """Whether a test reads ../shared/fixtures/real: it takes the real_capture fixture or its code names realdata."""
    if "real_capture" in getattr(item, "fixturenames", ()):
        return True
    function = getattr(item, "function", None)
    try:
        return function is not None and "realdata." in inspect.getsource(function)
    except (OSError, TypeError):
        return False


def pytest_collection_modifyitems(config, items):
    root = config.rootpath
    for item in items:
        if not item.get_closest_marker("real_fixtures") and _reads_real_captures(item):
            item.add_marker("real_fixtures")  # CI runs these once with the captures hidden, as in a user's clone
        rel = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
        group = group_of(rel)
        if group is not None:
            item.add_marker(group)


@pytest.hookimpl(tryfirst=True)  # before pytest's tmpdir plugin reads --basetemp
def pytest_configure(config):
    if hasattr(config, "workerinput"):
        return  # xdist's workers inherit the controller's folder and take their basetemp under its basetemp
    folder = cache.open_session()
    if config.option.basetemp is None and cache.in_memory(folder):
        # tmp_path in memory too, where the trees are: most tests write a small simulated tree into theirs, and a
        # passed test's folder is removed at once (pyproject: tmp_path_retention_policy = "failed")
        config.option.basetemp = str(folder / "pytest")
        config._nodetune_basetemp = folder / "pytest"


def pytest_unconfigure(config):
    if hasattr(config, "workerinput"):
        return
    kept = getattr(config, "_nodetune_failed_tmp", None)
    cache.close_session(keep=kept and kept.name)
    if kept:
        print(f"\nthe failed tests' tmp_path folders are kept in {kept} (the next test session removes them)")


def pytest_sessionfinish(session, exitstatus):
    realdata.cleanup()
    ours = getattr(session.config, "_nodetune_basetemp", None)  # the controlling process's, when in memory
    if exitstatus not in (0, 5) and ours:
        session.config._nodetune_failed_tmp = ours


@pytest.fixture(scope="session", autouse=True)
def _shared_trees_stay_as_built():
    """A test that wrote to a shared tree (one taken outside the ``shared_tree`` fixture) fails the session."""
    yield
    changed = cache.changed_shared_trees()
    assert not changed, f"shared simulated trees were written to: {changed}"


@pytest.fixture
def shared_tree():
    """Factory: ``shared_tree(spec)`` -> the session's tree of that spec, built once, to read only (the test that
    writes to it fails)."""
    handed: list = []

    def take(spec):
        tree = cache.shared_tree(spec)
        handed.append(tree)
        return tree

    yield take
    changed = [tree for tree in handed if not cache.untouched(tree)]
    assert not changed, f"this test wrote to shared simulated trees (use fresh_tree to write): {changed}"


@pytest.fixture
def fresh_tree():
    """Factory: ``fresh_tree(spec)`` -> a tree of the test's own, built in memory where there is room, removed
    after the test."""
    made: list = []

    def build(spec):
        tree = cache.fresh_tree(spec)
        made.append(tree)
        return tree

    yield build
    for tree in made:
        cache.remove_fresh_tree(tree)


@pytest.fixture
def saved_topology():
    """Factory: ``saved_topology(spec)`` -> the topology of that spec's tree, discovered once per session, a copy
    for each call: for tests about planning, not discovery."""
    return cache.topology


@pytest.fixture
def real_capture():
    """Factory: ``real_capture("knit")`` -> extracted node root (skips where ../shared is absent)."""
    return realdata.capture_root


@pytest.fixture(scope="module")
def simulated_kernel():
    """Every Root created in the module's tests answers writes with the lab's simulated kernel, as nodetune.lab's
    modules do on a lab node (``pytestmark = pytest.mark.usefixtures("simulated_kernel")``): tests that apply to
    simulated nodes in-process say so, nothing on the node does."""
    from ansible_collections.nodetune.instinct.plugins.module_utils import rootfs
    from ansible_collections.nodetune.lab.plugins.module_utils import simkernel

    simkernel.install()
    try:
        yield simkernel.BACKEND
    finally:
        rootfs.use_backend(None)
