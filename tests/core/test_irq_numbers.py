"""The rule that finds IRQs by action name (rules.irq_numbers: verify, nodetune-check and nodetune-restore)
answers as it did when it compared every name with every vector's actions, and reads no more than it did.

The rule now indexes the names by action folder and stops listing a device's vectors once each of its names is
found (issue 28: ~540 names against ~1,100 vectors on a full-size MI300X node). The reference below is the rule as
it was before (commit f40ddfa), kept here to compare against on generated nodes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

from ansible_collections.nodetune.instinct.plugins.module_utils.node_programs import rules
from hypothesis import given, settings
from hypothesis import strategies as st


def reference(names: list[str], listdir: Callable[[str], Optional[list[str]]],
              read: Callable[[str], Optional[str]]) -> dict[str, int]:
    numbers: dict[str, int] = {}
    listed: set[str] = set()
    for bdf in sorted(set(name.partition("@pci:")[2] for name in names) - {""}):
        wanted = [name for name in names if name.partition("@pci:")[2] == bdf]
        vectors = listdir(f"sys/bus/pci/devices/{bdf}/msi_irqs")
        if vectors is None:
            continue
        listed.update(wanted)
        for vector in sorted(vectors):
            if not vector or not all("0" <= c <= "9" for c in vector):
                continue
            actions = set(listdir("proc/irq/" + vector) or ())
            for name in wanted:
                if name in actions or name.partition("@pci:")[0] in actions:
                    numbers.setdefault(name, int(vector))
    if all(name in listed for name in names):
        return numbers
    for line in (read("proc/interrupts") or "").splitlines()[1:]:
        head, _sep, rest = line.partition(":")
        head = head.strip()
        if head.isdigit():
            words = rest.rsplit(None, 1)
            if words:
                numbers.setdefault(words[-1], int(head))
    return numbers


BDFS = ["0000:01:00.0", "0000:41:00.0"]
DRIVERS = ["amdgpu", "mlx5_comp0", "mlx5_comp1"]
# few names, so that a name is often answered by several vectors of its device, and by a row of /proc/interrupts
NAMES = DRIVERS + [f"{driver}@pci:{bdf}" for driver in DRIVERS for bdf in BDFS + ["0000:ff:00.0"]]
NUMBERS = ["9", "10", "24", "100", "101", "x1", ""]  # sorted as text: "10" < "100" < "101" < "24" < "9"


@st.composite
def nodes(draw):  # (names asked, msi_irqs per device, actions per /proc/irq/N, /proc/interrupts rows)
    vectors = {bdf: draw(st.lists(st.sampled_from(NUMBERS), max_size=6, unique=True))
               for bdf in draw(st.lists(st.sampled_from(BDFS), unique=True))}
    actions = {number: draw(st.lists(st.sampled_from(NAMES), max_size=4, unique=True)) for number in NUMBERS}
    rows = draw(st.lists(st.tuples(st.integers(0, 200), st.sampled_from(NAMES)), max_size=4))
    return draw(st.lists(st.sampled_from(NAMES), max_size=8)), vectors, actions, rows


@settings(max_examples=300, deadline=None)
@given(nodes())
def test_the_rule_answers_as_before_and_reads_no_more(node) -> None:
    names, vectors, actions, rows = node
    reads: dict[str, list[str]] = {"old": [], "new": []}

    def files(which: str):
        def listdir(rel: str) -> Optional[list[str]]:
            reads[which].append(rel)
            if rel.startswith("sys/bus/pci/devices/"):
                bdf = rel.split("/")[4]
                return list(vectors[bdf]) if bdf in vectors else None
            return list(actions.get(rel[len("proc/irq/"):], ())) if rel.startswith("proc/irq/") else None

        def read(rel: str) -> Optional[str]:
            reads[which].append(rel)
            return "CPU0\n" + "".join(f"{irq}: 0 PCI-MSI {name}\n" for irq, name in rows)
        return listdir, read

    assert rules.irq_numbers(names, *files("new")) == reference(names, *files("old"))
    assert set(reads["new"]) <= set(reads["old"])
