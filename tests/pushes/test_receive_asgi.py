"""The receiver as the ASGI server runs it: oversized bodies refused before they are read,
browsers hinted after commit, and pushes still accepted when the channel layer is down."""

from __future__ import annotations

import json

import psycopg
import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from channels.layers import get_channel_layer
from django.db import connection

from dashboard.asgi import application
from tasks.live import fanout
from tasks.models import Delivery, Refusal, Session
from tests import listening
from tests.builders import status
from tests.conftest import make_agent, push, sign_headers


def http_scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


async def respond(communicator: ApplicationCommunicator) -> tuple[int, dict]:
    start = await communicator.receive_output(timeout=5)
    body = await communicator.receive_output(timeout=5)
    await communicator.wait(timeout=5)  # let the app finish, closing its connections
    return start["status"], json.loads(body["body"])


@pytest.mark.django_db(transaction=True)
def test_declared_oversized_body_is_refused_before_it_is_read(settings):
    settings.ONLOOKER_MAX_PUSH_BYTES = 1000
    registered = make_agent()

    async def scenario():
        headers = [(b"content-type", b"application/json"), (b"content-length", b"5000000")]
        communicator = ApplicationCommunicator(application, http_scope(registered.path, headers))
        await communicator.send_input({"type": "http.request", "body": b"", "more_body": True})
        # No body was sent beyond the first empty chunk: the answer comes anyway.
        return await respond(communicator)

    code, data = async_to_sync(scenario)()
    assert code == 413
    assert "limit is 1000" in data["detail"]
    assert Refusal.objects.get(agent=registered.agent, reason="too_large").count == 1


@pytest.mark.django_db(transaction=True)
def test_chunked_body_is_refused_as_soon_as_it_passes_the_limit(settings):
    settings.ONLOOKER_MAX_PUSH_BYTES = 1000
    registered = make_agent()

    async def scenario():
        communicator = ApplicationCommunicator(
            application, http_scope(registered.path, [(b"content-type", b"application/json")])
        )
        await communicator.send_input(
            {"type": "http.request", "body": b"x" * 600, "more_body": True}
        )
        await communicator.send_input(
            {"type": "http.request", "body": b"x" * 600, "more_body": True}
        )
        return await respond(communicator)

    code, _ = async_to_sync(scenario)()
    assert code == 413
    assert not Delivery.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_chunked_body_within_the_limit_reaches_the_receiver(settings):
    registered = make_agent()
    raw = json.dumps(status("WORKING", at=1)).encode()

    async def scenario():
        headers = [
            (b"content-type", b"application/json"),
            (b"authorization", f"Bearer {registered.bearer}".encode()),
        ]
        communicator = ApplicationCommunicator(application, http_scope(registered.path, headers))
        await communicator.send_input({"type": "http.request", "body": raw[:10], "more_body": True})
        await communicator.send_input(
            {"type": "http.request", "body": raw[10:], "more_body": False}
        )
        return await respond(communicator)

    code, data = async_to_sync(scenario)()
    assert (code, data["outcome"]) == (200, "accepted")
    assert Delivery.objects.get().body == raw.decode()


def test_committed_push_hints_the_team_and_session_groups_in_one_message(
    client, token_agent, fresh_channel_layers, django_capture_on_commit_callbacks
):
    layer = get_channel_layer()
    channel = async_to_sync(listening.join)(layer)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        push(client, token_agent, status("WORKING", at=1))
    assert len(callbacks) == 1
    session = Session.objects.get()
    wired = async_to_sync(listening.first)(layer, channel, [f"session.{session.pk}"])
    assert set(wired) == {"type", "groups", "text", "session", "html"}
    assert wired["groups"] == ["team.all", f"session.{session.pk}"]
    assert wired["type"] == "card.changed"
    message = json.loads(fanout.text_for(wired))  # encoded once for every socket
    assert (message["state"], message["needsHuman"], message["revision"]) == (
        "TASK_STATE_WORKING",
        False,
        1,
    )
    assert 'data-revision="1"' in message["html"]["card"]


def test_refused_push_broadcasts_nothing(client, token_agent, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        response = push(client, token_agent, b"{}")
    assert response.status_code == 400
    assert callbacks == []


def test_push_is_accepted_and_stored_while_the_channel_layer_is_down(
    client, token_agent, settings, fresh_channel_layers, django_capture_on_commit_callbacks
):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]},
        }
    }
    with django_capture_on_commit_callbacks(execute=True):
        response = push(client, token_agent, status("WORKING", at=1))
    assert response.status_code == 200
    assert Delivery.objects.get().outcome == "applied"


