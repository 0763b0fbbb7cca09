"""Answering from Slack: the buttons of a channel's message decide as the linked person, with
the page's checks and its one decision ever, and Slack hears what they did.

End to end: a signed push opens the question, the sender posts the message to a loopback
Slack, the test presses a button of that very message (a block_actions payload signed as
Slack signs it), the view answers at once, and the worker's reply is read from the loopback
Slack's response URL; the agent is a loopback stub that records what reached it.

These commit for real (`transaction=True`): the clicks are decided on a worker thread.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import Client

from tasks.answering import slack as slack_module
from tasks.models import Decision, Interaction
from tasks.models.notify import SlackLinkRequest, SlackMember
from tasks.notify import formats
from tasks.wire import profile
from tests.answering.slack_side import (
    LoopbackSlack,
    button,
    buttons,
    click_payload,
    form,
    post_click,
    press,
    slack_channel,
)
from tests.builders import approval, status
from tests.conftest import make_agent, member, push
from tests.peers.misbehaving_agent import MisbehavingAgent

pytestmark = pytest.mark.django_db(transaction=True)

TEN_OH_TWO = datetime(2026, 12, 1, 10, 2, 0, tzinfo=UTC)
PROMPT = "Delete 3 old builds?"


@pytest.fixture(autouse=True)
def at_ten_oh_two():
    with time_machine.travel(TEN_OH_TWO, tick=True) as traveller:
        yield traveller


@pytest.fixture
def slack():
    with MisbehavingAgent() as peer:
        peer.answer(b"ok", content_type="text/plain")
        yield LoopbackSlack(peer)


@pytest.fixture
def bot(ops, agent_stub):
    """ops-bot, of team ops, speaking the profile; its JSON-RPC URL is the stub's."""
    registered = make_agent(team=ops, name="ops-bot", signing=True)
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    return registered


@pytest.fixture
def alice(ops, approvers):
    """An approver of ops, linked to Slack member U0ALICE of workspace T0001."""
    user = member("alice", ops, approvers)
    SlackMember.objects.create(
        slack_team_id="T0001", slack_user_id="U0ALICE", user=user, linked_at=TEN_OH_TWO
    )
    return user


@pytest.fixture
def channel(slack):
    return slack_channel(slack)


def ask(bot, metadata: dict | None = None, *, at: int = 1, state: str = "AUTH_REQUIRED"):
    body = status(state, at=at, metadata=metadata or approval("i-1", PROMPT))
    assert push(Client(), bot, body, msg_id=f"push-{uuid.uuid4().hex}").status_code == 200
    return Interaction.objects.get(task__agent=bot.agent)


def sent(stub: MisbehavingAgent) -> list[dict]:
    """The typed answers that reached the agent."""
    return [
        params["message"]["metadata"][profile.INTERACTIONS] for params in stub.calls("SendMessage")
    ]


def text_of(message: dict) -> str:
    words = []
    for block in message["blocks"]:
        if block["type"] == "section":
            words.append(block["text"]["text"])
        elif block["type"] == "context":
            words += [element["text"] for element in block["elements"]]
    return "\n".join(words)


# -- deciding -------------------------------------------------------------------------------


def test_approve_in_slack_decides_as_the_linked_person_and_the_message_says_so(
    bot, agent_stub, alice, channel, slack
):
    interaction = ask(bot)
    message = slack.last_message()
    approve = button(message, formats.APPROVE)
    assert approve["style"] == "primary" and approve["value"] == f"{interaction.pk}:1"
    assert button(message, formats.DENY)["style"] == "danger"

    response = press(channel, slack, approve)

    assert (response.status_code, response.content) == (200, b"")
    [reply] = slack.wait_for_replies()
    assert reply["replace_original"] is True
    assert buttons(reply) == []
    shown = text_of(reply)
    assert f"*ops-bot* needs approval: {PROMPT}" in shown
    assert "Approved by alice, 10:02" in shown
    assert sent(agent_stub) == [{"interactionId": "i-1", "approved": True}]
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answered_via) == ("answered", "slack")
    [record] = Decision.objects.all()
    assert (record.decision, record.by, record.via) == ("approve", "alice", "slack")


