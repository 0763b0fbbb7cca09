"""Onlooker's settings: everything comes from the environment, and a bad value stops the start.

Embedded default (nothing set): SQLite in the data directory (WAL), the in-memory channel
layer, a generated secret key kept in the data directory. DEBUG is off unless DEBUG=1.
Production: set DATABASE_URL, REDIS_URL, SECRET_KEY, ALLOWED_HOSTS and ONLOOKER_PUBLIC_URL
(and EMAIL_HOST to offer password reset).
"""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from pathlib import Path
from urllib.parse import unquote, urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value == "":
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {value!r}")


def env_int(name: str, default: int, *, minimum: int = 1) -> int:
    value = os.environ.get(name, "").strip()
    if value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {value!r}") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {number}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name, "").strip()
    if value == "":
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_url(name: str, default: str) -> str:
    value = os.environ.get(name, "").strip() or default
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ImproperlyConfigured(
            f"{name} must be an http(s) URL such as {default}, not {value!r}"
        )
    if parts.query or parts.fragment:
        raise ImproperlyConfigured(f"{name} must not carry a query or fragment: {value!r}")
    return value.rstrip("/")


DATA_DIR = Path(os.environ.get("ONLOOKER_DATA_DIR", "").strip() or BASE_DIR / "data")
DATABASE_URL = os.environ.get("DATABASE_URL", "").strip()
REDIS_URL = os.environ.get("REDIS_URL", "").strip()

# Off unless asked for: a DEBUG page lists every URL pattern and settings to anyone.
DEBUG = env_bool("DEBUG", default=False)


def _secret_key() -> str:
    key = os.environ.get("SECRET_KEY", "").strip()
    if key:
        return key
    if DATABASE_URL:
        # A deployment may run several processes or machines: they must share one key, so
        # it is configured, never invented per data directory.
        raise ImproperlyConfigured(
            "SECRET_KEY is not set, and a deployment with DATABASE_URL must set it to a long "
            'random value (python -c "import secrets; print(secrets.token_urlsafe(50))").'
        )
    key_file = DATA_DIR / "secret_key"
    if key_file.exists():
        key = key_file.read_text().strip()
        if key:
            return key
    # Written to a private temporary file and renamed, so an interrupted first start never
    # leaves an empty or world-readable key behind.
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    temporary = DATA_DIR / f".secret_key.{os.getpid()}"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(key)
    os.replace(temporary, key_file)
    return key


SECRET_KEY = _secret_key()


def _credential_keys() -> list[str]:
    """Fernet keys for the credentials kept at rest (tasks/models/sealed.py), newest first:
    ONLOOKER_CREDENTIAL_KEYS, comma-separated. The embedded default generates one into the
    data folder (mode 0600) the first time; a deployment with DATABASE_URL must configure
    them, as every process and machine must share them."""
    configured = env_list("ONLOOKER_CREDENTIAL_KEYS", [])
    if configured:
        return _checked_keys(configured, "ONLOOKER_CREDENTIAL_KEYS")
    if DATABASE_URL:
        raise ImproperlyConfigured(
            "ONLOOKER_CREDENTIAL_KEYS is not set, and a deployment with DATABASE_URL must set "
            "it: Onlooker keeps agents' and people's credentials encrypted with it "
            '(python -c "from cryptography.fernet import Fernet; '
            'print(Fernet.generate_key().decode())").'
        )
    key_file = DATA_DIR / "credential_keys"
    kept = _kept_keys(key_file)
    if kept:
        return kept
    from cryptography.fernet import Fernet

    DATA_DIR.mkdir(parents=True, exist_ok=True)
    key = Fernet.generate_key().decode()
    temporary = DATA_DIR / f".credential_keys.{os.getpid()}"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(key)
    # Linked, not renamed over: two processes starting at once (a server and its applier)
    # must not each seal with a key of their own, one of them then lost. The first link
    # wins; the other process reads the winner's key.
    try:
        os.link(temporary, key_file)
    except FileExistsError:
        kept = _kept_keys(key_file)
        if kept:
            os.unlink(temporary)
            return kept
        os.replace(temporary, key_file)  # an empty file: nothing was ever sealed with it
    except OSError:
        os.replace(temporary, key_file)  # a file system without hard links
    else:
        os.unlink(temporary)
    return [key]


