"""Small builders for A2A 1.0 push bodies, so tests read as the events they send."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tasks.wire import profile

EPOCH = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def ts(second: int) -> str:
    """The agent's timestamp `second` seconds after noon, as A2A writes it."""
    return (
        (EPOCH + timedelta(seconds=second))
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def message(text: str, *, message_id: str, role: str = "ROLE_AGENT", metadata=None) -> dict:
    out = {"messageId": message_id, "role": role, "parts": [{"text": text}]}
    if metadata:
        out["metadata"] = metadata
    return out


def status(
    state: str,
    *,
    task: str = "task-1",
    context: str = "ctx-1",
    at: int | None = None,
    text: str | None = None,
    message_id: str | None = None,
    metadata: dict | None = None,
    message_metadata: dict | None = None,
) -> dict:
    body: dict = {"state": f"TASK_STATE_{state}"}
    if at is not None:
        body["timestamp"] = ts(at)
    if text is not None:
        body["message"] = message(
            text, message_id=message_id or f"{task}-{state}-{at}", metadata=message_metadata
        )
    update = {"taskId": task, "contextId": context, "status": body}
    if metadata:
        update["metadata"] = metadata
    return {"statusUpdate": update}


def artifact(
    artifact_id: str,
    *texts: str,
    task: str = "task-1",
    context: str = "ctx-1",
    append: bool = False,
    last_chunk: bool | None = None,
    files: dict | None = None,
    name: str = "",
) -> dict:
    art: dict = {"artifactId": artifact_id, "parts": [{"text": t} for t in texts]}
    if name:
        art["name"] = name
    if files is not None:
        art["metadata"] = {profile.FILES: files}
    update = {"taskId": task, "contextId": context, "artifact": art}
    if append:
        update["append"] = True
    if last_chunk is not None:
        update["lastChunk"] = last_chunk
    return {"artifactUpdate": update}


def approval(interaction_id: str, prompt: str, kind: str = "approval", detail=None) -> dict:
    data = {"interactionId": interaction_id, "kind": kind, "prompt": prompt}
    if detail is not None:
        data["detail"] = detail
    return {profile.INTERACTIONS: data}


def progress(*steps: tuple[str, str]) -> dict:
    return {profile.PROGRESS: {"steps": [{"label": label, "state": s} for label, s in steps]}}
