"""`manage.py serve`: Onlooker on every core of one machine, several server processes on one
port, each with its applier (dashboard/asgi.py starts it), a process that dies started again.

A Python process serves on one core: sockets, pushes and pages all wait for it. Each server
process here has a listening socket of its own, all bound to the same address with
SO_REUSEPORT, so the kernel spreads new connections over them evenly (a shared socket hands
bursts to whichever process wakes first). This command holds the sockets and lends one to
each process (Daphne's --fd), so a process that dies leaves its socket open: connections
that come while it is started again wait in its queue, none is refused.

Several processes hear each other's pushes only through Redis: more than one needs
REDIS_URL (and, for a team, PostgreSQL: docs/running.md).

With Redis, the server processes share one applier process (`ONLOOKER_APPLIER=shared`),
which this command starts and starts again like them. An applier per server took batches
half as thick, each costing a round of claims and statements, and two appliers' CPU came
out of the servers' cores: at 200 pushes/s on two cores the pushes fell behind (179–197 a
second) and push → page p99 was 291–348 ms, against 216–263 ms with every push kept up
(docs/performance.md). The servers wake it through one pipe, whose read end this command
keeps too, so a wake written while the applier is being started again waits in the pipe.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

log = logging.getLogger(__name__)

APPLICATION = "dashboard.asgi:application"
POLL_SECONDS = 0.2
STOP_SECONDS = 10.0  # from SIGTERM to SIGKILL, for each process
# A process that died within this long of starting is started again after a pause that
# doubles up to RESTART_PAUSE_MOST: a server that cannot start must not spin.
QUICK_DEATH_SECONDS, RESTART_PAUSE_MOST = 10.0, 30.0


@dataclass
class _Slot:
    """One child process (a server, or the shared applier) and what it is started with,
    kept across its restarts: for a server, the socket it serves on."""

    name: str
    command: list[str]
    pass_fds: tuple[int, ...] = ()
    env: dict[str, str] | None = None
    stdin: int | None = None
    listening: socket.socket | None = None
    process: subprocess.Popen | None = None
    started: float = 0.0
    pause: float = 0.0
    restart_at: float = 0.0


class Command(BaseCommand):
    help = "Serve Onlooker with several server processes on one port (one per core by default)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="IPv4 address to listen on")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--processes",
            type=int,
            default=None,
            help="server processes (default: one per core with REDIS_URL set, else 1)",
        )

    def handle(self, *args, host: str, port: int, processes: int | None, **options) -> None:
        count = processes if processes is not None else _default_processes()
        if count < 1:
            raise CommandError("--processes must be at least 1")
        if count > 1 and not settings.REDIS_URL:
            raise CommandError(
                f"{count} processes need REDIS_URL: with the in-memory channel layer a page "
                "would hear only the pushes its own process received. Set REDIS_URL, or run "
                "one process (--processes 1)."
            )
        servers = [_server(n, _listening_socket(host, port)) for n in range(count)]
        appliers, pipe = [], ()
        if settings.ONLOOKER_APPLIER == "process" and settings.REDIS_URL:
            pipe = os.pipe()
            appliers = [_shared_applier(*pipe)]
            for server in servers:
                _wakes_through(server, pipe[1])
        stopping: list[int] = []
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda signum, _frame: stopping.append(signum))
        shared = ", one applier process" if appliers else ""
        self.stdout.write(f"Onlooker: {count} server process(es){shared} on http://{host}:{port}/")
        try:
            for slot in [*appliers, *servers]:
                _start(slot)
            while not stopping:
                time.sleep(POLL_SECONDS)
                for slot in [*appliers, *servers]:
                    if not stopping:  # Ctrl-C reaches the processes too: not a death
                        _watch(slot)
        finally:
            # The servers first: what they kept until their end, the applier may yet apply.
            _stop_all(servers)
            _stop_all(appliers)
            for server in servers:
                server.listening.close()
            for descriptor in pipe:
                os.close(descriptor)
        self.stdout.write("Onlooker has stopped.")


def _default_processes() -> int:
    if settings.REDIS_URL:
        return len(os.sched_getaffinity(0))
    return 1


def _listening_socket(host: str, port: int) -> socket.socket:
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        listening.bind((host, port))
    except OSError as error:
        listening.close()
        raise CommandError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    listening.listen(1024)
    listening.set_inheritable(True)
    return listening


def _server(number: int, listening: socket.socket) -> _Slot:
    descriptor = listening.fileno()
    return _Slot(
        name=f"server process {number}",
        command=[sys.executable, "-m", "daphne", "--fd", str(descriptor), APPLICATION],
        pass_fds=(descriptor,),
        listening=listening,
    )


def _shared_applier(wakes: int, wake_end: int) -> _Slot:
    """The servers' one applier, reading their wakes on its stdin."""
    os.set_blocking(wake_end, False)  # a server never waits for the applier to read
    return _Slot(
        name="the applier process",
        command=[
            sys.executable,
            str(Path(settings.BASE_DIR) / "manage.py"),
            "apply_deliveries",
            "--shared",
        ],
        # The pipe's read end is its stdin; the write end stays with the servers (and this
        # command), so the applier sees its stdin end when they are all gone.
        env={**os.environ, "ONLOOKER_APPLIER": "external"},
        stdin=wakes,
    )


def _wakes_through(server: _Slot, wake_end: int) -> None:
    server.pass_fds = (*server.pass_fds, wake_end)
    server.env = {
        **os.environ,
        "ONLOOKER_APPLIER": "shared",
        "ONLOOKER_APPLIER_WAKE_FD": str(wake_end),
    }


def _start(slot: _Slot) -> None:
    slot.process = subprocess.Popen(  # noqa: S603 - this interpreter, fixed arguments
        slot.command, pass_fds=slot.pass_fds, env=slot.env, stdin=slot.stdin
    )
    slot.started = time.monotonic()
    log.info("%s started (pid %d)", slot.name, slot.process.pid)


def _watch(slot: _Slot) -> None:
    """Start the slot's process again if it has died (after a pause if it died young)."""
    now = time.monotonic()
    if slot.process is not None:
        code = slot.process.poll()
        if code is None:
            return
        died_young = now - slot.started < QUICK_DEATH_SECONDS
        slot.pause = min(max(slot.pause * 2, 1.0), RESTART_PAUSE_MOST) if died_young else 0.0
        slot.restart_at = now + slot.pause
        log.warning(
            "%s (pid %d) exited with %s; starting it again in %.0f s",
            slot.name,
            slot.process.pid,
            code,
            slot.pause,
        )
        slot.process = None
    if now >= slot.restart_at:
        _start(slot)


def _stop_all(slots: list[_Slot]) -> None:
    running = [slot.process for slot in slots if slot.process and slot.process.poll() is None]
    for process in running:
        process.terminate()
    deadline = time.monotonic() + STOP_SECONDS
    for process in running:
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
