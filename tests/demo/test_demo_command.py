"""`manage.py demo` as a process, the way a person or a script starts it: it stops on Ctrl-C
even when started in the background from a script, and says when it has stopped."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import ROOT, clean_environment, free_port, stop

START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0


def ignore_sigint() -> None:
    # What `sh -c 'manage.py demo &'` gives its background job: SIGINT ignored on entry.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


@pytest.mark.slow  # starts the whole demo (an agent and a server): with the long checks
def test_the_demo_started_from_a_script_stops_on_ctrl_c_and_says_so(tmp_path: Path):
    port, agent_port = free_port(), free_port()
    env = clean_environment(ONLOOKER_DATA_DIR=str(tmp_path))
    env.pop("DJANGO_SETTINGS_MODULE")
    log_path = tmp_path / "demo.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "demo", "--port", str(port),
             "--agent-port", str(agent_port), "--sessions", "0"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=ignore_sigint,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while "Onlooker is running" not in log_path.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the demo did not start:\n{log_path.read_text()}")
            time.sleep(0.2)

        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"Ctrl-C did not stop the demo:\n{log_path.read_text()}")
    finally:
        if process.poll() is None:
            # A stop request still stops its children; a kill would leave them running.
            stop(process, timeout=STOP_TIMEOUT)

    output = log_path.read_text()
    assert code == 0, output
    assert "No sessions were started" in output, output  # --sessions 0
    assert output.rstrip().endswith("Onlooker has stopped."), output
    assert not listening(port) and not listening(agent_port), "a demo process outlived it"
