"""`/settings/`: a person's notifications toggle, their teams and what they may answer; the
header leads there."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from tests.conftest import make_agent, member
from tests.offline_names import names_under_test_resolve_to_nothing  # noqa: F401 - a fixture


def page_of(user: User) -> str:
    client = Client()
    client.force_login(user)
    response = client.get("/settings/")
    assert response.status_code == 200
    return response.content.decode()


def text(html: str) -> str:
    """The page's words, one space apart (what a person reads, roughly)."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


@pytest.fixture
def fleet(ops):
    data = Group.objects.create(name="data")
    make_agent(team=ops, name="deploy-bot")
    make_agent(team=data, name="etl-bot")
    make_agent(name="open-bot")
    return data


def test_logged_out_people_are_sent_to_log_in(db):
    response = Client().get("/settings/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/settings/")


def test_an_approver_sees_their_teams_and_the_agents_they_may_answer(ops, approvers, fleet):
    html = page_of(member("alice", ops, approvers))
    words = text(html)

    assert re.search(r'<ul class="settings-teams" data-settings-teams>.*ops', html, re.S)
    assert 'data-settings-may-answer="yes"' in html
    assert "Everyone’s (no team) open-bot" in words
    assert "Team ops deploy-bot" in words
    assert "etl-bot" not in words  # another team's agent
    assert "data-notify-toggle" in html and "data-notify-permission" in html
    assert "Team channels" in words  # the place left for the team's channels


def test_a_viewer_is_told_they_may_follow_but_not_answer(ops, fleet):
    html = page_of(member("viewer", ops))
    assert 'data-settings-may-answer="no"' in html
    assert "ask an administrator for the answer permission" in text(html)
    assert "Team ops deploy-bot" in text(html)


def test_someone_on_no_team_sees_only_everyones_agents(fleet):
    words = text(page_of(User.objects.create_user("charlie")))
    assert "You are on no team" in words
    assert "open-bot" in words
    assert "deploy-bot" not in words and "etl-bot" not in words


def test_a_superuser_has_all_teams_and_every_agent(fleet):
    words = text(page_of(User.objects.create_superuser("root")))
    assert "All teams" in words
    assert "Team data etl-bot" in words and "Team ops deploy-bot" in words
    assert 'data-settings-may-answer="yes"' in page_of(User.objects.get(username="root"))


def test_the_username_in_the_header_leads_to_the_settings(ops):
    client = Client()
    client.force_login(member("alice", ops))
    overview = client.get("/").content.decode()
    assert re.search(r'<a class="topbar-user" href="/settings/"[^>]*>alice</a>', overview)
    assert "data-notify-toggle" in overview
    assert 'data-user-id="' in overview


@pytest.mark.usefixtures("names_under_test_resolve_to_nothing")
def test_the_page_lists_the_channels_of_the_persons_teams_only(ops, fleet):
    from tasks.notify.channels import add

    add("ops", "slack", "https://hooks.example.test/services/T0/B0/s3cret")
    add("data", "webhook", "https://data.example.test/hook")
    html = page_of(member("alice", ops))
    words = text(html)

    assert "data-team-channels" in html
    assert "https://hooks.example.test/…" in words
    assert "s3cret" not in html
    assert "data.example.test" not in html  # another team's channel
