#!/usr/bin/env bash
# The whole nodetune test suite: setup (as scripts/bootstrap.sh, without running site.yml), then the quality
# gates and the tests, each under its own header, with a timing summary at the end.
#
#   scripts/test.sh                  # everything: ruff, ansible-lint, sanity, pytest, molecule
#   scripts/test.sh pytest -- -k cpulist   # only some stages; arguments after -- go to pytest
#   NODETUNE_PYTHON=3.11 scripts/test.sh    # on a given Python (default: the newest supported one present)
#   scripts/test.sh --setup-only            # only the setup: Debian packages, the venv, the project
#
# Stages: ruff, ansible-lint, sanity (ansible-test inside the collection), pytest, molecule (`molecule test`
# for each molecule/*/molecule.yml scenario that the pytest stage did not already run as a test). Every
# selected stage runs even after a failure; the exit code is 0 only when all of them passed.
set -uo pipefail

# shellcheck source=scripts/lib/setup.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/setup.sh"

ALL_STAGES=(ruff ansible-lint sanity pytest molecule)
COLLECTION_DIR="collection/ansible_collections/nodetune/instinct"

stages=()
pytest_args=()
setup_only=0
while [ $# -gt 0 ]; do
    case "$1" in
        --) shift; pytest_args=("$@"); break ;;
        --setup-only) setup_only=1 ;;
        -h | --help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        ruff | ansible-lint | sanity | pytest | molecule) stages+=("$1") ;;
        *) nt_die "unknown stage '$1'; valid stages: ${ALL_STAGES[*]}" ;;
    esac
    shift
done
[ "${#stages[@]}" -eq 0 ] && stages=("${ALL_STAGES[@]}")

set -e
nt_setup test
set +e
[ "$setup_only" -eq 1 ] && exit 0
# Plain text in CI logs: ruff, ansible-lint and molecule colour their output even when it goes to a file.
if [ ! -t 1 ]; then
    export NO_COLOR=1 PY_COLORS=0
fi
cd "$NODETUNE_REPO" || exit 1

results=()       # "stage|status|seconds"
failed=0
pytest_line=""
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
junit="$work/pytest.xml"   # the pytest stage's JUnit report; the molecule stage reads which scenarios pytest ran

# ansible-lint and ansible-test write caches and results shared by every run in this checkout and user
# (~/.cache/ansible-compat, the collection's tests/output, ~/.ansible/test): one such stage at a time when two test
# runs share them (.ci/run runs its two lines at once).
with_shared_caches() {
    local lock="${TMPDIR:-/tmp}/nodetune-test-caches-$(id -u).lock"
    if ! command -v flock >/dev/null 2>&1; then
        "$@"  # no util-linux flock: one test run at a time is then the caller's business
        return
    fi
    (
        flock 9 || exit 1
        "$@"
    ) 9>"$lock"
}

stage_ruff() {
    ruff --version && ruff check .
}

stage_ansible_lint() {
    # Config (production profile, offline, excluded paths) lives in .ansible-lint.
    ansible-lint --version | head -n 1 && ansible-lint
}

# The oldest node Python that the collection claims (tests/config.yml) and this ansible-test supports.
oldest_node_python() {
    python - "$COLLECTION_DIR/tests/config.yml" <<'PY'
import sys

import yaml
from ansible_test._internal.content_config import parse_content_config

with open(sys.argv[1]) as config:
    versions = parse_content_config(yaml.safe_load(config)).modules.python_versions
print(min(versions, key=lambda v: tuple(map(int, v.split(".")))))
PY
}

# Every sanity test on the venv's Python (the controller), then the Python-version-specific ones (compile, import)
# on the oldest node Python the collection claims, where present: modules run there, with the nodes' Python.
stage_sanity() {
    local controller oldest links rc=0 version standin
    controller="$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    oldest="$(oldest_node_python)" || return 1
    for version in "$controller" "$oldest"; do
        standin="$(python scripts/lib/ansible_test_get_pip.py "$version")" || return 1
        echo "pip bootstrap stand-in for ansible-test --venv (Python $version): $standin"
    done
    links="$(nt_python_links "$oldest")"
    (cd "$COLLECTION_DIR" && ansible-test sanity --venv --python "$controller" --color no) || rc=1
    if [ "$oldest" = "$controller" ]; then
        return "$rc"
    elif [ -e "$links/python$oldest" ]; then
        echo "---- node Python $oldest ($(readlink "$links/python$oldest")): compile and import"
        (cd "$COLLECTION_DIR" && PATH="$links:$PATH" ansible-test sanity --venv --python "$oldest" \
            --test compile --test import --color no) || rc=1
    else
        echo "---- SKIPPED: sanity on node Python $oldest: no python$oldest on PATH or in ${PYENV_ROOT:-$HOME/.pyenv}/versions"
    fi
    return "$rc"
}

