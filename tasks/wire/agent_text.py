"""An agent's own words as people see them: plain, on one line, bounded.

Below both the A2A client (cards, errors) and the HTTP of its calls (a reply's encoding), so
either can quote an agent without the other; `a2a_client.plain_text` is this function.
"""

from __future__ import annotations

import html
import re
import unicodedata

MAX_AGENT_TEXT = 200  # characters of an agent's own words (an error, a header) shown to people

# Agents' words are read from a bounded prefix: an excerpt is short, and the markup and
# spaces it drops cannot make a 100 KB message cost more than this much work.
_EXCERPT_WINDOW = 20_000
_TAG = re.compile(r"<[^<>]*>")  # [^<>]: one pass over the text, whatever it holds
_TERMINAL_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")  # colours, cursor moves
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})  # controls, bidi/format marks, surrogates


def hidden(char: str) -> bool:
    return unicodedata.category(char) in _HIDDEN_CATEGORIES


def plain_text(text: object, limit: int = MAX_AGENT_TEXT) -> str:
    """An agent's own words as people see them (a JSON-RPC error message, a header, its
    name): plain text on one line, at most `limit` characters, "…" when cut. Markup is
    dropped and entities decoded; control and format characters (terminal escapes, bidi
    overrides that reorder what is shown) and lone surrogates (which no database stores) are
    removed. Every place that shows an agent's words to people goes through this."""
    if not isinstance(text, str):
        return ""
    cut = len(text) > _EXCERPT_WINDOW
    text = html.unescape(_TAG.sub(" ", _TERMINAL_ESCAPE.sub("", text[:_EXCERPT_WINDOW])))
    text = "".join(" " if c.isspace() else c for c in text if not hidden(c) or c.isspace())
    text = " ".join(text.split())
    if cut or len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


def web_url(url: object) -> str:
    """An agent-supplied URL if it is http(s), else nothing: pages link only to these."""
    if isinstance(url, str) and url.lower().startswith(("https://", "http://")):
        return url
    return ""
