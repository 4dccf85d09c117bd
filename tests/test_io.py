"""The bounded reader: special files refused before they are read or waited on, the cap enforced on the
bytes read (not on the size a file reports), and the words for an output path that cannot be written."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from rlflow.io import UnsafeFile, read_bytes, read_text, why_unwritable


def _refused(path, kind: str) -> None:
    done = threading.Event()
    outcome: list = []

    def attempt() -> None:
        try:
            read_bytes(path, 1 << 20)
        except OSError as exc:
            outcome.append(exc)
        done.set()

    threading.Thread(target=attempt, daemon=True).start()
    assert done.wait(10), f"reading {path} blocked"
    (exc,) = outcome
    assert isinstance(exc, UnsafeFile) and kind in exc.strerror and exc.filename == str(path)


def test_a_fifo_is_refused_at_once_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    _refused(fifo, "FIFO")


def test_devices_folders_and_sockets_are_refused(tmp_path):
    _refused("/dev/zero", "character device")
    _refused(tmp_path, "folder")
    link = tmp_path / "zero.yaml"
    link.symlink_to("/dev/zero")
    _refused(link, "character device")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "s.sock"))
    try:
        _refused(tmp_path / "s.sock", "socket")
    finally:
        server.close()


def test_the_cap_holds_on_the_bytes_read_even_when_the_reported_size_is_zero(tmp_path):
    assert os.stat("/proc/self/status").st_size == 0
    assert "Name:" in read_text("/proc/self/status", 1 << 20)
    with pytest.raises(UnsafeFile, match="more than 16 bytes"):
        read_bytes("/proc/self/status", 16)
    big = tmp_path / "big.yaml"
    big.write_bytes(b"x" * 1001)
    assert read_bytes(big, 1001) == b"x" * 1001
    with pytest.raises(UnsafeFile, match="more than 1000 bytes"):
        read_bytes(big, 1000)


def test_a_missing_file_is_the_system_error():
    with pytest.raises(FileNotFoundError):
        read_bytes("/nonexistent/file.yaml", 10)


def test_an_output_path_under_a_file_names_the_file(tmp_path):
    (tmp_path / "afile").write_text("")
    target = tmp_path / "afile" / "sub" / "x.yaml"
    try:
        target.parent.mkdir(parents=True)
    except OSError as exc:
        assert (
            why_unwritable(target, exc) == f"{target}: cannot write there, {tmp_path / 'afile'} is a file, not a folder"
        )
    else:
        pytest.fail("mkdir under a file succeeded")
