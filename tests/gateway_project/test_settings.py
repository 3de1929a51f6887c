import gc
import os
import runpy
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test import override_settings

from gateway_project.env import (
    database_from_url,
    env_bool,
    env_int,
    env_public_url,
    env_timezone,
    load_dotenv,
)

ROOT = Path(__file__).resolve().parents[2]


def test_it_reads_sqlite_and_postgres_urls(tmp_path):
    assert database_from_url("DATABASE_URL", "sqlite:///db.sqlite3", base_dir=tmp_path)["NAME"] == str(
        tmp_path / "db.sqlite3"
    )
    pg = database_from_url(
        "DATABASE_URL", "postgres://u:p%40ss@db.internal:6543/gw?sslmode=require", base_dir=tmp_path
    )
    assert (pg["ENGINE"], pg["NAME"], pg["USER"], pg["PASSWORD"], pg["HOST"], pg["PORT"]) == (
        "django.db.backends.postgresql",
        "gw",
        "u",
        "p@ss",
        "db.internal",
        "6543",
    )
    assert pg["OPTIONS"] == {"sslmode": "require"}
    assert (
        database_from_url("DATABASE_URL", "postgres://u@%2Ftmp%2Fpg/gw", base_dir=tmp_path)["HOST"]
        == "/tmp/pg"
    )


def test_it_refuses_unsupported_database_urls_without_echoing_passwords(tmp_path):
    with pytest.raises(ImproperlyConfigured) as info:
        database_from_url("DATABASE_URL", "mysql://root:hunter2@db/gw", base_dir=tmp_path)
    assert "hunter2" not in str(info.value)
    assert "DATABASE_URL" in str(info.value)


@pytest.mark.parametrize(
    ("reader", "name", "value"),
    [
        (lambda: env_bool("X_BOOL"), "X_BOOL", "maybe"),
        (lambda: env_int("X_INT", 1, minimum=1), "X_INT", "0"),
        (lambda: env_int("X_INT", 1), "X_INT", "1.5"),
        (lambda: env_timezone("X_TZ"), "X_TZ", "Mars/Olympus"),
        (lambda: env_public_url("X_URL", "http://x"), "X_URL", "gateway.example.com"),
    ],
)
def test_each_reader_names_the_variable_when_the_value_is_bad(monkeypatch, reader, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=name):
        reader()


