"""The Nylorun profile v2 extensions, as Onlooker reads them from push metadata.

Each reader takes the extension's raw value and a list to append warnings to. Bad data
never fails a delivery: the bad part is dropped and a warning says what was wrong, quoting
at most a short excerpt of it (warnings are stored with the delivery).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tasks.wire.json_safety import shown

INTERACTIONS = "https://docs.nylorun.com/a2a/interactions/v1"
EFFECTS = "https://docs.nylorun.com/a2a/effects/v1"
PROGRESS = "https://docs.nylorun.com/a2a/progress/v1"
TELEMETRY = "https://docs.nylorun.com/a2a/telemetry/v1"
FILES = "https://docs.nylorun.com/a2a/files/v1"
EXTENSIONS = (INTERACTIONS, EFFECTS, PROGRESS, TELEMETRY, FILES)

INTERACTION_KINDS = ("approval", "question", "connection")
STEP_STATES = ("pending", "in_progress", "completed", "failed", "skipped")
MAX_AGENT_STEPS = 20
MAX_INTERACTION_ID = 200
MAX_EFFECT_ID = 200
# Telemetry and files/v1 values are shown on every card and tile: a trace id or a path, not
# a document.
MAX_FACT_CHARS = 1024
# Counts and amounts beyond 2**53 lose precision in every JavaScript and most JSON readers;
# no real count or cost comes near it.
MAX_NUMBER = 2**53 - 1
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_MISSING = object()


def find(uri: str, *metadatas: dict) -> Any:
    """The value under `uri` in the first metadata that has it, or None."""
    for metadata in metadatas:
        value = metadata.get(uri, _MISSING)
        if value is not _MISSING:
            return value
    return None


@dataclass(frozen=True)
class OpenInteraction:
    interaction_id: str
    kind: str
    prompt: str
    detail: Any = None


def _nonempty_str(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def read_interaction(value: Any, warnings: list[str]) -> OpenInteraction | None:
    if not isinstance(value, dict):
        warnings.append("interactions/v1: data must be an object; ignored")
        return None
    interaction_id, kind = value.get("interactionId"), value.get("kind")
    if not _nonempty_str(interaction_id) or len(interaction_id) > MAX_INTERACTION_ID:
        warnings.append(
            f"interactions/v1: interactionId is missing or over {MAX_INTERACTION_ID} characters;"
            " ignored"
        )
        return None
    if kind not in INTERACTION_KINDS:
        warnings.append(
            f"interactions/v1: kind {shown(kind)} is not approval, question or connection; ignored"
        )
        return None
    prompt = value.get("prompt", "")
    if not isinstance(prompt, str):
        warnings.append("interactions/v1: prompt must be a string; dropped")
        prompt = ""
    return OpenInteraction(interaction_id, kind, prompt, value.get("detail"))


def read_uncertain(value: Any, warnings: list[str]) -> str | None:
    effect = value.get("uncertain") if isinstance(value, dict) else None
    if _nonempty_str(effect) and len(effect) <= MAX_EFFECT_ID:
        return effect
    warnings.append(
        f"effects/v1: expected {{uncertain: <effect id of at most {MAX_EFFECT_ID} characters>}};"
        " ignored"
    )
    return None


def read_progress(value: Any, warnings: list[str]) -> list[dict] | None:
    steps = value.get("steps") if isinstance(value, dict) else None
    if not isinstance(steps, list):
        warnings.append("progress/v1: expected {steps: [...]}; ignored")
        return None
    if len(steps) > MAX_AGENT_STEPS:
        warnings.append(
            f"progress/v1: {len(steps)} steps, at most {MAX_AGENT_STEPS}; the rest dropped"
        )
        steps = steps[:MAX_AGENT_STEPS]
    plan = []
    for index, step in enumerate(steps):
        if not isinstance(step, dict) or not _nonempty_str(step.get("label")):
            warnings.append(f"progress/v1: steps[{index}] has no label; dropped")
            continue
        state = step.get("state")
        if state not in STEP_STATES:
            warnings.append(f"progress/v1: steps[{index}].state {shown(state)} shown as pending")
            state = "pending"
        entry = {"label": step["label"], "state": state}
        note = step.get("note")
        if _nonempty_str(note):
            entry["note"] = note
        elif note is not None and note != "":
            warnings.append(f"progress/v1: steps[{index}].note must be a string; dropped")
        plan.append(entry)
    return plan


_INVALID = object()


def _count(value: Any) -> Any:
    """A whole number ≥ 0. Agents on protobuf Structs (every Python a2a-sdk agent) send
    every number as a float, so 3.0 is the count 3."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_NUMBER:
        return value
    return _INVALID


def _amount(value: Any) -> Any:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= MAX_NUMBER:
        return value + 0  # -0.0 is shown as "-0.0000"; + 0 makes it 0.0
    return _INVALID


def _text(value: Any) -> Any:
    return value if _nonempty_str(value) and len(value) <= MAX_FACT_CHARS else _INVALID


def _version(value: Any) -> Any:
    return value if _nonempty_str(value) else _count(value)


def _sha256(value: Any) -> Any:
    if isinstance(value, str) and _SHA256.match(value.lower()):
        return value.lower()
    return _INVALID


_TELEMETRY_FIELDS = {"steps": _count, "tokens": _count, "costUsd": _amount, "traceId": _text}
_FILES_FIELDS = {
    "kind": _text,
    "version": _version,
    "size": _count,
    "sha256": _sha256,
    "path": _text,
}


def read_telemetry(value: Any, warnings: list[str]) -> dict | None:
    return _read_fields("telemetry/v1", _TELEMETRY_FIELDS, value, warnings)


def read_files(value: Any, warnings: list[str]) -> dict | None:
    return _read_fields("files/v1", _FILES_FIELDS, value, warnings)


def _read_fields(name: str, fields: dict, value: Any, warnings: list[str]) -> dict | None:
    if not isinstance(value, dict):
        warnings.append(f"{name}: data must be an object; ignored")
        return None
    data = {}
    for key, normalize in fields.items():
        if key not in value:
            continue
        normalized = normalize(value[key])
        if normalized is _INVALID:
            warnings.append(f"{name}: {key} {shown(value[key])} is not valid; dropped")
        else:
            data[key] = normalized
    return data or None