def test_deny_in_slack_denies(bot, agent_stub, alice, channel, slack):
    ask(bot)
    press(channel, slack, button(slack.last_message(), formats.DENY))
    [reply] = slack.wait_for_replies()
    assert "Denied by alice, 10:02" in text_of(reply)
    assert sent(agent_stub) == [{"interactionId": "i-1", "approved": False}]


def test_the_same_approve_twice_reaches_the_agent_once(bot, agent_stub, alice, channel, slack):
    ask(bot)
    approve = button(slack.last_message(), formats.APPROVE)
    press(channel, slack, approve)
    slack.wait_for_replies(1)

    press(channel, slack, approve)

    _, second = slack.wait_for_replies(2)
    assert second == {
        "response_type": "ephemeral",
        "replace_original": False,
        "text": "Already decided: Approved by alice, 10:02",
    }
    assert len(sent(agent_stub)) == 1
    assert Decision.objects.count() == 1


def test_a_click_after_the_page_decided_says_who_did(
    bot, agent_stub, alice, channel, slack, ops, approvers
):
    interaction = ask(bot)
    deny = button(slack.last_message(), formats.DENY)
    page = Client()
    page.force_login(member("bob", ops, approvers))
    answered = page.post(
        f"/interactions/{interaction.pk}/answer/",
        {"decision": "approve"},
        HTTP_ACCEPT="application/json",
    )
    assert answered.status_code == 200

    press(channel, slack, deny)

    [reply] = slack.wait_for_replies()
    assert reply["text"] == "Already decided: Approved by bob, 10:02"
    assert sent(agent_stub) == [{"interactionId": "i-1", "approved": True}]


def test_a_choice_button_sends_the_choice_as_the_agent_offered_it(
    bot, agent_stub, alice, channel, slack
):
    offered = ["eu-west", "us & <!channel> <http://evil.test|here>"]
    question = approval("q-1", "Which region?", kind="question", detail={"choices": offered})
    ask(bot, question, state="INPUT_REQUIRED")
    message = slack.last_message()
    first, second = (button(message, f"{formats.CHOICE}{n}") for n in (0, 1))
    assert first["text"]["text"] == "eu-west"
    # Shown as written, and unable to mention anyone or make a link.
    assert second["text"]["text"] == "us &amp; &lt;!channel&gt; &lt;http://evil.test|here&gt;"

    press(channel, slack, second)

    [reply] = slack.wait_for_replies()
    assert reply["replace_original"] is True
    assert sent(agent_stub) == [{"interactionId": "q-1", "value": offered[1]}]


def test_a_free_text_question_links_to_its_answer_page(bot, agent_stub, alice, channel, slack):
    ask(bot, approval("q-1", "Why?", kind="question"), state="INPUT_REQUIRED")
    message = slack.last_message()
    answer = button(message, f"{formats.LINK}answer")
    assert "/answer/" in answer["url"] and "value" not in answer

    # Slack reports a link button's click too: acknowledged, nothing else.
    response = press(channel, slack, answer)

    assert (response.status_code, response.content) == (200, b"")
    assert slack.replies() == [] and sent(agent_stub) == []


# -- refused, and nothing reaches the agent --------------------------------------------------


