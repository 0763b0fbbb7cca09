"""OAuth 2.0 for agents whose card declares an authorization code flow (Agent.auth_scheme
kind "oauth2"): "Connect" (with PKCE, S256), the tokens kept as the person's
PersonalCredential (kind oauth; this module is the one writer of those rows), refreshed
before they expire, "Disconnect" (revoking them where the card names a revocation URL,
RFC 7009). Built on Authlib's httpx client.

    url = oauth.start(request.session, user, agent)     # send the browser there
    credential = oauth.finish(request.session, user, state, code)   # on the callback
    oauth.access_token(credential)    # callers.py: refreshed first when about to expire
    oauth.disconnect(user, agent)

What `start` must remember (the state, the PKCE code verifier) stays on the server, in the
person's session, keyed by state: at most MAX_PENDING at once, each for PENDING_SECONDS,
each usable once. Every request to the authorization server has explicit timeouts and a
bounded reply; what goes wrong becomes an `OAuthFailed` sentence for the person. Tokens are
never logged or shown.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
import warnings
from dataclasses import dataclass
from datetime import timedelta

import httpx
from authlib.deprecate import AuthlibDeprecationWarning
from authlib.integrations.base_client import OAuthError

with warnings.catch_warnings():
    # Authlib would rather use the httpx2 fork; Onlooker uses httpx, which it still supports.
    warnings.simplefilter("ignore", AuthlibDeprecationWarning)
    from authlib.integrations.httpx_client import OAuth2Client
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from tasks.models import Agent, PersonalCredential
from tasks.wire.agent_text import plain_text

logger = logging.getLogger(__name__)

PENDING_KEY = "onlooker_oauth_pending"
MAX_PENDING = 5  # Connects started and not finished, per session (older ones are dropped)
PENDING_SECONDS = 600  # how long a started Connect may come back (RFC 6749: codes ~10 min)
REFRESH_WITHIN = timedelta(seconds=60)  # a token expiring this soon is refreshed first
TIMEOUT = httpx.Timeout(10.0, connect=5.0)  # the token endpoint, exchanging a code
# A person's call waits for its refresh: shorter, and a call that cannot refresh in time
# goes without. Another process's call waits at most REFRESH_CLAIM for that refresh.
REFRESH_TIMEOUT = httpx.Timeout(5.0, connect=3.0)
REFRESH_CLAIM = timedelta(seconds=8)  # longer than a refresh may take, all timeouts counted
REFRESH_POLL = 0.1  # seconds between looks at a refresh another process is making
REVOKE_TIMEOUT = httpx.Timeout(5.0, connect=3.0)  # best effort: Disconnect must not hang
MAX_REPLY_BYTES = 64 * 1024  # a token reply is well under 10 KiB, even with JWTs
MAX_TOKEN = 4096  # characters of an access or refresh token
MAX_SCOPE = 500  # PersonalCredential.scope
MAX_LIFETIME = 366 * 86_400  # seconds; a longer `expires_in` is not believed
VERIFIER_BYTES = 48  # 64 base64url characters (RFC 7636: 43 to 128)


class OAuthFailed(Exception):
    """Why connecting (or reconnecting) did not work, in words for the person; nothing was
    stored. `status` is the HTTP status a view answers with."""

    status = 400


class Refused(OAuthFailed):
    """The authorization server answered, and said no (its words are in the sentence)."""


def redirect_uri() -> str:
    """Where the authorization server sends the browser back (registered with the client)."""
    return settings.ONLOOKER_PUBLIC_URL.rstrip("/") + reverse("oauth-callback")


def why_not_connectable(agent: Agent) -> str:
    """ "" when a person may Connect to `agent`, else why not (for a 400 page)."""
    if agent.auth_scheme.get("kind") != "oauth2":
        return f"{agent.name}'s card does not declare OAuth 2.0: save a token for it instead."
    if not agent.oauth_client_id:
        return (
            f"Onlooker's OAuth client for {agent.name} is not registered yet: an "
            "administrator must add its client id (add_agent --oauth-client-id, or the admin)."
        )
    return ""


def start(session, user, agent: Agent) -> str:
    """The authorization URL to send `user`'s browser to; the state and PKCE code verifier
    are kept in their `session` until the callback (or PENDING_SECONDS)."""
    why = why_not_connectable(agent)
    if why:
        raise OAuthFailed(why)
    state = secrets.token_urlsafe(32)
    verifier = secrets.token_urlsafe(VERIFIER_BYTES)
    scopes = agent.auth_scheme.get("scopes") or []
    with _client(agent, TIMEOUT) as client:
        url, _ = client.create_authorization_url(
            agent.auth_scheme["authorization_url"],
            state=state,
            code_verifier=verifier,
            scope=" ".join(scopes) or None,
        )
    pending = _live_pending(session)
    pending[state] = {"agent": agent.pk, "user": user.pk, "verifier": verifier, "at": time.time()}
    newest = sorted(pending.items(), key=lambda item: item[1]["at"])[-MAX_PENDING:]
    session[PENDING_KEY] = dict(newest)
    return url


def finish(session, user, state: str, code: str) -> PersonalCredential:
    """Exchange the code the authorization server sent back for tokens, and keep them as
    `user`'s credential for the agent the state was started for. The state is used up
    whatever happens: a second callback with it is refused."""
    entry = take_pending(session, user, state)
    agent = Agent.objects.visible_to(user).filter(pk=entry["agent"]).first()
    if agent is None:
        raise OAuthFailed("The agent this Connect was for is no longer there: nothing stored.")
    why = why_not_connectable(agent)
    if why:
        raise OAuthFailed(why)
    if not code or len(code) > MAX_TOKEN:
        raise OAuthFailed(f"{agent.name}'s authorization server sent no usable code back.")
    with _client(agent, TIMEOUT) as client:
        reply = _token_call(
            agent,
            lambda: client.fetch_token(
                agent.auth_scheme["token_url"],
                grant_type="authorization_code",
                code=code,
                code_verifier=entry["verifier"],
            ),
            (code, entry["verifier"]),
        )
    tokens = _tokens(agent, reply)
    with transaction.atomic():
        credential, _ = PersonalCredential.objects.update_or_create(
            user=user,
            agent=agent,
            defaults={
                "kind": PersonalCredential.Kind.OAUTH,
                "secret": tokens.access,
                "refresh_token": tokens.refresh,
                "expires_at": tokens.expires_at,
                "scope": tokens.scope,
            },
        )
    return credential


def take_pending(session, user, state: str) -> dict:
    """The Connect `state` names, removed from the session (a state works once); refused
    when it is missing, unknown (never made here, already used, or altered), someone
    else's, or older than PENDING_SECONDS."""
    if not state:
        raise OAuthFailed(
            "The sign-in answer came back without its state: nothing was stored. Start "
            "again with Connect on the settings page."
        )
    pending = session.get(PENDING_KEY)
    pending = pending if isinstance(pending, dict) else {}
    # Compared in constant time: the states are the session's secrets. As bytes: for text,
    # compare_digest refuses non-ASCII (a TypeError, and a 500 for a client's typo).
    presented = str(state).encode("utf-8", "surrogatepass")
    found = next(
        (key for key in pending if hmac.compare_digest(str(key).encode(), presented)), None
    )
    entry = pending.pop(found, None) if found is not None else None
    session[PENDING_KEY] = pending
    if not isinstance(entry, dict) or entry.get("user") != user.pk:
        raise OAuthFailed(
            "This sign-in answer does not match a Connect you started here (its state is "
            "unknown, already used or altered): nothing was stored. Start again with "
            "Connect on the settings page."
        )
    if time.time() - entry.get("at", 0) > PENDING_SECONDS:
        raise OAuthFailed(
            f"This Connect was started more than {PENDING_SECONDS // 60} minutes ago and "
            "has expired: nothing was stored. Start again with Connect on the settings page."
        )
    return entry


