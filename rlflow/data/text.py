"""Read a data file as UTF-8 text, reporting a byte that is not UTF-8 as a ``DataError``.

Design notes: docs/design/data.md.
"""

from __future__ import annotations

from pathlib import Path

from rlflow.errors import DataError
from rlflow.io import read_bytes

TEXT_BYTES = 16 << 20  # a prompt template or a small data file


def read_utf8(path: Path, limit: int = TEXT_BYTES) -> str:
    """The text of ``path``; ``OSError`` (a special file, one over ``limit`` bytes) passes through for the caller
    to word."""
    return decode_utf8(read_bytes(path, limit), path)


def decode_utf8(raw: bytes, path: Path, offset: int = 0, line: int = 1) -> str:
    """``raw`` (bytes of ``path`` from byte ``offset``, on line ``line``) as text; a ``DataError`` at its first
    byte that is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = line + raw.count(b"\n", 0, exc.start)
        raise DataError(
            f"{path}:{at}: byte 0x{raw[exc.start]:02x} at offset {offset + exc.start} is not UTF-8 "
            f"({exc.reason}); save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"
        ) from None
