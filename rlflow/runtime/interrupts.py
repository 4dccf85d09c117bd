"""Ctrl-C that is never lost: a SIGINT stops the run at the latest at the next stage boundary.

Python delivers SIGINT as a KeyboardInterrupt in the main thread between two bytecodes. When
that moment falls inside a destructor (Ray's ObjectRef.__del__ runs all the time in a driver)
or a weakref callback, the interpreter prints "Exception ignored in ..." and carries on, and the
run finishes as if nothing had been asked. ``guard()`` records the request as well as raising
it, and the step loop calls ``raise_if_requested()`` between stages, so a swallowed Ctrl-C
still stops the run one stage later.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_requested = threading.Event()


def _on_sigint(signum, frame) -> None:
    _requested.set()
    raise KeyboardInterrupt


@contextmanager
def guard() -> Iterator[None]:
    """Within the block, SIGINT is recorded and raised; the previous handler comes back after.

    Off the main thread (where Python cannot install handlers) the block runs unguarded.
    """
    _requested.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _requested.clear()


def raise_if_requested() -> None:
    """Raise KeyboardInterrupt if a Ctrl-C came in and was swallowed on its way."""
    if _requested.is_set():
        raise KeyboardInterrupt
