"""Reading JSON that agents sent, as an older Onlooker stored it.

Before pushes were sanitized on the way in, an agent could send a lone UTF-16 surrogate
(`"\\ud800"`). JSONField stores it escaped, so the insert succeeds, but it comes back from
`json.loads` as a lone surrogate that no page can encode as UTF-8: the session would 500
for every viewer, forever. Every JSONField holding agent data reads through this decoder,
which turns lone surrogates into U+FFFD, so a stored session always renders.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Cheap tests first: without a surrogate escape (or a raw surrogate) there is nothing to
# repair, which spares rescanning large artifacts on every read. Two searches, each with a
# fast path (a literal prefix; ASCII text has no raw surrogate), are ten times quicker than
# one with both alternatives, which the regex engine tries at every character.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
RAW_SURROGATE = re.compile(r"[\ud800-\udfff]")
# Read left to right, an escaped backslash is consumed whole, so `\\ud800` (a backslash,
# then the letters) is never taken for an escape; a high surrogate followed by a low one is
# one character and kept; anything else in the surrogate range is lone. Repairing the text,
# not the decoded value, needs no walk over (possibly very deep) nesting.
ESCAPES = re.compile(
    r"(?P<backslash>\\\\)"
    r"|(?P<pair>\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
    r"|[\ud800-\udfff]"
)


def _repair(match: re.Match) -> str:
    if match["backslash"] or match["pair"]:
        return match[0]
    return "\\ufffd"


def without_lone_surrogates(text: str) -> str:
    """JSON text whose strings (keys too) hold U+FFFD wherever they held a lone surrogate."""
    escaped = "\\u" in text and SURROGATE_ESCAPE.search(text) is not None
    if not escaped and (text.isascii() or RAW_SURROGATE.search(text) is None):
        return text
    return ESCAPES.sub(_repair, text)


class StoredJSONDecoder(json.JSONDecoder):
    """What JSONFields with agent data decode with: never hands a page a lone surrogate."""

    def decode(self, s: str, *args: Any, **kwargs: Any) -> Any:
        return super().decode(without_lone_surrogates(s), *args, **kwargs)
