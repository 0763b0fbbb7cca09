"""A task's raw deliveries (issue 15), for people debugging an agent: each push as received,
newest first, pretty-printed, with its outcome and warnings; only for people who may see
the session, and hostile bodies stay text."""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from tasks.models import Delivery, Session, Task
from tasks.web.deliveries_page import BODY_CHARS, PAGE
from tests.builders import status
from tests.conftest import make_agent, member, push

pytestmark = pytest.mark.django_db


@pytest.fixture
def registered(ops):
    return make_agent(team=ops)


@pytest.fixture
def reader(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def url(task: Task) -> str:
    return f"/sessions/{task.session_id}/tasks/{task.pk}/deliveries/"


def page_of(client: Client, task: Task, query: str = "") -> str:
    response = client.get(url(task) + query)
    assert response.status_code == 200, response.content
    return response.content.decode()


def bodies(page: str) -> list[str]:
    """The bodies as a person reads them (the page's text, unescaped)."""
    shown = r"<pre class=\"delivery-body\" data-delivery-body[^>]*>(.*?)</pre>"
    found = re.findall(shown, page, re.S)
    return [html.unescape(body) for body in found]


def test_a_tasks_deliveries_show_newest_first_with_outcome_warnings_and_duplicates(
    registered, reader
):
    client = Client()
    push(client, registered, status("WORKING", at=5, text="Going"), msg_id="first")
    push(client, registered, status("WORKING", at=5, text="Going"), msg_id="first")  # again
    push(client, registered, status("INPUT_REQUIRED", at=1, text="Stale?"), msg_id="second")
    other = status("WORKING", at=9, context="ctx-elsewhere")
    push(client, registered, other, msg_id="third")  # another contextId: a warning
    push(client, registered, status("WORKING", task="task-2", at=1))  # another task
    task = Task.objects.get(task_id="task-1")

    page = page_of(reader, task)

    shown = re.findall(r'data-delivery="(\d+)"', page)
    expected = Delivery.objects.filter(task_id="task-1").order_by("-id")
    expected = expected.values_list("pk", flat=True)
    assert [int(pk) for pk in shown] == list(expected) and len(shown) == 3
    assert "older than what is stored; state not applied" in page
    assert "1 duplicate" in page
    assert "contextId &#x27;ctx-elsewhere&#x27; differs" in page
    # Pretty-printed: one key per line, indented.
    newest = json.loads(Delivery.objects.get(idempotency_key="id:third").body)
    assert bodies(page)[0] == json.dumps(newest, indent=2, ensure_ascii=False)


def test_a_failed_attempt_shows_its_error_and_a_body_that_is_not_json_shows_as_is(
    registered, reader
):
    push(Client(), registered, status("WORKING", at=1))
    task = Task.objects.get()
    Delivery.objects.create(
        agent=registered.agent,
        idempotency_key="broken",
        received_at=timezone.now(),
        kind="status",
        task_id=task.task_id,
        body="{not json <i>at all</i>",
        attempts=2,
        last_error="ValueError: no",
    )

    page = page_of(reader, task)

    assert bodies(page)[0] == "{not json <i>at all</i>"
    assert "<i>" not in page
    assert "2 failed attempts" in page and "Last error: ValueError: no" in page
    assert "received, not applied yet" in page


def test_hostile_bodies_render_as_text(registered, reader):
    hostile = status("WORKING", at=1, text="</pre><script>alert(1)</script>\ud800")
    raw = json.dumps(hostile).encode()  # the lone surrogate travels as the escape \ud800
    assert b"\\ud800" in raw
    assert push(Client(), registered, raw).status_code == 200
    task = Task.objects.get()

    page = page_of(reader, task)

    assert "<script>alert(1)</script>" not in page
    assert "</pre><script>alert(1)</script>\\ud800" in bodies(page)[0]
    assert len(bodies(page)) == 1


def test_a_huge_body_is_cut_and_says_how_big_it_is(registered, reader):
    push(Client(), registered, status("WORKING", at=1))
    task = Task.objects.get()
    huge = json.dumps({"statusUpdate": {"pad": "x" * (BODY_CHARS * 2)}})
    Delivery.objects.create(
        agent=registered.agent,
        idempotency_key="huge",
        received_at=timezone.now(),
        kind="status",
        task_id=task.task_id,
        body=huge,
    )

    page = page_of(reader, task)

    assert len(bodies(page)[0]) == BODY_CHARS
    assert f"Cut: the first {BODY_CHARS:,} of {len(huge):,} characters, as received." in page


def test_deliveries_page_back_twenty_at_a_time(registered, reader):
    push(Client(), registered, status("WORKING", at=1))
    task = Task.objects.get()
    start = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    Delivery.objects.bulk_create(
        Delivery(
            agent=registered.agent,
            idempotency_key=f"k{n}",
            received_at=start + timedelta(seconds=n),
            kind="status",
            task_id=task.task_id,
            body="{}",
            outcome=Delivery.Outcome.APPLIED,
        )
        for n in range(PAGE + 4)
    )
    everything = list(
        Delivery.objects.filter(task_id=task.task_id).order_by("-id").values_list("pk", flat=True)
    )

    first = page_of(reader, task)
    earlier = re.search(r'\?before=(\d+)" data-earlier-deliveries', first).group(1)
    second = page_of(reader, task, f"?before={earlier}")

    assert [int(pk) for pk in re.findall(r'data-delivery="(\d+)"', first)] == everything[:PAGE]
    assert [int(pk) for pk in re.findall(r'data-delivery="(\d+)"', second)] == everything[PAGE:]
    assert "data-earlier-deliveries" not in second and "Back to the newest" in second


@pytest.mark.parametrize("before", ["abc", "9" * 30, "-1", "%ED%A0%80", "1%00", "1&before=x"])
def test_a_bad_before_is_refused_with_a_message(registered, reader, before):
    push(Client(), registered, status("WORKING", at=1))

    response = reader.get(f"{url(Task.objects.get())}?before={before}")

    assert response.status_code == 400
    assert b"before must be a delivery id" in response.content


def test_only_people_who_may_see_the_session_see_its_deliveries(registered, reader):
    push(Client(), registered, status("WORKING", at=1))
    task = Task.objects.get()
    elsewhere = make_agent(team=None, name="Other")
    push(Client(), elsewhere, status("WORKING", at=1, task="their-task", context="theirs"))
    their_task = Task.objects.get(task_id="their-task")
    outsider = Client()
    outsider.force_login(member("mallory"))

    assert outsider.get(url(task)).status_code == 404
    # A task of another session under this session's id is no way in either.
    mixed = f"/sessions/{task.session_id}/tasks/{their_task.pk}/deliveries/"
    assert reader.get(mixed).status_code == 404
    assert Client().get(url(task)).status_code == 302  # to the login page
    assert Session.objects.count() == 2
