"""One event to one channel: the body its kind receives (formats.py), over HTTP or SMTP.

A failure is SendFailed with two texts. `shown` is what every member of the team may read
on /settings/ and under each question: what happened in a few words ("HTTP 403", "timed
out", "could not connect", "refused: a loopback address"), never the receiver's own words,
which may be an internal page's (the receiver is whatever the URL reached). `detail` adds
those words and the reasons, for the admin and the logs only. Neither holds the channel's
URL path (often its secret) nor a signing secret.

HTTP goes through one of two clients: a channel that allows a private address uses a plain
one; every other channel one that connects only to public addresses, checked on the address
it connects to (targets.PublicOnlyBackend). Redirects are never followed: a public receiver
must not be able to send Onlooker on to a private one.
"""

from __future__ import annotations

import json
import smtplib
import threading
import time

import httpx
from django.core.mail import get_connection
from django.utils import timezone
from standardwebhooks import Webhook

from tasks.models.notify import Notification, NotificationChannel
from tasks.notify import formats, targets
from tasks.runtime import outbound_http

TIMEOUT = httpx.Timeout(10.0, connect=5.0)
# A send's whole time, whatever the server trickles: httpx's timeouts are per read.
TOTAL_SECONDS = 10.0
# Connections kept per client: as many as the sender has workers, and some.
CONNECTIONS = 16
KEEPALIVE_SECONDS = 30.0  # an idle kept connection is closed after this long
# Of a failing receiver's answer, what the admin sees.
SAID_CHARS = 500
DETAIL_CHARS = 1000
SHOWN_CHARS = 300


class SendFailed(Exception):
    """Why a channel did not take an event: `shown` for the team, `detail` (the receiver's
    words too) for the admin and the logs. str() is `shown`."""

    def __init__(self, shown: str, detail: str = "") -> None:
        super().__init__(shown)
        self.shown = shown
        self.detail = detail or shown


def send(row: Notification, *, at) -> None:
    """Send one event to its channel (`row.channel`); SendFailed unless it was taken."""
    channel = row.channel
    try:
        if channel.kind == NotificationChannel.Kind.SLACK:
            body = formats.slack(row, at=at)
            _post(channel, _json(body), {"content-type": "application/json"})
        elif channel.kind == NotificationChannel.Kind.WEBHOOK:
            _post_signed(channel, row)
        elif channel.kind == NotificationChannel.Kind.EMAIL:
            message = formats.email(row, at=at)
            message.connection = get_connection(fail_silently=False)
            message.send()
        else:
            raise SendFailed(f"unknown kind of channel {channel.kind!r}")
    except SendFailed as error:
        raise _scrubbed(error.shown, error.detail, channel) from None
    except smtplib.SMTPException as error:
        # The mail server's words (a refused recipient, say) are for the admin.
        shown = f"mail server: {type(error).__name__}"
        raise _scrubbed(shown, f"{shown}: {error}", channel) from None
    except OSError as error:  # smtplib's connection; httpx's are caught in _post
        raise _scrubbed("could not connect", f"could not connect: {error}", channel) from None


def _post_signed(channel: NotificationChannel, row: Notification) -> None:
    body = formats.webhook(row)
    # The time of this attempt (receivers refuse old timestamps); the id is the event's, the
    # same on every attempt.
    signed_at = timezone.now()
    signature = Webhook(channel.signing_secret).sign(row.event_id, signed_at, body)
    headers = {
        "content-type": "application/json",
        "webhook-id": row.event_id,
        "webhook-timestamp": str(int(signed_at.timestamp())),
        "webhook-signature": signature,
    }
    _post(channel, body, headers)


def _json(body: dict) -> str:
    return json.dumps(body, ensure_ascii=False)


def _scrubbed(shown: str, detail: str, channel: NotificationChannel) -> SendFailed:
    return SendFailed(_scrub(shown, channel)[:SHOWN_CHARS], _scrub(detail, channel)[:DETAIL_CHARS])


def _scrub(text: str, channel: NotificationChannel) -> str:
    """Text without the channel's URL (its path is often its secret) nor its signing secret,
    on one line."""
    text = " ".join(str(text).split())
    if channel.signing_secret:
        text = text.replace(channel.signing_secret, "whsec_…")
    if channel.target and channel.kind != NotificationChannel.Kind.EMAIL:
        text = text.replace(channel.target, channel.shown_target)
        path = httpx.URL(channel.target).raw_path.decode("ascii", "replace")
        if len(path) > 1:
            text = text.replace(path, "/…")
    return text


# -- HTTP ------------------------------------------------------------------------------------

_clients: dict[bool, httpx.Client] = {}
_clients_lock = threading.Lock()


def http_client(*, allow_private: bool = False) -> httpx.Client:
    """One client of each kind for every send of the process (httpx's are thread-safe):
    making one costs ~40 ms of CPU (its TLS context loads the system's certificates), more
    than the send."""
    with _clients_lock:
        if allow_private not in _clients:
            _clients[allow_private] = _new_client(allow_private)
        return _clients[allow_private]


def _new_client(allow_private: bool) -> httpx.Client:
    if allow_private:
        limits = httpx.Limits(max_connections=CONNECTIONS, keepalive_expiry=KEEPALIVE_SECONDS)
        return httpx.Client(timeout=TIMEOUT, follow_redirects=False, limits=limits)
    # With a transport of its own, a client takes no proxy from the environment, and must
    # not: a proxy would resolve the name itself, after the check.
    public_only = outbound_http.Transport(
        targets.PublicOnlyBackend(),
        max_connections=CONNECTIONS,
        keepalive_expiry=KEEPALIVE_SECONDS,
    )
    return httpx.Client(timeout=TIMEOUT, follow_redirects=False, transport=public_only)


def close_http_clients() -> None:
    with _clients_lock:
        for client in _clients.values():
            client.close()
        _clients.clear()


def _post(channel: NotificationChannel, body: str, headers: dict[str, str]) -> None:
    client = http_client(allow_private=channel.allow_private)
    started = time.monotonic()
    try:
        with client.stream(
            "POST", channel.target, content=body, headers=headers, timeout=TIMEOUT
        ) as answer:
            said = _read_briefly(answer, started)
    except targets.Refused as refused:
        raise SendFailed(f"refused: {refused.reason}", f"refused: {refused}") from None
    except httpx.TimeoutException:
        shown = f"no answer within {TIMEOUT.read:.0f} s (timed out)"
        raise SendFailed(shown) from None
    except httpx.ConnectError as error:
        raise SendFailed("could not connect", f"could not connect: {error}") from None
    except httpx.HTTPError as error:
        raise SendFailed(type(error).__name__, f"{type(error).__name__}: {error}") from None
    if answer.is_success:
        return
    if answer.is_redirect:
        raise SendFailed(f"HTTP {answer.status_code}: a redirect (not followed)")
    shown = f"HTTP {answer.status_code}"
    raise SendFailed(shown, f"{shown}: {said}" if said else shown)


def _read_briefly(answer: httpx.Response, started: float) -> str:
    """The start of the answer, read to its end so the connection closes cleanly; a server
    that trickles it is cut off at TOTAL_SECONDS."""
    text = b""
    for chunk in answer.iter_bytes():
        if len(text) < SAID_CHARS * 4:  # UTF-8: up to 4 bytes a character
            text += chunk
        if time.monotonic() - started > TOTAL_SECONDS:
            raise SendFailed(f"no complete answer within {TOTAL_SECONDS:.0f} s")
    return " ".join(text.decode("utf-8", "replace").split())[:SAID_CHARS]
