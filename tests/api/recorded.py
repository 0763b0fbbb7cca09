"""Helpers the tests of the record of decisions share: an agent asks (a push), rows written
through the record's one writer, a person's client, API tokens made by the command."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta

from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from tasks.answering import record
from tasks.models import Decision, Interaction
from tests.builders import EPOCH, approval, status
from tests.conftest import RegisteredAgent, push

OPENED = EPOCH + timedelta(seconds=1)  # the status timestamp of `ask`'s push (at=1)


def ask(
    registered: RegisteredAgent, task: str = "task-1", interaction_id: str = "i-1", **question
) -> Interaction:
    """The agent asks (a push): its open interaction, with task, session and agent loaded."""
    metadata = approval(interaction_id, question.pop("prompt", "Ship v2?"), **question)
    body = status("AUTH_REQUIRED", task=task, context=f"ctx-{task}", at=1, metadata=metadata)
    assert push(Client(), registered, body).status_code == 200
    return Interaction.objects.select_related("task__session__agent").get(
        task__task_id=task, task__agent=registered.agent, interaction_id=interaction_id
    )


def on_record(
    interaction: Interaction,
    made: str = "approve",
    *,
    by: User | None = None,
    via: str = "page",
    at: datetime | None = None,
    sent: bool = True,
    round_: int | None = None,
    **more,
) -> Decision:
    """Write one row through the record's writer, for round `round_` (rows of one question
    differ by round or by decision)."""
    if round_ is not None:
        interaction.round = round_
    at = at or interaction.opened_at
    record.decided(interaction, made, by=by, via=via, at=at, sent=sent, **more)
    return Decision.objects.latest("id")


def reader(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def token_for(username: str, *options: str) -> dict:
    out = io.StringIO()
    call_command("create_api_token", username, "--json", *options, stdout=out)
    return json.loads(out.getvalue())


def bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def streamed(response) -> str:
    """A streamed answer's whole body (its iterator is asynchronous, as served over ASGI)."""
    assert response.streaming and response.is_async

    async def read() -> bytes:
        return b"".join([part async for part in response.streaming_content])

    return async_to_sync(read)().decode()


def ids(data: dict) -> list[int]:
    return [row["id"] for row in data["decisions"]]
