"""site.yml, apply.yml and revert.yml through ansible-playbook on a simulated node.

The node is the lab's MI250 spec made small (16 cores per socket, two GPUs, one HCA, two NVMe) and switched to
amd-pstate in active mode, so that a run takes seconds and the EPP rules are exercised. The inventory is generated
in a temporary folder with the lab's own opt-ins (inventories/lab/group_vars/all/tuning.yml), and each run is a
real ``ansible-playbook`` process from the repository root (its ansible.cfg: collections and roles paths).

What must hold: check mode writes nothing and shows the changes; ``--tags nvme`` touches only the nvme area; site.yml
builds, applies and verifies; a second site.yml changes nothing; revert puts the tree back byte for byte. And a
catalogue of bad variables, one host each in one run, is refused before anything is written, with the true fix.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from tests.support.playbooks import ok, playbook, recap, write_inventory
from tests.support.specs import small_mi250_spec as small_spec
from tests.support.trees import changed_paths, reverted_differences, tree_digest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def test_the_dry_run_of_a_fresh_clone_builds_the_lab_under_any_tag(tmp_path: Path) -> None:
    """`site.yml --check --diff --tags nvme` before any run: the simulated node is built (no real node changes) and
    the dry run plans against it; a tuned value stays untouched."""
    spec_file = tmp_path / "small.yml"
    spec_file.write_text(yaml.safe_dump(small_spec()))
    node = tmp_path / "nodes" / "node1"
    inventory = write_inventory(tmp_path, {"node1": {"nodetune_sim_spec": str(spec_file), "nodetune_root": str(node)}})
    dry = ok(playbook(inventory, "site.yml", "--check", "--diff", "--tags", "nvme"))
    assert (node / ".nodetune-simnode.json").is_file(), dry.stdout[-3000:]
    assert "nvme.module_options[nvme] /etc/modprobe.d/nodetune-nvme.conf" in dry.stdout, dry.stdout[-3000:]
    assert not (node / "etc/modprobe.d/nodetune-nvme.conf").exists()  # shown, not written


def test_the_area_tags_are_listed_and_their_task_is_left_out_of_a_run(tmp_path: Path) -> None:
    """Issue 25 item 10: the meta noop that carries the area tags printed an empty task header once per host in
    every run (ansible-core's linear strategy runs a noop for each host). Tagged never, a run without --tags leaves
    it out (--list-tasks lists what would run) while --list-tags still lists every area's tag."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.areas import declarations as areas

    hosts = {f"node{n}": {"nodetune_root": str(tmp_path / f"node{n}")} for n in (1, 2)}
    inventory = write_inventory(tmp_path, hosts)
    for book in ("playbooks/apply.yml", "playbooks/verify.yml"):
        listed = ok(playbook(inventory, book, "--list-tasks")).stdout
        assert "Tune the node in one call" in listed or "Verify the node against" in listed, listed
        assert "The tags that select areas" not in listed, listed
        tags = ok(playbook(inventory, book, "--list-tags")).stdout
        found = set(re.findall(r"TASK TAGS: \[([^\]]*)\]", tags)[0].replace(" ", "").split(","))
        assert found >= {*areas.AREAS, areas.BIOS_ROLE}, (book, found)


def diff_of(output: str, host: str) -> list[str]:
    """The diff Ansible printed for the host's task (from ``--- before`` to the line saying the host changed)."""
    lines = output.splitlines()
    end = lines.index(f"changed: [{host}]")
    start = max(i for i in range(end) if lines[i].startswith("--- before"))
    return lines[start:end]


PROM = "var/lib/node_exporter/textfile_collector/nodetune.prom"


def test_check_tags_site_idempotence_and_revert(tmp_path: Path) -> None:
    spec_file = tmp_path / "small.yml"
    spec_file.write_text(yaml.safe_dump(small_spec()))
    node = tmp_path / "nodes" / "node1"
    # with the Prometheus textfile: a rerun that finds the same reports no change (issue 25 item 8)
    inventory = write_inventory(tmp_path, {"node1": {"nodetune_sim_spec": str(spec_file), "nodetune_root": str(node),
                                                     "nodetune_verify_textfile_path": "/" + PROM}})

    ok(playbook(inventory, "playbooks/lab.yml"))
    pristine = tree_digest(node)

    # the per-area tags are real tags of the playbook
    listed = ok(playbook(inventory, "playbooks/apply.yml", "--list-tags"))
    tags = set(re.findall(r"TASK TAGS: \[([^\]]*)\]", listed.stdout)[0].replace(" ", "").split(","))
    assert tags >= {"smt", "cpu", "irq_affinity", "infiniband", "nvme", "sysctl", "rocm_env", "bios_check"}, tags

    # check mode: the changes are shown grouped, at most 200 lines per node (issue 25 item 3), nothing is written
    check = ok(playbook(inventory, "playbooks/apply.yml", "--check", "--diff"))
    assert recap(check, "node1")["changed"] == 1
    shown = diff_of(check.stdout, "node1")
    assert len(shown) <= 200
    for line in ("-smt.siblings_offline[cpu32-63] /sys/devices/system/cpu/cpu{32-63}/online = 1",
                 "-ib.mtu[ib0] /sys/class/net/ib0/mtu = 2044", "+ib.mtu[ib0] /sys/class/net/ib0/mtu = 4092",
                 "-irq.irqbalance[irqbalance.service] irqbalance.service = active=yes,enabled=yes"):
        assert line in shown, line
    # nodetune's own files as path, settings count and digest: not the checker's program nor its JSON
    program = next(line for line in shown if line.startswith("+check.program[nodetune-check]"))
    assert " = <file: program, " in program and ", sha256 " in program
    assert not [line for line in shown if "def main" in line or '"settings": [' in line]
    # every value with nodetune_full_diff
    whole = ok(playbook(inventory, "playbooks/apply.yml", "--check", "--diff", "-e", "nodetune_full_diff=true"))
    for line in ("sys/devices/system/cpu/cpu32/online = 1", "ib.mtu[ib0] /sys/class/net/ib0/mtu = 2044",
                 "ib.mtu[ib0] /sys/class/net/ib0/mtu = 4092", "cpu.governor[cpu0]"):
        assert line in whole.stdout, line
    assert len(diff_of(whole.stdout, "node1")) > 200
    assert tree_digest(node) == pristine

    # --tags nvme: only the nvme area (its module options, udev rule) and nodetune's journal
    ok(playbook(inventory, "playbooks/apply.yml", "--tags", "nvme"))
    touched = changed_paths(pristine, tree_digest(node))
    assert "etc/modprobe.d/nodetune-nvme.conf" in touched
    # (and the node-local checker with the nvme area's expectations: etc/nodetune/check.d, usr/local/sbin)
    allowed = re.compile(r"^(sys/block/nvme|etc/udev/rules\.d|etc/modprobe\.d|var/lib/nodetune|var/lib$|var$|etc$"
                         r"|etc/nodetune|usr/local)")
    assert [p for p in touched if not allowed.match(p)] == []

    # site.yml: the lab tree exists (no rebuild: the build play matches no host), apply the rest, verify in the
    # same module call (one module call for the node in the whole run)
    site = ok(playbook(inventory, "site.yml"))
    assert "skipping: no hosts matched" in site.stdout.split("PLAY [Build simulated nodes]")[1][:300]
    assert recap(site, "node1")["changed"] >= 1
    assert re.findall(r"^TASK \[([^\]]+)\]", site.stdout, re.M) == [
        "Group the lab nodes whose tree is missing (or that are to be rebuilt, rebooted or removed)",
        # (the meta task that carries the area tags is tagged never: no empty header per host, issue 25 item 10)
        "tune : Tune the node in one call (discover, plan, apply; and verify with nodetune_tune_verify)",
        "tune : Summarise the run across the nodes", "verify : Write the fleet JUnit XML and summary on the controller",
        "verify : Fleet summary"]
    node_report = json.loads((tmp_path / "reports" / "nodes" / "node1.json").read_text())
    assert {f["id"] for f in node_report["findings"]} >= {"cpu.governor", "smt.siblings_offline", "ib.mtu"}
    assert not [f for f in node_report["findings"] if f["source"] == "setting" and f["status"] == "drift"]
    tuned = tree_digest(node)
    cpu = node / "sys/devices/system/cpu"
    assert (cpu / "cpu32/online").read_text().strip() == "0"  # secondary thread of core 0 (siblings N, N+32)
    assert (cpu / "cpu1/cpufreq/scaling_governor").read_text().strip() == "performance"
    assert (cpu / "cpu1/cpuidle/state2/disable").read_text().strip() == "1"
    assert (node / "sys/class/net/ib0/mtu").read_text().strip() == "4092"
    assert not os.path.lexists(node / "run/systemd/units/invocation:irqbalance.service")
    assert "NCCL_ALGO=Ring" in (node / "etc/rccl.conf").read_text()
    summary = json.loads((tmp_path / "reports" / "summary.json").read_text())
    assert "node1" in json.dumps(summary) and "drift" in json.dumps(summary)

    # a second site.yml changes nothing: the textfile is rewritten with its new timestamp only, not a change
    metrics = [line for line in (node / PROM).read_text().splitlines() if "_timestamp_seconds " not in line]
    before = json.loads((tmp_path / "reports" / "nodes" / "node1.json").read_text())
    again = ok(playbook(inventory, "site.yml", "-v"))
    assert recap(again, "node1")["changed"] == 0
    # the same findings: not sent again, the new report written around the ones the controller held (issue 28)
    assert '"findings_known": true' in again.stdout
    after = json.loads((tmp_path / "reports" / "nodes" / "node1.json").read_text())
    assert after["findings"] == before["findings"] and after["checks"] == before["checks"]
    assert after["findings_sha256"] == before["findings_sha256"] and after["run"] != before["run"]
    assert {p: d for p, d in tree_digest(node).items() if p != PROM} == {p: d for p, d in tuned.items() if p != PROM}
    assert [line for line in (node / PROM).read_text().splitlines() if "_timestamp_seconds " not in line] == metrics

    # drift injected: verify.yml alone finds it, and with nodetune_verify_fail_on_drift the host fails after its
    # report is written, counted as drifted (not as failed) in the fleet summary
    (node / "proc/sys/kernel/numa_balancing").write_text("1\n")
    # site.yml --tags verify applies nothing and audits every area (as verify.yml --tags verify would); the drift
    # changes the textfile's metrics: that is a change of the node (issue 25 item 8: it was reported changed=0)
    audit_only = ok(playbook(inventory, "site.yml", "--tags", "verify"))
    assert recap(audit_only, "node1")["changed"] == 1
    assert 'nodetune_drift{check="sysctl.kernel.numa_balancing"} 1' in (node / PROM).read_text()
    assert (node / "proc/sys/kernel/numa_balancing").read_text().strip() == "1"
    summary = json.loads((tmp_path / "reports" / "summary.json").read_text())
    assert {i for i in summary["drifted"]["node1"] if not i.startswith("bios.")} == {"sysctl.kernel.numa_balancing"}
    audited = {f["id"] for f in json.loads((tmp_path / "reports" / "nodes" / "node1.json").read_text())["findings"]}
    assert {"cpu.governor", "nvme.scheduler", "ib.mtu", "smt.siblings_offline", "rocm.env"} <= audited
    audit = playbook(inventory, "playbooks/verify.yml", "-e", "nodetune_verify_fail_on_drift=true")
    assert audit.returncode != 0 and recap(audit, "node1")["failed"] == 1
    assert "sysctl.kernel.numa_balancing" in failures(audit.stdout)["node1"]
    # a bounded line (issue 25 item 3: 636,564 characters), pointing at the report that has every finding
    fatal = next(line for line in audit.stdout.splitlines() if line.startswith("fatal: [node1]"))
    assert len(fatal) < 4096, len(fatal)
    assert f"every finding, with its remedy, is in {tmp_path / 'reports' / 'nodes' / 'node1.json'}" in fatal
    summary = json.loads((tmp_path / "reports" / "summary.json").read_text())
    assert summary["counts"] == {"clean": 0, "drifted": 1, "pending": 0, "failed": 0}
    assert "sysctl.kernel.numa_balancing" in summary["drifted"]["node1"]
    drifted = [f for f in json.loads((tmp_path / "reports" / "nodes" / "node1.json").read_text())["findings"]
               if f["status"] == "drift" and f["source"] == "setting"]
    assert [f["id"] for f in drifted] == ["sysctl.kernel.numa_balancing"]
    # a waivers file, read on the controller, turns that drift into waived; and verify.yml imported twice in one
    # run verifies twice (the first run's registered result is not taken for a verify variable the second time)
    waivers = tmp_path / "waivers.yml"
    waivers.write_text(yaml.safe_dump({"waivers": [{"id": "sysctl.kernel.numa_balancing", "reason": "experiment",
                                                    "expires": "2999-12-31"}]}))
    twice = tmp_path / "twice.yml"
    twice.write_text(yaml.safe_dump([{"ansible.builtin.import_playbook": str(REPO / "playbooks" / "verify.yml")}] * 2))
    waived = ok(playbook(inventory, str(twice), "-e", f"nodetune_verify_waivers_file={waivers}"))
    assert waived.stdout.count("TASK [verify : Verify the node against its desired state") == 2
    statuses = {f["id"]: f["status"] for f in
                json.loads((tmp_path / "reports" / "nodes" / "node1.json").read_text())["findings"]}
    assert statuses["sysctl.kernel.numa_balancing"] == "waived"
    missing = playbook(inventory, "playbooks/verify.yml", "-e", f"nodetune_verify_waivers_file={tmp_path}/none.yml")
    assert missing.returncode != 0
    assert f"nodetune_verify_waivers_file='{tmp_path}/none.yml' cannot be read on the controller" in \
        failures(missing.stdout)["node1"]
    ok(playbook(inventory, "playbooks/apply.yml", "--tags", "sysctl"))

    # revert --check --diff: each value it would restore, before and after, nothing written (issue 25 item 8)
    tuned = tree_digest(node)
    dry = ok(playbook(inventory, "playbooks/revert.yml", "--check", "--diff"))
    shown = diff_of(dry.stdout, "node1")
    assert len(shown) <= 200 and "+++ after: node (journal baseline)" in shown
    assert "-/proc/sys/kernel/numa_balancing = 0" in shown and "+/proc/sys/kernel/numa_balancing = 1" in shown
    assert "+/sys/devices/system/cpu/cpu{32-63}/online (32 values) = 1" in shown
    assert tree_digest(node) == tuned

    # revert: the tree as it was before nodetune, byte for byte (verify's textfile is a report, not journaled)
    ok(playbook(inventory, "playbooks/revert.yml"))
    assert [p for p in reverted_differences(pristine, tree_digest(node))
            if p != PROM and not PROM.startswith(p + "/")] == []


# host -> (its variables, what the refusal must say)
CATALOGUE: dict[str, tuple[dict[str, Any], list[str]]] = {
    "ipoib_4096": ({"nodetune_ipoib_mtu": 4096}, ["nodetune_ipoib_mtu=4096", "datagram", "4092", "'max'"]),
    "nr_requests_none": ({"nodetune_nvme_nr_requests": 4096},
                         ["nodetune_nvme_nr_requests=4096", "scheduler 'none'", "tag depth", "mq-deadline"]),
    "scheduler_noop": ({"nodetune_nvme_scheduler": "noop"}, ["'noop' is a legacy", "'none'"]),
    "governor_schedutil": ({"nodetune_cpu_governor": "schedutil"},
                           ["nodetune_cpu_governor='schedutil'", "amd-pstate-epp", "performance, powersave"]),
    "epp_under_performance": ({"nodetune_cpu_epp": "balance_power"}, ["active mode", "EBUSY", "powersave"]),
    "smt_not_allowed": ({"nodetune_smt_offline_allowed": False}, ["nodetune_smt_offline_allowed: true"]),
    "smt_bad_choice": ({"nodetune_smt_policy": "off"},
                       ["nodetune_smt_policy must be one of: keep, offline_siblings, control_off, got: off"]),
    "nr_queues": ({"nodetune_nvme_nr_queues": 32}, ["queue/nr_queues file", "nodetune_nvme_module_options"]),
    # a variable nothing declares is refused with the nearest real name (issue 16: nodetune_rot left the root at /)
    "misspelt": ({"nodetune_vm_dirty_ration": 20},
                 ["nodetune_vm_dirty_ration is not a nodetune variable; did you mean nodetune_vm_dirty_ratio?"]),
    "root_typo": ({"nodetune_rot": "/srv/lab/node1"}, ["nodetune_rot is not a nodetune variable; did you mean "
                                                        "nodetune_root?"]),
    "policy_typo": ({"nodetune_layout_polcy": {"housekeeping": 1}}, ["did you mean nodetune_layout_policy?"]),
    "irqbalance_typo": ({"nodetune_irqbalanse_mode": "ban"}, ["did you mean nodetune_irqbalance_mode?"]),
    "sysctl_typo": ({"nodetune_sysctls_extra": {"vm.swappiness": 1}}, ["did you mean nodetune_sysctl_extra?"]),
    "governor_typo": ({"nodetune_governor": "performance"}, ["did you mean nodetune_cpu_governor?"]),
    # coerced as Ansible's argument specs coerce, and what cannot be coerced is refused naming what is valid
    "not_a_bool": ({"nodetune_smt_offline_allowed": "maybe"}, ["nodetune_smt_offline_allowed", "maybe", "bool"]),
    "not_an_int": ({"nodetune_vm_dirty_ratio": "twenty"}, ["nodetune_vm_dirty_ratio='twenty' is not valid: "
                                                           "expected a int"]),
    "policy_cpulist": ({"nodetune_layout_policy": {"housekeeping": "0-3,x"}}, ["housekeeping", "'0-3,x'"]),
    "iface_shell": ({"nodetune_rocm_env": {"NCCL_SOCKET_IFNAME": "ib0;reboot"}},
                    ["NCCL_SOCKET_IFNAME", "'ib0;reboot' is not valid", "interface or HCA names"]),
    "path_escape": ({"nodetune_rocm_profile_file": "/etc/profile.d/../../../root/.bashrc"},
                    ["nodetune_rocm_profile_file", "no '..'"]),
    "rccl_name": ({"nodetune_rocm_env": {"RCCL_ALGO": "Ring"}}, ["RCCL_ALGO is read by nothing", "use NCCL_ALGO"]),
    # the tune role's own variables (the playbooks skip Ansible's validation task: the action plugin validates)
    "state_bogus": ({"nodetune_state": "applied"}, ["nodetune_state must be one of: present, reverted, got: applied",
                                                    "(role tune)"]),
    # site.yml verifies in the same call: the verify role's variables are refused before any write too
    "health_threshold": ({"nodetune_health_gpu_temp_max_c": "hot"}, ["nodetune_health_gpu_temp_max_c", "hot"]),
    "verify_misspelt": ({"nodetune_verify_fail_on_drfit": True},
                        ["nodetune_verify_fail_on_drfit is not a nodetune variable; did you mean "
                         "nodetune_verify_fail_on_drift?"]),
    "waiver_no_reason": ({"nodetune_verify_waivers": [{"id": "bios.iommu", "expires": "2030-01-01"}]},
                         ["waiver", "reason"]),
}


def failures(output: str) -> dict[str, str]:
    """host -> the message of its failed task (the default callback prints each failure as one JSON line)."""
    out: dict[str, str] = {}
    for host, text in re.findall(r"^fatal: \[([^\]]+)\]: FAILED! => (\{.*\})$", output, re.M):
        result = json.loads(text)
        out[host] = result.get("msg", "") + " " + " ".join(result.get("errors") or [])
    return out


def test_bad_input_is_refused_before_any_write(tmp_path: Path) -> None:
    node = tmp_path / "node"
    simnode.build(small_spec(), str(node))
    before = tree_digest(node)
    hosts = {name: dict(variables, nodetune_root=str(node)) for name, (variables, _) in CATALOGUE.items()}
    inventory = write_inventory(tmp_path, hosts)
    result = playbook(inventory, "site.yml")
    assert result.returncode != 0
    messages = failures(result.stdout)
    for host, (_, expected) in CATALOGUE.items():
        assert host in messages, f"{host} was not refused"
        for part in expected:
            assert part in messages[host], f"{host}: {part!r} not in {messages[host]!r}"
    assert tree_digest(node) == before


def test_an_area_role_applies_its_area_alone_and_leaves_nothing_for_the_next_play(tmp_path: Path) -> None:
    """`roles: [nvme]` (`nodetune.instinct.nvme` once installed: test_galaxy.py) is one module call that applies
    NVMe alone, with check and diff mode; a later play's tune role still applies every area (no fact carried from
    one play to the next)."""
    node = tmp_path / "node"
    simnode.build(small_spec(), str(node))
    pristine = tree_digest(node)
    inventory = write_inventory(tmp_path, {"node1": {"nodetune_root": str(node),
                                                     "nodetune_nvme_scheduler": "mq-deadline"}})
    book = tmp_path / "nvme.yml"
    book.write_text(yaml.safe_dump([{"name": "NVMe alone", "hosts": "all", "gather_facts": False,
                                     "roles": ["nvme"]}]))
    check = ok(playbook(inventory, str(book), "--check", "--diff"))
    # Ansible's own argument-spec validation (on the controller, with the generated spec), then one module call
    assert re.findall(r"^TASK \[([^\]]+)\]", check.stdout, re.M) == [
        "nvme : Validating arguments against arg spec 'main' - NVMe I/O scheduler, nr_requests within its limit, "
        "nvme module options", "nvme : Apply the nvme area"]
    assert "+nvme.scheduler[nvme0-1n1] /sys/block/nvme{0-1}n1/queue/scheduler = mq-deadline" in check.stdout
    assert recap(check, "node1")["changed"] == 1
    assert tree_digest(node) == pristine
    ok(playbook(inventory, str(book)))
    touched = changed_paths(pristine, tree_digest(node))
    assert any(p.endswith("/nvme0n1/queue/scheduler") for p in touched), touched
    allowed = re.compile(r"^(sys/devices/\S+/nvme/nvme\d+/nvme\d+n\d+/queue/|etc/udev/rules\.d|etc/modprobe\.d"
                         r"|var/lib/nodetune|var/lib$|var$|etc$|etc/nodetune|usr/local)")
    assert [p for p in touched if not allowed.match(p)] == []
    assert "[mq-deadline]" in (node / "sys/block/nvme0n1/queue/scheduler").read_text()

    # include_role of an area, then a second play with the tune role: the second play tunes every area
    both = tmp_path / "both.yml"
    both.write_text(yaml.safe_dump([
        {"name": "sysctl alone", "hosts": "all", "gather_facts": False,
         "tasks": [{"name": "Apply sysctl", "ansible.builtin.include_role": {"name": "sysctl"}}]},
        {"name": "everything", "hosts": "all", "gather_facts": False, "roles": ["tune"]}]))
    ok(playbook(inventory, str(both)))
    cpu = node / "sys/devices/system/cpu"
    assert (cpu / "cpu1/cpufreq/scaling_governor").read_text().strip() == "performance"
    assert (node / "proc/sys/kernel/numa_balancing").read_text().strip() == "0"
