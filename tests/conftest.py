from __future__ import annotations

import inspect

import pytest

from tests import realdata
from tests.support import cache

# Every test is in one group, a marker set here by its file: a new test file joins "core" or "node" unless listed.
#   core       pure code on data, in-process: parsers, the planner on saved topologies, checks, reports, the lab's
#              own pieces (a file of the core names none of NODE_MARKS)
#   node       in-process on simulated node trees: discovery, apply, verify and revert on a tree built for the test
#              or shared by the session (a file that names one of NODE_MARKS)
#   ansible    starts Ansible or runs through its objects: playbooks, modules through Ansible, plugins, the
#              API/CLI over ansible-runner, ansible-doc/-galaxy, and the pins of each ansible-core line
#   scenarios  Molecule scenarios, the benchmark's smoke run, the real-node lanes: whole sequences
# CI's second line (the newest ansible-core) runs `-m ansible`: what the ansible-core version can change.
GROUPS: dict[str, tuple[str, ...]] = {
    "ansible": (
        "tests/test_quality.py",
        "tests/test_bootstrap_python.py",
        "tests/integration/test_api.py",
        "tests/integration/test_bad_input.py",
        "tests/integration/test_cli.py",
        "tests/integration/test_fleet_slices.py",
        "tests/integration/test_galaxy.py",
        "tests/integration/test_gpu_role.py",
        "tests/integration/test_kernel_cmdline_playbook.py",
        "tests/integration/test_learned_inventory.py",
        "tests/integration/test_limits_playbook.py",
        "tests/integration/test_node_python39.py",
        "tests/integration/test_playbooks.py",
        "tests/integration/test_readonly_host.py",
        "tests/integration/test_report_folder.py",
        "tests/integration/test_slurm_playbook.py",
        "tests/unit/test_ansible_doc.py",
        "tests/unit/test_bytecode_cache.py",
        "tests/unit/test_changelog.py",
        "tests/unit/test_filters.py",
        "tests/unit/test_new_area.py",
        "tests/unit/test_role_docs.py",
        "tests/unit/test_rootfs_backend.py",
        "tests/unit/test_sim_node_module.py",
        "tests/unit/test_tune_action.py",
        "tests/unit/test_verify_module.py",
    ),
    "scenarios": (
        "tests/integration/test_molecule.py",
        "tests/integration/test_bench.py",
        "tests/integration/test_real_node.py",
        "tests/integration/test_real_systemd.py",
        "tests/integration/test_ssh.py",
    ),
}
_GROUP_OF = {path: group for group, paths in GROUPS.items() for path in paths}
# What a test file's code names when it works on simulated node trees: the lab's builder, the session's trees, the
# simulated kernel, the tree helpers. The captures of real servers are trees too.
NODE_MARKS = ("simnode.", "shared_tree", "fresh_tree", "simulated_kernel", "tests.support.trees", "realdata.",
              "real_capture")
_node_files: dict[str, bool] = {}


def _file_group(path) -> str:
    """A file's group where GROUPS does not name it: node or core, by what its code names."""
    key = str(path)
    if key not in _node_files:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            text = ""
        _node_files[key] = any(mark in text for mark in NODE_MARKS)
    return "node" if _node_files[key] else "core"


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
        if any(item.get_closest_marker(name) for name in ("core", "node", *GROUPS)):
            continue  # a test that names its group itself (a scenario every line runs, say)
        rel = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
        item.add_marker(_GROUP_OF.get(rel) or _file_group(item.path))


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
