"""The bounded reader: special files refused before they are read or waited on, the cap enforced on the
bytes read (not on the size a file reports), lines read one capped line at a time, outputs written whole or
not at all, and the words for an output path that cannot be written."""

from __future__ import annotations

import errno
import os
import socket
import threading

import pytest

from rlflow.io import UnsafeFile, read_bytes, read_lines, read_text, why_unwritable, write_output


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


def test_lines_come_one_at_a_time_numbered_and_capped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b"one\n\n" + b"x" * 10 + b"\nhalf")
    assert list(read_lines(path, 10)) == [(1, b"one", True), (2, b"", True), (3, b"x" * 10, True), (4, b"half", False)]
    with pytest.raises(UnsafeFile, match="line 3 holds more than 9 bytes"):
        list(read_lines(path, 9))
    with pytest.raises(UnsafeFile, match="character device"):
        list(read_lines("/dev/zero", 10))


def test_an_output_replaces_the_old_file_whole_and_keeps_its_mode(tmp_path):
    target = tmp_path / "curve.png"
    target.write_bytes(b"old")
    target.chmod(0o640)
    write_output(target, b"new picture")
    assert target.read_bytes() == b"new picture" and (target.stat().st_mode & 0o777) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["curve.png"], "no temporary file left"
    fresh = tmp_path / "fresh.svg"
    write_output(fresh, b"<svg/>")
    umask = os.umask(0)
    os.umask(umask)
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~umask, "a new output gets what a plain open gives it"


def test_a_full_disk_leaves_the_previous_output_and_no_partial_one(tiny_disk):
    target = tiny_disk / "curve.png"
    target.write_bytes(b"previous")
    with pytest.raises(OSError) as caught:
        write_output(target, b"x" * (256 << 10))
    assert caught.value.errno == errno.ENOSPC
    assert why_unwritable(target, caught.value) == f"{target}: cannot write: No space left on device"
    assert target.read_bytes() == b"previous" and [p.name for p in tiny_disk.iterdir()] == ["curve.png"]


def test_devices_are_written_directly_and_their_errors_raised(tmp_path):
    write_output("/dev/null", b"anything")
    with pytest.raises(OSError) as caught:
        write_output("/dev/full", b"x")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == "/dev/full"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OSError) as caught:  # nobody reads it: at once, not a wait for a reader
        write_output(fifo, b"x")
    assert caught.value.errno == errno.ENXIO
    with pytest.raises(IsADirectoryError):
        write_output(tmp_path, b"x")