def _kept_keys(key_file: Path) -> list[str]:
    if not key_file.exists():
        return []
    keys = [k.strip() for k in key_file.read_text().split(",") if k.strip()]
    return _checked_keys(keys, str(key_file)) if keys else []


def _checked_keys(keys: list[str], where: str) -> list[str]:
    from cryptography.fernet import Fernet

    for key in keys:
        try:
            Fernet(key)
        except ValueError:
            raise ImproperlyConfigured(
                f"{where} holds a value that is not a Fernet key (32 url-safe base64-encoded "
                'bytes; python -c "from cryptography.fernet import Fernet; '
                'print(Fernet.generate_key().decode())" makes one)'
            ) from None
    return keys


ONLOOKER_CREDENTIAL_KEYS = _credential_keys()

ONLOOKER_PUBLIC_URL = env_url("ONLOOKER_PUBLIC_URL", "http://127.0.0.1:8000")
ONLOOKER_MAX_PUSH_BYTES = env_int("ONLOOKER_MAX_PUSH_BYTES", 1024 * 1024)
# Every call to an agent (JSON-RPC, card fetch) ends within this many seconds, connecting,
# sending and reading the whole reply: a person's Approve waits at most this long.
# Seconds a page's answer waits on the server for Undo before it goes; 0 sends at once.
ONLOOKER_UNDO_SECONDS = env_int("ONLOOKER_UNDO_SECONDS", 5, minimum=0)
ONLOOKER_AGENT_CALL_SECONDS = env_int("ONLOOKER_AGENT_CALL_SECONDS", 15)
# The largest JSON-RPC reply read from an agent, decompressed (a task with its history).
ONLOOKER_AGENT_REPLY_BYTES = env_int("ONLOOKER_AGENT_REPLY_BYTES", 4 * 1024 * 1024)
# A task's own push token keeps working this long after the task ended (late and retried
# pushes still arrive), then it is refused (answering/push_configs.py).
ONLOOKER_PUSH_TOKEN_GRACE_SECONDS = env_int("ONLOOKER_PUSH_TOKEN_GRACE_SECONDS", 15 * 60)
# How long a process keeps a push endpoint and its agent (credentials, team) in memory: a
# deactivated endpoint or a changed secret takes effect within this many seconds everywhere.
ONLOOKER_ENDPOINT_CACHE_SECONDS = env_int("ONLOOKER_ENDPOINT_CACHE_SECONDS", 1, minimum=0)
# Who applies received pushes (tasks/pushes/applier.py): a process started beside each server
# process ("process", tasks/pushes/process.py), a thread in each server process
# ("background"), or only `manage.py apply_deliveries` ("external"); "inline" applies on the
# request that received the push (the tests' mode). "shared" is set by `manage.py serve` for
# its server processes: one applier process of its own serves them all, woken by a byte
# written to the pipe ONLOOKER_APPLIER_WAKE_FD.
ONLOOKER_APPLIER = os.environ.get("ONLOOKER_APPLIER", "").strip() or "process"
if ONLOOKER_APPLIER not in ("process", "background", "external", "inline", "shared"):
    raise ImproperlyConfigured(
        "ONLOOKER_APPLIER must be process, background, external or inline,"
        f" not {ONLOOKER_APPLIER!r}"
    )
ONLOOKER_APPLIER_WAKE_FD = None
if ONLOOKER_APPLIER == "shared":
    try:
        ONLOOKER_APPLIER_WAKE_FD = int(os.environ.get("ONLOOKER_APPLIER_WAKE_FD", ""))
    except ValueError:
        raise ImproperlyConfigured(
            "ONLOOKER_APPLIER=shared is set by `manage.py serve` with ONLOOKER_APPLIER_WAKE_FD, "
            "the descriptor its applier is woken through; run `manage.py serve`, or choose "
            "another ONLOOKER_APPLIER"
        ) from None
