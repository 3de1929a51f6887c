"""Settings for Image Gateway, read from the environment (see .env.example and README.md).

A bad value stops the process at start with a message naming the variable.
"""

from __future__ import annotations

import importlib.util
from decimal import Decimal
from pathlib import Path
from typing import Any

import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

from gateway_project.database import StatementConnection
from gateway_project.env import (
    POSTGRESQL_ENGINE,
    database_from_url,
    database_url,
    env_bool,
    env_choice,
    env_file_load,
    env_float,
    env_int,
    env_list,
    env_networks,
    env_origins,
    env_public_url,
    env_str,
    env_timezone,
    env_url,
)

# Django's generic classes (ModelAdmin[M], QuerySet[M]) may be subscripted where Python evaluates it.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
env_file_load(BASE_DIR)

DEBUG = env_bool("DEBUG", False)

_DEV_SECRET_KEY = "dev-only-insecure-secret-key-never-use-in-production"  # noqa: S105
_DEV_KEY_PEPPER = "dev-only-insecure-key-pepper"

SECRET_KEY = env_str("SECRET_KEY") or (_DEV_SECRET_KEY if DEBUG else None)
if not SECRET_KEY:
    raise ImproperlyConfigured(
        "SECRET_KEY is not set. Set it to a long random value (python -c 'import secrets; "
        "print(secrets.token_urlsafe(50))'); a development default exists only when DEBUG=1."
    )

# The pepper keys the HMAC under which API keys are stored. Changing it invalidates every key.
GATEWAY_KEY_PEPPER = env_str("GATEWAY_KEY_PEPPER") or (_DEV_KEY_PEPPER if DEBUG else None)
if not GATEWAY_KEY_PEPPER:
    raise ImproperlyConfigured(
        "GATEWAY_KEY_PEPPER is not set. Set it to a long random value and keep it: API keys are "
        "stored as HMACs under it, and changing it invalidates every key. A development default "
        "exists only when DEBUG=1."
    )

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
GATEWAY_PUBLIC_URL = env_public_url("GATEWAY_PUBLIC_URL", "http://127.0.0.1:8000")
GATEWAY_TIMEZONE = env_timezone("GATEWAY_TIMEZONE", "UTC")
CSRF_TRUSTED_ORIGINS = [GATEWAY_PUBLIC_URL]
# The reverse proxies in front (docs/deployment.md): addresses or CIDR networks, comma-separated. Only
# a request whose immediate peer is one of them may say who the client is (X-Forwarded-For: the
# address the console's sign-in throttle and the access log see), which scheme it came in on
# (X-Forwarded-Proto) and which host it asked for (X-Forwarded-Host); from any other peer those
# headers are dropped (api.middleware.ForwardedHeadersMiddleware). gunicorn.conf.py gives gunicorn
# the same list. Empty (the default): no proxy is trusted.
GATEWAY_TRUSTED_PROXIES = env_networks("GATEWAY_TRUSTED_PROXIES")
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if GATEWAY_TRUSTED_PROXIES else None
USE_X_FORWARDED_HOST = bool(GATEWAY_TRUSTED_PROXIES)

