"""The progress card: its rules through the card API, revisions and clears, stripping, the
session API's view of it, and cards derived from A2A sessions."""

from __future__ import annotations

import json
import threading

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from tasks.answering.agents import new_api_token
from tasks.live import broadcast, fanout
from tasks.models import ProgressCard, Session, digest
from tasks.sessions import progress_card
from tasks.wire import profile
from tests import listening
from tests.builders import approval, progress, status
from tests.conftest import make_agent, push


@pytest.fixture
def agent_token(db):
    registered = make_agent()
    token = new_api_token()
    registered.agent.api_token_digest = digest(token)
    registered.agent.save()
    registered.api_token = token
    return registered


def write(client, registered, body, *, token=None):
    return client.post(
        "/api/progress-card",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token or registered.api_token}",
    )


def read(client, registered, key="s1"):
    return client.get(
        f"/api/progress-card?sessionKey={key}",
        HTTP_AUTHORIZATION=f"Bearer {registered.api_token}",
    )


def assert_refused(response, field: str, message: str = ""):
    assert response.status_code == 400, response.content
    data = response.json()
    assert data["field"] == field, data
    assert message in data["error"], data
    assert not ProgressCard.objects.exists() or ProgressCard.objects.get().revision == 1


PLAN = [
    {"step": "Inspect the failing route", "status": "completed"},
    {"step": "Repair the session owner", "status": "in_progress"},
    {"step": "Run focused verification", "status": "pending"},
]


# -- writing and reading ----------------------------------------------------------------


def test_write_answers_revision_steps_and_receipt(client, agent_token):
    response = write(
        client, agent_token, {"sessionKey": "s1", "plan": PLAN, "markdown": "No blocker."}
    )
    assert response.status_code == 200
    assert response.json() == {
        "revision": 1,
        "steps": {"completed": 1, "total": 3},
        "receipt": "Progress card updated (rev 1, 1/3 done)",
    }
    card = read(client, agent_token).json()["card"]
    assert (card["revision"], card["plan"], card["markdown"]) == (1, PLAN, "No blocker.")
    assert card["html"] == "<p>No blocker.</p>"
    assert card["updatedAt"]


def test_note_only_receipt_has_no_step_counts(client, agent_token):
    data = write(client, agent_token, {"sessionKey": "s1", "markdown": "Tests are running."}).json()
    assert data == {"revision": 1, "steps": None, "receipt": "Progress card updated (rev 1)"}


def test_every_write_replaces_the_whole_card(client, agent_token):
    write(client, agent_token, {"sessionKey": "s1", "plan": PLAN, "markdown": "note"})
    write(client, agent_token, {"sessionKey": "s1", "markdown": "only a note now"})
    card = read(client, agent_token).json()["card"]
    assert (card["plan"], card["markdown"]) == (None, "only a note now")


def test_every_write_bumps_the_revision_by_one_even_when_repeated(client, agent_token):
    revisions = [
        write(client, agent_token, {"sessionKey": "s1", "markdown": "same"}).json()["revision"]
        for _ in range(3)
    ]
    assert revisions == [1, 2, 3]


def test_clear_leaves_a_tombstone_and_revisions_continue(client, agent_token):
    write(client, agent_token, {"sessionKey": "s1", "markdown": "first"})
    cleared = write(client, agent_token, {"sessionKey": "s1"}).json()
    assert cleared == {"revision": 2, "steps": None, "receipt": "Progress card cleared"}
    assert read(client, agent_token).json() == {"card": None}
    again = write(client, agent_token, {"sessionKey": "s1", "plan": [], "markdown": "  \n "}).json()
    assert again["revision"] == 3
    assert (
        write(client, agent_token, {"sessionKey": "s1", "markdown": "back"}).json()["revision"] == 4
    )
    assert read(client, agent_token).json()["card"]["markdown"] == "back"


def test_clearing_a_card_that_never_existed_writes_nothing(client, agent_token):
    data = write(client, agent_token, {"sessionKey": "new"}).json()
    assert data == {"revision": None, "steps": None, "receipt": "Progress card cleared"}
    assert not ProgressCard.objects.exists()


