"""A person's token for Onlooker's read API (`Authorization: Bearer onl_…`): it reads what its
person may see, nothing more, and is kept as a digest (shown once, when made)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ApiToken(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True, help_text="what it is for")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name or 'token'} of {self.user_id}"
