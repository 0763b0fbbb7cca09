"""Live sockets end when access ends: one sweep per event loop checks every open socket about
once a second and closes those whose person may no longer see what they joined.

A socket is authorised once, at its handshake; without this it would keep hearing a team's
sessions after a logout, a password change, a deactivation or a team change. Re-checking on
every message would cost a few queries per socket per message (thousands per second at 1,000
sockets: `python -m tests.benchmarks socket_access`); the sweep costs a few batched queries
per second whatever the number of sockets, off the event loop, and ends access within
SWEEP_EVERY plus one sweep. No model signals (DESIGN.md): nothing has to remember to tell
the sockets; the sweep reads what is true.

A socket is checked against:
- its Django session: still stored, unexpired, naming the same user with an auth hash that
  matches the user's password now (Django's own rule, fallback secrets included), through an
  authentication backend still configured: else it closes with CLOSE_LOGGED_OUT;
- the user: still there and active: else CLOSE_LOGGED_OUT;
- the groups it joined: still all allowed (`allowed_groups`): else CLOSE_ACCESS_CHANGED, and
  the page reconnects at once to join what it may see now.

Only database-backed session engines (the default, and cached_db) are read in batches; with
another engine each socket's session is loaded on its own. A signed-cookie session cannot be
ended on the server at all: with that engine only deactivation and team changes are seen.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from importlib import import_module

from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.auth.models import Group
from django.db import DatabaseError
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from tasks.live import broadcast
from tasks.models import Session
from tasks.runtime import outage

log = logging.getLogger(__name__)

SWEEP_EVERY = 1.0  # seconds between the end of one sweep and the start of the next
CLOSE_LOGGED_OUT = 4401  # the page reloads, and the server asks the person to log in
CLOSE_ACCESS_CHANGED = 4403  # the page reconnects and joins what it may see now
BATCH = 500  # ids per IN (…): far below every database's limit on parameters


@dataclass(eq=False)
class Watched:
    """One open socket, as the sweep sees it."""

    user_id: int
    session_key: str
    page_session: int | None
    groups: frozenset[str]
    revoke: Callable[[int], Awaitable[None]]
    # (stored session data, password hash) last found valid: while neither changes, the
    # session needs no decoding (an HMAC and a zlib inflate per socket per second).
    verified: tuple[str, str] | None = None


def allowed_groups(users: dict[int, bool], wanted: list[tuple[int, int | None]]) -> list[set[str]]:
    """The groups each (user id, page session) may join, in a few queries for all of them:
    everyone's group, the user's teams (every team for a superuser), and the page's session
    if the user may see it. `users` maps each user id to whether it is a superuser.

    The same rule as `AgentQuerySet.visible_to` (agents without a team are everyone's, a
    team's agents are its members'), evaluated in Python so that 1,000 sockets cost a few
    queries rather than a few each. Handshakes use this function too: a socket must never
    join what the sweep would then take away, or it would be closed and rejoin forever."""
    teams: dict[int, set[int]] = {user_id: set() for user_id in users}
    memberships = get_user_model().groups.through.objects
    for chunk in _chunks(u for u, superuser in users.items() if not superuser):
        rows = memberships.filter(user_id__in=chunk).values_list("user_id", "group_id")
        for user_id, group_id in rows:
            teams[user_id].add(group_id)
    if any(users.values()):
        every_team = set(Group.objects.values_list("pk", flat=True))
        for user_id, superuser in users.items():
            if superuser:
                teams[user_id] = every_team
    page_teams: dict[int, int | None] = {}
    for chunk in _chunks({page for _, page in wanted if page is not None}):
        rows = Session.objects.filter(pk__in=chunk).values_list("pk", "agent__team_id")
        page_teams.update(rows)
    result = []
    for user_id, page in wanted:
        mine = teams[user_id]
        groups = {broadcast.team_group(None)} | {broadcast.team_group(t) for t in mine}
        if page in page_teams and (users[user_id] or page_teams[page] in (None, *mine)):
            groups.add(broadcast.session_group(page))
        result.append(groups)
    return result


def verdicts(watched: list[Watched]) -> dict[Watched, int]:
    """The close code for every socket that lost access (the others are left out). Sync:
    run it off the event loop. A handful of queries however many sockets there are."""
    if not watched:
        return {}
    stored = _stored_sessions({w.session_key for w in watched})
    users = {}
    for chunk in _chunks({w.user_id for w in watched}):
        found = get_user_model().objects.filter(pk__in=chunk)
        users.update((u.pk, u) for u in found.only("password", "is_active", "is_superuser"))
    closing: dict[Watched, int] = {}
    kept = []
    for socket in watched:
        user = users.get(socket.user_id)
        data = stored.get(socket.session_key)
        if user is None or not user.is_active or data is None or not _signed_in(socket, data, user):
            closing[socket] = CLOSE_LOGGED_OUT
        else:
            kept.append(socket)
    superusers = {s.user_id: users[s.user_id].is_superuser for s in kept}
    may_join = allowed_groups(superusers, [(s.user_id, s.page_session) for s in kept])
    for socket, groups in zip(kept, may_join, strict=True):
        if not socket.groups <= groups:
            closing[socket] = CLOSE_ACCESS_CHANGED
    return closing


def _verdicts_unless_away(watched: list[Watched]) -> dict[Watched, int] | None:
    """`verdicts`, or None when the database turned out to be away (noticed here, in a
    worker thread: finding out may take a connection attempt)."""
    try:
        return verdicts(watched)
    except DatabaseError as error:
        if outage.noticed(error):
            return None
        raise


def _signed_in(socket: Watched, data: str | dict, user) -> bool:
    """Whether the stored session still logs this user in, by Django's rule (auth.get_user),
    without its side effect: Django would flush a session that fails; a sweep writes nothing."""
    if isinstance(data, str):
        if socket.verified == (data, user.password):
            return True
        decoded = _session_store()().decode(data)
    else:
        decoded = data
    try:
        same_user = get_user_model()._meta.pk.to_python(decoded.get(SESSION_KEY)) == user.pk
    except Exception:  # noqa: BLE001 - a session naming no valid id names nobody
        return False
    session_hash = decoded.get(HASH_SESSION_KEY) or ""
    valid = (
        same_user
        and decoded.get(BACKEND_SESSION_KEY) in settings.AUTHENTICATION_BACKENDS
        and bool(session_hash)
        and any(
            constant_time_compare(session_hash, candidate)
            for candidate in (user.get_session_auth_hash(), *user.get_session_auth_fallback_hash())
        )
    )
    if valid and isinstance(data, str):
        socket.verified = (data, user.password)
    return valid


def _session_store():
    return import_module(settings.SESSION_ENGINE).SessionStore


def _stored_sessions(keys: set[str]) -> dict[str, str | dict]:
    """Each live session's data: its raw stored string when the engine keeps sessions in the
    database (one query per BATCH keys), else its decoded content (one load per key). Missing
    or expired sessions are left out."""
    store = _session_store()
    if hasattr(store, "get_model_class"):
        model = store.get_model_class()
        now = timezone.now()
        found: dict[str, str | dict] = {}
        for chunk in _chunks(keys):
            rows = model.objects.filter(session_key__in=chunk, expire_date__gt=now)
            found.update(rows.values_list("session_key", "session_data"))
        return found
    loaded = {key: store(session_key=key).load() for key in keys}
    return {key: data for key, data in loaded.items() if data}


def _chunks(values: Iterable) -> Iterable[list]:
    values = list(values)
    for start in range(0, len(values), BATCH):
        yield values[start : start + BATCH]


class Sweep:
    """This event loop's sockets and the task that checks them. The task runs only while
    there are sockets, so a test's loop ends with nothing pending."""

    def __init__(self) -> None:
        self.sockets: set[Watched] = set()
        self.task: asyncio.Task | None = None

    def watch(self, socket: Watched) -> None:
        self.sockets.add(socket)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    def forget(self, socket: Watched) -> None:
        self.sockets.discard(socket)

    async def _run(self) -> None:
        while self.sockets:
            await asyncio.sleep(SWEEP_EVERY)
            watched = list(self.sockets)
            if not watched:
                break
            # A database outage must not close every socket: the pages could not reconnect
            # anyway. Their access is checked again on the first sweep after it.
            if outage.is_away():
                continue
            try:
                closing = await database_sync_to_async(_verdicts_unless_away)(watched)
            except Exception:  # noqa: BLE001 - keep sweeping; the next sweep may succeed
                log.exception("live sockets: the access sweep failed")
                continue
            if closing is None:
                continue
            for socket, code in closing.items():
                if socket in self.sockets:  # not closed meanwhile
                    self.sockets.discard(socket)
                    try:
                        await socket.revoke(code)
                    except Exception:  # noqa: BLE001 - one broken socket must not spare the rest
                        log.exception("live sockets: closing a socket failed")


_sweeps: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Sweep] = weakref.WeakKeyDictionary()


def sweep() -> Sweep:
    """This event loop's sweep (tests run several loops in one process)."""
    loop = asyncio.get_running_loop()
    found = _sweeps.get(loop)
    if found is None:
        found = _sweeps[loop] = Sweep()
    return found
