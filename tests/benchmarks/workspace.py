"""What every benchmark stands on: a temporary data directory and, when DATABASE_URL names a
PostgreSQL server, a dedicated database of its own, created afresh and dropped at the end."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from cryptography.fernet import Fernet

from tests.processes import ROOT

# Variables the settings read; the caller's values must not leak into the children.
SETTINGS_VARIABLES = (
    "DATABASE_URL",
    "DEBUG",
    "SECRET_KEY",
    "ALLOWED_HOSTS",
    "DJANGO_SETTINGS_MODULE",
)


class Workspace(contextlib.AbstractContextManager):
    def __init__(self, database_url: str, *, database: str) -> None:
        self.admin_url = database_url
        self.database = database
        self.bench_url = ""
        self.directory = Path()
        # One key for every child process: what one seals, the others must open.
        self.credential_key = Fernet.generate_key().decode()

    @property
    def postgres(self) -> bool:
        return bool(self.admin_url)

    @property
    def description(self) -> str:
        if self.postgres:
            return f"PostgreSQL ({self.database}, dropped at the end)"
        return "SQLite (WAL, file in a temporary directory)"

    @property
    def data_dir(self) -> Path:
        return self.directory / "onlooker"

    def __enter__(self) -> Workspace:
        if self.postgres:
            parts = urlsplit(self.admin_url)
            if not parts.scheme.startswith("postgres"):
                raise SystemExit("DATABASE_URL must be a postgres:// URL (or unset for SQLite)")
            if parts.path.strip("/") == self.database:
                raise SystemExit(f"DATABASE_URL must not name {self.database}: it is dropped")
            self.bench_url = urlunsplit(parts._replace(path=f"/{self.database}"))
            # A database left by a run that was killed outright is stale: start afresh.
            self._admin(f"DROP DATABASE IF EXISTS {self.database} WITH (FORCE)")
            self._admin(f"CREATE DATABASE {self.database}")
        self.directory = Path(tempfile.mkdtemp(prefix=f"{self.database}-"))
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self.postgres:
                self._admin(f"DROP DATABASE IF EXISTS {self.database} WITH (FORCE)")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _admin(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as connection:
            connection.execute(statement)

    def onlooker_env(self) -> dict[str, str]:
        """The environment of an Onlooker child process on this workspace's database."""
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in SETTINGS_VARIABLES and not key.startswith("ONLOOKER_")
        }
        env.update(
            DJANGO_SETTINGS_MODULE="dashboard.settings",
            ONLOOKER_DATA_DIR=str(self.data_dir),
            SECRET_KEY=secrets.token_urlsafe(50),
            DEBUG="false",
            ALLOWED_HOSTS="127.0.0.1",
            ONLOOKER_CREDENTIAL_KEYS=self.credential_key,
            # Every benchmark socket is one member's: a person's cap (their tabs, 200 per
            # process) would close most of a thousand at once, and they would count as lost.
            ONLOOKER_LIVE_SOCKETS_PER_PERSON="100000",
            # The project first; the caller's PYTHONPATH after it, so --app can name a wrapper.
            PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        )
        if self.bench_url:
            env["DATABASE_URL"] = self.bench_url
        return env

    def set_up_here(self) -> None:
        """Migrate this workspace's database (in a child, as a server would be), then point
        this process's Django at it: for benchmarks that call Onlooker's code in-process."""
        env = self.onlooker_env()
        subprocess.run(  # noqa: S603 - our own program
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env=env,
            check=True,
            timeout=300,
        )
        os.environ.update(env)
        import django

        django.setup()
