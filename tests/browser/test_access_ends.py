"""What a person's open page does when their access ends, in a real browser against a real
Daphne (whose sweep checks sockets once a second): logged out elsewhere, the page goes to the
login page; a session page whose session they may no longer see reloads into a 404."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.test import Client
from playwright.sync_api import expect

from tasks.models import Session
from tests.builders import status
from tests.conftest import make_agent
from tests.live_server import push_http

# In the long checks (-m slow; .ci/run runs them): each starts processes or servers of its own,
# and the default run must stay inside its time budget.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WITHIN_MS = 6_000  # the sweep's second, the close, the reload: well inside this


def test_a_page_whose_login_ends_elsewhere_goes_to_the_login_page(
    server, context, page, login, open_live, alice
):
    login(alice)
    open_live("/")
    # Logging out in another tab: the real logout view, with the browser's own cookie.
    [cookie] = [c for c in context.cookies() if c["name"] == settings.SESSION_COOKIE_NAME]
    elsewhere = Client()
    elsewhere.cookies[settings.SESSION_COOKIE_NAME] = cookie["value"]
    assert elsewhere.post("/accounts/logout/").status_code == 302

    expect(page).to_have_url(re.compile(r"/accounts/login/"), timeout=WITHIN_MS)


def test_a_session_page_out_of_reach_reloads_into_not_found(
    server, page, login, open_live, alice, ops
):
    registered = make_agent(team=ops)
    assert push_http(server, registered, status("WORKING", at=1, text="Busy")).status_code == 200
    session = Session.objects.get()
    login(alice)
    open_live(f"/sessions/{session.pk}/")

    registered.agent.team = Group.objects.create(name="elsewhere")
    registered.agent.save(update_fields=["team"])

    expect(page.locator("body")).to_contain_text("Not found", ignore_case=True, timeout=WITHIN_MS)
    expect(page.locator("[data-live-card]")).to_have_count(0)
