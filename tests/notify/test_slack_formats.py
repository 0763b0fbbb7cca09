"""What the formats make of an event (tasks/notify/formats.py): Slack's buttons where the
channel has its app's signing secret, and what they may show; an escalation in the three
formats; the answer links in the webhook's body and in email.

The formats are functions of an outbox row: these build rows as outbox.py makes them (the
payload of a real opening where the sender tests need one) and read what comes out.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from tasks.models.notify import Notification, NotificationChannel
from tasks.notify import formats

Kind = Notification.Kind
OPENED_AT = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
SESSION_URL = "https://onlooker.example/sessions/7/"
APPROVE_URL = "https://onlooker.example/answer/WzEsMSwiYXBwcm92ZSJd:abc/"
DENY_URL = "https://onlooker.example/answer/WzEsMSwiZGVueSJd:def/"
ANSWER_URL = "https://onlooker.example/answer/WzEsMSwiYW5zd2VyIl0:ghi/"


def payload(kind: str = "approval", prompt: str = "Delete 3 old builds?", detail=None) -> dict:
    """An event's payload as outbox.py stores it."""
    actions = {
        "approval": [{"name": "approve", "url": APPROVE_URL}, {"name": "deny", "url": DENY_URL}],
        "check": [],
    }.get(kind, [{"name": "answer", "url": ANSWER_URL}])
    return {
        "interaction": {
            "interactionId": "i-1",
            "taskId": "task-1",
            "kind": kind,
            "prompt": prompt,
            "detail": detail,
            "state": "open",
            "answer": None,
            "reason": None,
            "answeredBy": None,
            "answeredAt": None,
        },
        "openedAt": OPENED_AT.isoformat(),
        "session": {
            "id": 7,
            "url": SESSION_URL,
            "title": "Nightly cleanup",
            "agent": {"id": 3, "name": "ops-bot"},
        },
        "actions": actions,
    }


def row(event: str = Kind.OPENED, body: dict | None = None, **channel) -> Notification:
    channel.setdefault("kind", "slack")
    channel.setdefault("target", "https://hooks.slack.example/services/T/B/x")
    channel.setdefault("slack_signing_secret", "8f742231b10e8888abcd99yyyzzz85a5")
    return Notification(
        channel=NotificationChannel(pk=4, **channel),
        interaction_id=12,
        round=2,
        kind=event,
        reminder=1 if event == Kind.REMINDER else 0,
        payload=body or payload(),
    )


def actions_block(message: dict) -> list[dict]:
    blocks = [block for block in message["blocks"] if block["type"] == "actions"]
    assert len(blocks) <= 1
    return blocks[0]["elements"] if blocks else []


def slack(notification: Notification, minutes: int = 3) -> dict:
    return formats.slack(notification, at=OPENED_AT + timedelta(minutes=minutes))


# -- Slack's buttons ---------------------------------------------------------------------------


def test_an_approval_gets_approve_and_deny_naming_the_question_and_its_round():
    approve, deny, session = actions_block(slack(row()))
    assert approve == {
        "type": "button",
        "action_id": "onlooker_approve",
        "text": {"type": "plain_text", "text": "Approve", "emoji": False},
        "value": "12:2",
        "style": "primary",
    }
    assert (deny["action_id"], deny["value"], deny["style"]) == ("onlooker_deny", "12:2", "danger")
    assert (session["url"], "value" in session) == (SESSION_URL, False)


@pytest.mark.parametrize("kind", [Kind.OPENED, Kind.REMINDER, Kind.ESCALATED])
def test_every_message_that_asks_has_the_buttons(kind):
    assert [b["action_id"] for b in actions_block(slack(row(kind)))][:2] == [
        "onlooker_approve",
        "onlooker_deny",
    ]


def test_no_buttons_without_the_apps_signing_secret_nor_on_a_resolution():
    without = slack(row(slack_signing_secret=""))
    assert actions_block(without) == []
    assert without["blocks"][-1]["text"]["text"] == f"<{SESSION_URL}|Open the session>"
    resolved = row(Kind.RESOLVED, dict(payload(), resolution={"text": "Answered by alice."}))
    assert actions_block(slack(resolved)) == []


def test_a_questions_choices_are_buttons_by_index():
    body = payload("question", "Which region?", {"choices": ["eu-west", "us-east"]})
    first, second, other, _session = actions_block(slack(row(body=body)))
    assert (first["action_id"], first["value"], first["text"]["text"]) == (
        "onlooker_choice_0",
        "12:2:0",
        "eu-west",
    )
    assert (second["action_id"], second["value"]) == ("onlooker_choice_1", "12:2:1")
    assert (other["text"]["text"], other["url"]) == ("Other answer…", ANSWER_URL)


def test_twenty_choices_and_two_links_fit_slacks_25_elements():
    many = [f"option {n}" for n in range(30)]
    elements = actions_block(slack(row(body=payload("question", "Pick", {"options": many}))))
    assert len(elements) == 22 <= 25
    assert elements[19]["value"] == "12:2:19"


@pytest.mark.parametrize(
    "awkward",
    [
        "x" * 76,  # longer than a button shows
        "&" * 20,  # fits as typed, not once escaped (100 characters)
        "line one\nline two",
        "pay\u202eeno",  # a bidi override would show another text than the agent gets
        "zero\u200bwidth",
    ],
)
def test_a_choice_a_button_cannot_show_as_written_makes_the_answer_a_link(awkward):
    body = payload("question", "Which?", {"choices": ["fine", awkward]})
    elements = actions_block(slack(row(body=body)))
    assert [e["action_id"] for e in elements] == ["onlooker_link_answer", "onlooker_link_session"]
    assert elements[0]["text"]["text"] == "Answer…" and elements[0]["url"] == ANSWER_URL


