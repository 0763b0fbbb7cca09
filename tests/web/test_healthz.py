"""`GET /healthz`: 200 when the database and the channel layer both answer, 503 naming what
is down, and nothing more: anyone may ask, so the reason (hosts, ports, driver messages) goes
to the log only. Nothing is faked: a layer is down because it points at a closed port, and the
database is down because a real server process is configured with an unreachable one."""

from __future__ import annotations

import logging
import subprocess
from urllib.parse import urlsplit

import httpx
import pytest
from asgiref.sync import async_to_sync
from channels.layers import channel_layers

from tests.processes import clean_environment, free_port, start_daphne, stop, wait_until_listening


@pytest.fixture
def redis_layer_down(settings, fresh_channel_layers):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [f"redis://127.0.0.1:{free_port()}/0"]},
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
    assert response.json() == {"status": "down", "down": ["channel layer"]}


def test_healthz_logs_why_the_channel_layer_is_down_but_does_not_say_it(
    client, db, settings, redis_layer_down, caplog
):
    port = str(urlsplit(settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]).port)
    with caplog.at_level(logging.WARNING, logger="tasks.web.views"):
        response = client.get("/healthz")
    assert response.status_code == 503
    body = response.content.decode()
    for internal in (port, "127.0.0.1", "redis", "Error", "refused"):
        assert internal not in body, f"{internal!r} is in the public body: {body}"
    logged = " ".join(record.getMessage() for record in caplog.records)
    assert "channel layer is down" in logged
    assert port in logged, logged


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
        port = free_port()
        environment = clean_environment(ONLOOKER_DATA_DIR=str(tmp_path / "data"), **env)
        process = start_daphne(port, environment, output=subprocess.PIPE)
        processes.append(process)
        wait_until_listening(process, port, timeout=30, log=lambda: process.stdout.read().decode())
        return f"http://127.0.0.1:{port}"

    yield start
    for process in processes:
        stop(process, timeout=2)  # a stuck database connect is not worth waiting for


# Long reliability checks (a real server whose database is away): -m slow.
@pytest.mark.slow
def test_healthz_names_the_database_when_it_is_unreachable(serve):
    base = serve(
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{free_port()}/onlooker",
        SECRET_KEY="x",
    )
    response = httpx.get(f"{base}/healthz", timeout=20)
    assert response.status_code == 503
    assert response.json() == {"status": "down", "down": ["database"]}


@pytest.mark.slow
def test_healthz_names_both_when_database_and_redis_are_down_without_internal_detail(serve):
    database_port, redis_port = str(free_port()), str(free_port())
    base = serve(
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{database_port}/onlooker",
        REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
        SECRET_KEY="x",
    )
    response = httpx.get(f"{base}/healthz", timeout=20)
    assert response.status_code == 503
    assert response.json() == {"status": "down", "down": ["database", "channel layer"]}
    # What is down is named; where it is and what the driver said are not.
    for internal in (database_port, redis_port, "127.0.0.1", "postgres", "psycopg", "onlooker"):
        assert internal not in response.text, f"{internal!r} is in the public body"


def test_healthz_is_ok_from_a_real_server_on_the_embedded_default(serve):
    # The control for the two tests above: the same server, with a database that answers.
    base = serve()
    response = httpx.get(f"{base}/healthz", timeout=20)
    assert response.status_code == 200, response.text