# On SQLite, where received pushes wait for the applier (tasks/pushes/spool.py): the spool, a
# file of their own, by default beside the database ("<database>-spool"), so keeping one never
# waits for the database's write lock; "off" keeps them in the database itself. Not used on
# PostgreSQL. ONLOOKER_INBOX is its earlier name, still read when this one is not set.
ONLOOKER_SPOOL = (
    os.environ.get("ONLOOKER_SPOOL", "") or os.environ.get("ONLOOKER_INBOX", "")
).strip()
# Who sends team notifications (tasks/notify/sender.py): a thread in each server process
# ("background"), or only `manage.py send_notifications` ("external").
ONLOOKER_NOTIFIER = os.environ.get("ONLOOKER_NOTIFIER", "").strip() or "background"
if ONLOOKER_NOTIFIER not in ("background", "external"):
    raise ImproperlyConfigured(
        f"ONLOOKER_NOTIFIER must be background or external, not {ONLOOKER_NOTIFIER!r}"
    )
# Finished sessions not updated for this many days leave the live screens (monitoring
# screen, wall, sidebar, counts); search and the "finished" filter still find them.
ONLOOKER_ARCHIVE_AFTER_DAYS = env_int("ONLOOKER_ARCHIVE_AFTER_DAYS", 7)
if ONLOOKER_ARCHIVE_AFTER_DAYS > 36_500:  # further back than a date can go, soon
    raise ImproperlyConfigured(
        f"ONLOOKER_ARCHIVE_AFTER_DAYS must be at most 36500 (100 years), "
        f"not {ONLOOKER_ARCHIVE_AFTER_DAYS}"
    )

# Live sockets one person may hold open in one server process (tabs, wall screens): past
# it a page is told so (close code 4429) rather than costing the server a descriptor more.
ONLOOKER_LIVE_SOCKETS_PER_PERSON = env_int("ONLOOKER_LIVE_SOCKETS_PER_PERSON", 200)

# Password reset (with EMAIL_HOST): at most this many mails to one address in any hour (more
# are not sent, and the page says the same either way), and this many requests from one
# client address (more are answered 429). Counted in the database, across every process.
ONLOOKER_RESET_MAILS_PER_ADDRESS_PER_HOUR = env_int("ONLOOKER_RESET_MAILS_PER_ADDRESS_PER_HOUR", 3)
ONLOOKER_RESET_REQUESTS_PER_CLIENT_PER_HOUR = env_int(
    "ONLOOKER_RESET_REQUESTS_PER_CLIENT_PER_HOUR", 10
)

# Refused pushes are counted per agent and reason (tasks/pushes/refusals.py): a lone refusal at
# once, a flood of them once per this many seconds per process, never a write apiece.
ONLOOKER_REFUSAL_WRITE_SECONDS = env_int("ONLOOKER_REFUSAL_WRITE_SECONDS", 1, minimum=0)

# Behind a reverse proxy (docs/deployment): believe its X-Forwarded-Proto (is the request
# secure?) and the address it appends last to X-Forwarded-For (who is the client?). Off, both
# headers are whatever the client wrote, so neither is believed.
ONLOOKER_TRUSTED_PROXY = env_bool("ONLOOKER_TRUSTED_PROXY", default=False)

_public_host = urlsplit(ONLOOKER_PUBLIC_URL).hostname or "localhost"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", sorted({_public_host, "localhost", "127.0.0.1", "[::1]"}))
CSRF_TRUSTED_ORIGINS = [ONLOOKER_PUBLIC_URL]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "axes",
    "tasks",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "tasks.web.middleware.content_security_policy",
    "tasks.web.unavailable.while_database_away",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes requires: it turns a refused login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "dashboard.urls"
ASGI_APPLICATION = "dashboard.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def sqlite_database(config: dict) -> dict:
    """The settings every SQLite database runs with, the embedded default's or a
    `sqlite://` DATABASE_URL's; options given in the URL's query string win."""
    options = config.setdefault("OPTIONS", {})
    # WAL lets pages read while a push is being written; IMMEDIATE takes the write lock at
    # BEGIN so two writers queue (up to `timeout` seconds) instead of failing mid-transaction
    # with "database is locked".
    options.setdefault("init_command", "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")
    options.setdefault("transaction_mode", "IMMEDIATE")
    options.setdefault("timeout", 20)
    # One process, and its sync code runs on one thread under ASGI: keeping that connection
    # saves a reconnect and a WAL checkpoint (with fsyncs) per request.
    config["CONN_MAX_AGE"] = None
    config["CONN_HEALTH_CHECKS"] = True
    return config


