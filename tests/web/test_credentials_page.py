"""`/settings/` "Your credentials": a person saves, replaces and removes their own token for
each agent they may answer, through the real views (Django test client). The token is never
shown again, is sealed in the database, and input no header can carry is refused with what was
wrong and nothing changed."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
import time_machine
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client

from tasks.models import Agent, PersonalCredential
from tests.conftest import make_agent, member

SAVED_AT = datetime(2026, 12, 4, 10, 2, 30, tzinfo=UTC)
TOKEN = "alice-personal-token-0123456789"


def text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def logged_in(user: User, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


@pytest.fixture
def ops_bot(ops) -> Agent:
    return make_agent(team=ops, name="ops-bot").agent


@pytest.fixture
def alice(ops, approvers) -> User:
    return member("alice", ops, approvers)


def save(client: Client, agent: Agent, token) -> object:
    return client.post(f"/settings/credentials/{agent.pk}/", {"token": token})


def stored(user: User, agent: Agent) -> list[tuple[str, str]]:
    return list(
        PersonalCredential.objects.filter(user=user, agent=agent).values_list("kind", "secret")
    )


def row_of(html: str, agent: Agent) -> str:
    found = re.search(rf'<li class="credential" id="credential-{agent.pk}".*?</li>', html, re.S)
    assert found, f"no credential row for {agent.name}"
    return found.group(0)


def test_each_agent_a_person_may_answer_has_a_row_saying_how_its_credential_is_sent(
    ops, alice, ops_bot
):
    keyed = make_agent(team=ops, name="key-bot").agent
    keyed.auth_scheme = {"kind": "api_key", "header": "X-API-Key"}
    keyed.per_person = True
    keyed.save()
    other_team = make_agent(team=Group.objects.create(name="data"), name="etl-bot").agent

    html = logged_in(alice).get("/settings/").content.decode()

    bearer_row, key_row = text(row_of(html, ops_bot)), text(row_of(html, keyed))
    assert "ops-bot None saved Sent as: Bearer header" in bearer_row
    assert "Optional: without yours, the agent’s shared credential is sent" in bearer_row
    assert "Sent as: API key in X-API-Key" in key_row
    assert "Required: answers need your own credential" in key_row
    form = re.search(
        r'<form method="post" action="([^"]+)"[^>]*data-credential-save', row_of(html, ops_bot)
    )
    assert form.group(1) == f"/settings/credentials/{ops_bot.pk}/"
    assert '<input type="password" id="token-' in html and 'name="token"' in html
    assert "csrfmiddlewaretoken" in row_of(html, ops_bot)
    assert "data-credential-remove" not in row_of(html, ops_bot)  # nothing to remove yet
    assert f"credential-{other_team.pk}" not in html


def test_an_oauth_agent_offers_connect_not_a_token_field(alice, ops_bot):
    ops_bot.auth_scheme = {"kind": "oauth2", "authorization_url": "http://127.0.0.1:9/a"}
    ops_bot.oauth_client_id = "onlooker"  # registered by an administrator
    ops_bot.save()
    row = row_of(logged_in(alice).get("/settings/").content.decode(), ops_bot)
    assert f'action="/oauth/{ops_bot.pk}/connect/"' in row
    assert 'name="token"' not in row


def test_a_person_without_the_answer_permission_has_no_credential_rows(ops, ops_bot):
    html = logged_in(member("viewer", ops)).get("/settings/").content.decode()
    assert "data-credentials-none" in html
    assert "credential-save" not in html and f"credential-{ops_bot.pk}" not in html


def test_a_saved_token_is_kept_sealed_and_never_shown_again(alice, ops_bot):
    client = logged_in(alice)
    with time_machine.travel(SAVED_AT, tick=False):
        response = save(client, ops_bot, f"  {TOKEN} ")

    assert response.status_code == 302 and response["Location"] == "/settings/"
    assert stored(alice, ops_bot) == [("token", TOKEN)]  # surrounding spaces dropped
    page = client.get("/settings/")
    html = page.content.decode()
    assert "Saved your credential for ops-bot. It is not shown again." in html
    assert "Saved 4 Dec, 10:02" in text(row_of(html, ops_bot))
    assert "Replace" in row_of(html, ops_bot) and "data-credential-remove" in html
    assert TOKEN not in html
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM tasks_personalcredential")
        [(raw,)] = cursor.fetchall()
    assert TOKEN not in raw


def test_saving_again_replaces_the_token(alice, ops_bot):
    client = logged_in(alice)
    save(client, ops_bot, TOKEN)
    assert save(client, ops_bot, "the-new-token").status_code == 302
    assert stored(alice, ops_bot) == [("token", "the-new-token")]


def test_remove_forgets_the_token_and_says_so(alice, ops_bot):
    client = logged_in(alice)
    save(client, ops_bot, TOKEN)
    response = client.post(f"/settings/credentials/{ops_bot.pk}/remove/")
    assert response.status_code == 302 and response["Location"] == "/settings/"
    assert stored(alice, ops_bot) == []
    html = client.get("/settings/").content.decode()
    assert "Removed your credential for ops-bot." in html
    assert "None saved" in text(row_of(html, ops_bot))
    again = client.post(f"/settings/credentials/{ops_bot.pk}/remove/", follow=True)
    assert "You had no saved credential for ops-bot; nothing changed." in again.content.decode()


@pytest.mark.parametrize(
    ("token", "said"),
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("x" * 100_000, "at most 4096 are kept"),
        ("good-part\r\nX-Injected: yes", "no line breaks"),
        ("tab\there", "no line breaks, tabs or other control characters"),
        ("tökén", "only printable ASCII"),
        ("nul\x00", "no line breaks"),
    ],
    ids=["empty", "spaces", "100-kB", "newline", "tab", "non-ascii", "nul"],
)
def test_a_token_no_header_can_carry_is_refused_and_changes_nothing(alice, ops_bot, token, said):
    client = logged_in(alice)
    save(client, ops_bot, TOKEN)
    response = save(client, ops_bot, token)
    assert response.status_code == 400
    html = response.content.decode()
    assert said in text(html) and "Nothing was saved." in html
    assert "data-credential-problem" in html
    assert stored(alice, ops_bot) == [("token", TOKEN)]  # the saved one stays
    if len(token) > 10:
        assert token not in html  # never echoed


def test_a_post_without_a_token_field_is_refused(alice, ops_bot):
    response = logged_in(alice).post(f"/settings/credentials/{ops_bot.pk}/", {})
    assert response.status_code == 400 and stored(alice, ops_bot) == []


def test_another_teams_agent_is_not_found_and_nothing_is_stored(alice):
    hidden = make_agent(team=Group.objects.create(name="data"), name="etl-bot").agent
    response = save(logged_in(alice), hidden, TOKEN)
    assert response.status_code == 404
    assert "No such agent, or not one you may see." in response.content.decode()
    removing = logged_in(alice).post(f"/settings/credentials/{hidden.pk}/remove/")
    assert removing.status_code == 404
    assert not PersonalCredential.objects.exists()


def test_a_person_who_may_not_answer_is_refused_403(ops, ops_bot):
    viewer = member("viewer", ops)
    response = save(logged_in(viewer), ops_bot, TOKEN)
    assert response.status_code == 403
    assert "ask an administrator for the answer permission" in text(response.content.decode())
    assert not PersonalCredential.objects.exists()


def test_an_oauth_agent_takes_no_pasted_token(alice, ops_bot):
    ops_bot.auth_scheme = {"kind": "oauth2"}
    ops_bot.save()
    response = save(logged_in(alice), ops_bot, TOKEN)
    assert response.status_code == 400 and "use “Connect”" in response.content.decode()
    assert not PersonalCredential.objects.exists()


def test_a_post_without_csrf_is_refused(alice, ops_bot):
    response = save(logged_in(alice, csrf=True), ops_bot, TOKEN)
    assert response.status_code == 403 and not PersonalCredential.objects.exists()


def test_the_forms_take_only_post_and_a_logged_in_person(alice, ops_bot):
    assert logged_in(alice).get(f"/settings/credentials/{ops_bot.pk}/").status_code == 405
    anonymous = Client().post(f"/settings/credentials/{ops_bot.pk}/", {"token": TOKEN})
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    assert not PersonalCredential.objects.exists()


def test_one_persons_token_is_not_anothers(ops, approvers, alice, ops_bot):
    bob = member("bob", ops, approvers)
    save(logged_in(alice), ops_bot, TOKEN)
    html = logged_in(bob).get("/settings/").content.decode()
    assert "None saved" in text(row_of(html, ops_bot))
    assert logged_in(bob).post(f"/settings/credentials/{ops_bot.pk}/remove/").status_code == 302
    assert stored(alice, ops_bot) == [("token", TOKEN)]
