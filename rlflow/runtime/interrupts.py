"""Ctrl-C (and SIGTERM) that is never lost: either stops the run at the latest at the next stage boundary.

Python delivers SIGINT as a KeyboardInterrupt in the main thread between two bytecodes. When
that moment falls inside a destructor (Ray's ObjectRef.__del__ runs all the time in a driver)
or a weakref callback, the interpreter prints "Exception ignored in ..." and carries on, and the
run finishes as if nothing had been asked. ``guard()`` records the request as well as raising
it, and the step loop calls ``raise_if_requested()`` between stages, so a swallowed Ctrl-C
still stops the run one stage later.

SIGTERM (a scheduler ending a job, ``kill``) is handled the same way, raised as ``Terminated``
(a KeyboardInterrupt, so the same clean-up runs: pools stopped, remote backends destroyed).
``ray.init`` installs Ray's own SIGTERM handler, which prints a stack dump and ends the process
with no clean-up; ``restore_after_ray`` puts the guard's handler back.
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
