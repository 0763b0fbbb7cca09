"""Nothing an authenticated agent sends makes Onlooker answer 5xx, and a refused request
changes nothing. Bodies are generated from the A2A 1.0 StreamResponse schema (all four
members, every part kind, the profile extensions in metadata), with hostile values in every
field: lone surrogates, NUL, control and bidi characters, overlong and empty strings, wrong
JSON types, numbers at and past every limit, deep nesting, out-of-range timestamps. Each is
signed for real and POSTed to the receiver; card API bodies go to `/api/progress-card`.

A third of the bodies are *mischievous*: any field may hold anything, so most are refused
and the refusals are tested. The rest are *sly*: every field has its type, but strings are
hostile, so most are accepted and what stores and renders them is tested."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tasks.answering.agents import new_api_token
from tasks.models import (
    Artifact,
    Delivery,
    Interaction,
    Message,
    ProgressCard,
    Session,
    Task,
    digest,
)
from tasks.wire import profile, protocol
from tests.conftest import make_agent, push

EXAMPLES = 2000
CARD_EXAMPLES = 300
PROPERTY_SETTINGS = settings(
    deadline=None,
    derandomize=True,  # the same examples in every run: CI time stays what was measured
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,  # the database is shared by all examples
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)


def weighted(*choices: tuple[int, st.SearchStrategy]) -> st.SearchStrategy:
    """One of the strategies, picked in proportion to its weight (st.one_of picks evenly)."""
    return st.sampled_from([s for weight, s in choices for _ in range(weight)]).flatmap(lambda s: s)


ODD = st.sampled_from(
    [
        "\ud800",  # lone surrogates, high and low
        "\udfff",
        "\udbffA",
        "\x00",
        "\x01",
        "\x1b[31m",
        "\x7f",
        "\u0085",
        "\u2028",
        "\u202e",  # right-to-left override
        "\u2066",
        "\u200b",
        "\ufeff",
        "\ufffd",
        "\U0001f600",
        "\U000e0041",
        "<script>alert(1)</script>",
        "&amp;",
        '"',
        "\\",
        "\\u0000",
        " ",
        "\n",
        "\t",
    ]
)
# Mostly short and readable; sometimes any code point (surrogates included), sometimes long.
TEXT = weighted(
    (4, st.text(st.sampled_from("abc-_.:/ 0123"), min_size=1, max_size=8)),
    (3, st.lists(st.one_of(ODD, st.text(max_size=3)), max_size=4).map("".join)),
    (2, st.text(st.characters(exclude_categories=()), max_size=12)),
    (2, st.sampled_from(["", " ", "\n", " \t\r\n", "\u3000", "\u00a0", "\u2028", "\x1c"])),
    (
        1,
        st.builds(
            lambda chunk, count: chunk * count,
            st.one_of(ODD, st.just("x")),
            st.sampled_from([199, 200, 201, 301, 1025, 10_000]),
        ),
    ),
)
NUMBER = st.one_of(
    st.integers(-(2**64), 2**64),
    st.floats(),  # NaN and infinities included: refused as JSON
    st.sampled_from([0, -1, 2**53 - 1, 2**53, 2**63, 10**30, 10**400, -0.0, 1e308, 5e-324]),
)
SCALAR = st.one_of(st.none(), st.booleans(), NUMBER, TEXT)


def nested(depth: int, leaf: object) -> object:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


JUNK = weighted(
    (
        4,
        st.recursive(
            SCALAR,
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
            max_leaves=6,
        ),
    ),
    (1, st.builds(nested, st.integers(1, 130), SCALAR)),
)


def _stamp(moment, offset_minutes: int, fraction: str) -> str:
    sign = "+" if offset_minutes >= 0 else "-"
    hours, minutes = divmod(abs(offset_minutes), 60)
    zone = "Z" if offset_minutes == 0 else f"{sign}{hours:02d}:{minutes:02d}"
    return moment.isoformat(timespec="seconds") + fraction + zone


TIMESTAMPS = st.one_of(
    st.builds(
        _stamp,
        st.datetimes(),
        st.integers(-23 * 60 - 59, 23 * 60 + 59),
        st.sampled_from(["", ".5", ".123456", ".123456789"]),
    ),
    st.sampled_from(
        [
            "9999-12-31T23:59:59-23:59",
            "0001-01-01T00:00:00+23:59",
            "0001-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999999Z",
            "2026-02-30T00:00:00Z",
            "2026-11-30T12:00:00",
        ]
    ),
)


def stream_responses(mischievous: bool) -> st.SearchStrategy:
    """StreamResponse bodies. Mischievous: any field may hold any JSON. Otherwise (sly)
    fields keep their JSON type and strings are hostile."""

    def field(valid: st.SearchStrategy, text_ok: bool = True) -> st.SearchStrategy:
        """An optional field: usually valid, else a hostile string, or (mischievous) any
        JSON at all."""
        if mischievous:
            return weighted((8, valid), (3, TEXT), (1, JUNK))
        return weighted((3, valid), (1, TEXT)) if text_ok else valid

    def required(valid: st.SearchStrategy) -> st.SearchStrategy:
        """A field the body is refused without: valid more often, so that enough bodies
        get past the parser to exercise what stores them."""
        return weighted((16, valid), (2, TEXT), (1, JUNK)) if mischievous else valid

    ids = required(st.sampled_from(["t1", "t2", "ctx-1", "ctx-2", "m1", "a1"]) | TEXT)
    states = sorted(protocol.STATES)
    state = required(st.sampled_from([*states, *states, "TASK_STATE_UNSPECIFIED", "working"]))
    numbers = field(NUMBER, text_ok=False)
    texts = field(TEXT)
    any_json = (
        JUNK
        if mischievous
        else st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=3), max_leaves=4)
    )
    part = st.builds(
        lambda extra, content: {**extra, **content},
        st.fixed_dictionaries(
            {},
            optional={
                "filename": texts,
                "mediaType": field(st.just("text/plain")),
                "metadata": field(st.dictionaries(TEXT, any_json, max_size=2), text_ok=False),
            },
        ),
        st.one_of(
            st.fixed_dictionaries({"text": required(TEXT)}),
            st.fixed_dictionaries({"data": any_json}),
            st.fixed_dictionaries({"url": field(st.just("https://a.test/x"))}),
            st.fixed_dictionaries({"raw": field(st.just("aGk="))}),
        ),
    )
    if mischievous:
        part = weighted((16, part), (1, st.just({"text": "a", "data": 1})), (1, JUNK))
    parts = required(st.lists(part, min_size=1, max_size=3))
    step = st.fixed_dictionaries(
        {"label": texts, "state": field(st.sampled_from(profile.STEP_STATES))},
        optional={"note": texts},
    )
    extensions = {
        profile.PROGRESS: field(
            st.fixed_dictionaries({"steps": field(st.lists(step, max_size=22), text_ok=False)}),
            text_ok=False,
        ),
        profile.INTERACTIONS: field(
            st.fixed_dictionaries(
                {"interactionId": ids, "kind": field(st.sampled_from(profile.INTERACTION_KINDS))},
                optional={"prompt": texts, "detail": any_json},
            ),
            text_ok=False,
        ),
        profile.FILES: field(
            st.fixed_dictionaries(
                {},
                optional={
                    "kind": texts,
                    "version": field(st.one_of(TEXT, NUMBER)),
                    "size": numbers,
                    "sha256": field(st.sampled_from(["ab" * 32, "AB" * 32, "ab" * 31])),
                    "path": texts,
                },
            ),
            text_ok=False,
        ),
        profile.TELEMETRY: field(
            st.fixed_dictionaries(
                {},
                optional={
                    "steps": numbers,
                    "tokens": numbers,
                    "costUsd": numbers,
                    "traceId": texts,
                },
            ),
            text_ok=False,
        ),
        profile.EFFECTS: field(st.fixed_dictionaries({"uncertain": texts}), text_ok=False),
    }
    metadata = field(
        st.fixed_dictionaries({}, optional={**extensions, "x": any_json, "\ud800": SCALAR}),
        text_ok=False,
    )
    message = st.fixed_dictionaries(
        {
            "messageId": ids,
            "role": required(st.sampled_from(["ROLE_USER", "ROLE_AGENT"])),
            "parts": parts,
        },
        optional={
            "contextId": ids,
            "taskId": ids,
            "metadata": metadata,
            "extensions": field(st.lists(TEXT, max_size=2), text_ok=False),
        },
    )
    status = required(
        st.fixed_dictionaries(
            {"state": state},
            optional={"timestamp": field(TIMESTAMPS), "message": required(message)},
        )
    )
    artifact = required(
        st.fixed_dictionaries(
            {"artifactId": ids, "parts": parts},
            optional={"name": texts, "description": texts, "metadata": metadata},
        )
    )
    flag = field(st.booleans(), text_ok=False)
    members = {
        "task": st.fixed_dictionaries(
            {"id": ids, "contextId": ids, "status": status},
            optional={
                "artifacts": field(st.lists(artifact, max_size=2), text_ok=False),
                "history": field(st.lists(required(message), max_size=2), text_ok=False),
                "metadata": metadata,
            },
        ),
        "statusUpdate": st.fixed_dictionaries(
            {"taskId": ids, "contextId": ids, "status": status}, optional={"metadata": metadata}
        ),
        "artifactUpdate": st.fixed_dictionaries(
            {"taskId": ids, "contextId": ids, "artifact": artifact},
            optional={"append": flag, "lastChunk": flag, "metadata": metadata},
        ),
        "message": message,
    }
    one_member = [(6, body.map(lambda v, name=name: {name: v})) for name, body in members.items()]
    if not mischievous:
        return weighted(*one_member)
    return weighted(
        *one_member,
        (1, st.fixed_dictionaries({}, optional={name: field(m) for name, m in members.items()})),
        (1, JUNK),
    )


STREAM_RESPONSES = weighted((1, stream_responses(mischievous=True)), (2, stream_responses(False)))


def encoded(body: object, ascii_only: bool) -> bytes:
    """The body as an agent's JSON encoder writes it: escaped to ASCII, or as UTF-8 where it
    can be (a lone surrogate cannot, so that body goes escaped)."""
    if not ascii_only:
        try:
            return json.dumps(body, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            pass
    return json.dumps(body).encode()


def store_fingerprint() -> tuple:
    """Row counts of everything a push or a card write can add, and sums an update moves."""
    counts = [
        f"(SELECT COUNT(*) FROM {model._meta.db_table})"
        for model in (Delivery, Session, Task, Message, Artifact, Interaction, ProgressCard)
    ]
    moved = [
        f"(SELECT COALESCE(SUM(revision), 0) FROM {ProgressCard._meta.db_table})",
        f"(SELECT MAX(updated_at) FROM {Session._meta.db_table})",
        f"(SELECT COALESCE(SUM(duplicates), 0) FROM {Delivery._meta.db_table})",
    ]
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(counts + moved))
        return cursor.fetchone()


@settings(PROPERTY_SETTINGS, max_examples=EXAMPLES)
@given(
    bodies=weighted(
        (3, st.lists(STREAM_RESPONSES, min_size=1, max_size=1)),
        (1, st.lists(STREAM_RESPONSES, min_size=2, max_size=2)),
    ),
    ascii_only=st.booleans(),
)
@pytest.mark.slow
def test_no_push_body_causes_a_5xx_and_a_refused_one_changes_nothing(
    db, client, bodies, ascii_only
):
    # A fresh agent for each example: the outcome depends only on the example, so a failure
    # shrinks and replays. A second body meets what the first one stored.
    registered = make_agent(signing=True)
    for body in bodies:
        before = store_fingerprint()
        response = push(client, registered, encoded(body, ascii_only))
        event(f"HTTP {response.status_code}")
        assert response.status_code < 500, response.content
        if response.status_code == 200:
            assert Delivery.objects.filter(pk=response.json()["delivery"]).exists()
        else:
            assert response.status_code == 400, response.content
            assert set(response.json()) == {"error", "detail"}
            assert store_fingerprint() == before


@pytest.fixture
def card_writer(db) -> str:
    """An agent's card API token."""
    registered = make_agent(name="Card writer")
    token = new_api_token()
    registered.agent.api_token_digest = digest(token)
    registered.agent.save(update_fields=["api_token_digest"])
    return token


