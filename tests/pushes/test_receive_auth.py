"""Every push is authenticated before it is parsed: Standard Webhooks signatures for agents
that sign (with rotation and no downgrade), push-config credentials for the others. Every
rejection is a 401 that stores nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tasks.answering.agents import (
    new_signing_secret,
    retire_previous_signing_secret,
    rotate_signing_secret,
)
from tasks.models import Delivery, PushEndpoint, Refusal, Session
from tests.builders import status
from tests.conftest import NOW, encode, push, sign_headers

BODY = {
    "statusUpdate": {
        "taskId": "task-1",
        "contextId": "ctx-1",
        "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-11-30T12:00:00Z"},
    }
}


def http(headers: dict) -> dict:
    return {"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()}


def post_raw(client, registered, body=BODY, **headers):
    return client.post(registered.path, encode(body), content_type="application/json", **headers)


def assert_refused_unchanged(response, registered, *, status=401):
    assert response.status_code == status, response.content
    assert set(response.json()) == {"error", "detail"}
    assert not Delivery.objects.exists()
    assert not Session.objects.exists()
    assert Refusal.objects.get(agent=registered.agent).count == 1


@pytest.fixture(autouse=True)
def frozen_clock():
    with time_machine.travel(NOW, tick=False):
        yield


# -- Standard Webhooks ------------------------------------------------------------------


def test_signed_push_is_accepted(client, signed_agent):
    response = push(client, signed_agent, BODY)
    assert response.status_code == 200
    assert response.json()["outcome"] == "accepted"
    assert Session.objects.get().context_id == "ctx-1"


def test_signature_made_with_either_secret_during_rotation_is_accepted(client, signed_agent):
    old = signed_agent.secret
    new = rotate_signing_secret(signed_agent.agent)
    for index, secret in enumerate([old, new]):
        raw = encode(BODY)
        response = post_raw(client, signed_agent, BODY, **http(sign_headers(secret, raw)))
        assert response.status_code == 200, (index, response.content)
    assert Delivery.objects.count() == 2


def test_sender_signing_with_both_secrets_in_one_header_is_accepted(client, signed_agent):
    old = signed_agent.secret
    rotate_signing_secret(signed_agent.agent)
    unknown = new_signing_secret()
    raw = encode(BODY)
    headers = sign_headers(unknown, raw, msg_id="msg_1")
    good = sign_headers(old, raw, msg_id="msg_1")["webhook-signature"]
    headers["webhook-signature"] = f"v1a,AAAA {headers['webhook-signature']} {good}"
    assert post_raw(client, signed_agent, BODY, **http(headers)).status_code == 200


def test_retired_secret_no_longer_verifies(client, signed_agent):
    old = signed_agent.secret
    rotate_signing_secret(signed_agent.agent)
    retire_previous_signing_secret(signed_agent.agent)
    response = post_raw(client, signed_agent, BODY, **http(sign_headers(old, encode(BODY))))
    assert_refused_unchanged(response, signed_agent)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_missing_signature_header_is_refused(client, signed_agent, missing):
    headers = sign_headers(signed_agent.secret, encode(BODY))
    del headers[missing]
    response = post_raw(client, signed_agent, BODY, **http(headers))
    assert_refused_unchanged(response, signed_agent)
    assert missing in response.json()["detail"]


def test_signature_from_another_secret_is_refused(client, signed_agent):
    headers = sign_headers(new_signing_secret(), encode(BODY))
    response = post_raw(client, signed_agent, BODY, **http(headers))
    assert_refused_unchanged(response, signed_agent)
    assert response.json()["detail"] == "no signature matched"


def test_signature_over_another_body_is_refused(client, signed_agent):
    headers = sign_headers(signed_agent.secret, b'{"statusUpdate": {}}')
    assert_refused_unchanged(post_raw(client, signed_agent, BODY, **http(headers)), signed_agent)


@pytest.mark.parametrize(
    "signature",
    ["garbage", "v1=abc", "v1,not base64!!", "v1,", "v1a,AAAA", "v1,AAAA,BBBB"],
    ids=["no-comma", "vendor-style", "bad-base64", "empty", "only-v1a", "two-commas"],
)
def test_malformed_signature_entry_is_refused_not_crashed(client, signed_agent, signature):
    headers = sign_headers(signed_agent.secret, encode(BODY))
    headers["webhook-signature"] = signature
    assert_refused_unchanged(post_raw(client, signed_agent, BODY, **http(headers)), signed_agent)


@pytest.mark.parametrize(
    "offset", [timedelta(minutes=-6), timedelta(minutes=6)], ids=["old", "future"]
)
def test_timestamp_more_than_five_minutes_away_is_refused(client, signed_agent, offset):
    headers = sign_headers(signed_agent.secret, encode(BODY), at=NOW + offset)
    response = post_raw(client, signed_agent, BODY, **http(headers))
    assert_refused_unchanged(response, signed_agent)
    assert "5 minutes" in response.json()["detail"]


@pytest.mark.parametrize("offset", [timedelta(minutes=-4), timedelta(minutes=4)])
def test_timestamp_within_five_minutes_is_accepted(client, signed_agent, offset):
    headers = sign_headers(signed_agent.secret, encode(BODY), at=NOW + offset)
    assert post_raw(client, signed_agent, BODY, **http(headers)).status_code == 200


def test_non_numeric_timestamp_is_refused(client, signed_agent):
    headers = sign_headers(signed_agent.secret, encode(BODY))
    headers["webhook-timestamp"] = "nan"
    assert_refused_unchanged(post_raw(client, signed_agent, BODY, **http(headers)), signed_agent)


def test_signed_non_utf8_body_is_refused_not_crashed(client, signed_agent):
    raw = b'{"statusUpdate": "\xff\xfe"}'
    headers = sign_headers(signed_agent.secret, b"{}")
    response = client.post(signed_agent.path, raw, content_type="application/json", **http(headers))
    assert_refused_unchanged(response, signed_agent)


def test_agent_that_signs_cannot_be_downgraded_to_a_valid_token(client, signed_agent):
    response = post_raw(
        client,
        signed_agent,
        BODY,
        HTTP_AUTHORIZATION=f"Bearer {signed_agent.bearer}",
        HTTP_X_A2A_NOTIFICATION_TOKEN=signed_agent.token,
    )
    assert_refused_unchanged(response, signed_agent)
    assert "signs its pushes" in response.json()["detail"]


def test_replayed_signed_push_is_a_duplicate_not_a_second_change(client, signed_agent):
    raw = encode(BODY)
    headers = http(sign_headers(signed_agent.secret, raw, msg_id="msg_replay"))
    first = client.post(signed_agent.path, raw, content_type="application/json", **headers)
    second = client.post(signed_agent.path, raw, content_type="application/json", **headers)
    assert (first.json()["outcome"], second.json()["outcome"]) == ("accepted", "duplicate")
    assert Delivery.objects.get().duplicates == 1


# -- push-config credentials ----------------------------------------------------------


def test_bearer_credentials_are_accepted(client, token_agent):
    response = post_raw(client, token_agent, HTTP_AUTHORIZATION=f"Bearer {token_agent.bearer}")
    assert response.status_code == 200


def test_bearer_scheme_is_case_insensitive(client, token_agent):
    response = post_raw(client, token_agent, HTTP_AUTHORIZATION=f"bearer {token_agent.bearer}")
    assert response.status_code == 200


def test_notification_token_header_is_accepted(client, token_agent):
    response = post_raw(client, token_agent, HTTP_X_A2A_NOTIFICATION_TOKEN=token_agent.token)
    assert response.status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"HTTP_AUTHORIZATION": "Bearer wrong"},
        {"HTTP_AUTHORIZATION": "Basic dXNlcjpwYXNz"},
        {"HTTP_X_A2A_NOTIFICATION_TOKEN": "wrong"},
        {"HTTP_AUTHORIZATION": "Bearer "},
    ],
    ids=["none", "wrong-bearer", "basic", "wrong-token", "empty-bearer"],
)
def test_missing_or_wrong_credentials_are_refused(client, token_agent, headers):
    assert_refused_unchanged(post_raw(client, token_agent, **headers), token_agent)


def test_token_of_one_endpoint_does_not_open_another(client, token_agent, db):
    from tests.conftest import make_agent

    other = make_agent(name="Other")
    response = post_raw(client, other, HTTP_AUTHORIZATION=f"Bearer {token_agent.bearer}")
    assert_refused_unchanged(response, other)


def test_bearer_token_swapped_with_notification_token_is_refused(client, token_agent):
    response = post_raw(client, token_agent, HTTP_AUTHORIZATION=f"Bearer {token_agent.token}")
    assert_refused_unchanged(response, token_agent)


def test_refusals_are_counted_per_reason(client, token_agent):
    for _ in range(3):
        post_raw(client, token_agent, HTTP_AUTHORIZATION="Bearer wrong")
    refusal = Refusal.objects.get(agent=token_agent.agent, reason="unauthenticated")
    assert refusal.count == 3
    assert refusal.last_at == datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_unknown_endpoint_is_404_and_counts_nothing(client, token_agent):
    response = client.post("/a2a/push/nope/", encode(BODY), content_type="application/json")
    assert response.status_code == 404
    assert response.json()["error"] == "unknown push endpoint"
    assert not Refusal.objects.exists()


def test_inactive_endpoint_is_404(client, token_agent):
    token_agent.endpoint.active = False
    token_agent.endpoint.save()
    response = post_raw(client, token_agent, HTTP_AUTHORIZATION=f"Bearer {token_agent.bearer}")
    assert response.status_code == 404


def test_get_is_not_allowed(client, token_agent):
    response = client.get(token_agent.path)
    assert response.status_code == 405
    assert response["Allow"] == "POST"


def test_a_cached_endpoint_is_read_again_once_its_time_is_up(client, token_agent, settings):
    """A process keeps an endpoint for ONLOOKER_ENDPOINT_CACHE_SECONDS (no query per push);
    a deactivated endpoint is refused once that time is up."""
    settings.ONLOOKER_ENDPOINT_CACHE_SECONDS = 1
    with time_machine.travel(NOW, tick=False):
        assert push(client, token_agent, status("WORKING", at=1)).status_code == 200
        with CaptureQueriesContext(connection) as queries:
            assert push(client, token_agent, status("WORKING", at=2)).status_code == 200
        assert not [q for q in queries if "tasks_pushendpoint" in q["sql"]]
        PushEndpoint.objects.filter(pk=token_agent.endpoint.pk).update(active=False)
    with time_machine.travel(NOW + timedelta(seconds=2), tick=False):
        assert push(client, token_agent, status("WORKING", at=3)).status_code == 404
