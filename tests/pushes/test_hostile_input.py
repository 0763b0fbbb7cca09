"""Hostile input from an authenticated agent is refused with a 400 that names the field, or
kept safely; never a 5xx. Through the real receiver (signed, or with the push bearer) and the
real card API (with the agent's API token)."""

from __future__ import annotations

import json
import math
import re

import pytest
from django.db.models import TextField
from django.db.models.functions import Cast

from tasks.answering.agents import new_api_token
from tasks.models import (
    Artifact,
    Delivery,
    Interaction,
    Message,
    ProgressCard,
    Session,
    Task,
    digest,
)
from tasks.wire import json_safety, profile
from tests.builders import approval, artifact, message, progress, status
from tests.conftest import make_agent, push

LONE = "\ud800"
FFFD = "\ufffd"
SURROGATE = re.compile("[\ud800-\udfff]")
# Every column that holds what an agent sent, or what is derived from it.
AGENT_COLUMNS = {
    Session: ["context_id", "title"],
    Task: ["task_id", "status_message", "note", "plan", "telemetry", "uncertain_effects"],
    Message: ["message_id", "text"],
    Artifact: ["artifact_id", "name", "description", "parts", "files"],
    Interaction: ["interaction_id", "prompt", "detail"],
    ProgressCard: ["plan", "markdown", "html", "facts"],
    Delivery: ["task_id", "warnings"],
}


def stored_surrogates() -> list[str]:
    """Columns holding a lone surrogate as the database keeps them: JSON is read as text and
    parsed here, so no decoder repairs it on the way out."""
    found = []
    for model, columns in AGENT_COLUMNS.items():
        for column in columns:
            is_json = model._meta.get_field(column).get_internal_type() == "JSONField"
            stored = model.objects.annotate(raw=Cast(column, TextField()))
            for text in stored.values_list("raw", flat=True):
                if is_json and text is not None:
                    text = json.dumps(json.loads(text), ensure_ascii=False)
                if SURROGATE.search(text or ""):
                    found.append(f"{model.__name__}.{column}")
    return found


def stored_everywhere(response) -> None:
    """The push was kept: a 200 whose delivery row exists, with no lone surrogate stored."""
    assert response.status_code == 200, response.content
    assert Delivery.objects.filter(pk=response.json()["delivery"]).exists()
    assert stored_surrogates() == []


def refused(response, *named: str) -> str:
    """A 400 whose detail names each of `named`, with nothing stored."""
    assert response.status_code == 400, response.content
    detail = response.json()["detail"]
    for name in named:
        assert name in detail, detail
    assert not Delivery.objects.exists()
    assert not Session.objects.exists()
    return detail


def raw(text: str) -> bytes:
    """A body written as JSON text, for what json.dumps would not write."""
    return text.encode()


# -- lone surrogates ------------------------------------------------------------------------

WITH_FILES = {"kind": "report", "path": f"out/{LONE}.md"}
SURROGATE_BODIES = {
    "contextId": (status("WORKING", context=f"c{LONE}"), lambda: Session.objects.get().context_id),
    "taskId": (status("WORKING", task=f"t{LONE}"), lambda: Task.objects.get().task_id),
    "messageId": (
        status("WORKING", text="hi", message_id=f"m{LONE}"),
        lambda: Message.objects.get().message_id,
    ),
    "message text": (status("WORKING", text=f"hi {LONE}"), lambda: Task.objects.get().note),
    "artifact name": (artifact("a", "x", name=f"n{LONE}"), lambda: Artifact.objects.get().name),
    "artifact text part": (
        artifact("a", f"x{LONE}"),
        lambda: Artifact.objects.get().parts[0]["text"],
    ),
    "artifact data part": (
        {
            "artifactUpdate": {
                "taskId": "t",
                "contextId": "c",
                "artifact": {"artifactId": "a", "parts": [{"data": {f"k{LONE}": [f"v{LONE}"]}}]},
            }
        },
        lambda: json.dumps(Artifact.objects.get().parts[0]["data"], ensure_ascii=False),
    ),
    "interaction prompt": (
        status("AUTH_REQUIRED", at=1, metadata=approval("i1", f"Deploy {LONE}?")),
        lambda: Interaction.objects.get().prompt,
    ),
    "interaction id": (
        status("AUTH_REQUIRED", at=1, metadata=approval(f"i{LONE}", "Deploy?")),
        lambda: Interaction.objects.get().interaction_id,
    ),
    "plan label": (
        status("WORKING", at=1, metadata=progress((f"Build {LONE}", "in_progress"))),
        lambda: Task.objects.get().plan[0]["label"],
    ),
    "files/v1 path": (
        artifact("a", "x", files=WITH_FILES),
        lambda: Artifact.objects.get().files["path"],
    ),
    "telemetry/v1 traceId": (
        status("COMPLETED", at=1, metadata={profile.TELEMETRY: {"traceId": f"tr{LONE}"}}),
        lambda: Task.objects.get().telemetry["traceId"],
    ),
    "effects/v1 id": (
        status("WORKING", at=1, metadata={profile.EFFECTS: {"uncertain": f"e{LONE}"}}),
        lambda: Task.objects.get().uncertain_effects[0],
    ),
    "user message title": (
        {
            "message": {
                **message(f"Fix {LONE}", message_id="u1", role="ROLE_USER"),
                "contextId": "c",
            }
        },
        lambda: Session.objects.get().title,
    ),
}


