"""bench/fleet_ssh.py's arithmetic: ratios to ping taken within each round, the CPU ratio split between the nodes and
the controller, and the ratio lines with issue 28's targets (the runs themselves: tests/core/test_bench_ssh.py).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import fleet_ssh  # noqa: E402


def series(name: str, *runs: tuple[float, float, float]) -> fleet_ssh.Series:
    return fleet_ssh.Series(name, [fleet_ssh.Run(wall, ctl, node, 0.0) for wall, ctl, node in runs])


def test_ratios_are_taken_within_each_round() -> None:
    # round 1 on a busy machine (everything twice as long), round 2 quiet: the same ratio in each
    by_case = {"ping": series("ping", (20.0, 4.0, 12.0), (10.0, 2.0, 6.0)),
               "site (no-op)": series("site (no-op)", (30.0, 8.0, 16.0), (15.0, 4.0, 8.0))}
    fig = fleet_ssh.figures(by_case, 4)["site (no-op)"]
    assert fig["wall_x_ping_rounds"] == [1.5, 1.5] and fig["wall_x_ping"] == 1.5
    assert fig["cpu_x_ping"] == 1.5
    # (16 - 12) / 16 from the nodes, (8 - 4) / 16 from the controller: 1 + 0.25 + 0.25
    assert (fig["cpu_x_ping_from_nodes"], fig["cpu_x_ping_from_controller"]) == (0.25, 0.25)
    assert fig["node_cpu_s_per_node"] == 3.0 and fig["controller_cpu_s_per_node"] == 1.5


def test_ratio_lines_have_the_ssh_targets_for_each_pipelining_setting() -> None:
    by_case = {"ping": series("ping", (10.0, 2.0, 6.0)), "site": series("site", (24.0, 5.0, 15.0)),
               "site (no-op)": series("site (no-op)", (14.0, 3.0, 8.0))}
    by_mode = {mode: fleet_ssh.figures(by_case, 64) for mode in ("off", "on")}
    text, lines = fleet_ssh.report(64, by_mode)
    assert lines[:2] == [
        "ratio fleet[ssh, pipelining off] N=64 site: 2.40x ping wall (rounds: 2.40), 2.50x ping CPU "
        "(target <= 2.5x): OK",
        "ratio fleet[ssh, pipelining off] N=64 site (no-op): 1.40x ping wall (rounds: 1.40), 1.38x ping CPU "
        "(target <= 1.3x): OVER"]
    assert [line.split(" N=")[0] for line in lines] == ["ratio fleet[ssh, pipelining off]"] * 2 + [
        "ratio fleet[ssh, pipelining on]"] * 2
    side = text.split("x ping: wall (each round)")[1]
    assert re.search(r"site \(no-op\) +1\.40x \(1\.40\); CPU 1\.38x = 1 \+0\.25 nodes \+0\.12 ctl", side), side


@pytest.mark.parametrize(("text", "modes"), [("off,on", ("off", "on")), ("on", ("on",)), ("on, off,on", ("on", "off"))])
def test_pipelining_settings(text: str, modes: tuple[str, ...]) -> None:
    assert fleet_ssh.parse_modes(text) == modes


def test_cases_keep_ping_and_their_order() -> None:
    assert fleet_ssh.parse_cases("site (no-op),site") == ("ping", "site", "site (no-op)")
    with pytest.raises(Exception, match="not a case: verify"):
        fleet_ssh.parse_cases("verify")


def test_a_fleet_off_tmpfs_is_named_in_the_bench_output() -> None:
    """shm_dir falls back to the default temporary folder where /dev/shm lacks the inodes: the fleet benches then
    say the nodes are on a disk, whose first runs do not compare with runs on tmpfs."""
    import _common

    assert _common.filesystem_type("/proc/self") == "proc"  # the longest mount point above the path
    note = _common.storage_note("/proc/self")
    assert "the nodes are on proc, not tmpfs" in note and "do not compare" in note
    if _common.filesystem_type("/dev/shm") != "tmpfs":
        pytest.skip("this machine's /dev/shm is not a tmpfs")
    assert _common.storage_note("/dev/shm") == ""
