"""SIGKILL under load (DESIGN.md §6): every push that got a 2xx is in the database after the
server is killed and started again.

A real `daphne` runs the project in a child process with its own environment and its own
database (a SQLite file in a temporary data directory, or a throwaway PostgreSQL database when
this session runs against PostgreSQL). Eight workers push concurrently; the server is killed
with SIGKILL while pushes are in flight; then the store is checked directly and through a
restarted server. The pytest test database is never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from tests.builders import status
from tests.processes import ROOT, clean_environment, free_port, start_daphne, wait_until_listening

pytestmark = pytest.mark.slow

WORKERS = 8
KILL_AFTER_ACKS = 60  # SIGKILL once this many pushes are acknowledged...
KILL_AFTER_SECONDS = 3.0  # ...or this long after the first push, whichever comes first
CONTEXTS = 4  # pushes share a few sessions, so transactions contend for the same rows
START_DEADLINE = 15.0
STEP_DEADLINE = 30.0

CREATE_ENDPOINT = """
import json, django
django.setup()
from tasks.answering.agents import new_endpoint
from tasks.models import Agent
agent = Agent.objects.create(
    name="Durability",
    card_url="http://agent.test/.well-known/agent-card.json",
    rpc_url="http://agent.test/a2a/jsonrpc",
    protocol_version="1.0",
)
endpoint, token, bearer = new_endpoint(agent)
print(json.dumps({"public_id": endpoint.public_id, "bearer": bearer}))
"""

INSPECT_STORE = """
import json, django
django.setup()
import os, sqlite3
from django.db import connection
from tasks.pushes import spool
from tasks.models import Delivery, Message, Task
integrity = None
columns = ("idempotency_key", "task_id", "outcome")
deliveries = [list(row) for row in Delivery.objects.values_list(*columns)]
# On SQLite pushes wait in the spool file until the applier takes them (tasks/pushes/spool.py).
in_spool = []
if spool.path() and os.path.exists(spool.path()):
    with sqlite3.connect(spool.path()) as file:
        in_spool = file.execute("SELECT idempotency_key, task_id FROM push").fetchall()
taken = {key for key, _, _ in deliveries}
deliveries += [[key, task_id, "pending"] for key, task_id in in_spool if key not in taken]
if connection.vendor == "sqlite":
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA integrity_check")
        integrity = [row[0] for row in cursor.fetchall()]
