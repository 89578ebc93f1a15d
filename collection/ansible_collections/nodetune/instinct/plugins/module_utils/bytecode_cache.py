# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A bytecode cache for the imports of nodetune's modules on the node.

AnsiballZ runs a module from a zip file, and zipimport compiles every module it imports from source, at every
call, and never writes bytecode: for nodetune's modules that is more CPU than a no-op run's own work. Installed
first thing by each module, :class:`PayloadFinder` serves the payload's ``ansible.*`` and ``ansible_collections.*``
modules from code objects cached on the node, keyed by the SHA-256 of their source. A changed payload is a
different key, so a stale entry is never used.

Trust is that of CPython's own ``__pycache__``: the cache folder must belong to the effective user and give no
access to group or others, its parent must not be writable by anyone else, and each entry must be a regular
file of the effective user that nobody else may write. Anything else, or any error, and the module compiles
from its zip as Ansible would. The folder is ``~/.cache/nodetune/bytecode`` of the effective user
(``NODETUNE_BYTECODE_CACHE_DIR`` names another); ``NODETUNE_BYTECODE_CACHE=0`` turns the cache off.

Only the tune module outside check mode writes the cache (it writes the node anyway); check mode, verify and
discovery use the entries it wrote and write nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import stat
import sys
from importlib.machinery import ModuleSpec
from importlib.util import MAGIC_NUMBER

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: they are postponed, so typing is never imported at run time
    from types import CodeType, ModuleType
    from typing import Optional, Sequence, Set

SWITCH = "NODETUNE_BYTECODE_CACHE"
FOLDER = "NODETUNE_BYTECODE_CACHE_DIR"
PREFIXES = ("ansible.", "ansible_collections.")
_ARCHIVE_END = ".zip" + os.sep


def install(writes: bool = False) -> Optional[PayloadFinder]:
    """Put the finder first on ``sys.meta_path`` when this module runs from an AnsiballZ payload; None (and
    nothing installed) when the cache is off, the module runs from plain files, or the folder is not trusted.
    ``writes``: this module may create the folder and store entries, unless the run is in check mode."""
    if os.environ.get(SWITCH, "1") == "0":
        return None
    for finder in sys.meta_path:
        if isinstance(finder, PayloadFinder):
            return finder
    archive = payload_archive(__file__)
    if archive is None:
        return None
    writes = writes and not check_mode()
    folder = trusted_folder(os.environ.get(FOLDER) or default_folder(), create=writes)
    if folder is None:
        return None
    try:
        finder = PayloadFinder(archive, folder, writes=writes)
    except (OSError, ValueError):
        return None
    sys.meta_path.insert(0, finder)
    return finder


def check_mode() -> bool:
    """Whether this module call runs in check mode, from the arguments AnsiballZ hands to ``basic`` before the
    module starts; True when they cannot be read (then nothing is written)."""
    import json

    raw = getattr(sys.modules.get("ansible.module_utils.basic"), "_ANSIBLE_ARGS", None)
    try:
        return bool(json.loads(raw)["ANSIBLE_MODULE_ARGS"].get("_ansible_check_mode"))
    except (TypeError, ValueError, KeyError, AttributeError):
        return True


def payload_archive(path: str) -> Optional[str]:
    """The zip file a module path lies in (``/tmp/ansible_tune_payload_x/ansible_tune_payload.zip/...``)."""
    end = path.find(_ARCHIVE_END)
    if end < 0:
        return None
    archive = path[:end + 4]
    return archive if os.path.isfile(archive) else None


def default_folder() -> str:
    """``~/.cache/nodetune/bytecode`` of the effective user, from the password database: under become, HOME
    may still be the connecting user's."""
    import pwd

    try:
        home = pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        home = os.path.expanduser("~")
    return os.path.join(home, ".cache", "nodetune", "bytecode")


def trusted_folder(folder: str, create: bool = True) -> Optional[str]:
    """``folder`` (created 0700 when missing and ``create``) if it is a real folder of the effective user with no
    access for group or others and its parent is not writable by another user; else None."""
    uid = os.geteuid()
    try:
        if create:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        own = os.lstat(folder)
        parent = os.stat(os.path.dirname(os.path.abspath(folder)))
    except OSError:
        return None
    if not stat.S_ISDIR(own.st_mode) or own.st_uid != uid or own.st_mode & 0o077:
        return None
    if parent.st_uid not in (uid, 0) or parent.st_mode & 0o022 and not parent.st_mode & stat.S_ISVTX:
        return None
    return folder


