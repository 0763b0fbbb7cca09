"""One team's dead receivers never delay another team's channel: each team's channels hold at
most their share of the sender's workers (tasks/notify/shares.py), and teams take turns for
the free ones.

Team A has ten webhook channels whose receivers hang (loopback listeners that take the
connection and never answer: each send waits out the sender's read timeout, made 3 s here);
team B has one healthy channel. Before shares, A's sends held all eight workers and B's
event waited for one to come free (9.6 s with the 10 s timeout, issue 29).

These commit for real (`transaction=True`): the sender's workers have connections of their
own.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections import Counter

import pytest
from django.contrib.auth.models import Group
from django.db import connections
from django.test import Client

from tasks.models.notify import Notification
from tasks.notify import sender, sending, shares
from tasks.notify.channels import add
from tests.builders import approval, status
from tests.conftest import make_agent, push
from tests.peers.misbehaving_agent import MisbehavingAgent

pytestmark = pytest.mark.django_db(transaction=True)

HANGING = 10
READ_TIMEOUT = 3.0
# B's event must arrive well within A's timeout: it never waits for one of A's workers.
PROMPTLY = 1.5


@pytest.fixture
def short_timeout(monkeypatch):
    monkeypatch.setattr(sending, "TIMEOUT", sending.httpx.Timeout(READ_TIMEOUT, connect=1.0))


class Hanging:
    """A loopback listener that takes connections (at most `most`: its backlog holds the
    rest) and never answers; closed, it hangs up on all of them."""

    def __init__(self, most: int = 4) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0), backlog=16)
        self.socket.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}/hook"
        self.held: list[socket.socket] = []
        self._most = most
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            if len(self.held) >= self._most:
                time.sleep(0.05)
                continue
            try:
                self.held.append(self.socket.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    def close(self) -> None:
        if self._closing.is_set():
            return
        self._closing.set()
        self._thread.join(2)
        for held in self.held:
            held.close()
        self.socket.close()


@pytest.fixture
def hanging():
    listeners = [Hanging() for _ in range(HANGING)]
    yield listeners
    for listener in listeners:
        listener.close()


@pytest.fixture
def healthy():
    with MisbehavingAgent() as peer:
        peer.answer(b"ok", content_type="text/plain")
        yield peer


@pytest.fixture
def teams(db, hanging, healthy):
    """Team A's agent and ten hanging channels, team B's agent and one healthy channel (all
    on loopback: they allow a private address)."""
    a, b = Group.objects.create(name="a"), Group.objects.create(name="b")
    for listener in hanging:  # A's first: handed out in order, they would take every worker
        add("a", "webhook", listener.url, allow_private=True)
    add("b", "webhook", healthy.base_url + "/hook", allow_private=True)
    return make_agent(team=a, signing=True, name="a-bot"), make_agent(team=b, signing=True)


def hang_up(listeners: list[Hanging]) -> None:
    for listener in listeners:
        listener.close()


def ask(registered, n: int = 1) -> None:
    body = status("AUTH_REQUIRED", task=f"task-{n}", at=n, metadata=approval(f"i-{n}", "Ship?"))
    assert push(Client(), registered, body, msg_id=f"push-{uuid.uuid4().hex}").status_code == 200


def in_flight(team: str) -> int:
    return Notification.objects.filter(
        channel__team__name=team, claimed_until__isnull=False, state="pending"
    ).count()


def wait_for(check, timeout: float) -> float:
    """Seconds until `check()` held; fails after `timeout`."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, "not in time"
        time.sleep(0.01)
    return time.monotonic() - started


def test_a_teams_hanging_receivers_do_not_delay_another_teams_channel(
    clock, short_timeout, teams, hanging, healthy
):
    a_bot, b_bot = teams
    worker = sender.Background(poll_seconds=0.05)
    worker.start()
    try:
        ask(a_bot)
        # A's sends are under way and hanging before B has anything to send.
        wait_for(lambda: in_flight("a") >= 2, timeout=2.0)
        time.sleep(0.2)

        ask(b_bot, n=2)
        took = wait_for(lambda: healthy.requests, timeout=READ_TIMEOUT + 2)

        assert took < PROMPTLY, f"team B's event waited {took:.2f} s for team A's receivers"
        # A's dead receivers held only A's share.
        assert in_flight("a") <= sender.TEAM_WORKERS
    finally:
        hang_up(hanging)  # A's sends in flight end now, rather than at their timeout
        worker.stop(timeout=READ_TIMEOUT + 3)
    assert not worker.running


def test_sending_once_reaches_another_teams_channel_while_one_teams_receivers_hang(
    clock, short_timeout, teams, hanging, healthy
):
    a_bot, b_bot = teams
    ask(a_bot)
    ask(b_bot, n=2)  # both teams' events due at once; A's channels were made first
    done = threading.Event()

    def send_due() -> None:
        try:
            sender.send_due()
        finally:
            connections.close_all()
            done.set()

    threading.Thread(target=send_due, daemon=True).start()
    took = wait_for(lambda: healthy.requests, timeout=READ_TIMEOUT + 2)

    assert took < PROMPTLY, f"team B's event waited {took:.2f} s for team A's receivers"
    assert in_flight("a") <= sender.TEAM_WORKERS
    # A's receivers die outright: the rest of A's channels are still tried, none left out.
    hang_up(hanging)
    assert done.wait(READ_TIMEOUT + 5)
    assert Notification.objects.filter(channel__team__name="a", attempts=1).count() == HANGING


# -- the share itself ------------------------------------------------------------------------


def due(*pairs: tuple[int, int]) -> list[shares.Due]:
    return [shares.Due(channel, team) for channel, team in pairs]


def test_a_team_past_its_share_waits_while_another_gets_a_worker():
    waiting = due(*((n, 1) for n in range(1, 11)), (11, 2))

    chosen = shares.pick(waiting, Counter(), free=8, per_team=2)

    assert [d.channel for d in chosen] == [1, 11, 2]
    assert shares.pick(waiting, Counter({1: 2}), free=8, per_team=2) == due((11, 2))


def test_free_workers_go_to_the_teams_in_turn():
    waiting = due((1, 1), (2, 1), (3, 2), (4, 2), (5, 3))

    # One free worker: the team after the one served last, not always the first team.
    assert shares.pick(waiting, Counter(), free=1, per_team=2, after=1) == due((3, 2))
    assert shares.pick(waiting, Counter(), free=1, per_team=2, after=3) == due((1, 1))
    # A team holding fewer workers goes before one holding more.
    assert shares.pick(waiting, Counter({2: 1}), free=1, per_team=2, after=1) == due((5, 3))
    assert shares.pick(waiting, Counter(), free=0, per_team=2) == []
