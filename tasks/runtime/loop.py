"""A process's background loop, as the applier and the notification sender run one: a daemon
thread that does its `step` every `poll_seconds`, or at once when woken, survives any
exception (logged; the next step tries again) and keeps its database connection between
steps unless an error broke it (tasks/runtime/connections.py). `run_in_foreground` is the same loop
for a management command."""

from __future__ import annotations

import logging
import signal
import threading

from tasks.runtime import connections, outage

log = logging.getLogger(__name__)


class DatabaseAway(Exception):
    """A step not tried: the database is away."""


class Loop:
    name = "onlooker-loop"
    stop_timeout = 5.0  # seconds stop() waits for the step in progress
    # Seconds to rest after a failed step before the next: a step woken for is tried again
    # then, so with no rest a database that is down would be asked (and logged) nonstop.
    failure_pause = 1.0

    def __init__(self, poll_seconds: float) -> None:
        self.poll_seconds = poll_seconds
        self._woken = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = False
        # Set by stop(): long steps check it to end early.
        self.stopped = threading.Event()

    def step(self) -> None:
        raise NotImplementedError

    def begin(self) -> None:
        """In the thread, before the first step."""

    def end(self) -> None:
        """In the thread, after the last step."""

    def start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stopping = False
            self.stopped.clear()
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wake(self) -> None:
        self._woken.set()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def stop(self, timeout: float | None = None) -> None:
        self._stopping = True
        self.stopped.set()
        self._woken.set()
        self.join(self.stop_timeout if timeout is None else timeout)

    def _run(self) -> None:
        self.begin()
        try:
            while not self._stopping:
                woken = self._woken.is_set()
                self._woken.clear()
                try:
                    if outage.is_away():  # outage.py says when it is back: no step till then
                        raise DatabaseAway
                    self.step()
                except Exception as error:  # noqa: BLE001 - the database went away, say: try again
                    self._say_why(error)
                    self.stopped.wait(self.failure_pause)
                    if woken:  # what it was woken for is still to do: not left to the poll
                        self._woken.set()
                finally:
                    connections.keep_unless_broken()
                self._woken.wait(self.poll_seconds)
        finally:
            self.end()
            connections.close_this_thread_s()

    def _say_why(self, error: Exception) -> None:
        if isinstance(error, DatabaseAway) or outage.noticed(error):
            return  # said once, by outage.py, for the whole process
        if connections.lost(error):
            log.warning("%s: its database connection was lost; connecting again", self.name)
            return
        log.exception("%s: a step failed; trying again", self.name)


def run_in_foreground(loop: Loop, say, what: str) -> None:
    """A management command's loop: until SIGTERM or Ctrl-C, then stopped cleanly."""
    signal.signal(signal.SIGTERM, lambda *_: loop.stop())
    say(f"{what} (looking every {loop.poll_seconds} s); Ctrl-C to stop.")
    loop.start()
    try:
        while loop.running:
            loop.join(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        loop.stop()
