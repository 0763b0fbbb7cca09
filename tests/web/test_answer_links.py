"""Answer links (`/answer/<token>/`): a GET shows a confirm page and changes nothing, whoever
fetches it (a person, a link-preview bot, a mail scanner); only the page's POST decides, as
the person logged in, with the page's checks, and only while the link's round is open.

Through the real view with Django's test client; questions are asked by real signed pushes
and answered against a loopback agent that records every request it gets; the clock is
frozen at 10:02 where a page names the time.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
import time_machine
from django.contrib.auth.models import Group, User
from django.core import signing
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tasks.answering import answers
from tasks.models import Decision, DecisionConfirmation, Interaction, TaskStart
from tasks.notify import answer_links
from tasks.wire import profile
from tests.builders import approval, status
from tests.conftest import RegisteredAgent, member, push

TEN_OH_TWO = datetime(2026, 12, 1, 10, 2, 0, tzinfo=UTC)
PROMPT = "Deploy release 2.4 to production?\nIt restarts every web node."
DETAIL = {"environment": "production", "hosts": 6, "change": "CHG-1042"}
NOT_OURS = "This link is not one Onlooker made"

BOTS = [
    "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)",
    "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
    "Mozilla/4.0 (compatible; ms-office; MSOffice 16)",
    "Microsoft Office/16.0 (Windows NT 10.0; Microsoft Outlook 16.0.17328; Pro)",
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "curl/8.5.0",
]


@pytest.fixture(autouse=True)
def at_ten_oh_two():
    with time_machine.travel(TEN_OH_TWO, tick=True) as traveller:
        yield traveller


def person(name: str, *groups: Group) -> Client:
    user = member(name, *groups)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def alice(ops, approvers) -> Client:
    return person("alice", ops, approvers)


@pytest.fixture
def bob(ops, approvers) -> Client:
    return person("bob", ops, approvers)


def ask(agent: RegisteredAgent, body: dict | None = None, *, at: int = 1) -> Interaction:
    """The agent waits for approval of PROMPT (each push a delivery of its own)."""
    body = body or status("AUTH_REQUIRED", at=at, metadata=approval("i-1", PROMPT, detail=DETAIL))
    assert push(Client(), agent, body, msg_id=f"ask-{at}").status_code == 200
    return Interaction.objects.get()


def link(interaction: Interaction, action: str, round_: int | None = None) -> str:
    round_ = interaction.round if round_ is None else round_
    return reverse("answer-link", args=(answer_links.token(interaction.pk, round_, action),))


def decide(client: Client, path: str, **form) -> tuple[int, str]:
    response = client.post(path, form)
    return response.status_code, response.content.decode()


def messages_to(stub) -> list[dict]:
    return [params["message"] for params in stub.calls("SendMessage")]


def as_stored(interaction: Interaction) -> tuple:
    """Everything that could change: the interaction's row and the record."""
    row = Interaction.objects.filter(pk=interaction.pk).values().get()
    return row, Decision.objects.count(), DecisionConfirmation.objects.count()


