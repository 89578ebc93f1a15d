"""The ``nodetune`` CLI end to end on one small simulated node (``--root``), its exit codes and its bad input.

Exit codes (docs/cli.md): 0 clean, 1 failure, 2 drift found (verify; apply --check when something would change).
The commands run in-process through ``nodetune.cli.main`` (each still a real ansible-playbook run); one bad-input
case goes through the installed console script to prove no traceback reaches the user.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodetune.lab.plugins.module_utils import simnode

from nodetune.api import TaskEvent
from nodetune.cli import main
from tests.support import fullsize
from tests.support.specs import small_mi250_spec as small_spec
from tests.support.trees import scratch_dir, tree_digest

NUMA_BALANCING = "proc/sys/kernel/numa_balancing"
# BIOS-level and health checks report the simulated hardware itself (IOMMU, SMT in the BIOS): left out here so
# that a freshly tuned node verifies clean and exit code 0 can be seen.
QUIET_CHECKS = ["-e", "nodetune_bios_check_enabled=false", "-e", "nodetune_health_enabled=false"]
LAB = ["-e", "nodetune_lab_backend=simulated"]  # a simulated node: the lab says so, the node does not


@pytest.fixture(scope="module")
def node() -> Iterator[Path]:
    scratch = scratch_dir()
    try:
        root = scratch / "cli-node"
        simnode.build(small_spec(), str(root))
        yield root
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_json(capsys: pytest.CaptureFixture[str], *words: str) -> tuple[int, dict]:
    code = main(list(words))
    out = capsys.readouterr().out
    return code, json.loads(out)


@pytest.mark.slow
def test_apply_verify_drift_revert_exit_codes(node: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pristine = tree_digest(node)

    code, planned = run_json(capsys, "apply", "--root", str(node), "--check", "--json", *LAB)
    assert code == 2, "apply --check must exit 2 when something would change"
    host = next(iter(planned["nodes"]))
    assert host == "cli-node" and planned["check"] is True
    assert any(s["id"] == "cpu.governor" for s in planned["nodes"][host]["settings"])
    assert tree_digest(node) == pristine

    assert main(["apply", "--root", str(node), *LAB]) == 0
    tables = capsys.readouterr().out
    assert "cpu.governor" in tables and "cpu0-63" in tables  # grouped rows, compressed targets

    code, clean = run_json(capsys, "verify", "--root", str(node), "--json", *QUIET_CHECKS, *LAB)
    assert code == 0 and clean["nodes"][host]["status"] == "ok", clean["nodes"][host]["notes"]

    balancing = (node / NUMA_BALANCING).read_text()
    (node / NUMA_BALANCING).write_text("1\n")
    code, drifted = run_json(capsys, "verify", "--root", str(node), "--json", *QUIET_CHECKS, *LAB)
    assert code == 2
    drift = [f for f in drifted["nodes"][host]["findings"] if f["status"] == "drift"]
    assert [(f["id"], f["actual"]) for f in drift] == [("sysctl.kernel.numa_balancing", "1")]
    (node / NUMA_BALANCING).write_text(balancing)

    assert main(["revert", "--root", str(node), "--check", *LAB]) == 2, "revert --check exits 2 as apply --check does"
    assert main(["revert", "--root", str(node), *LAB]) == 0
    assert tree_digest(node) == pristine
    assert main(["revert", "--root", str(node), "--check", *LAB]) == 0  # nothing left to restore


@pytest.mark.slow
def test_fleet_discover_picture_and_unknown_host(node: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"n1": {
        "nodetune_root": str(node), "ansible_connection": "local", "nodetune_lab_backend": "simulated",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}}))
    code, found = run_json(capsys, "discover", "-i", str(inventory), "--json")
    assert code == 0 and found["nodes"]["n1"]["topology"]["gpus"]

    page = tmp_path / "fleet.html"
    assert main(["picture", "-i", str(inventory), "-o", str(page), "--no-drift"]) == 0
    html = page.read_text()
    for gpu in found["nodes"]["n1"]["topology"]["gpus"]:
        assert f'data-id="{gpu["bdf"]}"' in html
    assert 'id="node-n1"' in html and "Fleet drift" not in html

    assert main(["verify", "-i", str(inventory), "--limit", "ghost"]) == 1
    err = capsys.readouterr().err
    assert "ghost" in err and "matches no host" in err and "Traceback" not in err


def test_bad_input_is_one_line_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = tmp_path / "binary.yml"
    binary.write_bytes(b"\xff\xfe\x00\x81 nodetune_root: /\n")
    cases = [
        (["apply", "--root", str(tmp_path / "missing")], "no such directory"),
        (["verify", "-i", str(tmp_path / "missing.yml")], "does not exist"),
        (["revert"], "one of the arguments -i/--inventory --root is required"),
        (["apply", "--root", str(tmp_path), "-e", "not a var=1"], "is not a variable name"),
        (["picture", "--root", str(tmp_path / "missing"), "-o", str(tmp_path / "x.html")], "no such directory"),
        (["verify", "--root", str(tmp_path), "-f", "0"], "expected a whole number >= 1"),
        (["report", str(tmp_path), "--top", "-1"], "expected a whole number >= 0, got -1"),
        (["report", str(tmp_path), "--top", "ten"], "expected a whole number >= 0, got 'ten'"),
        (["apply", "--root", str(tmp_path), "-e", f"@{binary}"], "not a UTF-8 text file"),
        (["bind"], "nothing to run"),  # a usage error: 1 for every verb (2 means drift)
        # an option nodetune does not know is named, before the missing target
        (["verify", "--bogus"], "unrecognized option '--bogus'"),
        (["apply", "--root", str(tmp_path), "--chek"], "unrecognized option '--chek'"),
    ]
    for words, message in cases:
        assert main(words) == 1, words
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (words, err)


def test_console_script_prints_no_traceback(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "nodetune"
    if not script.exists():
        pytest.skip(f"the nodetune console script is not installed next to {sys.executable} (pip install -e .)")
    result = subprocess.run([str(script), "apply", "--root", str(tmp_path / "nope")], capture_output=True, text=True,
                            timeout=60, check=False, env=dict(os.environ, NO_COLOR="1"))
    assert result.returncode == 1
    assert result.stderr.strip() == (f"nodetune apply: error: --root '{tmp_path / 'nope'}': no such directory "
                                     "(give '/' or a node tree)")


BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""
API_BOMB = """
import sys
from nodetune import api
lol = ["lol"] * 10
for _ in range(9):
    lol = [lol] * 10  # ten billion strings once written out
