# -*- coding: utf-8 -*-
# Copyright: nodetune contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The one layer that touches node files.

Every read and write of sysfs, procfs and /etc goes through a :class:`Root`. A Root owns a directory
(``/`` on a real node, a simulated or captured tree in tests) and resolves every path *inside* it, the way
``openat2(RESOLVE_IN_ROOT)`` would: ``..`` stops at the root and absolute symlinks found inside a captured
tree are re-anchored at the root instead of escaping to the host's own ``/sys``. That is what makes it safe
to point discovery at a capture while running as root on a real machine.

OS errors are turned into :class:`NodeFileError` subclasses whose messages say what the kernel meant
(a managed IRQ, a value out of range, a read-only mount), because a bare ``OSError: [Errno 5]`` teaches
an operator nothing.
"""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: they are postponed, so typing is never imported at run time
    from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

_MAX_SYMLINKS = 40
CPU_DIR = "sys/devices/system/cpu"


def number_suffix(name: str, prefix: str) -> Optional[int]:
    """``n`` where ``name`` is ``prefix`` then ASCII digits (``cpu12`` -> 12), else None."""
    digits = name[len(prefix):] if name.startswith(prefix) else ""
    return int(digits) if digits and all("0" <= c <= "9" for c in digits) else None


_default_backend: Optional[Any] = None


def use_backend(backend: Optional[Any]) -> None:
    """The write backend of every Root created without one from now on in this process (None: the node's kernel).

    A backend has ``attach(root)``, ``write(root, rel, value)`` (raising OSError like the kernel) and
    ``services(root)``. Only the lab sets one (nodetune.lab's modules install its simulated kernel): the
    production modules never import it, and a file on the node never selects it.
    """
    global _default_backend
    _default_backend = backend


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_READ_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0)


_CHUNK = 65536
# Below this many files, a batch read opens each file by its full path (see Root._batch_base).
_BATCH_MIN_FILES = 16
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
# Whole files (configuration under /etc, the journal) are reached from an fd of the root directory one component at a
# time, each opened with O_NOFOLLOW relative to the one before: no link anywhere below the root is followed. That is
# what openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) gives, which Python's os module does not offer.
_NOFOLLOW_DIR_FLAGS = _DIR_FLAGS | _NOFOLLOW
TEMP_PREFIX = ".nodetune-"  # write_file's temporary files: a kill -9 between create and rename leaves one


def _read_rest(fd: int) -> bytes:
    """What is left of a file after a first full chunk (sysfs attributes fit in one; procfs may not)."""
    chunks = []
    while True:
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


class _Slow(Exception):
    """A batch's entry that needs the in-root resolution (Root._each_entry)."""


def _listed(path: str, flags: int, dir_fd: Optional[int]) -> List[str]:
    """Sorted entries of the directory ``path`` opened with ``flags`` (``O_NOFOLLOW``); [] where it is absent."""
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        return []
    except OSError:  # a link (ELOOP), a file (ENOTDIR), unreadable: Root.listdir answers as it always has
        raise _Slow() from None
    try:
        return sorted(os.listdir(fd))
    except OSError:
        return []
    finally:
        os.close(fd)


class NodeFileError(Exception):
    """A read or write of a node file failed; ``path`` is the path inside the root."""

    def __init__(self, message: str, path: str = "", errno_: Optional[int] = None) -> None:
        super().__init__(message)
        self.path = path
        self.errno = errno_


class PathEscapeError(NodeFileError):
    """A path tried to leave the root (absolute symlink loops, too many links, bad characters)."""


class NotFoundError(NodeFileError):
    """ENOENT: the file does not exist on this node (often normal: a VM has no GPU)."""


class ManagedIRQError(NodeFileError):
    """EIO/EPERM on /proc/irq/N/smp_affinity*: the kernel manages this IRQ and will not move it."""


class InvalidValueError(NodeFileError):
    """EINVAL/ERANGE/ENOSPC: the kernel refused the value."""


class BusyError(NodeFileError):
    """EBUSY: the setting is locked by another one (e.g. EPP under the performance governor)."""


class ReadOnlyError(NodeFileError):
    """EROFS/EACCES/EPERM: the file system or the file is read-only."""


class RootError(NodeFileError):
    """The root itself is unusable (missing, not a directory)."""


class SymlinkError(NodeFileError):
    """A whole file nodetune writes or deletes, or a directory on its way there, is a symbolic link: refused, because
    a link placed there (``etc/sysctl.d/90-nodetune-sysctl.conf -> /etc/shadow``) would make it write or delete
    another file. ``path`` is the link."""


class UnexpectedFileError(NodeFileError):
    """A file nodetune would delete is not the regular file it wrote: another kind of file, or edited since."""


def _classify(exc: OSError, rel: str, action: str, value: Optional[str] = None) -> NodeFileError:
    code = exc.errno
    what = "%s %s" % (action, rel)
    if value is not None:
        what = "%s %r to %s" % (action, value, rel)
    is_irq = rel.startswith("proc/irq/") and "affinity" in rel
    if is_irq and code in (errno.EIO, errno.EPERM, errno.EACCES):
        return ManagedIRQError(
            "%s failed: the kernel manages this IRQ (%s); its affinity cannot be set from user space, "
            "only observed" % (what, os.strerror(code or 0)), rel, code)
    if code == errno.ENOENT:
        return NotFoundError("%s failed: no such file on this node" % what, rel, code)
    if code in (errno.ENOSPC, errno.EDQUOT) and not rel.startswith(("sys/", "proc/")):
        # a whole file (the journal, /etc): the file system is full, no kernel judged a value
        return NodeFileError("%s failed: the file system is full (%s)" % (what, os.strerror(code)), rel, code)
    if code in (errno.EINVAL, errno.ERANGE, errno.ENOSPC, errno.EOVERFLOW):
        return InvalidValueError("%s failed: the kernel rejected the value (%s)" % (what, os.strerror(code)),
                                 rel, code)
    if code == errno.EBUSY:
        return BusyError("%s failed: the setting is busy or locked by another setting (%s)"
                         % (what, os.strerror(code)), rel, code)
    if code in (errno.EACCES, errno.EPERM) and action == "reading":
        return NodeFileError("%s failed: not readable (%s)" % (what, os.strerror(code)), rel, code)
    if code in (errno.EROFS, errno.EACCES, errno.EPERM):
        return ReadOnlyError("%s failed: read-only (%s)" % (what, os.strerror(code)), rel, code)
    return NodeFileError("%s failed: %s" % (what, os.strerror(code or 0) if code else exc), rel, code)


class Root(object):
    """A node's file system seen from ``path`` (default ``/``).

    Paths given to the methods are relative to the root (a leading ``/`` is allowed and ignored), so
    ``Root('/tmp/node').read('sys/devices/system/cpu/online')`` reads ``/tmp/node/sys/...``.
    """

    def __init__(self, path: str = "/", backend: Optional[Any] = None) -> None:
        if not isinstance(path, str) or not path:
            raise RootError("nodetune_root must be a non-empty path, got %r" % (path,))
        if "\x00" in path:
            raise RootError("nodetune_root %r contains a NUL byte" % (path,))
        real = os.path.realpath(path)
        if not os.path.isdir(real):
            raise RootError("nodetune_root %r does not exist or is not a directory" % (path,), path)
        if real == "/" and os.path.abspath(path).strip("/"):
            # A link (or a chain of them) that leads to the machine's own /: tuning it must be asked for by name.
            raise RootError("nodetune_root %r resolves to '/', this machine itself; refusing a path that only "
                            "leads there through a symbolic link (give '/' itself to target this machine)"
                            % (path,), path)
        self.path = real
        self.is_host = real == "/"
        # Who answers writes to kernel attributes: None is the node's own kernel. The lab passes its simulated
        # kernel explicitly (nodetune.lab); nothing found on the node ever selects it.
        self.backend = backend if backend is not None else _default_backend
        # Resolved directories (relative components -> relative real path); sysfs walks reuse prefixes a lot.
        self._dir_cache: Dict[str, str] = {}
        # Directories as callers name them (lexical, may contain links) -> resolved inner path. Filled by
        # _dir() and, for free, by subdirs() from the d_type of each entry, so that a walk over thousands of
        # /proc/irq/N directories resolves nothing link by link.
        self._resolved_dirs: Dict[str, str] = {}
        if self.backend is not None:
            self.backend.attach(self)

    def __repr__(self) -> str:
        return "Root(%r)" % self.path

    def check_node(self) -> None:
        """Refuse a root that is not a node's file system: no ``sys/devices/system/cpu/cpuN`` at all (an empty
        folder, one holding only an empty ``sys/``). Discovery would report everything absent and an apply would
        write ``etc/`` and ``var/lib/nodetune`` into whatever directory was named."""
        if any(number_suffix(name, "cpu") is not None for name in self.listdir(CPU_DIR)):
            return
        raise RootError("nodetune_root %r does not look like a node's root: it has no %s/cpuN directories (a real "
                        "node and a simulated one always do); refusing to discover, tune or verify it"
                        % (self.path, "/" + CPU_DIR), self.path)

    # ---------------------------------------------------------------- path resolution
    @staticmethod
    def _parts(rel: str) -> List[str]:
        if "\x00" in rel:
            raise PathEscapeError("path %r contains a NUL byte" % (rel,), rel)
        return [p for p in rel.split("/") if p and p != "."]

    @staticmethod
    def _plain_split(rel: str) -> Optional[Tuple[str, str]]:
        """``(directory, name)`` of a path made of plain components only (no ``.``/``..``/empty ones, no name
        starting with a dot, no NUL), else None: such paths can take the memoised fast paths below."""
        key = rel.strip("/")
        if not key or "\x00" in key or "//" in key or "/." in key or key[0] == ".":
            return None
        head, _sep, name = key.rpartition("/")
        return head, name

    def _resolve(self, rel: str, follow_last: bool = True) -> str:
        """Return the real relative path (no leading slash) of ``rel`` with every link resolved inside root.

        A plain path resolves its directory through the memo of :meth:`_dir` (one dictionary lookup for a
        directory seen before), then looks at its last component only: the engine reads and writes thousands of
        files in a few hundred directories. Anything else (links in the last component, ``..``) takes the walk.
        """
        split = None if self.is_host else self._plain_split(rel)
        if split is not None and split[0]:
            head, name = split
            inner_dir = self._dir(head)
            key = inner_dir + "/" + name if inner_dir else name
            if key in self._dir_cache or not follow_last:
                return key
            try:
                st = os.lstat(self.path + "/" + key)
            except OSError:
                return key  # missing: the lexical path, the caller gets ENOENT from the real call
            if not stat.S_ISLNK(st.st_mode):
                if stat.S_ISDIR(st.st_mode):
                    self._dir_cache[key] = key
                return key
            # A link (a /sys/bus/pci/devices/<BDF> entry): the walk goes on from its target, as _walk would after
            # its own lstat of it, with that link counted.
            try:
                target = os.readlink(self.path + "/" + key)
            except OSError:
                return self._walk(rel, follow_last)
            return self._walk(target if target.startswith("/") else inner_dir + "/" + target, follow_last, 1, rel)
        return self._walk(rel, follow_last)

    def _walk(self, rel: str, follow_last: bool, hops: int = 0, asked: Optional[str] = None) -> str:
        """The walk of :meth:`_resolve`; ``hops`` links were followed already on the way to ``rel`` (``asked``,
        the path named in errors)."""
        parts = self._parts(rel)
        if self.is_host:
            # On a real node the root is '/', so ordinary resolution cannot escape anything.
            joined = "/" + "/".join(parts)
            if follow_last or not parts:
                return os.path.realpath(joined).lstrip("/")
            parent = os.path.realpath(os.path.dirname(joined))
            return os.path.join(parent, os.path.basename(joined)).lstrip("/")
        # Walk component by component, re-anchoring absolute link targets at the root. ``resolved`` is the
        # real path so far as one string; real directories seen are remembered (the cache maps each to
        # itself), so walking the thousandth /sys/devices/... path costs dictionary lookups, not lstat().
        cache = self._dir_cache
        resolved = ""
        pending = parts[::-1]
        while pending:
            part = pending.pop()
            if part == "..":
                resolved = resolved.rpartition("/")[0]
                continue
            if part == ".":
                continue
            key = resolved + "/" + part if resolved else part
            if key in cache:
                resolved = key
                continue
            if not pending and not follow_last:
                resolved = key
                break
            full = self.path + "/" + key if self.path != "/" else "/" + key
            try:
                st = os.lstat(full)
            except OSError:
                # Missing component: keep the lexical path, the caller gets ENOENT from the real call.
                resolved = key
                continue
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > _MAX_SYMLINKS:
                    raise PathEscapeError("too many levels of symbolic links resolving %r inside %s"
                                          % (asked or rel, self.path), asked or rel, errno.ELOOP)
                target = os.readlink(full)
                if target.startswith("/"):
                    resolved = ""
                pending.extend(reversed(self._parts(target)))
                continue
            resolved = key
            if stat.S_ISDIR(st.st_mode):
                cache[key] = key
        return resolved

    def real(self, rel: str) -> str:
        """Absolute host path of ``rel``, guaranteed inside the root."""
        inner = self._resolve(rel)
        return os.path.join(self.path, inner) if inner else self.path

    def inner(self, rel: str) -> str:
        """``rel`` with links resolved, as a path relative to the root (for reporting and link targets)."""
        return self._resolve(rel)

    # ---------------------------------------------------------------- reads
    # Read-side methods treat a path that cannot be resolved (a link loop in a damaged tree) like an absent
    # one: absence is normal for discovery. Writes and read_strict() raise PathEscapeError instead.
    def exists(self, rel: str) -> bool:
        split = None if self.is_host else self._plain_split(rel)
        if split is not None and split[0]:
            # One lstat under the memoised directory answers for anything but a link (which takes the walk).
            try:
                inner_dir = self._dir(split[0])
                st = os.lstat(self.path + "/" + (inner_dir + "/" if inner_dir else "") + split[1])
            except (OSError, PathEscapeError):
                return False
            if not stat.S_ISLNK(st.st_mode):
                return True
        try:
            return os.path.exists(self.real(rel))
        except PathEscapeError:
            return False

    def isdir(self, rel: str) -> bool:
        try:
            return os.path.isdir(self.real(rel))
        except PathEscapeError:
            return False

    def _dir(self, rel: str) -> str:
        """Resolved inner path of a directory, memoised (directories do not move while a Root lives)."""
        key = rel.strip("/")
        hit = self._resolved_dirs.get(key)
        if hit is not None:
            return hit
        inner = self._resolve(key)
        if inner in self._dir_cache or os.path.isdir(os.path.join(self.path, inner)):
            self._resolved_dirs[key] = inner
            self._resolved_dirs.setdefault(inner, inner)
        return inner

    def listdir(self, rel: str) -> List[str]:
        """Sorted entries of a directory; an absent directory is an empty list (absence is normal)."""
        try:
            inner = self._dir(rel)
            return sorted(os.listdir(self.path + "/" + inner if inner else self.path))
        except (OSError, PathEscapeError):
            return []

    def subdirs(self, rel: str) -> List[str]:
        """Sorted names of the plain subdirectories (not links) of a directory, remembered as resolved.

        For walks over thousands of sibling directories (``proc/irq/N``): reading inside them afterwards
        costs no path resolution at all, because a plain directory inside a resolved one cannot escape.
        """
        key = rel.strip("/")
        names: List[str] = []
        try:
            inner = self._dir(key)
            with os.scandir(self.path + "/" + inner if inner else self.path) as entries:
                for entry in entries:
                    try:
                        if not entry.is_dir(follow_symlinks=False):
                            continue
                    except OSError:
                        continue
                    names.append(entry.name)
                    child = inner + "/" + entry.name if inner else entry.name
                    self._resolved_dirs[key + "/" + entry.name if key else entry.name] = child
                    self._dir_cache[child] = child  # deeper paths (cpuN/topology) resolve without lstat too
        except (OSError, PathEscapeError):
            return []
        names.sort()
        return names

    def read(self, rel: str, default: Optional[str] = None, strip: bool = True) -> Optional[str]:
        """Text of a file, or ``default`` where it does not exist or cannot be read.

        sysfs attributes that exist but fail to read (EIO on some PCI attributes, EINVAL on write-only
        files) are treated like absent ones: discovery reports what it could see and never crashes.
        """
        try:
            data = self._read_bytes(rel)
        except (OSError, ValueError, PathEscapeError):  # ValueError: a NUL byte in a path on the host
            return default
        text = data.decode("utf-8", "replace")
        if "\r" in text:  # universal newlines, as open() in text mode gave
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        return text.strip() if strip else text

    def _read_bytes(self, rel: str) -> bytes:
        """The bytes of a file: one open, one read for sysfs-sized files, one close.

        On the host (``/``) nothing can escape, so the kernel resolves the path. Elsewhere a plain path opens its
        last component with ``O_NOFOLLOW`` under its memoised directory; a link there (ELOOP) takes the full
        in-root resolution, as does any other path.
        """
        if self.is_host:
            fd = os.open("/" + rel.lstrip("/"), _READ_FLAGS & ~_NOFOLLOW)
        else:
            split = self._plain_split(rel)
            fd = -1
            if split is not None and split[0]:
                inner_dir = self._dir(split[0])
                try:
                    fd = os.open(self.path + "/" + (inner_dir + "/" if inner_dir else "") + split[1], _READ_FLAGS)
                except OSError as exc:
                    if exc.errno != errno.ELOOP:
                        raise
            if fd < 0:
                fd = os.open(self.real(rel), _READ_FLAGS)
        try:
            data = os.read(fd, _CHUNK)
            if len(data) == _CHUNK:
                data += _read_rest(fd)
        finally:
            os.close(fd)
        return data

    def read_attrs(self, rel_dir: str, names: Iterable[str], modes: Optional[Dict[str, Optional[int]]] = None,
                   mode_names: Optional[Iterable[str]] = None) -> Dict[str, Optional[str]]:
        """Several attribute files of one directory: ``{name: text or None}``, stripped.

        ``modes``, when given, receives the permission bits of the files named in ``mode_names`` (all
        of them by default), ``None`` where the file is absent. See :meth:`read_attrs_many`.
        """
        names = list(names)
        wanted = names if mode_names is None else [n for n in mode_names if n in names]
        mode_name = wanted[0] if modes is not None and len(wanted) == 1 else None
        texts, mode = self.read_attrs_many([rel_dir], names, mode_name)[0]
        if modes is not None:
            for name in wanted:
                modes[name] = mode if mode_name is not None else (
                    self.mode(rel_dir.rstrip("/") + "/" + name) if texts[names.index(name)] is not None else None)
        return dict(zip(names, texts))

    def read_attrs_many(self, rel_dirs: Iterable[str], names: Sequence[str],
                        mode_name: Optional[str] = None) -> List[Tuple[List[Optional[str]], Optional[int]]]:
        """The same attribute files of many sibling directories (``proc/irq/*``, ``cpu*/topology``).

        Returns, per directory, the stripped texts in ``names`` order (None where absent or unreadable)
        and the permission bits of ``mode_name`` (None where not asked or absent).

        Discovery reads thousands of tiny files; resolving every full path link by link would dominate its
        run time. Each directory is resolved inside the root once (memoised, and free for plain
        subdirectories of a listed directory), then each file is opened with ``O_NOFOLLOW`` straight under
        it: a name that turns out to be a symlink takes the full in-root resolution, so nothing escapes.
        The mode comes from ``fstat`` of the same open (managed-IRQ detection costs no path lookup).
        A batch opens the directory the resolved directories share once and opens each file relative to it,
        so the kernel walks only the last components of each path.
        """
        results: List[Tuple[List[Optional[str]], Optional[int]]] = []
        inner_dirs: List[Optional[str]] = []
        for rel_dir in rel_dirs:
            try:
                inner_dirs.append(self._dir(rel_dir))
            except PathEscapeError:
                inner_dirs.append(None)
        base_fd, base_prefix = self._batch_base(inner_dirs, len(names))
        os_open, os_read, os_close, os_fstat = os.open, os.read, os.close, os.fstat
        flags = _READ_FLAGS
        dir_fd = base_fd if base_fd >= 0 else None
        prefix_at = len(base_prefix)
        root_prefix = self.path.rstrip("/") + "/"
        try:
            for rel_dir, inner_dir in zip(rel_dirs, inner_dirs):
                if inner_dir is None:
                    results.append(([None] * len(names), None))
                    continue
                if dir_fd is not None:
                    # inner_dir lies under the base directory; the root itself (a link to "/" inside the tree) is
                    # the base with nothing after it, never "/" (an absolute name would ignore dir_fd)
                    prefix = (inner_dir + "/")[prefix_at:] if inner_dir else ""
                else:
                    prefix = root_prefix + inner_dir + "/" if inner_dir else root_prefix
                texts: List[Optional[str]] = []
                mode: Optional[int] = None
                for name in names:
                    try:
                        fd = os_open(prefix + name, flags, dir_fd=dir_fd)
                    except OSError as exc:
                        text = None
                        if exc.errno == errno.ELOOP:
                            inner = rel_dir.rstrip("/") + "/" + name
                            text = self.read(inner)
                            if name == mode_name:
                                mode = self.mode(inner)
                        texts.append(text)
                        continue
                    try:
                        if name == mode_name:
                            mode = os_fstat(fd).st_mode & 0o7777
                        data = os_read(fd, _CHUNK)
                        if len(data) == _CHUNK:
                            data += _read_rest(fd)
                        texts.append(data.decode("utf-8", "replace").strip())
                    except OSError:
                        texts.append(None)
                    finally:
                        os_close(fd)
                results.append((texts, mode))
        finally:
            if base_fd >= 0:
                os_close(base_fd)
        return results

    def _batch_base(self, inner_dirs: List[Optional[str]], files_per_dir: int) -> Tuple[int, str]:
        """``(fd, inner path + "/")`` of the deepest directory holding every resolved directory of a batch, opened
        for relative opens; ``(-1, "")`` for a small batch (the extra open would cost more than it saves) or where
        it cannot be opened (a missing directory: the reads then fail as they would have)."""
        known = [inner for inner in inner_dirs if inner is not None]
        if len(known) * files_per_dir < _BATCH_MIN_FILES:
            return -1, ""
        base = known[0]
        for inner in known:
            while base and inner != base and not inner.startswith(base + "/"):
                base = base.rpartition("/")[0]
        try:
            fd = os.open(self.path + "/" + base if base else self.path, _DIR_FLAGS)
        except OSError:
            return -1, ""
        return fd, base + "/" if base else ""

    def listdir_many(self, rel_dirs: Sequence[str], name: str) -> List[List[str]]:
        """``listdir(rel_dir + "/" + name)`` of each directory (a PCI function's ``msi_irqs``), in one batch: each
        entry opened with ``O_NOFOLLOW`` under its memoised directory, as :meth:`read_attrs_many` opens files; an
        entry that is anything but a plain directory or an absent one (a link: ELOOP) is listed by :meth:`listdir`
        itself, so the answers are the same."""
        flags = _NOFOLLOW_DIR_FLAGS
        return self._each_entry(rel_dirs, name, lambda path, dir_fd: _listed(path, flags, dir_fd),
                                self.listdir, [])

    def readlink_names_many(self, rel_dirs: Sequence[str], name: str) -> List[Optional[str]]:
        """``readlink_name(rel_dir + "/" + name)`` of each directory (a PCI function's ``driver``), in one batch."""
        def basename_of(path: str, dir_fd: Optional[int]) -> Optional[str]:
            try:
                return os.readlink(path, dir_fd=dir_fd).rpartition("/")[2]
            except OSError:  # absent (EINVAL: not a link; readlink_name gives None for both)
                return None

        return self._each_entry(rel_dirs, name, basename_of, None, None)

    def _each_entry(self, rel_dirs: Sequence[str], name: str, take: Callable[[str, Optional[int]], Any],
                    slow: Optional[Callable[[str], Any]], unresolved: Any) -> List[Any]:
        """``take(path, dir_fd)`` of ``name`` under each resolved directory, relative to the batch's base directory
        where there is one (:meth:`_batch_base`); ``unresolved`` for a directory that cannot be resolved inside the
        root. ``take`` raises :class:`_Slow` where the entry needs the in-root resolution: ``slow(rel)`` answers."""
        inner_dirs: List[Optional[str]] = []
        if self.is_host:  # '/': the kernel resolves every path, nothing can escape
            inner_dirs = [rel_dir.strip("/") for rel_dir in rel_dirs]
            base_fd, base_prefix = -1, ""
        else:
            for rel_dir in rel_dirs:
                try:
                    inner_dirs.append(self._dir(rel_dir))
                except PathEscapeError:
                    inner_dirs.append(None)
            base_fd, base_prefix = self._batch_base(inner_dirs, 1)
        prefix_at = len(base_prefix)
        root_prefix = self.path.rstrip("/") + "/"
        found: List[Any] = []
        try:
            for rel_dir, inner_dir in zip(rel_dirs, inner_dirs):
                if inner_dir is None:
                    found.append(unresolved)
                    continue
                if base_fd >= 0:
                    path, dir_fd = ((inner_dir + "/")[prefix_at:] if inner_dir else "") + name, base_fd
                else:
                    path, dir_fd = root_prefix + (inner_dir + "/" if inner_dir else "") + name, None
                try:
                    found.append(take(path, dir_fd))
                except _Slow:
                    found.append(slow(rel_dir.rstrip("/") + "/" + name) if slow is not None else unresolved)
        finally:
            if base_fd >= 0:
                os.close(base_fd)
        return found

    def read_strict(self, rel: str) -> str:
        """Text of a file; raises a typed :class:`NodeFileError` when it cannot be read."""
        try:
            data = self._read_bytes(rel)  # the same open as read(): where read() gave None, this says why
        except OSError as exc:
            raise _classify(exc, rel.lstrip("/"), "reading") from None
        return data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n").strip()

    def read_int(self, rel: str, default: Optional[int] = None) -> Optional[int]:
        text = self.read(rel)
        if text is None:
            return default
        try:
            return int(text, 0) if text.lower().startswith("0x") else int(text)
        except ValueError:
            return default

    def readlink_name(self, rel: str) -> Optional[str]:
        """Basename of a symlink's target (``device/driver`` -> ``mlx5_core``), or None."""
        try:
            return os.path.basename(os.readlink(os.path.join(self.path, self._resolve(rel, follow_last=False))))
        except (OSError, PathEscapeError):
            return None

    def mode(self, rel: str) -> Optional[int]:
        try:
            return stat.S_IMODE(os.stat(self.real(rel)).st_mode)
        except (OSError, PathEscapeError):
            return None

    def walk_files(self, rel: str) -> Iterator[str]:
        """Relative paths of regular files below ``rel`` (links not followed), sorted."""
        base = self.real(rel)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                yield os.path.relpath(full, self.path)

    # ---------------------------------------------------------------- writes
    def write(self, rel: str, value: str) -> None:
        """Write a value to a kernel attribute (sysfs/procfs), as ``echo value > file`` would.

        Files without any write permission bit are refused up front: on kernels >= 6.12 managed IRQ
        affinity files are mode 0444, and root would otherwise bypass the bits on a plain-file tree.
        """
        target = self.real(rel)
        clean = rel.lstrip("/")
        try:
            st = os.stat(target)
        except OSError as exc:
            raise _classify(exc, clean, "writing", value) from None
        if stat.S_ISREG(st.st_mode) and not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
            raise _classify(OSError(errno.EPERM, "read-only attribute"), clean, "writing", value) from None
        try:
            if self.backend is not None:
                self.backend.write(self, clean, value)
                return
            # O_NOFOLLOW: target is resolved inside the root; a link swapped in since is not followed out of it.
            fd = os.open(target, os.O_WRONLY | os.O_TRUNC | _NOFOLLOW)
            try:
                os.write(fd, value.encode("utf-8"))
            finally:
                os.close(fd)
        except OSError as exc:
            raise _classify(exc, clean, "writing", value) from None

    # ---------------------------------------------------------------- whole files, never through a link
    # Kernel attributes (write above) resolve links inside the root: /sys/block/X is one. Whole files do not follow any.
    def write_file(self, rel: str, content: str, mode: int = 0o644) -> None:
        """Atomically create or replace a regular file (config files under /etc, the journal).

        Missing directories are created. Raises :class:`SymlinkError` where the file or any directory on its way is
        a symbolic link: a link swapped in after the plan's check (:meth:`refuse_links`) is caught here.
        """
        parts = self._file_parts(rel, "writing")
        clean = "/".join(parts)
        try:
            dir_fd = self._open_dir_nofollow(parts[:-1], clean, "writing", create=True)
            try:
                self._refuse_link_at(dir_fd, parts[-1], clean, clean, "writing")
                tmp = self._write_temp(dir_fd, content.encode("utf-8"), mode)
                try:
                    os.replace(tmp, parts[-1], src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # rename replaces a link itself
                except BaseException:
                    _unlink_quietly(tmp, dir_fd)
                    raise
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise _classify(exc, clean, "writing") from None

    def remove(self, rel: str, sha256: Optional[str] = None) -> bool:
        """Remove a regular file; returns False where it (or a directory on its way) did not exist.

        Refused with :class:`SymlinkError` where the file or a directory on its way is a symbolic link, and with
        :class:`UnexpectedFileError` where it is not a regular file or, with ``sha256``, no longer holds the content
        of that digest (what nodetune wrote there).
        """
        parts = self._file_parts(rel, "removing")
        clean = "/".join(parts)
        try:
            dir_fd = self._open_dir_nofollow(parts[:-1], clean, "removing")
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise _classify(exc, clean, "removing") from None
        try:
            self._refuse_link_at(dir_fd, parts[-1], clean, clean, "removing")
            st = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                raise UnexpectedFileError("removing /%s refused: it is not a regular file, so nodetune did not write "
                                          "it" % clean, clean)
            if sha256 is not None and _sha256_at(dir_fd, parts[-1]) != sha256:
                raise UnexpectedFileError("removing /%s refused: its content changed since nodetune wrote it; "
                                          "nodetune deletes only what it wrote" % clean, clean)
            os.unlink(parts[-1], dir_fd=dir_fd)
            return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise _classify(exc, clean, "removing") from None
        finally:
            os.close(dir_fd)

    def refuse_links(self, rel: str, action: str = "writing") -> None:
        """Raise :class:`SymlinkError` where ``rel`` or a directory on its way is a symbolic link (what
        :meth:`write_file` and :meth:`remove` would refuse); a missing part is fine (the write creates it)."""
        parts = self._file_parts(rel, action)
        clean = "/".join(parts)
        try:
            dir_fd = self._open_dir_nofollow(parts[:-1], clean, action)
        except OSError:  # (a SymlinkError is not one: it goes to the caller)
            return  # missing, or not a directory: the write itself says so
        try:
            self._refuse_link_at(dir_fd, parts[-1], clean, clean, action)
        finally:
            os.close(dir_fd)

    def _file_parts(self, rel: str, action: str) -> List[str]:
        """The components of a whole file's path; ``..`` stops at the root as everywhere in a Root (taken lexically,
        which is exact here: no component may be a link)."""
        parts: List[str] = []
        for part in self._parts(rel):
            if part != "..":
                parts.append(part)
            elif parts:
                parts.pop()
        if not parts:
            raise PathEscapeError("%s %r refused: it names the root itself, not a file below it" % (action, rel),
                                  rel.lstrip("/"))
        return parts

    def _open_dir_nofollow(self, parts: List[str], asked: str, action: str, create: bool = False) -> int:
        """fd of the directory ``parts`` names, opened component by component from the root without following a
        link (missing ones created where ``create``). Raises SymlinkError at a link, OSError otherwise."""
        fd = os.open(self.path, _DIR_FLAGS)
        try:
            for depth, name in enumerate(parts):
                try:
                    child = _open_child_dir(fd, name, create)
                except OSError as exc:
                    if exc.errno != errno.ENOENT:
                        self._refuse_link_at(fd, name, "/".join(parts[:depth + 1]), asked, action)
                    raise
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    @staticmethod
    def _refuse_link_at(dir_fd: int, name: str, where: str, asked: str, action: str) -> None:
        """Raise SymlinkError where ``name`` in ``dir_fd`` (``where`` below the root) is a symbolic link."""
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            return  # not a link (EINVAL) or not there
        what = "it is" if where == asked else "/%s, on the way to it, is" % where
        raise SymlinkError("%s /%s refused: %s a symbolic link (to %s); nodetune does not write or delete files "
                           "through symbolic links" % (action, asked, what, target), where)

    @staticmethod
    def _write_temp(dir_fd: int, data: bytes, mode: int) -> str:
        """Name of a new temporary file in ``dir_fd`` holding ``data`` with ``mode`` (created, never opened through
        a link)."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        while True:
            tmp = TEMP_PREFIX + os.urandom(6).hex()
            try:
                fd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
                break
            except FileExistsError:
                continue
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
        except BaseException:
            os.close(fd)
            _unlink_quietly(tmp, dir_fd)
            raise
        os.close(fd)
        return tmp


def _open_child_dir(dir_fd: int, name: str, create: bool) -> int:
    try:
        return os.open(name, _NOFOLLOW_DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise
    # (no contextlib.suppress here: contextlib imports functools, which the discover fast path must not load)
    try:  # noqa: SIM105
        os.mkdir(name, dir_fd=dir_fd)
    except FileExistsError:
        pass  # made meanwhile by another writer: opened below like any other
    return os.open(name, _NOFOLLOW_DIR_FLAGS, dir_fd=dir_fd)


def _unlink_quietly(name: str, dir_fd: int) -> bool:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        return False
    return True


def sha256_text(text: str) -> str:
    """The digest the journal records of a file nodetune wrote (see Root.remove)."""
    import hashlib  # only writers need it

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _sha256_at(dir_fd: int, name: str) -> str:
    import hashlib

    digest = hashlib.sha256()
    fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    try:
        while True:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            digest.update(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest()
