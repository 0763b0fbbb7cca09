"""The read API: logged-in users only, sessions of agents they may see, stable names."""

from __future__ import annotations

import pytest

from tasks.models import Session
from tests.builders import approval, artifact, status
from tests.conftest import make_agent, push


@pytest.fixture
def team_agent(ops):
    return make_agent(team=ops, name="Ops agent")


@pytest.fixture
def open_agent(db):
    return make_agent(name="Open agent")


def send(client, agent, body):
    assert push(client, agent, body).status_code == 200


def test_anonymous_gets_401_json(client):
    for path in ("/api/sessions", "/api/sessions/1"):
        response = client.get(path)
        assert response.status_code == 401
        assert response.json()["error"] == "authentication required"


def test_list_shows_session_fields_with_stable_names(client, alice, open_agent):
    send(client, open_agent, status("WORKING", at=1))
    client.force_login(alice)
    [session] = client.get("/api/sessions").json()["sessions"]
    assert set(session) >= {"id", "agent", "contextId", "state", "needsHuman", "updatedAt"}
    assert session["agent"] == {"id": open_agent.agent.pk, "name": "Open agent"}
    assert (session["contextId"], session["state"], session["needsHuman"]) == (
        "ctx-1",
        "TASK_STATE_WORKING",
        False,
    )


def test_team_agents_sessions_are_hidden_from_outsiders(
    client, alice, charlie, team_agent, open_agent
):
    send(client, team_agent, status("WORKING", at=1, context="secret"))
    send(client, open_agent, status("WORKING", at=1, context="public"))
    client.force_login(charlie)
    contexts = [s["contextId"] for s in client.get("/api/sessions").json()["sessions"]]
    assert contexts == ["public"]
    secret = Session.objects.get(context_id="secret")
    assert client.get(f"/api/sessions/{secret.pk}").status_code == 404
    client.force_login(alice)
    contexts = sorted(s["contextId"] for s in client.get("/api/sessions").json()["sessions"])
    assert contexts == ["public", "secret"]
    assert client.get(f"/api/sessions/{secret.pk}").status_code == 200


def test_list_is_newest_first_and_attention_sort_puts_waiting_sessions_first(
    client, alice, open_agent
):
    send(
        client,
        open_agent,
        status("AUTH_REQUIRED", at=1, context="waiting", metadata=approval("i", "ok?")),
    )
    send(client, open_agent, status("WORKING", at=2, context="busy", task="t2"))
    client.force_login(alice)
    newest = [s["contextId"] for s in client.get("/api/sessions").json()["sessions"]]
    attention = [
        s["contextId"] for s in client.get("/api/sessions?sort=attention").json()["sessions"]
    ]
    assert newest == ["busy", "waiting"]
    assert attention == ["waiting", "busy"]


def test_filters_by_agent_and_state(client, alice, open_agent, team_agent):
    send(client, open_agent, status("WORKING", at=1, context="a"))
    send(client, team_agent, status("COMPLETED", at=1, context="b"))
    client.force_login(alice)
    by_agent = client.get(f"/api/sessions?agent={team_agent.agent.pk}").json()["sessions"]
    by_state = client.get("/api/sessions?state=TASK_STATE_WORKING").json()["sessions"]
    assert [s["contextId"] for s in by_agent] == ["b"]
    assert [s["contextId"] for s in by_state] == ["a"]


@pytest.mark.parametrize(
    "query",
    [
        "agent=abc",
        "state=working",
        "state=TASK_STATE_UNSPECIFIED",
        "sort=oldest",
        "limit=0",
        "limit=x",
    ],
)
def test_bad_filters_are_400_saying_what_is_wrong(client, alice, query):
    client.force_login(alice)
    response = client.get(f"/api/sessions?{query}")
    assert response.status_code == 400
    assert response.json()["detail"]


def test_detail_shows_tasks_interactions_artifacts_and_messages(client, alice, open_agent):
    files = {"kind": "report", "version": 3, "size": 10, "sha256": "b" * 64, "path": "out/r.md"}
    send(client, open_agent, status("WORKING", at=1, text="Reading"))
    send(client, open_agent, artifact("a1", "body", files=files, name="report"))
    send(
        client,
        open_agent,
        status("AUTH_REQUIRED", at=2, text="Deploy?", metadata=approval("i-1", "Deploy to prod?")),
    )
    client.force_login(alice)
    session_id = client.get("/api/sessions").json()["sessions"][0]["id"]
    data = client.get(f"/api/sessions/{session_id}").json()
    assert data["needsHuman"] is True
    assert data["tasks"] == [
        {
            "taskId": "task-1",
            "state": "TASK_STATE_AUTH_REQUIRED",
            "statusTimestamp": "2026-11-30T12:00:02Z",
            "telemetry": None,
        }
    ]
    assert data["interactions"] == [
        {
            "interactionId": "i-1",
            "taskId": "task-1",
            "kind": "approval",
            "prompt": "Deploy to prod?",
            "detail": None,
            "state": "open",
            "answer": None,
            "reason": None,
            "answeredBy": None,
            "answeredAt": None,
        }
    ]
    [art] = data["artifacts"]
    assert {
        k: art[k] for k in ("artifactId", "name", "version", "kind", "size", "sha256", "path")
    } == {
        "artifactId": "a1",
        "name": "report",
        "version": 3,
        "kind": "report",
        "size": 10,
        "sha256": "b" * 64,
        "path": "out/r.md",
    }
    assert art["complete"] is True
    assert data["agent"]["tier"] == "not known yet (Onlooker has not called it)"
    assert [(m["role"], m["text"], m["parts"]) for m in data["messages"]] == [
        ("ROLE_AGENT", "Progress card updated (rev 1)", []),
        ("ROLE_AGENT", "Deploy?", []),
    ]


def test_unknown_session_is_404_json(client, alice):
    client.force_login(alice)
    response = client.get("/api/sessions/999")
    assert response.status_code == 404
    assert response.json()["error"] == "not found"
