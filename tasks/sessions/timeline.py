"""A session's timeline: every state each of its tasks entered and for how long, the
decisions people made, the card's revisions and the artifact versions, in time order. The
one writer of `TimelineEntry` rows, and their one reader.

Writing. The applier applies many pushes in one transaction: their entries are gathered in a
`Pending` (one per batch, on `pushes/apply`'s `Locked`) and inserted with one bulk INSERT when the
batch (or, applied alone, its delivery's savepoint) is done, so a push costs no query of its
own here. Answers and dismissals (answers.py, dismissals.py) and card-API writes are one
person's action each: their entry is inserted at once, in the action's transaction.

- state: a current status whose state differs from the task's stored one, or a task's first
  status (statuses older than the stored one, and any after a final state, change no state);
- card: a derive (or a card-API write) that wrote a new revision: one entry per revision,
  so a batch of pushes that changed the card once leaves one entry, not one per push;
- artifact: a new artifact version (not its later chunks);
- answer: a decision the agent confirmed, a question a person dismissed, one whose
  agent's declared expiry passed (`expired`: denied on the team's behalf, or only marked),
  or an uncertain effect a person marked checked ("checked (…)": nothing went to the agent);
  with what was decided in words (`made`), how (`via`) and the reason sent beside it;
- cancel: a person asked the agent to cancel a task (`actor`: who), written where the cancel
  is sent (answering/talking.py), so "Cancelled by alice" stays after the agent's own
  "Cancelled".

Order is Onlooker's clock (`at`: when the push was received, or the answer recorded), then
insertion; the agent's own status timestamp is kept as `agentTimestamp`, since agents' clocks
can skew.

Reading (`of_session`): the newest `LIMIT` entries, oldest first. A state entry lasts until
its task's next state entry. The last one of a task: a final state (completed, failed,
canceled, rejected) has no duration (`durationSeconds` null, `ongoing` false); any other is
still going on (`durationSeconds` up to now, `ongoing` true).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from tasks.models import (
    INTERRUPTED_STATES,
    TERMINAL_STATES,
    Artifact,
    Interaction,
    ProgressCard,
    Session,
    Task,
    TaskState,
    states,
)
from tasks.models.timeline import TimelineEntry
from tasks.runtime import prepared
from tasks.sessions import decision_words

Kind = TimelineEntry.Kind
LIMIT = 1_000  # entries one read returns: the newest
TEXT_CHARS = 200  # of a name, an id or an answer kept in an entry
PAGE_ITEMS = 100  # entries the session page lists (its bars show every state read)


def _short(text: Any) -> str:
    text = text if isinstance(text, str) else str(text)
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"


def _iso(at: datetime | None) -> str | None:
    """As the JSON API writes times ("…T12:00:50.250Z")."""
    return DjangoJSONEncoder().default(at) if at is not None else None


# -- writing ----------------------------------------------------------------------------------


@dataclass
class Pending:
    """Entries of one batch (or one delivery), inserted together by `write`."""

    entries: list[TimelineEntry] = field(default_factory=list)

    def state(
        self, task: Task, state: str, *, at: datetime, agent_timestamp: datetime | None
    ) -> None:
        self.entries.append(
            TimelineEntry(
                session_id=task.session_id,
                task=task,
                at=at,
                kind=Kind.STATE,
                state=state,
                data={"agentTimestamp": _iso(agent_timestamp)},
            )
        )

    def artifact(self, artifact: Artifact) -> None:
        self.entries.append(_artifact_entry(artifact))

    def card(self, session: Session, card: ProgressCard | None) -> None:
        if card is not None:
            self.entries.append(_card_entry(session, card))

    def write(self) -> None:
        if len(self.entries) == 1:  # a lone push's, nearly always: its INSERT made once
            prepared.insert(self.entries[0])
        elif self.entries:
            TimelineEntry.objects.bulk_create(self.entries)
        self.entries = []

    def drop(self) -> None:
        """What was gathered was rolled back with its delivery."""
        self.entries = []


def _artifact_entry(artifact: Artifact) -> TimelineEntry:
    files = artifact.files if isinstance(artifact.files, dict) else {}
    version = files.get("version", artifact.sequence)
    if not isinstance(version, int | str) or isinstance(version, bool):
        version = artifact.sequence
    return TimelineEntry(
        session_id=artifact.task.session_id,
        task=artifact.task,
        at=artifact.received_at,
        kind=Kind.ARTIFACT,
        data={
            "artifactId": _short(artifact.artifact_id),
            "name": _short(artifact.name),
            "version": _short(version) if isinstance(version, str) else version,
        },
    )


def _card_entry(session: Session, card: ProgressCard) -> TimelineEntry:
    return TimelineEntry(
        session_id=session.pk, at=card.updated_at, kind=Kind.CARD, revision=card.revision
    )


def card_written(session: Session, card: ProgressCard | None) -> None:
    """A card-API write (or a derive outside the applier) wrote revision `card.revision`."""
    if card is not None:
        _card_entry(session, card).save()


def answered(interaction: Interaction, *, at: datetime) -> None:
    """The agent confirmed a person's decision (`interaction` as claimed: its answer and
    who made it loaded), or the deny the team's expiry policy sent."""
    if interaction.by_expiry:
        done = "cancelled" if interaction.kind == Interaction.Kind.CONNECTION else "denied"
        words = f"Expired: {interaction.expiry_words}; {done} on the team's behalf"
        _decision(interaction, None, at, words, False, expired=True)
        return
    _decision(
        interaction,
        interaction.answered_by,
        at,
        interaction.decision_name,
        False,
        made=decision_words.made_words(interaction.kind, interaction.answer),
    )


