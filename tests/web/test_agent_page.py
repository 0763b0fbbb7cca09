"""`/agents/<id>/`: an agent's card, health and sessions for whoever may see it (team rules),
and "Refresh from the agent" / "Follow this task" for people who may answer, end to end with
a real a2a-sdk agent on loopback whose card can change."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import httpx
import pytest
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
)
from a2a.types import AgentCard
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from starlette.applications import Starlette

from tasks.answering import agent_card, agents, following
from tasks.answering.rules import AnswerError
from tasks.models import Agent, Delivery, PushEndpoint, Session, Task
from tasks.sessions import fragments
from tests.answering.test_a2a_peer import onlooker, wait_for  # noqa: F401 - fixtures
from tests.builders import status
from tests.conftest import make_agent, member, push
from tests.peers import approval_agent
from tests.peers.misbehaving_agent import Answer
from tests.processes import free_port

LOST = "http://127.0.0.1:9/a2a/push/lost/"  # the discard port: pushes there go nowhere


def text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def client_of(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def flash(response) -> str:
    """The page message a POST-redirect-GET left, read on the page it redirects to."""
    assert response.status_code == 302, response.content[:500]
    page = response.client.get(response["Location"]).content.decode()
    shown = re.search(r'<ul class="flash" role="status">(.*?)</ul>', page, re.S)
    assert shown, "no page message"
    return text(shown[1])


def page_words(client: Client, agent: Agent) -> str:
    return text(client.get(f"/agents/{agent.pk}/").content.decode())


# -- a real a2a-sdk agent whose card can change -------------------------------------------------


class CardAgent:
    """The approval peer's executor behind a2a-sdk's own handler, push configs and push sender,
    served by uvicorn in a thread; `card` overrides what its card says (name, description,
    push support) from the next read on."""

    def __init__(self) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.card: dict = {}
        card = approval_agent.agent_card(self.port)
        store = InMemoryPushNotificationConfigStore()
        self._client = httpx.AsyncClient(timeout=10, trust_env=False)
        handler = DefaultRequestHandler(
            agent_executor=approval_agent.ApprovalExecutor(),
            task_store=InMemoryTaskStore(),
            agent_card=card,
            push_config_store=store,
            push_sender=BasePushNotificationSender(httpx_client=self._client, config_store=store),
        )

        async def as_now(served: AgentCard) -> AgentCard:
            changed = AgentCard()
            changed.CopyFrom(served)
            if "name" in self.card:
                changed.name = self.card["name"]
            if "description" in self.card:
                changed.description = self.card["description"]
            if "push" in self.card:
                changed.capabilities.push_notifications = self.card["push"]
            return changed

        app = Starlette(
            routes=[
                *create_jsonrpc_routes(handler, rpc_url=approval_agent.RPC_PATH),
                *create_agent_card_routes(card, card_modifier=as_now),
            ]
        )
        self._served = approval_agent.ServedInThread(app, self.port)

    @property
    def card_url(self) -> str:
        return f"{self.base_url}/.well-known/agent-card.json"

    def rpc(self, method: str, params: dict) -> dict:
        body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
        answer = httpx.post(
            self.base_url + approval_agent.RPC_PATH,
            json=body,
            headers={"A2A-Version": "1.0"},
            timeout=10,
            trust_env=False,
        ).json()
        assert "error" not in answer, answer
        return answer["result"]

    def start_task(self, push_url: str = LOST, **auth) -> dict:
        """A task whose pushes go to `push_url` (by default nowhere), as a client other than
        Onlooker would start it; once it waits for the approval."""
        message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "Go"}]}
        config = {"id": f"other-{uuid.uuid4().hex[:8]}", "url": push_url, **auth}
        configuration = {"returnImmediately": True, "taskPushNotificationConfig": config}
        task = self.rpc("SendMessage", {"message": message, "configuration": configuration})
        self.wait_for_state(task["task"]["id"], "TASK_STATE_AUTH_REQUIRED")
        return task["task"]

    def approve(self, task: dict) -> None:
        message = approval_agent.approval_message(task)
        configuration = {"returnImmediately": True}
        self.rpc("SendMessage", {"message": message, "configuration": configuration})
        self.wait_for_state(task["id"], "TASK_STATE_COMPLETED")

    def wait_for_state(self, task_id: str, state: str) -> None:
        wait_for(
            lambda: self.rpc("GetTask", {"id": task_id})["status"]["state"] == state,
            f"the agent's task to be {state}",
        )

    def configs(self, task_id: str) -> list[dict]:
        return self.rpc("ListTaskPushNotificationConfigs", {"taskId": task_id}).get("configs", [])

    def stop(self) -> None:
        self._served.stop()


@pytest.fixture(autouse=True)
def direct_connections(monkeypatch):
    # httpx honours proxy variables; loopback servers must be reached directly.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def sdk_agent() -> Iterator[CardAgent]:
    agent = CardAgent()
    yield agent
    agent.stop()


@pytest.fixture
def ops_approver(ops, approvers) -> Client:
    return client_of(member("alice", ops, approvers))


def registered(sdk_agent: CardAgent, team: Group) -> Agent:
    agent = agents.register(sdk_agent.card_url).agent
    agent.team = team
    agent.save(update_fields=["team"])
    return agent


# -- the page and who sees it -------------------------------------------------------------------


def test_a_team_member_sees_the_agent_its_card_health_and_sessions(ops, client):
    registered_agent = make_agent(team=ops, name="deploy-bot")
    agent = registered_agent.agent
    agent.extensions = [approval_agent.INTERACTIONS, "https://example.test/other/v1"]
    agent.activated_extensions = [approval_agent.INTERACTIONS]
    agent.extensions_echoed_at = timezone.now()
    agent.description = "Deploys <b>things</b>"
    agent.skills = [{"name": "Deploy", "description": "Ships it", "tags": ["ops", "ci"]}]
    agent.last_error = "could not connect to the agent at http://agent.test/a2a/jsonrpc"
    agent.save()
    assert push(client, registered_agent, status("WORKING", at=1)).status_code == 200
    refused = client.post(
        registered_agent.path, b"{}", content_type="application/json", HTTP_AUTHORIZATION="Bearer x"
    )
    assert refused.status_code == 401

    response = client_of(member("bob", ops)).get(f"/agents/{agent.pk}/")

    assert response.status_code == 200
    html = response.content.decode()
    words = text(html)
    assert "deploy-bot" in words
    assert "Deploys &lt;b&gt;things&lt;/b&gt;" in html  # the agent's words, as text
    assert "Deploy : Ships it (ops, ci)" in words
    assert f"{approval_agent.INTERACTIONS} (interactions) · activated" in words
    assert "https://example.test/other/v1 · not activated" in words
    assert "could not connect to the agent" in words
    assert re.search(r"data-agent-last-push><time datetime=", html)
    assert "unauthenticated" in words  # refused in the last 24 hours
    session = Session.objects.get(agent=agent)
    assert f'href="/sessions/{session.pk}/"' in html
    # A viewer sees no buttons.
    assert "data-agent-actions" not in html and "Refresh from the agent" not in words


def test_someone_outside_the_team_gets_a_404(ops, db):
    agent = make_agent(team=ops).agent
    outsider = client_of(User.objects.create_user("mallory"))
    assert outsider.get(f"/agents/{agent.pk}/").status_code == 404
    assert outsider.post(f"/agents/{agent.pk}/refresh/").status_code == 404
    assert outsider.post(f"/agents/{agent.pk}/follow/", {"task_id": "t"}).status_code == 404


def test_an_agent_that_does_not_exist_is_a_404(ops_approver):
    assert ops_approver.get("/agents/999999/").status_code == 404
    assert ops_approver.post("/agents/999999/refresh/").status_code == 404
    assert ops_approver.post("/agents/999999/follow/", {"task_id": "t"}).status_code == 404


def test_anonymous_people_are_sent_to_log_in(db):
    agent = make_agent().agent
    for response in (
        Client().get(f"/agents/{agent.pk}/"),
        Client().post(f"/agents/{agent.pk}/refresh/"),
    ):
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")


def test_a_viewer_who_may_not_answer_is_refused_both_actions(ops):
    agent = make_agent(team=ops).agent
    agent.rpc_url = "http://127.0.0.1:9/never-called"
    agent.save()
    viewer = client_of(member("bob", ops))

    for action in ("refresh", "follow"):
        response = viewer.post(f"/agents/{agent.pk}/{action}/", {"task_id": "t"})
        assert response.status_code == 403
        assert "not call it" in text(response.content.decode())
    assert not PushEndpoint.objects.exclude(task_id="").exists()


def test_the_actions_need_the_pages_csrf_token(ops, approvers):
    agent = make_agent(team=ops).agent
    client = Client(enforce_csrf_checks=True)
    client.force_login(member("alice", ops, approvers))
    assert client.post(f"/agents/{agent.pk}/refresh/").status_code == 403
    page = client.get(f"/agents/{agent.pk}/").content.decode()
    assert page.count("csrfmiddlewaretoken") >= 2  # both forms carry it


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b"task_id=a%00b", "no control"),
        (b"task_id=" + b"x" * 10_000, "at most 200 characters"),
        (b"task_id=%E2%80%AEevil", "no control"),  # a bidi override
        (b"task_id=%20", "Give the id"),
        (b"", "Give the id"),
        # Not UTF-8 (a lone surrogate as UTF-8 would spell it): read as replacement
        # characters, an id the agent is asked about, which it cannot be reached for.
        (b"task_id=%ED%A0%80", "did not take the push config"),
    ],
)
def test_a_hostile_task_id_is_refused_with_a_message(ops, ops_approver, raw, said):
    agent = make_agent(team=ops).agent
    agent.push_notifications = True
    agent.rpc_url = "http://127.0.0.1:9/never-answers"
    agent.save()

    response = ops_approver.post(
        f"/agents/{agent.pk}/follow/", raw, content_type="application/x-www-form-urlencoded"
    )

    assert said in flash(response)
    assert not PushEndpoint.objects.exclude(task_id="").exists()


def test_a_lone_surrogate_or_nul_in_a_task_id_is_refused_before_any_call():
    for hostile in ("\ud800", "a\x00b", "\x1b[31m"):
        with pytest.raises(AnswerError, match="no control"):
            following.parse_task_id(hostile)
    with pytest.raises(AnswerError, match="must be text"):
        following.parse_task_id(["t"])


def test_an_agent_id_that_is_not_a_number_is_a_404(ops_approver):
    assert ops_approver.get("/agents/%ED%A0%80/").status_code == 404
    assert ops_approver.get("/agents/1%00/").status_code == 404


# -- agent names lead to the page ---------------------------------------------------------------


def test_the_session_page_and_the_tile_link_the_agent_name(ops, client):
    registered_agent = make_agent(team=ops, name="deploy-bot")
    assert push(client, registered_agent, status("WORKING", at=1)).status_code == 200
    session = Session.objects.get()
    bob = client_of(member("bob", ops))
    link = f'href="/agents/{registered_agent.agent.pk}/"'
    assert link in bob.get(f"/sessions/{session.pk}/").content.decode()
    assert link in bob.get("/").content.decode()
    assert link in bob.get("/settings/").content.decode()


# -- "what if this fails halfway", on a scriptable agent --------------------------------------


@pytest.fixture
def stub_agent(ops, agent_stub) -> Agent:
    agent = make_agent(team=ops).agent
    agent.rpc_url, agent.push_notifications = agent_stub.rpc_url, True
    agent.save()
    return agent


def test_a_config_the_agent_did_not_take_leaves_no_endpoint(stub_agent, agent_stub, ops_approver):
    agent_stub.answer(b"overloaded", status=500, content_type="text/plain")

    words = flash(ops_approver.post(f"/agents/{stub_agent.pk}/follow/", {"task_id": "t-1"}))

    assert "The agent did not take the push config: the agent answered HTTP 500" in words
    assert not PushEndpoint.objects.filter(task_id="t-1").exists()
    created = agent_stub.calls("CreateTaskPushNotificationConfig")
    # It may have kept the config all the same: it is asked to drop it.
    [deleted] = agent_stub.calls("DeleteTaskPushNotificationConfig")
    assert deleted == {"taskId": "t-1", "id": created[0]["id"]}


def test_a_task_that_cannot_be_fetched_after_the_config_is_still_followed(
    stub_agent, agent_stub, ops_approver
):
    def choose(request) -> Answer:
        method = request.json()["method"]
        if method == "CreateTaskPushNotificationConfig":
            return Answer(body={"jsonrpc": "2.0", "result": request.json()["params"]})
        error = {"code": -32601, "message": "Method not found"}
        if method == "GetTask":
            error = {"code": -32603, "message": "<b>database</b> is down"}
        return Answer(body={"jsonrpc": "2.0", "error": error})

    agent_stub.answer_each(choose)

    words = flash(ops_approver.post(f"/agents/{stub_agent.pk}/follow/", {"task_id": "t-2"}))

    assert (
        "Following task “t-2”; fetching it failed (the agent answered an error: database is down)"
        in words
    )
    assert PushEndpoint.objects.filter(agent=stub_agent, task_id="t-2", active=True).exists()
    # The agent cannot list its configs: Onlooker's own record refuses a second follower.
    again = flash(ops_approver.post(f"/agents/{stub_agent.pk}/follow/", {"task_id": "t-2"}))
    assert again == "Onlooker already follows task “t-2”."
    assert len(agent_stub.calls("CreateTaskPushNotificationConfig")) == 1


# -- against a real a2a-sdk agent ---------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_refresh_rereads_a_changed_card_and_pulls_a_tasks_new_state(sdk_agent, ops, approvers):
    agent = registered(sdk_agent, ops)
    assert agent.description.startswith("Drafts release notes")
    assert agent.skills[0]["name"] == "Publish release notes"
    task = sdk_agent.start_task()
    sdk_agent.card = {"name": "Renamed peer", "description": "Now <i>also</i> writes changelogs"}
    approver = client_of(member("alice", ops, approvers))

    words = flash(approver.post(f"/agents/{agent.pk}/refresh/"))

    assert "Refreshed: card re-read, 1 task listed, 1 fetched, 1 applied" in words
    agent.refresh_from_db()
    assert (agent.card_name, agent.description) == ("Renamed peer", "Now also writes changelogs")
    shown = page_words(approver, agent)
    assert "Its card calls it Renamed peer" in shown and "Now also writes changelogs" in shown
    # a2a-sdk echoes no A2A-Extensions header: the tier is what its card declares.
    assert "interactions/v1 (interactions) · not echoed (its answers name no extensions)" in shown
    assert Task.objects.get(task_id=task["id"]).state == "TASK_STATE_AUTH_REQUIRED"

    sdk_agent.approve(task)
    words = flash(approver.post(f"/agents/{agent.pk}/refresh/"))

    assert "1 fetched, 1 applied" in words
    assert Task.objects.get(task_id=task["id"]).state == "TASK_STATE_COMPLETED"
    assert agent.name == "Approval peer"  # the name people know it by stays


@pytest.mark.django_db(transaction=True)
def test_refresh_says_what_failed_when_the_agent_is_down(sdk_agent, ops, approvers):
    agent = registered(sdk_agent, ops)
    sdk_agent.stop()
    approver = client_of(member("alice", ops, approvers))

    words = flash(approver.post(f"/agents/{agent.pk}/refresh/"))

    assert words.startswith("Refresh failed: could not connect to the agent at http://127.0.0.1")
    assert "Last error calling it could not reach" in page_words(approver, agent)


@pytest.mark.django_db(transaction=True)
def test_follow_a_task_onlooker_did_not_start_and_see_its_later_pushes(
    sdk_agent,
    onlooker,  # noqa: F811 - pushes reach the live server
    ops,
    approvers,
):
    agent = registered(sdk_agent, ops)
    task = sdk_agent.start_task()
    approver = client_of(member("alice", ops, approvers))

    words = flash(approver.post(f"/agents/{agent.pk}/follow/", {"task_id": task["id"]}))

    assert f"Following task “{task['id']}”: fetched" in words
    endpoint = PushEndpoint.objects.get(agent=agent, task_id=task["id"], active=True)
    assert endpoint.push_url in [config["url"] for config in sdk_agent.configs(task["id"])]
    row = Task.objects.get(agent=agent, task_id=task["id"])
    assert row.state == "TASK_STATE_AUTH_REQUIRED"  # shown at once, from GetTask
    page = approver.get(f"/agents/{agent.pk}/").content.decode()
    assert f'href="/sessions/{row.session_id}/"' in page

    sdk_agent.approve(task)

    wait_for(
        lambda: Task.objects.get(pk=row.pk).state == "TASK_STATE_COMPLETED",
        "the agent's push to be applied",
    )
    assert Delivery.objects.filter(endpoint=endpoint, outcome="applied").exists()
    session_page = text(approver.get(f"/sessions/{row.session_id}/").content.decode())
    assert "Published the release notes" in session_page

    again = flash(approver.post(f"/agents/{agent.pk}/follow/", {"task_id": task["id"]}))
    assert "already follows" in again
    assert PushEndpoint.objects.filter(agent=agent, task_id=task["id"]).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_task_onlooker_already_gets_pushes_for_is_not_followed_twice(sdk_agent, ops, approvers):
    agent = registered(sdk_agent, ops)
    own = agent.endpoints.get()
    task = sdk_agent.start_task(own.push_url)
    approver = client_of(member("alice", ops, approvers))

    words = flash(approver.post(f"/agents/{agent.pk}/follow/", {"task_id": task["id"]}))

    assert "already follows" in words and "pushes it here" in words
    assert not PushEndpoint.objects.exclude(task_id="").exists()


@pytest.mark.django_db(transaction=True)
def test_following_a_task_the_agent_does_not_know_leaves_no_endpoint(sdk_agent, ops, approvers):
    agent = registered(sdk_agent, ops)
    approver = client_of(member("alice", ops, approvers))
    endpoints = PushEndpoint.objects.count()

    words = flash(approver.post(f"/agents/{agent.pk}/follow/", {"task_id": "no-such-task"}))

    assert "The agent does not know task “no-such-task”: nothing is followed" in words
    assert PushEndpoint.objects.count() == endpoints


@pytest.mark.django_db(transaction=True)
def test_an_agent_whose_card_has_no_push_is_not_asked_to_push(sdk_agent, ops, approvers):
    sdk_agent.card = {"push": False}
    agent = registered(sdk_agent, ops)
    approver = client_of(member("alice", ops, approvers))

    words = flash(approver.post(f"/agents/{agent.pk}/follow/", {"task_id": "anything"}))

    assert "sends no push notifications" in words
    assert not PushEndpoint.objects.exclude(task_id="").exists()


@pytest.mark.django_db(transaction=True)
def test_card_text_with_markup_is_shown_as_text(sdk_agent, ops, approvers):
    sdk_agent.card = {
        "name": "<script>alert(1)</script>Peer",
        "description": '<img src=x onerror="alert(1)">Plain &amp; simple\u202e',
    }
    agent = registered(sdk_agent, ops)
    html = client_of(member("bob", ops)).get(f"/agents/{agent.pk}/").content.decode()
    assert "onerror" not in html and "<script>alert" not in html
    assert "alert(1) Peer" in html  # the name, tags dropped
    assert "Plain &amp; simple" in html
    assert "\u202e" not in html


def test_a_cards_skills_are_kept_as_bounded_plain_text():
    interface = {"url": "http://a.test/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    card = {
        "name": "a",
        "supportedInterfaces": [interface],
        "description": "x" * 100_000,
        "skills": [
            1,
            {"id": "only-id", "tags": "not a list"},
            {
                "name": "<b>Bold</b>",
                "description": ["no"],
                "tags": ["t\x1b[31m", 5, "y" * 500],
                "examples": ["<i>Ship</i> it\u202e", 7, "", "two", "three", "four"],
            },
            *({"name": f"s{i}"} for i in range(200)),
        ],
    }
    parsed = agent_card.parse_card(card, "http://a.test/card.json")
    assert len(parsed.description) == agent_card.MAX_DESCRIPTION
    assert parsed.skills[0] == {"name": "only-id", "description": "", "tags": [], "examples": []}
    assert parsed.skills[1] == {
        "name": "Bold",
        "description": "",
        "tags": ["t", "y" * 59 + "…"],
        "examples": ["Ship it", "two", "three"],  # three at most, plain text, empties left out
    }
    assert len(parsed.skills) == agent_card.MAX_SKILLS - 1  # the first entry was no skill
    for hostile in ({"skills": "x"}, {"skills": None}, {"description": 5}):
        parsed = agent_card.parse_card({**card, **hostile}, "http://a.test/card.json")
        assert isinstance(parsed.skills, list) and isinstance(parsed.description, str)


def test_the_page_costs_the_same_queries_for_3_or_30_sessions(ops, django_assert_max_num_queries):
    agent = make_agent(team=ops).agent
    bob = client_of(member("bob", ops))

    def add_sessions(count: int) -> None:
        for _ in range(count):
            session = Session.objects.create(
                agent=agent, context_id=uuid.uuid4().hex, updated_at=timezone.now()
            )
            fragments.publish([fragments.Changed(session, agent.team_id)])

    add_sessions(3)
    with CaptureQueriesContext(connection) as few:
        assert bob.get(f"/agents/{agent.pk}/").status_code == 200
    add_sessions(27)
    with django_assert_max_num_queries(len(few)):
        page = bob.get(f"/agents/{agent.pk}/").content.decode()
    assert page.count('href="/sessions/') >= 30
