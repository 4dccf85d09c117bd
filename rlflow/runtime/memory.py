"""Handing freed heap memory back to the system: ``trim_heap`` (glibc's ``malloc_trim(0)``).

Elsewhere (macOS, musl) ``trim_heap`` does nothing. Design notes: docs/design/limits.md.
"""

from __future__ import annotations

import ctypes
import functools
import sys


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)  # the C library this process already runs on
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def trim_heap() -> bool:
    """Return freed heap memory to the system; False where that cannot be done (no glibc)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
