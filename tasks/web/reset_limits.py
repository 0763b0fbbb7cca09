"""How often password reset may be asked for: per email address and per client, in any hour.
The only writer of ResetLimit rows.

Kept in the database so a cap holds across every server process and machine. A cap is a
sliding hour: a use is allowed while fewer than `cap` uses of the same key fall within the
last hour, and a refused use is not counted (it sends nothing). Each take also deletes the
rows that have been quiet for an hour, so the table holds only the last hour's keys.
"""

from __future__ import annotations

import ipaddress
import math
from datetime import timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone
from django.utils.crypto import salted_hmac

from tasks.models.reset_limits import ResetLimit

WINDOW = timedelta(hours=1)
Scope = ResetLimit.Scope


class Taken(NamedTuple):
    allowed: bool
    retry_after: int  # seconds until the next use would be allowed; 0 when this one was


def take(scope: str, value: str, cap: int) -> Taken:
    """One use of `value`'s allowance in `scope`, recorded when allowed."""
    now = timezone.now()
    start = (now - WINDOW).timestamp()
    with transaction.atomic():
        ResetLimit.objects.filter(last_at__lt=now - WINDOW).delete()
        # Locked (PostgreSQL; SQLite's writers take turns anyway) so two processes counting
        # the same key at once cannot both take the last use.
        row, _ = ResetLimit.objects.select_for_update().get_or_create(
            scope=scope, key=key(scope, value), defaults={"last_at": now}
        )
        recent = [at for at in row.times if at > start]
        if len(recent) >= cap:
            # The oldest use that still counts leaves the window first.
            wait = recent[-cap] - start
            return Taken(allowed=False, retry_after=max(1, math.ceil(wait)))
        row.times = [*recent, now.timestamp()]
        row.last_at = now
        row.save(update_fields=["times", "last_at"])
    return Taken(allowed=True, retry_after=0)


def key(scope: str, value: str) -> str:
    """A keyed hash of `value`: the table never holds an address, and a log line can name a
    key (its first characters) without naming the address."""
    return salted_hmac(f"onlooker.reset_limits.{scope}", value, algorithm="sha256").hexdigest()


def client_address(request: HttpRequest) -> str:
    """The client a request came from: REMOTE_ADDR, or behind a trusted proxy the address
    the proxy appended last to X-Forwarded-For (the ones before it are the client's own
    words). IPv6 by its /64, which one client usually holds whole."""
    address = request.META.get("REMOTE_ADDR", "")
    if settings.ONLOOKER_TRUSTED_PROXY:
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "").rsplit(",", 1)[-1].strip()
        address = forwarded or address
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address[:100]
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed)
