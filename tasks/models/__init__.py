"""What Onlooker keeps: agents, where they push, and the sessions their pushes build.

    states          the A2A task states (TaskState and its sets), and their words for people
    agents          Agent, PushEndpoint, Refusal; the digests push tokens are kept as
    tasks           Task: one A2A task of a session, as its agent last reported it
    interactions    Interaction: what an agent waits for, and the transitions of its state
    sessions        Session, and each session's fragments and searchable text
    deliveries      Delivery: every accepted push, pending until it is applied
    transcript      Artifact, Message
    progress_cards  ProgressCard: a session's progress card
    usage           UsageDay: what agents' work cost per day
    timeline        TimelineEntry: a session's history
    notify          NotificationChannel, Notification: the outbox to a team's channels;
                    SlackMember, SlackLinkRequest: Slack members who answer as a person
    api_tokens      ApiToken: a person's token for the read API
    credentials     PersonalCredential: a person's own credential for an agent (sealed)
    sealed          SealedTextField: credentials encrypted at rest
    decisions       Decision, DecisionConfirmation: the append-only record of decisions
    reset_limits    ResetLimit: how often password reset was asked for

One writer each: `answering/agents.py` registers agents and endpoints; `pushes/deliveries.py`
writes Delivery rows; `pushes/apply/` alone applies pushes to tasks, interactions, artifacts
and the transcript; `sessions/changes.py` writes Session rows, `sessions/progress_card.py`
cards, `sessions/fragments.py` stored fragments; `answering/answers.py` people's decisions,
`answering/record.py` their record.
An interaction's state changes only through the transitions `Interaction.objects` names,
which the appliers and answering call. Nothing here writes on save.

Importing this package registers every model with Django, and hands on the names other code
imports from `tasks.models`.
"""

from tasks.models import states
from tasks.models.agents import Agent, PushEndpoint, Refusal, digest, matches_digest
from tasks.models.api_tokens import ApiToken
from tasks.models.credentials import PersonalCredential
from tasks.models.decisions import Decision, DecisionConfirmation
from tasks.models.deliveries import Delivery
from tasks.models.interactions import Interaction
from tasks.models.notify import (
    Notification,
    NotificationChannel,
    SlackLinkRequest,
    SlackMember,
)
from tasks.models.progress_cards import ProgressCard
from tasks.models.reset_limits import ResetLimit
from tasks.models.sessions import (
    NEWEST_OPEN_ORDER,
    NOT_READ,
    Session,
    SessionFragments,
    SessionText,
)
from tasks.models.states import INTERRUPTED_STATES, TERMINAL_STATES, TaskState
from tasks.models.tasks import Task, TaskStart
from tasks.models.timeline import TimelineEntry
from tasks.models.transcript import Artifact, Message
from tasks.models.usage import UsageDay

__all__ = [
    "INTERRUPTED_STATES",
    "NEWEST_OPEN_ORDER",
    "NOT_READ",
    "TERMINAL_STATES",
    "Agent",
    "ApiToken",
    "Artifact",
    "ProgressCard",
    "Decision",
    "DecisionConfirmation",
    "Delivery",
    "Interaction",
    "Message",
    "Notification",
    "NotificationChannel",
    "PersonalCredential",
    "PushEndpoint",
    "Refusal",
    "ResetLimit",
    "SlackLinkRequest",
    "SlackMember",
    "Session",
    "SessionText",
    "SessionFragments",
    "Task",
    "TaskStart",
    "TaskState",
    "TimelineEntry",
    "UsageDay",
    "digest",
    "matches_digest",
    "states",
]
