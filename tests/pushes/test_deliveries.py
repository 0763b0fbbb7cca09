"""Keeping pushes (pushes/deliveries.py): the delivery log is keyed by (agent, idempotency
key), so a second copy is a duplicate that changes nothing, and a delivery keeps its raw body.
All through the real view."""

from __future__ import annotations

import json

from tasks.models import Delivery, Message
from tests.builders import status
from tests.pushes.sending import send


def test_duplicate_delivery_changes_nothing(client, token_agent):
    body = status("WORKING", at=1, text="once")
    assert send(client, token_agent, body, msg_id="m-1") == "applied"
    assert send(client, token_agent, body, msg_id="m-1") == "duplicate"
    assert Delivery.objects.count() == 1
    assert Message.objects.count() == 1


def test_same_body_without_webhook_id_is_deduplicated_by_content(client, token_agent):
    body = status("WORKING", at=1, text="once")
    assert send(client, token_agent, body) == "applied"
    assert send(client, token_agent, body) == "duplicate"
    assert Delivery.objects.get().idempotency_key.startswith("sha256:")


def test_same_webhook_id_from_two_agents_are_two_deliveries(client, token_agent, signed_agent):
    send(client, token_agent, status("WORKING", at=1), msg_id="shared")
    send(client, signed_agent, status("WORKING", at=1), msg_id="shared")
    assert Delivery.objects.count() == 2


def test_very_long_webhook_id_is_accepted_and_still_deduplicated(client, token_agent):
    long_id = "x" * 500
    assert send(client, token_agent, status("WORKING", at=1), msg_id=long_id) == "applied"
    assert send(client, token_agent, status("WORKING", at=2), msg_id=long_id) == "duplicate"


def test_delivery_keeps_the_raw_body(client, token_agent):
    raw = json.dumps(status("WORKING", at=1)).encode()
    send(client, token_agent, raw)
    assert Delivery.objects.get().body == raw.decode()
