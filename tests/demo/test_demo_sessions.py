"""The demo (issue 33): run again, `manage.py demo` does not start its sessions again (a first
message that already titles one of the example agent's sessions is kept, not sent a second
time, so the monitoring screen never shows two "Ship release 2.4 to production"); and "New
session" offers what the example agent does."""

from __future__ import annotations

import io
import itertools
import re

import pytest
from django.template.loader import render_to_string
from django.utils import timezone
from google.protobuf.json_format import MessageToDict

from demo.agent import agent_card
from demo.scenarios import Picker
from tasks.answering.agent_card import parse_card
from tasks.management.commands import demo
from tasks.models import Session
from tests.conftest import make_agent

pytestmark = pytest.mark.django_db


def test_a_second_run_keeps_the_first_runs_sessions_instead_of_starting_them_again(
    monkeypatch, ops
):
    agent = make_agent(team=ops).agent
    sent: list[str] = []
    contexts = itertools.count(1)

    def send_message(to, text, *, push):
        # What the example agent's first push does: a session titled after the message.
        sent.append(text)
        Session.objects.create(
            agent=to, context_id=f"ctx-{next(contexts)}", title=text, updated_at=timezone.now()
        )

    monkeypatch.setattr(demo.a2a_client, "send_message", send_message)
    monkeypatch.setattr(demo.agents, "new_push_config", lambda agent: (None, None))

    first = demo.Command(stdout=io.StringIO(), stderr=io.StringIO())
    assert first._start_sessions(agent, 2) == (2, 0)
    again = demo.Command(stdout=io.StringIO(), stderr=io.StringIO())
    assert again._start_sessions(agent, 3) == (1, 2)  # only the third is new

    assert sent == list(demo.FIRST_MESSAGES[:3])
    titles = list(Session.objects.values_list("title", flat=True))
    assert sorted(titles) == sorted(demo.FIRST_MESSAGES[:3])

    out = io.StringIO()
    demo.Command(stdout=out)._welcome(8000, None, started=1, kept=2)
    assert "Kept 2 sessions from an earlier run" in out.getvalue()
    assert "working on 1 session;" in out.getvalue()


def test_new_session_offers_what_the_example_agent_says_it_does(ops):
    """The example agent's card, read as Onlooker reads any card, becomes buttons under "New
    session" (templates/tasks/_session_examples.html), one per skill, each a message that
    starts that skill's scenario (demo/scenarios.py picks by keyword)."""
    card = MessageToDict(agent_card("http://127.0.0.1:1/a2a/jsonrpc"))
    parsed = parse_card(card, "http://127.0.0.1:1/.well-known/agent-card.json")
    agent = make_agent(team=ops).agent
    agent.skills = parsed.skills
    agent.save()

    html = render_to_string("tasks/_session_examples.html", {"agents": [agent]})
    offered = re.findall(r'data-session-example="([^"]+)"', html)
    assert len(offered) == len(card["skills"]) == 3
    picker = Picker()
    assert [picker.pick(text) for text in offered] == ["release", "research", "connect"]
    assert f'data-session-examples="{agent.pk}"' in html and "js/session_examples.js" in html
