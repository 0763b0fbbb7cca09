"""`GET /healthz`: 200 when the database and the channel layer both answer, 503 naming what
is down. Nothing is faked: a layer is down because it points at a closed port, and the
database is down because a real server process is configured with an unreachable one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from asgiref.sync import async_to_sync
from channels.layers import channel_layers

BASE_DIR = Path(__file__).resolve().parent.parent
SETTINGS_VARIABLES = (
    "DATABASE_URL",
    "REDIS_URL",
    "SECRET_KEY",
    "DEBUG",
    "ALLOWED_HOSTS",
    "ONLOOKER_PUBLIC_URL",
    "ONLOOKER_MAX_PUSH_BYTES",
    "ONLOOKER_DATA_DIR",
    "DJANGO_SETTINGS_MODULE",
)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def fresh_channel_layers():
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


@pytest.fixture
def redis_layer_down(settings, fresh_channel_layers):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [f"redis://127.0.0.1:{closed_port()}/0"]},
        }
    }
    channel_layers.backends.clear()


def test_healthz_is_ok_when_database_and_channel_layer_answer(client, db, fresh_channel_layers):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": ["database", "channel layer"]}


def test_healthz_is_ok_through_the_async_client(async_client, db, fresh_channel_layers):
    response = async_to_sync(async_client.get)("/healthz")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"


def test_healthz_names_the_channel_layer_when_redis_is_down(client, db, redis_layer_down):
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "down"
    assert list(body["down"]) == ["channel layer"]
    assert body["down"]["channel layer"], "the reason is empty"


def test_healthz_recovers_when_the_channel_layer_is_back(client, db, settings, redis_layer_down):
    assert client.get("/healthz").status_code == 503
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    assert client.get("/healthz").status_code == 200


def test_healthz_only_answers_get(client, db, fresh_channel_layers):
    assert client.post("/healthz").status_code == 405


# --- the database down: a real server process configured with an unreachable database -------


@pytest.fixture
def serve(tmp_path):
    """Start `daphne dashboard.asgi:application` with extra environment; yield its base URL."""
    processes = []

    def start(**env: str) -> str:
        port = closed_port()
        environment = {k: v for k, v in os.environ.items() if k not in SETTINGS_VARIABLES}
        environment.update(
            DJANGO_SETTINGS_MODULE="dashboard.settings",
            ONLOOKER_DATA_DIR=str(tmp_path / "data"),
        )
        environment.update(env)
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "dashboard.asgi:application",
            ],
            cwd=BASE_DIR,
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        processes.append(process)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"daphne exited: {process.stderr.read().decode()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return base
            except OSError:
                time.sleep(0.1)
        raise AssertionError("daphne did not start listening in 30 s")

    yield start
    for process in processes:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_healthz_names_the_database_when_it_is_unreachable(serve):
    base = serve(
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed_port()}/onlooker",
        SECRET_KEY="x",
    )
    response = httpx.get(f"{base}/healthz", timeout=20)
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "down"
    assert list(body["down"]) == ["database"]
    assert body["down"]["database"]


def test_healthz_names_both_when_database_and_redis_are_down(serve):
    base = serve(
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed_port()}/onlooker",
        REDIS_URL=f"redis://127.0.0.1:{closed_port()}/0",
        SECRET_KEY="x",
    )
    response = httpx.get(f"{base}/healthz", timeout=20)
    assert response.status_code == 503
    assert sorted(response.json()["down"]) == ["channel layer", "database"]


def test_healthz_is_ok_from_a_real_server_on_the_embedded_default(serve):
    # The control for the two tests above: the same server, with a database that answers.
    base = serve()
    response = httpx.get(f"{base}/healthz", timeout=20)
    assert response.status_code == 200, response.text