print(json.dumps({
    "vendor": connection.vendor,
    "integrity": integrity,
    "deliveries": deliveries,
    "in_spool": len(in_spool),
    "tasks": list(Task.objects.values_list("task_id", "state")),
    "messages": list(Message.objects.values_list("message_id", flat=True)),
}))
"""


# -- the child's database and environment ---------------------------------------------------


@pytest.fixture
def child_database_url() -> Iterator[str | None]:
    """None for the embedded SQLite default; else a PostgreSQL database of its own, created on
    the server this session uses and dropped afterwards."""
    url = os.environ.get("DATABASE_URL", "").strip()
    if not url:
        yield None
        return
    psycopg = pytest.importorskip("psycopg")
    name = f"onlooker_durability_{os.getpid()}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Child:
    """Everything needed to run the project in a child process against its own store."""

    data_dir: Path
    database_url: str | None
    processes: list[subprocess.Popen] = field(default_factory=list)

    def env(self, port: int | None = None) -> dict[str, str]:
        env = clean_environment(
            SECRET_KEY="x",
            ONLOOKER_DATA_DIR=str(self.data_dir),
            DEBUG="false",
            ALLOWED_HOSTS="127.0.0.1",
            ONLOOKER_PUBLIC_URL=f"http://127.0.0.1:{port or 8000}",
            PYTHONUNBUFFERED="1",
        )
        if self.database_url:
            env["DATABASE_URL"] = self.database_url
        return env

    def run(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, *args],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=STEP_DEADLINE,
        )
        assert done.returncode == 0, f"{args[:2]} failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def python(self, code: str) -> dict:
        return json.loads(self.run("-c", code).strip().splitlines()[-1])

    def start_server(self, name: str) -> tuple[subprocess.Popen, str]:
        port = free_port()
        with (self.data_dir / f"{name}.log").open("wb") as log:
            process = start_daphne(port, self.env(port), output=log)
        self.processes.append(process)
        wait_until_listening(process, port, timeout=START_DEADLINE, log=lambda: self.log(name))
        return process, f"http://127.0.0.1:{port}"

    def log(self, name: str) -> str:
        return (self.data_dir / f"{name}.log").read_text(errors="replace")[-4000:]

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)


@pytest.fixture
def child(tmp_path, child_database_url) -> Iterator[Child]:
    child = Child(tmp_path, child_database_url)
    try:
        yield child
    finally:
        child.stop_all()


# -- the load -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Push:
    webhook_id: str
    body: bytes

    @property
    def key(self) -> str:
        return f"id:{self.webhook_id}"

    @property
    def task_id(self) -> str:
        return f"task-{self.webhook_id}"


def make_push(worker: int, n: int, run: str) -> Push:
    webhook_id = f"msg_{run}_{worker}_{n}"
    body = status(
        "WORKING",
        task=f"task-{webhook_id}",
        context=f"ctx-{(worker + n) % CONTEXTS}",
        at=n % 3600,
        text=f"step {n} of worker {worker}",
        message_id=f"m-{webhook_id}",
    )
    return Push(webhook_id, json.dumps(body).encode())


def send(client: httpx.Client, base: str, public_id: str, bearer: str, push: Push):
    return client.post(
        f"{base}/a2a/push/{public_id}/",
        content=push.body,
        headers={
            "Authorization": f"Bearer {bearer}",
            "Content-Type": "application/json",
            "webhook-id": push.webhook_id,
        },
    )


@dataclass
class Load:
    """Workers push until told to stop; the record says what each push got."""

    base: str
    public_id: str
    bearer: str
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: list[Push] = field(default_factory=list)
    acknowledged: set[str] = field(default_factory=set)
    refused: list[tuple[str, int, str]] = field(default_factory=list)
    failed: set[str] = field(default_factory=set)
    in_flight: int = 0
    first_sent_at: float | None = None

    def worker(self, number: int) -> None:
        with httpx.Client(timeout=10.0) as client:
            n = 0
            while not self.stop.is_set():
                push = make_push(number, n, self.run)
                n += 1
                with self.lock:
                    self.sent.append(push)
                    self.first_sent_at = self.first_sent_at or time.monotonic()
                    self.in_flight += 1
                try:
                    response = send(client, self.base, self.public_id, self.bearer, push)
                except httpx.HTTPError:
                    # The server died under this request (or before it): not acknowledged.
                    with self.lock:
                        self.in_flight -= 1
                        self.failed.add(push.webhook_id)
                    return
                with self.lock:
                    self.in_flight -= 1
                    if response.is_success:
                        self.acknowledged.add(push.webhook_id)
                    else:
                        self.refused.append((push.webhook_id, response.status_code, response.text))

    def acks(self) -> int:
        with self.lock:
            return len(self.acknowledged)


# -- the test -------------------------------------------------------------------------------


def applied_store(child, timeout: float = 30.0) -> dict:
    """The store once the server's applier has applied every delivery it holds."""
    deadline = time.monotonic() + timeout
    while True:
        store = child.python(INSPECT_STORE)
        pending = [key for key, _, outcome in store["deliveries"] if outcome == "pending"]
        if not pending and not store["in_spool"]:
            return store
        waiting = len(pending) + store["in_spool"]
        assert time.monotonic() < deadline, f"{waiting} deliveries never applied"
        time.sleep(0.2)