try:
    api.verify(api.local_inventory(sys.argv[1]), extra_vars={"nodetune_rocm_env": {"X": lol}})
except ValueError as exc:
    sys.exit(str(exc))
"""


def test_a_yaml_bomb_is_refused_at_once(tmp_path: Path) -> None:
    """Issue 23 item 10: a billion-laughs ``-e @FILE`` took 3 GB and 83 s before Ansible's own error; the CLI and
    the API (extra_vars of shared objects) refuse one at once, in little memory (a 512 MiB address space)."""
    import resource

    bomb = tmp_path / "bomb.yml"
    bomb.write_text(BILLION_LAUGHS)
    big = tmp_path / "big.yml"
    big.write_text("nodetune_root: '" + "x" * (2 << 20) + "'\n")

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))

    script = Path(sys.executable).parent / "nodetune"
    runs = [([str(script), "apply", "--root", str(tmp_path), "-e", f"@{bomb}"],
             f"-e @{bomb}: its YAML aliases (*name) expand it to more than the 4 MiB"),
            ([str(script), "apply", "--root", str(tmp_path), "-e", f"@{big}"],
             f"-e @{big}: the file is larger than the 1 MiB nodetune reads from a variables file "
             f"({big.stat().st_size} bytes)"),
            ([sys.executable, "-c", API_BOMB, str(tmp_path)],
             "extra_vars cannot be written as YAML data: the data would take more than the 4 MiB")]
    for words, message in runs:
        if not Path(words[0]).exists():
            pytest.skip(f"the nodetune console script is not installed next to {sys.executable} (pip install -e .)")
        result = subprocess.run(words, capture_output=True, text=True, timeout=30, check=False, preexec_fn=limited)
        assert result.returncode == 1 and message in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_progress_rows_per_node() -> None:
    from rich.console import Console
    from rich.progress import Progress, TextColumn

    from nodetune.commands._shared import _NodeBars

    out = io.StringIO()
    progress = Progress(TextColumn("{task.description}"), TextColumn("{task.completed}/{task.total}"),
                        TextColumn("{task.fields[state]}"),
                        console=Console(file=out, force_terminal=True, width=160, color_system=None))
    bars = _NodeBars(progress)
    with progress:
        for host in ("n1", "n2"):
            bars(TaskEvent(host, "Tune the node", "started", "nodetune.instinct.tune"))
        bars(TaskEvent("n1", "Tune the node", "changed", "nodetune.instinct.tune"))
        bars(TaskEvent("n2", "Tune the node", "failed", "nodetune.instinct.tune", message="nodetune refused [x]"))
    text = out.getvalue()
    assert "n1 1/1 changed Tune the node" in text
    assert "n2 1/1 failed: nodetune refused [x]" in text


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import nodetune

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"nodetune {nodetune.__version__}"


# --------------------------------------------------------------------------------------------- the full lab
@pytest.fixture(scope="module")
def full_lab() -> Iterator[Path]:
    scratch = fullsize.scratch_dir("nodetune-cli-lab-")
    try:
        yield fullsize.build_full_lab(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.slow
def test_full_lab_untuned_drifts_applied_is_clean(full_lab: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The documented lab, both full-size nodes with its opt-ins: an untuned lab is drift (exit 2) with the counts
    of the run's own reports; apply reports every value written and the reboot; the tuned lab is clean (exit 0;
    only the lab's command line is waived, which nodetune does not change). Each node's audit and the MI300X
    apply are larger than ansible-runner's event limit: the CLI used to call this lab clean."""
    reports = tmp_path / "reports"
    code, audit = run_json(capsys, "verify", "-i", str(full_lab), "--json", "--report-dir", str(reports))
    assert code == 2
    summary = json.loads((reports / "summary.json").read_text())
    assert summary["counts"]["drifted"] == 2 and sorted(summary["drifted"]) == list(fullsize.LAB_HOSTS)
    for host in fullsize.LAB_HOSTS:
        node = audit["nodes"][host]
        report = json.loads((reports / "nodes" / f"{host}.json").read_text())
        drift = [f for f in node["findings"] if f["status"] == "drift"]
        assert node["status"] == "drift" and len(drift) == report["summary"]["counts"]["drift"] > 500
        assert {f["id"] for f in drift} == set(summary["drifted"][host])

    # the tables (piped): a row per check id and status, every drifted id in them (issue 25 item 4: 295 and 486
    # rows of one value each, the terminal's first 25 all irq.nic_local, bios.iommu and ib.mtu never shown)
    assert main(["verify", "-i", str(full_lab)]) == 2
    lines = capsys.readouterr().out.splitlines()
    for host in fullsize.LAB_HOSTS:
        rows = [line.split("\t")[1:] for line in lines if line.startswith(host + "\t")][:-1]  # then its summary
        drifted = {f["id"] for f in audit["nodes"][host]["findings"] if f["status"] == "drift"}
        assert {row[0] for row in rows if row[1] == "drift"} == drifted and "bios.iommu" in drifted
        assert len(rows) <= 30, rows

    assert main(["apply", "-i", str(full_lab), "--check", "--diff"]) == 2
    out = capsys.readouterr().out
    planned_ids = {line.split("\t")[1] for line in out.split("# changes")[1].splitlines()[2:] if "\t" in line}
    for host in fullsize.LAB_HOSTS:  # the grouped diff: <= 200 lines per node, every changed id in it
        diff = out.split(f"--- {host} (current)")[1].split("--- ")[0].splitlines()
        assert 10 < len(diff) <= 200
    assert all(f"@@ {setting_id} (" in out for setting_id in planned_ids)
    assert any(i.startswith("sysctl.") for i in planned_ids)

    code, applied = run_json(capsys, "apply", "-i", str(full_lab), "--json")
    assert code == 0
    for host in fullsize.LAB_HOSTS:
        node = applied["nodes"][host]
        journal = json.loads((full_lab.parents[1] / "lab" / host / "var/lib/nodetune/journal.json").read_text())
        assert node["status"] == "changed" and len(node["settings"]) == len(journal["runs"][-1]["changed"]) > 500
        assert node["reboot_required"] is True
    assert applied["reboot_required"] is True

    code, tuned = run_json(capsys, "verify", "-i", str(full_lab), "--json",
                           "--waivers", str(full_lab / "waivers.yml"))
    assert code == 0, {h: [f["id"] for f in n["findings"] if f["status"] == "drift"] for h, n in tuned["nodes"].items()}
    assert all(n["status"] == "ok" for n in tuned["nodes"].values())