def _check(env: dict, *command: str) -> subprocess.CompletedProcess:
    """`manage.py COMMAND` (`check` by default) with `env` and without the secrets or DEBUG."""
    clean = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "GATEWAY_KEY_PEPPER", "DEBUG")}
    clean.update({"GATEWAY_ENV_FILE": "", **env}, DJANGO_SETTINGS_MODULE="gateway_project.settings")
    return subprocess.run(
        [sys.executable, "manage.py", *(command or ("check",))],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_production_refuses_to_start_without_a_secret_key():
    result = _check({"DEBUG": "0", "GATEWAY_KEY_PEPPER": "p"})
    assert result.returncode == 2
    assert "SECRET_KEY is not set" in result.stderr
    assert "Traceback" not in result.stderr


def test_production_refuses_to_start_without_a_key_pepper():
    result = _check({"DEBUG": "0", "SECRET_KEY": "s"})
    assert result.returncode == 2
    assert "GATEWAY_KEY_PEPPER is not set" in result.stderr


def test_every_model_change_has_its_migration_and_the_check_needs_no_secrets(tmp_path):
    # A bare checkout (no .env, no secrets, DEBUG off) can check for missing migrations; every other
    # command still refuses to start without the secrets (the two tests above).
    database = {"DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}  # its history is read
    result = _check({"DEBUG": "0", **database}, "makemigrations", "--check", "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No changes detected" in result.stdout


def test_static_files_are_collected_with_production_settings_and_no_secrets(tmp_path):
    # The image build (Dockerfile) collects them this way: DEBUG off, no secrets at build time.
    target = tmp_path / "static"
    result = _check({"DEBUG": "0", "STATIC_ROOT": str(target)}, "collectstatic", "--noinput", "-v0")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (target / "admin" / "css" / "base.css").is_file()
    assert any(target.glob("drf_spectacular_sidecar/**/*.js"))


def test_migrate_still_refuses_to_start_without_the_secrets():
    result = _check({"DEBUG": "0"}, "migrate", "--plan")
    assert result.returncode == 2
    assert "SECRET_KEY is not set" in result.stderr


def test_a_bad_value_fails_at_start_with_a_clear_message():
    result = _check({"DEBUG": "1", "GATEWAY_TIMEZONE": "Nowhere/Land"})
    assert result.returncode == 2
    assert "GATEWAY_TIMEZONE='Nowhere/Land' is invalid" in result.stderr


def test_debug_starts_with_development_defaults():
    assert _check({"DEBUG": "1"}).returncode == 0


def test_a_dotenv_file_supplies_what_the_environment_does_not(tmp_path):
    env_file = tmp_path / "gateway.env"
    env_file.write_text(
        "# comment\nDEBUG=1\nexport SECRET_KEY='from-the-file'\nGATEWAY_TIMEZONE=Nowhere/Land\n"
    )
    # The file's DEBUG=1 lets the check start without secrets; the real environment wins over the file.
    assert _check({"GATEWAY_ENV_FILE": str(env_file), "GATEWAY_TIMEZONE": "UTC"}).returncode == 0
    failing = _check({"GATEWAY_ENV_FILE": str(env_file)})
    assert failing.returncode == 2
    assert "GATEWAY_TIMEZONE='Nowhere/Land'" in failing.stderr


def test_it_refuses_a_dotenv_line_it_cannot_read_naming_the_line(tmp_path, monkeypatch):
    env_file = tmp_path / "gateway.env"
    env_file.write_text('X_QUOTED="a b"\nX_SPACED = 1\n')
    monkeypatch.delenv("X_QUOTED", raising=False)
    with pytest.raises(ImproperlyConfigured, match=r"gateway.env:2: expected KEY=VALUE"):
        load_dotenv(env_file)
    assert "X_QUOTED" not in os.environ  # nothing of a refused file is read


def test_it_reads_quoted_dotenv_values_without_overriding_the_environment(tmp_path, monkeypatch):
    env_file = tmp_path / "gateway.env"
    env_file.write_text("export X_ONE='single quoted'\nX_TWO=\"double quoted\"\nX_THREE=from-file\n")
    for name in ("X_ONE", "X_TWO"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("X_THREE", "from-environment")
    load_dotenv(env_file)
    assert (os.environ["X_ONE"], os.environ["X_TWO"], os.environ["X_THREE"]) == (
        "single quoted",
        "double quoted",
        "from-environment",
    )


def test_gunicorn_names_a_bad_number_in_its_settings():
    clean = {k: v for k, v in os.environ.items() if k != "WEB_CONCURRENCY"}
    result = subprocess.run(
        [sys.executable, "-c", "import runpy; runpy.run_path('gunicorn.conf.py')"],
        cwd=ROOT,
        env={**clean, "GATEWAY_ENV_FILE": "", "WEB_CONCURRENCY": "two"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "WEB_CONCURRENCY='two' is invalid" in result.stderr


def test_make_writes_a_development_env_once(tmp_path):
    import shutil

    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "dev_env.py", tmp_path / "scripts" / "dev_env.py")
    subprocess.run([sys.executable, "scripts/dev_env.py"], cwd=tmp_path, check=True, capture_output=True)
    first = (tmp_path / ".env").read_text()
    assert "DEBUG=1" in first
    assert (
        len([line for line in first.splitlines() if line.startswith(("SECRET_KEY=", "GATEWAY_KEY_PEPPER="))])
        == 2
    )
    subprocess.run([sys.executable, "scripts/dev_env.py"], cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / ".env").read_text() == first  # never rewritten: the key pepper must stay


def _printed(script: str, *, env: dict[str, str], read: tuple[str, ...]) -> str:
    """What `script` prints in a fresh process, with only `env` set among the variables in `read`."""
    clean = {k: v for k, v in os.environ.items() if k not in read}
    clean.update({"GATEWAY_ENV_FILE": "", **env})
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _gunicorn_setting(env: dict[str, str], name: str = "worker_class") -> str:
    """A setting of gunicorn.conf.py, loaded as gunicorn loads it (a file run as a module)."""
    return _printed(
        f"import runpy; print(runpy.run_path('gunicorn.conf.py')[{name!r}])",
        env=env,
        read=("DATABASE_URL", "GUNICORN_WORKER_CLASS", "GUNICORN_ACCESSLOG"),
    )


def _database_options(env: dict[str, str]) -> str:
    """The database OPTIONS that gateway_project.settings configures."""
    return _printed(
        "from gateway_project import settings as s;"
        "print(sorted(s.DATABASES['default'].get('OPTIONS', {}).items()))",
        env={"DEBUG": "1", **env},
        read=(
            "DATABASE_URL",
            "DATABASE_POOL_MAX_SIZE",
            "DATABASE_PREPARED_STATEMENTS",
            "DEBUG",
            "SECRET_KEY",
            "GATEWAY_KEY_PEPPER",
        ),
    )


def test_prepared_statements_are_a_postgresql_connection_option_that_can_be_turned_off():
    postgres = "postgres://u:p@db.internal/gateway"
    assert "('prepare_threshold', 0)" in _database_options({"DATABASE_URL": postgres})
    off = {"DATABASE_URL": postgres, "DATABASE_PREPARED_STATEMENTS": "0"}
    assert "('prepare_threshold', None)" in _database_options(off)
    assert "prepare_threshold" not in _database_options({"DATABASE_URL": "sqlite:///db.sqlite3"})


def test_the_access_log_goes_to_stdout_to_a_file_or_nowhere(tmp_path):
    assert _gunicorn_setting({}, "accesslog") == "-"
    assert _gunicorn_setting({"GUNICORN_ACCESSLOG": str(tmp_path / "a.log")}, "accesslog") == str(
        tmp_path / "a.log"
    )
    assert _gunicorn_setting({"GUNICORN_ACCESSLOG": ""}, "accesslog") == "None"
    assert _gunicorn_setting({}, "logger_class") == "core.access_log.AccessLogger"


GEVENT = "core.gevent_worker.GeventWorker"


def test_gunicorn_runs_gevent_workers_on_postgresql_and_threads_on_sqlite(tmp_path):
    assert _gunicorn_setting({"DATABASE_URL": "postgres://u:p@db.internal/gateway"}) == GEVENT
    assert _gunicorn_setting({"DATABASE_URL": "sqlite:///db.sqlite3"}) == "gthread"
    assert _gunicorn_setting({}) == "gthread"  # the development default is SQLite
    # DATABASE_URL from the deployment's .env decides it as it decides Django's database.
    env_file = tmp_path / "gateway.env"
    env_file.write_text("DATABASE_URL=postgresql://u:p@db.internal/gateway\n")
    assert _gunicorn_setting({"GATEWAY_ENV_FILE": str(env_file)}) == GEVENT
    # An explicit choice wins.
    assert (
        _gunicorn_setting({"DATABASE_URL": "postgres://u:p@db/g", "GUNICORN_WORKER_CLASS": "gthread"})
        == "gthread"
    )
    # gevent named is the gateway's gevent worker (core/gevent_worker.py).
    assert (
        _gunicorn_setting({"DATABASE_URL": "sqlite:///db.sqlite3", "GUNICORN_WORKER_CLASS": "gevent"})
        == GEVENT
    )


class _Worker:
    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.log = self

    def warning(self, message: str, *args: object) -> None:
        self.warnings.append(message % args)


@pytest.fixture
def _post_worker_init():
    """The hook, as gunicorn runs it in a new worker; what it froze is given back to the collector
    afterwards, since here the worker is the test process."""
    thresholds = gc.get_threshold()
    yield runpy.run_path(str(ROOT / "gunicorn.conf.py"))["post_worker_init"]
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.django_db(transaction=True)  # outside a transaction, as a worker starts
def test_a_new_worker_loads_the_urlconf_and_gives_its_database_connection_back(_post_worker_init):
    worker = _Worker()
    _post_worker_init(worker)
    assert "gateway_project.urls" in sys.modules
    if connection.vendor == "postgresql":  # the SQLite test database lives in memory: never closed
        assert connection.connection is None
    assert worker.warnings == []


def test_a_new_worker_starts_even_when_its_cache_is_unreachable(_post_worker_init):
    unreachable = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:9/0",
        }
    }
    worker = _Worker()
    with override_settings(CACHES=unreachable):
        _post_worker_init(worker)
    assert len(worker.warnings) == 1
    assert worker.warnings[0].startswith("worker warm-up:")


class _Cycle:
    itself: object = None


@pytest.mark.django_db(transaction=True)
def test_a_new_worker_sets_what_it_loaded_aside_from_the_collectors_passes(_post_worker_init):
    loaded = [{"a module's table": []}]  # a container the collector tracks, alive from the start on
    cycle = _Cycle()
    cycle.itself = cycle
    left_over = weakref.ref(cycle)
    gc.collect()  # it survives into the oldest generation, which only a full collection walks
    del cycle  # garbage now, in a cycle: refcounting cannot free it
    _post_worker_init(_Worker())
    assert gc.get_freeze_count() > 0
    assert not any(thing is loaded for thing in gc.get_objects())  # no full collection walks it again
    assert left_over() is None  # what the start left unreachable was freed, not frozen for good
    made_after = [[]]
    assert any(thing is made_after for thing in gc.get_objects())  # the calls' objects are collected


GUNICORN_LIMITS = {
    # setting: (environment variable, default, an override)
    "limit_request_line": ("GUNICORN_LIMIT_REQUEST_LINE", "8190", "6000"),
    "limit_request_fields": ("GUNICORN_LIMIT_REQUEST_FIELDS", "100", "50"),
    "limit_request_field_size": ("GUNICORN_LIMIT_REQUEST_FIELD_SIZE", "16384", "12000"),
    "keepalive": ("GUNICORN_KEEPALIVE", "5", "2"),
    "worker_connections": ("GUNICORN_WORKER_CONNECTIONS", "1000", "500"),
    "timeout": ("GUNICORN_TIMEOUT", "300", "120"),
    "graceful_timeout": ("GUNICORN_GRACEFUL_TIMEOUT", "30", "60"),
}


@pytest.mark.parametrize("name", sorted(GUNICORN_LIMITS))
def test_gunicorn_sets_its_connection_limits_deliberately_and_from_the_environment(name):
    variable, default, override = GUNICORN_LIMITS[name]

    assert _gunicorn_setting({}, name) == default
    assert _gunicorn_setting({variable: override}, name) == override


def test_gunicorns_request_head_limits_are_above_the_gateways_own():
    """gunicorn answers a head over its limits with its own HTML page: the gateway's JSON 431 and 414
    (api.middleware.RequestLimitsMiddleware) must come first."""
    line = int(_gunicorn_setting({}, "limit_request_line"))
    field = int(_gunicorn_setting({}, "limit_request_field_size"))
    fields = int(_gunicorn_setting({}, "limit_request_fields"))

    assert settings.GATEWAY_MAX_REQUEST_LINE_BYTES + len("GET  HTTP/1.1") < line
    assert field > settings.GATEWAY_MAX_HEADER_FIELD_BYTES
    assert fields * field > settings.GATEWAY_MAX_HEADER_BYTES


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("setting", "young"),
    [(None, 20_000), ("5000", 5_000), ("0", None)],  # None: Python's own threshold stays
)
def test_a_new_worker_collects_its_young_objects_every_gc_gen0_threshold_allocations(
    _post_worker_init, monkeypatch, setting, young
):
    python_default = gc.get_threshold()
    if setting is None:
        monkeypatch.delenv("GUNICORN_GC_GEN0_THRESHOLD", raising=False)
    else:
        monkeypatch.setenv("GUNICORN_GC_GEN0_THRESHOLD", setting)

    _post_worker_init(_Worker())

    expected = python_default if young is None else (young, *python_default[1:])
    assert gc.get_threshold() == expected
