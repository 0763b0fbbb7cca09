"""`DATABASE_URL=sqlite:///…` runs with the embedded default's SQLite settings (WAL,
IMMEDIATE transactions, a lock timeout), so concurrent writers queue instead of failing with
"database is locked". Checked on a real Daphne child under concurrent pushes and card writes."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import httpx
import pytest

from tests.builders import status
from tests.conftest import sign_headers
from tests.processes import (
    ROOT,
    clean_environment,
    free_port,
    start_daphne,
    stop,
    wait_until_listening,
)

PUSHERS = 8
PUSHES_EACH = 25
CARD_WRITERS = 4
CARDS_EACH = 25
MOVED_WITHIN = 30.0  # seconds for the applier to move the last pushes in from the spool

# Migrates the database the URL names and registers one signing agent with an API token.
PREPARE = """
import json
import django
django.setup()
from django.core.management import call_command
from tasks.answering.agents import new_api_token, new_endpoint, new_signing_secret
from tasks.models import Agent, digest

call_command("migrate", interactive=False, verbosity=0)
secret, token = new_signing_secret(), new_api_token()
agent = Agent.objects.create(
    name="Loader", card_url="http://agent.test/card", rpc_url="http://agent.test/rpc",
    protocol_version="1.0", signing_secret=secret, api_token_digest=digest(token),
)
endpoint, _, _ = new_endpoint(agent)
print(json.dumps({"path": f"/a2a/push/{endpoint.public_id}/", "secret": secret, "token": token}))
"""

# In the long checks (-m slow; .ci/run runs them on the embedded default too): each starts
# processes of its own, and the default run must stay inside its time budget.
pytestmark = pytest.mark.slow


def test_sqlite_database_url_gets_the_embedded_defaults_sqlite_settings(tmp_path):
    environment = clean_environment(
        DATABASE_URL=f"sqlite:///{tmp_path / 'x.sqlite3'}", SECRET_KEY="x"
    )
    code = (
        "import django, json; django.setup()\n"
        "from django.db import connection\n"
        "with connection.cursor() as cursor:\n"
        "    cursor.execute('PRAGMA journal_mode')\n"
        "    mode = cursor.fetchone()[0]\n"
        "d = connection.settings_dict\n"
        "print(json.dumps([mode, d['OPTIONS'], d['CONN_MAX_AGE']]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environment, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    mode, options, max_age = json.loads(result.stdout)
    assert mode == "wal"
    assert options["transaction_mode"] == "IMMEDIATE"
    assert options["timeout"] >= 20
    assert max_age is None


def run_together(workers: list[Callable[[], list[int]]]) -> list[list[int]]:
    """Run every worker in its own thread, released at once; return each one's status codes."""
    barrier = threading.Barrier(len(workers))
    results: list = [None] * len(workers)

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[index] = workers[index]()
        except Exception as error:  # noqa: BLE001 - surfaced by the assertions
            results[index] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


@pytest.fixture
def server(tmp_path):
    """A Daphne child on `DATABASE_URL=sqlite:///…`, migrated, with one agent registered."""
    database = tmp_path / "x.sqlite3"
    port = free_port()
    environment = clean_environment(
        DATABASE_URL=f"sqlite:///{database}",
        SECRET_KEY="load-test-key",
        ONLOOKER_DATA_DIR=str(tmp_path / "data"),
        ONLOOKER_PUBLIC_URL=f"http://127.0.0.1:{port}",
    )
    prepared = subprocess.run(
        [sys.executable, "-c", PREPARE],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert prepared.returncode == 0, prepared.stderr
    registration = json.loads(prepared.stdout.strip().splitlines()[-1])
    log = tmp_path / "daphne.log"
    with log.open("wb") as output:
        process = start_daphne(port, environment, output=output)
    try:
        wait_until_listening(process, port, timeout=30, log=log.read_text)
        yield f"http://127.0.0.1:{port}", registration, database, log
    finally:
        stop(process)


def test_concurrent_pushes_and_card_writes_on_a_sqlite_url_never_fail(server):
    base, registration, database, log = server

    def pusher(index: int) -> list[int]:
        codes = []
        with httpx.Client(base_url=base, timeout=60) as client:
            for n in range(PUSHES_EACH):
                body = json.dumps(
                    status("WORKING", task=f"t{index}", context=f"c{index}", at=n, text=f"{n}")
                ).encode()
                headers = sign_headers(registration["secret"], body, msg_id=f"p{index}-{n}")
                headers["Content-Type"] = "application/json"
                codes.append(
                    client.post(registration["path"], content=body, headers=headers).status_code
                )
        return codes

    def card_writer(index: int) -> list[int]:
        codes = []
        auth = {"Authorization": f"Bearer {registration['token']}"}
        with httpx.Client(base_url=base, timeout=60, headers=auth) as client:
            for n in range(CARDS_EACH):
                card = {"sessionKey": f"card-{index}", "markdown": f"step **{n}**"}
                codes.append(client.post("/api/progress-card", json=card).status_code)
        return codes

    results = run_together(
        [lambda i=i: pusher(i) for i in range(PUSHERS)]
        + [lambda i=i: card_writer(i) for i in range(CARD_WRITERS)]
    )
    problems = [result for result in results if not isinstance(result, list)]
    assert problems == [], problems
    push_codes = [code for result in results[:PUSHERS] for code in result]
    card_codes = [code for result in results[PUSHERS:] for code in result]

    failed = [code for code in push_codes + card_codes if code >= 500]
    assert failed == [], f"{len(failed)} server errors:\n{log.read_text()[-3000:]}"
    assert push_codes == [200] * PUSHERS * PUSHES_EACH
    assert card_codes == [200] * CARD_WRITERS * CARDS_EACH
    # Every accepted push reaches the database: kept in the spool file beside it when it was
    # answered, and moved in by the applier process, which may still be at it (or, on a
    # loaded machine, still starting) when the last answer comes.
    wanted = {f"id:p{i}-{n}" for i in range(PUSHERS) for n in range(PUSHES_EACH)}
    deadline = time.monotonic() + MOVED_WITHIN
    while True:
        with sqlite3.connect(database) as connection:
            keys = {
                row[0] for row in connection.execute("SELECT idempotency_key FROM tasks_delivery")
            }
        if keys == wanted or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert keys == wanted, f"{len(wanted - keys)} not in the database:\n{log.read_text()[-3000:]}"