# CORS for browser clients of /v1, off unless GATEWAY_CORS_ALLOWED_ORIGINS lists origins (or is `*`):
# then django-cors-headers answers preflights first of all middleware (MIDDLEWARE below), before any
# credential is looked at, and only for /v1 paths. No cookie authenticates a /v1 call: credentials are
# never allowed.
GATEWAY_CORS_ALLOWED_ORIGINS = env_origins("GATEWAY_CORS_ALLOWED_ORIGINS")
CORS_ALLOW_ALL_ORIGINS = GATEWAY_CORS_ALLOWED_ORIGINS == ["*"]
CORS_ALLOWED_ORIGINS = [] if CORS_ALLOW_ALL_ORIGINS else GATEWAY_CORS_ALLOWED_ORIGINS
CORS_URLS_REGEX = r"^/v1(/.*)?$"
CORS_ALLOW_CREDENTIALS = False
# What the official SDKs send: the three credential headers, the provider's versioning headers,
# the Stainless client's telemetry and retry headers (no wildcard: browsers never let `*` cover
# Authorization).
CORS_ALLOW_HEADERS = [
    "accept",
    "authorization",
    "content-type",
    "x-api-key",
    "x-goog-api-key",
    "x-request-id",
    "idempotency-key",
    "anthropic-version",
    "anthropic-beta",
    "anthropic-dangerous-direct-browser-access",
    "openai-organization",
    "openai-project",
    "openai-beta",
    "x-stainless-arch",
    "x-stainless-async",
    "x-stainless-helper",
    "x-stainless-helper-method",
    "x-stainless-lang",
    "x-stainless-os",
    "x-stainless-package-version",
    "x-stainless-poll-helper",
    "x-stainless-raw-response",
    "x-stainless-read-timeout",
    "x-stainless-retry-count",
    "x-stainless-runtime",
    "x-stainless-runtime-version",
    "x-stainless-stream-helper",
    "x-stainless-timeout",
]
CORS_EXPOSE_HEADERS = ["x-request-id", "retry-after", "x-should-retry", "idempotent-replayed"]
CORS_PREFLIGHT_MAX_AGE = 600

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "oauth2_provider",
    # The apps, by layer (docs/architecture.md): what every app may use, the domain apps, then the
    # endpoint apps and the configuration file's loader.
    "core",
    "accounts",
    "groups",
    "keys",
    "billing",
    "upstreams",
    "notifications",
    "api",
    "images",
    "chat",
    "console",
    "configuration",
    # OpenAPI (SPECTACULAR_SETTINGS below).
    "drf_spectacular",
    "drf_spectacular_sidecar",
    *(["corsheaders"] if GATEWAY_CORS_ALLOWED_ORIGINS else []),
]

MIDDLEWARE = [
    *(["corsheaders.middleware.CorsMiddleware"] if GATEWAY_CORS_ALLOWED_ORIGINS else []),
    # GET /healthz and /readyz: answered before ALLOWED_HOSTS is checked (probes name a node by its
    # address) and before any credential (api/health.py).
    "api.health.HealthProbeMiddleware",
    # Then: everything after it (the access log too) sees the client's address, not the proxy's.
    "api.middleware.ForwardedHeadersMiddleware",
    "api.middleware.RequestIdMiddleware",
    "api.shedding.OverloadSheddingMiddleware",
    "api.middleware.RequestLimitsMiddleware",
    "api.middleware.ApiErrorMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Django's session, CSRF, authentication, message and X-Frame-Options middleware, skipped by /v1
    # requests (api/middleware.py).
    "api.middleware.BrowserSessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "api.middleware.BrowserCsrfViewMiddleware",
    "api.middleware.BrowserAuthenticationMiddleware",
    "api.middleware.BrowserMessageMiddleware",
    "api.middleware.BrowserXFrameOptionsMiddleware",
    "console.middleware.ConsoleContentSecurityPolicyMiddleware",
]
# The console pages' Content-Security-Policy (console/middleware.py): their own script, styles and
# fetches, data: images, forms posted to themselves, never framed.
GATEWAY_CONSOLE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

# JSON under /v1 and /files, Django's page for the console and the admin.
CSRF_FAILURE_VIEW = "api.csrf.csrf_failure"
# Request heads (api.middleware.RequestLimitsMiddleware): larger is refused with a JSON 431 (headers)
# or 414 (path and query). Keep them under gunicorn's limit_request_field_size, its
# limit_request_fields x field size, and its limit_request_line (gunicorn.conf.py), or gunicorn
# answers first, with its own HTML page.
GATEWAY_MAX_HEADER_FIELD_BYTES = env_int("GATEWAY_MAX_HEADER_FIELD_BYTES", 8 * 1024, minimum=1024)
GATEWAY_MAX_HEADER_BYTES = env_int("GATEWAY_MAX_HEADER_BYTES", 32 * 1024, minimum=1024)
GATEWAY_MAX_REQUEST_LINE_BYTES = env_int("GATEWAY_MAX_REQUEST_LINE_BYTES", 4 * 1024, minimum=256)

ROOT_URLCONF = "gateway_project.urls"
WSGI_APPLICATION = "gateway_project.wsgi.application"

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

