# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The node's structure, kept on the node between runs (issue 28 item 4; its cost in docs/benchmarks.md).

Discovery reads two kinds of things. The node's *structure*: its CPUs with their cores, packages and siblings, the
CPUs' L3 domains, the cpufreq policies and the CPUs each one governs, the idle states each CPU has, the PCI devices
with their ids, locality and BARs, the IRQs with their chip, hardware IRQ, name, NUMA node and whether the kernel
manages them. And its *current values*: which CPUs are online, governors, idle states disabled, affinities, drivers,
link speeds, MSI vectors, MTUs, sysctls. The structure does not change while the node runs as it is; the values do.
Each section reader that reads structure (cpu.py, devices.py, irq.py) is split in two: its structure part, whose
result it hands to a :class:`StructureStore` with the *evidence* it read it under, and its values part, which reads
every value afresh on every run. A later run reads the evidence again (a few cheap files: the online CPUs, the PCI
bus's entries and bindings, /proc/interrupts less its count columns, read a piece at a time) and takes the structure
from the store where the evidence is the same, so the Topology is the same whether the store had it or not;
tests/node/test_topology_cache.py compares the two on the lab's full-size nodes and after each change that must
invalidate. The modules' discovery (``values=False``, tests/node/test_topology_values.py) reads no governor, EPP,
idle ``disable`` or IRQ affinity at all: the Settings read the ones they set. The idle states are kept for it alone:
a discovery with values lists each CPU's state directories to read their ``disable`` files anyway, and the listing
is the structure.

The store is one file under the root (:data:`CACHE`, mode 0600), written atomically (Root.write_file: never through a
link) and only by the tune module outside check mode; verify, topology_facts and check mode only read it. A file that
is not a regular file of this user with no group or other bits, that is reached through a link, that is not this
version's shape or that was written under another boot (:data:`BOOT_ID`) is ignored: the run discovers afresh.
"""

from __future__ import annotations

import os
import stat

from ansible_collections.nodetune.instinct.plugins.module_utils.rootfs import NodeFileError, Root

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: they are postponed, so typing is never imported at run time
    from typing import Any, Callable, Dict, List, Optional

CACHE = "var/lib/nodetune/topology-structure.json"
FORMAT = "nodetune topology structure"
# Bump whenever a section's structure or evidence changes shape or meaning: a file of another version is ignored.
VERSION = 2
# A reboot can change anything (BIOS settings, NPS, firmware, device enumeration order): a new boot_id (random,
# drawn at each boot, drivers/char/random.c) discards the whole file. /run would be cleared too, but the journal's
# folder keeps the cache where revert finds it.
BOOT_ID = "proc/sys/kernel/random/boot_id"
_MAX_BYTES = 64 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC
_FILE_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | _CLOEXEC


class StructureStore(object):
    """The structure sections of one node: those of the file (read on first use), and those this process read
    afresh. ``writable``: :meth:`save` may write the file (the tune module outside check mode, nothing else)."""

    def __init__(self, root_path: str, writable: bool = False) -> None:
        self.root_path = root_path
        self.writable = writable
        self._file: Optional[Dict[str, Any]] = None  # section -> {"evidence": ..., "structure": JSON text}
        self._learned: Dict[str, Dict[str, Any]] = {}
        self._boot_id: Optional[str] = None
        self.hits: List[str] = []  # the sections taken from the store, in order (for tests and the bench)

    # ------------------------------------------------------------------ reading
    def known(self, section: str, evidence: Any, valid: Callable[[Any], bool]) -> Optional[Any]:
        """The structure of ``section`` read under this very ``evidence``, where it passes ``valid``; else None."""
        for entry in (self._learned.get(section), self._sections().get(section)):
            if entry is None or entry["evidence"] != evidence:
                continue
            structure = _loads(entry["structure"])
            if structure is not None and valid(structure):
                self.hits.append(section)
                return structure
        return None

    def learn(self, section: str, evidence: Any, structure: Any) -> None:
        """Keep what a section read afresh. It is encoded now: the Topology built from it may be changed later."""
        import json  # here, not at the top: `nodetune discover` never imports json (it has no store)

        self._learned[section] = {"evidence": evidence, "structure": json.dumps(structure, separators=(",", ":"))}

    def _sections(self) -> Dict[str, Dict[str, Any]]:
        if self._file is None:
            try:
                self._boot_id = Root(self.root_path).read(BOOT_ID)
            except NodeFileError:  # not a root at all: nothing kept, and discovery says why on its own
                self._file = {}
                return self._file
            self._file = _valid_file(_loads(_read_own_file(self.root_path, CACHE)), self._boot_id)
        return self._file

    # ------------------------------------------------------------------ writing
    def save(self) -> bool:
        """Write the file where this process read a section afresh; False where nothing was new or it could not be
        written (a cache never fails a run: the next one discovers afresh)."""
        if not self.writable or not self._learned:
            return False
        import json

        sections = dict(self._sections())
        sections.update(self._learned)
        doc = {"format": FORMAT, "version": VERSION, "boot_id": self._boot_id, "sections": sections}
        try:
            Root(self.root_path).write_file(CACHE, json.dumps(doc, separators=(",", ":")), mode=0o600)
        except (NodeFileError, OSError):
            return False
        self._file, self._learned = sections, {}
        return True


def forget(root_path: str) -> bool:
    """Remove the file (revert: nodetune leaves nothing of its own behind); False where there was none or it is not
    nodetune's to remove (a link, not a regular file)."""
    try:
        return Root(root_path).remove(CACHE)
    except (NodeFileError, OSError):
        return False


def _loads(text: Optional[str]) -> Any:
    if text is None:
        return None
    import json

    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return None


def _valid_file(doc: Any, boot_id: Optional[str]) -> Dict[str, Dict[str, Any]]:
    """The sections of a file of this format and version, written under this boot; {} for anything else."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
        return {}
    if doc.get("boot_id") != boot_id or not isinstance(doc.get("sections"), dict):
        return {}
    return {name: entry for name, entry in doc["sections"].items()
            if isinstance(entry, dict) and set(entry) == {"evidence", "structure"}
            and isinstance(entry["structure"], str)}


def _read_own_file(root_path: str, rel: str) -> Optional[str]:
    """The text of ``rel`` under the root, reached without following any link (each folder opened with O_NOFOLLOW
    from the one before, as Root.write_file writes it), where it is a regular file of this user that nobody else may
    read or write; else None."""
    parts = rel.split("/")
    try:
        fd = os.open(root_path, _DIR_FLAGS)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            child = os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
        file_fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
    except OSError:  # missing, or a link on the way (ELOOP, ENOTDIR)
        return None
    finally:
        os.close(fd)
    try:
        st = os.fstat(file_fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077
                or st.st_size > _MAX_BYTES):
            return None
        chunks = []
        while True:
            chunk = os.read(file_fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(file_fd)


# --------------------------------------------------------------------------------------------- shape checks
# What a section's ``valid`` is made of: a structure from the file is used only where every field has its type. A
# structure comes from JSON, so a value's type is one of JSON's: a list's element types are checked as one set (at C
# speed: a 384-CPU node's sections hold ~20,000 numbers). bool is a type of its own there, never taken for an int.
_INT = {int}
_INT_OR_NONE = {int, type(None)}
_STR = {str}
_STR_OR_NONE = {str, type(None)}
_BOOL = {bool}
_BOOL_OR_NONE = {bool, type(None)}


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # a bool is an int


def are_ints(values: Any) -> bool:
    return isinstance(values, list) and set(map(type, values)) <= _INT


def are_ints_or_none(values: Any) -> bool:
    return isinstance(values, list) and set(map(type, values)) <= _INT_OR_NONE


def are_strs(values: Any) -> bool:
    return isinstance(values, list) and set(map(type, values)) <= _STR


def are_strs_or_none(values: Any) -> bool:
    return isinstance(values, list) and set(map(type, values)) <= _STR_OR_NONE


def are_bools(values: Any, allow_none: bool = False) -> bool:
    return isinstance(values, list) and set(map(type, values)) <= (_BOOL_OR_NONE if allow_none else _BOOL)


def are_lists_of(values: Any, check: Callable[[Any], bool]) -> bool:
    return isinstance(values, list) and all(check(v) for v in values)


def are_int_lists(values: Any, allow_none: bool = False) -> bool:
    return isinstance(values, list) and all((allow_none and v is None) or are_ints(v) for v in values)


def is_record(value: Any, fields: Dict[str, Callable[[Any], bool]]) -> bool:
    """A mapping with exactly these keys, each value passing its check."""
    return isinstance(value, dict) and len(value) == len(fields) and all(
        key in value and check(value[key]) for key, check in fields.items())


def same_length(*columns: List[Any]) -> bool:
    return len(set(len(column) for column in columns)) <= 1
