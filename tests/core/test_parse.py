"""Kernel text formats: cpulists, hex cpumasks, choice files, key-value files, PCIe link speeds.

Round trips are checked with hypothesis over CPU sets up to 1,152 CPUs (the widest /proc/interrupts in the
shared captures) and beyond; the fixed examples are the kernel's own formats (lib/bitmap.c).
"""

from __future__ import annotations

import pytest
from ansible_collections.nodetune.instinct.plugins.module_utils.parse import (
    ParseError,
    format_cpulist,
    format_cpumask,
    parse_choice,
    parse_cpulist,
    parse_cpumask,
    parse_int,
    parse_key_value,
    parse_link_speed,
    pcie_generation,
)
from hypothesis import given
from hypothesis import strategies as st

cpu_sets = st.sets(st.integers(min_value=0, max_value=1151), max_size=1152)
wide_cpu_sets = st.sets(st.integers(min_value=0, max_value=8191), max_size=300)


# ------------------------------------------------------------------------------------------- cpulist
@given(cpu_sets)
def test_cpulist_round_trip_up_to_1152_cpus(cpus: set[int]) -> None:
    assert parse_cpulist(format_cpulist(cpus)) == sorted(cpus)


@given(wide_cpu_sets)
def test_cpulist_round_trip_sparse_wide_ids(cpus: set[int]) -> None:
    assert parse_cpulist(format_cpulist(cpus)) == sorted(cpus)


@given(cpu_sets)
def test_cpulist_is_compressed_into_maximal_ranges(cpus: set[int]) -> None:
    text = format_cpulist(cpus)
    ranges = []
    for item in text.split(",") if text else []:
        low, _, high = item.partition("-")
        ranges.append((int(low), int(high or low)))
    # Ranges are increasing and never touch: two ranges that could be merged would show as separate items.
    for (_, end), (start, _) in zip(ranges, ranges[1:], strict=False):
        assert start > end + 1
    assert sum(high - low + 1 for low, high in ranges) == len(cpus)


@given(st.lists(st.integers(min_value=0, max_value=1151), max_size=200))
def test_cpulist_accepts_unsorted_and_duplicate_items(values: list[int]) -> None:
    text = ",".join(str(v) for v in values)
    assert parse_cpulist(text) == sorted(set(values))


@pytest.mark.parametrize(("text", "expected"), [
    ("0-3,8", [0, 1, 2, 3, 8]),
    ("0", [0]),
    ("", []),
    (" 0-1 \n", [0, 1]),
    ("0-11:2/4", [0, 1, 4, 5, 8, 9]),  # bitmap_parselist stride: 2 used out of every 4
    ("1151", [1151]),
])
def test_cpulist_kernel_examples(text: str, expected: list[int]) -> None:
    assert parse_cpulist(text) == expected


@pytest.mark.parametrize("garbage", ["x", "0-", "-3", "3-1", "0,,1", "0-3:4/2", "1;2", "0x3", "(null)x", "65536"])
def test_cpulist_garbage_is_a_parse_error_naming_the_text(garbage: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_cpulist(garbage, "isolcpus")
    assert "isolcpus" in str(err.value)
    assert repr(garbage) in str(err.value)


@given(st.text(alphabet="0123456789-,:/ abcxyz;", min_size=1, max_size=30))
def test_cpulist_never_fails_other_than_with_parse_error(text: str) -> None:
    try:
        cpus = parse_cpulist(text)
    except ParseError:
        return
    assert cpus == sorted(set(cpus))
    assert all(isinstance(c, int) and c >= 0 for c in cpus)


# ------------------------------------------------------------------------------------------- cpumask
@given(cpu_sets)
def test_cpumask_round_trip_1152_cpus_padded(cpus: set[int]) -> None:
    mask = format_cpumask(cpus, nr_cpus=1152)
    words = mask.split(",")
    assert len(words) == 36  # 1,152 CPUs = 36 words of 32 bits, as /proc/irq/N/smp_affinity prints them
    assert all(len(w) == 8 for w in words)
    assert parse_cpumask(mask) == sorted(cpus)


@given(cpu_sets)
def test_cpumask_matches_an_independent_big_integer(cpus: set[int]) -> None:
    value = sum(1 << c for c in cpus)
    assert int(format_cpumask(cpus).replace(",", ""), 16) == value


@given(cpu_sets, cpu_sets)
def test_cpumask_and_cpulist_agree(a: set[int], b: set[int]) -> None:
    union = a | b
    assert parse_cpumask(format_cpumask(union)) == parse_cpulist(format_cpulist(union))


@pytest.mark.parametrize(("text", "expected"), [
    ("00000000,00000001", [0]),
    ("ff", list(range(8))),
    ("0x3", [0, 1]),
    ("0000,55555555,55555555", list(range(0, 64, 2))),  # util-linux x7550 node0 cpumap
    ("00000000,003f0000,0000003f", list(range(0, 6)) + list(range(48, 54))),  # EPYC 7451 node0 cpumap
    ("", []),
])
def test_cpumask_kernel_examples(text: str, expected: list[int]) -> None:
    assert parse_cpumask(text) == expected


@pytest.mark.parametrize("garbage", ["xyz", "ff,fffffffff", "12 34", "ff,,ff", "0x", "-1"])
def test_cpumask_garbage_is_a_parse_error(garbage: str) -> None:
    if garbage == "0x":
        assert parse_cpumask(garbage) == []  # "0x" alone is an empty mask, not garbage
        return
    with pytest.raises(ParseError) as err:
        parse_cpumask(garbage, "smp_affinity")
    assert "smp_affinity" in str(err.value)


def test_cpumask_refuses_negative_cpus() -> None:
    with pytest.raises(ParseError):
        format_cpumask([-1])


# ------------------------------------------------------------------------------------------- small formats
def test_choice_file_bracketed_and_plain() -> None:
    assert parse_choice("[none] mq-deadline kyber bfq") == ("none", ["none", "mq-deadline", "kyber", "bfq"])
    assert parse_choice("none [mq-deadline] kyber") == ("mq-deadline", ["none", "mq-deadline", "kyber"])
    assert parse_choice("mq-deadline") == ("mq-deadline", ["mq-deadline"])  # a plain-file tree written by echo
    assert parse_choice("default performance powersave") == (None, ["default", "performance", "powersave"])
    assert parse_choice(None) == (None, [])


def test_key_value_files() -> None:
    kfd = "cpu_cores_count 96\nsimd_count 0\n\nlocation_id 1280\n"
    assert parse_key_value(kfd) == {"cpu_cores_count": "96", "simd_count": "0", "location_id": "1280"}
    meminfo = "Node 0 MemTotal:       16746804 kB\n"
    assert parse_key_value("MemTotal:  16 kB\nMemFree: 3 kB", sep=":") == {"MemTotal": "16 kB", "MemFree": "3 kB"}
    assert parse_key_value(meminfo)["Node"] == "0 MemTotal:       16746804 kB"
    assert parse_key_value(None) == {}


def test_ints_and_link_speeds() -> None:
    assert parse_int("0x10de") == 0x10DE
    assert parse_int("-1") == -1
    assert parse_int("garbage", default=7) == 7
    assert parse_link_speed("16.0 GT/s PCIe") == 16.0
    assert parse_link_speed("16 GT/s") == 16.0  # kernels <= 5.6
    assert parse_link_speed("Unknown") is None
    assert pcie_generation(parse_link_speed("32.0 GT/s PCIe")) == 5
    assert pcie_generation(None) is None