def text(page: str) -> str:
    """The page's text, roughly as read: tags gone, spaces folded."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))


# -- the confirm page ------------------------------------------------------------------------


def test_the_confirm_page_shows_the_whole_question_and_changes_nothing(
    alice, team_agent, agent_stub
):
    long_prompt = "Deploy?\n" + "Every web node restarts, one at a time. " * 150  # > 4,000
    body = status("AUTH_REQUIRED", at=1, metadata=approval("i-1", long_prompt, detail=DETAIL))
    interaction = ask(team_agent, body)
    before = as_stored(interaction)

    response = alice.get(link(interaction, "approve"))

    assert response.status_code == 200
    page = response.content.decode()
    assert long_prompt.strip() in page  # whole: the session page cuts at 4,000
    for key, value in DETAIL.items():
        assert f'<th scope="row">{key}</th>' in page and f"<td>{value}</td>" in page
    assert '<h1 id="answer-link-heading">Approve this?</h1>' in page
    assert "Builder</strong> asks, in" in page
    assert f'href="/sessions/{interaction.task.session_id}/"' in page
    assert 'name="decision" value="approve">Approve</button>' in page
    assert 'value="deny"' not in page  # the approve link approves only
    assert 'name="csrfmiddlewaretoken"' in page
    assert '<meta name="robots" content="noindex">' in page
    assert response["Referrer-Policy"] == "strict-origin"
    assert "no-store" in response["Cache-Control"]
    assert "<script>" not in page and "style=" not in page  # the strict CSP holds
    assert as_stored(interaction) == before
    assert agent_stub.requests == []


def test_a_deny_link_offers_deny_with_a_reason(alice, team_agent):
    interaction = ask(team_agent)
    page = alice.get(link(interaction, "deny")).content.decode()
    assert "Deny this?" in page
    assert '<label for="answer-link-reason"' in page
    assert '<textarea id="answer-link-reason" name="reason"' in page
    assert 'name="decision" value="deny">Deny</button>' in page
    assert 'value="approve"' not in page


def test_an_answer_link_offers_the_questions_choices_and_a_text_box(alice, team_agent):
    question = approval("q-1", "Which region?", kind="question", detail={"choices": ["eu", "us"]})
    interaction = ask(team_agent, status("INPUT_REQUIRED", at=1, metadata=question))
    page = alice.get(link(interaction, "answer")).content.decode()
    assert "Answer this question" in page and "Which region?" in page
    assert 'name="choice" value="eu">eu</button>' in page
    assert 'name="choice" value="us">us</button>' in page
    assert '<textarea id="answer-link-value" name="value"' in page


# -- deciding --------------------------------------------------------------------------------


def test_the_post_approves_as_the_person_logged_in_via_the_link(alice, team_agent, agent_stub):
    interaction = ask(team_agent)

    code, page = decide(alice, link(interaction, "approve"), decision="approve")

    assert code == 200
    assert "Approved by alice, 10:02" in page
    [sent] = messages_to(agent_stub)
    assert sent["metadata"][profile.INTERACTIONS] == {"interactionId": "i-1", "approved": True}
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answered_by.username, interaction.answered_via) == (
        "answered",
        "alice",
        "link",
    )
    [row] = Decision.objects.all()
    assert (row.decision, row.by, row.via, row.round) == ("approve", "alice", "link", 1)
    assert DecisionConfirmation.objects.filter(interaction_pk=interaction.pk).exists()
    # The result page offers nothing more to press.
    assert 'name="decision"' not in page


def test_a_deny_link_sends_the_reason_beside_the_deny(alice, team_agent, agent_stub):
    interaction = ask(team_agent)
    code, page = decide(alice, link(interaction, "deny"), decision="deny", reason="Not today")
    assert code == 200 and "Denied by alice, 10:02" in page
    assert "with your reason: “Not today”" in page
    [sent] = messages_to(agent_stub)
    assert sent["parts"] == [{"text": "Denied by alice in Onlooker"}, {"text": "Not today"}]
    [row] = Decision.objects.all()
    assert (row.decision, row.reason, row.via) == ("deny", "Not today", "link")


def test_an_answer_link_sends_a_choice_or_text(alice, bob, team_agent, agent_stub):
    question = approval("q-1", "Which region?", kind="question", detail={"choices": ["eu", "us"]})
    interaction = ask(team_agent, status("INPUT_REQUIRED", at=1, metadata=question))
    code, page = decide(alice, link(interaction, "answer"), choice="eu", value="")
    assert code == 200 and "Answered by alice, 10:02" in page
    [sent] = messages_to(agent_stub)
    assert sent["metadata"][profile.INTERACTIONS] == {"interactionId": "q-1", "value": "eu"}
    assert Decision.objects.get().value == "eu"


def test_a_typed_answer_through_the_link(alice, team_agent, agent_stub):
    question = approval("q-1", "Which region?", kind="question")
    interaction = ask(team_agent, status("INPUT_REQUIRED", at=1, metadata=question))
    code, _ = decide(alice, link(interaction, "answer"), value="  eu-west, please ")
    assert code == 200
    [sent] = messages_to(agent_stub)
    assert sent["metadata"][profile.INTERACTIONS]["value"] == "eu-west, please"


@pytest.mark.parametrize(
    ("action", "form"),
    [
        ("approve", {"decision": "deny"}),
        ("deny", {"decision": "approve"}),
        ("approve", {}),
        ("approve", {"choice": "yes"}),
    ],
)
def test_a_link_decides_only_its_own_decision(alice, team_agent, agent_stub, action, form):
    interaction = ask(team_agent)
    before = as_stored(interaction)
    code, page = decide(alice, link(interaction, action), **form)
    assert code == 400
    assert 'class="answer-link-refused" role="alert"' in page
    assert as_stored(interaction) == before and agent_stub.requests == []


def test_an_empty_answer_is_refused_and_the_form_is_offered_again(alice, team_agent, agent_stub):
    question = approval("q-1", "Which region?", kind="question")
    interaction = ask(team_agent, status("INPUT_REQUIRED", at=1, metadata=question))
    code, page = decide(alice, link(interaction, "answer"), value="  ")
    assert code == 400 and "write an answer first" in page
    assert '<textarea id="answer-link-value" name="value"' in page
    assert agent_stub.requests == []


def test_an_agent_that_is_down_leaves_the_question_open_and_says_so(alice, team_agent, agent_stub):
    interaction = ask(team_agent)
    agent_stub.close()
    code, page = decide(alice, link(interaction, "approve"), decision="approve")
    assert code == 502 and "Not sent: could not connect" in page
    assert 'name="decision" value="approve">Approve</button>' in page  # try again
    interaction.refresh_from_db()
    assert interaction.state == "open" and Decision.objects.count() == 0


# -- links that stop working ---------------------------------------------------------------


def test_a_link_for_a_closed_round_is_gone(alice, team_agent, agent_stub):
    interaction = ask(team_agent)
    old_approve = link(interaction, "approve")
    push(Client(), team_agent, status("WORKING", at=2), msg_id="working")

    response = alice.get(old_approve)
    assert response.status_code == 410
    assert "The agent no longer waits for this" in response.content.decode()

    interaction = ask(team_agent, at=3)  # asked anew: round 2
    assert interaction.round == 2
    before = as_stored(interaction)
    for response in (alice.get(old_approve), alice.post(old_approve, {"decision": "approve"})):
        assert response.status_code == 410
        page = response.content.decode()
        assert "This link no longer works" in page and "asked it again since" in page
        assert 'name="decision"' not in page
    assert as_stored(interaction) == before and agent_stub.requests == []
    # The new round's link works.
    assert alice.get(link(interaction, "approve")).status_code == 200


def test_a_decided_question_says_who_decided_what(alice, bob, team_agent, agent_stub):
    interaction = ask(team_agent)
    assert decide(alice, link(interaction, "approve"), decision="approve")[0] == 200
    before = as_stored(interaction)

    for response in (
        bob.get(link(interaction, "deny")),
        bob.post(link(interaction, "deny"), {"decision": "deny"}),
    ):
        assert response.status_code == 409
        page = response.content.decode()
        assert "Already decided" in page and "Approved by alice, 10:02" in page
        assert 'name="decision"' not in page
    assert as_stored(interaction) == before
    assert len(messages_to(agent_stub)) == 1


def test_a_question_denied_on_expiry_is_decided(alice, team_agent, agent_stub):
    interaction = ask(team_agent)
    no_one = answers.Decision(approved=False, reason="No one answered within 4 h")
    answers.answer_for_team(interaction, no_one, via="expiry")
    response = alice.get(link(interaction, "approve"))
    assert response.status_code == 409
    page = text(response.content.decode())
    assert "Already decided" in page and "Denied: no one answered within 4 h" in page


def test_a_question_only_marked_expired_can_still_be_answered(alice, team_agent, agent_stub):
    interaction = ask(team_agent)
    Interaction.objects.filter(pk=interaction.pk).update(expired_at=timezone.now())
    page = alice.get(link(interaction, "approve")).content.decode()
    assert "Expired: no one answered in time" in page
    assert decide(alice, link(interaction, "approve"), decision="approve")[0] == 200
    assert len(messages_to(agent_stub)) == 1


def test_a_dismissed_question_says_who_dismissed_it(alice, team_agent, agent_stub):
    interaction = ask(team_agent)
    Interaction.objects.filter(pk=interaction.pk).update(
        state="dismissed", dismissed_by=User.objects.get(username="alice"), dismissed_at=TEN_OH_TWO
    )
    response = alice.get(link(interaction, "deny"))
    assert response.status_code == 409
    assert "Dismissed by alice, 10:02" in response.content.decode()


# -- links that were never ours, and people who may not -------------------------------------


def tampered(token: str) -> str:
    body, stamp, signature = token.rsplit(":", 2)
    flipped = "A" if signature[0] != "A" else "B"
    return f"{body}:{stamp}:{flipped}{signature[1:]}"


def swapped(token: str, payload: list) -> str:
    """The token with another payload under its signature."""
    _, stamp, signature = token.rsplit(":", 2)
    body = signing.b64_encode(json.dumps(payload, separators=(",", ":")).encode()).decode()
    return f"{body}:{stamp}:{signature}"


def test_a_tampered_or_foreign_token_is_a_clear_400(alice, team_agent, agent_stub):
    interaction = ask(team_agent)
    good = answer_links.token(interaction.pk, 1, "approve")
    before = as_stored(interaction)
    foreign = signing.dumps([interaction.pk, 1, "approve"], salt="another.salt", compress=True)
    forged_deny = swapped(good, [interaction.pk, 1, "deny"])
    assert answer_links.read(good).action == "approve"
    for token in (tampered(good), foreign, "garbage", good[:-3], forged_deny, "%00"):
        path = reverse("answer-link", args=(token,))
        for response in (alice.get(path), alice.post(path, {"decision": "approve"})):
            assert response.status_code == 400, token
            page = response.content.decode()
            assert NOT_OURS in page and "Error 400" in page
    assert as_stored(interaction) == before and agent_stub.requests == []


def test_a_signed_link_for_an_action_the_question_never_had_is_not_ours(alice, team_agent):
    question = approval("q-1", "Which region?", kind="question")
    interaction = ask(team_agent, status("INPUT_REQUIRED", at=1, metadata=question))
    response = alice.get(link(interaction, "approve"))
    assert response.status_code == 400 and NOT_OURS in response.content.decode()


def test_another_teams_question_is_not_found(team_agent, agent_stub, approvers):
    interaction = ask(team_agent)
    dev = person("dana", Group.objects.create(name="dev"), approvers)
    for response in (
        dev.get(link(interaction, "approve")),
        dev.post(link(interaction, "approve"), {"decision": "approve"}),
    ):
        assert response.status_code == 404
        page = response.content.decode()
        assert "No such question" in page and PROMPT.splitlines()[0] not in page
    assert agent_stub.requests == []
    missing = reverse("answer-link", args=(answer_links.token(interaction.pk + 99, 1, "approve"),))
    assert dev.get(missing).status_code == 404


def test_someone_without_the_approver_role_sees_the_question_but_cannot_decide(
    ops, team_agent, agent_stub
):
    interaction = ask(team_agent)
    viewer = person("vic", ops)
    response = viewer.get(link(interaction, "approve"))
    assert response.status_code == 403
    page = response.content.decode()
    assert "Deploy release 2.4" in page and "ask for the approver role" in page
    assert 'name="decision"' not in page
    before = as_stored(interaction)
    code, page = decide(viewer, link(interaction, "approve"), decision="approve")
    assert code == 403 and "ask for the approver role" in page
    assert as_stored(interaction) == before and agent_stub.requests == []


def test_who_started_the_task_may_deny_but_not_approve_it(alice, team_agent, agent_stub):
    team_agent.agent.no_self_approval = True
    team_agent.agent.save()
    interaction = ask(team_agent)
    TaskStart.objects.create(
        agent=team_agent.agent,
        task_id=interaction.task.task_id,
        started_by=User.objects.get(username="alice"),
        started_at=TEN_OH_TWO,
    )
    response = alice.get(link(interaction, "approve"))
    assert response.status_code == 403 and "Needs another approver" in response.content.decode()
    code, page = decide(alice, link(interaction, "approve"), decision="approve")
    assert code == 403 and agent_stub.requests == []
    code, page = decide(alice, link(interaction, "deny"), decision="deny")
    assert code == 200 and "Denied by alice" in page


def test_the_post_needs_the_pages_csrf_token(ops, approvers, team_agent, agent_stub):
    interaction = ask(team_agent)
    client = Client(enforce_csrf_checks=True)
    client.force_login(member("alice", ops, approvers))
    path = link(interaction, "approve")

    assert client.post(path, {"decision": "approve"}).status_code == 403
    assert agent_stub.requests == [] and Decision.objects.count() == 0

    page = client.get(path).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)[1]
    response = client.post(path, {"decision": "approve", "csrfmiddlewaretoken": token})
    assert response.status_code == 200 and len(messages_to(agent_stub)) == 1


def test_logging_in_leads_back_to_the_confirm_page_never_to_a_decision(
    ops, approvers, team_agent, agent_stub
):
    interaction = ask(team_agent)
    path = link(interaction, "deny")
    anonymous = Client()

    response = anonymous.get(path)
    assert response.status_code == 302
    assert response.url.startswith("/accounts/login/?next=")
    assert response["Referrer-Policy"] == "strict-origin"
    login_page = anonymous.get(response.url).content.decode()
    assert f'name="next" value="{path}"' in login_page

    user = member("alice", ops, approvers)
    user.set_password("correct horse")
    user.save()
    logged_in = anonymous.post(
        "/accounts/login/", {"username": "alice", "password": "correct horse", "next": path}
    )
    assert (logged_in.status_code, logged_in.url) == (302, path)
    page = anonymous.get(path).content.decode()
    assert "Deny this?" in page
    assert agent_stub.requests == [] and Decision.objects.count() == 0


def test_a_post_without_a_login_decides_nothing(team_agent, agent_stub):
    interaction = ask(team_agent)
    response = Client().post(link(interaction, "approve"), {"decision": "approve"})
    assert response.status_code == 302 and response.url.startswith("/accounts/login/")
    assert agent_stub.requests == [] and Decision.objects.count() == 0


def test_other_methods_are_refused(alice, team_agent):
    interaction = ask(team_agent)
    assert alice.put(link(interaction, "approve")).status_code == 405
    assert alice.delete(link(interaction, "approve")).status_code == 405


# -- link previews and mail scanners ------------------------------------------------------------


@pytest.mark.parametrize("agent_header", BOTS)
@pytest.mark.parametrize("logged_in", [False, True], ids=["no-cookies", "with-cookies"])
def test_a_preview_bot_or_mail_scanner_changes_nothing(
    ops, approvers, team_agent, agent_stub, agent_header, logged_in
):
    interaction = ask(team_agent)
    bot = Client(HTTP_USER_AGENT=agent_header)
    if logged_in:
        bot.force_login(member("alice", ops, approvers))
    before = as_stored(interaction)

    for action in ("approve", "deny"):
        for fetch in (bot.get, bot.head, bot.options):
            response = fetch(link(interaction, action))
            assert response.status_code in ((200, 405) if logged_in else (302, 405))

    assert as_stored(interaction) == before
    assert agent_stub.requests == []


def test_the_same_link_fetched_many_times_then_confirmed_decides_once(
    alice, team_agent, agent_stub
):
    interaction = ask(team_agent)
    path = link(interaction, "approve")
    for _ in range(5):
        assert alice.get(path).status_code == 200
    assert agent_stub.requests == []
    assert decide(alice, path, decision="approve")[0] == 200
    assert decide(alice, path, decision="approve")[0] == 409
    assert len(messages_to(agent_stub)) == 1 and Decision.objects.count() == 1


# -- the round is checked where the claim is made -------------------------------------------


def test_an_answer_for_a_round_that_closed_is_refused_under_the_claim(
    alice, team_agent, agent_stub
):
    interaction = ask(team_agent)
    push(Client(), team_agent, status("WORKING", at=2), msg_id="working")
    interaction = ask(team_agent, at=3)
    user = User.objects.get(username="alice")
    with pytest.raises(answers.RoundClosed):
        answers.answer(user, interaction, answers.Decision(approved=True), via="link", round_=1)
    assert agent_stub.requests == [] and Decision.objects.count() == 0
    interaction.refresh_from_db()
    assert interaction.state == "open"
