"""engram settings. Every value comes from the environment, read through config.env helpers.

docs/configuration.md documents every variable, with its default.
"""

from __future__ import annotations

import re
from pathlib import Path

import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

from config import dsn
from config.deadlines import session_options, session_values
from config.env import (
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_optional,
    env_secret,
    env_str,
)
from config.prices import parse_prices

django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent

# "local" serves static files straight from the apps (no collectstatic); nothing else differs.
ENGRAM_ENV = env_choice("ENGRAM_ENV", "production", ("local", "production"))
LOCAL = ENGRAM_ENV == "local"

DEBUG = env_bool("ENGRAM_DEBUG", False)

# Required everywhere, with no fallback: a public default would sign sessions and CSRF tokens
# with a key everyone knows. `make run` and `make test` use one generated into .local/.
_secret = env_secret("ENGRAM_SECRET_KEY")
if _secret is None:
    raise ImproperlyConfigured(
        "Set ENGRAM_SECRET_KEY (or ENGRAM_SECRET_KEY_FILE), e.g. to the output of "
        "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`. "
        "`make run` and `make test` generate one into .local/ (see .local/engram.env)."
    )
if len(_secret) < 50 or len(set(_secret)) < 5:
    raise ImproperlyConfigured("ENGRAM_SECRET_KEY is too short: use 50 or more random characters.")
SECRET_KEY = _secret

ALLOWED_HOSTS = env_list("ENGRAM_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("ENGRAM_CSRF_TRUSTED_ORIGINS", [])
# A refused form gets a page saying it expired, in the dashboards' style (JSON off the pages).
CSRF_FAILURE_VIEW = "memory.web.errors.csrf_failure"
ENGRAM_BEHIND_TLS_PROXY = env_bool("ENGRAM_BEHIND_TLS_PROXY", False)
if ENGRAM_BEHIND_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    # Browsers then refuse plain HTTP to this host for a year (SecurityMiddleware sends it on
    # HTTPS responses only). Subdomains are not included: they may not all be ours.
    SECURE_HSTS_SECONDS = env_int("ENGRAM_HSTS_SECONDS", 31_536_000, minimum=0)
# How many reverse proxies in front append to X-Forwarded-For: the client address recorded in
# the access log is the one the outermost of them saw. 0: the TCP peer (REMOTE_ADDR).
ENGRAM_TRUSTED_PROXY_HOPS = env_int("ENGRAM_TRUSTED_PROXY_HOPS", 0, minimum=0)
# Every page, script, stylesheet, image and font is served by the app (no CDN, no inline
# script). data: images are Swagger UI's icons; the hash is the one inline <style> block of
# drf-spectacular's docs page (tests/config/test_security_headers.py checks it still matches).
ENGRAM_CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self' data:; "
    "style-src 'self' 'sha256-MMpT0iDxyjALd9PdfepImGX3DBfJPXZ4IlDWdPAgtn0='; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)

INSTALLED_APPS = [
    "config.apps.EngramAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "tenants",
    "memory",
    "audit",
    "webhooks",  # after memory: its actor needs the broker memory configures
]

MIDDLEWARE = [
    # /livez and /readyz, before host validation and everything that logs or refuses.
    "memory.health.HealthMiddleware",
    # GET /metrics (with its token), and every other request timed by route and status.
    "memory.exposition.MetricsMiddleware",
    "config.middleware.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "config.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "audit.middleware.AccessLogMiddleware",
    # Outside every middleware that refuses a request: one error shape for all of /mcp/.
    "memory.mcp.http.McpRefusalMiddleware",
    # The request's statements under one budget: all but the access log's row, written after.
    "config.middleware.RequestBudgetMiddleware",
    "tenants.throttling.InFlightMiddleware",
    # Inside the access log, so a refused body (413, 411) is logged too.
    "config.middleware.BodySizeLimitMiddleware",
    "config.inputs.SafeUrlMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
# The operator dashboard's login (memory/web/); the admin keeps its own.
LOGIN_URL = "web:login"
LOGIN_REDIRECT_URL = "web:home"
WSGI_APPLICATION = "config.wsgi.application"

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
                "memory.web.common.dashboard_context",
            ],
            # A user's text shows its invisible direction characters (memory.templatetags).
            "builtins": ["memory.templatetags.controls"],
        },
    },
]

# --- Database ------------------------------------------------------------------------------
# DATABASE_URL is the application role: neither superuser nor BYPASSRLS, so row-level security
# applies to every query the app runs. DATABASE_OWNER_URL owns the schema and runs migrations
# (`make migrate`, and the test suite's database set-up); the app never connects with it.
_db_url = env_optional("DATABASE_URL")
if _db_url is None:
    raise ImproperlyConfigured(
        "Set DATABASE_URL (postgresql://user:password@host:port/name). "
        "`make run` and `make test` write one for the local cluster to .local/engram.env."
    )
