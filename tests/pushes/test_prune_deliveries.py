"""prune_deliveries forgets old raw pushes and keeps what they changed."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
import time_machine
from django.core.management import CommandError, call_command

from tasks.models import Delivery, Session
from tests.builders import status
from tests.conftest import NOW, make_agent, push


def prune(*options: str) -> str:
    out = io.StringIO()
    call_command("prune_deliveries", *options, stdout=out)
    return out.getvalue()


def test_old_deliveries_go_and_what_they_changed_stays(client, db):
    registered = make_agent()
    with time_machine.travel(NOW - timedelta(days=40), tick=False):
        push(client, registered, status("WORKING", at=1, context="old"))
    with time_machine.travel(NOW, tick=False):
        push(client, registered, status("WORKING", at=2, context="new"))
        assert (
            prune("--older-than", "30d", "--dry-run") == "1 deliveries older than 30d would go.\n"
        )
        assert Delivery.objects.count() == 2
        assert prune("--older-than", "30d") == "Deleted 1 deliveries older than 30d.\n"
    assert Delivery.objects.count() == 1
    assert Session.objects.filter(context_id="old").exists()


@pytest.mark.parametrize(("age", "words"), [("30", "give an age like"), ("1d", "at least 2d")])
def test_a_bad_or_too_young_age_is_refused(db, age, words):
    with pytest.raises(CommandError, match=words):
        prune("--older-than", age)


def test_a_delivery_not_applied_yet_is_kept_however_old(client, db, settings):
    registered = make_agent()
    settings.ONLOOKER_APPLIER = "external"  # kept, and never applied: its apply keeps failing
    with time_machine.travel(NOW - timedelta(days=40), tick=False):
        push(client, registered, status("WORKING", at=1, context="stuck"))
    with time_machine.travel(NOW, tick=False):
        assert prune("--older-than", "30d") == "Deleted 0 deliveries older than 30d.\n"
    assert Delivery.objects.get().outcome == "pending"
