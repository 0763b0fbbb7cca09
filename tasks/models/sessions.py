"""Sessions: what an agent's pushes build, one per A2A context, with what is kept of each for
the pages (its rendered fragments and its searchable text). A session's state and "needs a
human" flag are derived from its tasks and their open interactions (`Session.derive_state`)."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Case, F, Value, When

from tasks.models import states
from tasks.models.agents import Agent
from tasks.models.interactions import Interaction
from tasks.models.states import TaskState
from tasks.models.tasks import Task
from tasks.runtime.prepared import Prepared

# A default argument: the function reads the value itself, its caller has not
# (tasks/sessions/progress_card.py too).
NOT_READ = object()


class SessionQuerySet(models.QuerySet):
    def visible_to(self, user) -> SessionQuerySet:
        return self.filter(agent__in=Agent.objects.visible_to(user))


class Session(models.Model):
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="sessions")
    context_id = models.CharField(max_length=200)
    title = models.CharField(max_length=200, blank=True)
    state = models.CharField(max_length=40, choices=TaskState.choices, blank=True)
    needs_human = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField()

    objects = SessionQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "context_id"], name="unique_session_context")
        ]
        indexes = [models.Index(fields=["-needs_human", "-updated_at"], name="session_attention")]

    def __str__(self) -> str:
        return self.title or self.context_id

    def derive_state(self, tasks: list[Task], waiting: Any = NOT_READ) -> Interaction | None:
        """The session's state and whether it needs a person, from its tasks (`tasks`: its
        newest, newest first). The state is the newest task's, unless a person is asked
        something in an older one: that task's state then, so a session is never shown done
        (or working) while a question in it waits, and a finished session never needs you.
        Returns the newest open interaction (what the card asks), if any, with its task's
        state as `task_state` (its `task` is not loaded).

        A session needs a person exactly while one of its interactions is open: every writer
        of interactions derives this (sessions/changes.derive, under the session's row lock)
        before saving the session, so the flag the screens sort and count by never outlives
        the question. `waiting`: that interaction (or None), when the caller read it for many
        sessions at once (sessions/changes.read_all).

        An open check (an uncertain effect a person must look at) needs a person too, but
        asks nothing of the agent's task: the state stays the newest task's. Checks come
        last in NEWEST_OPEN_ORDER, so the interaction returned is a check only when no
        question is open."""
        if waiting is NOT_READ:
            waiting = next(iter(_NEWEST_OPEN_INTERACTION(self.pk)), None)
        self.needs_human = waiting is not None
        if waiting is not None and waiting.kind != Interaction.Kind.CHECK:
            self.state = waiting.task_state
        elif tasks:
            self.state = tasks[0].state
        return waiting

    @property
    def shown_state(self):
        """The state in people's words (tasks/models/states.py), with what the card says it asks."""
        card = getattr(self, "card", None)
        return states.of_session(self.state, card.facts if card is not None else None)


# A session's newest open interaction, with its task's state (`task_state`): read by every
# derive (runtime/prepared.py says why it is prepared); sessions/changes.read_all reads the same
# for many.
NEWEST_OPEN_ORDER = (
    # What the agent waits on first; checks (which it does not wait on) after them.
    Case(When(kind=Interaction.Kind.CHECK, then=Value(1)), default=Value(0)).asc(),
    "-opened_at",
    "-id",
)
_NEWEST_OPEN_INTERACTION = Prepared(
    lambda session_id: (
        Interaction.objects.filter(task__session_id=session_id, state=Interaction.State.OPEN)
        .annotate(task_state=F("task__state"))
        .order_by(*NEWEST_OPEN_ORDER)[:1]
    )
)


class SessionFragments(models.Model):
    """A session's fragments as the pages and live messages show them (card, collapsed card,
    sidebar row, monitoring tile), rendered once when the session changes. Written only by
    `tasks/sessions/fragments.py`; never per person. `version` names the templates that
    rendered them, so fragments from older templates are rendered afresh on read instead."""

    session = models.OneToOneField(Session, on_delete=models.CASCADE, related_name="fragments")
    version = models.CharField(max_length=16)
    revision = models.PositiveIntegerField(default=0)
    card = models.TextField()
    summary = models.TextField()
    sidebar = models.TextField()
    tile = models.TextField()

    def __str__(self) -> str:
        return f"fragments of {self.session} (rev {self.revision})"


class SessionText(models.Model):
    """A session's own searchable text (tasks/sessions/search.py): title, agent name, plan step
    titles and card note, as of its last change. Written only by `search.keep` and
    `search.agent_renamed`; the full-text index over it is the database's (migration 0016)."""

    session = models.OneToOneField(
        Session, on_delete=models.CASCADE, primary_key=True, related_name="search_text"
    )
    title = models.TextField(blank=True)
    agent = models.TextField(blank=True)
    plan = models.TextField(blank=True)
    note = models.TextField(blank=True)
    # Every other word an agent said in the session (notes since replaced, receipts, artifact
    # names), so a search finds what it said earlier too.
    said = models.TextField(blank=True, default="", db_default="")

    def __str__(self) -> str:
        return f"search text of session {self.session_id}"
