"""A live session page refetches its activity once a second while its agent streams, so the
transcript's rows are rendered once per process and kept (tasks/sessions/transcript_rows.py):
a refetch renders only the rows it has not shown before, and a kept row is never shown for a
message that no longer holds what it was made from."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.template import autoreload
from django.test.signals import template_rendered
from django.urls import reverse

from tasks.models import Message, Session
from tasks.sessions import transcript_rows
from tests.conftest import make_agent, push

ROW = "tasks/_transcript_row.html"
RUN = "tasks/_receipt_run.html"


@pytest.fixture
def rendered():
    """The names of the templates rendered since the test began, in order."""
    names: list[str] = []

    def seen(sender, template, context, **kwargs):
        names.append(template.name)

    template_rendered.connect(seen)
    yield names
    template_rendered.disconnect(seen)


def say(client, registered, text: str, *, role: str = "ROLE_AGENT") -> None:
    body = {
        "messageId": uuid.uuid4().hex,
        "role": role,
        "contextId": "ctx-rows",
        "parts": [{"text": text}],
    }
    assert push(client, registered, {"message": body}).status_code == 200


def activity(client, session: Session) -> str:
    response = client.get(reverse("session-activity", args=[session.pk]))
    assert response.status_code == 200
    return response.content.decode()


def one_said(client, user, team, word: str) -> tuple[Session, Message]:
    """A session whose agent said one thing, and that message; `user` is signed in."""
    say(client, make_agent(team=team), unique(word))
    client.force_login(user)
    return Session.objects.get(), Message.objects.get()


def unique(text: str) -> str:
    # Rows are kept for the whole process: a word no other test wrote keeps this one's own.
    return f"{text} {uuid.uuid4().hex}"


def test_a_refetch_renders_only_the_rows_it_has_not_shown_before(client, alice, ops, rendered):
    agent = make_agent(team=ops)
    words = [unique("first"), unique("second"), unique("third")]
    for text in words:
        say(client, agent, text)
    session = Session.objects.get()
    client.force_login(alice)

    page = activity(client, session)
    assert all(text in page for text in words)
    assert rendered.count(ROW) == 3

    rendered.clear()
    assert activity(client, session) == page
    assert rendered.count(ROW) == 0

    fourth = unique("fourth")
    say(client, agent, fourth)
    rendered.clear()
    page = activity(client, session)
    assert rendered.count(ROW) == 1
    assert page.index(words[2]) < page.index(fourth)


def test_a_message_whose_time_moved_shows_its_new_time(client, alice, ops):
    session, message = one_said(client, alice, ops, "moved")
    shown = f'<time datetime="{message.at.isoformat()}" data-seconds>'
    assert shown in activity(client, session)

    # As the applier moves a message dated only by its receipt before the task's first
    # dated status (transcript.before_first_dated).
    earlier = message.at - timedelta(hours=1, seconds=7)
    Message.objects.filter(pk=message.pk).update(at=earlier)

    page = activity(client, session)
    assert f'<time datetime="{earlier.isoformat()}" data-seconds>' in page
    assert shown not in page


def test_a_message_alike_in_all_but_its_text_shows_its_own(client, alice, ops):
    # A database rolled back under a running process (as between tests) can give the same
    # id, time and session to a message that says something else.
    session, first = one_said(client, alice, ops, "alpha")
    assert first.text in activity(client, session)

    second = unique("omega")
    assert len(second) == len(first.text)
    Message.objects.filter(pk=first.pk).update(text=second, html=f"<p>{second}</p>")

    page = activity(client, session)
    assert second in page and first.text not in page


def test_a_run_of_receipts_is_folded_and_kept_like_a_row(client, alice, ops, rendered):
    agent = make_agent(team=ops)
    say(client, agent, unique("before the run"))
    session = Session.objects.get()
    said = Message.objects.get()
    for number in range(3):
        Message.objects.create(
            session=session,
            role=Message.Role.AGENT,
            text=f"Progress card updated (rev {number + 1})",
            at=said.at + timedelta(seconds=number + 1),
            card_update=True,
        )
    client.force_login(alice)

    page = activity(client, session)
    assert page.count('class="message message-receipts" data-receipts="3"') == 1
    assert page.count("data-receipt>") == 3
    assert rendered.count(RUN) == 1

    rendered.clear()
    assert activity(client, session) == page
    assert rendered.count(RUN) == 0 and rendered.count(ROW) == 0


def test_rows_past_the_bound_are_dropped_and_rendered_again(
    client, alice, ops, rendered, monkeypatch
):
    agent = make_agent(team=ops)
    words = [unique(f"message {number}") for number in range(6)]
    for text in words:
        say(client, agent, text)
    session = Session.objects.get()
    client.force_login(alice)
    # Room for about two of these rows.
    monkeypatch.setattr(transcript_rows, "KEPT_CHARS", 900)

    page = activity(client, session)
    assert all(text in page for text in words)
    rendered.clear()
    assert activity(client, session) == page
    assert rendered.count(ROW) >= 4  # the oldest kept were dropped as newer came in


def test_templates_read_again_make_the_rows_again(client, alice, ops, rendered):
    # A development server, seeing a template edited, empties the template loaders' caches
    # rather than restarting: the rows kept must not outlive the templates they came from.
    agent = make_agent(team=ops)
    words = [unique("one"), unique("two")]
    for text in words:
        say(client, agent, text)
    session = Session.objects.get()
    client.force_login(alice)
    activity(client, session)

    autoreload.reset_loaders()
    rendered.clear()
    page = activity(client, session)
    assert rendered.count(ROW) == 2
    assert all(text in page for text in words)
