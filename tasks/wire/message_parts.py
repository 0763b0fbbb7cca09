"""A transcript message's parts other than text (A2A 1.0 `url`, `raw` and `data` parts): what
is kept of them and how they are offered, in and out.

Kept bounded, whatever the agent sends: a raw part's bytes up to MAX_RAW_BYTES, and
MAX_MESSAGE_BYTES for a message's files together (beyond that, only a file's name, type and
size, and the page says why it was not kept); a data part's JSON up to MAX_DATA_CHARS, and
MAX_SHOWN_CHARS of URLs and JSON per message; at most MAX_PARTS parts. What the page shows is
kept apart from a raw part's bytes (`files`), which only its download loads. Agent-given names and
media types are plain text (agent_text.plain_text); a URL is a link only when it is http(s).

People's links go out as url parts (`links_from_form`): http(s) only, short, a few.
"""

from __future__ import annotations

import base64
import binascii
import json
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tasks.wire import agent_text
from tasks.wire import protocol as p

MAX_PARTS = 20  # non-text parts kept per message
MAX_RAW_BYTES = 1_000_000  # decoded bytes of one raw part kept for download
MAX_MESSAGE_BYTES = 2_000_000  # of all a message's raw parts together
MAX_DATA_CHARS = 4_000  # of one data part's JSON, as shown
# Of all a message's shown parts together (URLs and JSON): the session page budgets them
# with the message's text (tasks/sessions/activity.py).
MAX_SHOWN_CHARS = 10_000
MAX_URL_CHARS = 2_000  # a longer URL is shown cut, never linked
MAX_NAME_CHARS = 200  # of a filename or media type
MAX_LINKS = 5  # links a person may attach to one message

# Served as themselves; anything else is downloaded as application/octet-stream (never HTML,
# SVG or script, which a browser could run at Onlooker's origin).
SAFE_MEDIA_TYPES = frozenset(
    {
        "application/pdf",
        "application/json",
        "application/zip",
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "text/plain",
        "text/csv",
    }
)


_HIDDEN = frozenset({"Cc", "Cf", "Cs"})  # controls, bidi/format marks, surrogates


class BadLinks(ValueError):
    """The links a person attached cannot be sent; str(error) says why."""


def web_link(url: str) -> bool:
    """Whether the page may link to `url`: http(s), a host, short, nothing hidden in it."""
    if len(url) > MAX_URL_CHARS:
        return False
    if any(c.isspace() or unicodedata.category(c) in _HIDDEN for c in url):
        return False
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.netloc)


def _name(value: str) -> str:
    return agent_text.plain_text(value, MAX_NAME_CHARS)


def _data_json(data: Any) -> str:
    try:
        text = json.dumps(data, ensure_ascii=False, indent=2, sort_keys=True)
    except (ValueError, TypeError, RecursionError):  # very deep nesting, huge numbers
        return "(data that cannot be shown as text)"
    # Bidi and other invisible characters stay visible as escapes: they cannot reorder the page.
    return "".join(
        f"\\u{ord(c):04x}" if c != "\n" and unicodedata.category(c) in _HIDDEN else c for c in text
    )


def _raw(part: p.Part, files: list[str], room: int) -> dict:
    shown: dict[str, Any] = {
        "kind": "file",
        "filename": _name(part.filename) or "file",
        "mediaType": _name(part.media_type),
    }
    raw = part.raw or ""
    # base64 is 4 characters per 3 bytes: a part far beyond the cap is not even decoded.
    if len(raw) > (MAX_RAW_BYTES // 3 + 2) * 4:
        shown.update(size=len(raw) * 3 // 4, note="too large to keep (over 1 MB)")
        return shown
    try:
        content = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        shown["note"] = "not valid base64; not kept"
        return shown
    shown["size"] = len(content)
    if len(content) > MAX_RAW_BYTES:
        shown["note"] = "too large to keep (over 1 MB)"
        return shown
    if len(content) > room:
        shown["note"] = "not kept: the message's other files took the room (2 MB in all)"
        return shown
    shown["file"] = len(files)
    files.append(base64.b64encode(content).decode("ascii"))
    return shown


def kept(parts: Iterable[p.Part]) -> tuple[list[dict], list[str]]:
    """(what the page shows of a message's non-text parts, the raw parts' bytes in base64)."""
    shown: list[dict] = []
    files: list[str] = []
    others = [part for part in parts if part.text is None]
    room, file_room = MAX_SHOWN_CHARS, MAX_MESSAGE_BYTES
    for index, part in enumerate(others):
        if index == MAX_PARTS or room <= 0:
            shown.append({"kind": "more", "count": len(others) - index})
            break
        if part.url is not None:
            url = part.url[: min(MAX_URL_CHARS, room)]
            room -= len(url)
            shown.append(
                {
                    "kind": "url",
                    "url": url,
                    "link": url == part.url and web_link(url),
                    "filename": _name(part.filename),
                    "mediaType": _name(part.media_type),
                }
            )
        elif part.raw is not None:
            shown.append(_raw(part, files, file_room))
            if "file" in shown[-1]:
                file_room -= shown[-1]["size"]
        elif part.data is not None:
            text = _data_json(part.data)
            limit = min(MAX_DATA_CHARS, room)
            room -= min(len(text), limit)
            shown.append({"kind": "data", "json": text[:limit], "cut": len(text) > limit})
    return shown, files


@dataclass(frozen=True)
class Download:
    content: bytes
    content_type: str  # its own only when allow-listed, else application/octet-stream
    filename: str


def download(parts: Any, files: Any, index: int) -> Download | None:
    """The raw part kept as `files[index]` of a message, or None when it has none such."""
    shown = next(
        (
            part
            for part in (parts if isinstance(parts, list) else [])
            if isinstance(part, dict) and part.get("kind") == "file" and part.get("file") == index
        ),
        None,
    )
    if shown is None or not isinstance(files, list) or not 0 <= index < len(files):
        return None
    media_type = str(shown.get("mediaType") or "").split(";")[0].strip().lower()
    return Download(
        content=base64.b64decode(files[index]),
        content_type=media_type if media_type in SAFE_MEDIA_TYPES else "application/octet-stream",
        filename=str(shown.get("filename") or "file"),
    )


def links_from_form(raw: str) -> list[dict]:
    """The url parts for the links a person attached (one per line), or BadLinks."""
    links = [line.strip() for line in raw.splitlines() if line.strip()]
    if len(links) > MAX_LINKS:
        raise BadLinks(f"attach at most {MAX_LINKS} links")
    for link in links:
        if len(link) > MAX_URL_CHARS:
            raise BadLinks(f"a link has at most {MAX_URL_CHARS} characters")
        if not web_link(link):
            raise BadLinks(f"links must be http:// or https:// URLs, not {link[:60]!r}")
    return [{"url": link} for link in links]