def test_a_member_not_linked_gets_a_link_only_they_see(bot, agent_stub, channel, slack):
    interaction = ask(bot)

    press(channel, slack, button(slack.last_message(), formats.APPROVE), user="U0NEW", name="bob")

    [reply] = slack.wait_for_replies()
    assert (reply["response_type"], reply["replace_original"]) == ("ephemeral", False)
    assert "not linked to Onlooker yet" in reply["text"]
    assert "|Link @bob to your Onlooker account>" in reply["text"]
    [offered] = SlackLinkRequest.objects.all()
    token = reply["text"].split("/slack/link/")[1].split("/")[0]
    assert offered.token_digest != token and token not in offered.token_digest
    assert (offered.slack_team_id, offered.slack_user_id, offered.slack_name) == (
        "T0001",
        "U0NEW",
        "bob",
    )
    assert offered.expires_at - offered.created_at == timedelta(minutes=15)
    assert sent(agent_stub) == []
    interaction.refresh_from_db()
    assert interaction.state == "open"


def test_a_linked_member_who_may_not_approve_is_told_so(bot, agent_stub, channel, slack, ops):
    viewer = member("victor", ops)
    SlackMember.objects.create(
        slack_team_id="T0001", slack_user_id="U0VIC", user=viewer, linked_at=TEN_OH_TWO
    )
    ask(bot)

    press(channel, slack, button(slack.last_message(), formats.APPROVE), user="U0VIC")

    [reply] = slack.wait_for_replies()
    assert reply["response_type"] == "ephemeral"
    assert reply["text"] == "You may see this, but not answer it: ask for the approver role."
    assert sent(agent_stub) == []


def test_the_task_starter_needs_another_approver(bot, agent_stub, alice, channel, slack):
    from tasks.models import TaskStart

    bot.agent.no_self_approval = True
    bot.agent.save()
    TaskStart.objects.create(
        agent=bot.agent, task_id="task-1", started_by=alice, started_at=TEN_OH_TWO
    )
    ask(bot)

    press(channel, slack, button(slack.last_message(), formats.APPROVE))

    [reply] = slack.wait_for_replies()
    assert reply["text"].startswith("Needs another approver")
    assert sent(agent_stub) == []


def test_a_button_for_another_teams_question_decides_nothing(
    bot, agent_stub, alice, channel, slack, approvers
):
    from django.contrib.auth.models import Group

    dev = Group.objects.create(name="dev")
    dev_bot = make_agent(team=dev, name="dev-bot")
    dev_bot.agent.rpc_url = agent_stub.rpc_url
    dev_bot.agent.extensions = list(profile.EXTENSIONS)
    dev_bot.agent.save()
    alice.groups.add(dev)  # she may answer it, just not from ops' Slack
    asked = status("AUTH_REQUIRED", at=1, metadata=approval("d", "Drop the dev database?"))
    assert push(Client(), dev_bot, asked).status_code == 200
    theirs = Interaction.objects.get(interaction_id="d")
    ask(bot)
    approve = dict(button(slack.last_message(), formats.APPROVE), value=f"{theirs.pk}:1")

    press(channel, slack, approve)

    [reply] = slack.wait_for_replies()
    assert reply["text"] == slack_module.NOT_TOLD
    assert sent(agent_stub) == []


def test_a_member_who_cannot_see_the_question_decides_nothing(
    bot, agent_stub, channel, slack, approvers
):
    from django.contrib.auth.models import Group

    outsider = member("olga", Group.objects.create(name="dev"), approvers)
    SlackMember.objects.create(
        slack_team_id="T0001", slack_user_id="U0OLGA", user=outsider, linked_at=TEN_OH_TWO
    )
    ask(bot)

    press(channel, slack, button(slack.last_message(), formats.APPROVE), user="U0OLGA")

    [reply] = slack.wait_for_replies()
    assert reply["text"] == "No such question, or not one you may see."
    assert sent(agent_stub) == []


def test_a_button_of_an_earlier_round_decides_nothing(bot, agent_stub, alice, channel, slack):
    ask(bot)
    approve = button(slack.last_message(), formats.APPROVE)
    # The agent went on, then asked the same question again: a new round, a new message.
    assert push(Client(), bot, status("WORKING", at=2)).status_code == 200
    interaction = ask(bot, at=3)
    assert interaction.round == 2

    press(channel, slack, approve)

    [reply] = slack.wait_for_replies()
    assert reply["text"].startswith("The agent has asked this again since, so nothing was sent")
    assert sent(agent_stub) == []
    interaction.refresh_from_db()
    assert interaction.state == "open"


