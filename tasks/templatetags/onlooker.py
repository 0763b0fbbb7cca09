"""Display helpers for the templates. `ago` must read exactly as static/js/times.js writes,
since the script takes over ticking the same text."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone

register = template.Library()


@register.filter
def ago(moment: datetime | None) -> str:
    """'just now', '12 s ago', '3 min ago', '2 h ago', '4 d ago'."""
    if moment is None:
        return ""
    seconds = max(0, int((timezone.now() - moment).total_seconds()))
    if seconds < 5:
        return "just now"
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


@register.filter
def web_url(url: object) -> str:
    """An agent-supplied URL if it is http(s), else nothing: templates link only to these."""
    if isinstance(url, str) and url.lower().startswith(("https://", "http://")):
        return url
    return ""
