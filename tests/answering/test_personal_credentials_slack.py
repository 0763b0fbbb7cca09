"""Slack decides as the linked person (answering/slack.py → answers.answer), so it follows the
per-person rule too: a linked member without their own credential for an agent that requires
one hears why, only they see it, and nothing reaches the agent. A real signed click on the
message the sender posted to a loopback Slack, as in test_slack_clicks.py."""

# Fixtures imported from another test module are parameters here, by name.
# ruff: noqa: F811

from __future__ import annotations

import pytest

from tasks.models import Decision, PersonalCredential
from tasks.notify import formats
from tests.answering.slack_side import button, press
from tests.answering.test_slack_clicks import (  # noqa: F401 - fixtures
    alice,
    ask,
    at_ten_oh_two,
    bot,
    channel,
    sent,
    slack,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def per_person_bot(bot):
    bot.agent.per_person = True
    bot.agent.save()
    return bot


def test_a_linked_member_without_their_own_credential_is_refused_and_nothing_is_sent(
    per_person_bot,
    agent_stub,
    alice,
    channel,
    slack,
):
    interaction = ask(per_person_bot)

    press(channel, slack, button(slack.last_message(), formats.APPROVE))

    [reply] = slack.wait_for_replies()
    assert (reply["response_type"], reply["replace_original"]) == ("ephemeral", False)
    assert reply["text"] == (
        "ops-bot takes answers only with your own credential: connect yours on the settings "
        "page, then answer."
    )
    assert sent(agent_stub) == [] and agent_stub.requests == []
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answered_by) == ("open", None)
    assert not Decision.objects.exists()


def test_with_her_own_credential_the_slack_click_carries_it(
    per_person_bot,
    agent_stub,
    alice,
    channel,
    slack,
):
    PersonalCredential.objects.create(
        user=alice, agent=per_person_bot.agent, kind="token", secret="alice-token"
    )
    ask(per_person_bot)

    press(channel, slack, button(slack.last_message(), formats.APPROVE))

    slack.wait_for_replies()
    assert sent(agent_stub) == [{"interactionId": "i-1", "approved": True}]
    [request] = agent_stub.requests
    assert request.headers["authorization"] == "Bearer alice-token"