def test_unknown_session_reads_null(client, agent_token):
    assert read(client, agent_token, key="nobody").json() == {"card": None}


def test_each_agent_has_its_own_session_keys(client, agent_token):
    other = make_agent(name="Other")
    other.api_token = new_api_token()
    other.agent.api_token_digest = digest(other.api_token)
    other.agent.save()
    write(client, agent_token, {"sessionKey": "s1", "markdown": "mine"})
    assert read(client, other).json() == {"card": None}
    assert Session.objects.get().agent == agent_token.agent


# -- limits and rules (boundaries) ----------------------------------------------------


@pytest.mark.parametrize(
    "markdown",
    ["a" * 8192, "é" * 4096, "€" * 2730 + "aa", "\u200b" * 2730 + "aa"],
    ids=["ascii", "two-byte", "three-byte", "invisible-counted-before-stripping"],
)
def test_markdown_of_8192_bytes_is_accepted(client, agent_token, markdown):
    assert len(markdown.encode()) == 8192
    assert write(client, agent_token, {"sessionKey": "s1", "markdown": markdown}).status_code == 200


@pytest.mark.parametrize(
    "markdown",
    ["a" * 8193, "é" * 4096 + "a", "\u200b" * 2731],
    ids=["ascii", "multi-byte", "invisible-counted-before-stripping"],
)
def test_markdown_of_8193_bytes_is_refused(client, agent_token, markdown):
    response = write(client, agent_token, {"sessionKey": "s1", "markdown": markdown})
    assert_refused(response, "markdown", "at most 8192 UTF-8 bytes")


def steps(count: int, text: str = "step") -> list[dict]:
    return [{"step": f"{text} {i}", "status": "pending"} for i in range(count)]


def test_fifty_steps_are_accepted_and_fifty_one_refused(client, agent_token):
    assert write(client, agent_token, {"sessionKey": "s1", "plan": steps(50)}).status_code == 200
    response = write(client, agent_token, {"sessionKey": "s1", "plan": steps(51)})
    assert_refused(response, "plan", "at most 50 steps")


@pytest.mark.parametrize("text", ["x" * 512, "é" * 256, "\u2066" * 170 + "ab"])
def test_step_of_512_bytes_is_accepted(client, agent_token, text):
    assert len(text.encode()) == 512
    response = write(
        client, agent_token, {"sessionKey": "s1", "plan": [{"step": text, "status": "pending"}]}
    )
    assert response.status_code == 200


@pytest.mark.parametrize("text", ["x" * 513, "é" * 256 + "x"])
def test_step_of_513_bytes_is_refused(client, agent_token, text):
    plan = [*steps(3), {"step": text, "status": "pending"}]
    response = write(client, agent_token, {"sessionKey": "s1", "plan": plan})
    assert_refused(response, "plan[3].step", "at most 512 UTF-8 bytes")


@pytest.mark.parametrize("count", [0, 1])
def test_zero_or_one_step_in_progress_is_accepted(client, agent_token, count):
    plan = steps(3)
    for step in plan[:count]:
        step["status"] = "in_progress"
    assert write(client, agent_token, {"sessionKey": "s1", "plan": plan}).status_code == 200


def test_two_steps_in_progress_are_refused(client, agent_token):
    plan = steps(3)
    plan[0]["status"] = plan[2]["status"] = "in_progress"
    response = write(client, agent_token, {"sessionKey": "s1", "plan": plan})
    assert_refused(response, "plan", "plan can contain at most one in_progress step")