def test_piped_output_is_plain_lines_never_wrapped_nor_truncated(capsys: pytest.CaptureFixture[str]) -> None:
    """stdout not a terminal (pytest captures it): one line per row, tab-separated, long ids and messages whole."""
    from nodetune.api import Finding, NodeResult, RunResult
    from nodetune.render import print_verify

    long_id = "sysctl.net.ipv4.neigh.default.gc_thresh3_" + "x" * 80
    host = "a-very-long-host-name-" + "y" * 60 + ".example.com"
    message = "could not read the result: " + "z" * 300
    findings = [Finding(id=long_id, target="net.ipv4.neigh.default.gc_thresh3", status="drift", expected="8192",
                        actual="1024", remedy="r" * 200)]
    result = RunResult("verify", {host: NodeResult(host=host, status="drift", findings=findings),
                                  "bad": NodeResult(host="bad", status="failed", message=message)}, rc=0)
    print_verify(result)
    lines = capsys.readouterr().out.splitlines()
    assert f"{host}\tdrift\t1\t0\t1\t0\t0\t" in lines  # node, status, checks drifted, ok, drift, waived, n/a
    assert f"bad\tfailed\t0\t0\t0\t0\t0\t{message}" in lines
    assert f"{host}\t{long_id}\tdrift\t1\tnet.ipv4.neigh.default.gc_thresh3\t8192\t1024\t{'r' * 200}" in lines
    assert not any("…" in line or "│" in line for line in lines)