def card_field(valid: st.SearchStrategy) -> st.SearchStrategy:
    return weighted((3, valid), (2, TEXT), (1, JUNK))


CARD_STEP = card_field(
    st.fixed_dictionaries(
        {
            "step": card_field(TEXT),
            "status": card_field(st.sampled_from(["pending", "in_progress", "done"])),
        },
        optional={"note": card_field(TEXT), "extra": SCALAR},
    )
)
CARD_BODIES = weighted(
    (
        6,
        st.fixed_dictionaries(
            {"sessionKey": card_field(st.sampled_from(["s1", "s2"]) | TEXT)},
            optional={
                "plan": card_field(st.lists(CARD_STEP, max_size=4)),
                "markdown": card_field(TEXT),
                "other": SCALAR,
            },
        ),
    ),
    (1, JUNK),
)


@settings(PROPERTY_SETTINGS, max_examples=CARD_EXAMPLES)
@given(body=CARD_BODIES, ascii_only=st.booleans())
def test_no_card_api_body_causes_a_5xx_and_a_refused_one_changes_nothing(
    client, card_writer, body, ascii_only
):
    before = store_fingerprint()
    response = client.post(
        "/api/progress-card",
        encoded(body, ascii_only),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {card_writer}",
    )
    event(f"HTTP {response.status_code}")
    assert response.status_code < 500, response.content
    if response.status_code != 200:
        assert response.status_code == 400, response.content
        assert store_fingerprint() == before
