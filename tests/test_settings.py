"""Settings come from the environment only, and a bad value stops the start with a message
that names the variable. Each test starts a fresh Python process on the real
`dashboard.settings` with a controlled environment and a throwaway data directory."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.processes import ROOT, clean_environment, free_port, start_daphne, wait_until_listening

SETUP = "import django; django.setup()"
POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/test"

# In the long checks (-m slow; .ci/run runs them): each starts a process of its own, and the
# default run must stay inside its time budget.
pytestmark = pytest.mark.slow


@pytest.fixture
def data_dir(tmp_path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def start(data_dir):
    """Start Django in a new process: `start(code, **env)` → CompletedProcess."""

    def run(code: str = SETUP, **env: str) -> subprocess.CompletedProcess:
        environment = clean_environment(**{"ONLOOKER_DATA_DIR": str(data_dir), **env})
        return subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=120,
        )

    return run


# What the embedded default, with nothing configured, reads: one start, shared by the tests
# below that only look (each child costs a second of a loaded CI core).
EMBEDDED_DEFAULT = f"""{SETUP}
import json
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("PRAGMA journal_mode")
    journal_mode = cursor.fetchone()[0]
layer = get_channel_layer()
print(json.dumps({{
    "DEBUG": settings.DEBUG,
    "SECRET_KEY": settings.SECRET_KEY,
    "ONLOOKER_PUBLIC_URL": settings.ONLOOKER_PUBLIC_URL,
    "ONLOOKER_MAX_PUSH_BYTES": settings.ONLOOKER_MAX_PUSH_BYTES,
    "EMAIL_HOST": settings.EMAIL_HOST,
    "vendor": connection.vendor,
    "journal_mode": journal_mode,
    "database": str(connection.settings_dict["NAME"]),
    "layer": type(layer).__module__ + "." + type(layer).__name__,
}}))
"""


@dataclass(frozen=True)
class Started:
    data_dir: Path
    read: dict


@pytest.fixture(scope="module")
def embedded_default(tmp_path_factory) -> Started:
    """One child on the embedded default: nothing set but its data directory (and an empty
    EMAIL_HOST, so the mail server of the machine running the tests cannot leak in)."""
    data_dir = tmp_path_factory.mktemp("embedded") / "data"
    result = subprocess.run(
        [sys.executable, "-c", EMBEDDED_DEFAULT],
        cwd=ROOT,
        env=clean_environment(ONLOOKER_DATA_DIR=str(data_dir), EMAIL_HOST=""),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return Started(data_dir, json.loads(started(result)))


def refused(result: subprocess.CompletedProcess) -> str:
    """The start failed with ImproperlyConfigured; return its message."""
    assert result.returncode != 0, f"started although it should not have:\n{result.stdout}"
    last_line = result.stderr.strip().splitlines()[-1]
    prefix = "django.core.exceptions.ImproperlyConfigured: "
    assert last_line.startswith(prefix), result.stderr
    return last_line.removeprefix(prefix)


def started(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def show(*expressions: str) -> str:
    """Code that sets Django up and prints the expressions (evaluated after setup) as JSON."""
    items = ", ".join(expressions)
    return f"{SETUP}\nimport json\nfrom django.conf import settings\nprint(json.dumps([{items}]))"


# --- bad values fail loudly at start -------------------------------------------------------


def test_debug_that_is_not_a_boolean_is_refused(start):
    message = refused(start(DEBUG="maybe"))
    assert "DEBUG" in message
    assert "'maybe'" in message


@pytest.mark.parametrize("value", ["abc", "1.5"])
def test_max_push_bytes_that_is_not_a_whole_number_is_refused(start, value):
    message = refused(start(ONLOOKER_MAX_PUSH_BYTES=value))
    assert "ONLOOKER_MAX_PUSH_BYTES" in message
    assert "whole number" in message
    assert repr(value) in message


@pytest.mark.parametrize("value", ["0", "-5"])
def test_max_push_bytes_below_one_is_refused(start, value):
    message = refused(start(ONLOOKER_MAX_PUSH_BYTES=value))
    assert "ONLOOKER_MAX_PUSH_BYTES" in message
    assert "at least 1" in message


@pytest.mark.parametrize("value", ["ftp://x", "onlooker.example.com", "http://"])
def test_public_url_that_is_not_http_is_refused(start, value):
    message = refused(start(ONLOOKER_PUBLIC_URL=value))
    assert "ONLOOKER_PUBLIC_URL" in message
    assert "http(s) URL" in message


def test_public_url_with_a_query_is_refused(start):
    message = refused(start(ONLOOKER_PUBLIC_URL="https://onlooker.example.com/?x=1"))
    assert "ONLOOKER_PUBLIC_URL" in message
    assert "query" in message


def test_database_url_that_is_not_a_url_is_refused(start):
    message = refused(start(DATABASE_URL="nonsense", SECRET_KEY="x"))
    assert message.startswith("DATABASE_URL is not a database URL")


def test_database_url_for_an_unsupported_database_is_refused(start):
    message = refused(start(DATABASE_URL="mysql://user@db.example.com/onlooker", SECRET_KEY="x"))
    assert "DATABASE_URL must be a postgres:// or sqlite:// URL" in message


def test_redis_url_that_is_not_redis_is_refused(start):
    message = refused(start(REDIS_URL="http://x"))
    assert "REDIS_URL must be a redis:// URL" in message
    assert "'http://x'" in message


@pytest.mark.parametrize("debug", ["", "1"])
def test_deployment_without_secret_key_refuses_to_start_and_names_it(start, data_dir, debug):
    message = refused(start(DATABASE_URL=POSTGRES_URL, DEBUG=debug))
    assert "SECRET_KEY is not set" in message
    assert "DATABASE_URL" in message
    # It refuses; it does not quietly invent a key for a deployment.
    assert not (data_dir / "secret_key").exists()


def test_bad_value_also_stops_manage_py(data_dir):
    environment = clean_environment(ONLOOKER_DATA_DIR=str(data_dir), ONLOOKER_MAX_PUSH_BYTES="abc")
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "ONLOOKER_MAX_PUSH_BYTES must be a whole number, not 'abc'" in result.stderr


# --- values come from the environment ----------------------------------------------------


def test_values_are_taken_from_the_environment(start):
    output = started(
        start(
            show(
                "settings.DEBUG",
                "settings.SECRET_KEY",
                "settings.ONLOOKER_PUBLIC_URL",
                "settings.ONLOOKER_MAX_PUSH_BYTES",
                "settings.ALLOWED_HOSTS",
            ),
            DEBUG="off",
            SECRET_KEY="from-the-environment",
            ONLOOKER_PUBLIC_URL="https://onlooker.example.com/",
            ONLOOKER_MAX_PUSH_BYTES="2048",
            ALLOWED_HOSTS="onlooker.example.com, internal.example.com",
        )
    )
    debug, key, public_url, max_bytes, hosts = json.loads(output)
    assert debug is False
    assert key == "from-the-environment"
    assert public_url == "https://onlooker.example.com"
    assert max_bytes == 2048
    assert hosts == ["onlooker.example.com", "internal.example.com"]


def test_defaults_without_configuration(embedded_default):
    read = embedded_default.read
    assert read["DEBUG"] is False
    assert read["ONLOOKER_PUBLIC_URL"] == "http://127.0.0.1:8000"
    assert read["ONLOOKER_MAX_PUSH_BYTES"] == 1024 * 1024


def test_debug_is_off_unless_turned_on(start, embedded_default):
    assert embedded_default.read["DEBUG"] is False
    assert json.loads(started(start(show("settings.DEBUG"), DEBUG="1"))) == [True]


def test_email_is_not_configured_by_default(embedded_default):
    assert embedded_default.read["EMAIL_HOST"] == ""


def test_email_settings_are_taken_from_the_environment(start):
    output = started(
        start(
            show(
                "settings.EMAIL_HOST",
                "settings.EMAIL_PORT",
                "settings.EMAIL_HOST_USER",
                "settings.EMAIL_HOST_PASSWORD",
                "settings.EMAIL_USE_TLS",
                "settings.DEFAULT_FROM_EMAIL",
            ),
            EMAIL_HOST="smtp.example.com",
            EMAIL_PORT="587",
            EMAIL_HOST_USER="onlooker",
            EMAIL_HOST_PASSWORD="mail-secret",
            EMAIL_USE_TLS="yes",
            DEFAULT_FROM_EMAIL="onlooker@example.com",
        )
    )
    assert json.loads(output) == [
        "smtp.example.com",
        587,
        "onlooker",
        "mail-secret",
        True,
        "onlooker@example.com",
    ]


def test_allowed_hosts_default_to_the_public_url_host(start):
    output = started(
        start(
            show("settings.ALLOWED_HOSTS"),
            SECRET_KEY="x",
            ONLOOKER_PUBLIC_URL="https://onlooker.example.com",
        )
    )
    assert "onlooker.example.com" in json.loads(output)[0]


# --- the embedded default ---------------------------------------------------------------


def test_embedded_default_with_debug_off_generates_its_secret_key(embedded_default):
    assert embedded_default.read["DEBUG"] is False
    key = embedded_default.read["SECRET_KEY"]
    assert (embedded_default.data_dir / "secret_key").read_text().strip() == key


def test_embedded_default_generates_a_secret_key_and_keeps_it(start, embedded_default):
    first = embedded_default.read["SECRET_KEY"]
    key_file = embedded_default.data_dir / "secret_key"
    assert key_file.read_text().strip() == first
    assert len(first) >= 50
    assert key_file.stat().st_mode & 0o077 == 0, "the key file is readable by others"

    again = start(show("settings.SECRET_KEY"), ONLOOKER_DATA_DIR=str(embedded_default.data_dir))
    assert json.loads(started(again))[0] == first


def test_embedded_default_generates_a_different_key_per_data_directory(start, embedded_default):
    other = json.loads(started(start(show("settings.SECRET_KEY"))))[0]
    assert other != embedded_default.read["SECRET_KEY"]


def test_empty_key_file_left_by_an_interrupted_start_is_replaced_by_a_new_key(start, data_dir):
    data_dir.mkdir(parents=True)
    (data_dir / "secret_key").write_text("")
    [key] = json.loads(started(start(show("settings.SECRET_KEY"))))
    assert len(key) >= 50
    assert (data_dir / "secret_key").read_text() == key
    assert (data_dir / "secret_key").stat().st_mode & 0o777 == 0o600


def test_secret_key_from_the_environment_wins_over_the_key_file(start, embedded_default):
    assert (embedded_default.data_dir / "secret_key").exists()
    output = started(
        start(
            show("settings.SECRET_KEY"),
            ONLOOKER_DATA_DIR=str(embedded_default.data_dir),
            SECRET_KEY="from-the-environment",
        )
    )
    assert json.loads(output) == ["from-the-environment"]


def test_embedded_default_uses_sqlite_in_wal_mode_in_the_data_directory(embedded_default):
    read = embedded_default.read
    assert read["vendor"] == "sqlite"
    assert read["journal_mode"] == "wal"
    assert Path(read["database"]).parent == embedded_default.data_dir
    assert Path(read["database"]).exists()


def test_database_url_selects_postgresql(start):
    output = started(
        start(
            show(
                "settings.DATABASES['default']['ENGINE']",
                "settings.DATABASES['default']['HOST']",
                "settings.DATABASES['default']['NAME']",
            ),
            DATABASE_URL=POSTGRES_URL,
            SECRET_KEY="x",
        )
    )
    assert json.loads(output) == ["django.db.backends.postgresql", "127.0.0.1", "test"]


LAYER = (
    f"{SETUP}\n"
    "from channels.layers import get_channel_layer\n"
    "layer = get_channel_layer()\n"
    "print(type(layer).__module__ + '.' + type(layer).__name__)\n"
)


def test_default_channel_layer_is_in_memory(embedded_default):
    assert embedded_default.read["layer"] == "channels.layers.InMemoryChannelLayer"


def test_redis_url_selects_the_redis_channel_layer(start):
    # One start: the layer it makes, then the hosts it was given (setting up twice is a no-op).
    code = LAYER + show("settings.CHANNEL_LAYERS['default']['CONFIG']['hosts']")
    layer, hosts = started(start(code, REDIS_URL="redis://127.0.0.1:6379/0")).splitlines()
    assert layer == "channels_redis.core.RedisChannelLayer"
    # Reads wait longer than the layer's 5 s blocking pop (settings.redis_host says why).
    host = {
        "address": "redis://127.0.0.1:6379/0",
        "socket_timeout": 10,
        "socket_connect_timeout": 3,
    }
    assert json.loads(hosts) == [[host]]


def test_default_server_answers_an_anonymous_404_without_listing_url_patterns(data_dir, tmp_path):
    # A real Daphne on the embedded default, as the README runs it: nothing configured.
    port = free_port()
    log = tmp_path / "daphne.log"
    with log.open("wb") as output:
        server = start_daphne(
            port, clean_environment(ONLOOKER_DATA_DIR=str(data_dir)), output=output
        )
    try:
        wait_until_listening(server, port, timeout=30, log=log.read_text)
        base = f"http://127.0.0.1:{port}"
        missing = httpx.get(f"{base}/no-such-page/", timeout=20)
        assert missing.status_code == 404
        # Django's debug page lists every pattern as `path/ [name='…']`; a "Log in" link is fine.
        for pattern in ("URLconf", "admin/", "[name=", "healthz", "a2a/push"):
            assert pattern not in missing.text, f"the 404 page shows {pattern!r}"
        # With DEBUG off the app still serves its own static files, and the login page.
        assert httpx.get(f"{base}/static/css/onlooker.css", timeout=20).status_code == 200
        assert httpx.get(f"{base}/accounts/login/", timeout=20).status_code == 200
    finally:
        server.terminate()
        server.wait(timeout=10)
