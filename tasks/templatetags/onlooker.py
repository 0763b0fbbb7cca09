"""Display helpers for the templates. `ago` must read exactly as static/js/times.js writes,
since the script takes over ticking the same text."""

from __future__ import annotations

import re
from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.html import strip_tags

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


@register.filter
def choices(detail: object) -> list[str]:
    """The choices an interaction's `detail` offers (`choices` or `options`: strings)."""
    if not isinstance(detail, dict):
        return []
    offered = detail.get("choices", detail.get("options"))
    if not isinstance(offered, list):
        return []
    return [c for c in offered if isinstance(c, str) and c.strip()][:20]


@register.filter
def connect_url(detail: object) -> str:
    """The link a connection asks a person to open: `detail.url` (or `detail` itself),
    http(s) only."""
    url = detail.get("url") if isinstance(detail, dict) else detail
    return web_url(url)


_MARKUP = re.compile(r"[*_`#>|~\[\]]+|-{2,}")


@register.filter
def plain_line(markdown: str) -> str:
    """A note as one plain line for a receipt: no tags, no markdown marks, one space."""
    return " ".join(_MARKUP.sub(" ", strip_tags(markdown)).split())