def _database() -> dict:
    if not DATABASE_URL:
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        return sqlite_database(
            {"ENGINE": "django.db.backends.sqlite3", "NAME": DATA_DIR / "onlooker.sqlite3"}
        )
    try:
        config = dj_database_url.parse(DATABASE_URL)
    except ValueError as error:
        raise ImproperlyConfigured(f"DATABASE_URL is not a database URL: {error}") from None
    if config.get("ENGINE") not in (
        "django.db.backends.postgresql",
        "django.db.backends.sqlite3",
    ):
        raise ImproperlyConfigured("DATABASE_URL must be a postgres:// or sqlite:// URL")
    if config["ENGINE"] == "django.db.backends.sqlite3":
        return sqlite_database(config)
    # Persistent connections leak under ASGI (each request may run on another thread), so
    # PostgreSQL connections come from a pool: close() hands them back instead of hanging up.
    # The pool checks a connection before lending it (CONN_HEALTH_CHECKS: one empty query,
    # a round trip): after PostgreSQL restarts, every idle connection is dead, and the
    # request that got one answered 500.
    config["CONN_MAX_AGE"] = 0
    config["CONN_HEALTH_CHECKS"] = True
    options = config.setdefault("OPTIONS", {})
    # A request waits at most this long for a connection: with the database away, the first
    # ones fail after it and tasks/runtime/outage.py answers the rest at once. After a
    # restart the pool checks its dead idle connections one by one, pausing 1 s, then 2 s
    # between them: 5 s lets a request through two of them.
    options["pool"] = {"min_size": 2, "max_size": 20, "timeout": 5}
    # A host that stops answering (rather than refusing) must not hold a connection, or a
    # thread, for TCP's quarter of an hour: connecting gives up after 3 s, and a connection
    # whose sent data goes unacknowledged for 10 s, or whose idle peer misses three
    # keepalives, is dropped. The URL's own query options win.
    for name, value in {
        "connect_timeout": 3,
        "tcp_user_timeout": 10_000,  # ms
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 3,
        "keepalives_count": 3,
    }.items():
        options.setdefault(name, value)
    return config


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def redis_host(url: str) -> dict:
    """A channels_redis host. Its receive waits up to 5 s for a message on Redis (a
    blocking pop), and redis-py gives up reading after 5 s by default: on a quiet server the
    two met every few seconds, and a hint popped as the client gave up was lost. Reads wait
    longer than the pop; a Redis that stops answering is still noticed within 10 s."""
    return {"address": url, "socket_timeout": 10, "socket_connect_timeout": 3}


def _channel_layers() -> dict:
    if not REDIS_URL:
        return {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    if urlsplit(REDIS_URL).scheme not in ("redis", "rediss", "unix"):
        raise ImproperlyConfigured(f"REDIS_URL must be a redis:// URL, not {REDIS_URL!r}")
    return {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # The one group is the processes' listeners (tasks/live/fanout.py), which join it again
            # every 30 s: a process killed without leaving drops out of it within two
            # minutes, rather than getting a copy of every hint for a day (the default).
            # Memberships are stamped with the joining server's clock and expired by the
            # sending server's: the servers' clocks must agree within a minute and a half.
            "CONFIG": {"hosts": [redis_host(REDIS_URL)], "prefix": "onlooker", "group_expiry": 120},
        }
    }


