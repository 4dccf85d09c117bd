"""rlflow.runtime.interrupts: a Ctrl-C swallowed by a destructor still stops the run."""

from __future__ import annotations

import os
import signal
import time

import pytest

from rlflow.runtime import interrupts


class _SwallowsCtrlC:
    """Receives SIGINT inside __del__, where Python prints "Exception ignored" and goes on."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallowed Ctrl-C
def test_a_ctrl_c_lost_in_a_destructor_is_raised_at_the_next_check():
    with interrupts.guard():
        interrupts.raise_if_requested()  # nothing asked yet
        obj = _SwallowsCtrlC()
        del obj  # the KeyboardInterrupt dies inside __del__
        with pytest.raises(KeyboardInterrupt):
            interrupts.raise_if_requested()


def test_the_guard_raises_at_once_and_restores_the_previous_handler():
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with interrupts.guard():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
    assert signal.getsignal(signal.SIGINT) is before
    interrupts.raise_if_requested()  # the request ended with the guard
