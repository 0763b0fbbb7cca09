"""Reading the record with a person's API token (`Authorization: Bearer onl_…`), made by
`create_api_token` and revoked by `revoke_api_token`: it reads as its person, only while the
person is active, only the record; anything else in the header is a 401 that reads nothing."""

from __future__ import annotations

import hashlib
import io
import json
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.test import Client

from tasks.models import ApiToken
from tests.api.recorded import bearer, ids, reader, token_for


def test_a_token_reads_as_its_person_and_only_its_digest_is_kept(three, bob):
    made = token_for("bob", "--name", "audit export")

    response = Client().get("/api/decisions", **bearer(made["token"]))

    assert response.status_code == 200
    assert ids(response.json()) == [three["dev"].pk, three["open"].pk]
    assert made["token"].startswith("onl_") and len(made["token"]) >= 40
    stored = ApiToken.objects.get(pk=made["id"])
    assert (stored.user, stored.name) == (bob, "audit export")
    assert stored.digest == hashlib.sha256(made["token"].encode()).hexdigest()
    assert made["token"] not in json.dumps(list(ApiToken.objects.values()), default=str)


def test_a_token_of_another_team_reads_none_of_this_teams_rows(three, bob):
    made = token_for("bob")
    data = Client().get("/api/decisions", **bearer(made["token"])).json()
    assert three["ops"].pk not in ids(data)
    response = Client().get(
        f"/api/decisions?agent={three['ops'].agent_pk}", **bearer(made["token"])
    )
    assert response.status_code == 404


def test_a_token_notes_its_last_use_at_most_once_a_minute(bob):
    made = token_for("bob")
    start = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

    def used_at(when: datetime) -> datetime | None:
        with time_machine.travel(when, tick=False):
            assert Client().get("/api/decisions", **bearer(made["token"])).status_code == 200
        return ApiToken.objects.get(pk=made["id"]).last_used_at

    assert ApiToken.objects.get(pk=made["id"]).last_used_at is None
    assert used_at(start) == start
    assert used_at(start + timedelta(seconds=59)) == start
    assert used_at(start + timedelta(seconds=61)) == start + timedelta(seconds=61)


def test_without_login_or_token_it_is_a_401_saying_how_to_authenticate(three):
    response = Client().get("/api/decisions")
    assert response.status_code == 401
    assert response.json()["error"] == "authentication required"
    assert "create_api_token" in response.json()["detail"]
    assert response["WWW-Authenticate"] == 'Bearer realm="onlooker"'


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        ("Bearer onl_" + "A" * 43, "this token is unknown or revoked"),
        ("Bearer not-a-token", "the token is not an Onlooker API token (onl_…)"),
        ("Basic YWxpY2U6c2VjcmV0", "the Authorization header is 'Bearer onl_…'"),
        ("Bearer", "the Authorization header is 'Bearer onl_…'"),
    ],
)
def test_a_bad_token_is_a_401_and_reads_nothing(three, header, detail):
    response = Client().get("/api/decisions", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert response.json()["detail"].startswith(detail)
    assert "invalid_token" in response["WWW-Authenticate"]


def test_a_bad_token_is_refused_even_beside_a_session_cookie(three, alice):
    response = reader(alice).get("/api/decisions", HTTP_AUTHORIZATION="Bearer onl_" + "B" * 43)
    assert response.status_code == 401


def test_a_revoked_token_and_a_deactivated_persons_token_are_refused(three, alice, bob):
    gone, kept = token_for("bob"), token_for("alice")
    call_command("revoke_api_token", str(gone["id"]), stdout=io.StringIO())
    response = Client().get("/api/decisions", **bearer(gone["token"]))
    assert (response.status_code, response.json()["detail"]) == (
        401,
        "this token is unknown or revoked",
    )

    alice.is_active = False
    alice.save()
    response = Client().get("/api/decisions", **bearer(kept["token"]))
    assert (response.status_code, response.json()["detail"]) == (
        401,
        "this token's person is deactivated",
    )


def test_revoking_names_tokens_by_id_or_person_and_an_unknown_id_revokes_nothing(alice, bob):
    first, second, third = token_for("alice"), token_for("alice"), token_for("bob")
    with pytest.raises(CommandError, match="no token 999: none revoked"):
        call_command("revoke_api_token", str(first["id"]), "999")
    assert ApiToken.objects.count() == 3
    call_command("revoke_api_token", "--user", "alice", stdout=io.StringIO())
    assert list(ApiToken.objects.values_list("pk", flat=True)) == [third["id"]]
    with pytest.raises(CommandError, match="no person is called 'nobody'"):
        token_for("nobody")
    assert second["id"] != first["id"]


def test_a_token_opens_the_record_only_not_the_other_endpoints(bob):
    made = token_for("bob")
    assert Client().get("/api/sessions", **bearer(made["token"])).status_code == 401
