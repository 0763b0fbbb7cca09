"""A push's `webhook-id` becomes its delivery's idempotency key: only printable ids are kept,
signed or not, and what a refusal says is kept as plain text."""

from __future__ import annotations

import json
import uuid

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator

from dashboard.asgi import application
from tasks.models import Delivery, Refusal, Session, Task
from tests.builders import status
from tests.conftest import make_agent, push, sign_headers
from tests.pushes.test_receive_asgi import http_scope, respond

# What real senders make: the svix libraries' msg_<KSUID>, UUIDs, anything printable, ids
# long enough to be hashed, and a Latin-1 id as a server decodes any non-ASCII header.
KEPT_IDS = [
    "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
    str(uuid.uuid4()),
    "evt 2026-11-30T12:00:00Z/#1?a=b&c~d",
    "msg_" + "x" * 300,
    "msg_caf\xe9-\xc3\xa9",
]
# NUL fails the INSERT on PostgreSQL (a 503 on every retry); the others would be kept as junk.
REFUSED_IDS = ["msg_\x00abc", "msg_\x1b[31mred", "msg_\tTab", "msg_\x7fdel", "msg_\x85nel"]


@pytest.mark.parametrize("signing", [False, True], ids=["token", "signed"])
def test_only_printable_webhook_ids_are_kept(client, db, signing):
    registered = make_agent(signing=signing)

    for number, webhook_id in enumerate(KEPT_IDS):
        body = status("WORKING", task=f"kept-{number}", at=number)
        response = push(client, registered, body, msg_id=webhook_id)
        assert response.status_code == 200, (webhook_id, response.content)
        again = push(client, registered, body, msg_id=webhook_id)
        assert again.json()["outcome"] == "duplicate", webhook_id

    kept = Delivery.objects.count()
    tasks = Task.objects.count()
    for number, webhook_id in enumerate(REFUSED_IDS):
        body = status("WORKING", task=f"refused-{number}", at=number)
        response = push(client, registered, body, msg_id=webhook_id)
        assert response.status_code == 400, (webhook_id, response.content)
        assert response.json()["error"] == "bad webhook-id"
        assert "webhook-id" in response.json()["detail"]
        assert f"(U+{ord(webhook_id[4]):04X}) at position 4" in response.json()["detail"]

    assert (Delivery.objects.count(), Task.objects.count()) == (kept, tasks) == (5, 5)
    refusal = Refusal.objects.get(agent=registered.agent)
    assert (refusal.reason, refusal.count) == ("malformed", len(REFUSED_IDS))


@pytest.mark.django_db(transaction=True)
def test_a_signed_id_with_a_nul_is_refused_by_the_asgi_receiver():
    """The path Daphne runs: raw header bytes, decoded as Latin-1, really signed."""
    registered = make_agent(signing=True)
    raw = json.dumps(status("WORKING", at=1)).encode()
    signed = sign_headers(registered.secret, raw, msg_id="msg_\x00\x85")
    headers = [(b"content-type", b"application/json")]
    headers += [(name.encode(), value.encode("latin-1")) for name, value in signed.items()]

    async def scenario():
        communicator = ApplicationCommunicator(application, http_scope(registered.path, headers))
        await communicator.send_input({"type": "http.request", "body": raw})
        return await respond(communicator)

    code, data = async_to_sync(scenario)()
    assert code == 400, data
    assert "webhook-id" in data["detail"]
    assert not Delivery.objects.exists() and not Session.objects.exists()
    assert Refusal.objects.get(agent=registered.agent, reason="malformed").count == 1


def test_a_refusal_quoting_the_agent_is_kept_and_shown_as_plain_text(
    admin_client, client, token_agent
):
    # A key on the path of a too-deep value is quoted as it came: markup, a terminal escape
    # and a right-to-left override that would reorder what the admin shows.
    hostile = "\x1b[31m<b>Approve</b>\u202eevil"
    deep: object = "bottom"
    for _ in range(70):
        deep = [deep]
    body = status("WORKING", at=1, metadata={hostile: deep})

    response = push(client, token_agent, body)

    assert response.status_code == 400
    detail = Refusal.objects.get(agent=token_agent.agent, reason="malformed").last_detail
    assert "Approve" in detail and "nests too deeply" in detail
    for unwanted in ("<b>", "\x1b", "\u202e"):
        assert unwanted not in detail, detail
    page = admin_client.get(f"/admin/tasks/agent/{token_agent.agent.pk}/change/").content.decode()
    assert detail in page
    assert "&lt;b&gt;" not in page and "\u202e" not in page