@pytest.mark.parametrize(
    "body, field, message",
    [
        ({"plan": PLAN}, "sessionKey", "sessionKey must be a non-empty string"),
        ({"sessionKey": "", "plan": PLAN}, "sessionKey", "non-empty"),
        ({"sessionKey": "s1", "plan": "do things"}, "plan", "must be a list"),
        ({"sessionKey": "s1", "markdown": 42}, "markdown", "must be a string"),
        (
            {
                "sessionKey": "s1",
                "plan": [*steps(3), {"step": "\u200b\u200d ", "status": "pending"}],
            },
            "plan[3].step",
            "plan[3].step must not be empty",
        ),
        (
            {"sessionKey": "s1", "plan": [{"step": "a", "status": "done"}]},
            "plan[0].status",
            "must be one of",
        ),
        ({"sessionKey": "s1", "plan": [{"step": "a"}]}, "plan[0].status", "must be one of"),
        ({"sessionKey": "s1", "plan": ["a"]}, "plan[0]", "must be an object"),
        (
            {"sessionKey": "s1", "plan": [{"step": "a", "status": "pending", "owner": "x"}]},
            "plan[0].owner",
            "not a step field",
        ),
        ({"sessionKey": "s1", "steps": []}, "steps", "not a card field"),
    ],
)
def test_every_rule_is_a_400_naming_the_field(client, agent_token, body, field, message):
    write(client, agent_token, {"sessionKey": "s1", "markdown": "kept"})
    response = write(client, agent_token, body)
    assert_refused(response, field, message)
    assert read(client, agent_token).json()["card"]["markdown"] == "kept"


def test_rejected_write_bumps_no_revision(client, agent_token):
    write(client, agent_token, {"sessionKey": "s1", "markdown": "v1"})
    write(client, agent_token, {"sessionKey": "s1", "markdown": "a" * 9000})
    assert (
        write(client, agent_token, {"sessionKey": "s1", "markdown": "v2"}).json()["revision"] == 2
    )


