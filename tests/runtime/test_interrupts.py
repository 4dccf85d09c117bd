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


def test_sigterm_is_raised_as_terminated_and_recorded_like_ctrl_c():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(interrupts.Terminated):
        with interrupts.guard():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    assert signal.getsignal(signal.SIGTERM) is before
    assert issubclass(interrupts.Terminated, KeyboardInterrupt), "the same clean-up as Ctrl-C runs"


def test_a_handler_replaced_inside_restore_after_ray_comes_back():
    """What ray.init does to SIGTERM (its stack-dumping handler) does not outlive the block."""
    with interrupts.guard():
        ours = signal.getsignal(signal.SIGTERM)
        with interrupts.restore_after_ray():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        assert signal.getsignal(signal.SIGTERM) is ours
