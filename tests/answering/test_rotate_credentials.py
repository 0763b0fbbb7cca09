"""`manage.py rotate_credentials`: every sealed value of every model is sealed again under the
newest key, so the older key can be dropped; a value no configured key opens is named (never
shown) and left as it is, and the command exits with status 1."""

from __future__ import annotations

import io

import pytest
from cryptography.fernet import Fernet
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, ManagementUtility, call_command
from django.db import connection
from django.test import override_settings

from tasks.answering import credential_keys
from tasks.models import Agent, NotificationChannel, PersonalCredential

KEY_A = Fernet.generate_key().decode()
KEY_B = Fernet.generate_key().decode()
KEY_C = Fernet.generate_key().decode()

pytestmark = pytest.mark.django_db


def stored(table: str, column: str, pk: int) -> str:
    """The column as the database holds it (the field would open it)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {table} WHERE id = %s", [pk])  # noqa: S608
        return cursor.fetchone()[0]


def opens_with(key: str, token: str) -> bool:
    try:
        Fernet(key).decrypt(token.encode())
    except Exception:
        return False
    return True


def credentials_under(key: str) -> tuple[Agent, NotificationChannel, PersonalCredential]:
    with override_settings(ONLOOKER_CREDENTIAL_KEYS=[key]):
        agent = Agent.objects.create(
            name="Rotated",
            card_url="http://agent.test/.well-known/agent-card.json",
            rpc_url="http://agent.test/a2a/jsonrpc",
            protocol_version="1.0",
            credential="Bearer shared-credential",
            signing_secret="whsec_c2lnbmluZy1zZWNyZXQtZm9yLXJvdGF0aW9u",
            oauth_client_secret="client-secret",
        )
        channel = NotificationChannel.objects.create(
            team=Group.objects.get_or_create(name="ops")[0],
            kind=NotificationChannel.Kind.SLACK,
            target="https://hooks.slack.test/services/T0/B0/slack-path-secret",
            slack_signing_secret="slack-signing-secret",
        )
        personal = PersonalCredential.objects.create(
            user=User.objects.get_or_create(username="alice")[0],
            agent=agent,
            kind="token",
            secret="Bearer alice-own",
        )
    return agent, channel, personal


def rotate() -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("rotate_credentials", stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_every_sealed_field_of_every_model_is_found():
    found = {f"{model._meta.label}.{f.name}" for model, f in credential_keys.sealed_fields()}
    assert found >= {  # and any sealed field added later
        "tasks.Agent.credential",
        "tasks.Agent.signing_secret",
        "tasks.Agent.previous_signing_secret",
        "tasks.Agent.oauth_client_secret",
        "tasks.NotificationChannel.target",
        "tasks.NotificationChannel.signing_secret",
        "tasks.NotificationChannel.slack_signing_secret",
        "tasks.PersonalCredential.secret",
        "tasks.PersonalCredential.refresh_token",
    }


def test_after_rotating_to_a_new_key_everything_reads_back_with_only_the_new_key():
    agent, channel, personal = credentials_under(KEY_A)
    before = stored("tasks_agent", "credential", agent.pk)
    assert opens_with(KEY_A, before)

    with override_settings(ONLOOKER_CREDENTIAL_KEYS=[KEY_B, KEY_A]):
        out, err = rotate()
    assert "tasks.Agent.credential: 1 resealed, 0 already under the newest key" in out
    assert "tasks.Agent.signing_secret: 1 resealed" in out
    assert "tasks.Agent.previous_signing_secret: 0 resealed" in out  # empty stays empty
    assert "tasks.NotificationChannel.target: 1 resealed" in out
    assert "tasks.PersonalCredential.secret: 1 resealed" in out
    assert err == ""
    after = stored("tasks_agent", "credential", agent.pk)
    assert opens_with(KEY_B, after) and not opens_with(KEY_A, after)
    assert stored("tasks_agent", "previous_signing_secret", agent.pk) == ""

    with override_settings(ONLOOKER_CREDENTIAL_KEYS=[KEY_B]):
        agent = Agent.objects.get(pk=agent.pk)
        assert agent.credential == "Bearer shared-credential"
        assert agent.signing_secret == "whsec_c2lnbmluZy1zZWNyZXQtZm9yLXJvdGF0aW9u"
        assert agent.oauth_client_secret == "client-secret"
        channel = NotificationChannel.objects.get(pk=channel.pk)
        assert channel.target == "https://hooks.slack.test/services/T0/B0/slack-path-secret"
        assert channel.slack_signing_secret == "slack-signing-secret"
        assert PersonalCredential.objects.get(pk=personal.pk).secret == "Bearer alice-own"


def test_rotating_again_changes_nothing_already_under_the_newest_key():
    agent, _, _ = credentials_under(KEY_A)
    with override_settings(ONLOOKER_CREDENTIAL_KEYS=[KEY_B, KEY_A]):
        rotate()
        once = stored("tasks_agent", "credential", agent.pk)
        out, _ = rotate()
    assert "tasks.Agent.credential: 0 resealed, 1 already under the newest key" in out
    assert stored("tasks_agent", "credential", agent.pk) == once


def test_rows_are_rotated_a_batch_at_a_time_past_the_first_batch(monkeypatch):
    monkeypatch.setattr(credential_keys, "BATCH", 2)
    with override_settings(ONLOOKER_CREDENTIAL_KEYS=[KEY_A]):
        agents = [
            Agent.objects.create(
                name=f"A{number}",
                card_url=f"http://agent{number}.test/.well-known/agent-card.json",
                rpc_url=f"http://agent{number}.test/a2a/jsonrpc",
                protocol_version="1.0",
                credential=f"Bearer credential-{number}",
            )
            for number in range(5)
        ]
    with override_settings(ONLOOKER_CREDENTIAL_KEYS=[KEY_B, KEY_A]):
        tallies = credential_keys.rotate(batch=2)
    [tally] = [t for t in tallies if (t.model, t.field) == ("tasks.Agent", "credential")]
    assert tally.resealed == 5
    with override_settings(ONLOOKER_CREDENTIAL_KEYS=[KEY_B]):
        assert [Agent.objects.get(pk=a.pk).credential for a in agents] == [
            f"Bearer credential-{number}" for number in range(5)
        ]


def test_a_value_under_an_unknown_key_is_named_and_left_untouched_and_the_rest_rotates():
    lost, _, _ = credentials_under(KEY_C)
    kept, _, _ = credentials_under(KEY_A)
    lost_token = stored("tasks_agent", "credential", lost.pk)

    with override_settings(ONLOOKER_CREDENTIAL_KEYS=[KEY_B, KEY_A]):
        out, err = io.StringIO(), io.StringIO()
        with pytest.raises(CommandError) as refused:
            call_command("rotate_credentials", stdout=out, stderr=err)

    assert f"tasks.Agent {lost.pk}: its credential opens with no configured key" in err.getvalue()
    assert f"tasks.Agent {lost.pk}: its signing_secret opens" in err.getvalue()
    assert "open with no key in ONLOOKER_CREDENTIAL_KEYS" in str(refused.value)
    # Named, never shown: neither the plain value nor the stored token.
    said = out.getvalue() + err.getvalue() + str(refused.value)
    assert "shared-credential" not in said and lost_token not in said
    assert "tasks.Agent.credential: 1 resealed, 0 already under the newest key, 1 no key" in said
    assert stored("tasks_agent", "credential", lost.pk) == lost_token
    assert opens_with(KEY_B, stored("tasks_agent", "credential", kept.pk))
    with override_settings(ONLOOKER_CREDENTIAL_KEYS=[KEY_C]):
        assert Agent.objects.get(pk=lost.pk).credential == "Bearer shared-credential"


def test_the_command_line_exits_with_status_1_when_a_value_opens_with_no_key(capsys):
    credentials_under(KEY_C)
    with override_settings(ONLOOKER_CREDENTIAL_KEYS=[KEY_B]), pytest.raises(SystemExit) as exited:
        ManagementUtility(["manage.py", "rotate_credentials"]).execute()
    assert exited.value.code == 1
    assert "left as they are" in capsys.readouterr().err


def test_the_command_line_exits_with_status_0_when_every_value_is_rotated(capsys):
    credentials_under(KEY_A)
    with override_settings(ONLOOKER_CREDENTIAL_KEYS=[KEY_B, KEY_A]):
        ManagementUtility(["manage.py", "rotate_credentials"]).execute()
    assert (
        "Every stored credential is under the newest key (6 resealed)." in capsys.readouterr().out
    )
