"""What the notification tests share: a clock at the builders' noon, and a loopback receiver
that takes every post."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine

from tests.peers.misbehaving_agent import MisbehavingAgent

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)  # the builders' noon: pushes are at +1 s


@pytest.fixture
def clock():
    with time_machine.travel(T0, tick=True) as traveller:
        yield traveller


@pytest.fixture
def receiver():
    with MisbehavingAgent() as peer:
        peer.answer(b"ok", content_type="text/plain")
        yield peer