_conn_max_age = env_int("ENGRAM_DB_CONN_MAX_AGE", 60, minimum=0)
DATABASES = {"default": dsn.parse(_db_url, conn_max_age=_conn_max_age, conn_health_checks=True)}
# No transaction per request: an API view validates its input and embeds text first, then does
# its database work in one tenant transaction (tenants.db.project_context, via
# memory.api.common.tenant) that also writes the request's access-log row before committing.
DATABASES["default"]["ATOMIC_REQUESTS"] = False
# pgvector: let a filtered HNSW scan keep going until it has enough rows (0.8's iterative scan),
# instead of returning at most ef_search candidates before the scope filter. No JIT: a search
# over a large scope has a plan cost above jit_above_cost, and compiling it cost 20-80 ms per
# search at 1M memories for a statement that runs in tens of ms (bench/scale.py).
DB_SESSION_SETTINGS = {
    "hnsw.iterative_scan": "relaxed_order",
    "hnsw.ef_search": "100",
    "jit": "off",
}
# "transaction": the database is reached through a pooler in transaction mode (PgBouncer's
# pool_mode = transaction), which gives each transaction whichever server session is free. The
# sessions then get no libpq options: each transaction sets the settings above and the deadlines
# below for itself (config.pooling), server-side cursors are off, and the worker listens for new
# jobs over ENGRAM_BROKER_LISTEN_URL (or polls). "session": one server session per connection
# (no pooler, or one in session mode).
ENGRAM_DB_POOL_MODE = env_choice("ENGRAM_DB_POOL_MODE", "session", ("session", "transaction"))
TRANSACTION_POOLING = ENGRAM_DB_POOL_MODE == "transaction"
# Deadlines of the application's database sessions, in milliseconds (0: none), by the kind of
# process (config.deadlines): statement_timeout and lock_timeout for web requests, and for
# workers and management commands; idle_in_transaction_session_timeout for all. A request
# cancelled by one answers 503 with Retry-After and changes nothing (config.exceptions); a job
# is retried like any transient failure. `manage.py migrate` runs without a statement deadline.
ENGRAM_DB_DEADLINES = {
    "api": {
        "statement_timeout": env_int("ENGRAM_API_STATEMENT_TIMEOUT_MS", 5_000, minimum=0),
        "lock_timeout": env_int("ENGRAM_API_LOCK_TIMEOUT_MS", 2_000, minimum=0),
    },
    "background": {
        "statement_timeout": env_int("ENGRAM_BACKGROUND_STATEMENT_TIMEOUT_MS", 300_000, minimum=0),
        "lock_timeout": env_int("ENGRAM_BACKGROUND_LOCK_TIMEOUT_MS", 30_000, minimum=0),
    },
}
# A web request's statements together end within this budget, from the request's start
# (config.deadlines.RequestBudget; 0: none): by default one statement's deadline.
ENGRAM_API_REQUEST_BUDGET_MS = env_int(
    "ENGRAM_API_REQUEST_BUDGET_MS",
    ENGRAM_DB_DEADLINES["api"]["statement_timeout"],
    minimum=0,
)
ENGRAM_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS = env_int(
    "ENGRAM_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", 60_000, minimum=0
)
DATABASES["default"]["OPTIONS"] = {
    # The URL's own libpq parameters (target_session_attrs, sslmode, …: config.dsn).
    **dsn.libpq_options(DATABASES["default"]),
    # A database that does not answer (down host, full backlog) fails the request with a 503
    # after this many seconds (config.exceptions), instead of holding the worker.
    "connect_timeout": env_int("ENGRAM_DB_CONNECT_TIMEOUT", 5, minimum=1),
}
if not TRANSACTION_POOLING:
    DATABASES["default"]["OPTIONS"]["options"] = session_options(
        session_values(
            DB_SESSION_SETTINGS,
            ENGRAM_DB_DEADLINES["background"],
            ENGRAM_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS,
        )
    )
# Behind a transaction pooler a server-side cursor outlives its transaction's server session
# (Django declares them WITH HOLD outside transactions): Django's docs require them off.
DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = TRANSACTION_POOLING
_owner_url = env_optional("DATABASE_OWNER_URL")
ENGRAM_DB_OWNER = dsn.parse(_owner_url) if _owner_url else None
# Optional streaming-replication standby (same app role, same options) for search's statement:
# used when it has replayed every write that completed before the search began, else, and
# while it cannot be reached, search stays on the primary (tenants.replica). A short connect
# timeout (libpq's minimum, 2 s) bounds what an unreachable standby costs.
_replica_url = env_optional("ENGRAM_REPLICA_URL")
if _replica_url:
    DATABASES["replica"] = dsn.parse(
        _replica_url, conn_max_age=_conn_max_age, conn_health_checks=True
    )
    DATABASES["replica"]["ATOMIC_REQUESTS"] = False
    DATABASES["replica"]["OPTIONS"] = {
        **{k: v for k, v in DATABASES["default"]["OPTIONS"].items() if k not in dsn.LIBPQ_OPTIONS},
        **dsn.libpq_options(DATABASES["replica"]),
        "connect_timeout": 2,
    }
    DATABASES["replica"]["DISABLE_SERVER_SIDE_CURSORS"] = TRANSACTION_POOLING
    # The test runner neither creates nor flushes it: a standby is read-only.
    DATABASES["replica"]["TEST"] = {"MIRROR": "default"}
