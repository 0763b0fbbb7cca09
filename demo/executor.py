"""The example agent's executor: turns a2a-sdk requests into scenario runs.

- A message without a task starts a new task (in its context, when it names one) and runs a
  scenario until it needs a person or ends.
- A follow-up on a waiting task is read for an interactions/v1 answer to the open
  interaction (`{interactionId, approved}` or `{interactionId, value}`); the scenario goes on
  with it. Anything else, plain text included, never answers: the agent asks again, with the
  same interactionId.
- One task works at a time per context: a new task (or an answered one) whose context is busy
  waits its turn. It says so at once (a new task is answered SUBMITTED with a "queued" note, an
  answer gets a WORKING status), because a2a-sdk answers a `returnImmediately` SendMessage only
  at the task's first event: waiting silently would make the caller time out.
- CancelTask stops a running or waiting task: CANCELED is pushed, with the telemetry so far.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncGenerator
from datetime import UTC, datetime

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Message, Part, Role, Task, TaskState, TaskStatus
from google.protobuf.json_format import MessageToDict
from google.protobuf.timestamp_pb2 import Timestamp

from demo.run import INTERACTIONS, PROGRESS, TELEMETRY, Answer, Ask, Run, Stopped
from demo.scenarios import SCENARIOS, Picker

log = logging.getLogger(__name__)

QUEUED_TEXT = "Queued: another task in this conversation is working; this one starts after it."
WAITING_TEXT = "Got the answer; continuing once the other task in this conversation pauses."


class _Task:
    """A task the agent is working on or waiting in: its run, its script and what it asks."""

    def __init__(self, run: Run, script: AsyncGenerator[Ask, Answer]) -> None:
        self.run = run
        self.script = script
        self.waiting: Ask | None = None
        self.advancing = False


class ExampleExecutor(AgentExecutor):
    def __init__(self, speed: float = 1.0) -> None:
        self._speed = speed
        self._picker = Picker()
        self._tasks: dict[str, _Task] = {}
        # A lock per context, dropped when no task holds or waits for it.
        self._contexts: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        if context.current_task is None:
            await self._start(context, event_queue)
        else:
            await self._follow_up(context, context.current_task, event_queue)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = self._tasks.pop(context.task_id, None)
        context_id = context.current_task.context_id if context.current_task else ""
        updater = TaskUpdater(event_queue, context.task_id, context_id or context.context_id)
        metadata = {}
        if task is not None:
            task.run.canceled = True
            if not task.advancing:
                await task.script.aclose()  # suspended at a question: end it there
            metadata = {TELEMETRY: task.run.telemetry(), PROGRESS: task.run.progress()}
        log.info("task %s: canceled on request", context.task_id)
        message = updater.new_agent_message([Part(text="Canceled on request; nothing more done.")])
        await updater.update_status(
            TaskState.TASK_STATE_CANCELED, message=message, metadata=metadata
        )

    # -- turns ----------------------------------------------------------------------------

    async def _start(self, context: RequestContext, event_queue: EventQueue) -> None:
        run = Run(context.task_id, context.context_id, self._speed)
        run.updater = TaskUpdater(event_queue, run.task_id, run.context_id)
        text = context.get_user_input()
        name = self._picker.pick(text)
        task = _Task(run, SCENARIOS[name](run, text))
        self._tasks[run.task_id] = task
        lock = self._lock(run.context_id)
        status = TaskStatus(state=TaskState.TASK_STATE_SUBMITTED, timestamp=_now())
        if lock.locked():
            status.message.CopyFrom(run.updater.new_agent_message([Part(text=QUEUED_TEXT)]))
        # The task first, timestamped: a2a-sdk wants a Task before any status update, and
        # ListTasks' statusTimestampAfter only finds tasks whose status has a timestamp.
        await event_queue.enqueue_event(
            Task(
                id=run.task_id,
                context_id=run.context_id,
                status=status,
                history=[context.message] if context.message else [],
            )
        )
        log.info("task %s: %s scenario%s", run.task_id, name, " (queued)" if lock.locked() else "")
        async with lock:
            await self._advance(task, None)

    async def _follow_up(
        self, context: RequestContext, current: Task, event_queue: EventQueue
    ) -> None:
        # The task's own context: a2a-sdk makes up a new one for a follow-up that names only
        # the task (a2a-python#1206), and pushes must stay in the task's session.
        task = self._tasks.get(current.id)
        updater = TaskUpdater(event_queue, current.id, current.context_id)
        if task is None or task.waiting is None:
            # a2a-sdk hands a task one message at a time and refuses ended tasks, so every
            # follow-up finds its task waiting; should one not, it changes nothing.
            log.warning("task %s: a message while nothing is asked; ignored", current.id)
            return
        task.run.updater = updater
        answer = typed_answer(context.message, task.waiting, task.run.interaction_id(task.waiting))
        if answer is None:
            log.info("task %s: not a typed answer; asking again", current.id)
            await task.run.ask(task.waiting, again=True)
            return
        log.info("task %s: answered %s", current.id, answer)
        task.waiting = None
        lock = self._lock(current.context_id)
        if lock.locked():
            await task.run.working(WAITING_TEXT)
        async with lock:
            await self._advance(task, answer)

    async def _advance(self, task: _Task, answer: Answer | None) -> None:
        """Run the scenario until it asks something or ends."""
        run = task.run
        try:
            if run.canceled:
                return  # canceled while it waited for its turn
            task.advancing = True
            try:
                ask = await task.script.asend(answer)
            finally:
                task.advancing = False
            task.waiting = ask
            await run.ask(ask)
        except StopAsyncIteration:
            self._tasks.pop(run.task_id, None)
            if not run.ended:
                await _end(run, TaskState.TASK_STATE_FAILED, "The scenario ended without a result.")
        except Stopped:
            pass  # canceled meanwhile: cancel() said the last word
        except Exception as error:
            log.exception("task %s: the scenario failed", run.task_id)
            self._tasks.pop(run.task_id, None)
            await _end(run, TaskState.TASK_STATE_FAILED, f"The example agent failed: {error}")

    def _lock(self, context_id: str) -> asyncio.Lock:
        lock = self._contexts.get(context_id)
        if lock is None:
            lock = self._contexts[context_id] = asyncio.Lock()
        return lock


def typed_answer(message: Message | None, ask: Ask, interaction_id: str) -> Answer | None:
    """The interactions/v1 answer to `ask` in a follow-up message, or None. Only typed data
    answers: text (a "yes", an "approve") never approves anything."""
    if message is None or message.role != Role.ROLE_USER:
        return None
    data = MessageToDict(message.metadata).get(INTERACTIONS)
    if not isinstance(data, dict) or data.get("interactionId") != interaction_id:
        return None
    if ask.kind == "question":
        value = data.get("value")
        if isinstance(value, str) and value.strip():
            return Answer(value=value.strip())
        return None
    approved = data.get("approved")
    return Answer(approved=approved) if isinstance(approved, bool) else None


async def _end(run: Run, state: TaskState, text: str) -> None:
    """A terminal status the scenario did not send itself (unless the task was canceled)."""
    with contextlib.suppress(Stopped):
        await run.finish(state, text)


def _now() -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(datetime.now(UTC))
    return stamp
