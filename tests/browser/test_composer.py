"""The composer in a real browser: "Send only if the agent is idle" reaches the agent, and
when the agent starts waiting for input the button turns, live, into a reply to that task
(issue 11 §3)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tasks.models import Session
from tasks.wire import profile
from tests.builders import status
from tests.conftest import make_agent, member
from tests.live_server import push_http
from tests.peers.misbehaving_agent import ACCEPTED, MisbehavingAgent

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_composer_sends_only_if_idle_then_replies_to_the_question(
    server, login, open_live, page, ops, approvers
):
    with MisbehavingAgent() as stub:
        stub.answer(ACCEPTED)
        registered = make_agent(team=ops)
        registered.agent.rpc_url = stub.rpc_url
        registered.agent.extensions = list(profile.EXTENSIONS)
        registered.agent.save()
        assert push_http(server, registered, status("WORKING", at=1)).status_code == 200
        login(member("alice", ops, approvers))
        open_live(f"/sessions/{Session.objects.get().pk}/")

        send = page.locator(".composer button[type=submit]")
        expect(send).to_have_text("Send")
        page.locator("#composer-text").fill("Summarise when you can")
        page.get_by_label("Send only if the agent is idle").check()
        send.click()
        expect(page.locator(".composer [data-action-status]")).to_have_text("Sent.")
        [first] = [params["message"] for params in stub.calls("SendMessage")]
        assert first["metadata"] == {"delivery": "reject"} and "taskId" not in first

        asked = status("INPUT_REQUIRED", at=2, text="Which branch?", message_id="ask-1")
        assert push_http(server, registered, asked).status_code == 200
        expect(send).to_have_text("Reply to the agent's question")
        page.locator("#composer-text").fill("main")
        send.click()
        expect(page.locator(".composer [data-action-status]")).to_have_text(
            "Sent as the reply to the agent's question."
        )
        second = stub.calls("SendMessage")[1]["message"]
        assert (second["taskId"], second["contextId"]) == ("task-1", "ctx-1")
        assert second["parts"] == [{"text": "main"}]
