"""Password reset cannot be used to flood an inbox, to probe for accounts or to send a link
to someone else's host (issue 29 §5).

- At most ONLOOKER_RESET_MAILS_PER_ADDRESS_PER_HOUR (3) mails reach one address in any hour.
  Beyond that no mail is sent, the log says so without the address, and the answer is the one
  every address gets, account or not, after the same work.
- At most ONLOOKER_RESET_REQUESTS_PER_CLIENT_PER_HOUR (10) requests come from one client in
  any hour; more are answered 429 with a page that says so. The client is REMOTE_ADDR, or the
  address a trusted proxy appended last to X-Forwarded-For.
- The link is built from ONLOOKER_PUBLIC_URL whatever the request's Host says.
- The caps are kept in the database: they hold across server processes, and rows an hour
  quiet are deleted as requests come.

Through the real reset view (CSRF enforced where the form sends its token), Django's mail
outbox (locmem) and time-machine for the hour; across processes with two real Daphnes and a
loopback SMTP server.
"""

from __future__ import annotations

import logging
import re
import socketserver
import threading
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
import time_machine
from django.contrib.auth.models import User
from django.core import mail
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tasks.models import ResetLimit
from tests.conftest import NOW
from tests.live_server import LiveServer
from tests.web.test_password_reset import eventually, routes_for  # noqa: F401 - a fixture

RESET = "/accounts/password_reset/"
DONE = "/accounts/password_reset/done/"
LIMITED = "Too many password reset requests from your network; try again within the hour."
HOUR = timedelta(hours=1)


@pytest.fixture
def reset_on(routes_for):  # noqa: F811 - a fixture imported from test_password_reset
    routes_for("smtp.example.com")


@pytest.fixture
def frozen() -> Iterator[time_machine.Coordinates]:
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def forgetful(db) -> User:
    return User.objects.create_user("forgetful", email="forgetful@example.com", password="old")


@pytest.fixture
def witness(db) -> User:
    """An account whose mail, sent last, shows every mail asked for before it was sent: one
    background thread sends them in order."""
    return User.objects.create_user("witness", email="witness@example.com", password="old")


def ask(client: Client, email: str, client_address: str = "192.0.2.1", **headers):
    return client.post(RESET, {"email": email}, REMOTE_ADDR=client_address, **headers)


def mails_once_sent(witness: User, client: Client) -> list[str]:
    """Everyone mailed so far, once every mail asked for has gone (the witness's last)."""
    assert ask(client, witness.email, "192.0.2.254").status_code == 302
    eventually(lambda: any(m.to == [witness.email] for m in mail.outbox))
    return [to for m in mail.outbox for to in m.to if to != witness.email]


# -- per address ----------------------------------------------------------------------


def test_at_most_three_reset_mails_reach_one_address_in_an_hour(
    client, forgetful, witness, reset_on, frozen, caplog
):
    caplog.set_level(logging.INFO)
    # 22 requests from 22 clients (so the client cap is not what stops them), in any case.
    answers = set()
    for n in range(22):
        email = "Forgetful@Example.com" if n % 2 else "forgetful@example.com"
        response = ask(client, email, f"198.51.100.{n}")
        answers.add((response.status_code, response["Location"]))
    assert answers == {(302, DONE)}
    assert mails_once_sent(witness, client) == ["forgetful@example.com"] * 3

    refusals = [r for r in caplog.records if "reset mail not sent" in r.getMessage()]
    assert len(refusals) == 19
    assert all(r.levelname == "WARNING" for r in refusals)
    assert "forgetful" not in caplog.text.lower()

    # An hour after the first, one may go again.
    frozen.shift(HOUR + timedelta(seconds=1))
    mail.outbox.clear()
    assert ask(client, "forgetful@example.com", "198.51.100.99").status_code == 302
    assert mails_once_sent(witness, client) == ["forgetful@example.com"]


def test_the_hour_slides_rather_than_starting_afresh_on_the_clock(
    client, forgetful, witness, reset_on, frozen
):
    for minute in (0, 40, 50):
        frozen.move_to(NOW + timedelta(minutes=minute))
        ask(client, forgetful.email, f"198.51.100.{minute}")
    # Past the hour after the first only: one more, not three.
    frozen.move_to(NOW + timedelta(minutes=61))
    for n in range(3):
        ask(client, forgetful.email, f"203.0.113.{n}")
    assert mails_once_sent(witness, client) == [forgetful.email] * 4