_DATABASE = database_from_url("DATABASE_URL", database_url(), base_dir=BASE_DIR)
_POSTGRESQL = _DATABASE["ENGINE"] == POSTGRESQL_ENGINE
# Connections are reused across requests of a thread; 0 closes them after every request.
DATABASE_CONN_MAX_AGE = env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0)
# PostgreSQL only: a psycopg connection pool per worker process (docs/benchmarks.md). Connections are
# then bounded by processes x DATABASE_POOL_MAX_SIZE whatever the calls in flight; a call (a greenlet
# of a gevent worker, or a gthread thread) holds one only while it talks to the database (never
# during an upstream call: api.metering gives it back), so 16 serve a worker's 1000 calls.
# 0 = no pool: one connection per greenlet or thread, kept DATABASE_CONN_MAX_AGE seconds (then keep
# the calls in flight under max_connections).
DATABASE_POOL_MAX_SIZE = env_int("DATABASE_POOL_MAX_SIZE", 16, minimum=0)
_POOLED = _POSTGRESQL and DATABASE_POOL_MAX_SIZE > 0
# PostgreSQL: the billing statements of every call (reserve, capture) are prepared the first time
# they run on a connection, then each call sends only their parameters (billing/statements.py runs
# them on psycopg's server-side-binding cursor; Django's own queries use client-side binding and are
# never prepared). psycopg's `prepare_threshold`, which Django passes on to psycopg's connect: 0
# prepares at the first run, None never. Turn off behind a pooler that cannot keep prepared
# statements (PgBouncer in transaction mode before 1.21, or without max_prepared_statements).
DATABASE_PREPARED_STATEMENTS = env_bool("DATABASE_PREPARED_STATEMENTS", True)
if _POSTGRESQL:
    _DATABASE_OPTIONS = {
        **_DATABASE["OPTIONS"],
        "prepare_threshold": 0 if DATABASE_PREPARED_STATEMENTS else None,
        **(
            {
                "pool": {
                    "min_size": min(2, DATABASE_POOL_MAX_SIZE),
                    "max_size": DATABASE_POOL_MAX_SIZE,
                    # Seconds to wait for a free connection.
                    "timeout": env_int("DATABASE_POOL_TIMEOUT", 10, minimum=1),
                    # Each connection keeps the cursors of the billing statements (billing/statements.py).
                    "connection_class": StatementConnection,
                }
            }
            if _POOLED
            else {}
        ),
    }
else:
    # SQLite: several gunicorn threads write to one file: wait for the lock instead of failing at once.
    _DATABASE_OPTIONS = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
DATABASES = {
    "default": {
        **_DATABASE,
        "OPTIONS": _DATABASE_OPTIONS,
        # Pooled: the pool keeps the connections and checks each one it lends (psycopg_pool's `check`,
        # an empty query), so a connection PostgreSQL ended while it was idle (a restart) is replaced
        # before any query of a request meets it; pooled connections are also replaced after an hour
        # (psycopg_pool's max_lifetime). Unpooled: Django checks a persistent connection per request.
        "CONN_MAX_AGE": 0 if _POOLED else DATABASE_CONN_MAX_AGE,
        "CONN_HEALTH_CHECKS": True,
    }
}

REDIS_URL = env_url("REDIS_URL")
if REDIS_URL:
    CACHES: dict[str, dict[str, Any]] = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "igw",
            # One connection pool per process, not one per thread (per greenlet under gevent).
            # A Redis that does not answer costs a call at most these timeouts, once per outage: the
            # first failure marks Redis down for GATEWAY_REDIS_RETRY_SECONDS (core/redis_health.py).
            "OPTIONS": {
                "pool_class": "core.redis_pool.ProcessConnectionPool",
                "socket_connect_timeout": env_float("REDIS_CONNECT_TIMEOUT_SECONDS", 0.5, minimum=0.01),
                "socket_timeout": env_float("REDIS_TIMEOUT_SECONDS", 1.0, minimum=0.01),
            },
        }
    }
else:
    # Per-process: limits counted here hold per worker process only (README: "Limits").
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "igw"}}