CHANNEL_LAYERS = _channel_layers()

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Login throttling (django-axes): after 5 failed logins for one username, every login for it
# (the right password too, and the admin's) is refused for 15 minutes. By username only, so
# guessing from many addresses does not help; the price is that anyone can lock a username
# out for 15 minutes, which an administrator can lift (`manage.py axes_reset_username`).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = ["username"]
AXES_RESET_ON_SUCCESS = True
# Every refused attempt restarts the 15 minutes, so the lockout page's "try again in 15
# minutes" is always true, and guessing on during a lockout only prolongs it.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = True
# 429: the attempt is refused for its rate, not for who is asking (403); clients and proxies
# know 429 as "slow down".
AXES_HTTP_RESPONSE_CODE = 429
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# No row per successful login: nothing here reads them, and they would grow forever.
AXES_DISABLE_ACCESS_LOG = True
# axes warns when the lockout is not by address. Deliberate: behind a proxy every client has
# the proxy's address, so an address lockout would lock everyone out; rotating user agents or
# cookies cannot get round a lockout by username.
SILENCED_SYSTEM_CHECKS = ["axes.W006"]

# Email, for password reset and email notification channels: without EMAIL_HOST the reset
# pages are not routed (dashboard/urls.py), so no anonymous request makes Onlooker try to
# send mail, and no email channel can be made. EMAIL_URL sets them all in one:
# smtp://user:password@host:port, smtp+tls://… (STARTTLS) or smtps://… (TLS).
EMAIL_HOST = os.environ.get("EMAIL_HOST", "").strip()
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "").strip()
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", default=False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", default=False)
_email_url = os.environ.get("EMAIL_URL", "").strip()
if _email_url:
    _mail = urlsplit(_email_url)
    _mail_ports = {"smtp": 25, "smtp+tls": 587, "smtps": 465}
    if _mail.scheme not in _mail_ports or not _mail.hostname:
        raise ImproperlyConfigured(
            "EMAIL_URL must look like smtp://user:password@host:port (or smtp+tls://, smtps://)"
        )
    try:
        EMAIL_PORT = _mail.port or _mail_ports[_mail.scheme]
    except ValueError:
        raise ImproperlyConfigured("EMAIL_URL has a port that is not a number") from None
    EMAIL_HOST = _mail.hostname
    EMAIL_HOST_USER = unquote(_mail.username or "")
    EMAIL_HOST_PASSWORD = unquote(_mail.password or "")
    EMAIL_USE_TLS = _mail.scheme == "smtp+tls"
    EMAIL_USE_SSL = _mail.scheme == "smtps"
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "").strip() or "webmaster@localhost"
# A mail server that does not answer must not hold a request (and its worker) forever.
EMAIL_TIMEOUT = 10

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"

_https = ONLOOKER_PUBLIC_URL.startswith("https://")
SESSION_COOKIE_SECURE = _https
CSRF_COOKIE_SECURE = _https
if ONLOOKER_TRUSTED_PROXY:
    # The proxy sets it on every request (docs/deployment.md); a client's own is replaced.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
if _https:
    # Browsers go straight to https for a year once they have seen it on a secure request
    # (SecurityMiddleware sends it only on those).
    SECURE_HSTS_SECONDS = 365 * 24 * 3600
    # Only a trusted proxy says whether a request came over https: without one every
    # request looks plain, and a redirect would loop.
    SECURE_SSL_REDIRECT = ONLOOKER_TRUSTED_PROXY
    # A load balancer asks for its health over plain HTTP, and must get the answer.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"one_line": {"()": "tasks.web.log_filters.OneLineUnlessOurFault"}},
    # Daphne's format. One handler, on the root logger: Daphne gives the root one of its own
    # (replaced here), and a handler per logger besides printed every line twice.
    "formatters": {"plain": {"format": "%(asctime)-15s %(levelname)-8s %(message)s"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["one_line"]}
    },
    "root": {"handlers": ["console"]},
    "loggers": {
        "tasks": {"level": "INFO"},
        # Django prints server errors to the console only in DEBUG: with DEBUG off, a 500's
        # traceback would otherwise go nowhere (ADMINS is empty).
        "django": {"level": "INFO"},
        # httpx logs every request's whole URL at INFO: a Slack webhook's or response URL's
        # path is a credential, and must not reach the log whatever the root level is.
        "httpx": {"level": "WARNING"},
    },
}

# Pushes have their own limit (checked in the receiver); Django's must not refuse them first.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(2_621_440, ONLOOKER_MAX_PUSH_BYTES)
