"""A real Daphne serving Onlooker against the test database the pytest process is using, for
tests that need a browser or a real socket on the other end.

    with LiveServer() as server:            # started, and stopped at the end
        response = push_http(server, registered, status("WORKING", at=1))
        page.context.add_cookies([session_cookie(alice, server.url)])
        page.goto(server.url + "/")

The child reads the database the test reads, so a test that uses it must be
`@pytest.mark.django_db(transaction=True)`: its writes are committed (visible to the child),
and the child's writes are visible to the test. It shares the test's SECRET_KEY, so a session
cookie made in the test process logs a browser in, and the test's REDIS_URL by default, so
several servers (and the test process) share one channel layer; without Redis each server has
its own in-memory layer and only hears what it receives itself.
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import quote, urlencode

import httpx
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from tasks.models import Delivery, Session, Task
from tasks.sessions import fragments
from tests.conftest import RegisteredAgent, encode, sign_headers
from tests.processes import (
    clean_environment,
    free_port,
    start_daphne,
    start_serving,
    wait_until_listening,
)

START_TIMEOUT = 20.0  # seconds; Daphne starts in 1-2 s, slower on a loaded CI machine
STOP_TIMEOUT = 5.0  # seconds between SIGTERM and SIGKILL


class _FromSettings:
    """The default `redis_url`: the test settings' REDIS_URL (read when the server is made,
    so importing this module does not need configured settings)."""

    def __repr__(self) -> str:
        return "<settings.REDIS_URL>"


FROM_SETTINGS = _FromSettings()


def child_database_url() -> str:
    """DATABASE_URL for the database this process is connected to *now*: the test database
    once pytest-django has created it (not the one the settings name)."""
    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        name = str(Path(db["NAME"]).resolve())
        if name == ":memory:" or "mode=memory" in name:
            raise RuntimeError("an in-memory SQLite database cannot be shared with a child")
        # The same connection options as this process (WAL, IMMEDIATE transactions, the lock
        # timeout): dj-database-url turns the query string back into OPTIONS.
        options = {k: v for k, v in db.get("OPTIONS", {}).items() if isinstance(v, str | int)}
        query = f"?{urlencode(options, quote_via=quote)}" if options else ""
        return f"sqlite:///{name}{query}"
    if connection.vendor == "postgresql":  # Django's backend, or tests.pg_backend
        user = quote(db.get("USER") or "", safe="")
        password = quote(db.get("PASSWORD") or "", safe="")
        credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        host = db.get("HOST") or "127.0.0.1"
        port = f":{db['PORT']}" if db.get("PORT") else ""
        return f"postgres://{credentials}{host}{port}/{quote(db['NAME'], safe='')}"
    raise RuntimeError(f"no DATABASE_URL for the {db['ENGINE']} backend")


class LiveServer:
    """One Daphne child process on a loopback port. Start it after the test database exists
    (inside a test, or a fixture that depends on `django_db_setup`)."""

    def __init__(
        self,
        *,
        port: int | None = None,
        redis_url: str | None | _FromSettings = FROM_SETTINGS,
        log_path: Path | None = None,
        database_url: str | None = None,
        environment: dict[str, str] | None = None,
        processes: int | None = None,
    ) -> None:
        self.port = port or free_port()
        # None: one Daphne; a number: `manage.py serve` with that many on the port.
        self.processes = processes
        # Another way to the test database (a proxy in front of it), or none: this one.
        self.database_url = database_url
        self.extra_environment = environment or {}  # settings of its own (ONLOOKER_…)
        if isinstance(redis_url, _FromSettings):
            redis_url = getattr(settings, "REDIS_URL", "") or None
        self.redis_url: str | None = redis_url
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"
        self._own_dir = tempfile.TemporaryDirectory(prefix="onlooker-live-")
        self.data_dir = Path(self._own_dir.name)
        self.log_path = log_path or self.data_dir / "daphne.log"
        self.process: subprocess.Popen | None = None

    def environment(self) -> dict[str, str]:
        env = clean_environment(
            DATABASE_URL=self.database_url or child_database_url(),
            SECRET_KEY=settings.SECRET_KEY,
            # As people run it: DEBUG is off by default (its error pages differ, and leak).
            DEBUG="0",
            ALLOWED_HOSTS="127.0.0.1,localhost",
            ONLOOKER_DATA_DIR=str(self.data_dir),
            ONLOOKER_PUBLIC_URL=self.url,
            PYTHONUNBUFFERED="1",
        )
        if self.redis_url:
            env["REDIS_URL"] = self.redis_url
        return env | self.extra_environment

    def start(self) -> None:
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError(f"the server on port {self.port} is already running")
        # Appended to, so a restart keeps what the first run said.
        with open(self.log_path, "ab") as output:
            if self.processes is None:
                self.process = start_daphne(self.port, self.environment(), output=output)
            else:
                self.process = start_serving(
                    self.port, self.processes, self.environment(), output=output
                )
        wait_until_listening(self.process, self.port, timeout=START_TIMEOUT, log=self.log)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within STOP_TIMEOUT."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.kill()
        self.process.wait(timeout=STOP_TIMEOUT)

    def restart(self) -> None:
        """Stop, and start again on the same port (clients reconnect to the same URL)."""
        self.stop()
        self.start()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def __enter__(self) -> LiveServer:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
        self._own_dir.cleanup()


def session_cookie(user: User, url: str) -> dict:
    """A Playwright cookie that logs a browser in as `user` on the server at `url`. The
    session row is in the (shared) database and signed with the shared SECRET_KEY."""
    client = Client()
    client.force_login(user)
    return {
        "name": settings.SESSION_COOKIE_NAME,
        "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
        "url": url,
        "httpOnly": True,
        "sameSite": "Lax",
    }


def push_http(
    server: LiveServer,
    registered: RegisteredAgent,
    body: dict | bytes,
    *,
    msg_id: str | None = None,
    timeout: float = 10.0,
    applied: bool = True,
    client: httpx.Client | None = None,
) -> httpx.Response:
    """POST a push to the live server the way `tests.conftest.push` does through the test
    client: Standard Webhooks signature if the agent signs, else its bearer credentials.
    The server answers once it has kept the push; with `applied`, this returns once its
    applier has applied it too, as the test client's pushes are. A caller pushing many
    passes its `client`: a new one per push costs ~20 ms of the test's CPU."""
    raw = encode(body)
    headers = {"Content-Type": "application/json"}
    if registered.secret:
        headers.update(sign_headers(registered.secret, raw, msg_id=msg_id))
    else:
        headers["Authorization"] = f"Bearer {registered.bearer}"
        if msg_id:
            headers["webhook-id"] = msg_id
    url = server.url + registered.path
    response = (client or httpx).post(url, content=raw, headers=headers, timeout=timeout)
    if applied and response.status_code == 200 and response.json()["outcome"] == "accepted":
        wait_applied(response.json()["delivery"], timeout=timeout)
    return response


