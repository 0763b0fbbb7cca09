"""How often password reset was recently asked for, per address and per client.

Written only by `tasks/web/reset_limits.py`. Kept in the database, not in memory, so the caps
hold across every server process; a row holds at most a cap's worth of recent times and
is deleted once it has been quiet for the window, so the table stays as small as the set
of addresses and clients active in the last hour.
"""

from __future__ import annotations

from django.db import models


class ResetLimit(models.Model):
    class Scope(models.TextChoices):
        ADDRESS = "address"  # an email address a reset was asked for
        CLIENT = "client"  # the network address a reset request came from

    scope = models.CharField(max_length=10, choices=Scope.choices)
    # A keyed hash of the address, never the address: the table would otherwise be a list
    # of who asked for a reset, and of their IP addresses.
    key = models.CharField(max_length=64)
    # Unix times of the uses still inside the window, oldest first; never more than the cap.
    times = models.JSONField(default=list)
    last_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "key"], name="unique_reset_limit")]
        indexes = [models.Index(fields=["last_at"], name="reset_limit_last_at")]

    def __str__(self) -> str:
        return f"{self.scope} {self.key[:8]}: {len(self.times)}"