@pytest.mark.parametrize("where", SURROGATE_BODIES)
def test_a_lone_surrogate_anywhere_in_a_push_is_kept_as_a_replacement_character(
    client, signed_agent, where
):
    body, read_back = SURROGATE_BODIES[where]
    response = push(client, signed_agent, body)
    stored_everywhere(response)
    assert FFFD in read_back()


def test_a_lone_surrogate_pushed_with_a_bearer_token_is_kept_too(client, token_agent):
    # A low surrogate alone, and a high one followed by a plain letter: both lone.
    body = status("WORKING", task="t\udc00", text="x\udbffA")
    stored_everywhere(push(client, token_agent, body))
    assert Task.objects.get().task_id == f"t{FFFD}"
    assert Task.objects.get().note == f"x{FFFD}A"


def test_a_surrogate_pair_is_one_character_and_kept_as_it_is(client, signed_agent):
    response = push(
        client,
        signed_agent,
        raw(
            '{"statusUpdate": {"taskId": "t\\ud83d\\ude00", "contextId": "c", "status": '
            '{"state": "TASK_STATE_WORKING", "message": {"messageId": "m", "role": "ROLE_AGENT", '
            '"parts": [{"text": "\\\\ud800 is how it is written, \\ud800 is one"}]}}}}'
        ),
    )
    stored_everywhere(response)
    assert Task.objects.get().task_id == "t\U0001f600"
    assert Task.objects.get().note == f"\\ud800 is how it is written, {FFFD} is one"


# -- timestamps -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stamp",
    [
        "9999-12-31T23:59:59-23:59",  # after the last moment a datetime holds, in UTC
        "0001-01-01T00:00:00+23:59",  # before the first
        "0001-01-01T00:00:00Z",  # the first: a microsecond earlier overflows
    ],
)
def test_a_timestamp_outside_what_can_be_kept_is_refused_naming_the_field(
    client, signed_agent, stamp
):
    body = status("WORKING")
    body["statusUpdate"]["status"]["timestamp"] = stamp
    detail = refused(push(client, signed_agent, body), "statusUpdate.status.timestamp", stamp)
    assert "out of range" in detail


def test_timestamps_at_the_edges_of_the_kept_range_are_refused_or_kept_exactly(
    client, signed_agent
):
    for stamp, code in [
        ("0001-01-02T00:00:00Z", 200),
        ("0001-01-02T00:00:00+00:01", 400),
        ("9999-12-30T23:59:59.999999Z", 200),
        ("9999-12-30T23:59:59.999999-00:01", 400),
    ]:
        body = status("WORKING", task=stamp)
        body["statusUpdate"]["status"]["timestamp"] = stamp
        assert push(client, signed_agent, body).status_code == code, stamp
    assert Task.objects.count() == 2


# -- types ----------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [[1], {"a": 1}, ["working"]])
def test_a_state_that_is_not_a_string_is_refused_naming_the_field(client, signed_agent, state):
    body = status("WORKING")
    body["statusUpdate"]["status"]["state"] = state
    refused(push(client, signed_agent, body), "statusUpdate.status.state must be a string")


def test_a_task_state_that_is_not_a_string_is_refused_naming_the_field(client, signed_agent):
    body = {"task": {"id": "t", "contextId": "c", "status": {"state": ["working"]}}}
    refused(push(client, signed_agent, body), "task.status.state must be a string")


# -- nesting --------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [" ", "\u3000", "\x1c"])
def test_a_first_user_message_of_only_whitespace_leaves_the_session_untitled(
    client, signed_agent, text
):
    user_said = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": text}]}
    body = {
        "task": {
            "id": "t1",
            "contextId": "c1",
            "status": {"state": "TASK_STATE_WORKING"},
            "history": [user_said],
        }
    }
    response = push(client, signed_agent, body)
    assert response.status_code == 200, response.content
    assert Session.objects.get().title == ""


def nested_data(levels: int) -> bytes:
    """An artifact whose one data part nests `levels` lists (the body itself is 5 deep)."""
    return raw(
        '{"artifactUpdate": {"taskId": "t", "contextId": "c", "artifact": {"artifactId": "a", '
        '"parts": [{"data": ' + "[" * levels + "]" * levels + "}]}}}"
    )


@pytest.mark.parametrize("levels", [100, 900])
def test_data_nested_past_the_limit_is_refused_naming_where(client, signed_agent, levels):
    refused(
        push(client, signed_agent, nested_data(levels)),
        "artifactUpdate.artifact.parts[0].data",
        f"at most {json_safety.MAX_DEPTH} levels",
    )


