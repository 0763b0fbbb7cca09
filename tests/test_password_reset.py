"""Password reset is offered only when email is configured (EMAIL_HOST): without it the reset
pages are not routed and the login page has no link to them, so no anonymous request makes
Onlooker try to send mail; with it a person can reset a forgotten password by email."""

from __future__ import annotations

import importlib
import re

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.urls import clear_url_caches

import dashboard.urls

NEW_PASSWORD = "correct horse battery staple 42"
RESET_URLS = [
    "/accounts/password_reset/",
    "/accounts/password_reset/done/",
    "/accounts/reset/MQ/set-password/",
    "/accounts/reset/done/",
]


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
    [message] = mail.outbox
    assert message.to == ["forgetful@example.com"]
    link = re.search(r"http://testserver(/accounts/reset/\S+/\S+/)", message.body).group(1)

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
