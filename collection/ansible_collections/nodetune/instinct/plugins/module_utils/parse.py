# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Parsers and formatters for the kernel's small text formats.

Kept free of I/O so that the modules on the node, the filters on the controller and the planner share them.
Every parser raises :class:`ParseError` with the offending text, so that a bad policy value reaches the user
as "cpulist '0-3,x' is not valid: ..." rather than as a ValueError from deep inside.

No regular expressions: importing ``re`` (with ``enum`` and ``functools``) and compiling the patterns cost as much of
every ``nodetune discover`` start as discovering a small node (docs/benchmarks.md). The matchers below use the str
methods whose character classes are re's own for str patterns (``isspace`` is ``\\s``), except digits: numbers are ASCII
digits only (``[0-9]``, re.ASCII's ``\\d``), because ``int()`` and ``\\d`` also take Arabic-Indic or full-width
digits (``'٣'`` would be CPU 3) and ``int()`` takes underscores (``'4_092'``). tests/core/test_parse_matchers.py
checks them against the regular expressions they replace.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: they are postponed, so typing is never imported at run time
    from typing import Dict, Iterable, List, Optional, Tuple


class ParseError(ValueError):
    """A kernel-format string could not be parsed."""


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_DIGITS = frozenset("0123456789")


def is_digits(text: str) -> bool:
    """``text`` is ASCII decimal digits only, at least one (``[0-9]+``; not ``str.isdecimal``, which takes any
    script's digits)."""
    return bool(text) and _DIGITS.issuperset(text)


def ascii_int(value: object, what: str = "value") -> int:
    """An integer from an int or from ASCII digits with an optional leading '-' and surrounding ASCII blanks.

    Refuses what ``int()`` would take but no kernel file or config ever holds: other scripts' digits, underscores
    (``'4_092'``), '+' signs, floats and booleans."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ParseError("%s %r is not valid: expected an integer" % (what, value))
    if isinstance(value, int):
        return value
    text = value.strip(" \t\n")
    digits = text[1:] if text.startswith("-") else text
    if not is_digits(digits):
        raise ParseError("%s %r is not valid: expected an integer written with the digits 0-9" % (what, value))
    return int(text)


_DECIMAL_POINT_DIGITS = frozenset("0123456789.")


def _end_anchored(text: str) -> str:
    """What a ``...$`` pattern sees as the end: ``$`` also matches before one final newline."""
    return text[:-1] if text.endswith("\n") else text


def number_after(text: str, prefix: str) -> Optional[int]:
    """``n`` where ``text`` is ``prefix`` then decimal digits (``^prefix(\\d+)$``: ``cpu12`` -> 12), else None."""
    if not text.startswith(prefix):
        return None
    digits = _end_anchored(text[len(prefix):])
    return int(digits) if is_digits(digits) else None


def split_number_pair(text: str, prefix: str, middle: str) -> Optional[Tuple[str, str]]:
    """The two digit runs of ``prefix<digits><middle><digits>`` (``^nvme(\\d+)n(\\d+)$``), else None."""
    if not text.startswith(prefix):
        return None
    first, sep, second = _end_anchored(text[len(prefix):]).partition(middle)
    if sep and is_digits(first) and is_digits(second):
        return first, second
    return None


def is_hex(text: str) -> bool:
    """``text`` is ASCII hex digits only, at least one (``[0-9a-fA-F]+`` matching all of it)."""
    return bool(text) and _HEX_DIGITS.issuperset(text)


def leading_decimal(text: str) -> str:
    """The decimal digits ``text`` starts with (``\\d*`` at its start)."""
    end = 0
    while end < len(text) and text[end] in _DIGITS:
        end += 1
    return text[:end]


def number_before_unit(text: str, unit: str) -> Optional[str]:
    """``^\\s*([0-9.]+)\\s*<unit>``: ``"  16.0 GT/s PCIe"`` with unit ``GT/s`` -> ``"16.0"``, else None."""
    rest = text.lstrip()
    end = 0
    while end < len(rest) and rest[end] in _DECIMAL_POINT_DIGITS:
        end += 1
    if end and rest[end:].lstrip().startswith(unit):
        return rest[:end]
    return None


def _cpulist_item(item: str) -> Optional[Tuple[str, Optional[str], Optional[str], Optional[str]]]:
    """(start, end, used, group) digit strings of ``a``, ``a-b`` or ``a-b:used/group``
    (``^(\\d+)(?:-(\\d+)(?::(\\d+)/(\\d+))?)?$``), else None."""
    head, dash, tail = _end_anchored(item).partition("-")
    if not is_digits(head):
        return None
    if not dash:
        return head, None, None, None
    end, colon, stride = tail.partition(":")
    if not is_digits(end):
        return None
    if not colon:
        return head, end, None, None
    used, slash, group = stride.partition("/")
    if slash and is_digits(used) and is_digits(group):
        return head, end, used, group
    return None


MAX_CPUS = 65536  # kernel NR_CPUS upper bound (CONFIG_NR_CPUS <= 8192 on x86; leave headroom)


def parse_cpulist(text: Optional[str], what: str = "cpulist") -> List[int]:
    """``"0-3,8,10-14:2/3"`` -> sorted unique ints. Empty string or None -> ``[]``.

    Supports the kernel's ``a-b:used/group`` stride syntax (lib/bitmap.c, bitmap_parselist).
    """
    if text is None:
        return []
    if not isinstance(text, str):
        raise ParseError("%s %r is not valid: expected a string such as '0-3,8'" % (what, text))
    text = text.strip()
    if not text:
        return []
    cpus = set()
    for item in text.split(","):
        item = item.strip()
        match = _cpulist_item(item)
        if match is None:
            raise ParseError("%s %r is not valid: %r is not a CPU number or range like '0-3' "
                             "(valid: comma-separated numbers and ranges, e.g. '0-3,8,10-11')"
                             % (what, text, item))
        start = int(match[0])
        end = int(match[1]) if match[1] is not None else start
        if end < start:
            raise ParseError("%s %r is not valid: range %r runs backwards" % (what, text, item))
        if end >= MAX_CPUS:
            raise ParseError("%s %r is not valid: CPU %d is beyond the kernel limit of %d CPUs"
                             % (what, text, end, MAX_CPUS))
        if match[2] is not None and match[3] is not None:
            used, group = int(match[2]), int(match[3])
            if group == 0 or used == 0 or used > group:
                raise ParseError("%s %r is not valid: stride %r needs 0 < used <= group" % (what, text, item))
            for base in range(start, end + 1, group):
                cpus.update(c for c in range(base, min(base + used, end + 1)))
        else:
            cpus.update(range(start, end + 1))
    return sorted(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """Sorted ints -> the kernel's compressed cpulist (``[0,1,2,3,8]`` -> ``"0-3,8"``)."""
    values = sorted(set(int(c) for c in cpus))
    if not values:
        return ""
    parts: List[str] = []
    start = prev = values[0]
    for cpu in values[1:]:
        if cpu == prev + 1:
            prev = cpu
            continue
        parts.append(str(start) if start == prev else "%d-%d" % (start, prev))
        start = prev = cpu
    parts.append(str(start) if start == prev else "%d-%d" % (start, prev))
    return ",".join(parts)


def parse_cpumask(text: Optional[str], what: str = "cpumask") -> List[int]:
    """Kernel hex mask (comma-separated 32-bit words, most significant first) -> sorted CPU ids.

    ``"00000000,00000001"`` -> ``[0]``; ``"ff"`` -> ``[0..7]``. Leading ``0x`` is accepted.
    """
    if text is None:
        return []
    if not isinstance(text, str):
        raise ParseError("%s %r is not valid: expected hex words such as 'ffff,0000ffff'" % (what, text))
    text = text.strip()
    if text.lower().startswith("0x"):
        text = text[2:]
    if not text:
        return []
    words = text.split(",")
    cpus: List[int] = []
    for index, word in enumerate(reversed(words)):
        word = word.strip()
        if not word or len(word) > 8 and index < len(words) - 1 or not is_hex(word):
            raise ParseError("%s %r is not valid: %r is not a hex word of at most 8 digits "
                             "(the kernel format is 32-bit hex words separated by commas, e.g. "
                             "'00000000,0000000f')" % (what, text, word))
        value = int(word, 16)
        base = index * 32
        bit = 0
        while value:
            if value & 1:
                cpus.append(base + bit)
            value >>= 1
            bit += 1
    return sorted(cpus)


def format_cpumask(cpus: Iterable[int], nr_cpus: Optional[int] = None) -> str:
    """CPU ids -> kernel hex mask with 32-bit words (``[0, 33]`` -> ``"00000002,00000001"``).

    ``nr_cpus`` pads the mask to that many CPUs, as /proc/irq/N/smp_affinity does on a real machine.
    """
    values = sorted(set(int(c) for c in cpus))
    if values and values[0] < 0:
        raise ParseError("cpumask cannot hold negative CPU %d" % values[0])
    top = max(values[-1] + 1 if values else 1, nr_cpus or 1)
    nwords = (top + 31) // 32
    words = [0] * nwords
    for cpu in values:
        words[cpu // 32] |= 1 << (cpu % 32)
    return ",".join("%08x" % w for w in reversed(words))


def parse_choice(text: Optional[str]) -> Tuple[Optional[str], List[str]]:
    """``"[none] mq-deadline kyber"`` -> ``("none", ["none", "mq-deadline", "kyber"])``.

    A file without brackets (a plain-file tree written by ``echo mq-deadline``) is read as its single value
    being active, so the same comparison is idempotent on real sysfs and on simulated trees.
    """
    if text is None:
        return None, []
    options: List[str] = []
    active: Optional[str] = None
    for token in text.split():
        if token.startswith("[") and token.endswith("]"):
            token = token[1:-1]
            active = token
        options.append(token)
    if active is None and len(options) == 1:
        active = options[0]
    return active, options


def parse_key_value(text: Optional[str], sep: Optional[str] = None) -> Dict[str, str]:
    """``"key value"`` lines (KFD properties, /proc/meminfo with sep=':') -> dict; later keys win."""
    result: Dict[str, str] = {}
    if not text:
        return result
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if sep is None:
            key, _sep, value = line.partition(" ")
        else:
            key, _sep, value = line.partition(sep)
        result[key.strip()] = value.strip()
    return result


def parse_int(text: Optional[str], default: Optional[int] = None) -> Optional[int]:
    if text is None:
        return default
    text = text.strip()
    if text.lower().startswith("0x"):
        return int(text, 16) if is_hex(text[2:]) else default
    try:
        return ascii_int(text)
    except ParseError:
        return default


_PCIE_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def parse_link_speed(text: Optional[str]) -> Optional[float]:
    """``"16.0 GT/s PCIe"`` or ``"16 GT/s"`` (kernels <= 5.6) -> 16.0; ``"Unknown"`` -> None."""
    if not text:
        return None
    number = number_before_unit(text, "GT/s")
    return float(number) if number is not None else None


def pcie_generation(gts: Optional[float]) -> Optional[int]:
    return _PCIE_GEN.get(gts) if gts is not None else None


# amdgpu's pp_od_clk_voltage names the GFX clock section OD_SCLK (emit_clk_levels, Linux 6.x) or GFXCLK (the older
# print_clk_levels of aldebaran and smu_v13_0_6, which print the SCLK levels under that header)
OD_SCLK_SECTIONS = ("OD_SCLK", "GFXCLK")


def _mhz(word: str) -> Optional[int]:
    """``"1900Mhz"`` / ``"1900MHz"`` -> 1900, else None."""
    number = number_before_unit(word, "M")
    if number is None or not is_digits(number) or not word.strip()[len(number):].lower().startswith("mhz"):
        return None
    return int(number)


def clock_levels(text: Optional[str], sections: Optional[Tuple[str, ...]] = None) -> List[Tuple[int, int]]:
    """(level, MHz) of the ``N: <clock>Mhz`` lines of an amdgpu clock file: all of pp_dpm_sclk (``sections`` None),
    or the first of ``sections`` found in pp_od_clk_voltage (from its ``NAME:`` header to the next header). The
    deep-sleep line (``S: 100Mhz *``) and the current-level mark (``*``) are left out."""
    levels: List[Tuple[int, int]] = []
    inside = sections is None
    for line in (text or "").splitlines():
        stripped = line.strip()
        if stripped.endswith(":") and stripped[:-1] and not any(c.isspace() for c in stripped):
            if levels and sections is not None:
                break  # the next section
            inside = sections is not None and stripped[:-1] in sections
            continue
        head, sep, rest = stripped.partition(":")
        words = rest.split()
        if inside and sep and is_digits(head) and words and _mhz(words[0]) is not None:
            levels.append((int(head), _mhz(words[0]) or 0))
    return levels


def od_range(text: Optional[str], name: str = "SCLK") -> Optional[Tuple[int, int]]:
    """The ``<name>: <min>Mhz <max>Mhz`` line of pp_od_clk_voltage's OD_RANGE section, else None."""
    inside = False
    for line in (text or "").splitlines():
        stripped = line.strip()
        if stripped.endswith(":") and not any(c.isspace() for c in stripped):
            inside = stripped == "OD_RANGE:"
            continue
        head, sep, rest = stripped.partition(":")
        words = rest.split()
        if inside and sep and head.strip() == name and len(words) >= 2:
            low, high = _mhz(words[0]), _mhz(words[1])
            if low is not None and high is not None:
                return low, high
    return None


def od_clock_command(text: Optional[str]) -> Optional[str]:
    """The comparable form of the maximum GFX clock in pp_od_clk_voltage: ``s 1 <MHz>``, the command that sets it.

    A command (``s 1 1900``, what is written) stays as it is; the table the file reads back gives its OD_SCLK (or
    GFXCLK) section's highest level, the maximum (``1: 1900Mhz``; an older driver lists the current clock between
    the minimum and the maximum). None where there is no such section; anything else as it is."""
    if text is None:
        return None
    words = text.split()
    if len(words) == 3 and words[0] == "s" and is_digits(words[1]) and is_digits(words[2]):
        return "s %d %d" % (int(words[1]), int(words[2]))
    levels = clock_levels(text, OD_SCLK_SECTIONS)
    if not levels:
        return text.strip()
    return "s 1 %d" % max(levels)[1]
