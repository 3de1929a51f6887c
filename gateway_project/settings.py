"""Settings for Image Gateway, read from the environment (see .env.example and README.md).

A bad value stops the process at start with a message naming the variable.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from gateway_project.env import (
    database_from_url,
    env_bool,
    env_int,
    env_list,
    env_public_url,
    env_str,
    env_timezone,
    env_url,
    load_dotenv,
)

BASE_DIR = Path(__file__).resolve().parent.parent
load_dotenv(BASE_DIR / ".env")

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

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    # The project package holds cross-app operator commands (loadconfig) and the error model.
    "gateway_project",
    "accounts",
    "groups",
    "keys",
    "billing",
    "images",
]

MIDDLEWARE = [
    "gateway_project.middleware.RequestIdMiddleware",
    "gateway_project.middleware.ApiErrorMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

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

DATABASES = {
    "default": database_from_url(
        "DATABASE_URL",
        env_str("DATABASE_URL", "sqlite:///db.sqlite3") or "sqlite:///db.sqlite3",
        base_dir=BASE_DIR,
    )
}
# Connections are reused across requests of a thread; 0 closes them after every request.
DATABASES["default"]["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several gunicorn threads write to one file: wait for the lock instead of failing at once.
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}

REDIS_URL = env_url("REDIS_URL")
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "igw",
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

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(BASE_DIR / "staticfiles")) or BASE_DIR / "staticfiles")
MEDIA_ROOT = Path(env_str("MEDIA_ROOT", str(BASE_DIR / "media")) or BASE_DIR / "media")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
FORMS_URLFIELD_ASSUME_HTTPS = True  # Django 6 behaviour now; silences the transition warning

SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", 60 * 60 * 12, minimum=60)
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = GATEWAY_PUBLIC_URL.startswith("https://")
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "gateway_project.errors.drf_exception_handler",
    "UNAUTHENTICATED_USER": None,
}

# Money: every amount is a Decimal with this many places (¥0.0001).
MONEY_DECIMAL_PLACES = 4
MONEY_QUANTUM = Decimal(1).scaleb(-MONEY_DECIMAL_PLACES)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO") or "INFO"},
    # Django logs every 4xx as a warning; the gateway's own answers are expected, not noise.
    "loggers": {"django.request": {"level": "ERROR"}},
}
