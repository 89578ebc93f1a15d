# shellcheck shell=bash
# Shared setup for scripts/bootstrap.sh and scripts/test.sh (sourced, not run).
#
# Brings a fresh Debian/Ubuntu machine to the point where nodetune runs and tests: the Debian packages it needs,
# a virtual environment in .venv from a supported Python (newest present first: 3.13, 3.12, 3.11; installed with apt
# only when none is present) with the project installed (`pip install -e '.[test]'`), and the venv's bin on PATH (molecule and ansible-test shell out to ansible-* by name). Every step checks first and does nothing
# when its work is already done, so running it again is cheap and needs neither root nor the network.
#
# Environment knobs:
#   NODETUNE_PYTHON         the interpreter to build the venv from (a path or command), or the versions to pick
#                           from, preferred first ("3.11", "3.13 3.12"); default: the newest supported one present
#   NODETUNE_VENV           where the venv lives (default: <repo>/.venv)
#   NODETUNE_SKIP_APT=1     never call apt-get (you provide hwloc's lstopo and a supported Python yourself)

NODETUNE_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NODETUNE_VENV="${NODETUNE_VENV:-$NODETUNE_REPO/.venv}"
# Controller Pythons nodetune supports, newest first (pyproject.toml pins the ansible-core line for each).
NODETUNE_SUPPORTED_PYTHONS=(3.13 3.12 3.11)

# Debian packages everyone needs: hwloc's lstopo is the independent topology oracle (tests and `nodetune`).
NODETUNE_DEB_PACKAGES=(hwloc)
# Debian packages only the test suite needs (scripts/test.sh): chromium for a headless browser test, numactl for the
# memory policies nodetune-bind sets, read back from the real kernel (tests/node/test_rocm_bind.py).
NODETUNE_TEST_DEB_PACKAGES=(chromium numactl)
# ...and, only where the real lanes are asked for (NODETUNE_REAL_LANES=1: CI's first line, a throw-away VM), what
# they run: sshd on 127.0.0.1 with a sudo user (tests/real/test_ssh.py), and systemd-nspawn, which boots a
# throw-away container of this machine's /usr with systemd as PID 1 (tests/real/test_real_systemd.py). Never
# on a workstation by default: installing openssh-server starts a system sshd where nothing stops it (slurmd, whose
# `slurmd -G` parses the gres.conf nodetune writes (tests/node/test_slurm.py), likewise enables its service).
NODETUNE_LANE_DEB_PACKAGES=(openssh-server sudo systemd-container slurmd)

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

# One apt-get update per run.
nt_apt_update() {
    [ "$_nt_apt_updated" -eq 1 ] && return 0
    nt_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    _nt_apt_updated=1
}

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
    nt_apt_update
    nt_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Usage: nt_system_packages [test]: the packages everyone needs, plus the test-only ones with "test".
nt_system_packages() {
    local wanted=("${NODETUNE_DEB_PACKAGES[@]}")
    [ "${1:-}" = "test" ] && wanted+=("${NODETUNE_TEST_DEB_PACKAGES[@]}")
    [ "${1:-}" = "test" ] && [ "${NODETUNE_REAL_LANES:-}" = "1" ] && wanted+=("${NODETUNE_LANE_DEB_PACKAGES[@]}")
    if command -v dpkg-query >/dev/null 2>&1; then
        nt_apt_install "${wanted[@]}"
    elif ! command -v lstopo >/dev/null 2>&1; then
        nt_apt_install "${wanted[@]}"   # no dpkg: fails with a message naming the packages
    fi
    nt_info "Debian packages checked: ${wanted[*]} (lstopo: $(command -v lstopo || echo missing))"
}

# Print "<major.minor> <sys.executable>" for an interpreter that runs (a pyenv shim for a version that is not
# active fails here, and is skipped); print nothing otherwise.
_nt_probe_python() {
    "$1" -c 'import sys; print("%d.%d %s" % (sys.version_info[0], sys.version_info[1], sys.executable))' 2>/dev/null
}

