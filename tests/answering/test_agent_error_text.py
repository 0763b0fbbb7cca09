"""An agent's own words shown to people (its JSON-RPC error messages, what its server sent
that broke the connection, its card's name) are a short, plain-text excerpt: no markup, no
control or format characters, at most ~200 characters with "…" when cut. Whatever a
misbehaving agent sends: 100 KB, HTML, terminal escapes, bidi overrides.
"""

from __future__ import annotations

import html
import io
import re
import unicodedata

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils.html import escape

from tasks.answering.agent_card import CARD_PATH
from tasks.models import Agent, Interaction
from tasks.wire import agent_text, profile
from tests.answering.test_add_agent import agent_card
from tests.builders import approval, status
from tests.conftest import make_agent, member, push
from tests.peers.misbehaving_agent import MisbehavingAgent

# What a broken agent might put in an error: an HTML error page, a coloured log line, a
# right-to-left override that would show "exe.png" as "gnp.exe", a NUL, and 100 KB of it.
HOSTILE = (
    "<html><body><h1>Server \x1b[31mexploded\x1b[0m</h1>"
    "<p>see \u202egnp.exe\x00 &amp; retry</p>" + "<i>again</i> " * 8_000 + "</body></html>"
)
EXCERPT = agent_text.MAX_AGENT_TEXT


def assert_plain_excerpt(shown: str, *, ours: int) -> None:
    """`shown` is Onlooker's sentence (`ours` characters at most) around the agent's words."""
    assert len(shown) <= ours + EXCERPT, f"{len(shown)} characters shown"
    assert "<" not in shown and ">" not in shown, shown
    hidden = [c for c in shown if unicodedata.category(c) in {"Cc", "Cf", "Cs"}]
    assert hidden == [], f"control or format characters shown: {hidden!r}"
    assert "…" in shown


@pytest.fixture(autouse=True)
def direct_connections(monkeypatch):
    # httpx honours proxy variables; loopback servers must be reached directly.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def bad_agent():
    with MisbehavingAgent() as agent:
        yield agent


def sync() -> str:
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError):
        call_command("sync_agents", stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


@pytest.mark.django_db
def test_a_json_rpc_error_reaches_the_person_answering_as_a_short_plain_excerpt(
    bad_agent, ops: Group, approvers: Group
):
    registered = make_agent(team=ops)
    registered.agent.rpc_url = bad_agent.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    body = status("AUTH_REQUIRED", at=1, metadata=approval("i-1", "Ship v2?"))
    assert push(Client(), registered, body).status_code == 200
    interaction = Interaction.objects.get()
    bad_agent.rpc_error(-32603, HOSTILE)
    alice = Client()
    alice.force_login(member("alice", ops, approvers))

    response = alice.post(
        f"/interactions/{interaction.pk}/answer/",
        {"decision": "approve"},
        HTTP_ACCEPT="application/json",
    )

    assert response.status_code == 502
    detail = response.json()["detail"]
    assert "the agent answered an error: Server exploded see gnp.exe & retry again" in detail
    assert_plain_excerpt(detail, ours=120)
    interaction.refresh_from_db()
    assert_plain_excerpt(interaction.last_error, ours=40)
    page = alice.get(f"/sessions/{interaction.task.session_id}/").content.decode()
    [shown] = re.findall(r"Last try failed: (.*?)</p>", page, re.S)
    assert_plain_excerpt(html.unescape(shown), ours=40)


@pytest.mark.django_db
def test_sync_agents_shows_a_short_plain_excerpt_of_the_agents_error(bad_agent):
    registered = make_agent(name="Broken")
    Agent.objects.filter(pk=registered.agent.pk).update(
        card_url=bad_agent.base_url + CARD_PATH, rpc_url=bad_agent.rpc_url
    )
    bad_agent.rpc_error(-32603, HOSTILE)

    output = sync()

    [line] = [line for line in output.splitlines() if line.startswith("Broken")]
    assert "failed: the agent answered an error: Server exploded" in line
    assert_plain_excerpt(line, ours=100)


@pytest.mark.django_db
def test_what_broke_the_connection_is_kept_and_shown_as_a_short_excerpt(bad_agent, admin_client):
    """httpx quotes the bytes it could not parse: here a 9 KB header line whose name holds
    a control character, from the host serving the card."""
    registered = make_agent(name="Garbled")
    Agent.objects.filter(pk=registered.agent.pk).update(
        card_url=bad_agent.base_url + CARD_PATH, rpc_url=bad_agent.rpc_url
    )
    bad_agent.answer(b"{}", content_type="text/plain\r\nX-\x01<b>" + "Z" * 9_000 + ": y")

    sync()

    agent = Agent.objects.get()
    assert agent.last_error.startswith(f"could not reach {agent.card_url}: illegal header line")
    assert_plain_excerpt(agent.last_error, ours=100)
    page = admin_client.get(f"/admin/tasks/agent/{agent.pk}/change/").content.decode()
    assert escape(agent.last_error) in page
    assert "Z" * EXCERPT not in page


@pytest.mark.django_db
def test_a_cards_name_is_registered_as_plain_text(bad_agent):
    name = "<b>Night\u202e builds\x1b[31m</b>\ud800 " + "x" * 300
    bad_agent.answer(agent_card(rpc_url=bad_agent.rpc_url, name=name))

    call_command("add_agent", bad_agent.base_url, stdout=io.StringIO())

    shown = Agent.objects.get().name
    assert shown.startswith("Night builds xxx")
    assert_plain_excerpt(shown, ours=0)
