"""A process's background loop (tasks/worker.py): a failed step is tried again, and a wake
spent on a step that failed is not left to the next poll."""

from __future__ import annotations

import threading

from tasks.worker import Loop


class Flaky(Loop):
    """Fails its first `failures` steps, then records each step."""

    name = "test-flaky"

    def __init__(self, failures: int) -> None:
        super().__init__(poll_seconds=60.0)  # a poll would never come within the test
        self.failures = failures
        self.steps = 0
        self.done = threading.Event()

    def step(self) -> None:
        self.steps += 1
        if self.steps == 1:
            return  # the step every loop does when it starts
        if self.failures:
            self.failures -= 1
            raise RuntimeError("the database went away")
        self.done.set()


def test_a_wake_whose_step_failed_is_tried_again_after_the_pause_not_at_the_next_poll(caplog):
    loop = Flaky(failures=2)
    loop.start()
    try:
        loop.wake()
        assert loop.done.wait(5.0), f"not tried again: {loop.steps} steps"
        assert loop.steps == 4
        assert caplog.text.count("a step failed") == 2
    finally:
        loop.stop()


def test_an_idle_loop_does_not_step_again_until_woken_or_polled():
    loop = Flaky(failures=0)
    loop.start()
    try:
        loop.wake()
        assert loop.done.wait(5.0)
        steps = loop.steps
        assert not loop.stopped.wait(0.3)
        assert loop.steps == steps
    finally:
        loop.stop()
