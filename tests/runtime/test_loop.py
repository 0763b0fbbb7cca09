"""A process's background loop (tasks/runtime/loop.py): a failed step is tried again, and a wake
spent on a step that failed is not left to the next poll, nor tried again without a rest."""

from __future__ import annotations

import threading
import time

from tasks.runtime.loop import Loop


class Flaky(Loop):
    """Fails `failures` steps after the one every loop does when it starts (then records
    each step)."""

    name = "test-flaky"

    def __init__(self, failures: int, failure_pause: float | None = None) -> None:
        super().__init__(poll_seconds=60.0)  # a poll would never come within the test
        if failure_pause is not None:
            self.failure_pause = failure_pause
        self.failures = failures
        self.steps = 0
        self.started = threading.Event()
        self.done = threading.Event()

    def step(self) -> None:
        self.steps += 1
        if self.steps == 1:
            self.started.set()
            return
        if self.failures:
            self.failures -= 1
            raise RuntimeError("the database went away")
        self.done.set()


def started(loop: Flaky) -> Flaky:
    """Started and past its first step, so a wake is for the test's step, not that one."""
    loop.start()
    assert loop.started.wait(5.0)
    return loop


def test_a_wake_whose_step_failed_is_tried_again_after_the_pause_not_at_the_next_poll(caplog):
    loop = started(Flaky(failures=2, failure_pause=0.05))
    try:
        loop.wake()
        assert loop.done.wait(5.0), f"not tried again: {loop.steps} steps"
        assert loop.steps == 4
        assert caplog.text.count("a step failed") == 2
    finally:
        loop.stop()


def test_a_step_that_keeps_failing_is_tried_again_only_after_a_rest(caplog):
    loop = started(Flaky(failures=1_000))  # the loop's own pause
    try:
        loop.wake()
        time.sleep(0.5)
        assert 2 <= loop.steps <= 3, f"{loop.steps} steps in half a second"
    finally:
        loop.stop()


def test_an_idle_loop_does_not_step_again_until_woken_or_polled():
    loop = started(Flaky(failures=0))
    try:
        loop.wake()
        assert loop.done.wait(5.0)
        steps = loop.steps
        assert not loop.stopped.wait(0.3)
        assert loop.steps == steps
    finally:
        loop.stop()
