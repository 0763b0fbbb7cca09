"""Making a channel resolves its URL's host (tasks/notify/targets.py) to refuse a private
one. Tests that make channels to names under `.test` and never send to them use
`names_under_test_resolve_to_nothing`: such a name then resolves to nothing, as it does from
a resolver that has never heard of it, without asking one, so those tests make no DNS query
off this machine. Every other name (localhost, IP literals) resolves for real."""

from __future__ import annotations

import socket

import pytest

from tasks.notify import targets


@pytest.fixture
def names_under_test_resolve_to_nothing(monkeypatch):
    real = targets.resolve

    def resolve(host: str, port: int) -> list[str]:
        if host.rstrip(".").lower().endswith(".test"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, port)

    monkeypatch.setattr(targets, "resolve", resolve)
