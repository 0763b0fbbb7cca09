"""Each person answers as themselves (issue 32): against a real a2a-sdk agent that knows who
calls it (tests/peers/subject_agent.py), every answer, message and cancel a person sends
carries their own credential, in the scheme the agent takes; a person without one goes with
the agent's shared credential, unless the agent is `per_person`: then they are refused before
anything is stored or sent. Through the real views, with Onlooker as pytest-django's live
server receiving the agent's pushes."""

from __future__ import annotations

import re
import uuid

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tasks.models import Agent, Interaction, PersonalCredential, PushEndpoint, Session, Task
from tests.answering.test_a2a_peer import add_agent, onlooker, wait_for  # noqa: F401 - fixture
from tests.conftest import member
from tests.peers.subject_agent import Call, SubjectAgent
from tests.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)

SHARED = "onlooker-shared-token"
NEEDS_YOURS = "takes answers only with your own credential"


@pytest.fixture
def start_subject_agent():
    started: list[SubjectAgent] = []

    def start(scheme: str = "bearer", **tokens: str) -> SubjectAgent:
        tokens = {"alice-token": "alice", SHARED: "onlooker", **tokens}
        peer = SubjectAgent(free_port(), tokens=tokens, scheme=scheme)
        started.append(peer)
        return peer

    yield start
    for peer in started:
        peer.stop()


@pytest.fixture
def people(ops, approvers) -> dict[str, Client]:
    clients = {}
    for name in ("alice", "bob"):
        clients[name] = Client()
        clients[name].force_login(member(name, ops, approvers))
    return clients


def register(peer: SubjectAgent, *, credential: str = f"Bearer {SHARED}") -> Agent:
    registration = add_agent(peer.card_url, "--team", "ops", "--credential", credential)
    return Agent.objects.get(pk=registration["agent"])


def save_token(client: Client, agent: Agent, token: str):
    return client.post(f"/settings/credentials/{agent.pk}/", {"token": token})


def post(client: Client, url: str, **form) -> tuple[int, dict]:
    response = client.post(url, form, HTTP_ACCEPT="application/json")
    return response.status_code, response.json()


def start_session(client: Client, agent: Agent) -> tuple[int, dict]:
    return post(
        client, "/sessions/new/", agent=str(agent.pk), text="Write the release notes",
        message_id=uuid.uuid4().hex,
    )  # fmt: skip


def approval_waiting(peer: SubjectAgent, session_pk: int) -> Interaction:
    def found() -> Interaction | None:
        return Interaction.objects.filter(
            task__session_id=session_pk, state=Interaction.State.OPEN
        ).first()

    return wait_for(found, "the agent to ask for an approval", lambda: repr(peer.calls))


def task_state(session_pk: int, state: str) -> Task:
    return wait_for(
        lambda: Task.objects.filter(session_id=session_pk, state=state).first(),
        f"a task of the session to reach {state}",
    )


def last(peer: SubjectAgent, method: str) -> Call:
    return peer.calls_of(method)[-1]


def test_alice_answers_with_her_credential_and_bob_without_one_with_the_shared_one(
    onlooker,  # noqa: F811 - a fixture imported from test_a2a_peer
    start_subject_agent,
    people,
):
    peer = start_subject_agent()
    agent = register(peer)
    assert save_token(people["alice"], agent, "alice-token").status_code == 302

    code, started = start_session(people["alice"], agent)
    assert code == 200, started
    assert last(peer, "SendMessage") == Call("SendMessage", "Bearer alice-token", "alice")
    # Her task's push config is hers at the agent: ending it must go out as her.
    [endpoint] = PushEndpoint.objects.filter(agent=agent, task_id__gt="")
    assert endpoint.created_for.username == "alice"

    interaction = approval_waiting(peer, started["session"])
    code, data = post(
        people["alice"], f"/interactions/{interaction.pk}/answer/", decision="approve"
    )
    assert code == 200, data
    assert last(peer, "SendMessage") == Call("SendMessage", "Bearer alice-token", "alice")
    task_state(started["session"], "TASK_STATE_COMPLETED")  # the agent knew the task as hers

    code, started = start_session(people["bob"], agent)
    assert code == 200, started
    assert last(peer, "SendMessage") == Call("SendMessage", f"Bearer {SHARED}", "onlooker")
    bobs = PushEndpoint.objects.filter(agent=agent, task_id__gt="").exclude(pk=endpoint.pk).get()
    assert bobs.created_for is None
    interaction = approval_waiting(peer, started["session"])
    code, data = post(people["bob"], f"/interactions/{interaction.pk}/answer/", decision="deny")
    assert code == 200, data
    assert last(peer, "SendMessage") == Call("SendMessage", f"Bearer {SHARED}", "onlooker")
    assert {call.subject for call in peer.calls} == {"alice", "onlooker"}