# The worker's wait for new jobs (LISTEN) needs a session of its own, which a transaction
# pooler does not give: with ENGRAM_DB_POOL_MODE=transaction, point this at the same database
# directly (or through a session-mode pool). Unset: the broker's connections (DATABASE_URL),
# except behind a transaction pooler, where workers poll for jobs each second instead.
_listen_url = env_optional("ENGRAM_BROKER_LISTEN_URL")
ENGRAM_BROKER_LISTEN = dsn.parse(_listen_url) if _listen_url else None
# How long a search waits for a standby that has not yet replayed the latest commits before
# it runs on the primary instead; 0: never wait.
ENGRAM_REPLICA_WAIT_MS = env_int("ENGRAM_REPLICA_WAIT_MS", 5, minimum=0)
# The role that gets runtime privileges (SELECT/INSERT/UPDATE/DELETE) after each migration.
ENGRAM_DB_APP_ROLE = env_str("ENGRAM_DB_APP_ROLE", str(DATABASES["default"].get("USER") or ""))

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("ENGRAM_STATIC_ROOT", str(BASE_DIR / ".local" / "static")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
# Locally the files are served straight from the apps, so no collectstatic step is needed.
WHITENOISE_USE_FINDERS = LOCAL
if LOCAL:
    STORAGES["staticfiles"] = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}

