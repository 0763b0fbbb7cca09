"""`needs_reconnect`: whether a person's OAuth credential for an agent has expired and can no
longer be refreshed (answering/oauth.needs_reconnect), for the settings page's OAuth row
(templates/tasks/_oauth_credential.html)."""

from __future__ import annotations

from django import template

from tasks.answering import oauth

register = template.Library()


@register.filter
def needs_reconnect(credential) -> bool:
    return oauth.needs_reconnect(credential)