_nt_is_supported_version() {
    local v
    for v in "${NODETUNE_SUPPORTED_PYTHONS[@]}"; do [ "$v" = "$1" ] && return 0; done
    return 1
}

# Print the path of a Python <version> interpreter that is present, or return 1: python<version> or python3 on
# PATH, then pyenv's versions folder (its interpreters are often installed without being on PATH).
_nt_find_version() {
    local version="$1" candidate probe pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}" found=()
    for candidate in "python$version" python3; do
        command -v "$candidate" >/dev/null 2>&1 || continue
        probe="$(_nt_probe_python "$candidate")" || continue
        if [ "${probe%% *}" = "$version" ]; then
            printf '%s\n' "${probe#* }"   # the interpreter itself, not a wrapper such as a pyenv shim
            return 0
        fi
    done
    for candidate in "$pyenv_root/versions/$version".*/bin/"python$version"; do
        [ -x "$candidate" ] && found+=("$candidate")
    done
    [ "${#found[@]}" -eq 0 ] && return 1
    mapfile -t found < <(printf '%s\n' "${found[@]}" | sort -rV)
    for candidate in "${found[@]}"; do
        probe="$(_nt_probe_python "$candidate")" || continue
        [ "${probe%% *}" = "$version" ] && { printf '%s\n' "${probe#* }"; return 0; }
    done
    return 1
}

# Set _nt_wanted to the versions NODETUNE_PYTHON asks for when it names versions ("3.11", "3.13 3.12"); empty when
# it names an interpreter or is unset. Dies on a version nodetune does not support.
_nt_wanted=()
_nt_parse_wanted() {
    local v
    _nt_wanted=()
    [[ "${NODETUNE_PYTHON:-}" =~ ^[[:space:]]*3\.[0-9]+([[:space:]]+3\.[0-9]+)*[[:space:]]*$ ]] || return 0
    for v in $NODETUNE_PYTHON; do
        _nt_is_supported_version "$v" \
            || nt_die "NODETUNE_PYTHON='$NODETUNE_PYTHON': Python $v is not supported; valid: ${NODETUNE_SUPPORTED_PYTHONS[*]} or the path of such an interpreter"
        _nt_wanted+=("$v")
    done
}

# Install the newest wanted Python that apt knows (python3.X and python3.X-venv); silent when apt cannot.
_nt_apt_install_python() {
    local v
    [ "${NODETUNE_SKIP_APT:-0}" = "1" ] && return 0
    command -v apt-get >/dev/null 2>&1 || return 0
    nt_apt_update
    for v in "$@"; do
        if apt-cache show "python$v" >/dev/null 2>&1; then
            nt_info "no supported Python present: installing Debian's python$v"
            nt_apt_install "python$v" "python$v-venv"
            return 0
        fi
    done
}

