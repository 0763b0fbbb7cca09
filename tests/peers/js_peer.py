"""The approval agent on the official A2A JavaScript SDK (`tests/peers/js/approval_agent.mjs`),
run as a Node child process on a loopback port, and what a test asks it.

    with JsPeer.start(hold=True) as peer:      # stopped at the end
        peer.card_url, peer.received(), peer.pushes(), peer.release()

Its packages come from `npm ci --prefix tests/peers/js` (an ignored folder). Without them the
tests that need the peer skip, unless ONLOOKER_REQUIRE_JS_PEER=1 (CI), which fails them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx
import pytest

from tests.processes import ROOT, free_port, stop, wait_until_listening

PEER_DIR = ROOT / "tests" / "peers" / "js"
SCRIPT = PEER_DIR / "approval_agent.mjs"
SDK = PEER_DIR / "node_modules" / "@a2a-js" / "sdk" / "package.json"
INTERACTIONS = "https://docs.nylorun.com/a2a/interactions/v1"
PUSH_LATENCY_MS = 700  # the latency that made the republish land after the answer, every time
START_TIMEOUT = 15.0  # seconds; Node starts the agent in well under one


def require_js_peer() -> None:
    """Skip the calling test (fail it, in CI) when Node or the SDK's packages are missing."""
    missing = []
    if shutil.which("node") is None:
        missing.append("node is not on PATH")
    if not SDK.exists():
        missing.append(f"{SDK.parent.relative_to(ROOT)} is missing")
    if not missing:
        return
    reason = "; ".join(missing) + ": run `npm ci --prefix tests/peers/js` for the JS SDK peer"
    if os.environ.get("ONLOOKER_REQUIRE_JS_PEER") == "1":
        pytest.fail(reason + " (ONLOOKER_REQUIRE_JS_PEER=1)", pytrace=False)
    pytest.skip(reason)


class JsPeer:
    def __init__(
        self, process: subprocess.Popen, port: int, log_path: Path, push_latency_ms: int
    ) -> None:
        self.process = process
        self.push_latency_ms = push_latency_ms
        self.port = port
        self.log_path = log_path
        self.base_url = f"http://127.0.0.1:{port}"
        self.card_url = f"{self.base_url}/.well-known/agent-card.json"
        self.rpc_url = f"{self.base_url}/a2a/jsonrpc"

    @classmethod
    def start(cls, *, hold: bool = False, push_latency_ms: int = PUSH_LATENCY_MS) -> JsPeer:
        require_js_peer()
        port = free_port()
        log_path = Path(tempfile.mkstemp(prefix="onlooker-js-peer-", suffix=".log")[1])
        command = ["node", str(SCRIPT), "--port", str(port)]
        command += ["--push-latency-ms", str(push_latency_ms)]
        if hold:
            command.append("--hold")
        with log_path.open("wb") as output:
            process = subprocess.Popen(
                command,
                cwd=PEER_DIR,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        peer = cls(process, port, log_path, push_latency_ms)
        wait_until_listening(process, port, timeout=START_TIMEOUT, log=peer.log)
        return peer

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _get(self, path: str) -> list[dict]:
        return httpx.get(self.base_url + path, timeout=5).json()

    def received(self, task_id: str | None = None) -> list[dict]:
        """Every follow-up message the agent received: messageId, taskId, text, answer (its
        interactions/v1 metadata, or None)."""
        return [m for m in self._get("/test/received") if task_id in (None, m["taskId"])]

    def pushes(self, task_id: str | None = None) -> list[dict]:
        """Every push the agent sent: key (`sha256:` of the body, as a receiver derives it),
        kind, taskId, state, and the HTTP status it was answered with (None until answered)."""
        return [p for p in self._get("/test/pushes") if task_id in (None, p["taskId"])]

    def wait_until_quiet(self, task_id: str, timeout: float = 20.0) -> None:
        """Until every push the agent made for the task has been answered and none has been
        made for longer than the push latency: the SDK sends some events twice, and a push
        still being applied when a test ends deadlocks the test database's flush."""
        quiet = self.push_latency_ms / 1000 + 0.8
        deadline = time.monotonic() + timeout
        seen, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            pushes = self.pushes(task_id)
            if len(pushes) != seen or any(p["status"] is None for p in pushes):
                seen, since = len(pushes), time.monotonic()
            elif time.monotonic() - since >= quiet:
                return
            time.sleep(0.1)
        raise AssertionError(f"the agent kept pushing for {timeout} s:\n{self.log()}")

    def release(self) -> None:
        """Let held follow-ups go on (started with `hold=True`)."""
        httpx.post(self.base_url + "/test/release", timeout=5).raise_for_status()

    def stop(self) -> None:
        if self.process.poll() is None:
            stop(self.process)
        self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> JsPeer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
