"""Who a read-API request is: the logged-in person (session cookie), or the person whose API
token it carries (`Authorization: Bearer onl_…`, tasks/models/api_tokens.py).

A token is stored as the SHA-256 of its text only, and found by that digest: what a lookup's
timing could reveal is part of a digest, which says nothing about any token's text. A token
acts as its person, with that person's team visibility, only while the person is active.
A request that carries an Authorization header is judged by it alone: a bad token is a 401
even beside a good session cookie, so a script never silently reads as someone else.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from datetime import timedelta
from functools import wraps

from django.http import HttpRequest, JsonResponse
from django.utils import timezone

from tasks.models import ApiToken

PREFIX = "onl_"
# Writing last_used_at on every request would turn each read into a write: once a minute is
# enough to tell a token in use from a forgotten one.
LAST_USED_EVERY = timedelta(minutes=1)
_TOKEN = re.compile(r"onl_[A-Za-z0-9_-]{20,200}")
_BEARER = re.compile(r"bearer +(\S+) *", re.IGNORECASE)


class BadToken(ValueError):
    """An Authorization header that names no active person's token."""


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def make(user, name: str = "") -> tuple[ApiToken, str]:
    """A new token for `user`: the stored row, and the token's text (shown once, kept nowhere)."""
    text = PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name, digest=digest(text), created_at=timezone.now()
    )
    return token, text


def user_of(header: str):
    """The active person whose token `header` (an Authorization header's value) carries."""
    matched = _BEARER.fullmatch(header)
    if matched is None:
        raise BadToken("the Authorization header is 'Bearer onl_…' with a token of yours")
    text = matched.group(1)
    if not _TOKEN.fullmatch(text):
        raise BadToken("the token is not an Onlooker API token (onl_…)")
    wanted = digest(text)
    token = ApiToken.objects.select_related("user").filter(digest=wanted).first()
    # The digest was already equal in the query; compared again in constant time so this
    # function's own timing never depends on how much of it matched.
    if token is None or not hmac.compare_digest(token.digest, wanted):
        raise BadToken("this token is unknown or revoked")
    if not token.user.is_active:
        raise BadToken("this token's person is deactivated")
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_EVERY:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user


def _refused(detail: str, challenge: str) -> JsonResponse:
    response = JsonResponse({"error": "authentication required", "detail": detail}, status=401)
    response["WWW-Authenticate"] = challenge
    return response


def login_or_token(view: Callable) -> Callable:
    """The view runs as the request's person, logged in or by token; a 401 without one."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs):
        header = request.headers.get("Authorization")
        if header is not None:
            try:
                request.user = user_of(header)
            except BadToken as error:
                return _refused(str(error), 'Bearer realm="onlooker", error="invalid_token"')
        elif not request.user.is_authenticated:
            return _refused(
                "log in at /accounts/login/, or send 'Authorization: Bearer onl_…' with an "
                "API token (manage.py create_api_token)",
                'Bearer realm="onlooker"',
            )
        return view(request, *args, **kwargs)

    return wrapper