def _live_pending(session) -> dict:
    pending = session.get(PENDING_KEY)
    if not isinstance(pending, dict):
        return {}
    now = time.time()
    return {k: v for k, v in pending.items() if now - v.get("at", 0) <= PENDING_SECONDS}


# -- using the tokens ------------------------------------------------------------------------


def access_token(credential: PersonalCredential) -> str:
    """The credential's access token, refreshed first when it expires within a minute; ""
    when it can no longer be used (the person must connect again, or the server was not
    reached this time). A refresh the server refuses forgets the refresh token but keeps
    the row, so the settings page says "Reconnect"."""
    if credential.kind != PersonalCredential.Kind.OAUTH or not _expiring(credential):
        return credential.secret
    if not credential.refresh_token:
        return ""
    # One refresh at a time per credential: with rotating refresh tokens, a second
    # concurrent refresh would present a used one and lose the connection. A claim, not a
    # row lock: on SQLite a lock held across the call would stop every write meanwhile.
    now = timezone.now()
    mine = PersonalCredential.objects.filter(
        Q(refreshing_until__isnull=True) | Q(refreshing_until__lt=now),
        pk=credential.pk,
        kind=PersonalCredential.Kind.OAUTH,
    ).update(refreshing_until=now + REFRESH_CLAIM)
    if not mine:
        return _refreshed_by_another(credential.pk)
    try:
        row = PersonalCredential.objects.filter(pk=credential.pk).first()
        if row is None or not _expiring(row) or not row.refresh_token:
            return row.secret if row is not None and not _expiring(row) else ""
        return _refresh(row)
    finally:
        PersonalCredential.objects.filter(pk=credential.pk).update(refreshing_until=None)