def test_button_labels_are_escaped_plain_text():
    sly = "<!channel> & <https://evil.test|free money>"
    [button, *_] = actions_block(slack(row(body=payload("question", "?", {"choices": [sly]}))))
    assert button["text"] == {
        "type": "plain_text",
        "text": "&lt;!channel&gt; &amp; &lt;https://evil.test|free money&gt;",
        "emoji": False,
    }


@pytest.mark.parametrize("kind", ["text", "connection", "question"])
def test_what_needs_typing_or_a_visit_links_to_its_answer_page(kind):
    elements = actions_block(slack(row(body=payload(kind, "Connect GitHub?", {"url": "x"}))))
    assert [(e["action_id"], e["url"]) for e in elements] == [
        ("onlooker_link_answer", ANSWER_URL),
        ("onlooker_link_session", SESSION_URL),
    ]


def test_a_check_only_links_to_the_session():
    elements = actions_block(slack(row(body=payload("check", "Was the payment sent?"))))
    assert [e["action_id"] for e in elements] == ["onlooker_link_session"]


def test_a_connection_with_choices_still_gets_no_choice_buttons():
    body = payload("connection", "Connect?", {"choices": ["yes", "no"]})
    assert "onlooker_choice_0" not in json.dumps(slack(row(body=body)))


def test_the_decided_message_keeps_the_question_and_loses_the_buttons():
    body = payload("approval", "Ship <!here>?", {"env": "production"})
    decided = formats.slack_decided(row(body=body), "Approved by alice, 10:02")
    assert actions_block(decided) == []
    shown = json.dumps(decided)
    assert "*ops-bot* needs approval: Ship &lt;!here&gt;?" in shown
    assert "env: production" in shown and "Approved by alice, 10:02" in shown
    assert "<!here>" not in shown


# -- an escalation -----------------------------------------------------------------------------


def test_an_escalation_in_slack_says_how_long_it_has_waited():
    message = slack(row(Kind.ESCALATED), minutes=30)
    assert message["blocks"][0]["text"]["text"] == (
        "Still waiting after 30 min: *ops-bot* needs approval: Delete 3 old builds?"
    )
    assert message["text"].startswith("Still waiting after 30 min: *ops-bot* needs approval")


def test_an_escalation_in_the_webhook_is_its_type_with_the_answer_links():
    body = json.loads(formats.webhook(row(Kind.ESCALATED, kind="webhook")))
    assert body["type"] == "interaction.escalated"
    assert body["actions"] == payload()["actions"]
    assert set(body) == {"type", "interaction", "session", "actions"}


def test_an_escalation_by_email_starts_a_thread_of_its_own():
    escalation = row(
        Kind.ESCALATED,
        kind="email",
        target="lead@example.test",
        escalate_after=timedelta(minutes=30),
    )
    mail = formats.email(escalation, at=OPENED_AT + timedelta(minutes=30))
    assert mail.subject == (
        "[Onlooker] Still waiting after 30 min: ops-bot needs approval: Delete 3 old builds?"
    )
    assert mail.body.startswith(
        "Still waiting after 30 min:\n\nops-bot needs approval: Delete 3 old builds?\n"
    )
    assert mail.extra_headers["Message-ID"].startswith("<onl.12.2.escalated.4@")
    assert "In-Reply-To" not in mail.extra_headers
    # Its resolution answers the escalation, the first mail that address had of it.
    resolution = row(
        Kind.RESOLVED,
        dict(payload(), resolution={"text": "Answered by alice: Approve."}),
        kind="email",
        target="lead@example.test",
        escalate_after=timedelta(minutes=30),
    )
    replied = formats.email(resolution, at=OPENED_AT + timedelta(minutes=40))
    assert replied.extra_headers["In-Reply-To"] == mail.extra_headers["Message-ID"]


# -- answer links ------------------------------------------------------------------------------


def test_email_lists_the_answer_links():
    mail = formats.email(row(kind="email", target="ops@example.test"), at=OPENED_AT)
    assert f"\nApprove: {APPROVE_URL}\nDeny: {DENY_URL}\n" in mail.body
    assert mail.body.index("Deny:") < mail.body.index("Open the session:")
    question = row(body=payload("question", "Why?"), kind="email", target="ops@example.test")
    assert f"\nAnswer: {ANSWER_URL}\n" in formats.email(question, at=OPENED_AT).body


def test_a_resolution_carries_no_answer_links():
    resolved = payload()
    del resolved["actions"]
    resolved["resolution"] = {"text": "Answered by alice: Approve."}
    mail = formats.email(
        row(Kind.RESOLVED, resolved, kind="email", target="a@b.test"), at=OPENED_AT
    )
    assert "Approve: " not in mail.body
    assert "actions" not in json.loads(formats.webhook(row(Kind.RESOLVED, resolved)))


def test_a_reminder_in_the_webhook_carries_the_links_and_its_number():
    body = json.loads(formats.webhook(row(Kind.REMINDER, kind="webhook")))
    assert (body["type"], body["reminder"]) == ("interaction.reminder", 1)
    assert [a["name"] for a in body["actions"]] == ["approve", "deny"]


def test_a_check_reads_as_one_check_not_two():
    checking = payload("check", prompt="Check: Upload of report.pdf unconfirmed")
    assert formats.headline(checking) == "ops-bot needs a check: Upload of report.pdf unconfirmed"
    # Elsewhere a prompt that happens to start so is the agent's own words, kept whole.
    asked = payload("question", prompt="Check: is the disk full?")
    assert formats.headline(asked) == "ops-bot asks: Check: is the disk full?"
