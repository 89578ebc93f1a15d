"""The Python API end to end on one small simulated node: apply, drift, verify, revert; and its errors.

One node tree per module (built in memory under /dev/shm where possible): every API call is a real
ansible-playbook run through ansible-runner, which costs seconds, so the flow is one test and each error case
takes at most one run. The inventory is given as a mapping (the lab's opt-ins as group variables), a host list
and a path in turn, so all three forms are exercised.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

import nodetune
from tests.support import fullsize
from tests.support.specs import small_mi250_spec as small_spec
from tests.support.trees import reverted_differences, scratch_dir, tree_digest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
LAB_TUNING = yaml.safe_load((REPO / "inventories" / "lab" / "group_vars" / "all" / "tuning.yml").read_text())
GOVERNOR = "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor"
NUMA_BALANCING = "proc/sys/kernel/numa_balancing"  # a sysctl: no kernel side effect to emulate when it drifts


@pytest.fixture(scope="module")
def node() -> Iterator[Path]:
    scratch = scratch_dir()
    try:
        root = scratch / "node1"
        simnode.build(small_spec(), str(root))
        yield root
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def inventory_for(root: Path, **host_vars: Any) -> dict[str, Any]:
    return {"all": {
        "hosts": {"node1": {"nodetune_root": str(root), **host_vars}},
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                 "nodetune_lab_backend": "simulated", **LAB_TUNING}}}


def test_apply_check_apply_drift_verify_revert(node: Path) -> None:
    inventory = inventory_for(node)
    pristine = tree_digest(node)
    governor_before = (node / GOVERNOR).read_text().strip()
    balancing_before = (node / NUMA_BALANCING).read_bytes()

    events: list[nodetune.TaskEvent] = []
    check = nodetune.apply(inventory, check=True, progress=events.append)
    assert tree_digest(node) == pristine, "check mode wrote to the node"
    planned = check.nodes["node1"]
    assert check.check and check.ok and planned.status == "changed"
    by_uid = {(s.id, s.target): s for s in planned.settings}
    assert by_uid[("cpu.governor", "cpu1")].before == governor_before != "performance"
    assert by_uid[("cpu.governor", "cpu1")].after == "performance"
    assert ("smt.siblings_offline", "cpu32") in by_uid  # the lab opt-in: cpu0's sibling goes offline
    assert planned.diff and "cpu.governor[cpu0-" in planned.diff["after"]  # grouped (nodetune_full_diff: per value)
    # the progress callback streamed the node's task events as they happened
    tune_events = [e for e in events if e.action == "nodetune.instinct.tune"]
    assert [e.status for e in tune_events] == ["started", "changed"] and {e.host for e in events} == {"node1"}

    applied = nodetune.apply(inventory)
    done = applied.nodes["node1"]
    assert done.status == "changed" and not applied.check
    assert {(s.id, s.target) for s in done.settings} == set(by_uid)
    assert (node / GOVERNOR).read_text().strip() == "performance"
    assert done.reboot_required == any(s.reboot_required for s in done.settings) == applied.reboot_required

    # drift: someone turns automatic NUMA balancing back on; verify names exactly that Setting
    assert (node / NUMA_BALANCING).read_text().strip() == "0" != balancing_before.decode().strip()
    (node / NUMA_BALANCING).write_bytes(balancing_before)
    audit = nodetune.verify(inventory)
    checked = audit.nodes["node1"]
    assert audit.ok and checked.status == "drift" and audit.drifted == [checked]
    setting_drift = [f for f in checked.drift if f.source == "setting"]
    assert [(f.uid, str(f.expected), str(f.actual)) for f in setting_drift] == [
        ("sysctl.kernel.numa_balancing[kernel.numa_balancing]", "0", balancing_before.decode().strip())]
    assert setting_drift[0].remedy and checked.summary
    assert "sysctl.kernel.numa_balancing" in checked.summary["drift_ids"]

    # revert: the journal's baseline comes back byte for byte (the drifted value included)
    reverted = nodetune.revert(inventory)
    assert reverted.nodes["node1"].restored and reverted.ok
    assert reverted_differences(pristine, tree_digest(node)) == []


def test_missing_inventory_and_unknown_host_are_refused(node: Path, tmp_path: Path) -> None:
    with pytest.raises(nodetune.InventoryError, match="does not exist"):
        nodetune.verify(tmp_path / "no-such-inventory.yml")
    with pytest.raises(nodetune.InventoryError, match="no such directory"):
        nodetune.local_inventory(tmp_path / "no-such-node")
    with pytest.raises(ValueError, match="forks"):
        nodetune.verify(["node1"], forks=0)
    # a host list; the limit names a host it does not have
    with pytest.raises(nodetune.HostNotFoundError, match="ghost") as caught:
        nodetune.discover(["node1"], limit="ghost", extra_vars={"nodetune_root": str(node)})
    assert caught.value.patterns == ["ghost"]


def test_bad_variable_fails_the_node_with_the_modules_message(node: Path, tmp_path: Path) -> None:
    before = tree_digest(node)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump(inventory_for(node, nodetune_ipoib_mtu=4096)))
    with pytest.raises(nodetune.NodeFailedError, match="nodetune_ipoib_mtu=4096") as caught:
        nodetune.apply(str(inventory))
    result = caught.value.result
    assert result is not None and [n.host for n in result.failed] == ["node1"] and not result.ok
    assert "4092" in (result.nodes["node1"].message or "")
    assert "could not read the result" not in (result.nodes["node1"].message or "")  # the refusal says it all
    assert tree_digest(node) == before


def test_plan_with_an_unreachable_node(node: Path) -> None:
    inventory = inventory_for(node)
    inventory["all"]["hosts"]["ghost"] = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1",
                                          "ansible_port": 1, "ansible_ssh_common_args": "-o ConnectTimeout=3"}
    with pytest.raises(nodetune.UnreachableError, match="ghost") as caught:
        nodetune.plan(inventory)
    result = caught.value.result
    assert result is not None and [n.host for n in result.unreachable] == ["ghost"]
    assert result.nodes["ghost"].message
    planned = result.nodes["node1"]
    assert planned.status == "ok" and planned.topology and planned.layout
    assert planned.topology["gpus"] and planned.layout["ranks"]
    # the layout is planned with the inventory's variables: the lab opts in to offlining SMT siblings
    assert planned.layout["smt_offline"]
    # plan never writes: the tune module ran in check mode
    assert not (node / "var/lib/nodetune/journal.json").exists()


# --------------------------------------------------------------------------------------------- full size
@pytest.fixture(scope="module")
def big_node() -> Iterator[Path]:
    """A synthetic node larger than any lab node: 1,152 CPUs, 16 GPUs, 16 HCAs, ~4,500 IRQs (untuned)."""
    scratch = scratch_dir()
    try:
        root = scratch / "big-01"
        simnode.build(fullsize.big_spec(), str(root))
        yield root
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _online_cpus(root: Path) -> set[str]:
    from ansible_collections.nodetune.instinct.plugins.module_utils.parse import parse_cpulist

    text = (root / "sys/devices/system/cpu/online").read_text().strip()
    return {f"cpu{n}" for n in parse_cpulist(text)}


def test_full_size_node_untuned_drifts_apply_counts_tuned_is_clean(big_node: Path, tmp_path: Path) -> None:
    """The audit and the apply of this node are each larger than ansible-runner's event limit: the verdicts come
    from the results' files, never from a truncated event (the API used to call this untuned node clean)."""
    assert len(_online_cpus(big_node)) == 1152 and fullsize.interrupts(big_node) >= 4000
    inventory = fullsize.big_inventory(big_node)
    reports = tmp_path / "reports"
    audit = nodetune.verify(inventory, report_dir=reports)
    node = audit.nodes["big-01"]
    assert node.status == "drift" and audit.drifted == [node] and audit.ok
    report = json.loads((reports / "nodes" / "big-01.json").read_text())
    assert len(node.findings) == len(report["findings"]) and len(node.drift) == report["summary"]["counts"]["drift"]
    assert len(node.drift) > 5000
    # every online CPU that stays online drifts on its governor (powersave, not performance): counted from the tree
    offline = {f.target for f in node.drift if f.id == "smt.siblings_offline"}
    governor = {f.target for f in node.drift if f.id == "cpu.governor"}
    assert len(offline) == 576 and governor == _online_cpus(big_node) - offline
    # sized for fleets: a JUnit testcase per check id, a Prometheus series count independent of CPUs and IRQs
    from xml.etree import ElementTree

    from ansible_collections.nodetune.instinct.plugins.module_utils.audit import report as report_mod

    ids = {f["id"] for f in report["findings"]}
    suite = ElementTree.fromstring((reports / "junit.xml").read_text()).find("testsuite")
    assert suite is not None and sorted(c.get("name") for c in suite.findall("testcase")) == sorted(ids)
    series = [line for line in report_mod.prometheus_text(report["findings"]).splitlines()
              if line and not line.startswith("#")]
    assert len(series) == 2 * len(ids) + 7 <= 200

    applied = nodetune.apply(inventory)
    done = applied.nodes["big-01"]
    journal = json.loads((big_node / "var/lib/nodetune/journal.json").read_text())
    written = journal["runs"][-1]["changed"]
    assert done.status == "changed" and len(done.settings) == len(written) > 5000
    assert {f"{s.id}[{s.target}]" for s in done.settings} == set(written)
    assert done.reboot_required and applied.reboot_required

    tuned = nodetune.verify(inventory)
    assert tuned.nodes["big-01"].status == "ok" and not tuned.drift, [f.uid for f in tuned.drift][:5]
    assert len(tuned.nodes["big-01"].findings) == len(node.findings)