def _refreshed_by_another(pk: int) -> str:
    """The access token once the refresh another call claimed is done (or its claim ran
    out); meanwhile, a token that has not quite expired yet is still good."""
    deadline = time.monotonic() + REFRESH_CLAIM.total_seconds()
    while True:
        row = PersonalCredential.objects.filter(pk=pk).first()
        if row is None:
            return ""
        if not _expiring(row) or (row.expires_at and row.expires_at > timezone.now()):
            return row.secret
        if row.refreshing_until is None or time.monotonic() > deadline:
            return ""
        time.sleep(REFRESH_POLL)


def _refresh(row: PersonalCredential) -> str:
    agent = row.agent
    url = agent.auth_scheme.get("refresh_url") or agent.auth_scheme.get("token_url")
    if agent.auth_scheme.get("kind") != "oauth2" or not url or not agent.oauth_client_id:
        return ""
    try:
        with _client(agent, REFRESH_TIMEOUT) as client:
            reply = _token_call(
                agent,
                lambda: client.refresh_token(url, refresh_token=row.refresh_token),
                (row.refresh_token,),
            )
        tokens = _tokens(agent, reply)
    except Refused as refused:
        logger.warning(
            "OAuth refresh refused for user %s at agent %s: %s", row.user_id, agent.pk, refused
        )
        row.refresh_token = ""
        row.save(update_fields=["refresh_token", "updated_at"])
        return ""
    except OAuthFailed as failed:
        logger.warning(
            "OAuth refresh failed for user %s at agent %s: %s", row.user_id, agent.pk, failed
        )
        return ""
    row.secret = tokens.access
    row.refresh_token = tokens.refresh or row.refresh_token
    row.expires_at = tokens.expires_at
    row.scope = tokens.scope or row.scope
    row.save(update_fields=["secret", "refresh_token", "expires_at", "scope", "updated_at"])
    return row.secret


def _expiring(credential: PersonalCredential) -> bool:
    expires_at = credential.expires_at
    return expires_at is not None and expires_at <= timezone.now() + REFRESH_WITHIN


def needs_reconnect(credential: PersonalCredential | None) -> bool:
    """An OAuth credential that has expired and cannot be refreshed: Connect again."""
    return (
        credential is not None
        and credential.kind == PersonalCredential.Kind.OAUTH
        and _expiring(credential)
        and not credential.refresh_token
    )


def disconnect(user, agent: Agent) -> bool:
    """Forget `user`'s OAuth tokens for `agent`, first revoking them at the revocation URL
    the card names (best effort, within REVOKE_TIMEOUT). False when there were none."""
    row = PersonalCredential.objects.filter(
        user=user, agent=agent, kind=PersonalCredential.Kind.OAUTH
    ).first()
    if row is None:
        return False
    url = (
        agent.auth_scheme.get("revocation_url") if agent.auth_scheme.get("kind") == "oauth2" else ""
    )
    if url and agent.oauth_client_id:
        _revoke(agent, url, [(row.refresh_token, "refresh_token"), (row.secret, "access_token")])
    row.delete()
    return True


def _revoke(agent: Agent, url: str, tokens: list[tuple[str, str]]) -> None:
    with _client(agent, REVOKE_TIMEOUT) as client:
        for token, hint in tokens:
            if not token:
                continue
            try:
                reply = client.revoke_token(url, token=token, token_type_hint=hint)
                if reply.status_code != 200:
                    logger.warning(
                        "OAuth revocation at agent %s answered HTTP %s", agent.pk, reply.status_code
                    )
            except (httpx.HTTPError, OAuthError, ValueError) as error:
                logger.warning(
                    "OAuth revocation at agent %s failed: %s", agent.pk, type(error).__name__
                )


# -- talking to the authorization server -----------------------------------------------------


