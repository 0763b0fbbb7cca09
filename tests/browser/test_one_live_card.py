"""One live card per view: on a session page the sidebar hovercard never opens for the
session the page shows (its card is already live there), and still does for the others."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tasks.models import Session
from tests.builders import status
from tests.conftest import make_agent
from tests.live_server import push_http

# In the long checks (-m slow; .ci/run runs them): each starts processes or servers of its own,
# and the default run must stay inside its time budget.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

HOVERCARD = '[role="dialog"][data-hovercard]'


def send(server, registered, body: dict) -> Session:
    response = push_http(server, registered, body)
    assert response.status_code == 200, (response.status_code, response.text, server.log())
    return Session.objects.get(context_id=body["statusUpdate"]["contextId"])


def test_the_hovercard_never_opens_a_second_copy_of_the_pages_own_card(
    server, page, login, open_live, alice, ops
):
    agent = make_agent(team=ops)
    here = send(server, agent, status("WORKING", at=1, context="here", text="This one"))
    other = send(server, agent, status("WORKING", at=1, context="other", task="t2", text="Other"))
    login(alice)
    open_live(f"/sessions/{here.pk}/")

    own_row = page.locator(f'li[data-sidebar-session="{here.pk}"]')
    own_row.hover()
    own_row.locator("a.sidebar-link").focus()
    # A negative needs a bound: three times the ~350 ms delay the control below meets.
    page.wait_for_timeout(1_000)
    expect(page.locator(HOVERCARD)).to_have_count(0)
    expect(page.locator(f'article[data-session="{here.pk}"]')).to_have_count(2)  # rail + bar
    expect(own_row.locator("a.sidebar-link")).not_to_have_attribute("aria-haspopup", "dialog")

    page.locator(f'li[data-sidebar-session="{other.pk}"]').hover()
    expect(page.locator(f'{HOVERCARD} article[data-session="{other.pk}"]')).to_be_visible()
