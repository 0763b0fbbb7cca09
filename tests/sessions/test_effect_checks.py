"""What the card says of uncertain effects and their checks (sessions/effect_checks.py): an
effect whose check is open stays on the card, marked "Needs checking", whatever turns follow;
once checked it says who checked it while its turn is the newest, then goes."""

from __future__ import annotations

from datetime import UTC, datetime

import time_machine
from django.contrib.auth.models import Permission, User
from django.test import Client

from tasks.answering import checks
from tasks.models import Interaction, Session
from tasks.sessions import fragments
from tasks.wire import profile
from tests.builders import status
from tests.conftest import push

EFFECT = "upload:report.pdf"
LINE = "Upload of report.pdf unconfirmed."


def uncertain(effect: str = EFFECT) -> dict:
    return {profile.EFFECTS: {"uncertain": effect}}


def pushed(agent, body: dict) -> None:
    assert push(Client(), agent, body).status_code == 200


def card_html() -> str:
    return fragments.of(Session.objects.select_related("card", "agent").get())["card"]


def marked_by(name: str, effect: str = EFFECT) -> None:
    user = User.objects.create_user(name)
    user.user_permissions.add(*_answer_permission())
    check = Interaction.objects.select_related("task__session__agent").get(
        state="open", detail__effect=effect
    )
    with time_machine.travel(datetime(2026, 12, 1, 10, 2, tzinfo=UTC), tick=False):
        checks.mark_checked(User.objects.get(pk=user.pk), check)


def _answer_permission():
    return Permission.objects.filter(codename="answer_interaction")


def test_an_unchecked_effect_stays_on_the_card_through_the_next_turns(client, token_agent):
    pushed(token_agent, status("COMPLETED", task="turn-1", at=1, metadata=uncertain()))
    pushed(token_agent, status("WORKING", task="turn-2", at=5, text="Next thing"))
    pushed(token_agent, status("COMPLETED", task="turn-2", at=6, text="Done too"))

    facts = Session.objects.select_related("card").get().card.facts
    assert (facts["uncertain"], facts["unchecked"]) == ([EFFECT], [EFFECT])
    html = card_html()
    assert LINE in html and "Needs checking" in html


def test_once_checked_the_newest_turns_effect_says_who_checked_it(client, token_agent):
    pushed(token_agent, status("WORKING", at=1, metadata=uncertain()))
    marked_by("alice")

    html = card_html()
    assert LINE in html
    assert "Needs checking" not in html
    assert "Checked by alice, 10:02" in html


def test_a_checked_effect_of_an_earlier_turn_goes_with_the_next_turn(client, token_agent):
    pushed(token_agent, status("COMPLETED", task="turn-1", at=1, metadata=uncertain()))
    marked_by("alice")
    pushed(token_agent, status("WORKING", task="turn-2", at=5, text="Next thing"))

    facts = Session.objects.select_related("card").get().card.facts
    assert "uncertain" not in facts and "unchecked" not in facts
    assert LINE not in card_html()


def test_an_effect_open_in_an_earlier_turn_and_repeated_by_the_newest_is_one_marked_line(
    client, token_agent
):
    pushed(token_agent, status("COMPLETED", task="turn-1", at=1, metadata=uncertain()))
    pushed(token_agent, status("WORKING", task="turn-2", at=5, metadata=uncertain()))
    pushed(token_agent, status("WORKING", task="turn-2", at=6, metadata=uncertain("pay:7")))

    html = card_html()
    assert html.count(LINE) == 1
    assert html.count("Needs checking") == 2  # the upload's check, and the payment's

    marked_by("alice")  # the upload's, whose check is the earlier turn's
    facts = Session.objects.select_related("card").get().card.facts
    assert facts["unchecked"] == ["pay:7"]
    assert facts["checked"] == {EFFECT: "Checked by alice, 10:02"}
