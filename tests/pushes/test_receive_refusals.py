"""Bad input gets a clear 4xx with a JSON error that says what was wrong, and changes nothing
except the agent's refusal count."""

from __future__ import annotations

import json

import pytest

from tasks.models import Delivery, Refusal, Session, Task
from tests.conftest import push

WORKING = {"state": "TASK_STATE_WORKING"}


def assert_refused(response, status: int, reason: str, *, mentions: str = ""):
    assert response.status_code == status, response.content
    data = response.json()
    assert set(data) == {"error", "detail"}
    assert mentions in data["detail"], data
    assert not Delivery.objects.exists()
    assert not Session.objects.exists()
    assert not Task.objects.exists()
    assert Refusal.objects.get(reason=reason).count == 1


def test_body_over_the_limit_is_413(client, token_agent, settings):
    settings.ONLOOKER_MAX_PUSH_BYTES = 100
    body = {"statusUpdate": {"taskId": "t", "contextId": "c", "status": WORKING, "x": "a" * 100}}
    assert_refused(push(client, token_agent, body), 413, "too_large", mentions="limit is 100")


def test_body_at_the_limit_is_accepted(client, token_agent, settings):
    raw = json.dumps({"statusUpdate": {"taskId": "t", "contextId": "c", "status": WORKING}})
    settings.ONLOOKER_MAX_PUSH_BYTES = len(raw.encode())
    assert push(client, token_agent, raw.encode()).status_code == 200


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
def test_wrong_content_type_is_415(client, token_agent, content_type):
    body = {"statusUpdate": {"taskId": "t", "contextId": "c", "status": WORKING}}
    response = push(client, token_agent, body, content_type=content_type)
    assert_refused(response, 415, "unsupported_media_type", mentions="application/json")


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/a2a+json", "application/json; charset=utf-8"],
)
def test_json_content_types_are_accepted(client, token_agent, content_type):
    body = {"statusUpdate": {"taskId": "t", "contextId": "c", "status": WORKING}}
    assert push(client, token_agent, body, content_type=content_type).status_code == 200


WORKING_UPDATE = (
    b'{"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}'
)
BAD_BODIES = {
    "nul-in-a-string": (
        WORKING_UPDATE[:-1] + b', "message": {"messageId": "m", "role": "ROLE_AGENT", '
        b'"parts": [{"text": "a\\u0000b"}]}}}}',
        "U+0000",
    ),
    "infinite-number": (
        b'{"artifactUpdate": {"taskId": "t", "contextId": "c", "artifact": '
        b'{"artifactId": "a", "parts": [{"data": 1e999}]}}}',
        "out of range",
    ),
    "nan-literal": (WORKING_UPDATE + b', "metadata": {"x": NaN}}', "not a JSON number"),
    "deep-nesting": (
        WORKING_UPDATE + b', "metadata": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
        "nests too deeply",
    ),
    "not-json": (b"{not json", "not valid JSON"),
    "not-utf8": (b'{"task": "\xff"}', "UTF-8"),
    "array": (b"[]", "JSON object"),
    "empty-object": (b"{}", "found none of them"),
    "two-members": (
        {"statusUpdate": {"taskId": "t"}, "artifactUpdate": {"taskId": "t"}},
        "found statusUpdate, artifactUpdate",
    ),
    "jsonrpc-envelope": (
        {"jsonrpc": "2.0", "result": {"statusUpdate": {}}},
        "without a JSON-RPC envelope",
    ),
    "member-not-object": ({"statusUpdate": "working"}, "statusUpdate must be an object"),
    "missing-task-id": (
        {"statusUpdate": {"contextId": "c", "status": WORKING}},
        "statusUpdate.taskId is required",
    ),
    "missing-context-id": (
        {"statusUpdate": {"taskId": "t", "status": WORKING}},
        "statusUpdate.contextId is required",
    ),
    "missing-status": (
        {"statusUpdate": {"taskId": "t", "contextId": "c"}},
        "statusUpdate.status must be an object",
    ),
    "unspecified-state": (
        {
            "statusUpdate": {
                "taskId": "t",
                "contextId": "c",
                "status": {"state": "TASK_STATE_UNSPECIFIED"},
            }
        },
        "not an A2A 1.0 task state",
    ),
    "bad-timestamp": (
        {
            "statusUpdate": {
                "taskId": "t",
                "contextId": "c",
                "status": {"state": "TASK_STATE_WORKING", "timestamp": "yesterday"},
            }
        },
        "statusUpdate.status.timestamp",
    ),
    "part-with-two-kinds": (
        {
            "statusUpdate": {
                "taskId": "t",
                "contextId": "c",
                "status": {
                    "state": "TASK_STATE_WORKING",
                    "message": {
                        "messageId": "m",
                        "role": "ROLE_AGENT",
                        "parts": [{"text": "a", "url": "http://x"}],
                    },
                },
            }
        },
        "statusUpdate.status.message.parts[0] must have exactly one of",
    ),
    "lowercase-role": (
        {"message": {"messageId": "m", "role": "agent", "parts": [{"text": "hi"}]}},
        "ROLE_USER or ROLE_AGENT",
    ),
    "artifact-without-parts": (
        {"artifactUpdate": {"taskId": "t", "contextId": "c", "artifact": {"artifactId": "a"}}},
        "artifactUpdate.artifact.parts must have at least one part",
    ),
    "task-id-too-long": (
        {"statusUpdate": {"taskId": "t" * 201, "contextId": "c", "status": WORKING}},
        "statusUpdate.taskId is longer than 200 characters",
    ),
    "message-id-too-long": (
        {
            "message": {
                "messageId": "m" * 201,
                "role": "ROLE_AGENT",
                "contextId": "c",
                "parts": [{"text": "x"}],
            }
        },
        "message.messageId is longer than 200 characters",
    ),
    "task-without-id": (
        {"task": {"contextId": "c", "status": WORKING}},
        "task.id is required",
    ),
    "append-not-bool": (
        {
            "artifactUpdate": {
                "taskId": "t",
                "contextId": "c",
                "append": "yes",
                "artifact": {"artifactId": "a", "parts": [{"text": "x"}]},
            }
        },
        "artifactUpdate.append must be true or false",
    ),
}


