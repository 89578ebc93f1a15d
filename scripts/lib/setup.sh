# shellcheck shell=bash
# Shared setup for scripts/bootstrap.sh and scripts/test.sh (sourced, not run).
#
# Brings a fresh Debian/Ubuntu machine to the point where nodetune runs and tests: the Debian packages it needs,
# a Python 3.11 virtual environment in .venv with the project installed (`pip install -e '.[test]'`), and the venv's
# bin on PATH (molecule and ansible-test shell out to ansible-* by name). Every step checks first and does nothing
# when its work is already done, so running it again is cheap and needs neither root nor the network.
#
# Environment knobs:
#   NODETUNE_PYTHON         a Python 3.11 interpreter to build the venv from (default: python3.11, then python3)
#   NODETUNE_VENV           where the venv lives (default: <repo>/.venv)
#   NODETUNE_SKIP_APT=1     never call apt-get (you provide hwloc's lstopo and Python 3.11 yourself)

NODETUNE_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NODETUNE_VENV="${NODETUNE_VENV:-$NODETUNE_REPO/.venv}"
NODETUNE_PYTHON_VERSION="3.11"

# Debian packages everyone needs: hwloc's lstopo is the independent topology oracle (tests and `nodetune`).
NODETUNE_DEB_PACKAGES=(hwloc)
# Debian packages only the test suite needs (scripts/test.sh), e.g. chromium for a headless browser test.
NODETUNE_TEST_DEB_PACKAGES=(chromium)

_nt_t0=$SECONDS

nt_section() {
    printf '\n==== %s ====\n' "$*"
}

nt_info() {
    printf '[nodetune] %s\n' "$*"
}

nt_die() {
    printf '[nodetune] ERROR: %s\n' "$*" >&2
    exit 1
}

# Run a command as root: directly when we are root, through sudo otherwise.
nt_as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        nt_die "need root to run '$*' (not root and no sudo); install it by hand or run as root"
    fi
}

_nt_apt_updated=0

# Install Debian packages that are not installed yet (one apt-get update per run, only when needed).
nt_apt_install() {
    local missing=() pkg
    for pkg in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
            missing+=("$pkg")
        fi
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    if [ "${NODETUNE_SKIP_APT:-0}" = "1" ]; then
        nt_info "WARNING: Debian packages not installed: ${missing[*]} (NODETUNE_SKIP_APT=1: not calling apt-get)"
        return 0
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        nt_die "packages missing: ${missing[*]}; this is not a Debian/Ubuntu machine (no apt-get): install them with your package manager and set NODETUNE_SKIP_APT=1"
    fi
    nt_info "installing Debian packages: ${missing[*]}"
    if [ "$_nt_apt_updated" -eq 0 ]; then
        nt_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        _nt_apt_updated=1
    fi
    nt_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Usage: nt_system_packages [test]: the packages everyone needs, plus the test-only ones with "test".
nt_system_packages() {
    local wanted=("${NODETUNE_DEB_PACKAGES[@]}")
    [ "${1:-}" = "test" ] && wanted+=("${NODETUNE_TEST_DEB_PACKAGES[@]}")
    if command -v dpkg-query >/dev/null 2>&1; then
        nt_apt_install "${wanted[@]}"
    elif ! command -v lstopo >/dev/null 2>&1; then
        nt_apt_install "${wanted[@]}"   # no dpkg: fails with a message naming the packages
    fi
    nt_info "Debian packages checked: ${wanted[*]} (lstopo: $(command -v lstopo || echo missing))"
}

_nt_is_py311() {
    "$1" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' >/dev/null 2>&1
}

# Print the path of a Python 3.11 interpreter, installing Debian's python3.11 when none is found.
nt_find_python() {
    local candidate
    if [ -n "${NODETUNE_PYTHON:-}" ]; then
        _nt_is_py311 "$NODETUNE_PYTHON" || nt_die "NODETUNE_PYTHON=$NODETUNE_PYTHON is not a Python $NODETUNE_PYTHON_VERSION interpreter"
        command -v "$NODETUNE_PYTHON"
        return 0
    fi
    for candidate in python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 && _nt_is_py311 "$candidate"; then
            # The interpreter itself, not a wrapper such as a pyenv shim.
            "$candidate" -c 'import sys; print(sys.executable)'
            return 0
        fi
    done
    nt_info "no Python $NODETUNE_PYTHON_VERSION on PATH: trying Debian's python3.11" >&2
    nt_apt_install python3.11 python3.11-venv >&2
    command -v python3.11 >/dev/null 2>&1 && _nt_is_py311 python3.11 \
        || nt_die "Python $NODETUNE_PYTHON_VERSION is required (ansible-core 2.19 on the controller); install it and set NODETUNE_PYTHON"
    command -v python3.11
}

# Create the venv (or replace one built from another Python) and install the project with its test extras.
nt_venv() {
    local python stamp want
    if [ -x "$NODETUNE_VENV/bin/python" ] && _nt_is_py311 "$NODETUNE_VENV/bin/python"; then
        nt_info "venv: $NODETUNE_VENV ($("$NODETUNE_VENV/bin/python" -V 2>&1))"
    else
        python="$(nt_find_python)"
        # Debian splits venv/ensurepip out of its python3.11 package.
        if ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then
            nt_apt_install python3.11-venv
        fi
        [ -e "$NODETUNE_VENV" ] && { nt_info "replacing $NODETUNE_VENV (not a Python $NODETUNE_PYTHON_VERSION venv)"; rm -rf "$NODETUNE_VENV"; }
        nt_info "creating venv $NODETUNE_VENV from $python ($("$python" -V 2>&1))"
        "$python" -m venv "$NODETUNE_VENV"
    fi
    # Reinstall only when the dependency declaration changed since the last install.
    stamp="$NODETUNE_VENV/.nodetune-install-stamp"
    want="$(cat "$NODETUNE_REPO/pyproject.toml" "$NODETUNE_VENV/pyvenv.cfg" | sha256sum | cut -d' ' -f1) $NODETUNE_REPO"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
        && "$NODETUNE_VENV/bin/python" -c 'import nodetune, ansible, molecule, pytest' >/dev/null 2>&1; then
        nt_info "python packages: up to date (pyproject.toml unchanged since the last install)"
    else
        nt_info "installing nodetune and its test tools into the venv (pip install -e '.[test]')"
        "$NODETUNE_VENV/bin/python" -m pip install -qq --disable-pip-version-check -e "$NODETUNE_REPO[test]"
        "$NODETUNE_VENV/bin/python" -m pip check >/dev/null || nt_die "pip check failed: $("$NODETUNE_VENV/bin/python" -m pip check)"
        printf '%s\n' "$want" >"$stamp"
    fi
}

# Everything: system packages, venv, project install, PATH. Usage: nt_setup [test]
nt_setup() {
    nt_section "setup"
    nt_system_packages "${1:-}"
    nt_venv
    export VIRTUAL_ENV="$NODETUNE_VENV"
    export PATH="$NODETUNE_VENV/bin:$PATH"
    hash -r
    nt_info "ansible-core $(python -c 'import ansible.release as r; print(r.__version__)'), $(python -V 2>&1), setup took $((SECONDS - _nt_t0)) s"
}
