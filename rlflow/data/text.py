"""Read a data file as UTF-8 text, reporting a byte that is not UTF-8 as a ``DataError``.

Data files (records, prompt templates) are UTF-8 by contract. A stray byte (a Latin-1 export,
a truncated multi-byte character) is a user's data problem, so it gets the same one-line
treatment as every other data error: the file, the line, the byte offset and the byte, and how
to fix it; never a decoder traceback. Files are read through ``rlflow.io`` (regular files only,
at most ``limit`` bytes).
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
