"""The applier in a process of its own beside each server (tasks/pushes/process.py): a real
daphne, run as people run it, starts one; it applies what the server keeps, is started again
if it dies, and never outlives its server, even one killed with SIGKILL. Its hints reach the
server's sockets through the server on the embedded default (the browser tests see pushes
arrive live through it), and through Redis on Redis.
"""

from __future__ import annotations

import io
import json
import os
import signal
import time

import httpx
import pytest
from django.test import override_settings

from tasks.live import broadcast, fanout
from tasks.models import Delivery
from tasks.pushes import process
from tests import listening
from tests.builders import status
from tests.conftest import push
from tests.processes import alive, children
from tests.pushes import test_durability as durability
from tests.pushes.test_durability import CREATE_ENDPOINT, applied_store, make_push, send

# A project run in a child process against a store of its own (test_durability.py's).
child_database_url = durability.child_database_url
child = durability.child

DEADLINE = 15.0


def appliers_of(pid: int) -> set[int]:
    """The server's children that are its applier process."""
    return children(pid, running=b"--child")


def wait_for(check, what: str, timeout: float = DEADLINE):
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.05)


# A long reliability check (a server and its applier process killed and started again): -m slow.
@pytest.mark.slow
def test_a_server_applies_in_its_applier_process_which_is_started_again_and_ends_with_it(
    child,
):
    child.run("manage.py", "migrate", "--no-input")
    endpoint = child.python(CREATE_ENDPOINT)
    server, base = child.start_server("server")
    (first,) = wait_for(lambda: appliers_of(server.pid), "no applier process started")

    with httpx.Client(timeout=10) as client:
        answer = send(client, base, endpoint["public_id"], endpoint["bearer"], make_push(0, 1, "p"))
        assert answer.status_code == 200 and answer.json()["outcome"] == "accepted", answer.text
        store = applied_store(child, timeout=DEADLINE)
        assert store["tasks"] == [["task-msg_p_0_1", "TASK_STATE_WORKING"]]

        # An applier process that dies is started again, and applies what was kept meanwhile.
        os.kill(first, signal.SIGKILL)
        answer = send(client, base, endpoint["public_id"], endpoint["bearer"], make_push(0, 2, "p"))
        assert answer.status_code == 200, answer.text
    (second,) = wait_for(
        lambda: [pid for pid in appliers_of(server.pid) if pid != first and alive(pid)],
        "the applier process was not started again",
    )
    store = applied_store(child, timeout=DEADLINE)
    assert [outcome for _, _, outcome in store["deliveries"]] == ["applied", "applied"]
    assert "applier process exited" in child.log("server")  # the server said so

    # However the server ends (here: SIGKILL, no chance to clean up), its applier ends too.
    os.kill(server.pid, signal.SIGKILL)
    server.wait(timeout=5)
    wait_for(lambda: not alive(second), "the applier process outlived its server")


def test_a_hint_the_applier_process_sends_goes_out_from_the_server(settings):
    """The child writes a hint as a line; the server sends it through its channel layer to
    the session's groups, as if it had made it."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    channel = async_to_sync(listening.join)(layer)
    broadcast.coalescer.clear()
    message = {"type": "session.changed", "session": 41, "revision": 3, "updatedAt": "t1"}
    line = json.dumps({"hint": [41, None, message]}).encode() + b"\n"

    process.Supervisor()._hear(line)

    received = async_to_sync(listening.first)(layer, channel, [broadcast.session_group(41)])
    assert received["groups"] == [broadcast.team_group(None), broadcast.session_group(41)]
    assert json.loads(fanout.text_for(received))["revision"] == 3


def test_in_the_applier_process_hints_and_notification_wakes_go_to_the_server():
    from tasks.notify import sender

    said = []
    try:
        broadcast.relay_to(lambda kind, *args: said.append((kind, *args)))
        sender.relay_wakes_to(lambda: said.append(("send",)))
        with override_settings(ONLOOKER_NOTIFIER="background"):
            broadcast.hint(7, 2, {"revision": 1})
            broadcast.notice(7, 2, {"notified": "t"})
            sender.wake()
    finally:
        broadcast.relay_to(None)
        sender.relay_wakes_to(None)
    assert said == [
        ("hint", 7, 2, {"revision": 1}),
        ("notice", 7, 2, {"notified": "t"}),
        ("send",),
    ]
    assert not sender.background.running, "a sender was started in the applier's process"


def test_on_the_embedded_default_the_applier_process_says_its_hints_to_the_server(settings):
    settings.REDIS_URL = ""
    out = io.BytesIO()
    try:
        assert process.send_hints(process._Voice(out)) is None
        broadcast.hint(43, None, {"type": "session.changed", "session": 43, "revision": 2})
    finally:
        broadcast.relay_to(None)
    said = json.loads(out.getvalue())
    assert said["hint"][0] == 43 and said["hint"][2]["revision"] == 2


def test_on_redis_the_applier_process_sends_its_hints_through_the_layer_itself(settings):
    """Nothing goes to the server for it to decode and send again: its listeners hear the
    child's hints from Redis as they hear their own server's."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL: on the in-memory layer hints go through the server")
    layer = get_channel_layer()
    channel = async_to_sync(listening.join)(layer)
    broadcast.coalescer.clear()
    out = io.BytesIO()
    before = broadcast._server_loop
    sending = process.send_hints(process._Voice(out))
    try:
        message = {"type": "session.changed", "session": 42, "revision": 5, "updatedAt": "t"}
        broadcast.hint(42, None, message)
        received = async_to_sync(listening.first)(layer, channel, [broadcast.session_group(42)])
    finally:
        broadcast.use_loop(before)
        sending.call_soon_threadsafe(sending.stop)
    assert json.loads(fanout.text_for(received))["revision"] == 5
    assert out.getvalue() == b"", "the hint was relayed to the server"


def test_under_manage_py_serve_a_kept_push_wakes_the_shared_applier_through_its_pipe(
    client, settings, token_agent
):
    """`manage.py serve`'s servers share one applier: a push they keep is a byte on the pipe
    it reads, and nothing is applied in the server itself."""
    wakes, wake_end = os.pipe()
    os.set_blocking(wakes, False)
    settings.ONLOOKER_APPLIER = "shared"
    settings.ONLOOKER_APPLIER_WAKE_FD = wake_end
    try:
        answer = push(client, token_agent, status("WORKING", at=1))
        woken = os.read(wakes, 64)
    finally:
        os.close(wakes)
        os.close(wake_end)
    assert answer.status_code == 200 and answer.json()["outcome"] == "accepted", answer.content
    assert woken == b"."
    assert Delivery.objects.get().outcome == Delivery.Outcome.PENDING


def test_a_wake_for_an_applier_that_reads_none_never_blocks_the_server():
    wakes, wake_end = os.pipe()
    os.set_blocking(wake_end, False)
    try:
        for _ in range(70_000):  # more than a pipe holds (64 KiB)
            process.nudge(wake_end)
        assert len(os.read(wakes, 1 << 20)) == 65_536
        os.close(wakes)
        process.nudge(wake_end)  # its reader gone (EPIPE): raised nothing
    finally:
        os.close(wake_end)
