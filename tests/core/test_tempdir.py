"""nodetune._tempdir: the TMPDIR of the ansible-playbook nodetune starts fits Ansible's socket path."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodetune import _tempdir


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a short path (the suite's tmp_path is too long to build socket paths of every length in)."""
    folder = tempfile.mkdtemp(prefix="nt-", dir="/tmp")
    try:
        yield Path(folder)
    finally:
        shutil.rmtree(folder)


def test_fits_matches_what_the_kernel_takes_for_a_socket(short_dir: Path) -> None:
    """At the limit fits() allows, multiprocessing's listener path binds; one byte longer, the kernel refuses it."""
    base = short_dir
    room = _tempdir.SOCKET_PATH_MAX - _tempdir.SOCKET_SUFFIX - len(os.fsencode(str(base))) - 1
    longest = base / ("d" * room)
    longest.mkdir()
    too_long = base / ("d" * (room + 1))
    too_long.mkdir()
    assert _tempdir.fits(str(longest)) and not _tempdir.fits(str(too_long))
    for folder, binds in ((longest, True), (too_long, False)):
        (folder / "pymp-12345678").mkdir()
        path = str(folder / "pymp-12345678" / "listener-12345678")
        with socket.socket(socket.AF_UNIX) as sock:
            if binds:
                sock.bind(path)
            else:
                with pytest.raises(OSError):
                    sock.bind(path)


def test_a_run_dir_in_tmpdir_where_it_fits(short_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(short_dir))
    folder, tmpdir = _tempdir.make_run_dir("nodetune-run-")
    assert Path(folder).parent == short_dir and tmpdir == os.path.join(folder, "tmp")
    assert os.stat(folder).st_mode & 0o777 == 0o700 and os.path.isdir(tmpdir)


def test_a_run_dir_elsewhere_where_tmpdir_is_too_long(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    long_tmp = tmp_path / ("x" * 100)
    long_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_tmp))
    folder, tmpdir = _tempdir.make_run_dir("nodetune-run-")
    try:
        assert os.path.dirname(folder) in _tempdir.FALLBACKS and _tempdir.fits(tmpdir)
    finally:
        shutil.rmtree(folder)


def test_no_folder_that_fits_is_one_line_naming_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    long_tmp = tmp_path / ("x" * 100)
    monkeypatch.setenv("TMPDIR", str(long_tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(long_tmp))
    monkeypatch.setattr(_tempdir, "FALLBACKS", (str(tmp_path / "absent"),))
    with pytest.raises(_tempdir.TempDirError) as caught:
        _tempdir.make_run_dir("nodetune-run-")
    message = str(caught.value)
    assert "\n" not in message and f"TMPDIR={str(long_tmp)!r}" in message and "TMPDIR=/tmp" in message