def finding(check: str, target: str, expected: Any, actual: Any, status: str, severity: str = "info",
            remedy: str = "", waiver: dict[str, str] | None = None) -> Any:
    """A finding in the order the collection's Finding takes (id, target, expected, actual, status)."""
    from nodetune.api import Finding

    return Finding(id=check, target=target, status=status, expected=expected, actual=actual, severity=severity,
                   remedy=remedy, waiver=waiver)


def full_size_findings(cpus: int = 384, irqs: int = 450) -> list[Any]:
    """An untuned full-size node's audit as verify reports it: hundreds of findings per check id, an affinity per
    IRQ (setting and effective), and the few checks that matter among them (bios.iommu, ib.mtu, a sysctl)."""
    from ansible_collections.nodetune.instinct.plugins.module_utils.audit.verify import PENDING, REMEDY

    half = cpus // 2
    findings = [finding("smt.siblings_offline", f"cpu{n}", "0", "1", "drift", "high", REMEDY % "smt")
                for n in range(half, cpus)]
    findings += [finding("cpu.governor", f"cpu{n}", "performance", "powersave", "drift", "medium", REMEDY % "cpu")
                 for n in range(half)]
    for n in range(40, 40 + irqs):  # one CPU per vector: as many values as IRQs
        findings += [finding("irq.nic_local", f"irq {n}", str(n % 96), str((n + 7) % 96), "drift", "high",
                             REMEDY % "irq_affinity"),
                     finding("irq.nic_local", f"irq {n} effective", str(n % 96), str((n + 7) % 96), "drift",
                             "high", REMEDY % "irq_affinity")]
    findings += [finding("irq.nic_local", f"irq {n} effective", "5", "9" + PENDING, "ok", "high")
                 for n in range(600, 604)]
    findings += [finding("irq.nic_local", f"irq {n}", "3", "3", "ok", "high") for n in range(700, 824)]
    findings += [finding("ib.mtu", f"ib{n}", "4092", "2044", "drift", "medium", REMEDY % "infiniband")
                 for n in range(8)]
    findings.append(finding("sysctl.kernel.numa_balancing", "kernel.numa_balancing", "0", "1", "drift", "low",
                            REMEDY % "sysctl"))
    findings += [finding("bios.iommu", "iommu", "on", "on", "ok", "medium"),
                 finding("bios.iommu", "pci=realloc", "pci=realloc=off", "absent", "drift", "medium",
                         "add pci=realloc=off to the kernel command line"),
                 finding("bios.iommu", "amd_iommu", "no invalid amd_iommu= option", "amd_iommu=on", "drift",
                         "medium", "remove amd_iommu=on")]
    findings += [finding("bios.nps", "nps", "NPS1", "NPS4", "waived", "medium",
                         waiver={"id": "bios.nps", "reason": "lab board", "expires": "2099-12-31"})]
    findings += [finding(f"health.{name}", f"0000:{n:02x}:00.0", "ok", "ok", "ok") for name in ("gpu_temp", "gpu_ras")
                 for n in range(8)]
    findings.append(finding("health.gpu_perf_level", "-", "-", "-", "not_applicable", "info",
                            "nodetune_health_gpu_perf_level is not set"))
    return findings


