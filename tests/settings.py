"""Test settings: the real settings, with a fixed key so the suite needs no environment."""

import os
import tempfile

os.environ.setdefault("SECRET_KEY", "insecure-test-only-key")
os.environ.setdefault("ONLOOKER_DATA_DIR", tempfile.mkdtemp(prefix="onlooker-test-"))

from dashboard.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Test on a SQLite file, as the embedded default runs (WAL, IMMEDIATE transactions), so
# threaded tests exercise the same locking; an in-memory database behaves differently.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    DATABASES["default"]["TEST"] = {"NAME": DATA_DIR / "test.sqlite3"}  # noqa: F405