def test_a_result_that_cannot_be_read_fails_the_node(tmp_path: Path) -> None:
    """A module result the callback did not record (or recorded unreadable) is a failed node, never ok."""
    from nodetune.api import _Collector

    def ok_event(host: str, action: str) -> dict[str, Any]:
        return {"event": "runner_on_ok", "event_data": {"host": host, "task": "Verify the nodes",
                                                        "task_action": action, "res": {}}}

    collector = _Collector("verify", None, str(tmp_path / "results"))
    collector.handle(ok_event("n1", "nodetune.instinct.verify"), False)
    collector.handle(ok_event("n2", "nodetune.instinct.verify"), False)
    (tmp_path / "results" / "n2").mkdir(parents=True)
    (tmp_path / "results" / "n2" / "000001.json").write_text('{"host": "n2", "action": "nodetune.instin')
    result = collector.result(0, check=False)
    assert [n.status for n in result.nodes.values()] == ["failed", "failed"] and not result.ok
    assert "no result file" in (result.nodes["n1"].message or "")
    assert "not readable JSON" in (result.nodes["n2"].message or "")


def test_a_host_name_with_dot_dot_slash_keeps_its_report_in_the_folder(node: Path, tmp_path: Path) -> None:
    """The per-node report is named after the host, encoded: ``../`` in a name never writes outside the folder."""
    reports = tmp_path / "out" / "reports"
    inventory = inventory_for(node)
    inventory["all"]["hosts"] = {"../../escaped": inventory["all"]["hosts"]["node1"]}
    audit = nodetune.verify(inventory, report_dir=reports, extra_vars={"nodetune_bios_check_enabled": False})
    assert audit.nodes["../../escaped"].status in ("ok", "drift")
    assert not (tmp_path / "escaped.json").exists() and not (tmp_path / "out" / "escaped.json").exists()
    assert [p.name for p in (reports / "nodes").iterdir()] == ["..%2F..%2Fescaped.json"]
    assert json.loads((reports / "nodes" / "..%2F..%2Fescaped.json").read_text())["node"] == "../../escaped"


def test_a_long_tmpdir_does_not_stop_the_run(node: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ansible-core 2.20+ puts its local RPC server's socket under TMPDIR (nodetune._tempdir): under a TMPDIR
    too long for a socket's path, every ansible-playbook died with "Local RPC server did not start"."""
    import tempfile

    from nodetune import _tempdir

    long_tmp = tmp_path / ("t" * 40) / ("m" * 40) / ("p" * 40)
    long_tmp.mkdir(parents=True)
    assert not _tempdir.fits(str(long_tmp))
    monkeypatch.setenv("TMPDIR", str(long_tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    result = nodetune.verify(inventory_for(node))
    assert result.nodes["node1"].status in ("ok", "drift"), result.nodes["node1"].message
    assert not list(long_tmp.iterdir()), "the run left files in TMPDIR"