def test_a_per_person_agent_refuses_bob_before_anything_is_stored_or_sent(
    onlooker,  # noqa: F811
    start_subject_agent,
    people,
):
    peer = start_subject_agent()
    agent = register(peer)
    code, started = start_session(people["bob"], agent)  # while the shared one still stands in
    assert code == 200, started
    interaction = approval_waiting(peer, started["session"])
    session = Session.objects.get(pk=started["session"])
    task = interaction.task
    Agent.objects.filter(pk=agent.pk).update(per_person=True)
    calls, endpoints = len(peer.calls), PushEndpoint.objects.count()

    code, data = post(people["bob"], f"/interactions/{interaction.pk}/answer/", decision="approve")
    assert code == 403 and NEEDS_YOURS in data["detail"], data
    code, data = post(
        people["bob"], f"/sessions/{session.pk}/messages/", text="Go on", message_id="0123456789ab"
    )
    assert code == 403 and NEEDS_YOURS in data["detail"], data
    code, data = post(
        people["bob"], f"/sessions/{session.pk}/cancel/", task_id=task.task_id, confirm="yes"
    )
    assert code == 403 and NEEDS_YOURS in data["detail"], data
    code, data = start_session(people["bob"], agent)
    assert code == 403 and NEEDS_YOURS in data["detail"], data

    assert len(peer.calls) == calls  # nothing reached the agent
    assert PushEndpoint.objects.count() == endpoints  # no push config made for nothing
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answered_by, interaction.answer) == ("open", None, None)
    # The page shows him the question and where to connect, not the buttons.
    page = people["bob"].get(f"/sessions/{session.pk}/").content.decode()
    link = f'<a href="/settings/#credential-{agent.pk}">Connect your credential for {agent.name}'
    assert link in page and 'value="approve"' not in page
    assert interaction.prompt[:40] in page


def test_alices_cancel_and_messages_carry_her_credential_on_a_per_person_agent(
    onlooker,  # noqa: F811
    start_subject_agent,
    people,
):
    peer = start_subject_agent()
    agent = register(peer)
    Agent.objects.filter(pk=agent.pk).update(per_person=True)
    assert save_token(people["alice"], agent, "alice-token").status_code == 302
    code, started = start_session(people["alice"], agent)
    assert code == 200, started
    interaction = approval_waiting(peer, started["session"])
    page = people["alice"].get(f"/sessions/{started['session']}/").content.decode()
    assert 'value="approve"' in page and "Connect your credential" not in page

    code, data = post(
        people["alice"], f"/sessions/{started['session']}/cancel/",
        task_id=interaction.task.task_id, confirm="yes",
    )  # fmt: skip
    assert code == 200 and data["detail"] == "The agent says the task is now canceled.", data
    assert last(peer, "CancelTask") == Call("CancelTask", "Bearer alice-token", "alice")
    assert {call.subject for call in peer.calls} == {"alice"}  # never the shared credential


def test_an_api_key_agent_gets_alices_token_as_given_in_its_header(
    onlooker,  # noqa: F811
    start_subject_agent,
    people,
):
    peer = start_subject_agent("api_key")
    # The card declares an API key in X-API-Key: the shared credential is the key alone.
    agent = register(peer, credential=SHARED)
    assert agent.auth_scheme == {"kind": "api_key", "header": "X-API-Key"}
    assert save_token(people["alice"], agent, "alice-token").status_code == 302

    code, started = start_session(people["alice"], agent)
    assert code == 200, started
    assert last(peer, "SendMessage") == Call("SendMessage", "alice-token", "alice")
    interaction = approval_waiting(peer, started["session"])
    code, data = post(
        people["alice"], f"/interactions/{interaction.pk}/answer/", decision="approve"
    )
    assert code == 200, data
    assert last(peer, "SendMessage") == Call("SendMessage", "alice-token", "alice")
    code, started = start_session(people["bob"], agent)
    assert code == 200 and last(peer, "SendMessage") == Call("SendMessage", SHARED, "onlooker")


@pytest.mark.parametrize(
    ("token", "said"),
    [
        ("", "must not be empty"),
        ("a" * 100_000, "at most 4096"),
        ("alice-token\r\nX-Admin: yes", "no line breaks"),
    ],
    ids=["empty", "100-kB", "newline"],
)
def test_a_hostile_token_is_refused_clearly_and_nothing_is_stored(
    onlooker,  # noqa: F811
    start_subject_agent,
    people,
    token,
    said,
):
    peer = start_subject_agent()
    agent = register(peer)
    response = save_token(people["alice"], agent, token)
    assert response.status_code == 400
    words = " ".join(re.sub(r"<[^>]+>", " ", response.content.decode()).split())
    assert said in words and "Nothing was saved." in words
    assert not PersonalCredential.objects.exists()
    # Nothing of it reaches the agent either: her next call goes with the shared credential.
    code, _ = start_session(people["alice"], agent)
    assert code == 200 and last(peer, "SendMessage").subject == "onlooker"
    assert User.objects.filter(username="alice").exists()


def test_a_task_the_agent_shows_only_its_starter_is_not_taken_for_forgotten_when_bob_answers(
    onlooker,  # noqa: F811 - a fixture imported from test_a2a_peer
    start_subject_agent,
    people,
):
    """An agent scoping tasks per subject answers bob's own credential "task not found" for
    alice's task: bob is told the task is not his to act on, the question stays open for
    everyone without a "forgotten" mark (no dismissal offered), and alice still answers."""
    peer = start_subject_agent(**{"bob-token": "bob"})
    agent = register(peer)
    assert save_token(people["alice"], agent, "alice-token").status_code == 302
    assert save_token(people["bob"], agent, "bob-token").status_code == 302
    code, started = start_session(people["alice"], agent)
    assert code == 200, started
    interaction = approval_waiting(peer, started["session"])

    code, data = post(people["bob"], f"/interactions/{interaction.pk}/answer/", decision="approve")
    assert code == 502, data
    assert "does not know this task under your own credential" in data["detail"]
    assert last(peer, "SendMessage").subject == "bob"
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.OPEN
    assert interaction.forgotten_round is None

    code, data = post(
        people["alice"], f"/interactions/{interaction.pk}/answer/", decision="approve"
    )
    assert code == 200, data
    task_state(started["session"], "TASK_STATE_COMPLETED")
