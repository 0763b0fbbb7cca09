"""Whole numbers written by clients: ids, limits, Content-Length.

`str.isdigit()` also accepts digits `int()` refuses ("²"), and `int()` refuses strings over
4,300 digits: either turned a client's typo into a 500. A database refuses ids past 2**63 - 1
too, so a number longer than anything meaningful saturates at LARGEST instead."""

from __future__ import annotations

LARGEST = 10**18  # below PostgreSQL's bigint limit, above any id, size or count used here


def whole_number(text: str) -> int | None:
    """`text` as a non-negative integer if it is written in ASCII digits alone (no sign, no
    spaces), saturated at LARGEST; else None."""
    if not text or not (text.isascii() and text.isdigit()):
        return None
    if len(text) > len(str(LARGEST)):
        return LARGEST
    return min(int(text), LARGEST)