def test_every_acknowledged_push_survives_sigkill(child):
    started = time.monotonic()
    child.run("manage.py", "migrate", "--no-input")
    endpoint = child.python(CREATE_ENDPOINT)
    server, base = child.start_server("first")
    load = Load(base, endpoint["public_id"], endpoint["bearer"])
    workers = [threading.Thread(target=load.worker, args=(n,), daemon=True) for n in range(WORKERS)]

    load_started = time.monotonic()
    try:
        for thread in workers:
            thread.start()
        deadline = time.monotonic() + START_DEADLINE
        while load.acks() < KILL_AFTER_ACKS and time.monotonic() < deadline:
            first = load.first_sent_at
            if first is not None and time.monotonic() - first > KILL_AFTER_SECONDS:
                break
            if server.poll() is not None:
                pytest.fail(f"daphne died on its own:\n{child.log('first')}")
            time.sleep(0.005)
        with load.lock:
            in_flight_at_kill = load.in_flight
        os.kill(server.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        server.wait(timeout=5)
    finally:
        load.stop.set()
        for thread in workers:
            thread.join(timeout=15)
    assert not any(thread.is_alive() for thread in workers), "a worker hung after the kill"

    with load.lock:
        sent, acknowledged = list(load.sent), set(load.acknowledged)
        refused, failed = list(load.refused), set(load.failed)
    assert not refused, f"pushes refused under load (before the kill): {refused[:5]}"
    assert acknowledged, f"no push was acknowledged before the kill:\n{child.log('first')}"
    assert in_flight_at_kill and failed, "the kill interrupted no push: nothing was in flight"

    # Straight from the store, before anything else writes to it.
    store = child.python(INSPECT_STORE)
    if store["vendor"] == "sqlite":
        assert store["integrity"] == ["ok"]
    stored_keys = {key for key, _, _ in store["deliveries"]}
    lost = sorted(
        push.webhook_id
        for push in sent
        if push.webhook_id in acknowledged and push.key not in stored_keys
    )
    assert not lost, f"{len(lost)} of {len(acknowledged)} acknowledged pushes were lost: {lost}"
    # Each delivery was committed with the event it carried, or not at all; the kill may
    # have left some kept but not applied yet.
    by_key = {push.key: push for push in sent}
    assert stored_keys <= set(by_key), "a delivery nobody sent"
    outcomes_at_kill = Counter(outcome for _, _, outcome in store["deliveries"])
    assert set(outcomes_at_kill) <= {"applied", "pending"}, outcomes_at_kill
    committed_unacknowledged = len(stored_keys) - len(acknowledged)

    # A restarted server applies what the kill left pending, with no push to wake it...
    _, base = child.start_server("second")
    recovered = applied_store(child)
    assert sorted(key for key, _, _ in recovered["deliveries"]) == sorted(stored_keys)
    # ...and takes every push again: each stored one is a duplicate, the rest are accepted
    # now, and nothing is refused.
    outcomes: dict[str, str] = {}
    with httpx.Client(timeout=10.0) as client:
        for push in sent:
            response = send(client, base, endpoint["public_id"], endpoint["bearer"], push)
            assert response.is_success, (push.webhook_id, response.status_code, response.text)
            outcomes[push.webhook_id] = response.json()["outcome"]
    for push in sent:
        expected = "duplicate" if push.key in stored_keys else "accepted"
        assert outcomes[push.webhook_id] == expected, push.webhook_id

    # Every delivery, kept before the kill or after, is applied: once, with its event.
    final = applied_store(child)
    if final["vendor"] == "sqlite":
        assert final["integrity"] == ["ok"]
    assert sorted(key for key, _, _ in final["deliveries"]) == sorted(by_key)
    assert all(outcome == "applied" for _, _, outcome in final["deliveries"])
    assert {f"m-{by_key[key].webhook_id}" for key in by_key} == set(final["messages"])
    assert sorted(task for task, _ in final["tasks"]) == sorted(p.task_id for p in sent)
    assert all(state == "TASK_STATE_WORKING" for _, state in final["tasks"]), final["tasks"][:5]

    print(
        f"\ndurability[{store['vendor']}]: sent={len(sent)} acknowledged={len(acknowledged)} "
        f"lost=0 committed-but-unacknowledged={committed_unacknowledged} "
        f"in-flight-at-kill={in_flight_at_kill} setup={load_started - started:.2f}s "
        f"load={killed_at - load_started:.2f}s total={time.monotonic() - started:.2f}s"
    )