def test_a_question_the_agent_moved_on_from_decides_nothing(bot, agent_stub, alice, channel, slack):
    ask(bot)
    approve = button(slack.last_message(), formats.APPROVE)
    assert push(Client(), bot, status("WORKING", at=2)).status_code == 200

    press(channel, slack, approve)

    [reply] = slack.wait_for_replies()
    assert reply["text"] == "The agent no longer waits for this: it moved on."
    assert sent(agent_stub) == []


def test_an_agent_that_is_down_is_reported_to_the_clicker(bot, alice, channel, slack):
    bot.agent.rpc_url = "http://127.0.0.1:9/a2a/jsonrpc"  # the discard port: nothing answers
    bot.agent.save()
    interaction = ask(bot)

    press(channel, slack, button(slack.last_message(), formats.APPROVE))

    [reply] = slack.wait_for_replies()
    assert reply["response_type"] == "ephemeral"
    assert reply["text"].startswith("Not sent:") and "you can answer again" in reply["text"]
    interaction.refresh_from_db()
    assert interaction.state == "open"


def test_buttons_only_where_the_channel_has_its_apps_signing_secret(bot, slack):
    slack_channel(slack, slack_signing_secret="")
    ask(bot)
    message = slack.last_message()
    assert buttons(message) == []
    assert "|Open the session>" in text_of(message)


# -- bad requests: a clear 4xx, nothing decided, nothing told --------------------------------


def _approve_body(bot, slack) -> tuple[bytes, Interaction]:
    interaction = ask(bot)
    pressed = button(slack.last_message(), formats.APPROVE)
    return form(click_payload(pressed, slack.response_url)), interaction


def _nothing_happened(interaction: Interaction, slack: LoopbackSlack, stub) -> None:
    interaction.refresh_from_db()
    assert interaction.state == "open" and interaction.answer is None
    assert slack.replies() == [] and sent(stub) == []
    assert not Decision.objects.exists()


def test_a_forged_signature_is_401(bot, agent_stub, alice, channel, slack):
    from tests.answering.slack_side import signed

    body, interaction = _approve_body(bot, slack)
    response = post_click(channel, body, headers=signed(body, secret="0" * 32))
    assert response.status_code == 401
    assert response.json()["detail"].startswith("The request's Slack signature does not match")
    _nothing_happened(interaction, slack, agent_stub)


def test_a_body_changed_after_signing_is_401(bot, agent_stub, alice, channel, slack):
    from tests.answering.slack_side import signed

    body, interaction = _approve_body(bot, slack)
    changed = body.replace(b"U0ALICE", b"U0MALLY")
    assert post_click(channel, changed, headers=signed(body)).status_code == 401
    _nothing_happened(interaction, slack, agent_stub)


def test_a_stale_timestamp_is_401(bot, agent_stub, alice, channel, slack, at_ten_oh_two):
    from tests.answering.slack_side import signed

    body, interaction = _approve_body(bot, slack)
    headers = signed(body)
    at_ten_oh_two.shift(timedelta(minutes=5, seconds=30))  # a replay, 5½ minutes later
    assert post_click(channel, body, headers=headers).status_code == 401
    _nothing_happened(interaction, slack, agent_stub)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"HTTP_X_SLACK_REQUEST_TIMESTAMP": "1764583320"},
        {"HTTP_X_SLACK_SIGNATURE": "v0=abc"},
        {"HTTP_X_SLACK_REQUEST_TIMESTAMP": "soon", "HTTP_X_SLACK_SIGNATURE": "v0=abc"},
    ],
)
def test_missing_or_malformed_headers_are_401(bot, agent_stub, alice, channel, slack, headers):
    body, interaction = _approve_body(bot, slack)
    response = post_click(channel, body, headers=headers)
    assert response.status_code == 401 and response.json()["detail"]
    _nothing_happened(interaction, slack, agent_stub)


