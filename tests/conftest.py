"""Shared fixtures: registered agents (one signing, one with push tokens) and a `push`
helper that POSTs a body to the real receiver view with real credentials."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from channels.layers import channel_layers
from django.contrib.auth.models import Group, Permission, User
from django.db import connection
from django.test import Client
from standardwebhooks import Webhook

from tasks.answering.agents import new_endpoint, new_signing_secret
from tasks.live.broadcast import coalescer, notices
from tasks.models import Agent, PushEndpoint, Session
from tasks.pushes import refusals, spool
from tasks.wire import profile
from tests.builders import status
from tests.peers.misbehaving_agent import ACCEPTED, MisbehavingAgent

# The `database` fixture (a database that refuses statements) for every test module.
pytest_plugins = ["tests.refusing"]

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
SLOW_TIMEOUT = 1200  # seconds; every other test has pyproject.toml's `timeout`


@pytest.hookimpl(tryfirst=True)  # before `-m 'not slow'` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On PostgreSQL the real-browser tests join the slow set: what a person sees does not
    depend on the database, the README's test command already runs them on the embedded
    default, and .ci/run runs them again on PostgreSQL + Redis with the other slow checks.
    Run twice in the README's command they took it past its four minutes."""
    from django.conf import settings

    on_sqlite = settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"
    for item in items:
        if not on_sqlite and item.nodeid.startswith("tests/browser/"):
            item.add_marker(pytest.mark.slow)
        # A test that hangs fails at its timeout (pyproject.toml) with every thread's stack,
        # instead of holding CI until CI gives up; the long checks have more time.
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))


@dataclass
class RegisteredAgent:
    agent: Agent
    endpoint: PushEndpoint
    token: str
    bearer: str
    secret: str | None

    @property
    def path(self) -> str:
        return f"/a2a/push/{self.endpoint.public_id}/"


def make_agent(*, signing: bool = False, team=None, name: str = "Builder") -> RegisteredAgent:
    secret = new_signing_secret() if signing else None
    agent = Agent.objects.create(
        name=name,
        card_url="http://agent.test/.well-known/agent-card.json",
        rpc_url="http://agent.test/a2a/jsonrpc",
        protocol_version="1.0",
        signing_secret=secret or "",
        team=team,
    )
    endpoint, token, bearer = new_endpoint(agent)
    return RegisteredAgent(agent, endpoint, token, bearer, secret)


@pytest.fixture(autouse=True)
def quiet_broadcasts():
    # Session ids repeat between tests: a message held back for one test's session must
    # not be delivered into the next test.
    coalescer.clear()
    notices.clear()
    refusals.counter.clear()
    yield
    coalescer.clear()
    notices.clear()
    refusals.counter.clear()


_spools: dict[str, sqlite3.Connection] = {}


@pytest.fixture(autouse=True)
def empty_spool():
    """The spool file (SQLite, tasks/pushes/spool.py) is not the test database: the database is
    emptied after each test, and so is the spool, so no test takes another's pushes."""
    yield
    file = spool.path()
    if file is None or not os.path.exists(file):
        return
    if file not in _spools:
        _spools[file] = sqlite3.connect(file, isolation_level=None)
    opened = _spools[file]
    with contextlib.suppress(sqlite3.OperationalError):  # no table yet
        if opened.execute("SELECT EXISTS (SELECT 1 FROM push)").fetchone()[0]:
            opened.execute("DELETE FROM push")


@pytest.fixture
def fresh_channel_layers():
    """Channels keeps a layer per alias for the process; a test that changes the layer
    settings, or must not see another test's groups, starts from none."""
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


@pytest.fixture
def postgresql_pool():
    """The PostgreSQL connection pool (the test skipped on SQLite, whose connections are kept
    anyway and not pooled)."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite connections are kept anyway (CONN_MAX_AGE=None), and not pooled")
    return connection.pool


@pytest.fixture
def ops(db) -> Group:
    return Group.objects.create(name="ops")


@pytest.fixture
def alice(ops) -> User:
    """On the ops team."""
    user = User.objects.create_user("alice")
    user.groups.add(ops)
    return user


@pytest.fixture
def approvers(db) -> Group:
    """A group that may answer what agents wait for (membership of a team still decides
    which agents)."""
    group = Group.objects.create(name="approvers")
    group.permissions.add(Permission.objects.get(codename="answer_interaction"))
    return group


def member(name: str, *groups: Group) -> User:
    user = User.objects.create_user(name)
    user.groups.add(*groups)
    return user


@pytest.fixture
def charlie(db) -> User:
    """On no team: sees only agents without one."""
    return User.objects.create_user("charlie")


@pytest.fixture
def token_agent(db) -> RegisteredAgent:
    return make_agent()


@pytest.fixture
def signed_agent(db) -> RegisteredAgent:
    return make_agent(signing=True, name="Signer")


def sign_headers(
    secret: str, body: bytes, *, msg_id: str | None = None, at: datetime | None = None
):
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    at = at or datetime.now(UTC)
    signature = Webhook(secret).sign(msg_id, at, body.decode())
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature,
    }


def encode(body) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def push(client, registered: RegisteredAgent, body, *, msg_id: str | None = None, **headers):
    """POST a push the way a well-behaved agent would: signed if the agent signs, else with
    its bearer credentials. Extra headers (HTTP_…) override."""
    raw = encode(body)
    extra = {}
    if registered.secret:
        for name, value in sign_headers(registered.secret, raw, msg_id=msg_id).items():
            extra["HTTP_" + name.upper().replace("-", "_")] = value
    else:
        extra["HTTP_AUTHORIZATION"] = f"Bearer {registered.bearer}"
        if msg_id:
            extra["HTTP_WEBHOOK_ID"] = msg_id
    extra.update(headers)
    content_type = extra.pop("content_type", "application/json")
    return client.post(registered.path, raw, content_type=content_type, **extra)


@pytest.fixture
def agent_stub():
    """A loopback agent that takes every message (SendMessage answers ACCEPTED) and records
    the calls it gets."""
    with MisbehavingAgent() as stub:
        stub.answer(ACCEPTED)
        yield stub


# -- agents on the scriptable stub (tests/peers/misbehaving_agent.py) --------------------------


@pytest.fixture
def team_agent(ops, agent_stub):
    """An agent of team ops on the stub, speaking the whole profile."""
    registered = make_agent(team=ops)
    registered.agent.rpc_url = agent_stub.rpc_url
    registered.agent.extensions = list(profile.EXTENSIONS)
    registered.agent.save()
    return registered


@pytest.fixture
def approver(ops, approvers) -> Client:
    """alice, of team ops, who may answer, logged in."""
    client = Client()
    client.force_login(member("alice", ops, approvers))
    return client


@pytest.fixture
def stub_session(ops):
    """A session whose agent is a scriptable loopback stub of its own, with one working task:
    (stub, session, registered agent)."""
    with MisbehavingAgent() as stub:
        registered = make_agent(team=ops)
        registered.agent.rpc_url = stub.rpc_url
        registered.agent.extensions = list(profile.EXTENSIONS)
        registered.agent.save()
        registered.push = lambda body: push(Client(), registered, body)
        assert registered.push(status("WORKING", at=1)).status_code == 200
        yield stub, Session.objects.get(), registered
