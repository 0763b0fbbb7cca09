"""An artifact's markdown, rendered once, when its version is stored, by the progress card's
renderer and sanitizer (the same allowlist, the same stripping): the session page shows the
stored HTML.
"""

from __future__ import annotations

from typing import Any

from tasks.sessions import progress_card

# Of an artifact's markdown: what its version on the session page renders (the rest is a
# "show all" away, as plain text).
MAX_ARTIFACT_MARKDOWN_CHARS = 10_000


def render_artifact(markdown: str) -> str:
    """A text/markdown artifact's first MAX_ARTIFACT_MARKDOWN_CHARS characters, rendered and
    sanitized exactly as a card's note is (same allowlist, same stripping)."""
    text = markdown[:MAX_ARTIFACT_MARKDOWN_CHARS].replace("\x00", "")
    return progress_card.render(progress_card.strip_invisible(text))


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
    return render_artifact("\n\n".join(texts)) if texts else ""