AUTH_USER_MODEL = "accounts.User"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Django's default hashers, with PBKDF2 (the one new passwords get) computed off a gevent worker's
# event loop (accounts/hashers.py); listing Django's own PBKDF2 too would shadow it.
PASSWORD_HASHERS = [
    "accounts.hashers.OffloadedPBKDF2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2SHA1PasswordHasher",
    "django.contrib.auth.hashers.Argon2PasswordHasher",
    "django.contrib.auth.hashers.BCryptSHA256PasswordHasher",
    "django.contrib.auth.hashers.ScryptPasswordHasher",
]
# Failed console sign-ins (docs/console.md): past this many in the window, from one address or for
# one username, sign-in answers 429 without checking the password until the window ends.
GATEWAY_SIGNIN_FAILURES_PER_ADDRESS = env_int("GATEWAY_SIGNIN_FAILURES_PER_ADDRESS", 30, minimum=1)
GATEWAY_SIGNIN_FAILURES_PER_ACCOUNT = env_int("GATEWAY_SIGNIN_FAILURES_PER_ACCOUNT", 10, minimum=1)
GATEWAY_SIGNIN_WINDOW_SECONDS = env_int("GATEWAY_SIGNIN_WINDOW_SECONDS", 15 * 60, minimum=1)
# Sign-ins checked at once per process (console/signin.py): a burst waits its turn (at most
# GATEWAY_SIGNIN_WAIT_SECONDS, then 429) instead of taking the CPU and database the billed calls need.
GATEWAY_SIGNIN_CONCURRENCY = env_int("GATEWAY_SIGNIN_CONCURRENCY", 4, minimum=1)
GATEWAY_SIGNIN_WAIT_SECONDS = env_float("GATEWAY_SIGNIN_WAIT_SECONDS", 10.0, minimum=0)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(BASE_DIR / "staticfiles")) or BASE_DIR / "staticfiles")
MEDIA_ROOT = Path(env_str("MEDIA_ROOT", str(BASE_DIR / "media")) or BASE_DIR / "media")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Image requests, uploads and hosted results (docs/images.md).
GATEWAY_MAX_PROMPT_CHARS = env_int("GATEWAY_MAX_PROMPT_CHARS", 32_000, minimum=1)
# A JSON body, or the text fields of a multipart form (files are not counted): larger is refused with 413.
GATEWAY_MAX_JSON_BODY_BYTES = env_int("GATEWAY_MAX_JSON_BODY_BYTES", 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = GATEWAY_MAX_JSON_BODY_BYTES
# Text calls (docs/text.md): the input ceiling of a hold counts the request's UTF-8 bytes (no token is
# shorter than one byte), each image part as this many tokens, each file sent by reference (URL or
# file id) as GATEWAY_TEXT_FILE_TOKENS, plus a fixed overhead per call (chat templates, tool prompts).
GATEWAY_TEXT_IMAGE_TOKENS = env_int("GATEWAY_TEXT_IMAGE_TOKENS", 3_000, minimum=0)
GATEWAY_TEXT_FILE_TOKENS = env_int("GATEWAY_TEXT_FILE_TOKENS", 32_000, minimum=0)
GATEWAY_TEXT_OVERHEAD_TOKENS = env_int("GATEWAY_TEXT_OVERHEAD_TOKENS", 1_000, minimum=0)
# A translated /v1/responses answer stored (`store` not false: its input and output items), for a later
# call's `previous_response_id` or `item_reference`: purge_response_items deletes a conversation once its
# last response is older than this.
# 0: none is kept (previous_response_id and item_reference are then refused on translated models).
GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS = env_int("GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS", 30, minimum=0)
# Each uploaded file (image, image[], mask): larger is refused with 413 while it is being received.
GATEWAY_MAX_UPLOAD_BYTES = env_int("GATEWAY_MAX_UPLOAD_BYTES", 25 * 1024 * 1024, minimum=1024)
# Width x height of an uploaded image; Pillow's decompression-bomb guard is turned into an error as well.
GATEWAY_MAX_IMAGE_PIXELS = env_int("GATEWAY_MAX_IMAGE_PIXELS", 4096 * 4096, minimum=1)
GATEWAY_MAX_EDIT_IMAGES = env_int("GATEWAY_MAX_EDIT_IMAGES", 16, minimum=1, maximum=100)
# Uploads larger than this spool to a temporary file, so memory stays bounded whatever is sent.
FILE_UPLOAD_MAX_MEMORY_SIZE = env_int("FILE_UPLOAD_MAX_MEMORY_SIZE", 256 * 1024, minimum=0)
FILE_UPLOAD_HANDLERS = [
    "images.uploads.UploadLimitHandler",  # refuses an oversized file or too many files mid-upload
    "django.core.files.uploadhandler.MemoryFileUploadHandler",
    "django.core.files.uploadhandler.TemporaryFileUploadHandler",
]
# Hosted results: signed links valid this long; the stored image is deleted by purge_images after this.
GATEWAY_IMAGE_URL_TTL_SECONDS = env_int("GATEWAY_IMAGE_URL_TTL_SECONDS", 3600, minimum=60)
GATEWAY_IMAGE_RETENTION_HOURS = env_int("GATEWAY_IMAGE_RETENTION_HOURS", 24, minimum=1)
# Downloading an image by URL (an upstream's answer for response_format=b64_json, or a caller's link for a
# model that needs its bytes, docs/text.md): size cap and time limit.
GATEWAY_FETCH_MAX_BYTES = env_int("GATEWAY_FETCH_MAX_BYTES", 32 * 1024 * 1024, minimum=1024)
GATEWAY_FETCH_TIMEOUT_SECONDS = env_int("GATEWAY_FETCH_TIMEOUT_SECONDS", 60, minimum=1)
# The largest non-streamed answer read from an upstream (several images in base64 fit well within it);
# a larger one fails the call as the upstream's (502), so a worker's memory stays bounded.
GATEWAY_UPSTREAM_ANSWER_MAX_BYTES = env_int(
    "GATEWAY_UPSTREAM_ANSWER_MAX_BYTES", 256 * 1024 * 1024, minimum=1024 * 1024
)
# Private networks the gateway may fetch from or call when given a URL (upstreams/ssrf.py): none by
# default, only globally routable addresses; e.g. `10.20.0.0/16` for an image server of your own.
GATEWAY_FETCH_PRIVATE_NETWORKS = env_networks("GATEWAY_FETCH_PRIVATE_NETWORKS")
# Where hosted images are stored: the file system under MEDIA_ROOT, or an S3-compatible bucket
# (needs `pip install "django-storages[s3]"`; credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY).
GATEWAY_IMAGE_STORAGE = env_str("GATEWAY_IMAGE_STORAGE", "filesystem") or "filesystem"
if GATEWAY_IMAGE_STORAGE == "filesystem":
    _DEFAULT_STORAGE: dict = {"BACKEND": "django.core.files.storage.FileSystemStorage"}
elif GATEWAY_IMAGE_STORAGE == "s3":
    if importlib.util.find_spec("storages") is None:
        raise ImproperlyConfigured(
            'GATEWAY_IMAGE_STORAGE=s3 needs django-storages: pip install "django-storages[s3]".'
        )
    _S3_BUCKET = env_str("GATEWAY_S3_BUCKET")
    if not _S3_BUCKET:
        raise ImproperlyConfigured("GATEWAY_IMAGE_STORAGE=s3 needs GATEWAY_S3_BUCKET (the bucket name).")
    _S3_OPTIONAL = {
        "endpoint_url": env_url("GATEWAY_S3_ENDPOINT_URL"),
        "region_name": env_str("GATEWAY_S3_REGION"),
    }
    _DEFAULT_STORAGE = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": _S3_BUCKET,
            "default_acl": "private",
            "file_overwrite": False,
            **{name: value for name, value in _S3_OPTIONAL.items() if value},
        },
    }