def cancelled(task: Task, user: Any, *, at: datetime) -> None:
    """A person asked the agent to cancel `task`, and it took the request."""
    TimelineEntry.objects.create(
        session_id=task.session_id,
        task=task,
        at=at,
        kind=Kind.CANCEL,
        actor=user,
        data={"by": _short(user.get_username()) if user else None},
    )


def dismissed(interaction: Interaction, user: Any, *, at: datetime, because: str) -> None:
    _decision(interaction, user, at, f"dismissed: {because}", True)


def checked(interaction: Interaction, user: Any, *, at: datetime) -> None:
    """A person marked an uncertain effect checked (nothing went to the agent)."""
    effect = interaction.detail.get("effect") if isinstance(interaction.detail, dict) else None
    words = states.uncertain_words(effect) if isinstance(effect, str) else interaction.prompt
    _decision(interaction, user, at, f"checked ({words})", False)


def expired(interaction: Interaction, *, at: datetime) -> None:
    """The agent's declared expiry passed with no answer, and nothing was sent (answering/
    expiry.py): the question stays open."""
    words = f"Expired: {interaction.expiry_words}; the agent still waits"
    _decision(interaction, None, at, words, False, expired=True)


def _decision(
    interaction: Interaction,
    user: Any,
    at: datetime,
    answer: str,
    dismissed: bool,
    *,
    expired: bool = False,
    made: str = "",
) -> None:
    data = {
        "by": _short(user.get_username()) if user else None,
        "answer": _short(answer),
        "interaction": interaction.pk,
        "interactionId": _short(interaction.interaction_id),
        "dismissed": dismissed,
    }
    if made:
        # What the decision was, how it was made and the words sent with it: the page says
        # "Denied by alice on the page: “not on a Friday”" long after the question closed.
        data["made"] = made
        data["via"] = interaction.answered_via or ""
        if interaction.reason:
            data["reason"] = _short(interaction.reason)
        value = (interaction.answer or {}).get("value")
        if value not in (None, ""):
            data["value"] = _short(value)
    if expired:
        data["expired"] = True  # no person decided: the team's declared expiry did
    TimelineEntry.objects.create(
        session_id=interaction.task.session_id,
        task_id=interaction.task_id,
        at=at,
        kind=Kind.ANSWER,
        actor=user,
        data=data,
    )


# -- reading ----------------------------------------------------------------------------------