def test_past_the_cap_an_account_is_answered_exactly_as_an_address_without_one(
    forgetful, witness, reset_on, frozen
):
    people = Client(enforce_csrf_checks=True)

    def asked(email: str, n: int) -> tuple[int, str, int]:
        form = people.get(RESET)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.content.decode())
        with CaptureQueriesContext(connection) as queries:
            response = people.post(
                RESET,
                {"email": email, "csrfmiddlewaretoken": token.group(1)},
                REMOTE_ADDR=f"198.51.100.{n}",
            )
        return response.status_code, response["Location"], len(queries)

    # Below the cap too: whether an account has the address changes nothing a client sees.
    first = asked(forgetful.email, 20)
    assert first == asked("stranger@example.com", 21)
    for n in range(2):
        asked(forgetful.email, n)
        asked("stranger@example.com", n)
    # Both capped now: the same answer after the same work (no lookup of the account).
    assert asked(forgetful.email, 10) == asked("stranger@example.com", 11)
    assert asked(forgetful.email, 12)[:2] == (302, DONE)
    assert mails_once_sent(witness, Client()) == [forgetful.email] * 3


# -- per client -----------------------------------------------------------------------


def test_a_client_is_refused_with_a_429_page_after_ten_reset_requests_in_an_hour(
    client, forgetful, witness, reset_on, frozen
):
    for n in range(10):
        assert ask(client, f"someone{n}@example.com", "203.0.113.7").status_code == 302
    refused = ask(client, forgetful.email, "203.0.113.7")
    assert refused.status_code == 429
    page = refused.content.decode()
    assert LIMITED in page and "Onlooker" in page
    assert refused["Retry-After"] == str(3600)
    # Another client is not held back; nothing went to the refused request's address.
    assert ask(client, "another@example.com", "203.0.113.8").status_code == 302
    assert mails_once_sent(witness, client) == []

    frozen.shift(timedelta(minutes=30))
    assert ask(client, forgetful.email, "203.0.113.7")["Retry-After"] == str(1800)
    frozen.shift(timedelta(minutes=30, seconds=1))
    assert ask(client, forgetful.email, "203.0.113.7").status_code == 302


def test_behind_a_trusted_proxy_the_client_is_the_address_the_proxy_appended(
    client, settings, db, reset_on, frozen
):
    settings.ONLOOKER_TRUSTED_PROXY = True
    proxy = "10.0.0.1"
    for n in range(10):
        # What the client wrote before the proxy's entry changes nothing.
        forwarded = f"192.0.2.{n}, 198.51.100.20"
        response = ask(client, "a@example.com", proxy, HTTP_X_FORWARDED_FOR=forwarded)
        assert response.status_code == 302
    forwarded = "192.0.2.99, 198.51.100.20"
    assert ask(client, "a@example.com", proxy, HTTP_X_FORWARDED_FOR=forwarded).status_code == 429
    # Another client behind the same proxy is another client.
    forwarded = "198.51.100.21"
    assert ask(client, "a@example.com", proxy, HTTP_X_FORWARDED_FOR=forwarded).status_code == 302


def test_without_a_trusted_proxy_x_forwarded_for_is_not_believed(client, db, reset_on, frozen):
    for n in range(10):
        forwarded = f"198.51.100.{n}"
        ask(client, "a@example.com", "203.0.113.5", HTTP_X_FORWARDED_FOR=forwarded)
    forwarded = "198.51.100.200"
    refused = ask(client, "a@example.com", "203.0.113.5", HTTP_X_FORWARDED_FOR=forwarded)
    assert refused.status_code == 429


def test_one_ipv6_client_is_its_whole_64(client, db, reset_on, frozen):
    for n in range(10):
        assert ask(client, "a@example.com", f"2001:db8:1:2::{n + 1:x}").status_code == 302
    assert ask(client, "a@example.com", "2001:db8:1:2:ffff::1").status_code == 429
    assert ask(client, "a@example.com", "2001:db8:1:3::1").status_code == 302