def asgi_request(path: str, headers: list[tuple[bytes, bytes]], body: bytes, method="POST"):
    async def scenario():
        scope = {**http_scope(path, headers), "method": method}
        communicator = ApplicationCommunicator(application, scope)
        await communicator.send_input({"type": "http.request", "body": body, "more_body": False})
        start = await communicator.receive_output(timeout=5)
        response = await communicator.receive_output(timeout=5)
        await communicator.wait(timeout=5)
        return start["status"], {k.lower(): v for k, v in start["headers"]}, response["body"]

    return async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_asgi_path_answers_pushes_as_the_view_does():
    registered = make_agent(signing=True)
    raw = json.dumps(status("WORKING", at=1)).encode()
    signed = [(k.encode(), v.encode()) for k, v in sign_headers(registered.secret, raw).items()]
    json_type = [(b"content-type", b"application/json")]

    code, headers, body = asgi_request(registered.path, json_type + signed, raw)
    assert (code, json.loads(body)["outcome"]) == (200, "accepted")
    assert headers[b"content-type"] == b"application/json"
    # Its length given, the answer is not a chunked stream: an agent's keep-alive client
    # reads it whole and sends the next push on the same connection.
    assert headers[b"content-length"] == str(len(body)).encode()

    code, _, body = asgi_request(registered.path, json_type + signed, raw)
    assert (code, json.loads(body)["outcome"]) == (200, "duplicate")

    bearer = [(b"authorization", f"Bearer {registered.bearer}".encode())]
    code, _, body = asgi_request(registered.path, json_type + bearer, raw)
    assert (code, json.loads(body)["error"]) == (401, "signature required")

    code, _, body = asgi_request("/a2a/push/unknown/", json_type + signed, raw)
    assert (code, json.loads(body)["error"]) == (404, "unknown push endpoint")

    code, headers, _ = asgi_request(registered.path, [], b"", method="GET")
    assert (code, headers[b"allow"]) == (405, b"POST")
    assert Delivery.objects.count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("declared", "expected"),
    [(b"9" * 5000, 413), (b"\xb2", 401), (b"\xd9\xa3", 401)],  # 5,000 digits; "²"; "٣"
)
def test_a_content_length_that_is_no_plain_number_is_a_clear_4xx(declared, expected):
    """Digits int() refuses (superscripts, other scripts' digits, over 4,300 of them) were
    read as a size and raised: a 500 for a header."""
    registered = make_agent()

    async def scenario():
        headers = [(b"content-type", b"application/json"), (b"content-length", declared)]
        communicator = ApplicationCommunicator(application, http_scope(registered.path, headers))
        await communicator.send_input({"type": "http.request", "body": b"{}", "more_body": False})
        return await respond(communicator)

    code, data = async_to_sync(scenario)()
    assert code == expected, data
    assert not Delivery.objects.exists()


def signed_push(registered, at: int) -> int:
    raw = json.dumps(status("WORKING", at=at, text=f"push {at}")).encode()
    signed = [(k.encode(), v.encode()) for k, v in sign_headers(registered.secret, raw).items()]
    code, _, _ = asgi_request(
        registered.path, [(b"content-type", b"application/json"), *signed], raw
    )
    return code


@pytest.mark.django_db(transaction=True)
def test_pushes_keep_their_thread_s_database_connection_rather_than_one_from_the_pool_each(
    postgresql_pool,
):
    registered = make_agent(signing=True)
    signed_push(registered, 1)  # the thread's connection, taken once
    asked = postgresql_pool.get_stats().get("requests_num", 0)

    assert [signed_push(registered, at) for at in (2, 3, 4)] == [200, 200, 200]

    assert postgresql_pool.get_stats().get("requests_num", 0) == asked
    assert Delivery.objects.count() == 4


@pytest.mark.django_db(transaction=True)
def test_after_its_database_connection_breaks_a_push_is_refused_once_and_then_kept(
    postgresql_pool,
):
    registered = make_agent(signing=True)
    assert signed_push(registered, 1) == 200
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    # The server ends the receiver's connection (a restart, an idle timeout, an operator).
    with psycopg.connect(**connection.get_connection_params() | {"autocommit": True}) as other:
        # Waits for the backend to have ended (the signal alone does not): on a loaded
        # machine the next push could run on the connection before it died.
        other.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])

    first, second = signed_push(registered, 2), signed_push(registered, 3)

    assert (first, second) == (503, 200)  # the 503 is retried by its agent, and kept then
    assert signed_push(registered, 2) == 200
    assert Delivery.objects.count() == 3