class PayloadFinder:
    """Finds the payload's modules and loads them from the cache, compiling (and caching) on a miss."""

    def __init__(self, archive: str, folder: str, prefixes: Sequence[str] = PREFIXES, writes: bool = True) -> None:
        import zipfile

        self.writes = writes
        self.archive = archive
        self.folder = folder
        self.prefixes = tuple(prefixes)
        self.uid = os.geteuid()
        self.zip = zipfile.ZipFile(archive)
        self.names: Set[str] = set(self.zip.namelist())
        self.entries: Set[str] = set(os.listdir(folder))
        self.tag = sys.implementation.cache_tag or "python"
        self.hits = 0
        self.misses = 0

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[ModuleType] = None) -> Optional[ModuleSpec]:
        if not fullname.startswith(self.prefixes):
            return None
        base = fullname.replace(".", "/")
        for name, is_package in ((base + "/__init__.py", True), (base + ".py", False)):
            if name in self.names:
                spec = ModuleSpec(fullname, PayloadLoader(self, name), origin=self.archive + "/" + name,
                                  is_package=is_package)
                spec.has_location = True
                if is_package:
                    spec.submodule_search_locations = [self.archive + "/" + base]
                return spec
        return None

    def source(self, name: str) -> bytes:
        return self.zip.read(name)

    def code(self, name: str) -> CodeType:
        """The code of a payload file: from the cache when an entry for this exact source is trusted, else
        compiled (and stored)."""
        data = self.source(name)
        digest = hashlib.sha256(data).hexdigest()[:40]
        entry = "%s.%s.%s.pyc" % (name.replace("/", "."), digest, self.tag)
        header = MAGIC_NUMBER + digest.encode("ascii")
        if entry in self.entries:
            code = self._load(entry, header)
            if code is not None:
                self.hits += 1
                return code
        self.misses += 1
        # The name inside the payload, not the temporary path of this run, so a cached traceback stays readable.
        code = compile(data, name, "exec", dont_inherit=True)
        if self.writes:
            self._store(entry, header, code, name.replace("/", ".") + ".")
        return code

    def _load(self, entry: str, header: bytes) -> Optional[CodeType]:
        try:
            fd = os.open(os.path.join(self.folder, entry), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != self.uid or info.st_mode & 0o022:
                return None
            with os.fdopen(fd, "rb", closefd=False) as handle:
                blob = handle.read()
        except OSError:
            return None
        finally:
            os.close(fd)
        if not blob.startswith(header):
            return None
        try:
            return marshal.loads(blob[len(header):])
        except (EOFError, ValueError, TypeError):
            return None

    def _store(self, entry: str, header: bytes, code: CodeType, stem: str) -> None:
        """Write the entry atomically (a private temporary file renamed over it) and drop the entries of older
        sources of the same file. Best effort: a cache that cannot be written costs a compile, nothing else."""
        import tempfile

        temporary = None
        try:
            fd, temporary = tempfile.mkstemp(prefix=".new-", dir=self.folder)
            with os.fdopen(fd, "wb") as handle:
                handle.write(header + marshal.dumps(code))
            os.replace(temporary, os.path.join(self.folder, entry))
            temporary = None
            for old in [e for e in self.entries if e.startswith(stem) and e.endswith(self.tag + ".pyc")]:
                if old != entry and old[len(stem):].count(".") == 2:
                    os.unlink(os.path.join(self.folder, old))
                    self.entries.discard(old)
            self.entries.add(entry)
        except OSError:
            pass
        finally:
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)


class PayloadLoader:
    """Executes one payload file's (cached) code in its module."""

    def __init__(self, finder: PayloadFinder, name: str) -> None:
        self.finder = finder
        self.name = name

    def create_module(self, spec: ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        exec(self.finder.code(self.name), module.__dict__)  # the module's own code, as zipimport would run it

    def get_source(self, fullname: str) -> str:
        return self.finder.source(self.name).decode("utf-8")

    def is_package(self, fullname: str) -> bool:
        return self.name.endswith("/__init__.py")
