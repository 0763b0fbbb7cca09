"""The durable spool and its applier: a push is kept on its request and applied after, in
batches; a delivery whose apply fails is kept, marked and retried without stopping the others;
each session a batch changed is published once; the background thread applies a lone push at
once and what a crash left pending when it starts.

These commit for real (`transaction=True`): the applier's thread has its own connection, and
the database's triggers refuse only what commits.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tasks.models import (
    Artifact,
    Delivery,
    Message,
    ProgressCard,
    Session,
    SessionFragments,
    Task,
)
from tasks.pushes import applier, spool
from tasks.pushes.apply.state import SAID_ROWS
from tasks.sessions import changes, fragments, search
from tests.builders import approval, artifact, progress, status
from tests.conftest import make_agent, push

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def kept_only(settings):
    """Web processes that only keep pushes: nothing applies until the test says so."""
    settings.ONLOOKER_APPLIER = "external"


def accepted(response) -> int:
    assert response.status_code == 200, response.content
    answer = response.json()
    assert set(answer) == {"outcome", "delivery"} and answer["outcome"] == "accepted", answer
    return answer["delivery"]


def wait_until(check, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not applied in time"
        time.sleep(0.02)


def test_a_push_is_kept_pending_and_acknowledged_before_it_is_applied(kept_only):
    registered = make_agent()

    delivery_id = accepted(push(Client(), registered, status("WORKING", at=1, text="Starting")))

    assert not Task.objects.exists() and not Session.objects.exists()
    if spool.path():  # SQLite: kept in the spool file, the database untouched
        assert (spool.waiting(), Delivery.objects.count()) == (1, 0)
    else:
        kept = Delivery.objects.get()
        assert (kept.pk, kept.outcome, kept.applied_at) == (delivery_id, "pending", None)
    out = io.StringIO()
    call_command("apply_deliveries", "--once", stdout=out)

    assert "Applied 1 deliveries" in out.getvalue()
    delivery = Delivery.objects.get(pk=delivery_id)  # with the id its agent was told
    assert spool.waiting() == 0
    assert delivery.outcome == "applied" and delivery.applied_at is not None
    assert Task.objects.get().status_message == "Starting"
    # A duplicate of a pending delivery is a duplicate too: the key is kept from the start.
    again = push(Client(), registered, status("WORKING", at=1, text="Starting"))
    assert again.json() == {"outcome": "duplicate", "delivery": delivery_id}


def test_a_push_is_kept_with_one_statement_that_commits_on_its_own(kept_only, settings):
    settings.ONLOOKER_SPOOL = "off"  # kept in the database, as on PostgreSQL
    registered = make_agent()

    with CaptureQueriesContext(connection) as queries:
        accepted(push(Client(), registered, status("WORKING", at=1, text="Starting")))

    statements = [q["sql"].split()[0] for q in queries]
    # The endpoint (tests cache it for no time), then the delivery: no BEGIN or COMMIT.
    assert statements == ["SELECT", "INSERT"], statements
    assert Delivery.objects.count() == 1


def test_a_delivery_whose_apply_fails_is_kept_marked_retried_and_stops_nothing_else(
    kept_only, database
):
    failing, other = make_agent(name="Failing"), make_agent(name="Other")
    database.refuse("tasks_artifact", "INSERT")
    broken = accepted(push(Client(), failing, artifact("report", "# Results")))
    fine = accepted(push(Client(), other, status("WORKING", at=1, text="Still going")))

    with time_machine.travel(T0, tick=False):
        batch = applier.apply_batch()

    assert (batch.applied, batch.failed) == (1, 1)
    kept = Delivery.objects.get(pk=broken)
    assert (kept.outcome, kept.attempts, kept.retry_at) == ("pending", 1, T0 + timedelta(seconds=5))
    assert "refused by a test trigger" in kept.last_error
    # Rolled back alone: nothing of the failed delivery, all of the other one.
    assert not Task.objects.filter(agent=failing.agent).exists()
    assert Delivery.objects.get(pk=fine).outcome == "applied"
    assert Task.objects.get(agent=other.agent).status_message == "Still going"

    with time_machine.travel(T0 + timedelta(seconds=4), tick=False):
        assert applier.apply_batch().claimed == 0, "retried before its backoff was up"
    with time_machine.travel(T0 + timedelta(seconds=6), tick=False):
        again = applier.apply_batch()
    assert (again.applied, again.failed) == (0, 1)
    kept.refresh_from_db()
    assert (kept.attempts, kept.retry_at) == (2, T0 + timedelta(seconds=6 + 10))

    database.allow_all()
    with time_machine.travel(T0 + timedelta(seconds=17), tick=False):
        assert applier.drain() == 1
    kept.refresh_from_db()
    assert (kept.outcome, kept.last_error, kept.retry_at) == ("applied", "", None)
    assert Artifact.objects.get(task__agent=failing.agent).parts == [{"text": "# Results"}]


def test_a_failure_inside_a_batch_leaves_the_same_sessions_other_deliveries_applied_in_order(
    kept_only, database
):
    registered = make_agent()
    push(Client(), registered, status("WORKING", at=1, text="Cloning"))
    applier.drain()
    database.refuse("tasks_artifact", "INSERT")
    before = accepted(push(Client(), registered, status("WORKING", at=2, text="Building")))
    broken = accepted(push(Client(), registered, artifact("report", "# Results")))
    after = accepted(push(Client(), registered, status("WORKING", at=3, text="Testing")))

    batch = applier.apply_batch(seconds=60.0)

    # Tried whole, rolled back by the failure, then applied one at a time: the failure is
    # the artifact's alone, and the session ends where its other pushes left it.
    assert (batch.applied, batch.failed, batch.deferred) == (2, 1, 0)
    outcomes = dict(Delivery.objects.values_list("pk", "outcome"))
    assert [outcomes[pk] for pk in (before, broken, after)] == ["applied", "pending", "applied"]
    assert Delivery.objects.get(pk=broken).attempts == 1
    session = Session.objects.select_related("card").get()
    assert session.card.markdown == "Testing"
    assert "Testing" in SessionFragments.objects.get(session=session).card
    assert not Artifact.objects.exists()


def test_a_batch_stores_each_changed_sessions_fragments_once(kept_only):
    registered = make_agent()
    push(Client(), registered, status("SUBMITTED", at=0))
    push(Client(), registered, status("SUBMITTED", task="t-2", context="ctx-2", at=0))
    applier.drain()  # both sessions exist and have stored fragments
    for second in range(1, 5):
        push(Client(), registered, status("WORKING", at=second, text=f"step {second}"))
    for second in range(1, 3):
        push(Client(), registered, status("WORKING", task="t-2", context="ctx-2", at=second))

    with CaptureQueriesContext(connection) as queries:
        batch = applier.apply_batch(seconds=60.0)  # however slow this machine is today

    assert (batch.claimed, batch.applied, len(batch.sessions)) == (6, 6, 2)
    # Both sessions' in one statement (each statement is a round trip on PostgreSQL).
    stores = [
        q["sql"]
        for q in queries
        if q["sql"].startswith(
            ('UPDATE "tasks_sessionfragments"', 'INSERT INTO "tasks_sessionfragments"')
        )
        and '"card"' in q["sql"]
    ]
    assert len(stores) == 1, [sql[:60] for sql in stores]
    assert SessionFragments.objects.filter(revision__gt=0).count() == 2
    # ...showing where each session is now, not where the batch's first push left it.
    view = SessionFragments.objects.get(session__context_id="ctx-1")
    assert "step 4" in view.card and "step 1" not in view.card
    assert Message.objects.filter(session__context_id="ctx-1").count() == 4


def test_a_batch_finds_and_locks_its_sessions_and_tasks_in_a_few_queries_not_per_task(kept_only):
    registered = make_agent()
    contexts = [f"ctx-{n}" for n in range(5)]
    for n, context in enumerate(contexts):
        push(Client(), registered, status("SUBMITTED", task=f"t-{n}", context=context, at=0))
    applier.drain()
    for n, context in enumerate(contexts):
        push(Client(), registered, status("WORKING", task=f"t-{n}", context=context, at=1))

    with CaptureQueriesContext(connection) as queries:
        batch = applier.apply_batch(seconds=60.0)

    assert (batch.applied, len(batch.sessions)) == (5, 5)
    one_by_one = [
        q["sql"]
        for q in queries
        if '"tasks_task"."task_id" = ' in q["sql"]
        or 'FROM "tasks_session" WHERE "tasks_session"."id" = ' in q["sql"]
    ]
    assert one_by_one == []
    assert [Task.objects.get(task_id=f"t-{n}").state for n in range(5)] == [
        "TASK_STATE_WORKING"
    ] * 5
    assert set(Delivery.objects.values_list("outcome", flat=True)) == {"applied"}


def test_a_batch_whose_deliveries_all_apply_takes_no_savepoint_per_delivery(kept_only):
    registered = make_agent()
    for context in ("ctx-1", "ctx-2"):  # started: creating rows takes savepoints of its own
        push(Client(), registered, status("SUBMITTED", task=f"t-{context}", context=context))
    applier.drain()
    for second in range(1, 4):
        for context in ("ctx-1", "ctx-2"):
            task = f"t-{context}"
            push(Client(), registered, status("WORKING", task=task, context=context, at=second))

    with CaptureQueriesContext(connection) as queries:
        batch = applier.apply_batch(seconds=60.0)

    assert (batch.applied, len(batch.sessions)) == (6, 2)
    savepoints = [q["sql"] for q in queries if q["sql"].startswith("SAVEPOINT")]
    # The batch's own only: marking and storing fragments take none either.
    assert len(savepoints) == 1, savepoints


def test_a_batch_reads_its_sessions_cards_in_one_query_not_per_session(kept_only):
    registered = make_agent()
    contexts = [f"ctx-{n}" for n in range(4)]
    for n, context in enumerate(contexts):
        push(Client(), registered, status("WORKING", task=f"t-{n}", context=context, text="a"))
    applier.drain()  # four sessions, each with a card
    for n, context in enumerate(contexts):
        push(Client(), registered, status("WORKING", task=f"t-{n}", context=context, text="b"))

    with CaptureQueriesContext(connection) as queries:
        batch = applier.apply_batch(seconds=60.0)

    assert (batch.applied, len(batch.sessions)) == (4, 4)
    # Read with its locked sessions, and not again to render their fragments after commit.
    reads = [q["sql"] for q in queries if q["sql"].startswith('SELECT "tasks_progresscard"')]
    assert len(reads) == 1, [sql[:80] for sql in reads]
    views = SessionFragments.objects.select_related("session__card")
    assert [(v.revision, ">b</p>" in v.card) for v in views] == [
        (v.session.card.revision, True) for v in views
    ]


def pushes_to_four_sessions() -> list[dict]:
    """Two questions open in two turns, a question its task's end closed, more turns than a
    card reads (the newest ended), a plan."""
    pushes = [
        status("WORKING", task="a-1", context="a", at=1, text="Looking"),
        status("AUTH_REQUIRED", task="a-1", context="a", at=2, metadata=approval("i-1", "Deploy?")),
        status("WORKING", task="a-2", context="a", at=3, text="Meanwhile, the docs"),
        status("INPUT_REQUIRED", task="a-2", context="a", at=4, metadata=approval("i-3", "Which?")),
        status("INPUT_REQUIRED", task="b-1", context="b", at=1, metadata=approval("i-2", "Which?")),
        status("COMPLETED", task="b-1", context="b", at=2, text="Done without it"),
    ]
    pushes += [
        status("WORKING", task=f"c-{n}", context="c", at=n, text=f"Turn {n}") for n in range(25)
    ]
    pushes.append(status("COMPLETED", task="c-24", context="c", at=30))
    steps = progress(("Read", "completed"), ("Write", "in_progress"), ("Ship", "pending"))
    pushes.append(status("WORKING", task="d-1", context="d", at=1, metadata=steps))
    return pushes


def derived(agent) -> dict:
    return {
        s.context_id: (s.state, s.needs_human, s.title, s.card.plan, s.card.markdown, s.card.facts)
        for s in Session.objects.filter(agent=agent).select_related("card")
    }


def test_a_batch_of_many_sessions_derives_each_as_its_pushes_applied_one_by_one_would(kept_only):
    one_by_one, batched = make_agent(name="One by one"), make_agent(name="Batched")
    for body in pushes_to_four_sessions():
        push(Client(), one_by_one, body)
        assert applier.apply_batch(seconds=60.0).applied == 1
    for body in pushes_to_four_sessions():
        push(Client(), batched, body)

    with CaptureQueriesContext(connection) as queries:
        batch = applier.apply_batch(seconds=60.0)

    assert (batch.applied, len(batch.sessions)) == (33, 4)
    # What deriving reads, read for the four sessions at once.
    newest_open = 'FROM "tasks_interaction" INNER JOIN "tasks_task"'
    reads = [q["sql"] for q in queries if newest_open in q["sql"] and "opened_at" in q["sql"]]
    assert len(reads) == 1 and '"session_id" IN (' in reads[0], reads
    assert derived(batched.agent) == derived(one_by_one.agent)
    assert derived(batched.agent)["a"][:2] == ("TASK_STATE_INPUT_REQUIRED", True)
    assert derived(batched.agent)["b"][:2] == ("TASK_STATE_COMPLETED", False)
    assert derived(batched.agent)["c"][0] == "TASK_STATE_COMPLETED"


def snapshot_saying(said: dict, *, task: str, context: str, state: str = "SUBMITTED") -> dict:
    """A task snapshot whose history carries one message without a time (a user's)."""
    return {
        "task": {
            "id": task,
            "contextId": context,
            "status": {"state": f"TASK_STATE_{state}"},
            "history": [said],
        }
    }


def pushes_with_a_transcript() -> list[dict]:
    """Notes a later one supersedes, a plan without a note (a receipt alone), a user's
    message its snapshot repeats, one received after the first dated status it precedes
    (which moves it before that status), and one received after the task's dated reply
    (kept before it)."""
    user = {"messageId": "u-1", "role": "ROLE_USER", "parts": [{"text": "Tidy the builds"}]}
    late = {"messageId": "u-2", "role": "ROLE_USER", "parts": [{"text": "and the caches"}]}
    after = {"messageId": "u-3", "role": "ROLE_USER", "parts": [{"text": "Thanks"}]}
    steps = progress(("Read", "completed"), ("Write", "in_progress"))
    return [
        snapshot_saying(user, task="a-1", context="a"),
        status("WORKING", task="a-1", context="a", at=1, text="Looking at **builds**"),
        snapshot_saying(user, task="a-1", context="a", state="WORKING"),
        status("WORKING", task="a-1", context="a", at=2, text="Found 3"),
        status("WORKING", task="a-1", context="a", at=3, metadata=steps),
        status("WORKING", task="a-1", context="a", at=4, text="Deleting"),
        snapshot_saying(late, task="b-1", context="b"),
        status("WORKING", task="b-1", context="b", at=1, text="On it"),
        status("WORKING", task="b-1", context="b", at=2, text="Still on it"),
        status("WORKING", task="c-1", context="c", at=3),
        status("COMPLETED", task="c-1", context="c", at=5, text="Done"),
        snapshot_saying(after, task="c-1", context="c", state="COMPLETED"),
    ]


def transcript(agent) -> dict:
    return {
        session.context_id: [
            (m.role == "ROLE_USER", m.text, m.at.second, m.estimated_time, m.card_update)
            for m in session.messages.order_by("at", "id")
        ]
        for session in Session.objects.filter(agent=agent)
    }


def test_a_batch_keeps_its_transcript_in_order_once_each(kept_only):
    registered = make_agent()
    with time_machine.travel(T0 + timedelta(days=1), tick=False):  # after every dated status
        for body in pushes_with_a_transcript():
            push(Client(), registered, body)

        batch = applier.apply_batch(seconds=60.0)

    assert (batch.applied, len(batch.sessions)) == (12, 3)
    # The users' messages once each and before the first dated status, though received
    # after it; the notes a later one superseded kept as said; the last note on the card
    # and in the transcript as its receipt.
    assert transcript(registered.agent) == {
        "a": [
            (True, "Tidy the builds", 0, True, False),
            (False, "Looking at **builds**", 1, False, False),
            (False, "Found 3", 2, False, False),
            (False, "Progress card updated (rev 1, 1/2 done)", 4, False, True),
        ],
        "b": [
            (True, "and the caches", 0, True, False),
            (False, "On it", 1, False, False),
            (False, "Progress card updated (rev 1)", 2, False, True),
        ],
        "c": [
            (True, "Thanks", 4, True, False),
            (False, "Done", 5, False, False),
            (False, "Progress card updated (rev 1)", 5, False, True),
        ],
    }
    said = Message.objects.get(text="Looking at **builds**")
    assert said.html == "<p>Looking at <strong>builds</strong></p>"


def test_a_batch_writes_each_task_session_card_and_search_text_once_and_its_transcript_together(
    kept_only,
):
    registered = make_agent()
    contexts = ["ctx-1", "ctx-2", "ctx-3"]
    for context in contexts:
        push(Client(), registered, status("SUBMITTED", task=f"t-{context}", context=context))
    applier.drain()
    for second in range(1, 4):
        for context in contexts:
            body = status("WORKING", task=f"t-{context}", context=context, at=second, text="x")
            push(Client(), registered, body)

    with CaptureQueriesContext(connection) as queries:
        batch = applier.apply_batch(seconds=60.0)

    assert (batch.applied, len(batch.sessions)) == (9, 3)
    statements = [q["sql"] for q in queries]
    # Each row once; on PostgreSQL, where each statement is a round trip, all in one.
    each = 1 if connection.vendor == "postgresql" else 3
    for start in ('UPDATE "tasks_task"', 'UPDATE "tasks_session"', 'UPDATE "tasks_progresscard"'):
        assert len([sql for sql in statements if sql.startswith(start)]) == each, start
    assert len([sql for sql in statements if "INTO tasks_sessiontext" in sql]) == each
    inserts = [sql for sql in statements if 'INTO "tasks_message"' in sql]
    assert len(inserts) == 1, inserts
    # Two notes each a later one superseded, and the receipt of the one on the card.
    assert Message.objects.count() == 9
    assert set(Task.objects.values_list("state", flat=True)) == {"TASK_STATE_WORKING"}
    # Each session, card and search text as its last push left it.
    assert set(Session.objects.values_list("state", flat=True)) == {"TASK_STATE_WORKING"}
    assert set(ProgressCard.objects.values_list("markdown", "revision")) == {("x", 2)}
    for context in contexts:
        session = Session.objects.get(context_id=context)
        assert session.updated_at == Task.objects.get(session=session).status_received_at
        assert search.find(Session.objects.filter(pk=session.pk), "x") != []


def test_a_long_history_is_kept_whole_in_statements_of_bounded_size(kept_only):
    registered = make_agent()
    said = [
        {"messageId": f"m-{n}", "role": "ROLE_AGENT", "parts": [{"text": f"line {n}"}]}
        for n in range(2 * SAID_ROWS + 1)
    ]
    body = snapshot_saying(said[0], task="t-1", context="ctx-1", state="WORKING")
    body["task"]["history"] = said
    push(Client(), registered, body)
    push(Client(), registered, status("WORKING", task="t-1", context="ctx-1", text="next"))

    with CaptureQueriesContext(connection) as queries:
        batch = applier.apply_batch(seconds=60.0)

    assert batch.applied == 2
    # SAID_ROWS rows at most to a statement (fewer on SQLite, which bounds its parameters).
    inserts = [q["sql"] for q in queries if 'INTO "tasks_message"' in q["sql"]]
    assert len(inserts) >= 3, [sql[:60] for sql in inserts]
    kept = list(Message.objects.order_by("at", "id").values_list("text", flat=True))
    assert kept[:-1] == [f"line {n}" for n in range(2 * SAID_ROWS + 1)]


def test_on_postgresql_a_batch_stores_its_fragments_in_its_own_transaction(kept_only):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite renders after commit: a batch holds the one write lock")
    registered = make_agent()
    for n in range(3):
        push(Client(), registered, status("WORKING", task=f"t-{n}", context=f"c-{n}", text="a"))
    applier.drain()
    for n in range(3):
        push(Client(), registered, status("WORKING", task=f"t-{n}", context=f"c-{n}", text="b"))

    with CaptureQueriesContext(connection) as queries:
        batch = applier.apply_batch()

    assert (batch.applied, len(batch.sessions)) == (3, 3)
    statements = [q["sql"] for q in queries]
    assert statements.count("COMMIT") == 1, statements  # no second transaction
    assert not any('tasks_sessionfragments" SET "version" = \'\'' in sql for sql in statements)
    views = SessionFragments.objects.select_related("session__card")
    assert [(v.revision, ">b</p>" in v.card) for v in views] == [
        (v.session.card.revision, True) for v in views
    ]


def test_fragments_a_batch_cannot_store_together_are_stored_each_alone(kept_only, database):
    registered = make_agent()
    push(Client(), registered, status("WORKING", at=1, text="first"))
    applier.drain()  # ctx-1 has stored fragments
    database.refuse("tasks_sessionfragments", "INSERT")  # a new session's first fragments fail
    push(Client(), registered, status("WORKING", at=2, text="second"))
    push(Client(), registered, status("WORKING", task="t-2", context="ctx-2", at=2, text="new"))

    batch = applier.apply_batch(seconds=60.0)

    assert (batch.applied, len(batch.sessions)) == (2, 2)
    view = SessionFragments.objects.get()  # ctx-1's, stored although ctx-2's could not be
    assert view.session.context_id == "ctx-1" and ">second</p>" in view.card
    assert view.revision == Session.objects.get(context_id="ctx-1").card.revision
    # ctx-2's fragments are rendered on read meanwhile.
    assert Session.objects.get(context_id="ctx-2").card.markdown == "new"


@contextmanager
def another_transaction(hold: Callable[[], object], *, for_at_most: float = 10) -> Iterator[None]:
    """While the block runs, another thread (standing for another process) holds what `hold`
    locks or creates, in a transaction of its own, until the block ends or `for_at_most`
    seconds have passed, whichever is first."""
    holding, release = threading.Event(), threading.Event()

    def other_process() -> None:
        try:
            with transaction.atomic():
                hold()
                holding.set()
                release.wait(for_at_most)
        finally:
            connections.close_all()

    other = threading.Thread(target=other_process)
    other.start()
    try:
        assert holding.wait(10)
        yield
    finally:
        release.set()
        other.join(10)


def test_a_session_another_process_is_applying_defers_only_its_own_deliveries(kept_only, caplog):
    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's: SQLite has one writer at a time")
    registered = make_agent()
    for context in ("busy", "free"):
        push(Client(), registered, status("SUBMITTED", task=f"t-{context}", context=context))
    applier.drain()
    for context in ("busy", "free"):
        push(Client(), registered, status("WORKING", task=f"t-{context}", context=context, at=1))
    busy = Session.objects.select_for_update().filter(context_id="busy")
    with (
        another_transaction(busy.get),
        caplog.at_level(logging.INFO, logger="tasks.pushes.applier"),
    ):
        batch = applier.apply_batch()

    assert (batch.claimed, batch.applied, batch.deferred, batch.failed) == (2, 1, 1, 0)
    assert "applied whole" not in caplog.text, "a held session made the batch start over"
    states = dict(Task.objects.values_list("task_id", "state"))
    assert states == {"t-busy": "TASK_STATE_SUBMITTED", "t-free": "TASK_STATE_WORKING"}
    assert applier.drain() == 1
    assert Task.objects.get(task_id="t-busy").state == "TASK_STATE_WORKING"


def test_a_lone_push_whose_session_another_process_is_applying_waits_for_a_later_batch(
    kept_only,
):
    """A batch of one task's pushes reads it prepared (state.Locked._preload_one): a held
    session defers them as a batch of many does, rather than waiting for its lock."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's: SQLite has one writer at a time")
    registered = make_agent()
    push(Client(), registered, status("SUBMITTED", task="t-busy", context="busy"))
    applier.drain()
    push(Client(), registered, status("WORKING", task="t-busy", context="busy", at=1))
    busy = Session.objects.select_for_update().filter(context_id="busy")
    with another_transaction(busy.get):
        started = time.monotonic()
        batch = applier.apply_batch()
        waited = time.monotonic() - started

    assert (batch.claimed, batch.applied, batch.deferred, batch.failed) == (1, 0, 1, 0)
    assert waited < 2, "the batch waited for the other process's lock"
    assert Task.objects.get().state == "TASK_STATE_SUBMITTED"
    assert applier.drain() == 1
    assert Task.objects.get().state == "TASK_STATE_WORKING"


def test_drain_looks_again_for_a_due_push_whose_row_is_held_for_a_moment(kept_only):
    """A claim passes over a row another transaction holds (a duplicate being counted on
    it): drain sees one is still due, and applies it once it is let go, rather than leave
    it to the next poll a second later."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's: SQLite has one writer at a time")
    registered = make_agent()
    push(Client(), registered, status("WORKING", at=1, text="held a moment"))
    # Let go while drain is still looking (for 0.2 s at least).
    with another_transaction(Delivery.objects.select_for_update().get, for_at_most=0.05):
        applied = applier.drain()

    assert applied == 1
    assert Task.objects.get().status_message == "held a moment"


