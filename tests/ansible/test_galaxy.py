"""The collection as users get it: built with ``scripts/build_collection.sh`` (ansible-galaxy collection build),
installed into an EMPTY collections path, and its own ``site.yml`` run from there against a simulated node.
The lab is its own tarball (nodetune-lab), installed on purpose beside it: a Galaxy user tries nodetune without real
nodes with ``ansible-playbook nodetune.lab.try`` from an empty folder (docs/try.md), and without the lab a simulated
node gets a clear message instead of Ansible's "role 'nodetune.lab.sim_node' was not found".

Then an area role by its collection name (``nodetune.instinct.nvme``) applies its area alone, and
``nodetune.instinct.plan``, whose tune task runs outside a role, works from the declared variables. Every relative
link of the shipped markdown names a file of the tarball. The runs happen in a folder with its own empty
ansible.cfg and an empty roles path, so nothing of the repository (its ansible.cfg, collection/ or roles/) can
stand in for what the tarball ships.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.support.specs import small_mi250_spec as small_spec

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
GALAXY = REPO / "collection" / "ansible_collections" / "nodetune" / "instinct" / "galaxy.yml"
LAB_GALAXY = REPO / "collection" / "ansible_collections" / "nodetune" / "lab" / "galaxy.yml"
SIMNODE = REPO / "collection" / "ansible_collections" / "nodetune" / "lab" / "plugins" / "module_utils" / "simnode"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def broken_links(archive: tarfile.TarFile) -> list[str]:
    """Every relative link of every shipped markdown file that names no file of the artifact."""
    names = set(archive.getnames())
    broken = []
    for member in archive.getmembers():
        if not member.name.endswith(".md"):
            continue
        text = archive.extractfile(member).read().decode()
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(member.name), target.split("#")[0]))
            if path not in names:
                broken.append(f"{member.name} -> {target}")
    return broken


def test_galaxy_metadata_is_real() -> None:
    for galaxy in (GALAXY, LAB_GALAXY):
        meta = yaml.safe_load(galaxy.read_text())
        urls = [meta[key] for key in ("repository", "homepage", "documentation", "issues")]
        assert all(url.startswith("https://github.com/nodetune/nodetune") for url in urls), (galaxy, urls)
        assert "example" not in galaxy.read_text() and "placeholder" not in galaxy.read_text().lower()
    for readme in (REPO / "README.md", GALAXY.parent / "README.md"):
        assert "scripts/build_collection.sh" in readme.read_text(), f"{readme} does not say how to build"


def isolated_env(work: Path, collections: Path) -> dict[str, str]:
    config = work / "ansible.cfg"
    config.write_text("[defaults]\nretry_files_enabled = False\n")
    (work / "no-roles").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_CONFIG=str(config), ANSIBLE_COLLECTIONS_PATH=str(collections),
               ANSIBLE_ROLES_PATH=str(work / "no-roles"), ANSIBLE_NOCOLOR="1", ANSIBLE_HOME=str(work / "home"))
    return env


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


def build_tarballs(dist: Path) -> tuple[Path, Path]:
    """(nodetune.instinct's tarball, nodetune.lab's): the script prints the lab's first, instinct's last."""
    env_build = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    build = run(["bash", str(REPO / "scripts" / "build_collection.sh"), str(dist)], REPO, env_build)
    assert build.returncode == 0, build.stderr
    lab, instinct = (Path(line) for line in build.stdout.strip().splitlines())
    assert instinct.name.startswith("nodetune-instinct-") and lab.name.startswith("nodetune-lab-"), build.stdout
    return instinct, lab


def recap(stdout: str, host: str) -> dict[str, int]:
    line = re.search(rf"^{re.escape(host)}\s*:\s*(.*)$", stdout, re.M)
    assert line, stdout[-3000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line.group(1))}


def test_built_collection_installs_and_runs_site_from_an_empty_collections_path(tmp_path: Path) -> None:
    tarball, lab_tarball = build_tarballs(tmp_path / "dist")
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
    for required in ("plugins/modules/tune.py", "plugins/modules/verify.py", "plugins/modules/topology_facts.py",
                     "plugins/action/tune.py", "plugins/filter/layout_filters.py", "plugins/filter/cpulist.yml",
                     "plugins/module_utils/rootfs.py", "roles/tune/tasks/main.yml",
                     "roles/nvme/meta/argument_specs.yml", "roles/verify/tasks/main.yml", "playbooks/site.yml",
                     "playbooks/apply.yml", "meta/runtime.yml", "plugins/module_utils/areas/declarations.py",
                     "plugins/plugin_utils/role_variables.py", "docs/topology.md", "docs/layout.md", "LICENSE"):
        assert required in names, f"{required} is not in {tarball.name}"
    assert not any("tests/output" in n or "__pycache__" in n for n in names)
    # the lab is test tooling: never in the collection that runs on real nodes
    assert not any(n.startswith(("specs/", "plugins/module_utils/simnode"))
                   or n.split("/")[-1] in ("simkernel.py", "sim_node.py") for n in names)
    with tarfile.open(tarball) as archive:
        assert broken_links(archive) == []
        manifest = json.load(archive.extractfile("MANIFEST.json"))["collection_info"]
    assert manifest["repository"] == "https://github.com/nodetune/nodetune"

    work = tmp_path / "elsewhere"
    work.mkdir()
    collections = tmp_path / "collections"
    env = isolated_env(work, collections)
    install = run(["ansible-galaxy", "collection", "install", str(tarball), "-p", str(collections)], work, env)
    assert install.returncode == 0, install.stdout + install.stderr
    # the simulated node below needs the lab collection (its own tarball), installed beside it
    lab = run(["ansible-galaxy", "collection", "install", str(lab_tarball), "-p", str(collections)], work, env)
    assert lab.returncode == 0, lab.stdout + lab.stderr
    listed = run(["ansible-galaxy", "collection", "list", "nodetune.instinct", "--format", "json"], work, env)
    assert listed.returncode == 0, listed.stderr
    assert list(json.loads(listed.stdout)) == [str(collections / "ansible_collections")]

    spec = work / "node.yml"
    spec.write_text(yaml.safe_dump(small_spec()))
    node = tmp_path / "node"
    inventory = work / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"gnode": {
        "nodetune_sim_spec": str(spec), "nodetune_root": str(node), "nodetune_report_dir": str(work / "reports"),
        "nodetune_lab_backend": "simulated",
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}}))
    site = run(["ansible-playbook", "-i", str(inventory), "nodetune.instinct.site"], work, env)
    assert site.returncode == 0, site.stdout[-5000:] + site.stderr[-2000:]
    recap = re.search(r"^gnode\s*:\s*(.*)$", site.stdout, re.M)
    assert recap, site.stdout[-3000:]
    counts = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", recap.group(1))}
    assert counts["failed"] == 0 and counts["changed"] >= 2  # the node was built, then tuned
    assert (node / "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor").read_text().strip() == "performance"
    assert (node / "var/lib/nodetune/journal.json").is_file()
    assert json.loads((work / "reports" / "nodes" / "gnode.json").read_text())["node"] == "gnode"

    # an area role by its collection name applies that area alone, in one module call, in check mode
    book = work / "nvme.yml"
    book.write_text(yaml.safe_dump([{"name": "NVMe", "hosts": "all", "gather_facts": False,
                                     "roles": ["nodetune.instinct.nvme"]}]))
    alone = run(["ansible-playbook", "-i", str(inventory), str(book), "--check", "-e",
                 "nodetune_nvme_scheduler=mq-deadline"], work, env)
    assert alone.returncode == 0, alone.stdout[-5000:] + alone.stderr[-2000:]
    tasks = re.findall(r"^TASK \[([^\]]+)\]", alone.stdout, re.M)
    assert [t for t in tasks if "Validating arguments" not in t] == ["nodetune.instinct.nvme : Apply the nvme area"]

    # a playbook of the collection that runs the tune action outside a role
    planned = run(["ansible-playbook", "-i", str(inventory), "nodetune.instinct.plan"], work, env)
    assert planned.returncode == 0, planned.stdout[-5000:] + planned.stderr[-2000:]

    # The Python package installed without a checkout beside it (`pip install .`, not editable) finds the collection
    # where ansible-galaxy put it, and says where it looked when it is not there.
    target = tmp_path / "site-packages"
    installed = run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(REPO)],
                    work, env)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    assert not (target / "collection").exists() and (target / "nodetune" / "cli.py").is_file()
    cli = [sys.executable, "-c", "import sys; from nodetune.cli import main; sys.exit(main())"]
    packaged = dict(env, PYTHONPATH=str(target))
    alone = {k: v for k, v in packaged.items() if k != "ANSIBLE_COLLECTIONS_PATH"} | {"HOME": str(work)}
    missing = run([*cli, "--help"], work, alone)
    assert missing.returncode == 1 and "collection is not installed where nodetune looks" in missing.stderr, (
        missing.stdout + missing.stderr)
    assert "Traceback" not in missing.stderr
    found = run([*cli, "discover", "--root", str(node), "--json"], work, packaged)
    assert found.returncode == 0 and json.loads(found.stdout)["cpus"], found.stderr[-3000:]
    checked = run([*cli, "apply", "--root", str(node), "--check", "--json", "-e", "nodetune_lab_backend=simulated"],
                  work, packaged)
    assert checked.returncode in (0, 2), checked.stdout[-3000:] + checked.stderr[-3000:]
    assert json.loads(checked.stdout)["nodes"]["node"]["status"] in ("ok", "changed")


def test_a_galaxy_user_tries_nodetune_on_simulated_nodes_from_an_empty_folder(tmp_path: Path) -> None:
    """Issue 25 item 6, as docs/try.md says it: both tarballs installed offline, from the files, with ansible-galaxy's
    defaults (no -p, no ansible.cfg anywhere, a fresh HOME), then ``ansible-playbook nodetune.lab.try`` in an empty
    folder builds a simulated node there and tunes and verifies it; a second run changes nothing. With
    nodetune.instinct alone, a simulated node is refused with what to install."""
    instinct, lab = build_tarballs(tmp_path / "dist")
    with tarfile.open(lab) as archive:
        names = set(archive.getnames())
        assert broken_links(archive) == []
        try_book = archive.extractfile("playbooks/try.yml").read().decode()
    assert {"playbooks/try.yml", "specs/mi250.yml", "specs/mi300x.yml", "roles/sim_node/tasks/main.yml",
            "plugins/modules/sim_node.py", "plugins/module_utils/simnode/__init__.py", "LICENSE"} <= names
    # the node generator is a package: all of its modules ship (sim_node's payload imports them)
    assert {"plugins/module_utils/simnode/" + p.name for p in SIMNODE.glob("*.py")} <= names
    assert "import_playbook: nodetune.instinct.site" in try_book

    home, work = tmp_path / "home", tmp_path / "try"
    home.mkdir()
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PYTHON"))}
    env.update(HOME=str(home), PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_NOCOLOR="1")
    install = run(["ansible-galaxy", "collection", "install", str(instinct), str(lab)], work, env)
    assert install.returncode == 0, install.stdout + install.stderr
    installed = home / ".ansible" / "collections" / "ansible_collections" / "nodetune"
    assert (installed / "instinct" / "MANIFEST.json").is_file() and (installed / "lab" / "MANIFEST.json").is_file()
    assert list(work.iterdir()) == []

    first = run(["ansible-playbook", "nodetune.lab.try", "-e", '{"nodetune_try_nodes": ["mi250"]}'], work, env)
    assert first.returncode == 0, first.stdout[-5000:] + first.stderr[-2000:]
    counts = recap(first.stdout, "try-mi250")
    assert counts["failed"] == 0 and counts["changed"] >= 2, first.stdout[-3000:]  # built, then tuned
    node = work / "nodetune-try" / "mi250"
    assert json.loads((node / ".nodetune-simnode.json").read_text())
    assert (node / "var/lib/nodetune/journal.json").is_file()
    assert (node / "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor").read_text().strip() == "performance"
    assert json.loads((work / "nodetune-try" / "reports" / "nodes" / "try-mi250.json").read_text())["node"] == (
        "try-mi250")
    again = run(["ansible-playbook", "nodetune.lab.try", "-e", '{"nodetune_try_nodes": ["mi250"]}'], work, env)
    assert again.returncode == 0, again.stdout[-5000:] + again.stderr[-2000:]
    assert recap(again.stdout, "try-mi250")["changed"] == 0, again.stdout[-3000:]

    # nodetune.instinct alone: its site.yml reaches a simulated host and says what is missing
    bare_home = tmp_path / "bare-home"
    bare_home.mkdir()
    bare = dict(env, HOME=str(bare_home))
    assert run(["ansible-galaxy", "collection", "install", str(instinct)], work, bare).returncode == 0
    inventory = tmp_path / "sim.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"sim": {
        "nodetune_sim_spec": str(REPO / "inventories/lab/specs/mi250.yml"), "nodetune_root": str(tmp_path / "sim"),
        "nodetune_lab_backend": "simulated", "ansible_connection": "local",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}}))
    missing = run(["ansible-playbook", "-i", str(inventory), "nodetune.instinct.site"], work, bare)
    assert missing.returncode != 0
    assert "which needs the nodetune.lab collection" in missing.stdout, missing.stdout[-3000:]
    assert "ansible-galaxy collection install nodetune-lab-<version>.tar.gz" in missing.stdout
    assert not (tmp_path / "sim").exists()