def test_data_nested_to_the_limit_is_kept_and_one_level_more_is_refused(client, signed_agent):
    deepest = json_safety.MAX_DEPTH - 5
    refused(push(client, signed_agent, nested_data(deepest + 1)), "parts[0].data")
    stored_everywhere(push(client, signed_agent, nested_data(deepest)))
    data = Artifact.objects.get().parts[0]["data"]
    for _ in range(deepest - 1):
        data = data[0]
    assert data == []


def test_metadata_nested_past_the_limit_is_refused_naming_where(client, signed_agent):
    body = raw(
        '{"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": '
        '"TASK_STATE_WORKING"}, "metadata": {"x": ' + '{"k": ' * 80 + "1" + "}" * 80 + "}}}"
    )
    refused(push(client, signed_agent, body), "statusUpdate.metadata.x.k.k.k…")


# -- profile extensions: what would not display is dropped, with a short warning -------------


def test_telemetry_numbers_past_what_readers_keep_exactly_are_dropped(client, signed_agent):
    telemetry = {"steps": 2**53, "tokens": 10**30, "costUsd": 1e300, "traceId": "tr"}
    push(client, signed_agent, status("COMPLETED", at=1, metadata={profile.TELEMETRY: telemetry}))
    assert Task.objects.get().telemetry == {"traceId": "tr"}
    warnings = Delivery.objects.get().warnings
    assert [w.split()[1] for w in warnings] == ["steps", "tokens", "costUsd"]


def test_a_negative_zero_cost_is_kept_as_zero(client, signed_agent):
    push(
        client,
        signed_agent,
        status("COMPLETED", at=1, metadata={profile.TELEMETRY: {"costUsd": -0.0}}),
    )
    cost = Task.objects.get().telemetry["costUsd"]
    assert cost == 0 and math.copysign(1, cost) == 1


def test_overlong_trace_ids_file_paths_and_effect_ids_are_dropped(client, signed_agent):
    long = "x" * 5000
    push(
        client,
        signed_agent,
        status(
            "COMPLETED",
            at=1,
            metadata={profile.TELEMETRY: {"traceId": long}, profile.EFFECTS: {"uncertain": long}},
        ),
    )
    push(client, signed_agent, artifact("a", "x", files={"kind": "report", "path": long}))
    task = Task.objects.get()
    assert (task.telemetry, task.uncertain_effects) == (None, [])
    assert Artifact.objects.get().files == {"kind": "report"}


def test_warnings_and_refusals_quote_only_a_short_excerpt_of_what_was_sent(client, signed_agent):
    huge = "k" * 100_000
    ask = approval("i1", "Deploy?", kind=huge)
    push(client, signed_agent, status("AUTH_REQUIRED", at=1, metadata=ask))
    assert 0 < len(json.dumps(Delivery.objects.get().warnings)) < 1000
    body = status("WORKING", task="t2")
    body["statusUpdate"]["status"]["state"] = huge
    response = push(client, signed_agent, body)
    assert response.status_code == 400
    assert len(response.content) < 1000


# -- the card API ---------------------------------------------------------------------------


@pytest.fixture
def api_token(db) -> str:
    registered = make_agent(name="Card writer")
    token = new_api_token()
    registered.agent.api_token_digest = digest(token)
    registered.agent.save(update_fields=["api_token_digest"])
    return token


def write_card(client, token: str, body) -> object:
    return client.post(
        "/api/progress-card",
        body if isinstance(body, bytes) else json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


CARD_BODIES = {
    "sessionKey": {"sessionKey": f"s{LONE}", "markdown": "x"},
    "markdown": {"sessionKey": "s", "markdown": f"Done {LONE}"},
    "step": {"sessionKey": "s", "plan": [{"step": f"Build {LONE}", "status": "pending"}]},
    "note": {"sessionKey": "s", "plan": [{"step": "B", "status": "pending", "note": f"n{LONE}"}]},
}


@pytest.mark.parametrize("where", CARD_BODIES)
def test_a_lone_surrogate_in_a_card_write_is_kept_as_a_replacement_character(
    client, api_token, where
):
    response = write_card(client, api_token, CARD_BODIES[where])
    assert response.status_code == 200, response.content
    card = ProgressCard.objects.get()
    assert FFFD in Session.objects.get().context_id + card.markdown + json.dumps(
        card.plan, ensure_ascii=False
    )
    assert stored_surrogates() == []


@pytest.mark.parametrize(
    ("body", "field", "error"),
    [
        (b'{"sessionKey": "s", "plan": ' + b"[" * 100 + b"]" * 100 + b"}", "plan", "levels deep"),
        (
            b'{"sessionKey": "s", "plan": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            None,
            "levels deep",
        ),
        (b'{"sessionKey": "s\xff"}', None, "UTF-8"),
    ],
)
def test_the_card_api_says_what_is_wrong_with_a_body_it_cannot_read(
    client, api_token, body, field, error
):
    response = write_card(client, api_token, body)
    assert response.status_code == 400, response.content
    assert error in response.json()["error"]
    assert response.json().get("field") == field
    assert not ProgressCard.objects.exists()
