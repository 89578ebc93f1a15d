"""A fleet verified as 4 slices in parallel, then one ``nodetune report`` over their 4 report folders, gives what one
play over the whole fleet gives (issue 28 item 2): the AWX / Automation Platform job slicing recipe of docs/fleet.md.

Seven small simulated nodes in two racks (inventory groups): n3 lost a GPU the way a real node does (its PCI device,
KFD node and DRM card are gone), so its rack's majority teaches it the ``inventory.gpu_count`` drift; n7's root is
gone, so its verify fails. The slices are ``--limit`` partitions of the same inventory, each with its own report
folder; a slice alone sees too little of n3's rack to learn anything. Equal, modulo the times and the runs: the
summary, the JUnit XML, the Prometheus text, the outliers and the learned expectations.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from nodetune.cli import main
from tests.support.playbooks import LAB_TUNING, REPO
from tests.support.specs import small_mi250_spec as small_spec
from tests.support.trees import scratch_dir

pytestmark = pytest.mark.slow

RACKS = {"rack_a": ("n1", "n2", "n3", "n4"), "rack_b": ("n5", "n6", "n7")}
SLICES = (("n1", "n5"), ("n2", "n6"), ("n3", "n7"), ("n4",))
QUIET = {"nodetune_bios_check_enabled": False, "nodetune_health_enabled": False}


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[Path, Path]]:
    scratch = scratch_dir()
    try:
        spec = small_spec()
        lost = copy.deepcopy(spec)
        del lost["gpus"][1]
        racks = {}
        for rack, hosts in RACKS.items():
            racks[rack] = {"hosts": {}}
            for host in hosts:
                root = scratch / host
                if host != "n7":  # n7's root is gone: its verify fails
                    simnode.build(lost if host == "n3" else spec, str(root))
                racks[rack]["hosts"][host] = {"nodetune_root": str(root)}
        group_vars = scratch / "group_vars" / "all"
        group_vars.mkdir(parents=True)
        (group_vars / "tuning.yml").write_text(LAB_TUNING.read_text())
        (group_vars / "quiet.yml").write_text(yaml.safe_dump(QUIET))
        inventory = {"all": {
            "children": racks,
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                     "nodetune_lab_backend": "simulated"}}}
        path = scratch / "hosts.yml"
        path.write_text(yaml.safe_dump(inventory))
        yield path, scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def verify_run(inventory: Path, reports: Path, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0")
    return subprocess.Popen(["ansible-playbook", "-i", str(inventory), "playbooks/verify.yml",
                             "-e", f"nodetune_report_dir={reports}", *args],
                            cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def finished(run: subprocess.Popen[str]) -> str:
    out, _ = run.communicate(timeout=600)
    # n7 fails (its root is gone): ansible-playbook exits 2; anything else is a broken run
    assert run.returncode in (0, 2) and "PLAY RECAP" in out, out[-6000:]
    return out


def comparable(folder: Path) -> dict:
    """The fleet outputs of a report folder without what differs between runs: times and run ids."""
    summary = json.loads((folder / "summary.json").read_text())
    sources = summary.pop("sources")
    summary.pop("runs")
    summary["text"] = [line for line in summary["text"] if not line.startswith("reports from ")]
    junit = re.sub(r' timestamp="[^"]*"', "", (folder / "junit.xml").read_text())
    prometheus = [line for line in (folder / "fleet.prom").read_text().splitlines() if "timestamp_seconds" not in line]
    learned = {path.name: json.loads(path.read_text()) for path in sorted((folder / "learned").glob("*.json"))}
    return {"summary": summary, "junit": junit, "prometheus": prometheus, "learned": learned,
            "source_hosts": sorted(sources)}


@pytest.fixture(scope="module")
def one_play(fleet: tuple[Path, Path]) -> Path:
    """The whole fleet in one play: the reference."""
    inventory, scratch = fleet
    finished(verify_run(inventory, scratch / "one-play"))
    return scratch / "one-play"


def sliced(inventory: Path, folders: list[Path]) -> None:
    """The 4 slices at once, each ``--limit``ed to its hosts and writing into its folder."""
    runs = [verify_run(inventory, folder, "--limit", ",".join(hosts)) for folder, hosts in zip(folders, SLICES,
                                                                                               strict=True)]
    for run in runs:
        finished(run)


def localhost_play(scratch: Path, tasks: list[dict], **extra: str) -> None:
    play = scratch / "fleet_report.yml"
    play.write_text(yaml.safe_dump([{"name": "The fleet reports of every slice", "hosts": "localhost",
                                     "gather_facts": False, "tasks": tasks}]))
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    done = subprocess.run(["ansible-playbook", str(play), *[f"-e{k}={v}" for k, v in extra.items()]], cwd=REPO,
                          env=env, text=True, capture_output=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_four_slices_in_parallel_report_as_one_play(fleet: tuple[Path, Path], one_play: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    inventory, scratch = fleet
    one = one_play
    slices = [scratch / f"slice-{i}" for i in range(1, len(SLICES) + 1)]
    sliced(inventory, slices)
    # a slice alone: n3 with one rack peer, too few to learn from; its failure record is its own
    third = json.loads((slices[2] / "summary.json").read_text())
    assert third["nodes"] == 2 and "inventory.gpu_count" not in third["drifted"].get("n3", [])
    assert (slices[2] / "failed" / "n7.json").is_file()

    merged = scratch / "merged"
    code = main(["report", *map(str, slices), "-o", str(merged)])
    assert code == 1, capsys.readouterr().out  # n7 failed: the verify exit code for a failed node
    whole, aggregate = comparable(one), comparable(merged)
    assert aggregate["summary"] == whole["summary"]
    assert aggregate["junit"] == whole["junit"]
    assert aggregate["prometheus"] == whole["prometheus"]
    assert aggregate["learned"] == whole["learned"]
    assert aggregate["source_hosts"] == whole["source_hosts"] == [h for hosts in RACKS.values() for h in hosts]

    # what the fleet found: n3's learned drift, its outlier, n7 failed; each node says which run it came from
    summary = whole["summary"]
    assert "inventory.gpu_count" in summary["drifted"]["n3"]
    assert [(o["node"], o["key"], o["group"]) for o in summary["outliers"] if o["key"] == "gpu_count"] == [
        ("n3", "gpu_count", "rack_a")]
    assert list(summary["failed"]) == ["n7"]
    assert aggregate["learned"]["n3.json"]["expected"]["gpu_count"] == 2
    assert sorted(aggregate["learned"]) == ["n1.json", "n2.json", "n3.json", "n4.json"]  # rack_b: 2 with a report
    merged_summary = json.loads((merged / "summary.json").read_text())
    runs_of = {host: source["run"] for host, source in merged_summary["sources"].items()}
    assert len(merged_summary["runs"]) == len(SLICES) and runs_of["n1"] == runs_of["n5"] != runs_of["n2"]
    assert merged_summary["sources"]["n7"]["file"] == str(slices[2] / "failed" / "n7.json")
    one_summary = json.loads((one / "summary.json").read_text())
    assert len(one_summary["runs"]) == 1 and len(set(s["run"] for s in one_summary["sources"].values())) == 1

    # the same from a play over the slices' folders, as an AWX workflow's next job runs it (docs/fleet.md)
    localhost_play(scratch, [
        {"ansible.builtin.find": {"paths": "{{ slices }}", "patterns": "slice-*", "file_type": "directory"},
         "register": "found"},
        {"nodetune.instinct.fleet_report": {"sources": "{{ found.files | map(attribute='path') | sort }}",
                                            "dest": str(scratch / "via-play")}}], slices=str(scratch))
    assert comparable(scratch / "via-play") == aggregate


def test_four_slices_sharing_one_report_folder_report_as_one_play(fleet: tuple[Path, Path], one_play: Path) -> None:
    """docs/fleet.md's AWX recipe: the slices write into one folder at once, then one fleet report over it,
    into it: the fleet's learned expectations and reports replace what each slice learned from its share."""
    inventory, scratch = fleet
    shared = scratch / "shared"
    sliced(inventory, [shared] * len(SLICES))
    assert sorted(p.name for p in (shared / "nodes").iterdir()) == [f"n{i}.json" for i in range(1, 7)]
    assert [p.name for p in (shared / "failed").iterdir()] == ["n7.json"]
    localhost_play(scratch, [{"nodetune.instinct.fleet_report": {"sources": [str(shared)], "dest": str(shared)}}])
    assert comparable(shared) == comparable(one_play)
    n3 = json.loads((shared / "nodes" / "n3.json").read_text())
    assert "inventory.gpu_count" in n3["summary"]["drift_ids"]
    assert [f["id"] for f in n3["findings"] if f.get("source") == "learned"] == ["inventory.gpu_count",
                                                                                 "inventory.xgmi_hive_size"]
