"""The applier in a process of its own beside each server (`ONLOOKER_APPLIER=process`, the
default).

Why a process: one Python process runs Python on one core at a time. Keeping a push (the
receiver) and applying it (the applier) each cost about as much CPU, so as two threads of one
server they took turns on one core while the machine's others idled, and every push's 2xx
waited for the applier's turn to end. As two processes each has a core.

The server starts the child when its ASGI app loads (`start`) and wakes it after each push it
keeps (`wake`: a byte on the child's stdin, never waited for). The child answers on its
stdout, one JSON line per message: "notifications were queued", so the server's sender looks
now, and on the embedded default a hint for browsers, which the server sends as its own
through its coalescer and channel layer (the child has no sockets, and the in-memory layer is
the server's alone). On Redis the child sends its hints through the layer itself, from an
event loop of its own (`send_hints`): relayed, each hint cost the server's event loop a
line to decode and the layer's four round trips, about a tenth of its CPU per socket
message under the live benchmark. A child that dies is started again after a pause, and
applies what was pending when it starts. When the server exits, however it exits (SIGKILL
included), the child's stdin closes: it finishes the batch in hand and exits, so no applier
outlives its server.

Under `manage.py serve` with Redis the server processes share one such child (`shared`,
started by the command, not by a server): they write their wakes to the one pipe that is its
stdin (`nudge`), and it sends the notifications it queues itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from django.conf import settings

from tasks.runtime.loop import Loop

log = logging.getLogger(__name__)

RESTART_SECONDS = 1.0  # after the child died, before it is started again
STOP_SECONDS = 5.0  # how long the child, its server gone, gives the batch in hand


class Supervisor:
    """The server's side: starts the child, wakes it, hears it, starts it again if it dies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._process: subprocess.Popen | None = None

    def start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(
                target=self._supervise, name="onlooker-applier-supervisor", daemon=True
            )
            self._thread.start()

    def wake(self) -> None:
        process = self._process
        if process is None or process.stdin is None:
            return  # starting: it applies what is pending when it starts
        with contextlib.suppress(ValueError):  # closed: it is being started again
            nudge(process.stdin.fileno())

    def _spawn(self) -> subprocess.Popen:
        manage = Path(settings.BASE_DIR) / "manage.py"
        # "external" in the child: nothing there starts or wakes another applier.
        env = {**os.environ, "ONLOOKER_APPLIER": "external"}
        # Our own interpreter and manage.py: nothing in the command comes from outside.
        process = subprocess.Popen(  # noqa: S603
            [sys.executable, str(manage), "apply_deliveries", "--child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            # Its logs (stderr) go where the server's go.
        )
        assert process.stdin is not None
        os.set_blocking(process.stdin.fileno(), False)
        return process

    def _supervise(self) -> None:
        # Nothing stops this loop: the server's end ends it, and closing the child's stdin
        # with it ends the child.
        while True:
            try:
                process = self._spawn()
            except OSError:
                log.exception("could not start the applier process; trying again")
                time.sleep(RESTART_SECONDS)
                continue
            self._process = process
            assert process.stdout is not None
            for line in process.stdout:
                self._hear(line)
            code = process.wait()
            log.error("the applier process exited (%s); starting it again", code)
            time.sleep(RESTART_SECONDS)

    def _hear(self, line: bytes) -> None:
        # Imported here: these need the app registry, which is ready by the time the child
        # speaks but not always when this module is imported.
        from tasks.live import broadcast
        from tasks.notify import sender

        try:
            said = json.loads(line)
            if "hint" in said:
                broadcast.hint(*said["hint"])
            elif "notice" in said:
                broadcast.notice(*said["notice"])
            elif "send" in said:
                sender.wake()
        except Exception:  # noqa: BLE001 - one bad line must not stop hearing the rest
            log.exception("could not act on a line from the applier process: %.200r", line)


supervisor = Supervisor()


def nudge(descriptor: int) -> None:
    """Wake the applier reading the other end of the pipe `descriptor` (non-blocking), never
    waiting for it. Full: it has wakes enough to read. Gone: it is started again, and
    applies what is pending then."""
    with contextlib.suppress(OSError):
        os.write(descriptor, b".")


# -- the child ------------------------------------------------------------------------------


class _Voice:
    """The child's stdout, one JSON line per message, whichever thread speaks."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.lock = threading.Lock()

    def say(self, kind: str, *args: object) -> None:
        line = json.dumps({kind: args}, separators=(",", ":")).encode() + b"\n"
        with self.lock:
            try:
                self.out.write(line)
                self.out.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the server is gone: the stdin listener stops this process


def send_hints(voice: _Voice | None) -> asyncio.AbstractEventLoop | None:
    """How the child's hints and notices leave it: on Redis through the channel layer, from
    an event loop in a thread of its own (returned), which the server's listeners hear as
    they hear their own server's; on the in-memory layer as lines to the server (None)."""
    from tasks.live import broadcast

    if not settings.REDIS_URL:
        assert voice is not None, "a shared applier needs Redis: `manage.py serve` checks"
        broadcast.relay_to(lambda kind, *args: voice.say(kind, *args))
        return None
    sending = asyncio.new_event_loop()
    threading.Thread(target=sending.run_forever, name="onlooker-hints", daemon=True).start()
    broadcast.use_loop(sending)  # the coalescer's delayed hints go out from it too
    return sending


def run_child(loop: Loop, *, shared: bool = False) -> None:
    """`manage.py apply_deliveries --child`: the applier's `loop`, woken by bytes on stdin
    and stopped by its end (or SIGTERM), speaking to its server on stdout. Given the loop
    rather than making it: the applier starts and wakes this module's supervisor, and a
    module that imported the applier back would make a circle.

    `shared` (`--shared`): the one applier of `manage.py serve`'s server processes, its stdin
    a pipe they all write their wakes to. It has no one server to speak to: its hints go
    through Redis, and the notifications it queues are sent by a sender of its own."""
    from tasks.notify import sender

    if shared:
        send_hints(None)
        sender.start()
    else:
        voice = _Voice(sys.stdout.buffer)
        send_hints(voice)
        sender.relay_wakes_to(lambda: voice.say("send", True))

    def listen() -> None:
        stdin = sys.stdin.fileno()
        while True:
            try:
                if not os.read(stdin, 4096):
                    break
            except OSError:
                break
            loop.wake()
        loop.stop(STOP_SECONDS)  # the server is gone: finish the batch in hand, then exit

    gc.freeze()  # as the server does (dashboard/asgi.py): shorter full collections
    signal.signal(signal.SIGTERM, lambda *_: loop.stop())
    # Ctrl-C in a terminal reaches the whole process group: the server stops on it, and this
    # process then on its stdin's end, after its batch, rather than with a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    loop.start()
    threading.Thread(target=listen, name="onlooker-applier-stdin", daemon=True).start()
    while loop.running:
        loop.join(1.0)
