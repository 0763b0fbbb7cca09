"""Separation of duties: an agent with `no_self_approval` wants someone other than the person
who started a task from the composer (`TaskStart`, written by talking.py) to approve what
that task asks. answers.answer refuses such an approval (answers.NEEDS_ANOTHER); this module
records who started what, and tells the pages which approvals to show as "Needs another
approver" for the person looking. Likewise it tells them which questions wait for a
credential of theirs first: an agent that is `per_person` takes answers only with the
person's own credential (answering/callers.py refuses the answer too).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from tasks.models import Agent, Interaction, Task, TaskStart


def started(user, agent: Agent, task_id: str) -> None:
    """`user` started the agent's task `task_id` from the composer (once the agent named it).
    The first start is kept: a task is started once, and a later message to it is no start."""
    if not task_id or not getattr(user, "is_authenticated", False):
        return
    try:
        with transaction.atomic():
            TaskStart.objects.get_or_create(
                agent=agent,
                task_id=task_id,
                defaults={"started_by": user, "started_at": timezone.now()},
            )
    except IntegrityError:
        pass  # two replies naming the same new task at once: the other one recorded it


def mark_needs_another(user, interactions: Iterable[Interaction]) -> None:
    """Set `needs_another` on each of `interactions` (for display only): True for an
    approval `user` started the task of, whose agent asks for someone else's approval. One
    query, whatever the number of interactions."""
    interactions = list(interactions)
    for interaction in interactions:
        interaction.needs_another = False
    approvals = {i.task_id for i in interactions if i.kind == Interaction.Kind.APPROVAL}
    if not approvals or not getattr(user, "is_authenticated", False):
        return
    own = TaskStart.objects.filter(
        agent=OuterRef("agent"), task_id=OuterRef("task_id"), started_by=user
    )
    theirs = set(
        Task.objects.filter(pk__in=approvals, agent__no_self_approval=True)
        .filter(Exists(own))
        .values_list("pk", flat=True)
    )
    for interaction in interactions:
        interaction.needs_another = (
            interaction.kind == Interaction.Kind.APPROVAL and interaction.task_id in theirs
        )


@dataclass(frozen=True)
class CredentialNeeded:
    """The agent a person must connect their own credential for before answering it."""

    agent_id: int
    agent_name: str


def mark_needs_credential(user, interactions: Iterable[Interaction]) -> None:
    """Set `needs_credential` on each of `interactions` (for display only): a
    CredentialNeeded when its agent takes answers only with the person's own credential
    and `user` has none, else None (callers.needs_credential, for many at once). One query,
    whatever the number of interactions; no call to any agent."""
    interactions = list(interactions)
    for interaction in interactions:
        interaction.needs_credential = None
    if not interactions or not getattr(user, "is_authenticated", False):
        return
    needing = {
        task_pk: CredentialNeeded(agent_id, name)
        for task_pk, agent_id, name in Task.objects.filter(
            pk__in={i.task_id for i in interactions}, agent__per_person=True
        )
        .exclude(agent__personal_credentials__user=user)
        .values_list("pk", "agent_id", "agent__name")
    }
    for interaction in interactions:
        interaction.needs_credential = needing.get(interaction.task_id)