# True when the repository holds test files that pytest should have collected.
have_test_files() {
    [ -n "$(find tests -type f \( -name 'test_*.py' -o -name '*_test.py' \) -print -quit 2>/dev/null)" ]
}

stage_pytest() {
    local rc counts
    # --durations: the slowest tests are named in every run, so a slow CI shows where the time goes.
    # -n: one worker per CPU (NODETUNE_PYTEST_WORKERS=0 runs in this process); --dist loadfile keeps each test file
    # on one worker, so its module fixtures are built once and the safety catalogue's figures add up.
    python -m pytest -n "${NODETUNE_PYTEST_WORKERS:-auto}" --dist loadfile --junitxml="$junit" --durations=15 \
        "${pytest_args[@]}"
    rc=$?
    if [ -s "$junit" ]; then
        counts="$(python - "$junit" <<'PY'
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
failed = total["failures"] + total["errors"]
print(f"pytest: {total['tests'] - failed - total['skipped']} passed, {failed} failed, {total['skipped']} skipped")
PY
)"
        pytest_line="$counts"
    fi
    if [ "$rc" -eq 5 ]; then
        # pytest's "no tests collected": fine only while the project has no test files at all.
        if have_test_files; then
            echo "pytest collected no tests although test files exist under tests/: treating as a failure"
            return 5
        fi
        echo "pytest: no test files exist yet under tests/: nothing to run"
        return 0
    fi
    return "$rc"
}

# Print the scenarios that this run's pytest stage already ran (a non-skipped test id with "molecule" in it and
# "[<scenario>]"), so that they do not run twice.
scenarios_run_by_pytest() {
    [ -s "$junit" ] || return 0
    python - "$junit" "$@" <<'PY'
import sys
import xml.etree.ElementTree as ET

cases = [c for c in ET.parse(sys.argv[1]).getroot().iter("testcase") if c.find("skipped") is None]
ids = [f"{c.get('classname', '')}::{c.get('name', '')}" for c in cases]
for scenario in sys.argv[2:]:
    if any("molecule" in test_id and f"[{scenario}]" in test_id for test_id in ids):
        print(scenario)
PY
}

stage_molecule() {
    local all=() covered=() todo=() scenario
    for scenario in molecule/*/molecule.yml; do
        [ -f "$scenario" ] && all+=("$(basename "$(dirname "$scenario")")")
    done
    if [ "${#all[@]}" -eq 0 ]; then
        echo "no molecule/*/molecule.yml: no scenarios yet, skipped"
        return 0
    fi
    mapfile -t covered < <(scenarios_run_by_pytest "${all[@]}")
    for scenario in "${all[@]}"; do
        [[ " ${covered[*]} " == *" $scenario "* ]] || todo+=("$scenario")
    done
    echo "scenarios: ${all[*]}"
    [ "${#covered[@]}" -gt 0 ] && echo "already run by the pytest stage (see its report): ${covered[*]}"
    [ "${#todo[@]}" -eq 0 ] && return 0
    molecule --version | head -n 1
    if [ "${#covered[@]}" -eq 0 ]; then
        molecule test --all
    else
        local rc=0
        for scenario in "${todo[@]}"; do
            molecule test -s "$scenario" || rc=1
        done
        return "$rc"
    fi
}

for stage in "${stages[@]}"; do
    nt_section "$stage"
    start=$SECONDS
    case "$stage" in
        ansible-lint | sanity) with_shared_caches "stage_${stage//-/_}" ;;
        *) "stage_${stage//-/_}" ;;
    esac
    rc=$?
    elapsed=$((SECONDS - start))
    if [ "$rc" -eq 0 ]; then
        results+=("$stage|passed|$elapsed")
    else
        results+=("$stage|FAILED (exit $rc)|$elapsed")
        failed=$((failed + 1))
    fi
    echo "---- $stage: $([ "$rc" -eq 0 ] && echo passed || echo "FAILED (exit $rc)") in ${elapsed} s"
done

nt_section "summary"
for result in "${results[@]}"; do
    IFS='|' read -r stage status elapsed <<<"$result"
    printf '  %-14s %-18s %5s s\n' "$stage" "$status" "$elapsed"
done
printf '  %-14s %-18s %5s s\n' "total" "" "$((SECONDS - _nt_t0))"
if [ "$failed" -eq 0 ]; then
    echo "nodetune test suite: all ${#results[@]} stages passed"
else
    echo "nodetune test suite: $failed of ${#results[@]} stages FAILED"
fi
[ -n "$pytest_line" ] && echo "$pytest_line"
[ "$failed" -eq 0 ]
