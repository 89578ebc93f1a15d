"""The session's simulated trees and topologies (tests/support/cache.py): built once per spec and shared, a write to a
shared tree found, each caller's topology its own, writable trees of the test's own, the folder removed at the end."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.discover import topology as topology_mod
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.support import cache
from tests.support.specs import small_spec
from tests.support.trees import tree_digest

REPO = Path(__file__).resolve().parents[2]
pytest_plugins = ("pytester",)


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A session folder of this test's own, inside the real one (in memory where there is room): what it builds and
    hands out stays out of the real session's checks."""
    folder = Path(tempfile.mkdtemp(prefix="test-", dir=os.environ[cache.SESSION_ENV]))
    monkeypatch.setenv(cache.SESSION_ENV, str(folder))
    monkeypatch.setattr(cache, "_fingerprints", {})
    monkeypatch.setattr(cache, "_topologies", {})
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def unique_spec() -> dict[str, Any]:
    return small_spec(name=f"cache-{uuid.uuid4().hex[:8]}", gpus=[], nvme=[])


def counting_builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    built: list[str] = []
    real = simnode.build

    def build(spec: Any, dest: str) -> Any:
        built.append(dest)
        return real(spec, dest)

    monkeypatch.setattr(simnode, "build", build)
    return built


def test_a_spec_is_built_once_and_shared(session: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = counting_builds(monkeypatch)
    spec = unique_spec()
    first = cache.shared_tree(spec)
    assert cache.shared_tree(simnode.load_spec(spec)) == first  # the normalised spec is the same spec
    assert cache.shared_tree(dict(spec)) == first
    assert len(built) == 1 and first.parent == session and simnode.is_simnode(str(first))
    other = cache.shared_tree(dict(spec, name="another"))
    assert other != first and len(built) == 2


def test_a_write_to_a_shared_tree_is_found(session: Path) -> None:
    tree = cache.shared_tree(unique_spec())
    assert cache.untouched(tree) and cache.changed_shared_trees() == []
    governor = tree / "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"
    governor.write_text("performance\n")
    assert not cache.untouched(tree) and cache.changed_shared_trees() == [tree]


@pytest.mark.parametrize("change", ["a file added", "a file removed", "a mode changed"])
def test_every_kind_of_change_is_found(session: Path, change: str) -> None:
    tree = cache.shared_tree(unique_spec())
    if change == "a file added":
        (tree / "etc/sysctl.d/99-extra.conf").write_text("vm.swappiness = 1\n")
    elif change == "a file removed":
        (tree / "proc/sys/vm/dirty_ratio").unlink()
    else:
        (tree / "proc/sys/vm/dirty_ratio").chmod(0o600)
    assert not cache.untouched(tree)


def test_a_write_to_a_shared_tree_fails_the_test_or_the_session(pytester: pytest.Pytester) -> None:
    """In a session of its own: the test that wrote to a tree of the ``shared_tree`` fixture errors at teardown, a
    write to one taken directly from the cache errors at the session's end, the reading test passes."""
    pytester.makeconftest(f"import sys\nsys.path[:0] = [{str(REPO)!r}, {str(REPO / 'collection')!r}]\n"
                          "from tests.conftest import *  # noqa: F403\n"
                          "from tests.conftest import _shared_trees_stay_as_built  # noqa: F401\n")
    pytester.makepyfile(test_writes="""
        from tests.support import cache
        from tests.support.specs import small_spec

        SPEC = small_spec(name="guarded", gpus=[], nvme=[])

        def test_reads(shared_tree):
            assert (shared_tree(SPEC) / "proc/sys/vm/dirty_ratio").read_text() == "20\\n"

        def test_writes(shared_tree):
            (shared_tree(SPEC) / "proc/sys/vm/dirty_ratio").write_text("40\\n")

        def test_writes_outside_the_fixture():
            (cache.shared_tree(dict(SPEC, name="direct")) / "proc/sys/vm/dirty_ratio").write_text("40\\n")
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_writes *", "*this test wrote to shared simulated trees*",
                                 "*ERROR at teardown of test_writes_outside_the_fixture*",
                                 "*shared simulated trees were written to*"])


def test_each_caller_gets_its_own_copy_of_one_discovery(session: Path, monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    calls: list[str] = []
    real = topology_mod.discover

    def discover(root: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(str(root))
        return real(root, *args, **kwargs)

    monkeypatch.setattr(topology_mod, "discover", discover)
    spec = unique_spec()
    first = cache.topology(spec)
    first["cpus"].clear()  # a test that changes its copy changes nobody else's
    second = cache.topology(spec)
    assert len(calls) == 1 and second["cpus"]
    simnode.build(spec, str(tmp_path / "node"))
    own = real(str(tmp_path / "node"))  # what discovering a tree of the test's own gives, but for where it is
    assert dict(second, root=own["root"]) == own and second["root"] == str(cache.shared_tree(spec))
    cache.topology(spec, irq_counts=False)
    assert len(calls) == 2  # another question, another discovery


def test_fresh_trees_are_the_callers_own(session: Path) -> None:
    spec = unique_spec()
    one, two = cache.fresh_tree(spec), cache.fresh_tree(spec)
    assert one != two and tree_digest(one) == tree_digest(two) == tree_digest(cache.shared_tree(spec))
    cache.remove_fresh_tree(one)
    assert not one.parent.exists() and two.exists()


def test_the_session_folder_is_removed_and_orphans_swept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "_MEMORY", tmp_path)
    monkeypatch.setattr(cache, "_MEMORY_ROOM", 0)
    monkeypatch.delenv(cache.SESSION_ENV, raising=False)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = tmp_path / f"nodetune-test-trees-{dead.stdout.strip()}-x"
    alive = tmp_path / f"nodetune-test-trees-{os.getppid()}-y"
    orphan.mkdir()
    alive.mkdir()
    folder = cache.open_session()
    assert folder.parent == tmp_path and os.environ[cache.SESSION_ENV] == str(folder)
    assert not orphan.exists() and alive.exists()
    cache.close_session()
    assert not folder.exists() and cache.SESSION_ENV not in os.environ


def test_processes_of_one_session_build_a_spec_once(session: Path, tmp_path: Path) -> None:
    """xdist's workers share the session folder: whoever comes second waits for the first build and uses it."""
    log = tmp_path / "builds.log"
    script = f"""
import sys
sys.path[:0] = [{str(REPO)!r}, {str(REPO / 'collection')!r}]
from ansible_collections.nodetune.lab.plugins.module_utils import simnode
from tests.support import cache
real = simnode.build
def build(spec, dest):
    with open({str(log)!r}, "a") as handle:
        handle.write(dest + "\\n")
    return real(spec, dest)
simnode.build = build
print(cache.shared_tree({unique_spec()!r}))
"""
    workers = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                                env=dict(os.environ)) for _ in range(3)]
    trees = {worker.communicate(timeout=300)[0].strip() for worker in workers}
    assert len(trees) == 1 and len(log.read_text().splitlines()) == 1
