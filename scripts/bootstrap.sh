#!/usr/bin/env bash
# Set up nodetune on a fresh Debian/Ubuntu machine and run the main job.
#
#   scripts/bootstrap.sh                       # setup, then ansible-playbook site.yml on the simulated lab nodes
#   scripts/bootstrap.sh --check --diff        # extra arguments go to ansible-playbook
#   scripts/bootstrap.sh -i inventories/mine   # your fleet instead of the lab (see README: "Point it at a fleet")
#   scripts/bootstrap.sh --setup-only          # only the setup (Debian packages, .venv, pip install -e '.[test]')
#   NODETUNE_PYTHON=3.11 scripts/bootstrap.sh  # a given Python (default: the newest supported one present)
#
# Needs root or sudo only when Debian packages are missing. Exit code: ansible-playbook's.
set -euo pipefail

# shellcheck source=scripts/lib/setup.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/setup.sh"

setup_only=0
playbook_args=()
for arg in "$@"; do
    case "$arg" in
        --setup-only) setup_only=1 ;;
        -h | --help) sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) playbook_args+=("$arg") ;;
    esac
done

nt_setup
if [ "$setup_only" -eq 1 ]; then
    nt_info "setup done; activate the venv with: . ${NODETUNE_VENV#"$NODETUNE_REPO"/}/bin/activate"
    exit 0
fi

cd "$NODETUNE_REPO"
[ -f site.yml ] || nt_die "site.yml not found in $NODETUNE_REPO"
nt_section "ansible-playbook site.yml${playbook_args[*]:+ ${playbook_args[*]}}"
# ansible.cfg in the repo root picks the collection, the roles and the default (simulated lab) inventory.
exec ansible-playbook site.yml "${playbook_args[@]}"
