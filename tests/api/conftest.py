"""Fixtures the read API's tests share: a second team and its member, and a decision on each
of three agents."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User

from tests.api.recorded import ask, on_record
from tests.conftest import make_agent, member


@pytest.fixture
def dev(db) -> Group:
    return Group.objects.create(name="dev")


@pytest.fixture
def bob(dev) -> User:
    """On the dev team."""
    return member("bob", dev)


@pytest.fixture
def three(ops, dev):
    """One question each from an agent of ops, one of dev and one of no team, each decided
    once: {"ops": row, "dev": row, "open": row}."""
    rows = {}
    for key, team in (("ops", ops), ("dev", dev), ("open", None)):
        registered = make_agent(team=team, name=f"{key} bot")
        rows[key] = on_record(ask(registered), "approve")
    return rows
