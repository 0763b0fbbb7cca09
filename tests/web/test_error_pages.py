"""Error pages: an unknown address answers 404 with a page in the design, logged in or out,
whatever the path holds; the 500 page renders with no context at all."""

from __future__ import annotations

import pytest
from django.test import Client, RequestFactory
from django.views.defaults import server_error

from tests.conftest import make_agent

STYLESHEET = "/static/css/onlooker.css"


def not_found(client: Client, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 404, (path, response.status_code)
    assert response["Content-Type"].startswith("text/html")
    return response.content.decode()


def test_an_unknown_address_logged_out_gets_the_designed_404_with_a_way_to_log_in(client, db):
    page = not_found(client, "/no/such/page/")
    assert "Page not found" in page
    assert STYLESHEET in page
    assert "data-theme-toggle" in page
    assert 'href="/accounts/login/"' in page
    assert "<code>/no/such/page/</code>" in page


def test_an_unknown_address_logged_in_leads_back_to_the_monitoring_screen(client, alice):
    client.force_login(alice)
    page = not_found(client, "/no/such/page/")
    assert "Page not found" in page
    assert "Back to the monitoring screen" in page
    assert "Log out" in page and "alice" in page


def test_a_session_that_does_not_exist_is_the_designed_404(client, alice, ops):
    make_agent(team=ops)
    client.force_login(alice)
    page = not_found(client, "/sessions/987654/")
    assert "Page not found" in page


@pytest.mark.parametrize(
    "path",
    [
        "/%3Cscript%3Ealert(1)%3C/script%3E/",
        "/%ff%fe/",
        "/" + "x" * 3000 + "/",
        "/static/no-such-file.css",
    ],
)
def test_odd_unknown_paths_are_404_never_500_and_shown_as_text(client, alice, path):
    client.force_login(alice)
    page = not_found(client, path)
    assert "<script>alert(1)" not in page
    assert "Page not found" in page


def test_the_500_page_renders_without_any_context():
    response = server_error(RequestFactory().get("/"))
    page = response.content.decode()
    assert response.status_code == 500
    assert "Something went wrong" in page
    assert f'href="{STYLESHEET}"' in page
    assert "{%" not in page and "{{" not in page
