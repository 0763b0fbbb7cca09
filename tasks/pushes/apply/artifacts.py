"""Artifacts: every version kept, a streamed one assembled from its chunks in arrival order,
and a snapshot's repeats of versions already seen skipped."""

from __future__ import annotations

import hashlib
import json

from django.db.models import Max

from tasks.models import Artifact, Task
from tasks.pushes.apply.state import Applied
from tasks.sessions import artifact_markdown, search
from tasks.wire import profile
from tasks.wire import protocol as p


def _parts_digest(parts: list[dict]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _files(applied: Applied, *metadatas: dict) -> dict | None:
    value = profile.find(profile.FILES, *metadatas)
    return None if value is None else profile.read_files(value, applied.warnings)


def _new_version(
    applied: Applied,
    task: Task,
    artifact: p.Artifact,
    parts: list[dict],
    files,
    *,
    complete: bool = True,
) -> None:
    last = task.artifacts.filter(artifact_id=artifact.artifact_id).aggregate(n=Max("sequence"))
    artifact = Artifact.objects.create(
        task=task,
        artifact_id=artifact.artifact_id,
        sequence=(last["n"] or 0) + 1,
        name=artifact.name,
        description=artifact.description,
        parts=parts,
        files=files,
        complete=complete,
        markdown_html=artifact_markdown.artifact_html(parts, files),
        received_at=applied.now,
    )
    if artifact.name:
        search.also_said(task.session_id, artifact.name)
    applied.locked.timeline.artifact(artifact)


def snapshot_artifact(applied: Applied, task: Task, artifact: p.Artifact) -> None:
    """A task snapshot repeats artifacts already seen: only new content is a new version."""
    parts = [part.to_json() for part in artifact.parts]
    digest = _parts_digest(parts)
    known = task.artifacts.filter(artifact_id=artifact.artifact_id).values_list("parts", flat=True)
    if any(_parts_digest(existing) == digest for existing in known):
        return
    _new_version(applied, task, artifact, parts, _files(applied, artifact.metadata))


def artifact_update(applied: Applied, task: Task, event: p.ArtifactUpdate) -> None:
    artifact = event.artifact
    parts = [part.to_json() for part in artifact.parts]
    files = _files(applied, artifact.metadata, event.metadata)
    if task.is_terminal:
        applied.warnings.append("artifact arrived after the task ended; kept")
    latest = task.artifacts.filter(artifact_id=artifact.artifact_id).order_by("-sequence")
    latest = latest.select_for_update().first()
    if event.append:
        if latest is None:
            applied.warnings.append(
                f"append for artifact {artifact.artifact_id!r} not seen before; "
                "kept as its first version"
            )
            _new_version(applied, task, artifact, parts, files, complete=bool(event.last_chunk))
            return
        # A2A chunks carry no index: they are assembled in arrival order.
        latest.parts = [*latest.parts, *parts]
        latest.files = files or latest.files
        latest.name = artifact.name or latest.name
        if latest.name:
            search.also_said(task.session_id, latest.name)
        latest.complete = bool(event.last_chunk)  # appending: a stream, until it says last
        latest.markdown_html = artifact_markdown.artifact_html(latest.parts, latest.files)
        latest.save(update_fields=["parts", "files", "name", "complete", "markdown_html"])
        return
    if latest is not None and latest.parts == parts and (files or None) == latest.files:
        if event.last_chunk and not latest.complete:
            latest.complete = True
            latest.save(update_fields=["complete"])
        return
    # A version's first chunk. Complete unless the agent says more follows (lastChunk:
    # false): agents that send whole artifacts often never mention lastChunk, and a later
    # append marks the version as arriving again.
    _new_version(applied, task, artifact, parts, files, complete=event.last_chunk is not False)