def wait_applied(delivery_id: int, *, timeout: float = 10.0) -> None:
    """Until the server's applier has applied the delivery and stored its session's fragments
    (it shares the test's database): then the hint about it has gone out too, so a socket
    opened after this hears only later ones."""
    deadline = time.monotonic() + timeout

    def wait(done, what: str) -> None:
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"delivery {delivery_id}: {what} in {timeout} s")
            time.sleep(0.01)

    # On SQLite it is in the spool file until the applier takes it (tasks/pushes/spool.py).
    applied = Delivery.objects.filter(pk=delivery_id).exclude(outcome=Delivery.Outcome.PENDING)
    wait(applied.exists, "not applied")
    delivery = Delivery.objects.get(pk=delivery_id)
    task = Task.objects.filter(agent_id=delivery.agent_id, task_id=delivery.task_id).first()
    if task is None:
        return  # nothing of it was applied to a session (a message that names none)

    def stored() -> bool:
        session = Session.objects.select_related("card", "fragments").get(pk=task.session_id)
        view, card = getattr(session, "fragments", None), getattr(session, "card", None)
        return (
            view is not None
            and view.version == fragments.version()
            and view.revision == (card.revision if card else 0)
        )

    wait(stored, "its session's fragments not stored")


__all__ = ["LiveServer", "push_http", "session_cookie", "child_database_url"]