# Print the path of the Python to build the venv from, and say on stderr which one was picked and why:
# NODETUNE_PYTHON when it names an interpreter; else the newest present of the wanted versions (NODETUNE_PYTHON's
# versions, or all supported ones); else one installed with apt. Dies with one line when there is none.
nt_find_python() {
    local wanted=() version path probe names
    _nt_parse_wanted
    wanted=("${_nt_wanted[@]}")
    if [ -n "${NODETUNE_PYTHON:-}" ] && [ "${#wanted[@]}" -eq 0 ]; then
        probe="$(_nt_probe_python "$NODETUNE_PYTHON")" \
            || nt_die "NODETUNE_PYTHON=$NODETUNE_PYTHON does not run as a Python interpreter; valid: the path of a Python ${NODETUNE_SUPPORTED_PYTHONS[*]} interpreter, or one of those versions"
        _nt_is_supported_version "${probe%% *}" \
            || nt_die "NODETUNE_PYTHON=$NODETUNE_PYTHON is Python ${probe%% *}; valid: Python ${NODETUNE_SUPPORTED_PYTHONS[*]}"
        nt_info "Python: ${probe#* } (${probe%% *}, from NODETUNE_PYTHON)" >&2
        printf '%s\n' "${probe#* }"
        return 0
    fi
    [ "${#wanted[@]}" -eq 0 ] && wanted=("${NODETUNE_SUPPORTED_PYTHONS[@]}")
    local attempt
    for attempt in present apt; do
        for version in "${wanted[@]}"; do
            if path="$(_nt_find_version "$version")"; then
                nt_info "Python: $path ($version: the newest present of ${wanted[*]})" >&2
                printf '%s\n' "$path"
                return 0
            fi
        done
        [ "$attempt" = present ] && _nt_apt_install_python "${wanted[@]}" >&2
    done
    names="$(printf 'python%s ' "${wanted[@]}")"
    nt_die "no supported Python found: none of ${names% } on PATH or in ${PYENV_ROOT:-$HOME/.pyenv}/versions, and apt could not install one${NODETUNE_SKIP_APT:+ (NODETUNE_SKIP_APT=$NODETUNE_SKIP_APT)}; install Python ${wanted[*]} or set NODETUNE_PYTHON=/path/to/python3.X"
}

# The venv's Python version ("3.12"), or nothing when there is no working venv.
_nt_venv_version() {
    local probe
    [ -x "$NODETUNE_VENV/bin/python" ] || return 0
    probe="$(_nt_probe_python "$NODETUNE_VENV/bin/python")" && printf '%s\n' "${probe%% *}"
}

# True when the existing venv is one to keep: a supported Python, and the one NODETUNE_PYTHON asks for if set.
_nt_venv_is_wanted() {
    local have="$1" probe
    [ -n "$have" ] && _nt_is_supported_version "$have" || return 1
    [ -z "${NODETUNE_PYTHON:-}" ] && return 0
    _nt_parse_wanted
    if [ "${#_nt_wanted[@]}" -gt 0 ]; then
        [[ " ${_nt_wanted[*]} " == *" $have "* ]]
    else
        probe="$(_nt_probe_python "$NODETUNE_PYTHON")" && [ "${probe%% *}" = "$have" ]
    fi
}

# Create the venv (or replace one built from an unsupported or unwanted Python) and install the project with its
# test extras; pyproject.toml's environment markers pick the ansible-core line for the venv's Python.
nt_venv() {
    local python version stamp want
    version="$(_nt_venv_version)"
    if _nt_venv_is_wanted "$version"; then
        nt_info "venv: $NODETUNE_VENV ($("$NODETUNE_VENV/bin/python" -V 2>&1), kept)"
    else
        python="$(nt_find_python)" || exit 1
        version="$(_nt_probe_python "$python")"
        version="${version%% *}"
        # Debian splits venv/ensurepip out of its python3.X package.
        if ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then
            nt_apt_install "python$version-venv"
            "$python" -c 'import venv, ensurepip' >/dev/null 2>&1 \
                || nt_die "$python has no venv/ensurepip module; install Debian's python$version-venv"
        fi
        [ -e "$NODETUNE_VENV" ] && { nt_info "replacing $NODETUNE_VENV (Python ${version:-?} wanted)"; rm -rf "$NODETUNE_VENV"; }
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

# Print a folder holding python<version> links to the present interpreters of the given versions (ansible-test
# finds the Pythons it tests with by those names on PATH; pyenv's shims answer only for the active version).
# Versions that are not present are left out; nothing is installed.
nt_python_links() {
    local folder="$NODETUNE_VENV/.nodetune-pythons" version path
    mkdir -p "$folder"
    for version in "$@"; do
        if path="$(_nt_find_version "$version")"; then
            ln -sfn "$path" "$folder/python$version"
        else
            rm -f "$folder/python$version"
        fi
    done
    printf '%s\n' "$folder"
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
