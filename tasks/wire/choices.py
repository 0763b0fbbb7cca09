"""The choices an interactions/v1 question offers, read from its `detail` (`choices` or
`options`: a list of strings). One reading for every place that needs it: the page's
buttons, Slack's buttons (notify/formats.py, whose button names a choice by its index in
this list) and answering, which sends only an offered choice as a choice."""

from __future__ import annotations

MAX_CHOICES = 20


def offered(detail: object) -> list[str]:
    """The choices `detail` offers, in the agent's order: strings that are not blank, at
    most MAX_CHOICES."""
    if not isinstance(detail, dict):
        return []
    listed = detail.get("choices", detail.get("options"))
    if not isinstance(listed, list):
        return []
    return [c for c in listed if isinstance(c, str) and c.strip()][:MAX_CHOICES]
