"""The keys credentials are sealed with (ONLOOKER_CREDENTIAL_KEYS): the embedded default
generates one into its data folder (mode 0600) once and keeps it; a deployment with
DATABASE_URL must configure them; a value that is not a Fernet key stops the start. Each test
starts a fresh Python process on the real `dashboard.settings` with a controlled environment
and a throwaway data directory, as tests/test_settings.py does."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from tests.processes import ROOT, clean_environment, free_port, stop
from tests.test_settings import refused, started

KEYS = "import json, dashboard.settings as s; print(json.dumps(s.ONLOOKER_CREDENTIAL_KEYS))"
POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/test"


@pytest.fixture
def data_dir(tmp_path) -> Path:
    return tmp_path / "data"


def environment(data_dir: Path, **env: str) -> dict[str, str]:
    """The child's environment: nothing of the test run's settings, and no key unless given
    (the test run's own fixed key would otherwise leak in)."""
    environment = clean_environment(ONLOOKER_DATA_DIR=str(data_dir), **env)
    if "ONLOOKER_CREDENTIAL_KEYS" not in env:
        environment.pop("ONLOOKER_CREDENTIAL_KEYS", None)
    return environment


@pytest.fixture
def start(data_dir):
    """Import the settings in a new process: `start(**env)` → CompletedProcess."""

    def run(**env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", KEYS],
            cwd=ROOT,
            env=environment(data_dir, **env),
            capture_output=True,
            text=True,
            timeout=120,
        )

    return run


def keys_of(result: subprocess.CompletedProcess) -> list[str]:
    return json.loads(started(result))


def test_the_embedded_default_generates_a_private_key_once_and_keeps_it(start, data_dir):
    [key] = keys_of(start())
    Fernet(key)  # a real key
    key_file = data_dir / "credential_keys"
    assert key_file.read_text() == key
    assert key_file.stat().st_mode & 0o777 == 0o600, "the key file is readable by others"

    assert keys_of(start()) == [key]
    assert [p.name for p in data_dir.iterdir() if "credential" in p.name] == ["credential_keys"]


def test_processes_starting_at_once_on_a_new_data_folder_share_one_key(data_dir):
    children = [
        subprocess.Popen(
            [sys.executable, "-c", KEYS],
            cwd=ROOT,
            env=environment(data_dir),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    read = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        read.append(json.loads(out))
    assert read[0] == read[1] == read[2] == [(data_dir / "credential_keys").read_text()]


def test_an_empty_key_file_left_by_an_interrupted_start_is_replaced_by_a_key(start, data_dir):
    data_dir.mkdir(parents=True)
    (data_dir / "credential_keys").write_text("")
    [key] = keys_of(start())
    Fernet(key)
    assert (data_dir / "credential_keys").read_text() == key


def test_keys_from_the_environment_win_and_no_file_is_written(start, data_dir):
    newest, older = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    assert keys_of(start(ONLOOKER_CREDENTIAL_KEYS=f" {newest} , {older} ")) == [newest, older]
    assert not (data_dir / "credential_keys").exists()


def test_a_deployment_with_a_database_url_and_no_key_refuses_to_start(start, data_dir):
    message = refused(start(DATABASE_URL=POSTGRES_URL, SECRET_KEY="x"))
    assert message.startswith("ONLOOKER_CREDENTIAL_KEYS is not set")
    assert "DATABASE_URL" in message
    assert "Fernet.generate_key()" in message  # how to make one
    # It refuses; it does not quietly invent a key that other processes would not share.
    assert not (data_dir / "credential_keys").exists()


def test_a_deployment_with_a_database_url_starts_with_its_configured_key(start):
    key = Fernet.generate_key().decode()
    result = start(DATABASE_URL=POSTGRES_URL, SECRET_KEY="x", ONLOOKER_CREDENTIAL_KEYS=key)
    assert keys_of(result) == [key]


# Fixed values: pytest-xdist workers must collect the same test names. The last is a real
# key cut short by two characters.
@pytest.mark.parametrize(
    "bad", ["not-a-key", "c2hvcnQ=", "3q2-7wbRJpDbAU1AnLZV0kEGrZbSSkNh0HxDYTCLC3"]
)
def test_a_configured_value_that_is_not_a_fernet_key_is_refused_without_showing_it(start, bad):
    good = Fernet.generate_key().decode()
    message = refused(start(ONLOOKER_CREDENTIAL_KEYS=f"{good},{bad}"))
    assert message.startswith("ONLOOKER_CREDENTIAL_KEYS holds a value that is not a Fernet key")
    assert bad not in message and good not in message


def test_a_key_file_holding_something_else_is_refused_naming_the_file(start, data_dir):
    data_dir.mkdir(parents=True)
    (data_dir / "credential_keys").write_text("garbage")
    message = refused(start())
    assert str(data_dir / "credential_keys") in message
    assert "not a Fernet key" in message
    assert (data_dir / "credential_keys").read_text() == "garbage"  # never overwritten


@pytest.mark.slow  # starts the whole demo (an agent and a server): with the long checks
def test_the_demo_with_no_key_configured_makes_one_and_its_agents_pushes_are_taken(tmp_path):
    """The README's first command: nothing configured, and the agent's push credentials,
    sealed by the command with the key it made, open in the server it starts."""
    data_dir = tmp_path / "data"
    port, agent_port = free_port(), free_port()
    env = environment(data_dir)
    env.pop("DJANGO_SETTINGS_MODULE")
    log_path = tmp_path / "demo.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "demo", "--port", str(port),
             "--agent-port", str(agent_port), "--sessions", "1"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    server_log = data_dir / "demo-dashboard.log"
    try:
        deadline = time.monotonic() + 90
        while not (server_log.exists() and '/" 200 ' in server_log.read_text()):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"no push was taken:\n{log_path.read_text()}")
            time.sleep(0.2)
    finally:
        stop(process, timeout=20)
    key_file = data_dir / "credential_keys"
    Fernet(key_file.read_text())
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert "could not be decrypted" not in server_log.read_text()
