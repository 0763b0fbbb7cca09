"""`GET /api/decisions`: the record of decisions as a person may read it, logged in or with an
API token; JSON a page at a time (a signed keyset cursor), JSON lines and CSV streamed whole.

Decisions are made through the real views where the test is about what a decision puts on
the record (a loopback agent, and a real a2a-sdk agent); tests about reading many rows write
them with `record.decided`, the record's one writer.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import warnings
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.test import AsyncClient

from tasks.answering import record
from tasks.api.decisions import CSV_COLUMNS
from tasks.models import Agent, Decision, Interaction
from tasks.sessions import decision_record
from tests.answering.test_a2a_peer import (  # noqa: F401 - fixtures
    add_agent,
    onlooker,
    start_peer,
    wait_for_approval,
    wait_for_state,
)
from tests.answering.test_answers import answer, person
from tests.answering.test_dismiss import dismiss, forgets
from tests.answering.test_one_decision import late_reply
from tests.api.recorded import (
    OPENED,
    ask,
    ids,
    on_record,
    reader,
    streamed,
)
from tests.conftest import make_agent
from tests.peers.misbehaving_agent import ACCEPTED

# -- what a decision puts on the record ---------------------------------------------------------


def test_an_approval_on_the_page_is_one_row_with_who_when_and_a_digest_of_what_was_shown(
    team_agent, agent_stub, approver
):
    interaction = ask(team_agent, detail={"command": "deploy v2", "env": "prod"})
    with time_machine.travel(OPENED + timedelta(seconds=150.7), tick=False):
        assert answer(approver, interaction, decision="approve")[0] == 200

    data = approver.get("/api/decisions").json()

    row = Decision.objects.get()
    assert data == {
        "decisions": [
            {
                "id": row.pk,
                "interaction": "i-1",
                "round": 1,
                "session": interaction.task.session_id,
                "taskId": "task-1",
                "agent": {"id": team_agent.agent.pk, "name": "Builder"},
                "kind": "approval",
                "decision": "approve",
                "value": None,
                "reason": None,
                "by": "alice",
                "via": "page",
                "at": "2026-11-30T12:02:31.700000Z",
                "openedAt": "2026-11-30T12:00:01Z",
                "waitedSeconds": 150,
                "requestDigest": hashlib.sha256(
                    b'{"detail":{"command":"deploy v2","env":"prod"},"prompt":"Ship v2?"}'
                ).hexdigest(),
                "confirmed": True,
            }
        ],
        "next": None,
    }


def test_a_decision_the_agent_has_not_confirmed_reads_false_until_its_reply_comes(
    team_agent, agent_stub, approver, monkeypatch
):
    interaction = ask(team_agent)
    late_reply(agent_stub, monkeypatch)
    assert answer(approver, interaction, decision="deny", reason="Not on a Friday")[0] == 502

    [row] = approver.get("/api/decisions").json()["decisions"]
    assert (row["decision"], row["reason"], row["confirmed"]) == ("deny", "Not on a Friday", False)

    agent_stub.answer(ACCEPTED)
    assert answer(approver, interaction, decision="deny")[0] == 200  # the retry's reply came
    [row] = approver.get("/api/decisions").json()["decisions"]
    assert (row["decision"], row["by"], row["confirmed"]) == ("deny", "alice", True)


def test_a_dismissal_is_on_the_record_and_is_never_confirmed_since_it_is_not_sent(
    team_agent, agent_stub, approver
):
    interaction = ask(team_agent)
    forgets(agent_stub)
    assert answer(approver, interaction, decision="approve")[0] == 502  # nothing was sent
    assert dismiss(approver, interaction)[0] == 200

    [row] = approver.get("/api/decisions").json()["decisions"]
    assert (row["decision"], row["by"], row["via"]) == ("dismiss", "alice", "page")
    assert row["confirmed"] is None
    assert row["reason"]


def test_a_real_agents_decision_is_on_the_record_as_made_and_confirmed(
    onlooker,  # noqa: F811 - fixtures imported from test_a2a_peer
    start_peer,  # noqa: F811
    ops,
    approvers,
):
    peer = start_peer()
    registration = add_agent(peer.card_url, "--team", "ops")
    task = wait_for_approval(peer, registration)
    interaction = Interaction.objects.get(task__task_id=task["id"])
    alice = person("alice", ops, approvers)

    assert answer(alice, interaction, decision="deny", reason="Wrong week")[0] == 200
    wait_for_state(peer, registration, task, "TASK_STATE_REJECTED")

    [row] = alice.get("/api/decisions").json()["decisions"]
    assert row["interaction"] == interaction.interaction_id
    assert row["agent"] == {"id": registration["agent"], "name": interaction.task.agent.name}
    assert (row["decision"], row["reason"], row["by"], row["via"]) == (
        "deny",
        "Wrong week",
        "alice",
        "page",
    )
    assert row["confirmed"] is True
    assert row["requestDigest"] == record.request_digest(interaction.prompt, interaction.detail)


# -- who reads what -----------------------------------------------------------------------------


def test_a_person_reads_their_teams_rows_and_those_of_agents_without_a_team(
    three, alice, bob, charlie
):
    assert ids(reader(alice).get("/api/decisions").json()) == [three["ops"].pk, three["open"].pk]
    assert ids(reader(bob).get("/api/decisions").json()) == [three["dev"].pk, three["open"].pk]
    assert ids(reader(charlie).get("/api/decisions").json()) == [three["open"].pk]


def test_a_superuser_reads_every_row(three):
    root = User.objects.create_superuser("root")
    assert ids(reader(root).get("/api/decisions").json()) == [r.pk for r in three.values()]


def test_a_row_stays_with_the_team_its_agent_had_when_it_was_made(three, alice, bob, dev):
    Agent.objects.filter(name="ops bot").update(team=dev)

    assert three["ops"].pk in ids(reader(alice).get("/api/decisions").json())
    assert three["ops"].pk not in ids(reader(bob).get("/api/decisions").json())


# -- pages --------------------------------------------------------------------------------------


def test_pages_follow_next_in_order_across_equal_times_without_repeats_or_gaps(team_agent, alice):
    interaction = ask(team_agent)
    later = OPENED + timedelta(minutes=5)
    # Written out of time order, many at the very same moment.
    made = [on_record(interaction, at=later, round_=n) for n in range(1, 6)]
    made += [on_record(interaction, at=OPENED, round_=n) for n in range(6, 10)]
    expected = [r.pk for r in sorted(made, key=lambda r: (r.at, r.pk))]

    client, seen, url, pages = reader(alice), [], "/api/decisions?limit=2", 0
    while url:
        data = client.get(url).json()
        seen += ids(data)
        url, pages = data["next"], pages + 1

    assert seen == expected
    assert pages == 5


def test_next_keeps_the_filters(team_agent, alice):
    interaction = ask(team_agent)
    for n in range(1, 4):
        on_record(interaction, at=OPENED + timedelta(hours=n), round_=n)
    url = f"/api/decisions?limit=1&since=2026-11-30T13:00:00Z&agent={team_agent.agent.pk}"
    first = reader(alice).get(url).json()
    assert "since=2026-11-30T13%3A00%3A00Z" in first["next"]
    assert f"agent={team_agent.agent.pk}" in first["next"]
    second = reader(alice).get(first["next"]).json()
    assert [r["round"] for r in first["decisions"] + second["decisions"]] == [1, 2]


@pytest.mark.parametrize(
    "after",
    [
        "garbage",
        "WzE3OTYwNDAwMDEwMDAwMDAsM10:1xZaF2:tLkxOiMqWlL_Mraktjks1-nMQple7UwOKl3UDxF",
        "x" * 400,
    ],
)
def test_a_cursor_the_list_did_not_give_is_a_400(team_agent, alice, after):
    response = reader(alice).get("/api/decisions", {"after": after})
    assert response.status_code == 400
    assert response.json() == {
        "error": "bad cursor",
        "detail": "after is the cursor of a `next` link, as given",
    }


def test_a_tampered_cursor_is_a_400(team_agent, alice):
    interaction = ask(team_agent)
    for n in range(1, 4):
        on_record(interaction, round_=n)
    cursor = reader(alice).get("/api/decisions?limit=1").json()["next"].split("after=")[1]
    payload, rest = cursor.split("%3A", 1)
    forged = payload[:-1] + ("A" if payload[-1] != "A" else "B") + "%3A" + rest
    assert reader(alice).get(f"/api/decisions?after={forged}").status_code == 400


@pytest.mark.parametrize("limit", ["0", "1001", "ten", "-1"])
def test_a_limit_out_of_range_is_a_400(alice, limit):
    response = reader(alice).get("/api/decisions", {"limit": limit})
    assert response.status_code == 400
    assert response.json()["detail"] == "limit is a number from 1 to 1000"


# -- filters ------------------------------------------------------------------------------------


@pytest.fixture
def over_a_day(team_agent):
    """Rows at 23:00 on Nov 30, midnight and 10:00 on Dec 1 (UTC): [row, row, row]."""
    interaction = ask(team_agent)
    times = [
        datetime(2026, 11, 30, 23, 0, tzinfo=UTC),
        datetime(2026, 12, 1, 0, 0, tzinfo=UTC),
        datetime(2026, 12, 1, 10, 0, tzinfo=UTC),
    ]
    return [on_record(interaction, at=at, round_=n) for n, at in enumerate(times, 1)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"since": "2026-12-01"}, [1, 2]),
        ({"until": "2026-12-01"}, [0]),  # until is exclusive
        ({"since": "2026-12-01T00:00:01Z"}, [2]),
        ({"since": "2026-12-01T01:00:00+01:00"}, [1, 2]),  # midnight UTC
        ({"since": "2026-11-30T23:00:00", "until": "2026-12-01T10:00:00Z"}, [0, 1]),
        ({"since": "2026-12-01", "until": "2026-12-01"}, []),
    ],
)
def test_since_and_until_bound_the_time_a_decision_was_made(over_a_day, alice, query, expected):
    data = reader(alice).get("/api/decisions", query).json()
    assert ids(data) == [over_a_day[n].pk for n in expected]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("since", "yesterday"),
        ("until", "2026-13-01"),
        ("since", "2026-12-01T10:00:00 01:00"),  # a '+' sent unencoded arrives as a space
        ("until", "0001-01-01T00:00:00+01:00"),
    ],
)
def test_a_time_that_is_not_iso_8601_is_a_400_saying_what_is(alice, name, value):
    response = reader(alice).get("/api/decisions", {name: value})
    assert response.status_code == 400
    assert response.json()["error"] == f"bad {name}"
    assert response.json()["detail"].startswith(f"{name} is an ISO 8601 date (2026-12-01)")


def test_since_after_until_is_a_400(alice):
    response = reader(alice).get("/api/decisions?since=2026-12-02&until=2026-12-01")
    assert response.json() == {"error": "bad range", "detail": "since is later than until"}


def test_the_agent_filter_reads_one_agent_even_one_since_deleted(three, alice):
    client = reader(alice)
    ops_agent = three["ops"].agent_pk
    assert ids(client.get(f"/api/decisions?agent={ops_agent}").json()) == [three["ops"].pk]

    Agent.objects.filter(pk=ops_agent).delete()

    assert ids(client.get(f"/api/decisions?agent={ops_agent}").json()) == [three["ops"].pk]


@pytest.mark.parametrize("which", ["dev", "nowhere"])
def test_an_agent_one_may_not_see_is_a_404(three, alice, which):
    agent = three["dev"].agent_pk if which == "dev" else 987654
    response = reader(alice).get(f"/api/decisions?agent={agent}")
    assert response.status_code == 404
    assert response.json() == {
        "error": "unknown agent",
        "detail": f"no agent {agent} that you may see",
    }


def test_an_agent_that_is_not_an_id_is_a_400(alice):
    response = reader(alice).get("/api/decisions?agent=ops")
    assert (response.status_code, response.json()["error"]) == (400, "bad agent")


def test_an_unknown_format_is_a_400(alice):
    response = reader(alice).get("/api/decisions?format=xml")
    assert response.json() == {
        "error": "bad format",
        "detail": "format is json (the default), jsonl or csv",
    }


# -- jsonl and csv ------------------------------------------------------------------------------


def test_jsonl_streams_every_row_of_the_range_as_the_json_pages_give_them(team_agent, alice):
    interaction = ask(team_agent)
    count = decision_record.BATCH + 1  # two batches
    for n in range(1, count + 1):
        at = OPENED + timedelta(seconds=n // 7)  # runs of equal times across the batches
        interaction.round = n
        made = "deny" if n % 3 else "approve"
        record.decided(interaction, made, by=alice, via="page", at=at, sent=True)
    client = reader(alice)
    first = client.get("/api/decisions?limit=1000").json()
    assert first["next"] is None

    response = client.get("/api/decisions?format=jsonl")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson"
    assert 'filename="decisions.jsonl"' in response["Content-Disposition"]
    lines = streamed(response).splitlines()
    assert len(lines) == count
    assert [json.loads(line) for line in lines] == first["decisions"]


def test_csv_streams_a_header_and_a_row_each_with_the_agent_in_two_columns(team_agent, alice):
    interaction = ask(team_agent)
    on_record(interaction, "approve", by=alice, at=OPENED + timedelta(seconds=30), round_=1)
    on_record(
        interaction,
        "dismiss",
        by=alice,
        sent=False,
        round_=2,
        reason="gone",
        at=OPENED + timedelta(minutes=1),
    )

    response = reader(alice).get("/api/decisions?format=csv&agent=" + str(team_agent.agent.pk))

    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="decisions.csv"'
    header, approved, dismissed = list(csv.reader(io.StringIO(streamed(response))))
    assert header[:9] == [
        "id",
        "interaction",
        "round",
        "session",
        "taskId",
        "agent_id",
        "agent_name",
        "kind",
        "decision",
    ]
    row = dict(zip(header, approved, strict=True))
    assert (row["agent_id"], row["agent_name"]) == (str(team_agent.agent.pk), "Builder")
    assert (row["by"], row["waitedSeconds"], row["confirmed"], row["reason"]) == (
        "alice",
        "30",
        "false",
        "",
    )
    row = dict(zip(header, dismissed, strict=True))
    assert (row["decision"], row["confirmed"], row["reason"]) == ("dismiss", "", "gone")


@pytest.mark.parametrize(
    "text", ['=HYPERLINK("http://evil.test","x")', "+1+2", "-2+3", "@SUM(A1:A2)", "\t=1"]
)
def test_csv_cells_a_spreadsheet_would_run_as_a_formula_start_with_a_quote(ops, alice, text):
    evil = make_agent(team=ops, name=text)
    interaction = ask(evil, kind="question")
    on_record(interaction, "answer", by=alice, value=text, reason=text)

    [_, row] = list(
        csv.reader(io.StringIO(streamed(reader(alice).get("/api/decisions?format=csv"))))
    )
    header = list(CSV_COLUMNS)
    cells = dict(zip(header, row, strict=True))
    assert cells["value"] == cells["reason"] == cells["agent_name"] == "'" + text
    # JSON keeps what was written, exactly.
    [shown] = reader(alice).get("/api/decisions").json()["decisions"]
    assert shown["value"] == shown["reason"] == shown["agent"]["name"] == text


def test_a_stream_with_nothing_in_range_is_its_header_alone(alice):
    body = streamed(reader(alice).get("/api/decisions?format=csv"))
    assert body.splitlines() == [",".join(CSV_COLUMNS)]
    assert streamed(reader(alice).get("/api/decisions?format=jsonl")) == ""


def test_over_asgi_a_stream_is_sent_as_it_is_read_not_gathered_first(team_agent, alice):
    """Onlooker is served over ASGI, where Django reads a synchronous iterator whole (with a
    warning) before sending any of it: the record's streams are asynchronous."""
    interaction = ask(team_agent)
    for n in range(1, 4):
        on_record(interaction, round_=n)
    client = AsyncClient()

    async def fetch() -> tuple[object, list[bytes]]:
        await client.aforce_login(alice)
        response = await client.get("/api/decisions?format=jsonl")
        return response, [part async for part in response]

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Django's "must consume synchronous iterators"
        response, parts = async_to_sync(fetch)()

    assert response.status_code == 200
    assert len(b"".join(parts).splitlines()) == 3
