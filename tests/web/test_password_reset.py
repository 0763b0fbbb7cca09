"""Password reset is offered only when email is configured (EMAIL_HOST): without it the reset
pages are not routed and the login page has no link to them, so no anonymous request makes
Onlooker try to send mail; with it a person can reset a forgotten password by email. The mail
is sent after the answer, so a reset for an address with an account is answered as fast as
one for an address without."""

from __future__ import annotations

import importlib
import re
import smtplib
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core import mail
from django.core.mail.backends.base import BaseEmailBackend
from django.urls import clear_url_caches

import dashboard.urls

NEW_PASSWORD = "correct horse battery staple 42"
RESET_URLS = [
    "/accounts/password_reset/",
    "/accounts/password_reset/done/",
    "/accounts/reset/MQ/set-password/",
    "/accounts/reset/done/",
]


def eventually(check: Callable[[], Any], timeout: float = 5.0) -> Any:
    """`check()` once it is truthy: mail is sent by a background thread."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.005)
    return result


class StallingBackend(BaseEmailBackend):
    """A mail server that holds every message until the test lets it go (or 2 s pass)."""

    reached = threading.Event()
    release = threading.Event()
    sent: list = []

    def send_messages(self, messages) -> int:
        StallingBackend.reached.set()
        StallingBackend.release.wait(timeout=2)
        StallingBackend.sent += messages
        return len(messages)


class RefusingBackend(BaseEmailBackend):
    """A mail server that refuses the recipient, naming it, as SMTP servers do."""

    def send_messages(self, messages) -> int:
        refused = {to: (550, b"no such mailbox") for m in messages for to in m.to}
        raise smtplib.SMTPRecipientsRefused(refused)


def reload_urls() -> None:
    # The routes are chosen from the settings when dashboard.urls is imported.
    importlib.reload(dashboard.urls)
    clear_url_caches()


@pytest.fixture
def routes_for(settings):
    """`routes_for(email_host)`: the URLs as a server with that EMAIL_HOST routes them."""
    original = settings.EMAIL_HOST
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"

    def route(email_host: str) -> None:
        settings.EMAIL_HOST = email_host
        reload_urls()

    yield route
    settings.EMAIL_HOST = original
    reload_urls()


@pytest.fixture
def forgetful(db) -> User:
    return User.objects.create_user("forgetful", email="forgetful@example.com", password="old")


def test_without_email_password_reset_is_not_offered(client, forgetful, routes_for):
    routes_for("")
    for url in RESET_URLS:
        assert client.get(url).status_code == 404, url
    response = client.post("/accounts/password_reset/", {"email": "forgetful@example.com"})
    assert response.status_code == 404
    assert mail.outbox == []
    page = client.get("/accounts/login/").content.decode()
    assert "password_reset" not in page
    assert "Forgot" not in page


def test_with_email_a_forgotten_password_is_reset_by_email(client, forgetful, routes_for):
    routes_for("smtp.example.com")
    login_page = client.get("/accounts/login/").content.decode()
    assert 'href="/accounts/password_reset/"' in login_page

    form = client.get("/accounts/password_reset/")
    assert form.status_code == 200
    assert "Onlooker" in form.content.decode()
    # An address no account has gets the same answer, and no mail.
    for email in ("stranger@example.com", "forgetful@example.com"):
        response = client.post("/accounts/password_reset/", {"email": email})
        assert response.status_code == 302
        assert response["Location"] == "/accounts/password_reset/done/"
    # Mails are sent in order, one at a time: a mail to the stranger would come first.
    [message] = eventually(lambda: list(mail.outbox))
    assert message.to == ["forgetful@example.com"]
    # To the address people open (ONLOOKER_PUBLIC_URL), not the request's Host.
    public = re.escape(settings.ONLOOKER_PUBLIC_URL)
    link = re.search(public + r"(/accounts/reset/\S+/\S+/)", message.body).group(1)

    set_password = client.get(link, follow=True)
    assert set_password.status_code == 200
    assert 'name="new_password1"' in set_password.content.decode()
    done = client.post(
        set_password.redirect_chain[-1][0],
        {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD},
    )
    assert done.status_code == 302
    assert done["Location"] == "/accounts/reset/done/"
    assert client.get("/accounts/reset/done/").status_code == 200

    login = client.post("/accounts/login/", {"username": "forgetful", "password": NEW_PASSWORD})
    assert login.status_code == 302
    assert "_auth_user_id" in client.session


@pytest.fixture
def stalling_mail(settings):
    StallingBackend.reached.clear()
    StallingBackend.release.clear()
    StallingBackend.sent = []
    settings.EMAIL_BACKEND = "tests.web.test_password_reset.StallingBackend"
    yield StallingBackend
    # Let the sender finish here, not in the next test.
    StallingBackend.release.set()
    if StallingBackend.reached.is_set():
        eventually(lambda: StallingBackend.sent)


def test_a_stalled_mail_server_does_not_delay_the_answer_for_a_known_address(
    client, forgetful, routes_for, stalling_mail
):
    routes_for("smtp.example.com")
    response = client.post("/accounts/password_reset/", {"email": "forgetful@example.com"})
    assert response.status_code == 302
    assert response["Location"] == "/accounts/password_reset/done/"
    # Answered before the server took the mail, which then waits at the server.
    assert stalling_mail.sent == []
    assert stalling_mail.reached.wait(timeout=5)
    assert stalling_mail.sent == []

    stalling_mail.release.set()
    [message] = eventually(lambda: stalling_mail.sent)
    assert message.to == ["forgetful@example.com"]
    assert "/accounts/reset/" in message.body


def test_a_refused_mail_is_logged_without_the_address(
    client, forgetful, routes_for, settings, caplog
):
    routes_for("smtp.example.com")
    settings.EMAIL_BACKEND = "tests.web.test_password_reset.RefusingBackend"
    response = client.post("/accounts/password_reset/", {"email": "forgetful@example.com"})
    assert response.status_code == 302

    [record] = eventually(lambda: [r for r in caplog.records if "reset" in r.getMessage()])
    assert "forgetful@example.com" not in caplog.text
    assert record.levelname == "WARNING"
    assert "SMTPRecipientsRefused" in record.getMessage()