def drifted_ids(findings: list[Any]) -> set[str]:
    return {f.id for f in findings if f.status == "drift"}


def test_the_verify_table_groups_findings_by_check_id(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 25 item 4: one row per check id and status, targets compact, so that bios.iommu, ib.mtu and the
    sysctl drift are not cut off below hundreds of per-IRQ rows. Piped: plain lines, every target in ranges."""
    from nodetune.api import NodeResult, RunResult
    from nodetune.render import print_verify

    big, small = full_size_findings(), full_size_findings(cpus=64, irqs=20)
    result = RunResult("verify", {"big": NodeResult("big", "drift", findings=big),
                                  "small": NodeResult("small", "drift", findings=small)}, rc=0)
    print_verify(result)
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["# findings by check", "node\tcheck\tstatus\tn\ttargets\texpected\tactual\tremedy"]
    rows = {host: [line.split("\t")[1:] for line in lines if line.startswith(host + "\t")] for host in ("big", "small")}
    table = rows["big"][:-1]  # the last line of a host is its summary row
    assert len(table) == 11, table  # against 463 rows (a row per IRQ value) before
    assert {row[0] for row in table if row[1] == "drift"} == drifted_ids(big)
    assert [row[0] for row in table[:2]] == ["smt.siblings_offline", "irq.nic_local"]  # drift first, worst first
    assert table[1] == ["irq.nic_local", "drift", "900", "irq 40-489 (450), irq 40-489 effective (450)",
                        "<96 values>", "<96 values>", REMEDY_IRQ]
    assert ["bios.iommu", "drift", "1", "pci=realloc", "pci=realloc=off", "absent",
            "add pci=realloc=off to the kernel command line"] in table
    assert ["bios.iommu", "drift", "1", "amd_iommu", "no invalid amd_iommu= option", "amd_iommu=on",
            "remove amd_iommu=on"] in table
    assert ["ib.mtu", "drift", "8", "ib0-7", "4092", "2044", REMEDY_IRQ.replace("irq_affinity", "infiniband")] in table
    assert [row[:4] for row in table[-4:]] == [
        ["irq.nic_local", "pending", "4", "irq 600-603 effective"], ["bios.nps", "waived", "1", "nps"],
        ["health.gpu_perf_level", "not_applicable", "1", "-"], ["4 checks", "ok", "141", ""]]
    assert table[-3][-1] == "waived until 2099-12-31: lab board"
    assert rows["big"][-1][:5] == ["drift", "6", "145", str(len([f for f in big if f.status == "drift"])), "1"]
    assert {row[0] for row in rows["small"] if row[1] == "drift"} == drifted_ids(small)


REMEDY_IRQ = "run the nodetune apply (site.yml or playbooks/apply.yml, --tags irq_affinity) to restore it"


def test_the_verify_table_on_a_terminal_shows_every_drifted_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal: a table per node, a line per row, every drifted check id on one screen; long target lists
    are cut (ranges of a kind, then … and its count; names, then +N) and the usual remedy reads 'apply --tags'."""
    from rich.console import Console

    from nodetune import render
    from nodetune.api import NodeResult, RunResult

    findings = full_size_findings()
    findings += [finding("check.expected", f"/etc/nodetune/check.d/{name}.json", f"<file, {n} bytes>", None,
                         "drift", "low") for n, name in enumerate(("cpu", "irq", "nvme", "smt", "sysctl"))]
    findings += [finding("cpu.governor", f"cpu{n}", "performance", "powersave", "drift", "medium")
                 for n in range(200, 380, 2)]  # not contiguous: 90 ranges
    out = io.StringIO()
    monkeypatch.setattr(render, "_on_terminal", lambda: True)
    monkeypatch.setattr(render, "_console",
                        lambda: Console(file=out, force_terminal=True, width=200, color_system=None))
    render.print_verify(RunResult("verify", {"big": NodeResult("big", "drift", findings=findings)}, rc=0))
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[0].strip() == "big: findings by check"
    body = [line for line in lines if line.startswith("│ ")]
    assert len(body) <= 20, text  # 483 groups, cut to 25 rows, before
    for check in drifted_ids(findings):
        assert any(line.startswith(f"│ {check} ") for line in body), (check, text)
    assert "cpu0-191,200,202 … (282)" in text and "/etc/nodetune/check.d/{cpu.json,irq.json,nvme.json} +2" in text
    assert "apply --tags irq_affinity" in text and "run the nodetune apply" not in text
    assert "nodetune verify" in text and "│ big  │ drift  │ 7 " in text  # the summary, last


def test_verify_all_lists_every_value_and_target(capsys: pytest.CaptureFixture[str]) -> None:
    """``nodetune verify --all``: a row per check id, status and value, the ok checks too, every target."""
    from nodetune.api import NodeResult, RunResult
    from nodetune.cli import build_parser
    from nodetune.render import print_verify

    assert build_parser("verify").parse_args(["verify", "--root", "/", "--all"]).every is True
    assert build_parser("verify").parse_args(["verify", "--root", "/"]).every is False
    findings = full_size_findings(irqs=100)
    print_verify(RunResult("verify", {"n1": NodeResult("n1", "drift", findings=findings)}, rc=0), every=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# findings by check and value"
    rows = [line.split("\t")[1:] for line in lines if line.startswith("n1\t")][:-1]
    irq = [row for row in rows if row[:2] == ["irq.nic_local", "drift"]]
    assert len(irq) == 96 and sum(int(row[2]) for row in irq) == 200  # a row per (expected, actual)
    assert ["irq.nic_local", "drift", "2", "irq 40, irq 40 effective (1)", "40", "47", REMEDY_IRQ] not in irq
    assert ["irq.nic_local", "drift", "4", "irq 40,136 (2), irq 40,136 effective (2)", "40", "47",
            REMEDY_IRQ] in irq
    assert {(row[0], row[1]) for row in rows} >= {("health.gpu_temp", "ok"), ("bios.iommu", "ok")}
    assert not any("checks" in row[0] for row in rows)
    shown = sum(int(row[2]) for row in rows)
    assert shown == len(findings)


def test_the_short_remedy_matches_verifys_remedy() -> None:
    from ansible_collections.nodetune.instinct.plugins.module_utils.audit.verify import REMEDY

    from nodetune.render import short_remedy

    assert short_remedy(REMEDY % "irq_affinity" + "; why") == "apply --tags irq_affinity; why"
    assert short_remedy("add pci=realloc=off") == "add pci=realloc=off"


def test_grouped_diff_stays_short_on_a_full_size_node() -> None:
    from nodetune.api import NodeResult, SettingChange
    from nodetune.render import MAX_DIFF_LINES, grouped_diff

    settings = [SettingChange("cpu.governor", f"cpu{n}", "powersave", "performance") for n in range(1152)]
    settings += [SettingChange("irq.nic_local", f"irq {40 + n}", f"{n:x}", f"{n + 1:x}") for n in range(4000)]
    settings += [SettingChange(f"sysctl.vm.x{n}", f"vm.x{n}", "1", "0") for n in range(20)]
    lines = grouped_diff(NodeResult(host="big", settings=settings))
    assert len(lines) <= MAX_DIFF_LINES
    assert "@@ cpu.governor (1152 values) @@" in lines and "-cpu0-1151: powersave" in lines
    assert "@@ irq.nic_local (4000 values) @@" in lines and "-irq 40-4039: 4000 values" in lines
    assert all(f"@@ sysctl.vm.x{n} (1 value) @@" in lines for n in range(20))
    many = [SettingChange(f"id.{n}", f"t{k}", "a", f"b{k}") for n in range(100) for k in range(3)]
    cut = grouped_diff(NodeResult(host="many", settings=many))
    assert len(cut) == MAX_DIFF_LINES and cut[-1].endswith("--full-diff shows every value")


# --------------------------------------------------------------------------------------------- cancelling
def _start_apply(root: Path) -> subprocess.Popen[str]:
    script = Path(sys.executable).parent / "nodetune"
    if not script.exists():
        pytest.skip(f"the nodetune console script is not installed next to {sys.executable} (pip install -e .)")
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    env[_RUN_MARK] = str(root)  # inherited by the playbook and its workers: the processes of this run, no other's
    return subprocess.Popen([str(script), "apply", "--root", str(root), *LAB_OPT_INS, *LAB], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


LAB_OPT_INS = ["-e", "nodetune_smt_policy=offline_siblings", "-e", "nodetune_smt_offline_allowed=true",
               "-e", "nodetune_irqbalance_stop_allowed=true"]


def _wait_for_the_module(root: Path, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    """Until the tune module holds the node's lock (it is applying)."""
    import time

    deadline = time.monotonic() + timeout
    while not _locked(root):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the tune module never started"
        time.sleep(0.05)


def _locked(root: Path) -> bool:
    """Whether a process holds the node's lock: a flock on the root directory itself (engine.NodeLock), listed in
    /proc/locks as ``FLOCK ... <major>:<minor>:<inode>``."""
    inode = f":{root.stat().st_ino} "
    return any("FLOCK" in line and inode in line + " " for line in Path("/proc/locks").read_text().splitlines())


def _runs_completed(root: Path) -> int:
    journal = root / "var/lib/nodetune/journal.json"
    return len(json.loads(journal.read_text()).get("runs") or []) if journal.exists() else 0


_RUN_MARK = "NODETUNE_TEST_CANCELLED_RUN"


def _playbooks_on(root: Path) -> list[str]:
    """Command lines of processes still working on this node tree (the playbook, its workers, the module): those
    started for it (their environment holds its mark) or naming it. Runs of other tests beside this one (pytest
    -n) are neither."""
    found = []
    mark = f"{_RUN_MARK}={root}\0".encode()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            text = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (proc / "environ").read_bytes() + b"\0"
        except OSError:
            continue
        if str(root) in text or mark in environ:
            found.append(text)
    return found


@pytest.fixture()
def big_node() -> Iterator[Path]:
    scratch = fullsize.scratch_dir("nodetune-cancel-")
    try:
        root = scratch / "big-01"
        simnode.build(fullsize.big_spec(), str(root))
        yield root
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.slow
def test_sigterm_cancels_the_apply_and_exits_143(big_node: Path) -> None:
    import signal
    import time

    proc = _start_apply(big_node)
    _wait_for_the_module(big_node, proc)
    assert _playbooks_on(big_node), "the run's processes must be found while it runs"
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "cancelled by SIGTERM" in err and "Traceback" not in err
    time.sleep(3)
    assert _playbooks_on(big_node) == [] and _runs_completed(big_node) == 0  # stopped, not finished


@pytest.mark.slow
def test_a_killed_cli_leaves_no_playbook_finishing_the_apply(big_node: Path) -> None:
    import signal
    import time

    proc = _start_apply(big_node)
    _wait_for_the_module(big_node, proc)
    assert _playbooks_on(big_node), "the run's processes must be found while it runs"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    time.sleep(5)
    assert _playbooks_on(big_node) == []
    time.sleep(10)  # an orphaned playbook would finish the apply meanwhile (a fresh big node: ~15 s)
    assert _runs_completed(big_node) == 0


def _playbook_of(cli: int) -> int:
    """The run's ansible-playbook itself: the child of the CLI's child (the run's supervisor)."""
    from nodetune._supervise import descendants

    def parent(pid: int) -> int:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])

    tree = descendants(cli)
    supervisor = next(pid for pid in tree if parent(pid) == cli)
    return next(pid for pid in tree if parent(pid) == supervisor)


@pytest.mark.slow
def test_a_killed_playbook_ends_the_cli_at_once(big_node: Path) -> None:
    """Issue 23 item 5: after kill -9 of ansible-playbook its workers blocked on a pipe and the CLI waited forever;
    it ends at once now, saying what each node finished."""
    import signal

    proc = _start_apply(big_node)
    try:
        _wait_for_the_module(big_node, proc)
        os.kill(_playbook_of(proc.pid), signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()  # its supervisor then stops the run (parent-death signal)
            proc.communicate()
    assert proc.returncode == 1, err
    assert "big-01\tfailed" in out and "ansible-playbook was killed (SIGKILL) before its result" in out
    assert "Traceback" not in err
    assert _playbooks_on(big_node) == []


def test_bind_without_a_rank_is_a_failure_not_drift(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"):
        monkeypatch.delenv(name, raising=False)
    assert main(["bind", "--", "true"]) == 1  # it used to exit 2, which reads as drift
    assert "no local rank" in capsys.readouterr().err
