"""gunicorn settings. Every value can be set from the environment; see README, "Production".

The values were chosen from `make bench` and `bench/ab.py` runs on a 2-core machine; the figures
behind each choice are in docs/benchmarks.md, "Serving settings".

- worker class: gevent on PostgreSQL, gthread otherwise (GUNICORN_WORKER_CLASS). The application is
  the same synchronous WSGI code either way; the worker decides how calls that wait wait. An image call
  spends nearly all its time waiting on its upstream, so a process must hold hundreds of calls in
  flight: gthread gives each an OS thread, whose contention for the GIL costs CPU on fast calls;
  gevent runs each call in a greenlet of one thread, so slow calls cost nothing while they wait.
  psycopg, redis-py and requests yield to other calls while they wait on their sockets (gunicorn
  patches the standard library before it loads the application). SQLite's driver cannot: a call
  waiting for SQLite's write lock would stop every other call in its process, so development and the
  demo (SQLite) keep gthread threads.
- workers = cores: one process per core; more processes bought no throughput, only memory.
- worker_connections = 1000 (gevent): calls in flight per process, each a greenlet of a few KB; the
  database pool (DATABASE_POOL_MAX_SIZE = 16 per process) lends a connection only while a call talks
  to PostgreSQL, so 2 x 1000 calls share 32 connections.
- threads = 256 (gthread): the same role with OS threads. Without the pool (DATABASE_POOL_MAX_SIZE=0)
  every thread keeps its own connection: keep workers x threads under PostgreSQL's max_connections.
- glibc malloc arenas: 2 (GUNICORN_MALLOC_ARENAS). By default glibc gives threads up to 8 x cores
  arenas, each keeping the peak of the image bodies it once held; with the GIL, more arenas buy no
  speed, and the peak memory per worker drops.
- keepalive 5 s: clients that reuse connections (the SDKs, wrk) skip the TCP handshake; an idle
  kept-alive connection waits in the poller (gthread) or in a parked greenlet (gevent).
"""

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

# The project's environment helpers and access log only: nothing here may import what the workers'
# gevent patching must come before (ssl, psycopg, requests).
from core.access_log import ACCESS_LOG_FORMAT  # noqa: E402
from gateway_project.env import (  # noqa: E402
    POSTGRESQL_ENGINE,
    database_from_url,
    database_url,
    env_file_load,
    env_int,
)

env_file_load(ROOT)  # DATABASE_URL may come from .env, as Django's settings read it

bind = os.environ.get("GATEWAY_BIND", "127.0.0.1:8000")
workers = env_int("WEB_CONCURRENCY", 2, minimum=1)
_database = database_from_url("DATABASE_URL", database_url(), base_dir=ROOT)
_on_postgres = _database["ENGINE"] == POSTGRESQL_ENGINE
worker_class = os.environ.get("GUNICORN_WORKER_CLASS") or ("gevent" if _on_postgres else "gthread")
worker_connections = env_int("GUNICORN_WORKER_CONNECTIONS", 1000, minimum=1)
threads = env_int("GUNICORN_THREADS", 256, minimum=1)
# Image calls can take minutes upstream; the gateway enforces its own upstream deadlines.
timeout = env_int("GUNICORN_TIMEOUT", 300, minimum=0)
graceful_timeout = env_int("GUNICORN_GRACEFUL_TIMEOUT", 30, minimum=0)
keepalive = env_int("GUNICORN_KEEPALIVE", 5, minimum=0)
max_requests = env_int("GUNICORN_MAX_REQUESTS", 0, minimum=0)
max_requests_jitter = env_int("GUNICORN_MAX_REQUESTS_JITTER", 0, minimum=0)
# "-": stdout; a path: that file; empty: no access log (the usage records keep every /v1 call).
accesslog = os.environ.get("GUNICORN_ACCESSLOG", "-") or None
# The request line is logged without its query string: a key sent as ?key= must never reach a log.
access_log_format = ACCESS_LOG_FORMAT
logger_class = "core.access_log.AccessLogger"  # writes that format without gunicorn's atoms
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")


M_ARENA_MAX = -8


def _mallopt(option: int, value: int, env_name: str) -> None:
    """mallopt() in the master, before the workers are forked (they inherit it); glibc's own
    MALLOC_*_ environment variable wins when set. Not glibc: nothing to do."""
    if value <= 0 or env_name in os.environ:
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(option, value)
    except (OSError, AttributeError):
        pass


_mallopt(M_ARENA_MAX, env_int("GUNICORN_MALLOC_ARENAS", 2, minimum=0), "MALLOC_ARENA_MAX")


def post_worker_init(worker: object) -> None:
    """Do before the first call what the first call would do: import the URLconf, and with it every
    view and what they import (~0.35 s on 2 cores), open the cache client (importing redis-py) and
    the database pool, and read the configuration generation (which opens the Redis connection that
    tells the process when it changes). Without this, the first call of every new worker (after a
    deploy, a restart or max_requests) takes ~0.4 s. Nothing here may stop the worker from starting: a
    database or cache that cannot be reached now is reported by the first call that needs it."""
    from django.core.cache import cache
    from django.db import connection
    from django.urls import get_resolver

    from core.config_cache import config_generation

    get_resolver().url_patterns  # noqa: B018 - the property imports the URLconf
    try:
        cache.get("gateway:worker-warm-up")
        config_generation()
        connection.ensure_connection()
    except Exception as error:
        worker.log.warning("worker warm-up: %s", error)  # type: ignore[attr-defined]
    finally:
        connection.close()  # back to the pool; the request greenlets take their own