# --- API -----------------------------------------------------------------------------------
# Request bodies larger than this are refused with 413 before they are read.
ENGRAM_MAX_BODY_BYTES = env_int("ENGRAM_MAX_BODY_BYTES", 2 * 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = ENGRAM_MAX_BODY_BYTES
# The server's public address ("https://memory.example.com"), the start of the end-user
# dashboard links the API mints (tenants.links); unset: the address the request came to.
ENGRAM_PUBLIC_URL = env_str("ENGRAM_PUBLIC_URL", "").rstrip("/")
if ENGRAM_PUBLIC_URL and not re.fullmatch(r"https?://[^/?#\s]+(/[^?#\s]*)?", ENGRAM_PUBLIC_URL):
    raise ImproperlyConfigured(
        f"ENGRAM_PUBLIC_URL={ENGRAM_PUBLIC_URL!r} must be an http(s) URL (no query)."
    )

# A JSON body (or query-string filter) may hold at most this many values in all (config.inputs).
ENGRAM_MAX_JSON_NODES = env_int("ENGRAM_MAX_JSON_NODES", 50_000, minimum=100)
# Requests per API key ("N/second|minute|hour|day"; "off" disables), counted in each web
# process (Django's local-memory cache): with W workers a key gets at most W times this.
ENGRAM_API_RATE = env_str("ENGRAM_API_RATE", "1200/minute")
# Slow requests (tenants.throttling.InFlight): a request is slow once it has run past
# ENGRAM_API_SLOW_MS; a key (project) may have this many slow requests in flight in one web
# process, and a request beyond is refused (429 with Retry-After) and holds the key (project)
# to that many requests in flight, slow or not, for the cool-down; so the process's other
# threads (ENGRAM_WEB_THREADS) stay free for other tenants. Fast requests are never limited.
ENGRAM_API_SLOW_MS = env_int("ENGRAM_API_SLOW_MS", 1_000, minimum=1)
ENGRAM_API_SLOW_COOLDOWN_SECONDS = env_int("ENGRAM_API_SLOW_COOLDOWN_SECONDS", 30, minimum=0)
ENGRAM_API_KEY_SLOW_REQUESTS = env_int("ENGRAM_API_KEY_SLOW_REQUESTS", 2, minimum=1)
ENGRAM_API_PROJECT_SLOW_REQUESTS = env_int("ENGRAM_API_PROJECT_SLOW_REQUESTS", 3, minimum=1)
# Failed logins of one account from one client address in 15 minutes, on the admin's and the
# dashboard's login forms together, before both refuse that account from there (429); and of
# any accounts from one address, before it is refused for all (config/logins.py).
ENGRAM_ADMIN_LOGIN_ATTEMPTS = env_int("ENGRAM_ADMIN_LOGIN_ATTEMPTS", 10, minimum=1)
ENGRAM_LOGIN_ADDRESS_ATTEMPTS = env_int("ENGRAM_LOGIN_ADDRESS_ATTEMPTS", 100, minimum=1)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["tenants.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["tenants.authentication.HasProjectKey"],
    "DEFAULT_THROTTLE_CLASSES": [
        "tenants.throttling.ApiKeyRateThrottle",
        "tenants.throttling.SlowRequestThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {"api_key": None if ENGRAM_API_RATE == "off" else ENGRAM_API_RATE},
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["config.inputs.SafeJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "config.exceptions.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "engram API",
    "DESCRIPTION": (
        "Long-term memory for AI agents. Wire-compatible with the Mem0 Platform API: "
        "authenticate with `Authorization: Token <api key>`."
    ),
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "EventStatusEnum": "memory.models.MemoryEvent.Status",
        "GraphStatusEnum": "memory.api.add_responses.GRAPH_STATUS",
        "HistoryEventEnum": "memory.models.MemoryHistory.Event",
        "RevertedEventEnum": "memory.api.responses.REVERTED_EVENTS",
        "ResultEventEnum": "memory.api.add_responses.RESULT_EVENTS",
    },
}

# --- Memory ----------------------------------------------------------------------------------
# The local embedding model (ENGRAM_EMBEDDER=local): all-MiniLM-L6-v2 (384 dimensions, the
# default) or all-mpnet-base-v2 (768 dimensions: ranks better, at about 5x the embedding time per
# text and 5 times the files), both English only, or multilingual-e5-small (384 dimensions,
# about 100 languages; docs/configuration.md). `make model` exports the one named here.
LOCAL_MODEL_DIMENSIONS = {
    "all-MiniLM-L6-v2": 384,
    "all-mpnet-base-v2": 768,
    "multilingual-e5-small": 384,
}
ENGRAM_LOCAL_MODEL = env_choice(
    "ENGRAM_LOCAL_MODEL", "all-MiniLM-L6-v2", tuple(LOCAL_MODEL_DIMENSIONS)
)
# Its ONNX export (scripts/export-model.sh puts it there; sha256-pinned).
ENGRAM_MODEL_DIR = Path(
    env_str(
        "ENGRAM_MODEL_DIR", str(Path.home() / ".cache" / "engram" / "models" / ENGRAM_LOCAL_MODEL)
    )
)
# One thread measured fastest here for single queries and for batches (2-core machines); web
# workers embed in parallel across processes instead.
ENGRAM_EMBED_THREADS = env_int("ENGRAM_EMBED_THREADS", 1, minimum=1)
# The local model embeds search queries with its int8 copy ("int8": 2.3x faster, the same
# retrieval figures, docs/benchmarks.md) or the full model ("full"). Memories are always
# embedded with the full model.
ENGRAM_QUERY_PRECISION = env_choice("ENGRAM_QUERY_PRECISION", "int8", ("int8", "full"))
# "local" (the ONNX model above) or "openai-compatible" (POST {URL}/embeddings, any model and
# dimension). The deployment's embedding model is fixed when it is installed (its first
# `migrate` records it: memory.models.EmbeddingSpace) and checked at start-up (`manage.py check
# --database default`); `manage.py reembed`, run with another model's settings, switches a
# running deployment to it.
ENGRAM_EMBEDDER = env_choice("ENGRAM_EMBEDDER", "local", ("local", "openai-compatible"))
ENGRAM_EMBEDDING_URL = env_str("ENGRAM_EMBEDDING_URL", "")
ENGRAM_EMBEDDING_MODEL = env_str("ENGRAM_EMBEDDING_MODEL", "text-embedding-3-small")
ENGRAM_EMBEDDING_API_KEY = env_secret("ENGRAM_EMBEDDING_API_KEY")
# The vectors' dimension: the local model's, or what the hosted model returns.
_LOCAL_DIMENSIONS = LOCAL_MODEL_DIMENSIONS[ENGRAM_LOCAL_MODEL]
EMBEDDING_DIMENSIONS = env_int("ENGRAM_EMBEDDING_DIMENSIONS", _LOCAL_DIMENSIONS, minimum=1)
# Whether the request asks the hosted model for that many dimensions (OpenAI's text-embedding-3
# models shorten their vectors); a server that refuses the field needs false.
ENGRAM_EMBEDDING_SEND_DIMENSIONS = env_bool("ENGRAM_EMBEDDING_SEND_DIMENSIONS", True)
# A running process re-reads which embedding model the deployment uses at most this often, so it
# follows a `reembed` switch without a restart.
ENGRAM_EMBEDDING_CHECK_SECONDS = env_int("ENGRAM_EMBEDDING_CHECK_SECONDS", 2, minimum=0)
if ENGRAM_EMBEDDER == "openai-compatible" and not ENGRAM_EMBEDDING_URL:
    raise ImproperlyConfigured(
        "ENGRAM_EMBEDDER=openai-compatible needs ENGRAM_EMBEDDING_URL (e.g. https://api.openai.com/v1)."
    )
if EMBEDDING_DIMENSIONS > 2000:
    raise ImproperlyConfigured(
        "ENGRAM_EMBEDDING_DIMENSIONS is at most 2000 (pgvector's HNSW index on vector): ask the "
        "model for fewer (OpenAI's text-embedding-3 models shorten theirs, see "
        "ENGRAM_EMBEDDING_SEND_DIMENSIONS)."
    )
if ENGRAM_EMBEDDER == "local" and EMBEDDING_DIMENSIONS != _LOCAL_DIMENSIONS:
    raise ImproperlyConfigured(
        f"The local embedder ({ENGRAM_LOCAL_MODEL}) gives {_LOCAL_DIMENSIONS} dimensions: "
        "ENGRAM_EMBEDDING_DIMENSIONS applies to a hosted one (ENGRAM_EMBEDDER=openai-compatible)."
    )
# The language of a text whose language the detector cannot tell (a name alone: "Berlin"), as an
# ISO 639-1 code: its keywords are stemmed as that language's (memory.text.language).
ENGRAM_DEFAULT_LANGUAGE = env_str("ENGRAM_DEFAULT_LANGUAGE", "en")
# Limits on what a request may carry (each is a 400 with a clear detail when exceeded).
# One limit for every text written: a message, a memory's new text, a feedback reason, and the
# JSON text of metadata, categories and an export schema.
if env_str("ENGRAM_MAX_MESSAGE_CHARS", ""):
    raise ImproperlyConfigured(
        "ENGRAM_MAX_MESSAGE_CHARS is no longer read: set ENGRAM_MAX_TEXT_CHARS instead (the same "
        "limit, on every text written)."
    )
ENGRAM_MAX_TEXT_CHARS = env_int("ENGRAM_MAX_TEXT_CHARS", 20_000, minimum=100)
ENGRAM_MAX_MESSAGES = env_int("ENGRAM_MAX_MESSAGES", 500, minimum=1)
# The embedding work one request may ask for: the tokens of the texts it has embedded on the
# request path (add with infer=false, PUT /v1/batch/, the MCP add), each text at most 256 (the
# model's window); a hosted embedder's are estimated at 4 characters each. Above it the request
# is refused (400) before anything is embedded. The default, 24 full-window texts, takes 2-3 s
# of the local model on one core (bench/worst_case.py: 32 took 3-6 s on a busy machine, more
# than the 5 s any accepted request may take); extraction (infer=true) embeds in the worker.
ENGRAM_MAX_EMBED_TOKENS = env_int("ENGRAM_MAX_EMBED_TOKENS", 6_144, minimum=256)
# An export copies at most this many memories; a filter matching more is refused (400).
ENGRAM_MAX_EXPORT_MEMORIES = env_int("ENGRAM_MAX_EXPORT_MEMORIES", 10_000, minimum=1)
# One filter's text matches (keywords, and `contains` on categories and metadata: LIKE inside
# stored text), refused above these (400; memory.retrieval.filters): the characters of all
# their operands together, and how many there are. A match can cost rows x text length x
# operand length, and icontains upper-cases the whole text once per condition; search runs the
# filter in three subqueries. Over 20 memories of 20,000 characters, 46 keyword operands of
# 2 KB took 98-207 s to search (52-80 s to list); at these caps the worst accepted filter took
# 0.22-0.31 s (0.12-0.29 s to list), against 15-30 ms without a text filter.
ENGRAM_MAX_FILTER_OPERAND_CHARS = env_int("ENGRAM_MAX_FILTER_OPERAND_CHARS", 200, minimum=1)
ENGRAM_MAX_FILTER_TEXT_CONDITIONS = env_int("ENGRAM_MAX_FILTER_TEXT_CONDITIONS", 10, minimum=1)
# Multimodal content parts (memory.parts): the worker fetches a text document's URL (txt_url,
# mdx_url) only from these hosts, "host" (on the scheme's default port) or "host:port", exactly;
# none by default, so every document URL is refused (400). Images and PDFs go to Claude as URLs.
ENGRAM_FETCH_ALLOWED_HOSTS = [h.lower() for h in env_list("ENGRAM_FETCH_ALLOWED_HOSTS", [])]
for _entry in ENGRAM_FETCH_ALLOWED_HOSTS:
    _host = re.fullmatch(r"(\[[0-9a-f:.]+\]|[a-z0-9_.-]+)(?::([0-9]{1,5}))?", _entry)
    if _host is None or not 0 < int(_host[2] or 80) < 65536:
        raise ImproperlyConfigured(
            f"ENGRAM_FETCH_ALLOWED_HOSTS: {_entry!r} is not a host or host:port (no scheme, path "
            "or wildcard)."
        )
# Seconds a document fetch may take, the whole exchange (connect, status, headers, download).
ENGRAM_FETCH_TIMEOUT = env_int("ENGRAM_FETCH_TIMEOUT", 10, minimum=1)
# Webhooks (webhooks/, docs/webhooks.md): seconds for one attempt's whole exchange (connect,
# send, status, headers, the answer's first characters); attempts at one delivery before it is
# FAILED; failed attempts in a row that disable a webhook; how many of one project's deliveries
# the webhook workers attempt at once (the others wait their turn, other projects' do not).
ENGRAM_WEBHOOK_TIMEOUT = env_int("ENGRAM_WEBHOOK_TIMEOUT", 10, minimum=1)
ENGRAM_WEBHOOK_MAX_ATTEMPTS = env_int("ENGRAM_WEBHOOK_MAX_ATTEMPTS", 8, minimum=1)
ENGRAM_WEBHOOK_DISABLE_AFTER = env_int("ENGRAM_WEBHOOK_DISABLE_AFTER", 20, minimum=1)
ENGRAM_WEBHOOK_PROJECT_CONCURRENCY = env_int("ENGRAM_WEBHOOK_PROJECT_CONCURRENCY", 2, minimum=1)
# User profiles (memory.extraction.profiles): rebuilt this long after the last change to the
# user's memories, and at most once per such window.
ENGRAM_PROFILE_DEBOUNCE_SECONDS = env_int("ENGRAM_PROFILE_DEBOUNCE_SECONDS", 60, minimum=1)
# The most bytes of one part sent as base64 (an image, a text document), and of the text
# documents of one add request together (fetched or sent).
ENGRAM_MAX_DOCUMENT_BYTES = env_int("ENGRAM_MAX_DOCUMENT_BYTES", 512 * 1024, minimum=1024)
# A synchronous add (async_mode false; a /v1/memories/ add that does not say, as mem0ai 0.1.x
# sends it) waits this long for a worker to finish its extraction, at most the request budget
# less a second (its polls are statements too); past it, it answers 202 with the event to poll.
ENGRAM_SYNC_ADD_WAIT_MS = env_int("ENGRAM_SYNC_ADD_WAIT_MS", 4_000, minimum=0)
# An add's Idempotency-Key is remembered this long; an older one is a new key (memory.api).
ENGRAM_IDEMPOTENCY_HOURS = env_int("ENGRAM_IDEMPOTENCY_HOURS", 24, minimum=1)
# Retention (purge_expired), for projects that set none: days a deleted memory, and an add
# request's messages and results, are kept before being erased for good; 0 keeps them for ever.
ENGRAM_DELETED_RETENTION_DAYS = env_int("ENGRAM_DELETED_RETENTION_DAYS", 30, minimum=0)
ENGRAM_EVENT_RETENTION_DAYS = env_int("ENGRAM_EVENT_RETENTION_DAYS", 90, minimum=0)
# Search's entity signal is tuned by constants beside the code, no longer by settings.
if env_str("ENGRAM_SEARCH_ENTITY_WEIGHT", ""):
    raise ImproperlyConfigured(
        "ENGRAM_SEARCH_ENTITY_WEIGHT was removed: the entity signal's weight is now fitted "
        "from labelled data, in memory/retrieval/rankers/ (bench/fit_ranker.py). Unset it."
    )
if env_str("ENGRAM_SEARCH_ENTITY_SIMILARITY", ""):
    raise ImproperlyConfigured(
        "ENGRAM_SEARCH_ENTITY_SIMILARITY was removed: the similarity at which entity names match "
        "by meaning is now a constant, ENTITY_SIMILARITY in memory/retrieval/search.py (0.5). "
        "Unset it."
    )
# Raw messages (infer=false) stored within this many seconds of a scope's previous (or next)
# message join its conversation: keyword context and search's conversation prior cross add
# requests, so turn-by-turn adds rank like a session added at once. 0: per request only.
ENGRAM_CONVERSATION_GAP_SECONDS = env_int("ENGRAM_CONVERSATION_GAP_SECONDS", 1800, minimum=0)

# --- Extraction (a model) and the job queue ---------------------------------------------------
# Which model extracts (memory/extraction/llm/provider.py): "claude" (the anthropic SDK),
# "openai" (any endpoint speaking OpenAI's Chat Completions: OpenAI, Ollama, vLLM, LM Studio),
# "offline" (deterministic rules, no model: memory/extraction/llm/offline.py), or "auto": Claude
# when ANTHROPIC_API_KEY is set, the offline extractor otherwise.
ENGRAM_LLM_PROVIDER = env_choice(
    "ENGRAM_LLM_PROVIDER", "auto", ("auto", "claude", "openai", "offline")
)
ANTHROPIC_API_KEY = env_secret("ANTHROPIC_API_KEY")
ANTHROPIC_BASE_URL = env_optional("ANTHROPIC_BASE_URL")
# The OpenAI-compatible endpoint (its base URL ends in /v1), its key (none for a local server)
# and how the model is made to answer in the schema: "tools" (a forced function call),
# "json_schema" (structured output), or "auto" (tools, and structured output from the first
# time the endpoint refuses a tools request). Images are sent only with ENGRAM_OPENAI_IMAGES
# (a vision model); PDFs never (they are skipped, with a note on the event).
ENGRAM_OPENAI_BASE_URL = env_str("ENGRAM_OPENAI_BASE_URL", "https://api.openai.com/v1")
ENGRAM_OPENAI_API_KEY = env_secret("ENGRAM_OPENAI_API_KEY")
ENGRAM_OPENAI_OUTPUT = env_choice("ENGRAM_OPENAI_OUTPUT", "auto", ("auto", "tools", "json_schema"))
ENGRAM_OPENAI_IMAGES = env_bool("ENGRAM_OPENAI_IMAGES", False)
# The extractor this deployment runs, as ENGRAM_LLM_PROVIDER resolves: claude, openai, offline.
ENGRAM_EXTRACTOR = ENGRAM_LLM_PROVIDER
if ENGRAM_EXTRACTOR == "auto":
    ENGRAM_EXTRACTOR = "claude" if ANTHROPIC_API_KEY else "offline"
if ENGRAM_EXTRACTOR == "claude" and not ANTHROPIC_API_KEY:
    raise ImproperlyConfigured("ENGRAM_LLM_PROVIDER=claude needs ANTHROPIC_API_KEY.")
if ENGRAM_EXTRACTOR == "openai" and not env_optional("ENGRAM_LLM_MODEL"):
    raise ImproperlyConfigured(
        "ENGRAM_LLM_PROVIDER=openai needs ENGRAM_LLM_MODEL: the model's name at the endpoint "
        "(e.g. gpt-4.1-mini, or qwen3:8b for Ollama)."
    )
# The model's name at its provider.
ENGRAM_LLM_MODEL = env_str("ENGRAM_LLM_MODEL", "claude-haiku-5-5")
# What the models cost, per million tokens, as the operator's contract says (config/prices.py):
# the Usage page prices the tokens it counts by them. None shipped: a model without one shows
# its tokens and "no price set".
ENGRAM_MODEL_PRICES = parse_prices(env_str("ENGRAM_MODEL_PRICES", "{}"))
ENGRAM_LLM_MAX_TOKENS = env_int("ENGRAM_LLM_MAX_TOKENS", 2048, minimum=256)
ENGRAM_LLM_TIMEOUT = env_int("ENGRAM_LLM_TIMEOUT", 60, minimum=1)
# Graph extraction (entities, relations, contradictions) after fact extraction: up to three more
# model calls per add request that stores new memories. Off: facts only.
ENGRAM_GRAPH_EXTRACTION = env_bool("ENGRAM_GRAPH_EXTRACTION", True)
# The scope's running summary (context for extraction) is refreshed once every this many
# processed add requests, folding them in together (one model call instead of one per request).
ENGRAM_SUMMARY_EVERY = env_int("ENGRAM_SUMMARY_EVERY", 3, minimum=1)
# At most this many candidate facts from one add request go on to be embedded, compared and
# stored; more (a model asked to extract from a long text) are dropped, and the event says so.
ENGRAM_MAX_FACTS_PER_EVENT = env_int("ENGRAM_MAX_FACTS_PER_EVENT", 50, minimum=1)
# At most this many memories deleted by the model's decisions in one add request.
ENGRAM_MAX_DELETES_PER_EVENT = env_int("ENGRAM_MAX_DELETES_PER_EVENT", 3, minimum=0)
# Retries inside one attempt (the SDK backs off on 429 and 5xx), then the event is retried.
ENGRAM_LLM_MAX_RETRIES = env_int("ENGRAM_LLM_MAX_RETRIES", 2, minimum=0)
# Attempts per event, each counted when a worker claims it, before it is FAILED. A failure that
# cannot succeed on a retry (a malformed payload, a value out of range: extraction.claims.PERMANENT)
# fails it at once; others are retried after ENGRAM_EVENT_BACKOFF_MS x 2^attempts, no sooner than
# the model's Retry-After, at most 5 min (extraction.pipeline.backoff). With the defaults the
# waits add up to 2 + 4 + ... + 256 + 300 s = 13.5 min: a model API outage that long is waited out.
ENGRAM_EVENT_MAX_ATTEMPTS = env_int("ENGRAM_EVENT_MAX_ATTEMPTS", 10, minimum=1)
ENGRAM_EVENT_BACKOFF_MS = env_int("ENGRAM_EVENT_BACKOFF_MS", 1000, minimum=1)
# A worker's claim on an event lasts this long, and is renewed before each step (each model
# call, the retrieval, applying), so it must cover one step, not the whole job. The default is
# the worst case of one model call: ENGRAM_LLM_TIMEOUT per try x (ENGRAM_LLM_MAX_RETRIES + 1)
# tries, plus the SDK's backoff between tries (at most 8 s each), plus a minute for the rest of
# a step (a model's Retry-After over 8 s ends the attempt: extraction.llm.claude). Once it lapses
# (a dead worker), a re-delivered message may claim the event again; a worker that outlived its
# lease finds its claim token replaced at its next step and drops the event, writing nothing.
ENGRAM_EVENT_LEASE_SECONDS = env_int(
    "ENGRAM_EVENT_LEASE_SECONDS",
    ENGRAM_LLM_TIMEOUT * (ENGRAM_LLM_MAX_RETRIES + 1) + 8 * ENGRAM_LLM_MAX_RETRIES + 60,
    minimum=1,
)

# --- Reranking (memory/rerank.py, docs/rerank.md) ------------------------------------------
# What a search with `rerank: true` asks for a second opinion on its order: "off" (nothing: the
# answer says it was not reranked), "endpoint" (a reranker service speaking POST /rerank), or
# "judge" (the extraction model, ENGRAM_LLM_PROVIDER's, reorders the candidates).
ENGRAM_RERANK = env_choice("ENGRAM_RERANK", "off", ("off", "endpoint", "judge"))
# The reranker service: its base URL ({URL}/rerank is posted to), the body it takes ("cohere":
# Cohere, Jina, vLLM, llama.cpp, Infinity, LiteLLM; "tei": text-embeddings-inference), the model
# it should use (sent as `model`, cohere only) and its key (sent as a Bearer token).
ENGRAM_RERANK_URL = env_str("ENGRAM_RERANK_URL", "")
ENGRAM_RERANK_API = env_choice("ENGRAM_RERANK_API", "cohere", ("cohere", "tei"))
ENGRAM_RERANK_MODEL = env_str("ENGRAM_RERANK_MODEL", "")
ENGRAM_RERANK_API_KEY = env_secret("ENGRAM_RERANK_API_KEY")
# The search's best this many results are reranked (a small top_k still sees them all).
ENGRAM_RERANK_TOP_N = env_int("ENGRAM_RERANK_TOP_N", 20, minimum=2)
# The whole exchange with the reranker, after which the search answers in the fused order.
ENGRAM_RERANK_TIMEOUT_MS = env_int("ENGRAM_RERANK_TIMEOUT_MS", 2000, minimum=1)
if ENGRAM_RERANK_TOP_N > 50:
    # Every candidate's text goes to the reranker: past 50 the call costs more than it can move.
    raise ImproperlyConfigured("ENGRAM_RERANK_TOP_N must be at most 50.")
if ENGRAM_RERANK == "endpoint" and not ENGRAM_RERANK_URL:
    raise ImproperlyConfigured(
        "ENGRAM_RERANK=endpoint needs ENGRAM_RERANK_URL: the reranker's base URL (it is sent "
        "POST {URL}/rerank), e.g. http://127.0.0.1:8080 or https://api.cohere.com/v2."
    )
if ENGRAM_RERANK == "judge" and ENGRAM_EXTRACTOR == "offline":
    raise ImproperlyConfigured(
        "ENGRAM_RERANK=judge needs a model: the extraction model judges (ENGRAM_LLM_PROVIDER "
        "claude or openai, or ANTHROPIC_API_KEY set); the offline extractor cannot."
    )

# The extraction worker's processes are restarted after this many messages each (plus up to a
# tenth more, at random): a backstop against memory a long-lived process gathers. 0: never.
ENGRAM_WORKER_MAX_TASKS = env_int("ENGRAM_WORKER_MAX_TASKS", 2_000, minimum=0)
# A worker process that has not reported for this many seconds is dead to the broker: the
# messages it held go back to their queue (dramatiq-postgres's reaper; reports every quarter).
ENGRAM_WORKER_HEARTBEAT_SECONDS = env_int("ENGRAM_WORKER_HEARTBEAT_SECONDS", 60, minimum=4)
# The readiness probe's database check (memory/health.py): its statement's deadline.
ENGRAM_READY_TIMEOUT_MS = env_int("ENGRAM_READY_TIMEOUT_MS", 1000, minimum=1)
# Prometheus metrics (config/metrics.py, memory/exposition.py): GET /metrics on the web server
# answers a request that carries this token (Authorization: Bearer …); without one it is off
# there. ENGRAM_METRICS_BIND (host:port) also serves them from the worker on an address of its
# own (tokenless unless the token is set). Neither ever exposes tenant data.
ENGRAM_METRICS_TOKEN = env_secret("ENGRAM_METRICS_TOKEN")
if ENGRAM_METRICS_TOKEN is not None and len(ENGRAM_METRICS_TOKEN) < 16:
    raise ImproperlyConfigured("ENGRAM_METRICS_TOKEN must be at least 16 characters.")
ENGRAM_METRICS_BIND = env_optional("ENGRAM_METRICS_BIND")

# --- Logging -------------------------------------------------------------------------------
LOG_LEVEL = env_choice("ENGRAM_LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR"))
LOG_FORMAT = env_choice("ENGRAM_LOG_FORMAT", "json", ("json", "text"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "config.middleware.RequestIdLogFilter"}},
    "formatters": {
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(request_id)s %(message)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
        "text": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
    },
    "handlers": {
        "console": {
            # Every line with end-user dashboard tokens (/me/<token>/) redacted, in its message,
            # extra fields (the request of an error) and traceback (config.redaction).
            "class": "config.redaction.RedactingStreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["request_id"],
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    # django.request logs every 4xx as a warning quoting the path and query string, which can name
    # users (user_id=...); the access log records refused requests already, without them.
    # The MCP SDK logs two INFO lines per exchange (its per-request session manager) and each
    # refused tool call; the access log records every call already (memory/mcp/http.py).
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        "django.request": {"level": "ERROR"},
        "mcp": {"level": "WARNING"},
    },
}
