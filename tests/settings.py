"""Test settings: the real settings, with a fixed key so the suite needs no environment."""

import os
import tempfile

os.environ.setdefault("SECRET_KEY", "insecure-test-only-key")
os.environ.setdefault("ONLOOKER_DATA_DIR", tempfile.mkdtemp(prefix="onlooker-test-"))

from dashboard.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