@dataclass(frozen=True)
class _Tokens:
    access: str
    refresh: str
    expires_at: object  # datetime | None
    scope: str


def _client(agent: Agent, timeout: httpx.Timeout) -> OAuth2Client:
    return OAuth2Client(
        client_id=agent.oauth_client_id,
        client_secret=agent.oauth_client_secret or None,
        redirect_uri=redirect_uri(),
        code_challenge_method="S256",
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
        transport=_BoundedTransport(),
        headers={"User-Agent": "Onlooker", "Accept-Encoding": "identity"},
    )


def _token_call(agent: Agent, call, sent: tuple[str, ...]) -> dict:
    """A request to the token endpoint, its failures as sentences about the agent's server.
    `sent`: the secrets the request carried (with the client secret), which a server's words
    that echo them must not bring to a page or the log."""
    where = f"{agent.name}'s authorization server"
    try:
        return dict(call())
    except OAuthError as error:
        sent = (*sent, agent.oauth_client_secret)
        said = _without(error.description, sent) or _without(error.error, sent)
        said = said or "no reason given"
        raise Refused(f"{where} refused: {said}") from None
    except httpx.TimeoutException:
        raise OAuthFailed(f"{where} did not answer in time; try again.") from None
    except httpx.HTTPStatusError as error:
        status = error.response.status_code
        raise OAuthFailed(f"{where} answered HTTP {status}; try again later.") from None
    except _ReplyTooLarge:
        limit = MAX_REPLY_BYTES // 1024
        raise OAuthFailed(f"{where} answered more than {limit} KiB: not a token.") from None
    except httpx.HTTPError as error:
        raise OAuthFailed(f"Could not reach {where}: {plain_text(str(error))}") from None
    except ValueError:
        # Not JSON, or JSON Authlib cannot read as a token (an `expires_in` not a number).
        raise OAuthFailed(f"{where} did not answer a token Onlooker can read.") from None


def _without(words: object, secrets_sent: tuple[str, ...]) -> str:
    """A server's words, plain, with any secret it echoed cut out."""
    if not isinstance(words, str):
        return ""
    for secret in secrets_sent:
        if secret:
            words = words.replace(secret, "…")
    return plain_text(words)


def _tokens(agent: Agent, reply: dict) -> _Tokens:
    """The tokens of a token reply, checked: a bearer access token, bounded, printable."""
    access, refresh = reply.get("access_token"), reply.get("refresh_token") or ""
    token_type = reply.get("token_type", "Bearer")
    if not _token_text(access) or not isinstance(token_type, str) or token_type.lower() != "bearer":
        raise OAuthFailed(f"{agent.name}'s authorization server sent no usable bearer token.")
    if not isinstance(refresh, str) or (refresh and not _token_text(refresh)):
        refresh = ""
    lifetime = reply.get("expires_in")
    try:
        seconds = int(lifetime) if lifetime is not None else None
    except (TypeError, ValueError):
        seconds = None
    expires_at = None
    if seconds is not None and 0 < seconds <= MAX_LIFETIME:
        expires_at = timezone.now() + timedelta(seconds=seconds)
    scope = reply.get("scope")
    scope = scope if isinstance(scope, str) and len(scope) <= MAX_SCOPE else ""
    if not scope:
        scope = " ".join(agent.auth_scheme.get("scopes") or [])[:MAX_SCOPE]
    return _Tokens(access, refresh, expires_at, plain_text(scope, MAX_SCOPE))


def _token_text(token: object) -> bool:
    """A token Onlooker can send in a header: 1 to MAX_TOKEN visible ASCII characters."""
    return (
        isinstance(token, str)
        and 0 < len(token) <= MAX_TOKEN
        and all("\x21" <= c <= "\x7e" for c in token)
    )


class _ReplyTooLarge(httpx.TransportError):
    pass


class _BoundedTransport(httpx.HTTPTransport):
    """httpx's transport, with every reply cut off past MAX_REPLY_BYTES: a token endpoint
    is the agent's to run, and Authlib reads its reply whole."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_BoundedStream(response.stream),
            extensions=response.extensions,
        )


class _BoundedStream(httpx.SyncByteStream):
    def __init__(self, stream) -> None:
        self._stream = stream

    def __iter__(self):
        read = 0
        for chunk in self._stream:
            read += len(chunk)
            if read > MAX_REPLY_BYTES:
                raise _ReplyTooLarge(f"a reply longer than {MAX_REPLY_BYTES // 1024} KiB")
            yield chunk

    def close(self) -> None:
        self._stream.close()
