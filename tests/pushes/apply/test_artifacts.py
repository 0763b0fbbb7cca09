"""Artifacts (pushes/apply/artifacts.py): every version kept, chunks assembled, repeats and
bad files data handled. All through the real view."""

from __future__ import annotations

from tasks.models import Artifact, Delivery, Task
from tests.builders import artifact
from tests.pushes.sending import FILES, send


def test_chunked_artifact_is_assembled_in_one_version(client, token_agent):
    send(client, token_agent, artifact("a1", "chunk1", files=FILES, name="report"))
    send(client, token_agent, artifact("a1", "chunk2", append=True, last_chunk=True))
    version = Artifact.objects.get()
    assert [p["text"] for p in version.parts] == ["chunk1", "chunk2"]
    assert (version.name, version.files) == ("report", FILES)


def test_every_artifact_version_is_kept(client, token_agent):
    send(client, token_agent, artifact("a1", "first", files=FILES))
    send(client, token_agent, artifact("a1", "second", files={**FILES, "version": 2}))
    versions = list(Artifact.objects.values_list("sequence", "parts"))
    assert versions == [(1, [{"text": "first"}]), (2, [{"text": "second"}])]


def test_resent_identical_artifact_is_not_a_new_version(client, token_agent):
    send(client, token_agent, artifact("a1", "same"), msg_id="x1")
    send(client, token_agent, artifact("a1", "same"), msg_id="x2")
    assert Artifact.objects.count() == 1


def test_append_for_an_unseen_artifact_starts_it_with_a_warning(client, token_agent):
    send(client, token_agent, artifact("a9", "tail", append=True))
    assert Artifact.objects.get().parts == [{"text": "tail"}]
    assert "not seen before" in Delivery.objects.get().warnings[0]


def test_bad_files_data_is_dropped_with_a_warning(client, token_agent):
    send(
        client,
        token_agent,
        artifact("a1", "x", files={"kind": "r", "sha256": "nothex", "size": -3}),
    )
    assert Artifact.objects.get().files == {"kind": "r"}
    assert len(Delivery.objects.get().warnings) == 2


def test_artifact_for_an_unknown_task_creates_it(client, token_agent):
    send(client, token_agent, artifact("a1", "x", task="new-task"))
    assert Task.objects.get(task_id="new-task").state == "TASK_STATE_SUBMITTED"
