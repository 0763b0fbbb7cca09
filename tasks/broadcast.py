"""The only place that talks to the channel layer: hints to browsers, sent after commit.

A broadcast is a hint, never the truth: browsers refetch from the database on (re)connect,
so a message lost here (a channel layer that is down, a full group) costs nothing but
latency. That is why sending failures are logged and swallowed: the push was committed
and must still be acknowledged.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from tasks.models import Session

log = logging.getLogger(__name__)


def team_group(team_id: int | None) -> str:
    return f"team.{team_id}" if team_id is not None else "team.all"


def session_group(session_id: int) -> str:
    return f"session.{session_id}"


def session_changed(session: Session, *, team_id: int | None, revision: int | None) -> None:
    message = {
        "type": "session.changed",
        "session": session.pk,
        "revision": revision,
        "state": session.state,
        "needsHuman": session.needs_human,
    }
    groups = [team_group(team_id), session_group(session.pk)]
    transaction.on_commit(lambda: _send(groups, message))


def _send(groups: list[str], message: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        for group in groups:
            async_to_sync(layer.group_send)(group, message)
    except Exception as error:  # noqa: BLE001 - any layer failure must not fail the push
        log.warning("broadcast to %s failed: %s", groups, error)