def test_an_unknown_channel_or_one_without_a_secret_is_401(bot, agent_stub, alice, slack):
    without = slack_channel(slack, slack_signing_secret="")
    interaction = ask(bot)
    pressed = {
        "action_id": formats.APPROVE,
        "text": {"type": "plain_text", "text": "Approve"},
        "value": f"{interaction.pk}:1",
    }
    body = form(click_payload(pressed, slack.response_url))
    for channel_id in (without.pk, without.pk + 1000):
        response = post_click(channel_id, body)
        assert response.status_code == 401
        assert "no Slack app" in response.json()["detail"]
    _nothing_happened(interaction, slack, agent_stub)


@pytest.mark.parametrize(
    ("body", "content_type", "said"),
    [
        (b'{"type": "block_actions"}', "application/json", "Slack posts a form"),
        (b"text=hello", "application/x-www-form-urlencoded", "no payload field"),
        (form("{not json"), "application/x-www-form-urlencoded", "not JSON"),
        (form('{"type": "view_submission"}'), "application/x-www-form-urlencoded", "block_actions"),
        (form('{"type": "block_actions", "user": {"id": "U1"}}'), None, "no action"),
    ],
)
def test_a_body_that_is_no_click_is_400(
    bot, agent_stub, alice, channel, slack, body, content_type, said
):
    from tests.answering.slack_side import signed

    interaction = ask(bot)
    response = post_click(
        channel,
        body,
        headers=signed(body),
        content_type=content_type or "application/x-www-form-urlencoded",
    )
    assert response.status_code == 400
    assert said in response.json()["detail"]
    _nothing_happened(interaction, slack, agent_stub)


@pytest.mark.parametrize(
    ("action_id", "value", "said"),
    [
        ("delete_everything", "{pk}:1", "Unknown action 'delete_everything'"),
        (formats.APPROVE, "{pk}", "names no question"),
        (formats.APPROVE, "{pk}:1; DROP TABLE", "names no question"),
        (formats.APPROVE, "{pk}:0", "names no question"),
    ],
)
def test_an_unknown_action_or_value_is_400(
    bot, agent_stub, alice, channel, slack, action_id, value, said
):
    interaction = ask(bot)
    pressed = dict(
        button(slack.last_message(), formats.APPROVE),
        action_id=action_id,
        value=value.format(pk=interaction.pk),
    )
    response = press(channel, slack, pressed)
    assert response.status_code == 400 and said in response.json()["detail"]
    _nothing_happened(interaction, slack, agent_stub)


def test_a_reply_address_off_the_channels_slack_is_400(bot, agent_stub, alice, channel, slack):
    interaction = ask(bot)
    pressed = button(slack.last_message(), formats.APPROVE)
    for elsewhere in (
        "http://127.0.0.1:9/actions/T0001/1/x",  # another port
        "http://localhost" + slack.response_url.split("127.0.0.1", 1)[1],  # another host
        "https://127.0.0.1" + slack.response_url.split("127.0.0.1", 1)[1],  # another scheme
    ):
        body = form(click_payload(pressed, elsewhere))
        response = post_click(channel, body)
        assert response.status_code == 400 and "response_url" in response.json()["detail"]
    _nothing_happened(interaction, slack, agent_stub)


def test_a_turned_off_channel_decides_nothing(bot, agent_stub, alice, channel, slack):
    body, interaction = _approve_body(bot, slack)
    channel.enabled = False
    channel.save()
    assert post_click(channel, body).status_code == 403
    _nothing_happened(interaction, slack, agent_stub)


def test_a_get_is_405(channel):
    assert Client().get(f"/slack/{channel.pk}/interactions").status_code == 405