@dataclass
class Item:
    """One entry as shown: the JSON the API gives, and what the page needs beside it."""

    entry: TimelineEntry
    task_id: str | None  # the agent's taskId
    duration: float | None = None
    ongoing: bool = False
    # An interrupted state's open question then (its kind): the words the header used.
    asking: str | None = None

    @property
    def kind(self) -> str:
        return self.entry.kind

    @property
    def at(self) -> datetime:
        return self.entry.at

    @property
    def data(self) -> dict:
        return self.entry.data if isinstance(self.entry.data, dict) else {}

    @property
    def shown_state(self) -> states.Shown:
        return states.shown(self.entry.state, asking=self.asking)

    @property
    def short_task_id(self) -> str:
        return short_id(self.task_id)

    @property
    def decision(self) -> decision_words.Line | None:
        """A person's (or the expiry policy's) decision, when the entry says one in full."""
        data = self.data
        if self.entry.kind != Kind.ANSWER or not data.get("made"):
            return None
        return decision_words.Line(
            made=data["made"],
            by=data.get("by") or "",
            at=self.entry.at,
            via=decision_words.via_words(data.get("via")),
            answer=data.get("value") or "",
            reason=data.get("reason") or "",
        )

    @property
    def duration_words(self) -> str:
        return duration_words(self.duration)

    @property
    def words(self) -> str:
        """What happened, in a line."""
        entry, data = self.entry, self.data
        if entry.kind == Kind.STATE:
            return self.shown_state.words
        if entry.kind == Kind.ANSWER and data.get("expired"):
            return data.get("answer") or "Expired"
        if entry.kind == Kind.ANSWER:
            return f"{data.get('by') or 'someone'}: {data.get('answer') or ''}"
        if entry.kind == Kind.CANCEL:
            return f"Cancelled by {data.get('by') or 'someone'}"
        if entry.kind == Kind.CARD:
            return f"Card updated (revision {entry.revision})"
        name = data.get("name") or data.get("artifactId") or ""
        return f"Artifact {name} (version {data.get('version')})"

    def as_json(self) -> dict:
        entry, data = self.entry, self.data
        shown: dict[str, Any] = {"at": entry.at, "kind": entry.kind, "taskId": self.task_id}
        if entry.kind == Kind.STATE:
            shown.update(
                state=entry.state,
                durationSeconds=None if self.duration is None else round(self.duration, 3),
                ongoing=self.ongoing,
                agentTimestamp=data.get("agentTimestamp"),
            )
        elif entry.kind == Kind.ANSWER:
            shown.update(
                by=data.get("by"),
                answer=data.get("answer"),
                interaction=data.get("interaction"),
                interactionId=data.get("interactionId"),
                dismissed=bool(data.get("dismissed")),
            )
            if data.get("expired"):
                shown["expired"] = True
        elif entry.kind == Kind.CANCEL:
            shown["by"] = data.get("by")
        elif entry.kind == Kind.CARD:
            shown["revision"] = entry.revision
        elif entry.kind == Kind.ARTIFACT:
            shown.update(
                artifactId=data.get("artifactId"),
                name=data.get("name"),
                version=data.get("version"),
            )
        if data.get("backfilled"):
            shown["backfilled"] = True  # reconstructed when the timeline was introduced
        return shown


@dataclass
class Segment:
    """One state's interval on a task's bar, in the SVG's units (formatted here, so no
    locale ever writes "12,5" into an attribute)."""

    x: str
    width: str
    tone: str
    title: str


@dataclass
class Bar:
    task: Task
    segments: list[Segment]


SHORT_ID = 8  # characters of a task id a row shows; the whole one is in its title


def short_id(task_id: str | None) -> str:
    if not task_id:
        return ""
    return task_id if len(task_id) <= SHORT_ID + 1 else task_id[:SHORT_ID] + "…"


@dataclass
class CardRun:
    """Card revisions in a row, with nothing else between them: one line on the page."""

    first: Item
    last: Item
    count: int
    kind: str = "cards"

    @property
    def at(self) -> datetime:
        return self.first.at


@dataclass
class Timeline:
    items: list[Item]  # oldest first
    truncated: bool  # older entries exist than these
    bars: list[Bar]
    start: datetime | None
    end: datetime | None
    tasks: dict[int, Task] = field(default_factory=dict)

    def as_json(self) -> list[dict]:
        return [item.as_json() for item in self.items]

    @property
    def shown_items(self) -> list[Item]:
        """The page's list: the newest PAGE_ITEMS, oldest first (the API gives them all)."""
        return self.items[-PAGE_ITEMS:]

    @property
    def rows(self) -> list[Item | CardRun]:
        """The page's list with each run of card revisions as one line ("Card updated 5
        times"): a card changes with every step, and one row each buried what happened."""
        rows: list[Item | CardRun] = []
        for item in self.shown_items:
            previous = rows[-1] if rows else None
            if item.kind != Kind.CARD:
                rows.append(item)
            elif isinstance(previous, CardRun):
                previous.last, previous.count = item, previous.count + 1
            elif isinstance(previous, Item) and previous.kind == Kind.CARD:
                rows[-1] = CardRun(previous, item, 2)
            else:
                rows.append(item)
        return rows

    @property
    def cancelled(self) -> Item | None:
        """The newest cancel a person asked for, while its task stays cancelled."""
        for item in reversed(self.items):
            if item.kind == Kind.CANCEL:
                task = self.tasks.get(item.entry.task_id)
                return item if task is not None and task.state == TaskState.CANCELED else None
        return None

    @property
    def limit(self) -> int:
        return LIMIT


BAR_WIDTH = 1000  # the SVG's viewBox units across the session's span
MIN_SEGMENT = 2.0  # a state that lasted an instant still shows


