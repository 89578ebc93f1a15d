"""The string matchers that replaced discovery's regular expressions give what those expressions gave.

Each matcher is compared with the pattern it replaced (quoted in its docstring) on generated text built from the
characters that matter (digits, separators, Unicode digits and spaces, newlines), and on the odd cases by hand.
"""

from __future__ import annotations

import re

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.discover import cpu as discover_cpu
from ansible_collections.nodetune.instinct.plugins.module_utils.discover import devices as discover_devices
from ansible_collections.nodetune.instinct.plugins.module_utils.discover import irq as discover_irq
from ansible_collections.nodetune.instinct.plugins.module_utils.discover.system import shell_assignment
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import (
    ParseError,
    is_hex,
    number_after,
    number_before_unit,
    parse_cpulist,
    parse_link_speed,
    split_number_pair,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st

# Characters the patterns care about, plus look-alikes: Arabic-Indic and full-width digits (\d matches them),
# a no-break space and \x1c (\s matches them), the long s (IGNORECASE folds it to "s").
ALPHABET = "0123456789abcfxnqpuCPUeodlrtkBGsm-:./,_= \t\n\u0663\uff17\u00a0\x1c\u017f"
texts = st.text(alphabet=ALPHABET, max_size=24)
SETTINGS = settings(max_examples=400, deadline=None)


def group(pattern: str, text: str, index: int = 1, search: bool = False) -> str | None:
    match = (re.search if search else re.match)(pattern, text)
    return match.group(index) if match else None


@SETTINGS
@given(texts, st.sampled_from(["cpu", "node", "policy", "state", "CPU", "nvme"]))
@example("cpu12\n", "cpu")
@example("cpu12\n\n", "cpu")
@example("cpu\u0663", "cpu")
def test_number_after(text: str, prefix: str) -> None:
    expected = group(rf"(?a)^{prefix}(\d+)$", text)  # ASCII digits only: '\u0663' is not 3
    assert number_after(text, prefix) == (int(expected) if expected is not None else None)


@SETTINGS
@given(texts, st.sampled_from([("nvme", "n"), ("nvme", "q")]))
@example("nvme0n1", ("nvme", "n"))
@example("nvme0q12\n", ("nvme", "q"))
@example("nvme0q1q2", ("nvme", "q"))
def test_split_number_pair(text: str, shape: tuple[str, str]) -> None:
    prefix, middle = shape
    match = re.match(rf"(?a)^{prefix}(\d+){middle}(\d+)$", text)
    assert split_number_pair(text, prefix, middle) == (match.groups() if match else None)


@SETTINGS
@given(texts)
@example("nvme0c1n2")
@example("nvme0c1n2\n")
@example("nvme0c1n2\n\n")
def test_nvme_names(text: str) -> None:
    assert discover_devices.is_nvme_hidden_path(text) == bool(re.match(r"^nvme\d+c\d+n\d+$", text))
    assert discover_devices.is_nvme_controller(text) == bool(re.match(r"^nvme\d+$", text))


BDF_PATTERN = r"([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
bdf_texts = st.lists(st.sampled_from(["0000:41:00.0", "0000:4", "1:00.", "7", "8", ":", "/", "ab", "G", "@pci"]),
                     max_size=8).map("".join)


@SETTINGS
@given(st.one_of(bdf_texts, texts))
@example("/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0/nvme/nvme0")
@example("0000:41:00.00000:41:00.1")
@example("000:41:00.0000:41:00.1")
def test_bdfs(text: str) -> None:
    assert discover_devices.bdfs_in(text) == re.findall(BDF_PATTERN, text)
    assert discover_devices.first_bdf(text) == group(BDF_PATTERN, text, search=True)
    assert discover_devices.is_bdf_at(text, 0) == bool(re.match(BDF_PATTERN, text))


@SETTINGS
@given(texts)
@example("Node 0 MemTotal:       263856268 kB\nNode 0 MemFree: 1 kB")
@example("MemTotal:1 kB MemTotal: 2 kB")
@example("MemTotal: 12\u00a0kB")
def test_memtotal(text: str) -> None:
    expected = group(r"MemTotal:\s+(\d+)\s*kB", text, search=True)
    assert discover_cpu.memtotal_kb(text) == (int(expected) if expected is not None else None)


@SETTINGS
@given(st.one_of(texts, st.lists(st.sampled_from(["13107201", "0x1f", "0x", "-", "edge", "_", "\n", "\u0663"]),
                                 max_size=4).map("".join)))
@example("13107201-edge")
@example("0x1f-level_x")
@example("0x1f\n")
@example("0x1f\n\n")
@example("12-")
def test_hwirq(text: str) -> None:
    assert discover_irq._hwirq(text) == group(r"^(\d+|0x[0-9a-fA-F]+)(?:-(\w+))?$", text)


@SETTINGS
@given(texts)
@example("6.8.0-45-generic")
@example("6.")
@example("\u0663.1")
def test_kernel_version(text: str) -> None:
    match = re.match(r"(?a)^(\d+)\.(\d+)", text)  # ASCII digits (parse.leading_decimal)
    assert discover_irq.kernel_version(text) == ((int(match.group(1)), int(match.group(2))) if match else None)


@SETTINGS
@given(st.text(alphabet="asyncmiscbxeqtrlpdfwASYNCPTP-_0\u017f", max_size=16))
@example("mlx5_async17@pci:0000:41:00.0")
@example("ice-ens1f0-TxRx-3")
@example("\u017fync")
def test_nic_control_names(text: str) -> None:
    pattern = r"async|misc|mbx|aeq|ctrl|cmd|fw|err|ptp"
    assert discover_irq._names_nic_control(text) == bool(re.search(pattern, text, re.IGNORECASE))


@SETTINGS
@given(texts, st.sampled_from(["GT/s", "Gb/sec"]))
@example("16.0 GT/s PCIe", "GT/s")
@example("  100 Gb/sec (4X EDR)", "Gb/sec")
@example("1.2.3GT/s", "GT/s")
def test_number_before_unit(text: str, unit: str) -> None:
    assert number_before_unit(text, unit) == group(r"^\s*([0-9.]+)\s*" + re.escape(unit), text)


@SETTINGS
@given(texts)
@example("ff")
@example("")
@example("\uff17")
def test_is_hex(text: str) -> None:
    assert is_hex(text) == bool(re.fullmatch(r"[0-9a-fA-F]+", text))


@SETTINGS
@given(st.text(alphabet="exportEXPORT_AZ09= \t\u00a0ab\"'#", max_size=24))
@example("export IRQBALANCE_BANNED_CPULIST=0-3")
@example('  IRQBALANCE_BANNED_CPUS="ff"')
@example("exportFOO=1")
@example("export export=1")
@example("export FOO")
def test_shell_assignment(text: str) -> None:
    match = re.match(r"^\s*(?:export\s+)?([A-Z_][A-Z0-9_]*)=(.*)$", text)
    assert shell_assignment(text) == (match.groups() if match else None)


def _cpulist_by_regex(text: str) -> list[int] | None:
    """The accepted syntax of parse_cpulist as it was written with a regular expression (ranges expanded)."""
    cpus: set[int] = set()
    for item in text.strip().split(",") if text.strip() else []:
        match = re.match(r"(?a)^(\d+)(?:-(\d+)(?::(\d+)/(\d+))?)?$", item.strip())
        if not match:
            return None
        start = int(match.group(1))
        end = int(match.group(2)) if match.group(2) is not None else start
        if end < start or end >= 65536:
            return None
        if match.group(3) is not None:
            used, size = int(match.group(3)), int(match.group(4))
            if size == 0 or used == 0 or used > size:
                return None
            for base in range(start, end + 1, size):
                cpus.update(range(base, min(base + used, end + 1)))
        else:
            cpus.update(range(start, end + 1))
    return sorted(cpus)


@SETTINGS
@given(st.text(alphabet="0123456789-,:/ \u0663x", max_size=16))
@example("0-3,8,10-14:2/3")
@example("1-2:3/4/5")
@example("1--2")
def test_cpulist_syntax(text: str) -> None:
    expected = _cpulist_by_regex(text)
    if expected is None:
        with pytest.raises(ParseError):
            parse_cpulist(text)
    else:
        assert parse_cpulist(text) == expected


def test_link_speed_still_parses_both_kernel_formats() -> None:
    assert parse_link_speed("8.0 GT/s PCIe") == 8.0
    assert parse_link_speed("Unknown") is None


def test_discovery_imports_no_regular_expressions() -> None:
    """The point of the matchers: ``re`` (and enum, functools) stay out of a discovery's start-up."""
    import subprocess
    import sys
    from pathlib import Path

    collection = Path(__file__).resolve().parents[2] / "collection"
    code = ("import sys; from ansible_collections.nodetune.instinct.plugins.module_utils.discover import topology; "
            "print(sorted(m for m in ('re', 'enum', 'functools', 'json', 'argparse', 'shlex') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60,
                            env={"PYTHONPATH": str(collection)})
    assert result.stdout.strip() == "[]", result.stderr
