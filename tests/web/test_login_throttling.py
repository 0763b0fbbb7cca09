"""Password guessing is throttled by username: after 5 failed logins for one username every
login for it (even with the right password, on the login page or the admin's) is refused for
15 minutes with a page saying so; other usernames are unaffected, and a success resets the
count."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User

from tests.conftest import NOW

PASSWORD = "a long passphrase"
LOCKED = "Too many failed logins for this username; try again in 15 minutes."
LOGIN_PAGES = ["/accounts/login/", "/admin/login/"]


@pytest.fixture
def viewer(db) -> User:
    # Staff, so the same account can log in through the admin's login page too.
    return User.objects.create_user("viewer", password=PASSWORD, is_staff=True)


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


def log_in(client, url: str, username: str, password: str):
    return client.post(url, {"username": username, "password": password})


def logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def fail(client, url: str, username: str, times: int) -> list[int]:
    return [log_in(client, url, username, "wrong").status_code for _ in range(times)]


@pytest.mark.parametrize("url", LOGIN_PAGES)
def test_right_password_is_refused_after_five_failed_logins(client, viewer, frozen, url):
    fail(client, url, "viewer", 5)
    response = log_in(client, url, "viewer", PASSWORD)
    assert response.status_code == 429
    content = response.content.decode()
    assert LOCKED in content
    assert "Onlooker" in content, "the lockout is not a page in Onlooker's style"
    assert not logged_in(client)


def test_failures_on_both_login_pages_count_together(client, viewer, frozen):
    fail(client, "/accounts/login/", "viewer", 3)
    fail(client, "/admin/login/", "viewer", 2)
    response = log_in(client, "/accounts/login/", "viewer", PASSWORD)
    assert response.status_code == 429
    assert not logged_in(client)


def test_a_locked_username_does_not_lock_another(client, viewer, frozen):
    User.objects.create_user("other", password=PASSWORD)
    fail(client, "/accounts/login/", "viewer", 5)
    assert log_in(client, "/accounts/login/", "viewer", PASSWORD).status_code == 429
    response = log_in(client, "/accounts/login/", "other", PASSWORD)
    assert response.status_code == 302
    assert logged_in(client)


def test_a_username_that_does_not_exist_is_locked_out_the_same_way(client, db, frozen):
    # Otherwise the lockout would tell a guesser which usernames exist.
    fail(client, "/accounts/login/", "nobody", 5)
    response = log_in(client, "/accounts/login/", "nobody", "wrong")
    assert response.status_code == 429
    assert LOCKED in response.content.decode()


def test_the_right_password_works_again_after_fifteen_minutes(client, viewer, frozen):
    fail(client, "/accounts/login/", "viewer", 5)
    frozen.shift(timedelta(minutes=14, seconds=59))
    assert log_in(client, "/accounts/login/", "viewer", PASSWORD).status_code == 429
    # That refused attempt started the 15 minutes again, as the page said it would.
    frozen.shift(timedelta(minutes=14, seconds=59))
    assert log_in(client, "/accounts/login/", "viewer", PASSWORD).status_code == 429
    frozen.shift(timedelta(minutes=15, seconds=1))
    response = log_in(client, "/accounts/login/", "viewer", PASSWORD)
    assert response.status_code == 302
    assert logged_in(client)


@pytest.mark.parametrize("url", LOGIN_PAGES)
def test_four_failures_then_a_success_start_the_count_again(client, viewer, frozen, url):
    for _ in range(2):
        assert fail(client, url, "viewer", 4) == [200] * 4
        assert log_in(client, url, "viewer", PASSWORD).status_code == 302
        client.logout()
    # Only five failures in a row lock the username.
    fail(client, url, "viewer", 5)
    assert log_in(client, url, "viewer", PASSWORD).status_code == 429
