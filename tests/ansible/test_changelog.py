"""nodetune.instinct's changelog is antsibull-changelog's, as Galaxy collections keep theirs (issue 25 item 9).

Every change adds a fragment to ``changelogs/fragments/``; ``antsibull-changelog release`` in the collection folder
records it under galaxy.yml's version in ``changelogs/changelog.yaml`` and writes ``CHANGELOG.md`` (README.md,
"Changelog"). These tests hold the three together: the fragments lint clean, none waits unrecorded, and
``antsibull-changelog generate`` from them writes exactly the committed changelog.yaml and CHANGELOG.md (a
hand-edited CHANGELOG.md, or a fragment edited without regenerating, fails). The Galaxy tarball ships the changelog.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "collection" / "ansible_collections" / "nodetune" / "instinct"
CHANGELOGS = COLLECTION / "changelogs"
FRAGMENTS = CHANGELOGS / "fragments"
REGENERATE = f"run `antsibull-changelog release` in {COLLECTION.relative_to(REPO)} (README.md, \"Changelog\")"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("antsibull_changelog") is None,
    reason="antsibull-changelog is not installed: pyproject.toml's test extras pin it (pip install -e '.[test]')")


def antsibull_changelog(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "antsibull_changelog", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False)


def fragment_files() -> set[str]:
    return {path.name for path in FRAGMENTS.iterdir() if path.suffix in (".yml", ".yaml")}


def recorded_fragments() -> set[str]:
    changes = yaml.safe_load((CHANGELOGS / "changelog.yaml").read_text())
    return {name for release in (changes.get("releases") or {}).values() for name in release.get("fragments", [])}


def test_the_collection_keeps_its_changelog_with_antsibull_changelog() -> None:
    config = yaml.safe_load((CHANGELOGS / "config.yaml").read_text())
    assert config["output"] == [{"file": "CHANGELOG.md", "format": "md"}], config.get("output")
    # fragments stay and are re-read on every run: the test below can then tell an edited fragment
    assert config["keep_fragments"] is True and config["always_refresh"] == "fragments"
    assert fragment_files(), f"no fragments in {FRAGMENTS}"


def test_fragments_and_changelog_yaml_lint_clean() -> None:
    lint = antsibull_changelog("lint", cwd=COLLECTION)
    assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr
    lint = antsibull_changelog("lint-changelog-yaml", "changelogs/changelog.yaml", cwd=COLLECTION)
    assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr


def test_every_fragment_is_in_the_changelog() -> None:
    pending = sorted(fragment_files() - recorded_fragments())
    assert not pending, f"fragments not yet in CHANGELOG.md: {pending}; {REGENERATE}"
    # with keep_fragments and always_refresh, a deleted fragment would silently drop its entries at the next run
    gone = sorted(recorded_fragments() - fragment_files())
    assert not gone, f"changelog.yaml records fragments that {FRAGMENTS.relative_to(REPO)} no longer has: {gone}"


def test_changelog_is_what_antsibull_changelog_generate_writes(tmp_path: Path) -> None:
    work = tmp_path / "instinct"
    work.mkdir()
    shutil.copy2(COLLECTION / "galaxy.yml", work)
    shutil.copy2(COLLECTION / "CHANGELOG.md", work)
    shutil.copytree(CHANGELOGS, work / "changelogs", ignore=shutil.ignore_patterns(".plugin-cache.yaml"))
    generate = antsibull_changelog("generate", cwd=work)
    assert generate.returncode == 0, generate.stdout + generate.stderr
    for name in ("CHANGELOG.md", "changelogs/changelog.yaml"):
        committed, generated = (COLLECTION / name).read_text(), (work / name).read_text()
        diff = "".join(difflib.unified_diff(committed.splitlines(True), generated.splitlines(True),
                                            f"committed {name}", f"generated {name}", n=1))
        assert committed == generated, (f"{name} is not what the fragments make: write a change as a fragment, "
                                        f"{FRAGMENTS.relative_to(REPO)}/<issue>-<topic>.yml, not in {name} "
                                        f"(the next run overwrites it), then {REGENERATE}\n{diff[:3000]}")


def test_the_galaxy_tarball_ships_the_changelog_without_the_fragments(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    build = subprocess.run(["bash", str(REPO / "scripts" / "build_collection.sh"), str(tmp_path)], cwd=REPO,
                           env=env, capture_output=True, text=True, timeout=600, check=False)
    assert build.returncode == 0, build.stdout + build.stderr
    tarball = Path(build.stdout.strip().splitlines()[-1])
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
        shipped = archive.extractfile("CHANGELOG.md").read().decode()
    assert {"CHANGELOG.md", "changelogs/changelog.yaml", "changelogs/config.yaml"} <= names, sorted(names)[:20]
    assert shipped == (COLLECTION / "CHANGELOG.md").read_text()
    extra = sorted(n for n in names if n.startswith("changelogs/") and n not in ("changelogs/changelog.yaml",
                                                                               "changelogs/config.yaml"))
    assert extra == [], f"{tarball.name} ships changelog sources or scratch files: {extra}"
