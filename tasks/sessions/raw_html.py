"""Raw HTML written in markdown: only `<progress>` survives as markup (PROTOCOL.md §4; seed 001:
"other raw HTML is stripped by the Markdown sanitizer").

Dropped, not escaped: a tag an agent wrote (`<b>`, `<a href>`, `<table>`) goes, and the text
inside it stays, as the reference's sanitizer does; shown escaped, a card would fill with
markup no one meant to read. Markdown's own elements are untouched: this sees only what
markdown-it hands over as raw HTML (its html_block and html_inline tokens), so the allowlist
that follows (tasks/sessions/progress_card.py) keeps `<strong>` made from `**` and never one
written as a tag.

Each piece of raw HTML is read with the tokenizer of the parser that sanitizes the card
(html5lib, as a browser reads tags) and written anew from what it found: escaped text, a
progress bar with only its value and max, and the bare tags of raw-text and foreign elements,
which sessions/progress_card.py then removes with everything inside them (their content is code,
which would otherwise be left on the card as visible junk). Nothing else of the agent's markup
is copied, so nothing else can come out of it as a tag.
"""

from __future__ import annotations

import html
import re

from bleach import html5lib_shim

# Elements whose content is code or raw text (removed with it, closed or not) and foreign or
# embedding elements (removed with their content when closed); sessions/progress_card.py's
# _RAW_TEXT.
RAW_TEXT_TAGS = (
    "script",
    "style",
    "textarea",
    "title",
    "noscript",
    "noembed",
    "noframes",
    "iframe",
    "xmp",
)
FOREIGN_TAGS = ("template", "svg", "math", "object", "select")
_KEPT = frozenset(("progress", *RAW_TEXT_TAGS, *FOREIGN_TAGS))
_RAW_TEXT = "|".join(RAW_TEXT_TAGS)
_FOREIGN = "|".join(FOREIGN_TAGS)
# Each element as an opening tag, anything, its closing tag; and its closing tag alone.
_CLOSED_ELEMENTS = [
    (
        re.compile(rf"<{name}\b[^>]*>.*?</{name}\s*>", re.IGNORECASE | re.DOTALL),
        re.compile(rf"</{name}\s*>", re.IGNORECASE),
    )
    for name in (*RAW_TEXT_TAGS, *FOREIGN_TAGS)
]
# An unclosed raw-text element runs to the end, as in a browser; foreign content only when
# closed, so prose that merely names such a tag keeps the rest of the card.
_ELEMENTS = re.compile(
    rf"<({_RAW_TEXT})\b[^>]*>.*?(?:</\1\s*>|\Z)|<({_FOREIGN})\b[^>]*>.*?</\2\s*>",
    re.IGNORECASE | re.DOTALL,
)
_PROGRESS_ATTRIBUTES = ("value", "max")

_TEXT = frozenset(
    {
        html5lib_shim.constants.tokenTypes["Characters"],
        html5lib_shim.constants.tokenTypes["SpaceCharacters"],
    }
)
_START = html5lib_shim.constants.tokenTypes["StartTag"]
_END = html5lib_shim.constants.tokenTypes["EndTag"]


def drop_tags(raw: str) -> str:
    """`raw` (HTML an agent wrote in markdown) as escaped text, with no tag of its own but
    `<progress value max>` and the bare tags of raw-text and foreign elements."""
    kept: list[str] = []
    for token in html5lib_shim.HTMLTokenizer(_without_closed_elements(raw)):
        kind = token["type"]
        if kind in _TEXT:
            kept.append(html.escape(token["data"], quote=False))
        elif kind in (_START, _END) and token["name"] in _KEPT:
            kept.append(_tag(token))
        # Any other tag, comment, doctype or parse error: dropped.
    return "".join(kept)


def _without_closed_elements(raw: str) -> str:
    """`raw` without the raw-text and foreign elements closed within it, found as text (as
    they always were: the tokenizer would take a `<script>` inside a comment or CDATA for
    part of it, and leave the code after it behind). Only up to an element's last closing
    tag: past it no opening can match, and trying each one would take quadratic time."""
    if raw.count("<") < 2:
        return raw  # one tag (most raw HTML in markdown is one inline tag): nothing closed
    for element, closing in _CLOSED_ELEMENTS:
        end = max((found.end() for found in closing.finditer(raw)), default=0)
        if end:
            raw = element.sub("", raw[:end]) + raw[end:]
    return raw


def drop_code_elements(rendered: str) -> str:
    """The whole rendered card without raw-text and foreign elements and what they hold: a
    `<script>` in one piece of raw HTML can end in another (a paragraph later)."""
    return _ELEMENTS.sub("", rendered)


def _tag(token: dict) -> str:
    name = token["name"]
    if token["type"] == _END:
        return f"</{name}>"
    if name != "progress":
        return f"<{name}>"
    attributes = token["data"]
    written = "".join(
        f' {key}="{html.escape(attributes[key])}"'
        for key in _PROGRESS_ATTRIBUTES
        if key in attributes
    )
    return f"<progress{written}>"
