"""What a page shows of a question an agent waits for is bounded: a prompt, its choices and
its link can each be as large as a push (1 MB), and they are shown on the session page, its
activity fragment, the card and the monitoring screen's waiting list (twenty at a time).
Each is cut to a budget, with a "show all" link to the whole question as plain text, for
people who may see the session; the answer forms work as before."""

from __future__ import annotations

import re

from django.contrib.auth.models import Group
from django.test import Client

from tasks.models import Interaction, Session
from tasks.wire import profile
from tests.builders import approval, status
from tests.conftest import member, push

BIG = 900 * 1024
PAGE_LIMIT = 50_000  # bytes of any one page or fragment while a 900 KB question waits


def ask(registered, interaction_id: str, prompt: str, *, kind="question", detail=None, task="t"):
    body = status(
        "INPUT_REQUIRED" if kind == "question" else "AUTH_REQUIRED",
        task=task,
        at=1,
        metadata=approval(interaction_id, prompt, kind=kind, detail=detail),
    )
    assert push(Client(), registered, body).status_code == 200
    return Interaction.objects.get(interaction_id=interaction_id)


def pages(client: Client, session: Session) -> dict[str, str]:
    """Every page and fragment that shows open questions, as the browser gets them."""
    shown = {}
    for url in (
        f"/sessions/{session.pk}/",
        f"/sessions/{session.pk}/activity/",
        "/",
        "/live/board/?waiting=1&tiles=1",
    ):
        response = client.get(url)
        assert response.status_code == 200, url
        assert len(response.content) < PAGE_LIMIT, (url, len(response.content))
        shown[url] = response.content.decode()
    shown["/live/board/?waiting=1&tiles=1"] = response.json()["waiting"]
    return shown


def show_all_link(page: str, question: Interaction) -> str:
    [link] = re.findall(rf'href="(/interactions/{question.pk}/[^"]+)" data-show-all', page)
    return link


def test_a_900_kb_prompt_is_cut_on_every_page_and_shown_whole_one_link_away(
    approver, team_agent, agent_stub
):
    prompt = "Which region? " + "p" * BIG + " (end of the prompt)"
    question = ask(team_agent, "q-1", prompt, detail={"choices": ["eu", "us"]})
    shown = pages(approver, question.task.session)

    for url, page in shown.items():
        assert "Which region? ppp" in page, url
        assert "(end of the prompt)" not in page, url
        # The answer form is as it was: the same fields, the choices as buttons.
        assert f'action="/interactions/{question.pk}/answer/"' in page, url
        assert 'name="choice" value="eu"' in page and 'name="choice" value="us"' in page, url
        assert f'<textarea id="answer-{question.pk}" name="value"' in page, url
        link = show_all_link(page, question)

    whole = approver.get(link)
    assert whole.status_code == 200
    assert whole["Content-Type"] == "text/plain; charset=utf-8"
    assert whole.content.decode().startswith(prompt + "\n")

    # The form still answers the question.
    response = approver.post(
        f"/interactions/{question.pk}/answer/",
        {"choice": "eu", "value": ""},
        HTTP_ACCEPT="application/json",
    )
    assert response.status_code == 200
    [params] = agent_stub.calls("SendMessage")
    assert params["message"]["metadata"][profile.INTERACTIONS] == {
        "interactionId": "q-1",
        "value": "eu",
    }

    # Answered, it is listed under "Answers": still within the budget, its prompt cut.
    for url in (
        f"/sessions/{question.task.session_id}/",
        f"/sessions/{question.task.session_id}/activity/",
    ):
        answered = approver.get(url)
        assert len(answered.content) < PAGE_LIMIT, (url, len(answered.content))
        [item] = re.findall(
            rf'<li data-answered-interaction="{question.pk}">(.*?)</li>', answered.content.decode()
        )
        assert "Which region? ppp" in item and "(end of the prompt)" not in item


def test_long_choices_and_links_stay_off_the_page_and_short_ones_work(approver, team_agent):
    # Each too long for a button (it can still be typed), all together small enough to load.
    long_choices = [f"choice {i} " + "c" * 1_000 for i in range(10)]
    choices = ask(team_agent, "q-1", "Pick one", detail={"choices": ["short", *long_choices]})
    far = ask(
        team_agent,
        "c-1",
        "Connect the far one",
        kind="connection",
        detail={"url": "https://far.example/" + "u" * BIG},
        task="t-2",
    )
    near = ask(
        team_agent,
        "c-2",
        "Connect the near one",
        kind="connection",
        detail={"url": "https://near.example/connect"},
        task="t-3",
    )
    shown = pages(approver, choices.task.session)

    for url, page in shown.items():
        if url == "/":
            page = page.split("data-waiting", 1)[1]  # the waiting list, not the tiles
        assert 'name="choice" value="short"' in page, url
        assert 'value="choice 0' not in page, url  # not a button (the detail shows it, cut)
        assert "https://far.example/" not in page, url
        assert 'href="https://near.example/connect"' in page, url
        assert f"/interactions/{near.pk}/prompt/" not in page, url  # nothing is cut
    page = shown[f"/sessions/{choices.task.session_id}/"]
    for cut, whole in ((choices, long_choices[0]), (far, "https://far.example/" + "u" * BIG)):
        text = approver.get(show_all_link(page, cut)).content.decode()
        assert whole in text


def test_a_detail_too_large_to_load_is_one_link_away(approver, team_agent):
    detail = {"choices": ["yes", "no"], "notes": "n" * BIG}
    question = ask(team_agent, "q-1", "Go on?", detail=detail)
    page = pages(approver, question.task.session)[f"/sessions/{question.task.session_id}/"]
    assert "nnnn" not in page
    text = approver.get(show_all_link(page, question)).content.decode()
    assert text.startswith("Go on?\n") and "n" * BIG in text


def test_a_question_is_shown_whole_only_to_people_who_may_see_its_session(
    approver, team_agent, ops
):
    question = ask(team_agent, "q-1", "Secret plan " + "p" * 10_000)
    link = f"/interactions/{question.pk}/prompt/"
    assert approver.get(link).status_code == 200

    outsider = Client()
    outsider.force_login(member("mallory", Group.objects.create(name="other team")))
    assert outsider.get(link).status_code == 404
    assert outsider.get(f"/interactions/{question.pk + 1000}/prompt/").status_code == 404
    anonymous = Client().get(link)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")
