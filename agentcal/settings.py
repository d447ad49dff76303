"""AgentCal settings: everything comes from the environment (see README, "Configuration")."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from urllib.parse import urlparse

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from agentcal import embedded
from agentcal.env import email_url_settings, env_bool, env_int, env_list, env_str, env_url
from agentcal.log_config import logging_config

BASE_DIR = Path(__file__).resolve().parent.parent
DEBUG = env_bool("DEBUG", False)

# --- Servers -------------------------------------------------------------------------------------
# Loading the settings starts no server and writes no file. In a checkout `python3 dev.py run|test|manage`
# start the embedded PostgreSQL and Redis and a generated key (agentcal/embedded.py) and set these for
# what they run. Missing, they stop the start-up whatever DEBUG says: a box with a forgotten variable must
# not quietly run a private database, and no way of running a checkout goes without them.
DATABASE_URL = env_url("DATABASE_URL", schemes=("postgres", "postgresql")) or ""
REDIS_URL = env_url("REDIS_URL", schemes=("redis", "rediss", "unix")) or ""
SECRET_KEY = env_str("SECRET_KEY") or ""
_required = {"DATABASE_URL": DATABASE_URL, "REDIS_URL": REDIS_URL, "SECRET_KEY": SECRET_KEY}
_missing = [name for name, value in _required.items() if not value]
if _missing:
    raise ImproperlyConfigured(
        f"Missing settings: {', '.join(_missing)} (set each, or NAME_FILE naming a file that holds it;"
        ' README, "Configuration"). In a checkout, `python3 dev.py run`, `test` and `manage` start the'
        " embedded PostgreSQL and Redis and set all three."
    )
# Set by agentcal/embedded.py when it started the database; only the benchmark's report reads it.
USING_EMBEDDED_POSTGRES = env_bool("AGENTCAL_EMBEDDED_POSTGRES", False)
# Where files this installation keeps go by default (stored attachments, beat's schedule): only named
# here; what writes there creates it when it first does.
DATA_DIR = embedded.data_path()

_database = dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 60, minimum=0))
# A transaction-mode pooler (PgBouncer `pool_mode = transaction`) between the app and PostgreSQL lends a
# server connection for one transaction at a time, so nothing may rely on a session (docs/scaling.md).
# The code keeps to that always (tests/test_architecture.py); this says what else must change with it.
DB_TRANSACTION_POOLER = env_bool("DB_TRANSACTION_POOLER", False)
# Statements the engine sends through agentcal.db are prepared on the server on their 5th execution
# (psycopg's threshold), so its one-statement write is planned once per connection rather than on every
# request: planning was about half of PostgreSQL's CPU per write (docs/performance-notes.md). A prepared
# statement lives on one server connection, which a transaction pooler lends to someone else after each
# transaction, so behind one they are off unless the pooler tracks them (PgBouncer >= 1.21 with
# `max_prepared_statements` set): then DB_PREPARED_STATEMENTS=1 turns them back on.
DB_PREPARED_STATEMENTS = env_bool("DB_PREPARED_STATEMENTS", not DB_TRANSACTION_POOLER)
PREPARE_THRESHOLD = 5
# A persistent connection idle longer than this is checked with a real `SELECT 1` before a request
# uses it; a busier one only by a look at its socket (agentcal/postgres/base.py).
DB_HEALTH_CHECK_IDLE_SECONDS = env_int("DB_HEALTH_CHECK_IDLE_SECONDS", 5, minimum=0)
DATABASES = {
    "default": {
        **_database,
        # Django's own queries bind on the client and are never prepared; see DB_PREPARED_STATEMENTS.
        "OPTIONS": {
            **_database.get("OPTIONS", {}),
            "prepare_threshold": PREPARE_THRESHOLD if DB_PREPARED_STATEMENTS else None,
        },
        # `.iterator()` outside a transaction uses a cursor WITH HOLD, which lives on after its transaction:
        # through a transaction pooler, read everything client-side instead.
        "DISABLE_SERVER_SIDE_CURSORS": DB_TRANSACTION_POOLER,
        # Django's backend, with a health check that needs no round trip (agentcal/postgres/base.py).
        "ENGINE": "agentcal.postgres",
        "CONN_HEALTH_CHECKS": True,
        "TEST": {"NAME": env_str("TEST_DATABASE_NAME", "test_agentcal")},
    }
}


ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])

# --- Application ---------------------------------------------------------------------------------
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "django_htmx",
    "template_partials",
    "rest_framework",
    "drf_spectacular",
    "agentcal.api",
    "workspaces",
    "bookings",
    "audit",
    "webhooks",
    "accounts",
    "approvals",
    "sync",
    "inboxes",
    "guardrails",
    "dashboard",
]

MIDDLEWARE = [
    "agentcal.middleware.RequestIdMiddleware",
    "agentcal.middleware.RefusedKeysMiddleware",
    "agentcal.middleware.ChunkedBodyMiddleware",
    "agentcal.middleware.UnstorableQueryMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "agentcal.security_headers.SecurityHeadersMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "agentcal.middleware.CanonicalHostMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "accounts.time_zones.ViewerZoneMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
# What agents' requests (/v1/) and providers' callbacks (/hooks/) go through (agentcal/wsgi.py): the
# request id, the early refusals, and the headers every answer carries; nothing that exists for people.
MACHINE_MIDDLEWARE = [
    "agentcal.middleware.RequestIdMiddleware",
    "agentcal.middleware.RefusedKeysMiddleware",
    "agentcal.middleware.ChunkedBodyMiddleware",
    "agentcal.middleware.UnstorableQueryMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "agentcal.urls"
WSGI_APPLICATION = "agentcal.wsgi.application"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

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
                "dashboard.context_processors.workspace_shell",
            ]
        },
    }
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_TZ = True
STATIC_URL = "static/"
# WhiteNoise serves the dashboard's few static files from the app's own folders (no collectstatic
# step, no separate web server), with far-future caching for the versioned vendor files.
WHITENOISE_USE_FINDERS = True
# Only for deployments that run collectstatic (e.g. to put the files behind a CDN).
STATIC_ROOT = env_str("STATIC_ROOT") or None
# Files the service stores (attachments of agents' mail) go through Django's storage API: on disk here by
# default, never served directly (only by permission-checked views); STORAGES may name another backend.
MEDIA_ROOT = env_str("MEDIA_ROOT") or str(DATA_DIR / "media")

# --- Dashboard sign-in (passkeys, magic links) ----------------------------------------------------
# The public base URL people reach the dashboard at (links in emails; the WebAuthn origin).
DASHBOARD_BASE_URL = (env_str("DASHBOARD_BASE_URL", "http://localhost:8000") or "").rstrip("/")
# The WebAuthn relying-party id: the dashboard's host name (never an IP address; browsers refuse it).
WEBAUTHN_RP_ID = str(env_str("WEBAUTHN_RP_ID") or urlparse(DASHBOARD_BASE_URL).hostname or "localhost")
WEBAUTHN_RP_NAME = str(env_str("WEBAUTHN_RP_NAME") or "AgentCal")
MAGIC_LINK_TTL_SECONDS = env_int("MAGIC_LINK_TTL_SECONDS", 15 * 60, minimum=60)
PASSKEY_SIGN_INS_PER_MINUTE_PER_IP = env_int("PASSKEY_SIGN_INS_PER_MINUTE_PER_IP", 30, minimum=1)
LOGIN_URL = "/auth/sign-in"
# The SMTP relay for all outgoing mail (owners' emails, agents' inboxes), as one URL —
# `smtp://user:password@host:587?tls=1` (STARTTLS) or `smtps://…@host:465` (TLS from the start) — or as the
# separate EMAIL_* variables. Without either, mail is printed to the console (a local install).
EMAIL_URL = env_str("EMAIL_URL", "") or ""
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = False
# Seconds any one relay operation may take: a relay that hangs fails the attempt, which is then retried.
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 30, minimum=1)
if EMAIL_URL:
    _relay = email_url_settings(EMAIL_URL)
    EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    EMAIL_HOST, EMAIL_PORT = _relay.host, _relay.port
    EMAIL_HOST_USER, EMAIL_HOST_PASSWORD = _relay.user, _relay.password
    EMAIL_USE_TLS, EMAIL_USE_SSL = _relay.starttls, _relay.ssl
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "AgentCal <agentcal@localhost>")
SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", 14 * 86400, minimum=300)
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_FAILURE_VIEW = "dashboard.errors.csrf_failure"
CSRF_COOKIE_HTTPONLY = False  # the dashboard's JavaScript reads it for htmx and passkey requests

# --- Security ------------------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
# Secure cookies whenever the dashboard is served over https (browsers also accept them on http://localhost).
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", DASHBOARD_BASE_URL.startswith("https:"))
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
CSRF_TRUSTED_ORIGINS = [DASHBOARD_BASE_URL]
# HSTS is sent only on requests Django sees as https (request.is_secure()), so plain-http development
# never pins a browser to https. One year: the least the browsers' HSTS preload list accepts.
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 365 * 86400, minimum=0)
# Off by default: it would force https on every other service under the same domain too.
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
# Behind a TLS-terminating proxy every request arrives as http; trust the proxy's X-Forwarded-Proto
# only when told to, because without a proxy that overwrites it any client could claim https.
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("TRUSTED_PROXY_SSL_HEADER", False) else None
)
# Every HTML page (agentcal/security_headers.py). Scripts and styles only from our own static files, so
# injected markup can neither run nor restyle the page: the JavaScript lives in dashboard/static, htmx
# is configured not to inject a <style>, and templates carry no style="" attributes (the calendar
# timeline's computed geometry travels in data-* attributes that app.js applies through the CSSOM).
CONTENT_SECURITY_POLICY = env_str("CONTENT_SECURITY_POLICY") or "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)

# --- API -----------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["workspaces.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["workspaces.authentication.HasRequiredScope"],
    "DEFAULT_PARSER_CLASSES": ["agentcal.api.parsers.BoundedJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["agentcal.api.renderers.JSONRenderer"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "agentcal.api.negotiation.JSONNegotiation",
    "EXCEPTION_HANDLER": "agentcal.api.problems.problem_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "agentcal.api.schema.AgentAPISchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "AgentCal agent API",
    "DESCRIPTION": "Race-safe holds and commits on shared calendars for AI agents.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # 3.1: JSON Schema 2020-12 (null as a type) and the `webhooks` section, where each event is published.
    "OAS_VERSION": "3.1.0",
    "WEBHOOKS": "agentcal.api.event_catalog.WEBHOOKS",
    # An enum's values are its documentation; "* `held` - Held" lines would only repeat them.
    "ENUM_GENERATE_CHOICE_DESCRIPTION": False,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "agentcal.api.schema.null_is_any_json",
        "agentcal.api.event_catalog.webhook_operations",
    ],
    "SCHEMA_PATH_PREFIX": r"/v1",
    # Paths are absolute (`/v1/...`) on whichever host serves the schema.
    "SERVERS": [{"url": "/", "description": "This server"}],
    # One name for a choice set used by several schemas (a generator would make two types of it).
    "ENUM_NAME_OVERRIDES": {
        "PauseScopeEnum": ["agent", "workspace"],
        "ReservationStatusEnum": "bookings.models.ReservationStatus",
        "BookingStatusEnum": "bookings.models.BOOKING_STATUSES",
        "BookingListStatusEnum": ["committed", "bumped", "cancelled", "all"],
        "BusyStatusEnum": ["held", "committed", "busy"],
        "ApprovalStatusEnum": "approvals.models.ApprovalStatus",
        "ConnectionStatusEnum": "sync.models.ConnectionStatus",
        "MessageStatusEnum": "inboxes.models.MessageStatus",
        "QueuedStatusEnum": ["queued", "awaiting_approval"],
        "DeliveryStatusEnum": "webhooks.models.DeliveryStatus",
        "EndpointStatusEnum": ["active", "disabled"],
        "UpstreamProviderEnum": "bookings.models.UpstreamSource",
        "ConnectableProviderEnum": ["caldav"],
    },
    "LICENSE": {"name": "Apache-2.0", "url": "https://www.apache.org/licenses/LICENSE-2.0"},
}

# Request bodies larger than this are refused with 413 before they are parsed.
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 256 * 1024, minimum=1024)

# argon2id parameters for API keys (argon2-cffi defaults: RFC 9106 low-memory profile).
# Tests lower them; a verified key is then cached in-process by an HMAC of the key (never the key).
ARGON2_TIME_COST = env_int("ARGON2_TIME_COST", 3, minimum=1)
ARGON2_MEMORY_COST_KIB = env_int("ARGON2_MEMORY_COST_KIB", 65536, minimum=8)
ARGON2_PARALLELISM = env_int("ARGON2_PARALLELISM", 4, minimum=1)
API_KEY_CACHE_SECONDS = env_int("API_KEY_CACHE_SECONDS", 300, minimum=0)
# A key's prefix is not secret (the dashboard and audit rows show it), so a wrong secret under a real
# prefix must not buy an argon2 verification (64 MiB, a few hundred ms) each time: a secret already
# refused is refused again from memory for this long, and each peer address may have only this many
# argon2 verifications fail per minute per key prefix (burst the same), and this many across all
# prefixes; past either the answer is 429 before argon2 runs. A real key's first verification in a
# process never counts against them, only failures do. Per process, like every budget in memory.
API_KEY_REFUSED_SECRET_CACHE_SECONDS = env_int("API_KEY_REFUSED_SECRET_CACHE_SECONDS", 600, minimum=0)
API_KEY_WRONG_SECRETS_PER_MINUTE_PER_KEY_AND_IP = env_int(
    "API_KEY_WRONG_SECRETS_PER_MINUTE_PER_KEY_AND_IP", 2, minimum=1
)
API_KEY_WRONG_SECRETS_PER_MINUTE_PER_IP = env_int("API_KEY_WRONG_SECRETS_PER_MINUTE_PER_IP", 10, minimum=1)
# Requests refused before a key was proved (no key, an unknown or wrong one, the budget above) are
# audited up to this many a minute per peer address; the rest are counted in
# agentcal_auth_unaudited_refusals_total, so nobody without a key can fill the audit trail.
API_AUDITED_AUTH_REFUSALS_PER_MINUTE_PER_IP = env_int(
    "API_AUDITED_AUTH_REFUSALS_PER_MINUTE_PER_IP", 60, minimum=1
)

# Each agent's guardrails, unless its workspace or the agent itself says otherwise (README, "Limits"):
# a request rate (token bucket: sustained per second, burst), live holds at once, bookings per UTC day,
# searches per minute. The request rate lives in Redis (one round trip, failing open); the budgets are
# checked by the engine in the write's own transaction.
AGENT_LIMIT_DEFAULTS = {
    "requests_per_second": env_int("AGENT_REQUESTS_PER_SECOND", 20, minimum=1),
    "request_burst": env_int("AGENT_REQUEST_BURST", 60, minimum=1),
    "live_holds": env_int("AGENT_LIVE_HOLDS", 100, minimum=0),
    "bookings_per_day": env_int("AGENT_BOOKINGS_PER_DAY", 2000, minimum=0),
    "searches_per_minute": env_int("AGENT_SEARCHES_PER_MINUTE", 60, minimum=1),
}
# Off: no request-rate check at all (budgets and the pause still hold). For measuring its cost.
AGENT_RATE_LIMITS_ENABLED = env_bool("AGENT_RATE_LIMITS_ENABLED", True)
# How long the request-rate check waits on Redis before it fails open (agentcal/shared_buckets.py).
AGENT_RATE_CHECK_TIMEOUT_MS = env_int("AGENT_RATE_CHECK_TIMEOUT_MS", 100, minimum=10)
# One agent's requests in progress at once in one web process (threaded servers): a flood from one key
# is refused fast and leaves the process's other threads to the other agents.
AGENT_MAX_IN_FLIGHT_PER_PROCESS = env_int("AGENT_MAX_IN_FLIGHT_PER_PROCESS", 2, minimum=1)

# Idempotency records are kept (and honoured) for this long.
IDEMPOTENCY_TTL_SECONDS = env_int("IDEMPOTENCY_TTL_SECONDS", 24 * 3600, minimum=60)
# A claim left "in progress" by a crashed worker may be taken over after this long.
IDEMPOTENCY_STALE_CLAIM_SECONDS = env_int("IDEMPOTENCY_STALE_CLAIM_SECONDS", 120, minimum=5)

# --- Webhooks ------------------------------------------------------------------------------------
# Deliveries to private, loopback, link-local or otherwise internal addresses are refused unless this
# is set (local development and the test suite): a webhook URL must not become a way into the network.
WEBHOOK_ALLOW_PRIVATE_TARGETS = env_bool("WEBHOOK_ALLOW_PRIVATE_TARGETS", False)
WEBHOOK_TIMEOUT_SECONDS = env_int("WEBHOOK_TIMEOUT_SECONDS", 15, minimum=1)
# Seconds to wait before each retry: the Standard Webhooks schedule (immediately, 5 s, 5 min, 30 min,
# 2 h, 5 h, 10 h, 14 h, 20 h, 24 h). Tests shorten it.
WEBHOOK_RETRY_SCHEDULE = [
    int(x)
    for x in env_list(
        "WEBHOOK_RETRY_SCHEDULE",
        ["0", "5", "300", "1800", "7200", "18000", "36000", "50400", "72000", "86400"],
    )
]
# Dispatched events (and their delivery history) are kept this long, then purged daily.
OUTBOX_RETENTION_DAYS = env_int("OUTBOX_RETENTION_DAYS", 30, minimum=1)
# An endpoint whose deliveries have failed for this long without a success is disabled.
WEBHOOK_DISABLE_AFTER_SECONDS = env_int("WEBHOOK_DISABLE_AFTER_SECONDS", 5 * 86400, minimum=60)

# --- Metrics -------------------------------------------------------------------------------------
# GET /metrics: with a token, scrapers send `Authorization: Bearer <token>`; without one, only these
# client addresses may scrape (REMOTE_ADDR: behind a reverse proxy, prefer the token).
METRICS_TOKEN = env_str("METRICS_TOKEN") or ""
METRICS_ALLOWED_IPS = env_list("METRICS_ALLOWED_IPS", ["127.0.0.1", "::1"])

# --- Celery --------------------------------------------------------------------------------------
CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# --- Logging -------------------------------------------------------------------------------------
LOGGING = logging_config(
    level=env_str("LOG_LEVEL", "INFO"), request_level=env_str("REQUEST_LOG_LEVEL", "ERROR")
)

# A publish's connect timeout per attempt (redis-py retries: a refused connection takes ~2 s in all).
# Requests never wait on it: agentcal/broker.py publishes from a background thread.
CELERY_BROKER_CONNECTION_TIMEOUT = 1
HOLD_SWEEP_SECONDS = env_int("HOLD_SWEEP_SECONDS", 5, minimum=1)
WEBHOOK_CATCH_UP_SECONDS = env_int("WEBHOOK_CATCH_UP_SECONDS", 10, minimum=1)
CELERY_BEAT_SCHEDULE = {
    "expire-lapsed-holds": {"task": "bookings.expire_lapsed_holds", "schedule": float(HOLD_SWEEP_SECONDS)},
    "purge-magic-links": {"task": "accounts.purge_magic_links", "schedule": 24 * 3600.0},
    "purge-expired-sessions": {"task": "accounts.purge_expired_sessions", "schedule": 6 * 3600.0},
    "purge-old-outbox-events": {"task": "webhooks.purge_old_events", "schedule": 24 * 3600.0},
    "webhooks-catch-up": {"task": "webhooks.catch_up", "schedule": float(WEBHOOK_CATCH_UP_SECONDS)},
    "purge-idempotency-records": {"task": "agentcal.purge_idempotency_records", "schedule": 3600.0},
    "purge-expired-audit-records": {"task": "audit.purge_expired", "schedule": 6 * 3600.0},
    "expire-due-approvals": {"task": "approvals.expire_due", "schedule": 30.0},
}
# --- Upstream calendar sync ------------------------------------------------------------------------
# Fernet keys for every secret the server keeps sealed (agentcal.sealing: upstream credentials, webhook
# signing secrets), comma-separated, newest first: the first encrypts, all decrypt (rotation: prepend a
# new key, run `python manage.py sync --rotate-credentials`, then drop the old one). Unset: a key derived
# from SECRET_KEY, so a fresh clone works; production sets its own.
SYNC_CREDENTIAL_KEYS = env_list("SYNC_CREDENTIAL_KEYS", [])
# How far ahead recurring events are expanded into busy blocks; re-expanded daily as time moves on.
SYNC_HORIZON_DAYS = env_int("SYNC_HORIZON_DAYS", 180, minimum=7)
# What expanding recurring events may cost (sync/ical.py: a step is one instance of a rule walked, ~3 µs;
# an occurrence built in the window costs 50). One event: an hourly series over the 180-day horizon still
# fits, a minutely one does not. One sync pass: about a thousand weekly series started years ago, a few
# seconds of work at most. A series over either blocks its whole span instead, and the connection says so.
SYNC_EXPANSION_STEPS_PER_EVENT = env_int("SYNC_EXPANSION_STEPS_PER_EVENT", 250_000, minimum=1_000)
SYNC_EXPANSION_STEPS_PER_SYNC = env_int("SYNC_EXPANSION_STEPS_PER_SYNC", 2_500_000, minimum=1_000)
# CalDAV has no push: poll each connection this often (plus up to 10 % jitter).
# A request with max_upstream_staleness_seconds waits at most this long for its links to sync (its own
# run, or another's it shares), then answers 503 upstream_stale with this Retry-After.
SYNC_FRESHNESS_SECONDS = env_int("SYNC_FRESHNESS_SECONDS", 5, minimum=1)
SYNC_FRESHNESS_RETRY_AFTER_SECONDS = env_int("SYNC_FRESHNESS_RETRY_AFTER_SECONDS", 30, minimum=1)
SYNC_CALDAV_INTERVAL_SECONDS = env_int("SYNC_CALDAV_INTERVAL_SECONDS", 60, minimum=5)
# OAuth apps (register one with each provider; README, "Upstream calendars"). Base URLs are settings so
# tests (the providers' fakes) and deployments behind an egress proxy can point them elsewhere.
SYNC_GOOGLE_CLIENT_ID = env_str("SYNC_GOOGLE_CLIENT_ID", "") or ""
SYNC_GOOGLE_CLIENT_SECRET = env_str("SYNC_GOOGLE_CLIENT_SECRET", "") or ""
SYNC_GOOGLE_AUTH_URL = env_str("SYNC_GOOGLE_AUTH_URL", "https://accounts.google.com/o/oauth2/v2/auth") or ""
SYNC_GOOGLE_TOKEN_URL = env_str("SYNC_GOOGLE_TOKEN_URL", "https://oauth2.googleapis.com/token") or ""
SYNC_GOOGLE_API_URL = env_str("SYNC_GOOGLE_API_URL", "https://www.googleapis.com/calendar/v3/") or ""
SYNC_MICROSOFT_CLIENT_ID = env_str("SYNC_MICROSOFT_CLIENT_ID", "") or ""
SYNC_MICROSOFT_CLIENT_SECRET = env_str("SYNC_MICROSOFT_CLIENT_SECRET", "") or ""
SYNC_MICROSOFT_TENANT = env_str("SYNC_MICROSOFT_TENANT", "common") or "common"
SYNC_MICROSOFT_AUTHORITY_URL = (
    env_str("SYNC_MICROSOFT_AUTHORITY_URL", "https://login.microsoftonline.com") or ""
)
SYNC_MICROSOFT_API_URL = env_str("SYNC_MICROSOFT_API_URL", "https://graph.microsoft.com/v1.0") or ""
# Where providers deliver push notifications (must be reachable from the internet); defaults to the
# dashboard's base URL. Without push, connections are polled.
SYNC_PUSH_BASE_URL = (env_str("SYNC_PUSH_BASE_URL") or DASHBOARD_BASE_URL).rstrip("/")
SYNC_PUSH_ENABLED = env_bool("SYNC_PUSH_ENABLED", True)
# With push working, polling stays on as a fallback at this slower interval.
SYNC_PUSH_FALLBACK_INTERVAL_SECONDS = env_int("SYNC_PUSH_FALLBACK_INTERVAL_SECONDS", 900, minimum=5)
# Push requests (POST /hooks/google, /hooks/microsoft[/lifecycle]) one peer address may make per minute
# (per web process) before getting 429, checked before the request is read. Google and Graph deliver for
# every linked calendar from a few addresses each, one request per change: wide enough for a busy
# installation, while a flood from one address costs its bucket and nothing else.
SYNC_PUSH_MAX_REQUESTS_PER_MINUTE_PER_IP = env_int("SYNC_PUSH_MAX_REQUESTS_PER_MINUTE_PER_IP", 600, minimum=1)
# Push refusals (unknown channel or subscription, wrong secret: anyone can send them) audited per peer
# address and minute; the rest are only counted (agentcal_push_unaudited_refusals_total). A provider that
# lost track of a channel sends a few; a prober, far more than an audit log should keep for 90 days.
SYNC_PUSH_AUDITED_REFUSALS_PER_MINUTE_PER_IP = env_int(
    "SYNC_PUSH_AUDITED_REFUSALS_PER_MINUTE_PER_IP", 60, minimum=1
)
# Notifications one Graph delivery may hold; more are refused whole (413) before any query. Graph batches
# the notifications for one URL but publishes no maximum; its batches are of a few to tens, and a
# thousand subscription ids are still one fast look-up.
SYNC_PUSH_MAX_GRAPH_NOTIFICATIONS = env_int("SYNC_PUSH_MAX_GRAPH_NOTIFICATIONS", 1000, minimum=1)
SYNC_OAUTH_INTERVAL_SECONDS = env_int("SYNC_OAUTH_INTERVAL_SECONDS", 120, minimum=5)
# A sync run holds its connection's lease at most this long (a killed worker's lease lapses after it).
SYNC_LEASE_SECONDS = env_int("SYNC_LEASE_SECONDS", 300, minimum=1)
# How often beat looks for connections due a sync.
SYNC_SCHEDULER_SECONDS = env_int("SYNC_SCHEDULER_SECONDS", 5, minimum=1)
# Raw upstream payloads are kept this long once superseded (the current data of each event is kept).
SYNC_LOG_RETENTION_DAYS = env_int("SYNC_LOG_RETENTION_DAYS", 30, minimum=1)
# Upstream servers on private addresses (a CalDAV server on the LAN, tests against a local one) are
# refused unless allowed, as for webhooks (webhooks/url_guard.py).
SYNC_ALLOW_PRIVATE_TARGETS = env_bool("SYNC_ALLOW_PRIVATE_TARGETS", False)
CELERY_BEAT_SCHEDULE.update(
    {
        "sync-due-connections": {"task": "sync.sync_due", "schedule": float(SYNC_SCHEDULER_SECONDS)},
        "sync-purge-log": {"task": "sync.purge_log", "schedule": 24 * 3600.0},
    }
)
# --- Inboxes --------------------------------------------------------------------------------------
# An agent's address is `<agent slug>@<workspace inbound domain>`; a workspace without a domain of its own
# (mail setup page) has `<workspace slug>.<INBOUND_DOMAIN_SUFFIX>`.
INBOUND_DOMAIN_SUFFIX = (env_str("INBOUND_DOMAIN_SUFFIX", "agentcal.localhost") or "").lower().strip(".")
INBOUND_SMTP_HOST = env_str("INBOUND_SMTP_HOST", "127.0.0.1") or "127.0.0.1"
# Authentication-Results headers (SPF/DKIM/DMARC verdicts) count only when added by these hosts (their
# authserv-id, RFC 8601), i.e. the MX or relay in front of AgentCal: anyone can write the header into a
# message, so with none configured every verdict reads "none" (not checked), never a sender's claim.
INBOUND_TRUSTED_AUTHSERV_IDS = [name.lower() for name in env_list("INBOUND_TRUSTED_AUTHSERV_IDS", [])]
INBOUND_SMTP_PORT = env_int("INBOUND_SMTP_PORT", 2525, minimum=1)
# Bigger messages are refused (552) at the SMTP dialogue, never truncated.
INBOUND_MAX_MESSAGE_BYTES = env_int("INBOUND_MAX_MESSAGE_BYTES", 10 * 1024 * 1024, minimum=1024)
# Attachments are stored (MEDIA_ROOT / STORAGES) up to this size; bigger ones are listed with `skipped: true`
# (the raw message still holds them).
INBOUND_MAX_ATTACHMENT_BYTES = env_int("INBOUND_MAX_ATTACHMENT_BYTES", 5 * 1024 * 1024, minimum=0)
# A message's MIME structure is read this far (inboxes.parsing.ParseLimits); the rest stays in the raw message
# and the agent is told. Within the message size limit they bound a parse to well under a second, where
# thousands of tiny parts cost seconds and a few thousand levels of nesting exhaust Python's recursion.
# Everyday mail has under twenty parts nested three to five deep (mixed > alternative > related, a
# forwarded message or two more); a large digest still fits in 500 parts.
INBOUND_MAX_MIME_PARTS = env_int("INBOUND_MAX_MIME_PARTS", 500, minimum=2)
INBOUND_MAX_MIME_DEPTH = env_int("INBOUND_MAX_MIME_DEPTH", 20, minimum=2)
# Attachments stored (a file and a row each) per message; more are counted in the message's notes.
INBOUND_MAX_ATTACHMENTS_PER_MESSAGE = env_int("INBOUND_MAX_ATTACHMENTS_PER_MESSAGE", 50, minimum=0)
# Messages one peer address may start per minute (per listener process) before getting 421.
INBOUND_MAX_MESSAGES_PER_MINUTE_PER_IP = env_int("INBOUND_MAX_MESSAGES_PER_MINUTE_PER_IP", 120, minimum=1)
# SMTP sessions the listener (per process) holds at once, and from one peer address; a session past either
# is answered 421 at the greeting and closed. A session costs at most about half a MiB of memory (DATA past
# 256 KiB is spooled to a temporary file), so 100 (Postfix's default process limit) bound it near 50 MiB.
# 20 per address is Postfix's default concurrency towards one destination: an MTA relaying to us never
# meets it, and no single peer takes more than a fifth of the sessions.
INBOUND_SMTP_MAX_SESSIONS = env_int("INBOUND_SMTP_MAX_SESSIONS", 100, minimum=1)
INBOUND_SMTP_MAX_SESSIONS_PER_IP = env_int("INBOUND_SMTP_MAX_SESSIONS_PER_IP", 20, minimum=1)
# A session with no command and no line of DATA for this long is closed (421): RFC 5321 §4.5.3.2.7's five
# minutes. A session is closed after INBOUND_SMTP_MAX_SESSION_SECONDS whatever it does, so a peer trickling
# a line just inside the idle timeout cannot hold its slot forever. Ten minutes let a full-size message
# (INBOUND_MAX_MESSAGE_BYTES) arrive at ~140 kbit/s and are twice as long as Postfix reuses a connection
# (smtp_connection_reuse_time_limit); a message cut off was not accepted, so its sender tries again.
INBOUND_SMTP_IDLE_TIMEOUT_SECONDS = env_int("INBOUND_SMTP_IDLE_TIMEOUT_SECONDS", 300, minimum=1)
INBOUND_SMTP_MAX_SESSION_SECONDS = env_int("INBOUND_SMTP_MAX_SESSION_SECONDS", 600, minimum=1)
# The inbound-mail webhook (POST /hooks/inbound-mail/<workspace id>, inboxes/inbound_webhook.py): a
# signature whose webhook-timestamp is further than this from our clock is refused, and a webhook-id is
# deduplicated for at least this long (Standard Webhooks' default tolerance).
INBOUND_WEBHOOK_TOLERANCE_SECONDS = env_int("INBOUND_WEBHOOK_TOLERANCE_SECONDS", 300, minimum=10)
# Messages one workspace's webhook may deliver per minute (per web process) before getting 429.
INBOUND_WEBHOOK_MAX_MESSAGES_PER_MINUTE = env_int("INBOUND_WEBHOOK_MAX_MESSAGES_PER_MINUTE", 600, minimum=1)
# Requests one peer address may make to one workspace's webhook per minute (per web process), checked
# before the signature: over it the answer is 429 and no audit row is written.
INBOUND_WEBHOOK_MAX_REQUESTS_PER_MINUTE_PER_IP = env_int(
    "INBOUND_WEBHOOK_MAX_REQUESTS_PER_MINUTE_PER_IP", 600, minimum=1
)
# Requests one peer address may have refused for their signature per minute, whichever workspace id they
# name (a made-up one each time included); past it every request from that address gets 429 unread until
# the budget refills. A provider that signs correctly never spends it, however many workspaces it serves.
INBOUND_WEBHOOK_MAX_REFUSALS_PER_MINUTE_PER_IP = env_int(
    "INBOUND_WEBHOOK_MAX_REFUSALS_PER_MINUTE_PER_IP", 120, minimum=1
)
# Requests refused before their signature was verified that are audited, per peer address and minute
# (whichever workspace id they name); the rest are only counted (agentcal_inbound_webhook_unaudited_*).
INBOUND_WEBHOOK_AUDITED_REFUSALS_PER_MINUTE_PER_IP = env_int(
    "INBOUND_WEBHOOK_AUDITED_REFUSALS_PER_MINUTE_PER_IP", 60, minimum=1
)
# A workspace's own inbound domain is used once a TXT record `_agentcal.<domain>` proves it
# (inboxes/mail_settings.py). Looked up through the system's resolver, or through this server ("ip" or
# "ip:port", "[v6]:port": split-horizon DNS, tests); an answer slower than the timeout is a failure.
INBOUND_DOMAIN_DNS_SERVER = (env_str("INBOUND_DOMAIN_DNS_SERVER", "") or "").strip()
if INBOUND_DOMAIN_DNS_SERVER:
    try:
        _dns_server = urlparse("//" + INBOUND_DOMAIN_DNS_SERVER)
        ipaddress.ip_address(_dns_server.hostname or "")
        _dns_server.port  # noqa: B018 (raises ValueError when not a port)
    except ValueError as exc:
        raise ImproperlyConfigured(
            f"INBOUND_DOMAIN_DNS_SERVER={INBOUND_DOMAIN_DNS_SERVER!r}: expected an IP address, maybe :port"
        ) from exc
INBOUND_DOMAIN_DNS_TIMEOUT_SECONDS = env_int("INBOUND_DOMAIN_DNS_TIMEOUT_SECONDS", 5, minimum=1)
# What the mail settings page tells a workspace to publish: the MX host for its inbound domain, and the
# base URL of its inbound webhook. Both default to the dashboard's host.
INBOUND_MX_HOST = (env_str("INBOUND_MX_HOST") or urlparse(DASHBOARD_BASE_URL).hostname or "localhost").lower()
INBOUND_WEBHOOK_BASE_URL = (env_str("INBOUND_WEBHOOK_BASE_URL") or DASHBOARD_BASE_URL).rstrip("/")
# Per-agent send quotas (inboxes/quotas.py), the defaults for agents whose own limit is blank: a send over
# any of them is refused with 429 quota_exceeded. One runaway agent exhausts its own quota, not the domain's
# reputation. Windows are rolling: the burst window below, and the last 24 hours for the daily limits.
INBOX_BURST_LIMIT = env_int("INBOX_BURST_LIMIT", 10, minimum=0)
INBOX_BURST_WINDOW_SECONDS = env_int("INBOX_BURST_WINDOW_SECONDS", 60, minimum=1)
INBOX_DAILY_SEND_LIMIT = env_int("INBOX_DAILY_SEND_LIMIT", 200, minimum=0)
# Distinct addresses (to and cc, case-insensitive) an agent may write to in 24 hours.
INBOX_DAILY_RECIPIENT_LIMIT = env_int("INBOX_DAILY_RECIPIENT_LIMIT", 500, minimum=0)
# Inbound mail an agent may keep (the raw messages' bytes); when full, new mail is refused at RCPT (452).
INBOX_STORAGE_LIMIT_BYTES = env_int("INBOX_STORAGE_LIMIT_BYTES", 1024 * 1024 * 1024, minimum=0)
# Outbound mail to other domains goes through the relay (EMAIL_URL or EMAIL_*). Without one (the console of a
# local install) such messages are marked `not_sent_no_relay` rather than printed and called sent.
INBOX_RELAY_CONFIGURED = env_bool("INBOX_RELAY_CONFIGURED", bool(EMAIL_URL or os.environ.get("EMAIL_HOST")))
# Seconds before each retry of a message the relay refused or could not be reached for: with the first
# attempt, five in all. Tests shorten it.
INBOX_SEND_RETRY_SCHEDULE = [
    int(x) for x in env_list("INBOX_SEND_RETRY_SCHEDULE", ["60", "300", "1800", "7200"])
]
# DKIM-signing of outgoing inbox mail (inboxes/dkim.py): an RSA private key in PEM, given inline or as a
# file (inline, `\n` may stand for line breaks); unset, mail goes out unsigned. Each sending domain
# publishes the public key under the selector.
INBOX_DKIM_SELECTOR = env_str("INBOX_DKIM_SELECTOR", "agentcal") or "agentcal"
INBOX_DKIM_PRIVATE_KEY = (env_str("INBOX_DKIM_PRIVATE_KEY", "") or "").replace("\\n", "\n")
INBOX_DKIM_PRIVATE_KEY_FILE = env_str("INBOX_DKIM_PRIVATE_KEY_FILE", "") or ""
# The longest one delivery attempt may take (the relay's timeouts are shorter): a message still queued this
# long after an attempt began lost its worker, and the sweep below tries again.
INBOX_ATTEMPT_TIMEOUT_SECONDS = env_int("INBOX_ATTEMPT_TIMEOUT_SECONDS", 300, minimum=10)
# Queued messages whose delivery is overdue (the task was never published, or was lost with a worker or the
# broker) are picked up this often.
INBOX_DELIVER_PENDING_SECONDS = env_int("INBOX_DELIVER_PENDING_SECONDS", 60, minimum=1)
CELERY_BEAT_SCHEDULE["inboxes-deliver-pending"] = {
    "task": "inboxes.deliver_pending",
    "schedule": float(INBOX_DELIVER_PENDING_SECONDS),
}
# Review-first drafts left without their approval by a crash are linked to it, or discarded, this often.
CELERY_BEAT_SCHEDULE["inboxes-repair-reviews"] = {"task": "inboxes.repair_reviews", "schedule": 60.0}
# Raw messages accepted but not parsed (the worker crashed, the broker was down) are picked up this often.
INBOUND_PARSE_PENDING_SECONDS = env_int("INBOUND_PARSE_PENDING_SECONDS", 30, minimum=1)
CELERY_BEAT_SCHEDULE["inboxes-parse-pending"] = {
    "task": "inboxes.parse_pending",
    "schedule": float(INBOUND_PARSE_PENDING_SECONDS),
}
# Invites whose booking was cancelled or bumped get their CANCEL, and those whose booking moved their
# update, within this many seconds.
INBOX_INVITE_SWEEP_SECONDS = env_int("INBOX_INVITE_SWEEP_SECONDS", 60, minimum=1)
CELERY_BEAT_SCHEDULE["inboxes-cancel-ended-invites"] = {
    "task": "inboxes.cancel_ended_invites",
    "schedule": float(INBOX_INVITE_SWEEP_SECONDS),
}
CELERY_BEAT_SCHEDULE["inboxes-update-moved-invites"] = {
    "task": "inboxes.update_moved_invites",
    "schedule": float(INBOX_INVITE_SWEEP_SECONDS),
}
# Celery beat keeps its schedule state in the data folder, not in the working directory (it creates the
# folder when it opens the file: agentcal/celery.py).
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
# One beat sends (agentcal/celery.py): it holds a lease in Redis, renewed every third of this; another beat
# stands by and takes over this long after the first one dies.
CELERY_BEAT_SCHEDULER = "agentcal.celery:SingletonScheduler"
BEAT_LOCK_TTL_SECONDS = env_int("BEAT_LOCK_TTL_SECONDS", 30, minimum=1)
