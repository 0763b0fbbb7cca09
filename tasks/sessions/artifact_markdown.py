"""Agent markdown outside the card: an artifact's, rendered once when its version is stored,
and a transcript message's, rendered once when the message is written, by the progress
card's renderer and sanitizer (the same allowlist, the same stripping): the session page
shows the stored HTML. And the same markdown as plain text, for search excerpts.
"""

from __future__ import annotations

import html
import re
from typing import Any

from tasks.sessions import progress_card

# Of a message's markdown: what the session page shows of it (activity.MESSAGE_CHARS; the
# rest is a "show all" away, as plain text).
MAX_MESSAGE_MARKDOWN_CHARS = 10_000
# Of an artifact's markdown: what its version on the session page renders (the rest is a
# "show all" away, as plain text).
MAX_ARTIFACT_MARKDOWN_CHARS = 10_000


def render_artifact(markdown: str) -> str:
    """A text/markdown artifact's first MAX_ARTIFACT_MARKDOWN_CHARS characters, rendered and
    sanitized exactly as a card's note is (same allowlist, same stripping)."""
    return _render(markdown[:MAX_ARTIFACT_MARKDOWN_CHARS])


def _render(markdown: str) -> str:
    return progress_card.render(progress_card.strip_invisible(markdown.replace("\x00", "")))


_MARKDOWN_SUFFIXES = (".md", ".markdown")


def is_markdown_part(part: Any, files: Any) -> bool:
    """A text part in markdown: its mediaType says text/markdown, or it has none and the
    artifact's files/v1 path names a markdown file."""
    if not isinstance(part, dict) or not isinstance(part.get("text"), str):
        return False
    media = part.get("mediaType")
    if isinstance(media, str) and media:
        return media.split(";")[0].strip().lower() == "text/markdown"
    path = files.get("path") if isinstance(files, dict) else None
    return isinstance(path, str) and path.lower().endswith(_MARKDOWN_SUFFIXES)


def artifact_html(parts: Any, files: Any) -> str:
    """An artifact version's markdown text parts, rendered once (when the version is stored)
    by the card's renderer and sanitizer; "" when it has none."""
    texts = [
        part["text"]
        for part in (parts if isinstance(parts, list) else [])
        if is_markdown_part(part, files) and part["text"]
    ]
    return _boxed_tables(render_artifact("\n\n".join(texts))) if texts else ""


def message_html(text: str) -> str:
    """An agent message's first MAX_MESSAGE_MARKDOWN_CHARS characters, rendered and sanitized
    exactly as a card's note is: what Message.html keeps (written once, with the message)."""
    if not text:
        return ""
    return _boxed_tables(_render(text[:MAX_MESSAGE_MARKDOWN_CHARS]))


_TABLE_BOX = '<div class="markdown-table" tabindex="0" role="group" aria-label="Table"><table>'


def _boxed_tables(html: str) -> str:
    """Each table in a box that scrolls sideways when the table is wider than the page (its
    words are never broken: static/css/transcript.css), and that a keyboard can reach, and so
    scroll. The sanitizer writes every table tag bare, and a "<table>" an agent typed as text
    escaped: these are the tables."""
    return html.replace("<table>", _TABLE_BOX).replace("</table>", "</table></div>")


# -- plain text (search excerpts) ----------------------------------------------------------

# Regular expressions rather than the parser: an excerpt is a window cut out of the text,
# where a parser would leave half a construct as markup, and a page of results strips fifty
# of them (the parser takes milliseconds for each).
_PLAIN_STEPS = (
    # Autolinks keep their address; then every tag goes (its text stays), and the start of a
    # tag cut by the window's end.
    (re.compile(r"<((?:https?|mailto):[^<>\s]+)>"), r"\1"),
    (re.compile(r"</?[A-Za-z][^<>]*>|<!--.*?-->"), " "),
    (re.compile(r"<[A-Za-z/][^>]*$"), " "),
    # Tables: the |---|:--:| line goes, the cells' pipes become spaces.
    (re.compile(r"^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$", re.M), " "),
    (re.compile(r"\|"), " "),
    # Block markers at a line's start: headings, quotes, bullets, rules, code fences.
    (re.compile(r"^[ \t]{0,3}(?:#{1,6}[ \t]+|>[ >\t]*|[-*+][ \t]+(?:\[[ xX]\][ \t]+)?)", re.M), ""),
    (re.compile(r"^[ \t]*(?:[-*_][ \t]*){3,}$|^[ \t]*(?:`{3,}|~{3,})[^\n]*$", re.M), " "),
    # Images and links keep their text; emphasis, strikethrough and code marks go.
    (re.compile(r"!?\[([^\]\n]*)\]\([^)\n]*\)"), r"\1"),
    (re.compile(r"\*{2,}|_{2,}|~{2,}|`+"), ""),
    (re.compile(r"(?<![^\W_])[*_]|[*_](?![^\W_])"), ""),
    (re.compile(r"\\([!-/:-@\[-`{-~])"), r"\1"),
)


def plain_text(markdown: str) -> str:
    """Markdown (or a window cut out of it) as the words a reader sees, without its markup:
    no tags, no table rules or pipes, no emphasis marks. Whitespace is left as it is."""
    text = markdown
    for pattern, replacement in _PLAIN_STEPS:
        text = pattern.sub(replacement, text)
    return html.unescape(text)