else:
    raise ImproperlyConfigured(
        f"Environment variable GATEWAY_IMAGE_STORAGE={GATEWAY_IMAGE_STORAGE!r} is invalid: "
        "expected filesystem or s3"
    )
STORAGES = {
    "default": _DEFAULT_STORAGE,
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", 60 * 60 * 12, minimum=60)
# The web console (docs/console.md): its sign-in page, its CSS/JS, and password reset mails, offered
# only when EMAIL_HOST is set.
LOGIN_REDIRECT_URL = "console:overview"
LOGOUT_REDIRECT_URL = "login"
STATICFILES_DIRS = [BASE_DIR / "static"]
EMAIL_HOST = env_str("EMAIL_HOST", "") or ""
EMAIL_PORT = env_int("EMAIL_PORT", 587, minimum=1, maximum=65535)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "") or ""
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "") or ""
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", True)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "Image Gateway <noreply@localhost>")
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = GATEWAY_PUBLIC_URL.startswith("https://")
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["api.parsers.GatewayJSONParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "api.negotiation.JsonOnlyContentNegotiation",
    "EXCEPTION_HANDLER": "api.errors.drf_exception_handler",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

# OpenAPI: GET /v1/openapi.json and its docs page /docs/ (Swagger UI from drf-spectacular-sidecar's
# static files, no CDN). The /v1 views take no serializers: each family describes its bodies in its
# schema.py, the shared parts are in api/openapi.py.
SPECTACULAR_SETTINGS = {
    "TITLE": "Image Gateway API",
    "DESCRIPTION": "Image generation and editing, chat completions, responses, messages and token "
    "counting behind one key. Errors come in three shapes (components CompatibleError, NativeError, "
    "GoogleError); every error message ends with its request id.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/v1",
    "PREPROCESSING_HOOKS": ["api.openapi.endpoints_v1_only"],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "api.openapi.components_add",
    ],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# OAuth 2 authorization server (django-oauth-toolkit): authorization code + PKCE (S256), rotating
# refresh tokens. Tokens are stored only as SHA-256 checksums (RFC 9700 token storage); access tokens
# are `sk_oauth_…` (keys/secrets.py). See docs/authentication.md.
OAUTH2_PROVIDER = {
    # The scopes are the keys app's (keys/credentials.py); the consent flow never grants the
    # staff-only ones (admin:provision).
    "SCOPES_BACKEND_CLASS": "keys.scopes.ConsentFlowScopes",
    "ACCESS_TOKEN_GENERATOR": "keys.secrets.oauth_access_token_generate",
    "REFRESH_TOKEN_GENERATOR": "keys.secrets.oauth_refresh_token_generate",
    "ACCESS_TOKEN_EXPIRE_SECONDS": env_int("OAUTH_ACCESS_TOKEN_EXPIRE_SECONDS", 3600, minimum=60),
    "REFRESH_TOKEN_EXPIRE_SECONDS": env_int(
        "OAUTH_REFRESH_TOKEN_EXPIRE_SECONDS", 60 * 60 * 24 * 30, minimum=60
    ),
    "PKCE_REQUIRED": True,
    "ROTATE_REFRESH_TOKEN": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
}
# One sign-in page: the console's, which is also where the OAuth consent step sends anonymous users.
LOGIN_URL = "login"

# Money: every amount is a Decimal with this many places (¥0.0001).
MONEY_DECIMAL_PLACES = 8
MONEY_QUANTUM = Decimal(1).scaleb(-MONEY_DECIMAL_PLACES)

# Billing (docs/billing.md). A hold, and a concurrency slot, lives this long before release_stale_holds
# may void it: it must exceed the longest upstream call (upstream timeouts, GUNICORN_TIMEOUT).
GATEWAY_HOLD_TTL_SECONDS = env_int("GATEWAY_HOLD_TTL_SECONDS", 900, minimum=60)
GATEWAY_USAGE_RETENTION_DAYS = env_int("GATEWAY_USAGE_RETENTION_DAYS", 30, minimum=1)
# Per-process caches of credentials and routing, exact through a shared generation counter in Redis
# (core/config_cache.py); this is only the backstop age of an entry. 0 turns caching off.
GATEWAY_CONFIG_CACHE_SECONDS = env_int("GATEWAY_CONFIG_CACHE_SECONDS", 60, minimum=0)
# Concurrency slots are leases: a worker killed mid-call leaks its slot for at most this long. Keep
# it above the longest call (GATEWAY_RETRY_DEADLINE_SECONDS, the upstreams' timeouts).
GATEWAY_CONCURRENCY_SLOT_TTL_SECONDS = env_int("GATEWAY_CONCURRENCY_SLOT_TTL_SECONDS", 120, minimum=10)
# Redis down (docs/failure-modes.md): "open" counts limits per process meanwhile, "closed" answers
# billed calls 503 with Retry-After. Redis is tried again this many seconds after a failure.
GATEWAY_REDIS_FAILURE_MODE = env_str("GATEWAY_REDIS_FAILURE_MODE", "open")
if GATEWAY_REDIS_FAILURE_MODE not in ("open", "closed"):
    raise ImproperlyConfigured(
        f"GATEWAY_REDIS_FAILURE_MODE must be open or closed, not {GATEWAY_REDIS_FAILURE_MODE!r}."
    )
GATEWAY_REDIS_RETRY_SECONDS = env_float("GATEWAY_REDIS_RETRY_SECONDS", 2.0, minimum=0)
GATEWAY_IDEMPOTENCY_TTL_SECONDS = env_int("GATEWAY_IDEMPOTENCY_TTL_SECONDS", 24 * 60 * 60, minimum=60)

# GET /metrics (README, "Metrics"): with a token set, `Authorization: Bearer <token>` is required;
# without one it answers 404, unless GATEWAY_METRICS_PUBLIC=1 (a scrape address only monitoring reaches).
GATEWAY_METRICS_TOKEN = env_str("GATEWAY_METRICS_TOKEN", "") or ""
GATEWAY_METRICS_PUBLIC = env_bool("GATEWAY_METRICS_PUBLIC", False)

# LOG_FORMAT=json: every log line is one JSON object (python-json-logger), gunicorn's too
# (core/access_log.py); text (the default) keeps the plain format. Either way each API call logs one
# `gateway.call` line when its usage scope closes (api/usage.py).
LOG_FORMAT = env_choice("LOG_FORMAT", "text", ("text", "json"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # One line per record: control characters in a message are escaped (core/log_lines.py).
    "formatters": {
        "plain": {
            "class": "core.log_lines.LineFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
        **({"json": {"()": "core.access_log.json_formatter"}} if LOG_FORMAT == "json" else {}),
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_FORMAT == "json" else "plain",
        }
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO") or "INFO"},
    # Django logs every 4xx as a warning; the gateway's own answers are expected, not noise.
    # psycopg's pool logs every loan and return at INFO: four lines (and a handler lock) per call.
    "loggers": {"django.request": {"level": "ERROR"}, "psycopg.pool": {"level": "WARNING"}},
}

# Upstream retries, failover and circuit breaking (upstreams/resilience.py); an upstream's own fields,
# when set, override these for calls where it is the primary upstream.
GATEWAY_RETRY = {
    "base_delay": env_float("GATEWAY_RETRY_BASE_SECONDS", 1.0, minimum=0),
    "max_wait": env_float("GATEWAY_RETRY_MAX_WAIT_SECONDS", 30.0, minimum=0),
    "max_retries": env_int("GATEWAY_RETRY_MAX", 5, minimum=0),
    "deadline": env_float("GATEWAY_RETRY_DEADLINE_SECONDS", 60.0, minimum=0),
    "jitter": 0.2,
    "circuit_threshold": env_int("GATEWAY_CIRCUIT_THRESHOLD", 5, minimum=1),
    "circuit_cooldown": env_float("GATEWAY_CIRCUIT_COOLDOWN_SECONDS", 30.0, minimum=1),
}
# Connections kept open per upstream per process (upstreams/transport.py). At least the calls a process
# has in flight (gunicorn's worker_connections): past it, a call opens a connection that is closed
# after it instead of kept, and urllib3 logs a warning for each.
GATEWAY_UPSTREAM_POOL_SIZE = env_int("GATEWAY_UPSTREAM_POOL_SIZE", 1000, minimum=1)
# Under gunicorn's gevent worker, the events of open text streams are relayed by one loop per worker
# that writes them straight to the callers' connections (api/stream_loop.py); off: one greenlet each.
GATEWAY_STREAM_LOOP = env_bool("GATEWAY_STREAM_LOOP", True)
# A worker process further behind than this many seconds (core/overload.py) answers new /v1 calls
# 503 overloaded at once, unbilled, instead of letting them wait (api/shedding.py); behind nginx the
# call is then tried on another node (deploy/nginx.conf). 0: never shed.
GATEWAY_SHED_LAG_SECONDS = env_float("GATEWAY_SHED_LAG_SECONDS", 0.0, minimum=0.0)
