"""Test settings: the real settings, with a fixed key so the suite needs no environment."""

import os
import tempfile

os.environ.setdefault("SECRET_KEY", "insecure-test-only-key")
# A fixed Fernet key, so servers a test starts read what the test process sealed.
os.environ.setdefault("ONLOOKER_CREDENTIAL_KEYS", "3q2-7wbRJpDbAU1AnLZV0kEGrZbSSkNh0HxDYTCLC3I=")
os.environ.setdefault("ONLOOKER_DATA_DIR", tempfile.mkdtemp(prefix="onlooker-test-"))
# A page's answer goes at once, as tests that answer expect (servers tests start inherit it
# from the environment); the Undo hold is tested with a hold of its own (test_held_answers).
os.environ.setdefault("ONLOOKER_UNDO_SECONDS", "0")

from dashboard.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# A test's push is applied before its response arrives (the servers tests start as child
# processes run the real background applier).
ONLOOKER_APPLIER = "inline"
# No sender thread in the test process (the ASGI app starts one when imported): tests that
# send notifications call the sender themselves, and see exactly what it sent.
ONLOOKER_NOTIFIER = "external"
# Tests change credentials and push at once; the cache is tested on its own.
ONLOOKER_ENDPOINT_CACHE_SECONDS = 0
# Every refusal is counted as it happens; counting a flood together is tested on its own.
ONLOOKER_REFUSAL_WRITE_SECONDS = 0

# Test on a SQLite file, as the embedded default runs (WAL, IMMEDIATE transactions), so
# threaded tests exercise the same locking; an in-memory database behaves differently.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    DATABASES["default"]["TEST"] = {"NAME": DATA_DIR / "test.sqlite3"}  # noqa: F405
else:
    # The same PostgreSQL backend with a cheaper flush between transactional tests.
    DATABASES["default"]["ENGINE"] = "tests.pg_backend"  # noqa: F405

# Under pytest-xdist each worker has its own test database (pytest-django names them) and,
# here, its own Redis database, so one worker's groups never hear another's broadcasts. The
# child servers tests start take REDIS_URL from these settings, so they follow.
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if REDIS_URL and _worker.startswith("gw"):  # noqa: F405
    from urllib.parse import urlsplit, urlunsplit

    _url = urlsplit(REDIS_URL)  # noqa: F405
    _db = int(_url.path.strip("/") or 0) + 1 + int(_worker[2:])
    REDIS_URL = urlunsplit(_url._replace(path=f"/{_db}"))
    CHANNEL_LAYERS["default"]["CONFIG"]["hosts"] = [redis_host(REDIS_URL)]  # noqa: F405
