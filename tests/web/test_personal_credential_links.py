"""Answer links decide as the person logged in (answering/link_answers.py → answers.answer),
so they follow the per-person rule: on an agent that takes answers only with the person's own
credential, someone without one is told so on the confirm page (no button to press), and a
POST is refused 403 with nothing changed and nothing sent. Through the real view."""

# Fixtures imported from another test module are parameters here, by name.
# ruff: noqa: F811

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from tasks.models import PersonalCredential
from tests.web.test_answer_links import (  # noqa: F401 - fixtures
    alice,
    as_stored,
    ask,
    at_ten_oh_two,
    bob,
    decide,
    link,
    text,
)

NEEDS_YOURS = (
    "Builder takes answers only with your own credential: connect yours on the settings "
    "page, then answer."
)


@pytest.fixture
def per_person(team_agent):
    team_agent.agent.per_person = True
    team_agent.agent.save()
    return team_agent


def test_an_approve_link_posted_by_someone_without_a_credential_is_refused_403(
    bob,
    per_person,
    agent_stub,
):
    interaction = ask(per_person)
    before = as_stored(interaction)
    path = link(interaction, "approve")

    shown = bob.get(path)
    assert shown.status_code == 403 and NEEDS_YOURS in text(shown.content.decode())
    assert 'value="approve"' not in shown.content.decode()

    code, page = decide(bob, path, decision="approve")
    assert code == 403 and NEEDS_YOURS in text(page)
    assert as_stored(interaction) == before
    assert agent_stub.requests == []


def test_with_her_own_credential_the_link_decides_with_it(
    alice,
    per_person,
    agent_stub,
):
    PersonalCredential.objects.create(
        user=User.objects.get(username="alice"), agent=per_person.agent, kind="token",
        secret="alice-token",
    )  # fmt: skip
    interaction = ask(per_person)
    assert 'value="approve"' in alice.get(link(interaction, "approve")).content.decode()
    code, _ = decide(alice, link(interaction, "approve"), decision="approve")
    assert code == 200
    [request] = agent_stub.requests
    assert request.headers["authorization"] == "Bearer alice-token"
