"""`manage.py serve`: several Daphne processes on one port, each with a listening socket of
its own (SO_REUSEPORT) that the command keeps, so the kernel spreads connections over them
and a process that dies is started again on the same socket with nothing refused. With
Redis they share one applier process, which applies what any of them receives, is started
again if it dies, and stops with them."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from tasks.models import Task, TaskState
from tests.builders import status
from tests.conftest import make_agent
from tests.live_server import LiveServer, push_http
from tests.processes import alive, children

CONNECTIONS = 24  # all on one process of two: a chance of one in 2**23
DEADLINE = 20.0  # seconds; a process starts in 1-3 s, slower on a loaded machine


@pytest.fixture
def redis_layer() -> None:
    if not settings.REDIS_URL:
        pytest.skip("several processes need REDIS_URL (e.g. REDIS_URL=redis://127.0.0.1:6379/0)")


def servers(parent: int) -> set[int]:
    """The command's server processes."""
    return children(parent, running=b"daphne")


def appliers(parent: int) -> set[int]:
    """The command's applier processes."""
    return children(parent, running=b"apply_deliveries")


def connections_held(pid: int, port: int) -> int:
    """How many established TCP connections to `port` process `pid` holds."""
    inodes = set()
    for descriptor in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(descriptor)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    held = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port, state, inode = int(fields[1].split(":")[1], 16), fields[3], fields[9]
        held += state == "01" and local_port == port and inode in inodes
    return held


def healthy_connection(port: int) -> socket.socket:
    """A keep-alive connection that has been answered 200 by /healthz, left open."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
    conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    status_line = conn.recv(4096).split(b"\r\n", 1)[0]
    assert status_line == b"HTTP/1.1 200 OK", status_line
    return conn


def wait_for(condition, what: str):
    deadline = time.monotonic() + DEADLINE
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {DEADLINE:.0f} s waiting for {what}")
        time.sleep(0.1)
    return value


def started(server: LiveServer, count: int) -> set[int]:
    return wait_for(
        lambda: (pids := servers(server.process.pid)) and len(pids) == count and pids,
        f"{count} server processes",
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_layer")
def test_connections_are_spread_over_every_process_on_the_one_port():
    with LiveServer(processes=2) as server:
        pids = started(server, 2)
        held = [healthy_connection(server.port) for _ in range(CONNECTIONS)]
        try:
            counts = {pid: connections_held(pid, server.port) for pid in pids}
        finally:
            for conn in held:
                conn.close()
    assert sum(counts.values()) == CONNECTIONS, counts
    assert all(counts.values()), f"a process served nothing: {counts}"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_layer")
def test_a_process_that_dies_is_started_again_and_no_connection_is_refused():
    with LiveServer(processes=2) as server:
        first = started(server, 2)
        for conn in [healthy_connection(server.port) for _ in range(CONNECTIONS)]:
            conn.close()
        killed = min(first)
        os.kill(killed, signal.SIGKILL)
        # Meanwhile every connection is answered: by the other process, or queued on the
        # dead one's socket until its successor takes it.
        for conn in [healthy_connection(server.port) for _ in range(CONNECTIONS)]:
            conn.close()
        now = started(server, 2)
    assert killed not in now and len(now & first) == 1, (first, now)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_layer")
def test_sigterm_stops_every_process():
    with LiveServer(processes=2) as server:  # its end kills what SIGTERM did not stop
        pids = started(server, 2)
        pids |= wait_for(lambda: appliers(server.process.pid), "the applier process")
        server.process.send_signal(signal.SIGTERM)
        code = server.process.wait(timeout=DEADLINE)
        log = server.log()
    assert code == 0, log
    for pid in pids:
        assert not alive(pid), pid
    assert "Onlooker has stopped." in log


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_layer")
def test_the_processes_share_one_applier_which_applies_what_each_receives_and_restarts():
    registered = make_agent(name="shared")
    with LiveServer(processes=2) as server:
        pids = started(server, 2)
        (first,) = wait_for(lambda: appliers(server.process.pid), "the applier process")
        # None has an applier of its own: one for the machine keeps batches thick.
        assert all(not children(pid, running=b"apply_deliveries") for pid in pids)
        # Each push on a connection of its own, so the kernel spreads them over both.
        for n in range(CONNECTIONS):
            body = status("WORKING", task=f"task-{n}", context=f"ctx-{n}", at=1)
            answer = push_http(server, registered, body, timeout=DEADLINE)  # waits till applied
            assert answer.status_code == 200, answer.text

        os.kill(first, signal.SIGKILL)
        (second,) = wait_for(
            lambda: appliers(server.process.pid) - {first}, "the applier started again"
        )
        body = status("COMPLETED", task="task-0", context="ctx-0", at=2)
        assert push_http(server, registered, body, timeout=DEADLINE).status_code == 200
        log = server.log()
    tasks = Task.objects.filter(agent=registered.agent)
    assert tasks.count() == CONNECTIONS
    assert tasks.get(task_id="task-0").state == TaskState.COMPLETED
    assert second != first and "the applier process (pid" in log, log
    assert not alive(second)  # gone with the servers


def test_several_processes_without_redis_are_refused_before_anything_starts(settings):
    settings.REDIS_URL = ""
    with pytest.raises(CommandError, match="2 processes need REDIS_URL"):
        call_command("serve", processes=2, port=1)
