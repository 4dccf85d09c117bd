"""trim_heap: glibc's malloc_trim where there is one, harmless to call at any time."""

from __future__ import annotations

import platform
import sys

import pytest

from rlflow.runtime.memory import trim_heap


def _rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_freed_heap_goes_back_to_the_system():
    before = _rss_mib()
    chunks = [bytearray(64 * 1024) for _ in range(3_000)]  # ~200 MB in blocks under the mmap threshold: the heap
    chunks = chunks[1::2]  # every other one freed: holes glibc keeps unless trimmed
    grown = _rss_mib()
    assert trim_heap() is True
    assert _rss_mib() < grown - 50, f"rss {before:.0f} -> {grown:.0f} -> {_rss_mib():.0f} MiB"
    del chunks


def test_calling_it_again_and_again_is_harmless():
    assert len({trim_heap() for _ in range(3)}) == 1  # the same answer each time, nothing raised