def test_a_session_another_process_is_creating_defers_its_deliveries_rather_than_wait(
    kept_only, caplog
):
    """Two appliers each creating a session (and a task) the other had just created waited
    on each other's uncommitted rows in the unique indexes: a deadlock, and a failed apply."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's: SQLite has one writer at a time")
    registered = make_agent()
    for context in ("new", "free"):
        push(Client(), registered, status("WORKING", task=f"t-{context}", context=context))

    def creating_new() -> None:
        changes.open_session(registered.agent, "new", at=timezone.now())

    with another_transaction(creating_new, for_at_most=3):
        started = time.monotonic()
        batch = applier.apply_batch()
        waited = time.monotonic() - started

    assert (batch.claimed, batch.applied, batch.deferred, batch.failed) == (2, 1, 1, 0)
    assert waited < 2, "the batch waited for the other process's new session"
    assert applier.drain() == 1
    assert dict(Task.objects.values_list("task_id", "state")) == {
        "t-new": "TASK_STATE_WORKING",
        "t-free": "TASK_STATE_WORKING",
    }
    assert Session.objects.filter(context_id="new").count() == 1


def test_a_batch_reads_its_agents_once_not_again_for_each_session_it_renders(kept_only):
    registered = make_agent()
    for number in range(3):
        push(Client(), registered, status("WORKING", task=f"t-{number}", context=f"c-{number}"))

    with CaptureQueriesContext(connection) as queries:
        batch = applier.apply_batch(seconds=60.0)

    assert (batch.applied, len(batch.sessions)) == (3, 3)
    # Loaded once, with the deliveries (the spool's move only asks which of its agents
    # still exist).
    agents = [q["sql"] for q in queries if '"tasks_agent"."card_url"' in q["sql"]]
    assert len(agents) == 1 and 'FROM "tasks_delivery"' in agents[0], agents
    # The tiles it stored still name the agent.
    assert all(registered.agent.name in view.tile for view in SessionFragments.objects.all())


def test_under_load_the_applier_rests_after_a_thin_batch_so_the_next_holds_more_of_each_session(
    kept_only, monkeypatch
):
    # No batch is cut short by SQLite's time limit on a loaded machine: what is a batch here
    # is what the test says.
    monkeypatch.setattr(applier, "BATCH_SECONDS", 60.0)
    registered = make_agent()
    rests = []

    def pushes_arrive_meanwhile(seconds: float) -> None:
        rests.append(seconds)
        if len(rests) == 1:
            for second in range(5, 17):
                task = f"task-{second % 4}"
                body = status("WORKING", task=task, context=task, at=second, text="on")
                push(Client(), registered, body)

    for number in range(4):
        task = f"task-{number}"
        push(Client(), registered, status("WORKING", task=task, context=task, at=number + 1))
    started = time.monotonic()
    assert applier.drain(gather=0.02, sleep=pushes_arrive_meanwhile) == 16
    took = time.monotonic() - started

    # Four at once into four sessions is load, and thin (one per session): a rest of at
    # least `gather`, no longer than the batch took. The twelve that came meanwhile went to
    # those four sessions in one batch: thick enough, so no rest; then nothing was left.
    assert len(rests) == 1 and 0.02 <= rests[0] <= took, rests
    times = Delivery.objects.order_by("pk").values_list("applied_at", flat=True)
    assert len(set(times[:4])) == 1 and len(set(times[4:])) == 1 and times[0] < times[4]
    push(Client(), registered, status("WORKING", task="task-0", context="task-0", at=20))
    assert applier.drain(gather=0.02, sleep=pushes_arrive_meanwhile) == 1
    assert len(rests) == 1, "a lone push waited"


def test_a_few_pushes_that_meet_in_a_batch_are_not_made_to_wait_for_a_rest(kept_only, monkeypatch):
    monkeypatch.setattr(applier, "BATCH_SECONDS", 60.0)
    registered = make_agent()
    rests = []
    for number in range(applier.GATHER_FROM - 1):  # thin: one for each session
        task = f"task-{number}"
        push(Client(), registered, status("WORKING", task=task, context=task, at=1))

    assert applier.drain(gather=0.02, sleep=rests.append) == applier.GATHER_FROM - 1
    assert rests == []


def test_a_thin_batch_rests_half_as_long_as_it_took(kept_only, monkeypatch):
    monkeypatch.setattr(applier, "BATCH_SECONDS", 60.0)  # one batch, however loaded the machine
    registered = make_agent()
    for number in range(applier.GATHER_FROM):
        push(Client(), registered, status("WORKING", task=f"t-{number}", context=f"c-{number}"))
    real_apply_batch = applier.apply_batch

    def slow_apply_batch(*args, **kwargs):
        time.sleep(0.1)  # a batch that took 0.1 s of work
        return real_apply_batch(*args, **kwargs)

    monkeypatch.setattr(applier, "apply_batch", slow_apply_batch)
    rests = []
    started = time.monotonic()
    assert applier.drain(gather=0.02, sleep=rests.append) == applier.GATHER_FROM
    took = time.monotonic() - started  # the batch, and a look for more after it
    assert len(rests) == 1 and 0.05 <= rests[0] <= took / 2, (rests, took)


def test_a_batch_whose_time_is_up_finishes_the_sessions_it_began_and_leaves_the_others(
    kept_only,
):
    registered = make_agent()
    for task in ("a", "b"):  # two sessions that exist already
        push(Client(), registered, status("WORKING", task=task, context=task, at=1))
    applier.drain()
    pushed = {}
    for name, task, at in (("a2", "a", 2), ("b2", "b", 2), ("a3", "a", 3), ("a4", "a", 4)):
        body = status("WORKING", task=task, context=task, at=at, text=name)
        pushed[name] = accepted(push(Client(), registered, body))

    # Time is up after the first delivery; the rest of the batch may take a minute.
    batch = applier.apply_batch(seconds=0.0, overtime=60.0)

    outcome = dict(Delivery.objects.filter(pk__in=pushed.values()).values_list("pk", "outcome"))
    assert {name: outcome[pk] for name, pk in pushed.items()} == {
        "a2": "applied",
        "b2": "pending",
        "a3": "applied",
        "a4": "applied",
    }
    assert (batch.applied, len(batch.sessions)) == (3, 1)
    assert Task.objects.get(task_id="a").status_message == "a4"
    assert applier.apply_batch(seconds=0.0, overtime=60.0).applied == 1
    assert Task.objects.get(task_id="b").status_message == "b2"


def test_a_batch_whose_time_is_up_stops_at_a_delivery_whose_session_is_not_known_yet(
    kept_only,
):
    registered = make_agent()
    push(Client(), registered, status("WORKING", task="a", context="shared", at=1))
    applier.drain()
    pushed = {}
    # A new task in the same context: its session is the one "a" is in, which the batch
    # cannot know before applying it. Applying "a3" before it would reorder that session.
    for name, task, at in (("a2", "a", 2), ("new", "n", 3), ("a3", "a", 4)):
        body = status("WORKING", task=task, context="shared", at=at, text=name)
        pushed[name] = accepted(push(Client(), registered, body))

    applier.apply_batch(seconds=0.0, overtime=60.0)

    outcome = dict(Delivery.objects.filter(pk__in=pushed.values()).values_list("pk", "outcome"))
    assert [outcome[pushed[name]] for name in ("a2", "new", "a3")] == [
        "applied",
        "pending",
        "pending",
    ]
    applier.drain()
    assert set(Delivery.objects.values_list("outcome", flat=True)) == {"applied"}


@pytest.fixture
def background(settings) -> Iterator[applier.Background]:
    """This process's applier thread, polling too rarely to matter: what it applies within
    the test, it applied because it started or because a push woke it."""
    worker = applier.background
    poll = worker.poll_seconds
    worker.poll_seconds = 60.0
    yield worker
    worker.stop()
    worker.poll_seconds = poll


def test_the_background_applier_applies_what_a_crash_left_pending_when_it_starts(
    settings, background
):
    settings.ONLOOKER_APPLIER = "external"  # a process that died before applying these
    registered = make_agent()
    left = [
        accepted(push(Client(), registered, status("WORKING", task=f"t-{n}", at=1)))
        for n in range(3)
    ]
    assert not Delivery.objects.filter(pk__in=left).exclude(outcome="pending").exists()

    settings.ONLOOKER_APPLIER = "background"
    background.start()

    wait_until(lambda: Delivery.objects.filter(pk__in=left, outcome="applied").count() == 3)
    assert Task.objects.count() == 3


def test_the_background_applier_applies_a_lone_push_at_once(settings, background):
    settings.ONLOOKER_APPLIER = "background"
    background.start()
    registered = make_agent()
    wait_until(lambda: background.running)

    started = time.monotonic()
    delivery = accepted(push(Client(), registered, status("WORKING", at=1, text="now")))
    wait_until(lambda: Delivery.objects.filter(pk=delivery, outcome="applied").exists())

    assert time.monotonic() - started < 2.0, "waited for a poll instead of being woken"
    assert Task.objects.get().status_message == "now"


def test_the_admin_applies_a_failed_delivery_now_once_its_cause_is_fixed(
    kept_only, database, admin_client, settings
):
    registered = make_agent()
    database.refuse("tasks_artifact", "INSERT")
    broken = accepted(push(Client(), registered, artifact("report", "# Results")))
    applier.drain()
    assert Delivery.objects.get(pk=broken).retry_at is not None
    database.allow_all()

    settings.ONLOOKER_APPLIER = "inline"  # so the wake applies it before the page answers
    response = admin_client.post(
        "/admin/tasks/delivery/", {"action": "apply_now", "_selected_action": [broken]}
    )

    assert response.status_code == 302
    assert Delivery.objects.get(pk=broken).outcome == "applied"
    assert Artifact.objects.get().parts == [{"text": "# Results"}]


def test_fragments_rendered_before_a_newer_change_are_not_stored_over_it(kept_only):
    registered = make_agent()
    push(Client(), registered, status("WORKING", at=1, text="first"))
    applier.drain()
    session = Session.objects.select_related("agent").get()
    stale = fragments.publish_later([fragments.Changed(session, None)])
    stale.render()  # rendered, then overtaken:
    push(Client(), registered, status("WORKING", at=2, text="second"))
    applier.drain()

    stale.store()

    view = SessionFragments.objects.get()
    assert "second" in view.card and view.revision == Session.objects.get().card.revision


@pytest.fixture
def applying_on_postgresql(settings, background, postgresql_pool):
    """The background applier, after it applied one push (its connection is taken): the
    agent that pushed it."""
    settings.ONLOOKER_APPLIER = "background"
    background.start()
    registered = make_agent()
    applied(accepted(push(Client(), registered, status("WORKING", at=1))))
    return registered


def applied(delivery: int) -> None:
    wait_until(lambda: Delivery.objects.filter(pk=delivery, outcome="applied").exists(), 15.0)


def test_the_applier_keeps_its_database_connection_rather_than_one_from_the_pool_each_batch(
    applying_on_postgresql, postgresql_pool
):
    asked = postgresql_pool.get_stats().get("requests_num", 0)

    for at in (2, 3, 4):  # each woken for and applied alone
        applied(accepted(push(Client(), applying_on_postgresql, status("WORKING", at=at))))

    assert postgresql_pool.get_stats().get("requests_num", 0) == asked


def test_the_applier_replaces_its_connection_once_the_server_has_ended_it(applying_on_postgresql):
    # The server ends every connection but this test's (a restart, an operator): the
    # applier's, and those idle in the pool.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        (ended,) = cursor.fetchone()
    assert ended

    later = accepted(push(Client(), applying_on_postgresql, status("WORKING", at=2, text="after")))

    # A step or two fail on connections the server ended, each replaced after it failed.
    applied(later)
    assert Task.objects.get().status_message == "after"
