"""Child processes for tests and benchmarks: the project root, an environment free of the
caller's settings, free loopback ports, and a Daphne serving Onlooker."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Everything the settings read: none of it leaks into a child from the test run's own
# environment (which may point at the test database or Redis).
SETTINGS_VARIABLES = (
    "DATABASE_URL",
    "REDIS_URL",
    "SECRET_KEY",
    "DEBUG",
    "ALLOWED_HOSTS",
    "ONLOOKER_PUBLIC_URL",
    "ONLOOKER_MAX_PUSH_BYTES",
    "ONLOOKER_DATA_DIR",
    "ONLOOKER_APPLIER",
    "ONLOOKER_SPOOL",
    "ONLOOKER_INBOX",
    "ONLOOKER_NOTIFIER",
    "ONLOOKER_DEMO_WEBHOOK",
    "EMAIL_URL",
    "EMAIL_HOST",
    "DJANGO_SETTINGS_MODULE",
)


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clean_environment(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS_VARIABLES}
    env["DJANGO_SETTINGS_MODULE"] = "dashboard.settings"
    env.update(overrides)
    return env


def start_daphne(
    port: int, env: dict[str, str], *, output, app: str = "dashboard.asgi:application"
) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), app],
        cwd=ROOT,
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT,
    )


def start_serving(port: int, processes: int, env: dict[str, str], *, output) -> subprocess.Popen:
    """`manage.py serve`: `processes` Daphne processes on one port, under one parent."""
    command = [sys.executable, "manage.py", "serve", "--port", str(port)]
    return subprocess.Popen(
        [*command, "--processes", str(processes)],
        cwd=ROOT,
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT,
    )


def wait_until_listening(
    process: subprocess.Popen, port: int, *, timeout: float, log: Callable[[], str] = str
) -> None:
    """Return once `port` accepts connections; fail saying why if the process died first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode}:\n{log()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"the server did not accept connections within {timeout} s:\n{log()}")


def stop(process: subprocess.Popen, *, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within `timeout` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def children(pid: int, *, running: bytes | None = None) -> set[int]:
    """The children of process `pid` (started by any of its threads), from /proc; with
    `running`, only those with that word in their command line (b"daphne")."""
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return set()  # gone
    found: set[int] = set()
    for thread in threads:
        try:
            found.update(int(child) for child in (thread / "children").read_text().split())
        except OSError:
            continue  # the thread ended meanwhile
    if running is None:
        return found
    return {child for child in found if running in _command_line(child)}


def _command_line(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []  # gone meanwhile


def alive(pid: int) -> bool:
    """Whether process `pid` is running: a zombie has exited, its parent has not waited yet."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