@pytest.mark.parametrize(
    "authorization",
    ["", "Bearer nope", "Bearer onl_wrong", "Basic abc"],
    ids=["none", "junk", "wrong", "basic"],
)
def test_bad_token_is_401_and_writes_nothing(client, agent_token, authorization):
    response = client.post(
        "/api/progress-card",
        json.dumps({"sessionKey": "s1", "markdown": "x"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=authorization,
    )
    assert response.status_code == 401
    assert not Session.objects.exists()


def test_push_credentials_are_not_card_api_tokens(client, agent_token):
    response = write(
        client, agent_token, {"sessionKey": "s1", "markdown": "x"}, token=agent_token.bearer
    )
    assert response.status_code == 401


def test_body_far_over_the_limits_is_413(client, agent_token):
    response = write(client, agent_token, {"sessionKey": "s1", "markdown": "a" * 300_000})
    assert response.status_code == 413
    assert not Session.objects.exists()


@pytest.mark.parametrize("raw", [b"{oops", b"[]", b'"text"'])
def test_body_that_is_not_a_json_object_is_400(client, agent_token, raw):
    response = client.post(
        "/api/progress-card",
        raw,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {agent_token.api_token}",
    )
    assert response.status_code == 400


# -- stripping --------------------------------------------------------------------------

LISTED = [
    *range(0x200B, 0x2010),
    *range(0x202A, 0x202F),
    *range(0x2060, 0x2065),
    *range(0x2066, 0x206A),
    *range(0x206A, 0x2070),
    0xFEFF,
    *range(0xE0000, 0xE0080),
    0x061C,
    0x00AD,
    0x180E,
]


def test_every_listed_invisible_code_point_is_stripped(client, agent_token):
    assert set(LISTED) == set(progress_card.INVISIBLE)
    hidden = "".join(chr(c) for c in LISTED)
    body = {
        "sessionKey": "s1",
        "plan": [{"step": f"de{hidden[:40]}ploy", "status": "pending"}],
        "markdown": f"ship{hidden}it",
    }
    assert write(client, agent_token, body).status_code == 200
    card = ProgressCard.objects.get()
    assert card.plan[0]["step"] == "deploy"
    assert card.markdown == "shipit"
    assert not any(chr(c) in card.html for c in LISTED)


@pytest.mark.parametrize("code_point", LISTED, ids=[f"U+{c:04X}" for c in LISTED])
def test_strip_invisible_removes_each_code_point(code_point):
    assert progress_card.strip_invisible(f"a{chr(code_point)}b") == "ab"


def test_visible_text_is_kept_not_trimmed(client, agent_token):
    write(client, agent_token, {"sessionKey": "s1", "markdown": "  indented\n\ttext  "})
    assert ProgressCard.objects.get().markdown == "  indented\n\ttext  "


# -- the session API shows the card ---------------------------------------------------


def test_session_api_includes_the_card(client, agent_token):
    write(client, agent_token, {"sessionKey": "s1", "plan": PLAN, "markdown": "**bold**"})
    client.force_login(User.objects.create_user("alice"))
    [listed] = client.get("/api/sessions").json()["sessions"]
    detail = client.get(f"/api/sessions/{listed['id']}").json()
    for session in (listed, detail):
        assert session["card"]["revision"] == 1
        assert session["card"]["plan"] == PLAN
        assert session["card"]["html"] == "<p><strong>bold</strong></p>"


def test_session_without_card_shows_null(client, token_agent):
    push(
        client,
        token_agent,
        {
            "message": {
                "messageId": "m",
                "role": "ROLE_AGENT",
                "contextId": "c",
                "parts": [{"data": {}}],
            }
        },
    )
    client.force_login(User.objects.create_user("alice"))
    assert client.get("/api/sessions").json()["sessions"][0]["card"] is None


# -- cards of A2A sessions --------------------------------------------------------------


def card() -> ProgressCard:
    return ProgressCard.objects.get()


def send(client, registered, body, **kwargs):
    response = push(client, registered, body, **kwargs)
    assert response.status_code == 200, response.content


def test_a2a_card_shows_plan_note_and_state(client, token_agent):
    data = {
        profile.PROGRESS: {
            "steps": [
                {"label": "Read logs", "state": "completed", "note": "3 files"},
                {"label": "Fix", "state": "in_progress"},
            ]
        }
    }
    send(
        client,
        token_agent,
        status("WORKING", at=1, text="Found it: **bad config**.", metadata=data),
    )
    assert card().plan == [
        {"step": "Read logs", "status": "completed", "note": "3 files"},
        {"step": "Fix", "status": "in_progress"},
    ]
    assert card().markdown == "Found it: **bad config**."
    assert card().html == "<p>Found it: <strong>bad config</strong>.</p>"
    assert card().facts == {"state": "TASK_STATE_WORKING"}


def test_question_text_is_the_prompt_not_the_note(client, token_agent):
    send(client, token_agent, status("WORKING", at=1, text="Ready to deploy."))
    send(
        client,
        token_agent,
        status(
            "AUTH_REQUIRED",
            at=2,
            text="Deploy to prod?",
            metadata=approval("i-1", "Deploy to prod?"),
        ),
    )
    assert card().markdown == "Ready to deploy."
    assert card().facts["question"] == {"kind": "approval", "prompt": "Deploy to prod?"}
    assert card().facts["state"] == "TASK_STATE_AUTH_REQUIRED"


def test_core_agents_plain_question_is_not_the_note(client, token_agent):
    send(client, token_agent, status("WORKING", at=1, text="Working on it."))
    send(client, token_agent, status("INPUT_REQUIRED", at=2, text="Which branch?"))
    assert card().markdown == "Working on it."
    assert card().facts["question"] == {"kind": "text", "prompt": "Which branch?"}


def test_duplicate_and_no_op_events_do_not_bump_the_revision(client, token_agent):
    body = status("WORKING", at=1, text="note", metadata=progress(("a", "in_progress")))
    send(client, token_agent, body, msg_id="m1")
    send(client, token_agent, body, msg_id="m1")
    send(client, token_agent, status("WORKING", at=2))
    send(client, token_agent, status("SUBMITTED", at=0))
    assert card().revision == 1
    send(client, token_agent, status("WORKING", at=3, text="new note"))
    assert card().revision == 2


def test_uncertain_effect_and_terminal_telemetry_show_on_the_card(client, token_agent):
    send(
        client,
        token_agent,
        status("WORKING", at=1, metadata={profile.EFFECTS: {"uncertain": "deploy-42"}}),
    )
    assert card().facts["uncertain"] == ["deploy-42"]
    telemetry = {"steps": 4, "tokens": 900, "costUsd": 0.12, "traceId": "tr-9"}
    send(
        client,
        token_agent,
        status("COMPLETED", at=2, text="Done.", metadata={profile.TELEMETRY: telemetry}),
    )
    assert card().facts["telemetry"] == telemetry
    assert card().facts["state"] == "TASK_STATE_COMPLETED"
    assert card().markdown == "Done."


def test_agent_plan_is_bounded_not_refused(client, token_agent):
    data = {
        profile.PROGRESS: {
            "steps": [
                {"label": "é" * 300, "state": "in_progress"},
                {"label": "second", "state": "in_progress"},
                {"label": "\u200b", "state": "pending"},
            ]
        }
    }
    send(client, token_agent, status("WORKING", at=1, metadata=data))
    plan = card().plan
    assert plan[0] == {"step": "é" * 256, "status": "in_progress"}
    assert plan[1] == {"step": "second", "status": "pending"}
    assert len(plan) == 2


def test_agent_note_over_8_kib_is_cut_at_a_character_boundary(client, token_agent):
    send(client, token_agent, status("WORKING", at=1, text="€" * 3000))
    assert card().markdown == "€" * 2730
    assert "\u202e" not in progress_card.strip_invisible("a\u202eb")


def test_late_older_status_does_not_replace_the_note(client, token_agent):
    send(client, token_agent, status("WORKING", at=5, text="newest"))
    send(client, token_agent, status("WORKING", at=2, text="older"))
    assert card().markdown == "newest"


def test_a2a_card_broadcast_carries_the_revision(
    client, token_agent, django_capture_on_commit_callbacks, fresh_channel_layers
):
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    channel = async_to_sync(listening.join)(layer)
    with django_capture_on_commit_callbacks(execute=True):
        send(client, token_agent, status("WORKING", at=1, text="hello"))
    groups = [broadcast.session_group(Session.objects.get().pk)]
    message = json.loads(fanout.text_for(async_to_sync(listening.first)(layer, channel, groups)))
    assert message["revision"] == card().revision == 1
    assert 'data-revision="1"' in message["html"]["card"]


# -- concurrency --------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_never_lose_an_update_or_reuse_a_revision():
    registered = make_agent()
    registered.api_token = new_api_token()
    registered.agent.api_token_digest = digest(registered.api_token)
    registered.agent.save()
    threads, count = [], 8
    barrier = threading.Barrier(count)
    revisions: list = [None] * count

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=10)
            response = write(
                Client(), registered, {"sessionKey": "shared", "markdown": f"writer {index}"}
            )
            revisions[index] = response.json()["revision"]
        finally:
            connection.close()

    for index in range(count):
        threads.append(threading.Thread(target=run, args=(index,)))
        threads[-1].start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(revisions) == list(range(1, count + 1))
    final = ProgressCard.objects.get()
    assert final.revision == count
    assert final.markdown == f"writer {revisions.index(count)}"


def test_admin_registration_shows_the_api_token_once_and_it_writes_cards(
    admin_client, client, agent_token
):
    response = admin_client.post(
        "/admin/tasks/agent/",
        {"action": "replace_api_token", "_selected_action": [agent_token.agent.pk]},
    )
    page = response.content.decode()
    token = page.split("<code>")[1].split("</code>")[0]
    assert token.startswith("onl_")
    old = agent_token.api_token
    assert (
        write(client, agent_token, {"sessionKey": "s1", "markdown": "x"}, token=old).status_code
        == 401
    )
    assert (
        write(client, agent_token, {"sessionKey": "s1", "markdown": "x"}, token=token).status_code
        == 200
    )
    change_page = admin_client.get(
        f"/admin/tasks/agent/{agent_token.agent.pk}/change/"
    ).content.decode()
    assert token not in change_page
