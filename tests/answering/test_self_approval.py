"""Separation of duties (issue 31 §5): for an agent registered with `--no-self-approval`, the
person who started a task from the composer cannot approve what that task asks ("Needs
another approver"); someone else can, and they can still deny. Through the real views, with
a loopback agent that records every message it gets.
"""

from __future__ import annotations

from django.contrib.auth.models import User

from tasks.answering.answers import NEEDS_ANOTHER
from tasks.models import Interaction, TaskStart
from tests.answering.test_answers import answer, person, sent_messages
from tests.answering.test_talking import post, task_json
from tests.builders import approval, status
from tests.peers.misbehaving_agent import ACCEPTED

NEEDS = "Needs another approver"


def started_by_alice(stub_session, ops, approvers, *, no_self_approval: bool = True):
    """alice starts a new session from the composer (task t-9), whose agent then asks for an
    approval on it: (alice's client, the approval)."""
    stub, session, registered = stub_session
    registered.agent.no_self_approval = no_self_approval
    registered.agent.save(update_fields=["no_self_approval"])
    started = task_json("t-9", "TASK_STATE_SUBMITTED", context="ctx-new")
    stub.answer({"jsonrpc": "2.0", "result": {"task": started}})
    alice = person("alice", ops, approvers)
    form = {"agent": session.agent_id, "text": "Deploy the fix", "message_id": "0123456789ab"}
    assert alice.post("/sessions/new/", form).status_code == 302
    asks = status("AUTH_REQUIRED", task="t-9", context="ctx-new", at=10,
                  metadata=approval("i-9", "Deploy to production?"))  # fmt: skip
    assert registered.push(asks).status_code == 200
    stub.answer(ACCEPTED)
    return alice, Interaction.objects.get(interaction_id="i-9")


def test_the_person_who_started_the_task_cannot_approve_it(stub_session, ops, approvers):
    stub = stub_session[0]
    alice, interaction = started_by_alice(stub_session, ops, approvers)
    start = TaskStart.objects.get()
    assert (start.task_id, start.started_by.username) == ("t-9", "alice")
    before = len(sent_messages(stub))

    code, data = answer(alice, interaction, decision="approve")

    assert code == 403 and data["detail"] == NEEDS_ANOTHER
    assert data["detail"].startswith(NEEDS)
    assert len(sent_messages(stub)) == before  # nothing reached the agent
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answer) == (Interaction.State.OPEN, None)
    # A plain form post (no script) is refused the same way, back on the page with the words.
    response = alice.post(f"/interactions/{interaction.pk}/answer/", {"decision": "approve"})
    assert response.status_code == 302
    assert NEEDS in alice.get(response["Location"]).content.decode()


def test_another_approver_may_approve_it(stub_session, ops, approvers):
    stub = stub_session[0]
    _, interaction = started_by_alice(stub_session, ops, approvers)
    bob = person("bob", ops, approvers)
    code, data = answer(bob, interaction, decision="approve")
    assert code == 200, data
    assert data["detail"].startswith("Approved by bob")
    assert sent_messages(stub)[-1]["metadata"]["https://docs.nylorun.com/a2a/interactions/v1"] == {
        "interactionId": "i-9",
        "approved": True,
    }


def test_the_starter_may_still_deny_it(stub_session, ops, approvers):
    alice, interaction = started_by_alice(stub_session, ops, approvers)
    code, data = answer(alice, interaction, decision="deny", reason="wrong branch")
    assert code == 200 and data["detail"].startswith("Denied by alice")


def test_an_agent_without_the_policy_lets_the_starter_approve(stub_session, ops, approvers):
    alice, interaction = started_by_alice(stub_session, ops, approvers, no_self_approval=False)
    code, data = answer(alice, interaction, decision="approve")
    assert code == 200 and data["detail"].startswith("Approved by alice")


def test_the_page_and_the_inbox_show_the_starter_needs_another_approver(
    stub_session, ops, approvers
):
    alice, interaction = started_by_alice(stub_session, ops, approvers)
    bob = person("bob", ops, approvers)
    page = f"/sessions/{interaction.task.session_id}/"
    approve_button = 'name="decision" value="approve"'

    for url in (page, f"{page}activity/", "/", "/live/board/?waiting=1"):
        shown = alice.get(url).content.decode()
        assert NEEDS in shown, url
        assert approve_button not in shown.replace("\\", ""), url
        assert 'value="deny"' in shown.replace("\\", ""), url  # Deny stays
        seen_by_bob = bob.get(url).content.decode()
        assert NEEDS not in seen_by_bob and approve_button in seen_by_bob.replace("\\", ""), url


def test_a_message_that_starts_new_work_records_its_starter_and_a_reply_does_not(
    stub_session, ops, approvers
):
    stub, session, registered = stub_session
    stub.answer({"jsonrpc": "2.0", "result": {"task": task_json("task-2", "TASK_STATE_WORKING")}})
    bob = person("bob", ops, approvers)
    code, _ = post(bob, f"/sessions/{session.pk}/messages/", text="Go", message_id="new-work-1")
    assert code == 200
    assert list(TaskStart.objects.values_list("task_id", "started_by__username")) == [
        ("task-2", "bob")
    ]

    # task-2 waits for input; alice's reply goes to it, and starts nothing.
    asks = status("INPUT_REQUIRED", task="task-2", at=20, text="Which branch?",
                  message_id="m-ask")  # fmt: skip
    assert registered.push(asks).status_code == 200
    stub.answer({"jsonrpc": "2.0", "result": {"task": task_json("task-2", "TASK_STATE_WORKING")}})
    alice = person("alice", ops, approvers)
    form = {"text": "main", "message_id": "reply-12345", "reply_to": "task-2"}
    code, data = post(alice, f"/sessions/{session.pk}/messages/", **form)
    assert code == 200, data
    assert TaskStart.objects.get().started_by == User.objects.get(username="bob")