# -- the link -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "public_url", ["https://onlooker.example.com", "http://127.0.0.1:8400/onlooker"]
)
def test_the_reset_link_is_to_onlooker_public_url_whatever_the_host_header_says(
    client, forgetful, witness, settings, reset_on, public_url
):
    settings.ONLOOKER_PUBLIC_URL = public_url
    # An operator may allow any Host (behind a proxy that checks it); the link must not care.
    settings.ALLOWED_HOSTS = ["*"]
    response = ask(client, forgetful.email, HTTP_HOST="evil.example")
    assert response.status_code == 302
    eventually(lambda: mail.outbox)
    [message] = mail.outbox
    assert "evil.example" not in message.body + message.subject
    link = re.search(r"(\S+/accounts/reset/\S+/\S+/)", message.body).group(1)
    assert link.startswith(f"{public_url}/accounts/reset/")


# -- kept in the database ---------------------------------------------------------------


def test_rows_an_hour_quiet_are_deleted_and_none_holds_an_address(
    client, forgetful, reset_on, frozen
):
    for n in range(5):
        ask(client, f"person{n}@example.com", f"198.51.100.{n}")
    assert ResetLimit.objects.count() == 10
    stored = " ".join(f"{row.key} {row.times}" for row in ResetLimit.objects.all())
    assert "person" not in stored and "198.51.100" not in stored

    frozen.shift(HOUR + timedelta(seconds=1))
    ask(client, forgetful.email, "203.0.113.1")
    assert ResetLimit.objects.count() == 2


class _SmtpSink(socketserver.ThreadingTCPServer):
    """A loopback mail server that takes every mail and remembers its recipients."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.recipients: list[str] = []
        super().__init__(("127.0.0.1", 0), _SmtpSession)


class _SmtpSession(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        self.wfile.write(b"220 sink\r\n")
        while line := self.rfile.readline():
            command = line.decode(errors="replace").strip()
            verb = command[:4].upper()
            if verb == "RCPT":
                address = re.search(r"<([^>]*)>", command).group(1)
                self.server.recipients.append(address.lower())
            if verb == "DATA":
                self.wfile.write(b"354 go on\r\n")
                while self.rfile.readline() not in (b".\r\n", b""):
                    pass
            if verb == "QUIT":
                self.wfile.write(b"221 bye\r\n")
                return
            self.wfile.write(b"250 ok\r\n")


class _MailingServer(LiveServer):
    def __init__(self, smtp_port: int) -> None:
        super().__init__()
        self.smtp_port = smtp_port

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env.update(EMAIL_HOST="127.0.0.1", EMAIL_PORT=str(self.smtp_port))
        return env


# A long reliability check (two real server processes): -m slow.
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_both_caps_hold_across_two_server_processes():
    User.objects.create_user("forgetful", email="forgetful@example.com", password="old")
    User.objects.create_user("witness1", email="witness1@example.com", password="old")
    User.objects.create_user("witness2", email="witness2@example.com", password="old")
    sink = _SmtpSink()
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    try:
        with (
            _MailingServer(sink.server_address[1]) as one,
            _MailingServer(sink.server_address[1]) as two,
        ):
            servers = [one, two]

            def ask_at(server: LiveServer, email: str) -> int:
                # A browser's visit: the form, then its post with the form's token.
                with httpx.Client(base_url=server.url, timeout=10) as browser:
                    form = browser.get(RESET)
                    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
                    data = {"email": email, "csrfmiddlewaretoken": token.group(1)}
                    return browser.post(RESET, data=data).status_code

            # Six for one address, by turns: three mails, whichever process answers.
            assert [ask_at(servers[n % 2], "forgetful@example.com") for n in range(6)] == [302] * 6
            assert ask_at(one, "witness1@example.com") == 302
            assert ask_at(two, "witness2@example.com") == 302
            # Each process sends in order: once its witness is mailed, so is all before it.
            eventually(
                lambda: {"witness1@example.com", "witness2@example.com"} <= set(sink.recipients),
                timeout=15,
            )
            assert sink.recipients.count("forgetful@example.com") == 3

            # Eight requests from this client so far; two more anywhere, then 429 everywhere.
            assert ask_at(one, "x@example.com") == 302
            assert ask_at(two, "y@example.com") == 302
            assert [ask_at(server, "z@example.com") for server in servers] == [429, 429]
    finally:
        sink.shutdown()
        sink.server_close()
