#!/usr/bin/env bash
# Build the collection tarballs for Galaxy, Automation Hub and execution environments: nodetune.instinct (what runs
# on real nodes) and nodetune.lab (simulated nodes, to try nodetune without any: nodetune.lab.try, docs/try.md).
#
#   scripts/build_collection.sh [OUTPUT_DIR]        # default: dist/ ; prints the two tarballs' paths,
#                                                   # nodetune-lab-<v>.tar.gz first, nodetune-instinct-<v>.tar.gz last
#
# The lab is its own tarball, installed on purpose beside nodetune.instinct, and never part of it: the production
# collection carries no simulation code (a real fleet's runs never load it).
#
# The collection's plugins live in collection/ansible_collections/nodetune/instinct/. The roles and playbooks live
# at the repository root, where ansible.cfg (roles_path = ./roles), Molecule, ansible-lint and the role docs
# generator find them. They are COPIED into a staging copy of the collection at build time, so there is one source
# for each file and the repository keeps working unchanged:
#   roles/<role>/                 -> roles/<role>/                    (nodetune.instinct.<role>)
#   playbooks/<name>.yml          -> playbooks/<name>.yml             (ansible-playbook nodetune.instinct.<name>)
#   site.yml                      -> playbooks/site.yml               (ansible-playbook nodetune.instinct.site)
#   docs/*.md                     -> docs/*.md                        (what the READMEs link to)
# In the copies, `import_playbook: playbooks/<name>.yml` becomes `import_playbook: nodetune.instinct.<name>`; the
# roles' short names resolve inside the collection's own playbooks. Symlinks would not do: ansible-galaxy skips a
# symlinked directory that points outside the collection.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$repo/dist}"
source_dir="$repo/collection/ansible_collections/nodetune/instinct"
command -v ansible-galaxy >/dev/null 2>&1 || { echo "build_collection: ansible-galaxy not on PATH (activate .venv)" >&2; exit 1; }

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
coll="$stage/ansible_collections/nodetune/instinct"
mkdir -p "$coll" "$out"

# The collection itself, without test output and caches.
tar -C "$source_dir" --exclude='./tests/output' --exclude='__pycache__' --exclude='*.pyc' --exclude='./roles' \
    --exclude='./playbooks' --exclude='./docs' -cf - . | tar -C "$coll" -xf -

# The roles, as they are in the repository.
mkdir -p "$coll/roles"
tar -C "$repo/roles" --exclude='__pycache__' --exclude='*.pyc' -cf - . | tar -C "$coll/roles" -xf -

# The documentation the shipped READMEs link to (tests/ansible/test_galaxy.py checks every relative link).
mkdir -p "$coll/docs"
cp "$repo"/docs/*.md "$coll/docs/"
cp "$repo/LICENSE" "$coll/LICENSE"  # galaxy.yml declares Apache-2.0; the text travels with the tarball

# The playbooks, with imports turned into collection playbook names.
mkdir -p "$coll/playbooks"
for book in "$repo"/playbooks/*.yml "$repo/site.yml"; do
    sed -E 's#(import_playbook:[[:space:]]*)(\./)?(playbooks/)?([A-Za-z0-9_]+)\.ya?ml#\1nodetune.instinct.\4#' \
        "$book" >"$coll/playbooks/$(basename "$book")"
done

# nodetune.lab: its folder as it is, plus the lab machines' specs (inventories/lab/specs, where the lab inventory,
# Molecule and the tests read them) in specs/, where nodetune.lab.try finds them in an installed collection.
lab_source="$repo/collection/ansible_collections/nodetune/lab"
lab="$stage/ansible_collections/nodetune/lab"
mkdir -p "$lab/specs"
tar -C "$lab_source" --exclude='__pycache__' --exclude='*.pyc' -cf - . | tar -C "$lab" -xf -
cp "$repo"/inventories/lab/specs/*.yml "$lab/specs/"
# its playbooks import the repository's site.yml by a relative path; installed, that is nodetune.instinct.site
for book in "$lab"/playbooks/*.yml; do
    [ -e "$book" ] || continue
    sed -E -i 's#(import_playbook:[[:space:]]*)(\.\./)+site\.ya?ml#\1nodetune.instinct.site#' "$book"
done
cp "$repo/LICENSE" "$lab/LICENSE"

version_of() { sed -n 's/^version:[[:space:]]*//p' "$1/galaxy.yml" | tr -d "\"'"; }
ansible-galaxy collection build "$lab" --output-path "$out" --force >/dev/null
ansible-galaxy collection build "$coll" --output-path "$out" --force >/dev/null
echo "$out/nodetune-lab-$(version_of "$lab").tar.gz"
echo "$out/nodetune-instinct-$(version_of "$coll").tar.gz"
