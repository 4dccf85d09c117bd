"""Read a data file as UTF-8 text, reporting a byte that is not UTF-8 as a ``DataError``.

Data files (records, prompt templates) are UTF-8 by contract. A stray byte (a Latin-1 export,
a truncated multi-byte character) is a user's data problem, so it gets the same one-line
treatment as every other data error: the file, the line, the byte offset and the byte, and how
to fix it; never a decoder traceback.
"""

from __future__ import annotations

from pathlib import Path

from rlflow.errors import DataError


def read_utf8(path: Path) -> str:
    """The text of ``path``; ``OSError`` passes through for the caller to word."""
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DataError(
            f"{path}:{line}: byte 0x{raw[exc.start]:02x} at offset {exc.start} is not UTF-8 "
            f"({exc.reason}); save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"
        ) from None