@pytest.mark.parametrize("body, mentions", BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_malformed_body_is_400_naming_the_problem(client, token_agent, body, mentions):
    assert_refused(push(client, token_agent, body), 400, "malformed", mentions=mentions)


PRE_1_0 = {
    "bare-task-with-kind": {
        "kind": "task",
        "id": "t",
        "contextId": "c",
        "status": {"state": "working"},
    },
    "status-update-with-kind": {
        "statusUpdate": {
            "kind": "status-update",
            "taskId": "t",
            "contextId": "c",
            "status": {"state": "working"},
        }
    },
    "lowercase-state": {
        "statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "input-required"}}
    },
}


@pytest.mark.parametrize("body", PRE_1_0.values(), ids=PRE_1_0.keys())
def test_pre_1_0_body_is_400_saying_so(client, token_agent, body):
    response = push(client, token_agent, body)
    assert_refused(response, 400, "malformed", mentions="pre-1.0")
    assert response.json()["error"] == "pre-1.0 body"


def test_signed_agent_gets_401_before_any_parsing(client, signed_agent):
    response = client.post(signed_agent.path, b"{not json", content_type="text/plain")
    assert_refused(response, 401, "unauthenticated")


def test_escaped_backslash_before_u0000_is_ordinary_text(client, token_agent):
    raw = (
        b'{"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": '
        b'"TASK_STATE_WORKING", "message": {"messageId": "m", "role": "ROLE_AGENT", '
        b'"parts": [{"text": "C:\\\\u0000"}]}}}}'
    )
    assert push(client, token_agent, raw).status_code == 200
    assert Task.objects.get().status_message == "C:\\u0000"


def test_unknown_fields_and_empty_defaults_are_ignored(client, token_agent):
    body = {
        "statusUpdate": {
            "taskId": "t",
            "contextId": "c",
            "status": {"state": "TASK_STATE_WORKING", "timestamp": "", "message": None},
            "metadata": {},
            "somethingNew": {"x": 1},
        },
        "artifactUpdate": "",
        "message": [],
    }
    response = push(client, token_agent, body)
    assert response.status_code == 200, response.content
    assert Task.objects.get().state == "TASK_STATE_WORKING"
