"""Migration 0025 seals the credentials an earlier version kept in the clear, and migrating
back opens them again: the database as 0024 left it, migrated forwards and back for real."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from django.conf import settings
from django.db import connection

from tests.migrating import migrate_to, migrate_to_latest, old_agent

# In the long checks (-m slow; .ci/run runs them on both databases): it migrates the schema
# back and forth, and the default run must stay inside its time budget.
pytestmark = pytest.mark.slow

BEFORE = ("tasks", "0024_decisions_append_only")
SEALING = ("tasks", "0025_each_person_answers_as_themselves")
CREDENTIAL = "Bearer cleartext-credential-from-0024"
SIGNING = "whsec_Y2xlYXJ0ZXh0LXNpZ25pbmctc2VjcmV0LWZyb20tMDAyNA=="
TARGET = "https://hooks.slack.test/services/T0/B0/cleartext-path-from-0024"


def as_stored(table: str, column: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {table}")  # noqa: S608
        [(value,)] = cursor.fetchall()
    return value


def opened(token: str) -> str:
    keys = [Fernet(key) for key in settings.ONLOOKER_CREDENTIAL_KEYS]
    for key in keys:
        try:
            return key.decrypt(token.encode()).decode()
        except Exception:
            continue
    raise AssertionError("no configured key opens the stored value")


@pytest.mark.django_db(transaction=True)
def test_migrating_seals_cleartext_credentials_and_migrating_back_opens_them():
    try:
        old = migrate_to(BEFORE)
        team = old.get_model("auth", "Group").objects.create(name="ops")
        old_agent(old, "Kept in the clear", credential=CREDENTIAL, signing_secret=SIGNING)
        old.get_model("tasks", "NotificationChannel").objects.create(
            team=team, kind="slack", target=TARGET
        )
        assert as_stored("tasks_agent", "credential") == CREDENTIAL

        sealed = migrate_to(SEALING)

        for table, column, plain in (
            ("tasks_agent", "credential", CREDENTIAL),
            ("tasks_agent", "signing_secret", SIGNING),
            ("tasks_notificationchannel", "target", TARGET),
        ):
            stored = as_stored(table, column)
            assert plain not in stored, f"{table}.{column} is still in the clear"
            assert opened(stored) == plain
        assert as_stored("tasks_agent", "previous_signing_secret") == ""  # empty stays empty
        agent = sealed.get_model("tasks", "Agent").objects.get()
        assert (agent.credential, agent.signing_secret) == (CREDENTIAL, SIGNING)
        assert sealed.get_model("tasks", "NotificationChannel").objects.get().target == TARGET

        migrate_to(BEFORE)

        assert as_stored("tasks_agent", "credential") == CREDENTIAL
        assert as_stored("tasks_agent", "signing_secret") == SIGNING
        assert as_stored("tasks_notificationchannel", "target") == TARGET
    finally:
        migrate_to_latest()