def of_session(
    session: Session, *, now: datetime | None = None, limit: int | None = None
) -> Timeline:
    """The session's newest `limit` entries, oldest first, with each state's duration, and
    one bar per task across the span they cover. Two queries however long the history."""
    now = now or timezone.now()
    limit = limit or LIMIT
    rows = list(
        TimelineEntry.objects.filter(session=session)
        .select_related("actor")
        .order_by("-at", "-id")[: limit + 1]
    )
    truncated = len(rows) > limit
    rows = rows[:limit]
    rows.reverse()
    tasks = Task.objects.in_bulk({row.task_id for row in rows if row.task_id is not None})
    items = [
        Item(row, task_id=tasks[row.task_id].task_id if row.task_id in tasks else None)
        for row in rows
    ]
    last_state: dict[int, Item] = {}
    for item in items:
        if item.kind != Kind.STATE or item.entry.task_id is None:
            continue
        previous = last_state.get(item.entry.task_id)
        if previous is not None:
            previous.duration = _seconds(item.at - previous.at)
        last_state[item.entry.task_id] = item
    for item in last_state.values():
        if item.entry.state not in TERMINAL_STATES:
            item.ongoing = True
            item.duration = _seconds(max(now - item.at, timedelta(0)))
    _name_what_was_asked(items)
    if not items:
        return Timeline(items, truncated, [], None, None, tasks)
    # The bars span the entries, not up to now: a page shows the same bars until the session
    # changes (and its activity is refetched); a state still going on reaches the right end.
    start, end = items[0].at, items[-1].at
    bars = _bars(items, tasks, start, end)
    return Timeline(items, truncated, bars, start, end, tasks)


def _name_what_was_asked(items: list[Item]) -> None:
    """Each interrupted state with the kind of the question its task opened during it, so
    the timeline says "Needs approval" where the header did (an approval waits in the
    auth-required state, which alone would read "Needs a connection"). One query."""
    waiting = [i for i in items if i.kind == Kind.STATE and i.entry.state in INTERRUPTED_STATES]
    if not waiting:
        return
    opened: dict[int, list[tuple[datetime, str]]] = {}
    asked = (
        Interaction.objects.filter(task_id__in={item.entry.task_id for item in waiting})
        .exclude(kind=Interaction.Kind.CHECK)  # a check opens whatever the state
        .order_by("opened_at", "id")
        .values_list("task_id", "opened_at", "kind")
    )
    for task_pk, at, kind in asked:
        opened.setdefault(task_pk, []).append((at, kind))
    for item in waiting:
        ends = item.at + timedelta(seconds=item.duration or 0) if not item.ongoing else None
        # The newest question the task had opened by the time this state ended.
        found = opened.get(item.entry.task_id, [])
        before = [kind for at, kind in found if ends is None or at <= ends]
        if before:
            item.asking = before[-1]


def name_turns(turns: list[Task]) -> None:
    """Give each turn (a task of the session page's Turns table) `shown`: its state in the
    words the header uses, an interrupted one named by the question it waits on. One query."""
    waiting = [turn.pk for turn in turns if turn.state in INTERRUPTED_STATES]
    asking: dict[int, str] = {}
    answered: set[int] = set()
    asked = (
        Interaction.objects.filter(task_id__in=waiting)
        .exclude(kind=Interaction.Kind.CHECK)
        .order_by("opened_at", "id")
        .values_list("task_id", "kind", "state")
    )
    for task_pk, kind, state in asked if waiting else ():
        if state in Interaction.PENDING:
            asking[task_pk] = kind  # the newest one of each task wins
        elif state == Interaction.State.ANSWERED:
            answered.add(task_pk)
    for turn in turns:
        turn.shown = states.shown(
            turn.state, asking=asking.get(turn.pk), answered=turn.pk in answered
        )


def _seconds(delta: timedelta) -> float:
    return delta.total_seconds()


def _bars(items: list[Item], tasks: dict[int, Task], start: datetime, end: datetime) -> list[Bar]:
    span = max((end - start).total_seconds(), 1e-6)
    segments: dict[int, list[Segment]] = {}
    for item in items:
        if item.kind != Kind.STATE or item.entry.task_id not in tasks:
            continue
        x = (item.at - start).total_seconds() / span * BAR_WIDTH
        # Still going on: to the right end. A final state has no length: a mark.
        width = BAR_WIDTH - x if item.ongoing else (item.duration or 0.0) / span * BAR_WIDTH
        width = max(MIN_SEGMENT, min(width, BAR_WIDTH - x))
        x = min(x, BAR_WIDTH - width)
        shown = item.shown_state
        title = f"{shown.words} from {timezone.localtime(item.at):%H:%M:%S}"
        if item.ongoing:
            title += ", still going on"
        elif item.duration is not None:
            title += f", {duration_words(item.duration)}"
        segments.setdefault(item.entry.task_id, []).append(
            Segment(f"{x:.2f}", f"{width:.2f}", shown.tone, title)
        )
    return [Bar(tasks[pk], found) for pk, found in segments.items()]


def duration_words(seconds: float | None) -> str:
    """'0.4 s', '42 s', '3 min 5 s', '2 h 10 min'; '' for none."""
    if seconds is None:
        return ""
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"
