"""Ctrl-C (and SIGTERM) that is never lost: either stops the run at the latest at the next stage boundary.

Design notes: docs/design/supervise.md.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """The run got SIGTERM: it stops as on Ctrl-C (exit status 143 from ``rlflow run``)."""


_RAISES = {signal.SIGINT: KeyboardInterrupt, signal.SIGTERM: Terminated}
_requested: list[type[KeyboardInterrupt]] = []  # what came in, until the guard ends
_lock = threading.Lock()


def _on_signal(signum, frame) -> None:
    kind = _RAISES[signal.Signals(signum)]
    with _lock:
        _requested.append(kind)
    raise kind


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def guard() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM are recorded and raised; the previous handlers come back after.

    Off the main thread (where Python cannot install handlers) the block runs unguarded.
    """
    _requested.clear()
    if not _in_main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _on_signal) for signum in _RAISES}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _requested.clear()


@contextmanager
def restore_after_ray() -> Iterator[None]:
    """Around ``ray.init``: whatever SIGTERM handler was in place before is in place after."""
    if not _in_main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)


def raise_if_requested() -> None:
    """Raise what came in (KeyboardInterrupt or Terminated) if a signal was swallowed on its way."""
    with _lock:
        kind = _requested[-1] if _requested else None
    if kind is not None:
        raise kind
