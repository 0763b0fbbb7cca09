"""An agent's tier: which of the Nylorun profile v2 extensions it activated, as it echoes them
in the `A2A-Extensions` header of its answers to Onlooker's calls (PROTOCOL §3). Pure: reading
the header and naming the tier; agents.record_echo stores what was read.
"""

from __future__ import annotations

from tasks.wire import profile

# In the order people read them; the URI's own name (…/a2a/<name>/v1) is the short name.
SHOWN_ORDER = (
    profile.INTERACTIONS,
    profile.PROGRESS,
    profile.TELEMETRY,
    profile.FILES,
    profile.EFFECTS,
)
SHORT_NAMES = {uri: uri.rstrip("/").split("/")[-2] for uri in SHOWN_ORDER}
MAX_HEADER = 4_000  # characters of the header read; five URIs take ~230
CORE = "Core A2A"
UNKNOWN = "not known yet (Onlooker has not called it)"


def activated(header: str | None) -> list[str] | None:
    """The profile's extensions named in an echoed `A2A-Extensions` header, in the profile's
    order (other URIs are not Onlooker's to show); None when the answer had no such header."""
    if header is None:
        return None
    named = {uri.strip() for uri in header[:MAX_HEADER].split(",")}
    return [uri for uri in profile.EXTENSIONS if uri in named]


def _names(uris: list[str]) -> list[str]:
    return [SHORT_NAMES[uri] for uri in SHOWN_ORDER if uri in uris]


def describe(uris: list[str] | None, *, called: bool, declared: list[str] = ()) -> str:
    """ "Profile v2: interactions, progress, …" for the extensions activated, "Core A2A" for
    none; UNKNOWN before the agent has answered a call. An agent that echoes no header at all
    (a2a-sdk for Python never does) is named by what its card declares, and says so, rather
    than "Core A2A" beside its typed approvals."""
    if not called:
        return UNKNOWN
    if uris is None:
        names = _names(list(declared))
        if names:
            return f"Profile v2 (declared by its card, not echoed): {', '.join(names)}"
        return CORE
    names = _names(uris)
    return f"Profile v2: {', '.join(names)}" if names else CORE
