"""Credentials at rest: a text field kept encrypted in the database.

Every credential Onlooker keeps (an agent's shared credential and signing secrets, a person's
own credential and OAuth tokens, an OAuth client secret, a Slack signing secret) is a
`SealedTextField`: Fernet under settings.ONLOOKER_CREDENTIAL_KEYS, the first key encrypting,
every key decrypting (MultiFernet), so keys rotate without a pause (`rotate_credentials`
seals everything again under the newest). Code reads and writes plain strings; only the
database sees tokens. An empty value stays empty, so "has none" is still `field=""`.

A value that no configured key opens (a key was dropped too early) reads as "" and is
logged once per field, never shown: the agent answers 401 and a person enters it again,
rather than every page that lists agents failing. Saving the row again without changing it
keeps the stored token, so adding the key back restores it. Where "none" would weaken a check (an
agent's signing secrets: an agent that signs must always sign, and a token alone would then
do), the field is `fail_closed` and such a value reads as `UNOPENED`, a secret no signature
ever matches.
"""

from __future__ import annotations

import logging
from functools import cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import models

log = logging.getLogger(__name__)


@cache
def _keys(configured: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(key) for key in configured])


def keys() -> MultiFernet:
    """The configured keys, first one encrypting (settings.ONLOOKER_CREDENTIAL_KEYS)."""
    return _keys(tuple(settings.ONLOOKER_CREDENTIAL_KEYS))


def seal(plain: str) -> str:
    return keys().encrypt(plain.encode()).decode("ascii") if plain else ""


class Unreadable(ValueError):
    """No configured key opens the stored value."""


def open_sealed(sealed: str) -> str:
    if not sealed:
        return ""
    try:
        return keys().decrypt(sealed.encode("ascii")).decode()
    except (InvalidToken, UnicodeError) as error:
        raise Unreadable("no key in ONLOOKER_CREDENTIAL_KEYS opens this value") from error


def reseal(sealed: str) -> str:
    """The same value under the newest key (MultiFernet.rotate keeps its timestamp)."""
    if not sealed:
        return ""
    try:
        return keys().rotate(sealed.encode("ascii")).decode("ascii")
    except (InvalidToken, UnicodeError) as error:
        raise Unreadable("no key in ONLOOKER_CREDENTIAL_KEYS opens this value") from error


@cache
def _newest(key: str) -> Fernet:
    return Fernet(key)


def under_newest(sealed: str) -> bool:
    """Whether the newest key opens the value (rotating it again would change nothing)."""
    try:
        _newest(settings.ONLOOKER_CREDENTIAL_KEYS[0]).decrypt(sealed.encode("ascii"))
    except (InvalidToken, UnicodeError):
        return False
    return True


_logged: set[str] = set()

# What a fail-closed field's value that no key opens reads as: not a secret anything could
# match. Not ASCII, so it is not base64 and no Standard Webhooks key can be made of it: every
# signature checked against it fails.
UNOPENED = "\u2026unopened\u2026"


class _Unopened(str):
    """What a value no key opens reads as ("" or UNOPENED), holding the token as stored, so
    that saving its row again writes it back as it was: the key may still turn up."""

    stored: str

    def __new__(cls, shown: str, stored: str) -> _Unopened:
        value = super().__new__(cls, shown)
        value.stored = stored
        return value

    def __reduce__(self):
        return (_Unopened, (str(self), self.stored))


class SealedTextField(models.TextField):
    """A TextField whose value is encrypted at rest; reads and writes plain strings.
    `fail_closed`: a value no key opens reads as UNOPENED rather than "" (none)."""

    def __init__(self, *args, fail_closed: bool = False, **kwargs) -> None:
        # Not part of deconstruct(): it says how a lost value reads, not what the column is,
        # so it needs no migration.
        self.fail_closed = fail_closed
        super().__init__(*args, **kwargs)

    def from_db_value(self, value, expression, connection):
        if not value:
            return value
        try:
            return open_sealed(value)
        except Unreadable:
            where = f"{self.model.__name__}.{self.name}" if hasattr(self, "model") else self.name
            if where not in _logged:
                _logged.add(where)
                log.warning("a stored %s could not be decrypted with any configured key", where)
            return _Unopened(UNOPENED if self.fail_closed else "", value)

    def get_prep_value(self, value):
        if isinstance(value, _Unopened):
            return value.stored  # unchanged since it was read: kept for the key it needs
        value = super().get_prep_value(value)
        return seal(value) if value else value
