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
  demo (SQLite) keep gthread threads. The gevent worker is gunicorn's, accepting new connections in
  bursts (core/gevent_worker.py: gunicorn's own accepts one per pass of the loop when it runs more
  than one worker, and under load new connections waited seconds in the kernel's queue).
- workers = cores: one process per core; more processes bought no throughput, only memory.
- worker_connections = 1000 (gevent): calls in flight per process, each a greenlet of a few KB; the
  database pool (DATABASE_POOL_MAX_SIZE = 16 per process) lends a connection only while a call talks
  to PostgreSQL, so 2 x 1000 calls share 32 connections.
- threads = 256 (gthread): the same role with OS threads. Without the pool (DATABASE_POOL_MAX_SIZE=0)
  every thread keeps its own connection: keep workers x threads under PostgreSQL's max_connections.
- glibc malloc arenas: set MALLOC_ARENA_MAX=2 in the environment (the Dockerfile and
  deploy/compose.yaml do). By default glibc gives threads up to 8 x cores arenas, each keeping the
  peak of the image bodies it once held; with the GIL, more arenas buy no speed, and the peak memory
  per worker drops.
- the garbage collector's young generation: collected every 20,000 allocations
  (GUNICORN_GC_GEN0_THRESHOLD), after the worker has frozen what it loaded (`post_worker_init`).
- keepalive 5 s: clients that reuse connections (the SDKs, wrk) skip the TCP handshake; an idle
  kept-alive connection waits in the poller (gthread) or in a parked greenlet (gevent).
- connection and request-head limits: each set below with why. gunicorn faces clients directly
  unless a proxy is put in front; it buffers nothing, so a client that sends slowly holds a
  greenlet or thread until it is done. The production answer is a buffering proxy (README,
  "Production"); these limits bound what a client can cost without one.
"""

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
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
    env_networks,
)

env_file_load(ROOT)  # DATABASE_URL may come from .env, as Django's settings read it

bind = os.environ.get("GATEWAY_BIND", "127.0.0.1:8000")


def control_socket_path(*, bind: str) -> str:
    """gunicorn's control socket (`gunicornc -s PATH`), one per instance: GUNICORN_CONTROL_SOCKET, else
    named after the address the instance binds, in a directory of this user's own (under
    XDG_RUNTIME_DIR, else the temporary directory). gunicorn's default is one path per user
    ($HOME/.gunicorn/gunicorn.ctl), which a second gateway on the host would take from the first."""
    configured = os.environ.get("GUNICORN_CONTROL_SOCKET")
    if configured:
        return configured
    directory = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()) / f"gateway-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    if directory.stat().st_uid != os.getuid():
        raise RuntimeError(f"{directory} belongs to another user: set GUNICORN_CONTROL_SOCKET")
    name = re.sub(r"[^A-Za-z0-9.]+", "-", bind).strip("-")
    if len(name) > 48:  # a socket's path is at most 107 bytes
        name = hashlib.sha256(bind.encode()).hexdigest()[:16]
    return str(directory / f"gunicorn-{name}.ctl")


control_socket = control_socket_path(bind=bind)
workers = env_int("WEB_CONCURRENCY", 2, minimum=1)
_database = database_from_url("DATABASE_URL", database_url(), base_dir=ROOT)
_on_postgres = _database["ENGINE"] == POSTGRESQL_ENGINE
GEVENT_WORKER = "core.gevent_worker.GeventWorker"
worker_class = os.environ.get("GUNICORN_WORKER_CLASS") or ("gevent" if _on_postgres else "gthread")
if worker_class == "gevent":
    worker_class = GEVENT_WORKER
# Calls in flight per gevent worker: each connection is a greenlet, a slow client's included. It is
# the bound on the process's memory and on what slow clients can take (a client trickling its request
# holds one until gunicorn has read it all: a buffering proxy in front shields it, README "Production").
worker_connections = env_int("GUNICORN_WORKER_CONNECTIONS", 1000, minimum=1)
threads = env_int("GUNICORN_THREADS", 256, minimum=1)
# Seconds a worker may go without telling the master it is alive before it is killed and replaced.
# Not a per-call limit: image calls can take minutes upstream, and the gateway enforces its own
# upstream deadlines (GATEWAY_RETRY_DEADLINE_SECONDS); a gevent worker whose event loop a CPU-bound
# call held this long is stuck, not slow (core.offload keeps hashing and decoding off it).
timeout = env_int("GUNICORN_TIMEOUT", 300, minimum=0)
# Seconds calls in flight get to finish after a restart or deploy signal; calls cut then are never
# charged (their holds expire and release_stale_holds releases them).
graceful_timeout = env_int("GUNICORN_GRACEFUL_TIMEOUT", 30, minimum=0)
# Seconds an idle kept-alive connection stays open for the client's next request: SDKs reuse their
# connections (no new TCP handshake per call); short, since each idle one holds a connection slot.
keepalive = env_int("GUNICORN_KEEPALIVE", 5, minimum=0)
# Request heads. gunicorn parses them itself and answers one over these limits with its own HTML
# error page, so they sit above the gateway's limits (GATEWAY_MAX_REQUEST_LINE_BYTES,
# GATEWAY_MAX_HEADER_FIELD_BYTES, GATEWAY_MAX_HEADER_BYTES; api.middleware.RequestLimitsMiddleware),
# which answer JSON 414/431: only a head over these gets gunicorn's page.
# - The request line (method, path, query, version), in bytes; 8190 is gunicorn's maximum.
limit_request_line = env_int("GUNICORN_LIMIT_REQUEST_LINE", 8190, minimum=0, maximum=8190)
# - Header lines per request (a browser sends ~20): more is gunicorn's HTML 431.
limit_request_fields = env_int("GUNICORN_LIMIT_REQUEST_FIELDS", 100, minimum=1, maximum=32768)
# - Bytes of one header line: twice gunicorn's default and the gateway's own limit (8 KiB); with 100
#   lines, a request head can take up to ~1.6 MB of a worker's memory while it is read.
limit_request_field_size = env_int("GUNICORN_LIMIT_REQUEST_FIELD_SIZE", 16384, minimum=1)
max_requests = env_int("GUNICORN_MAX_REQUESTS", 0, minimum=0)
max_requests_jitter = env_int("GUNICORN_MAX_REQUESTS_JITTER", 0, minimum=0)
# "-": stdout; a path: that file; empty: no access log (the usage records keep every /v1 call).
accesslog = os.environ.get("GUNICORN_ACCESSLOG", "-") or None
# The request line is logged without its query string: a key sent as ?key= must never reach a log.
access_log_format = ACCESS_LOG_FORMAT
logger_class = "core.access_log.AccessLogger"  # writes that format without gunicorn's atoms
# The proxies whose X-Forwarded-Proto gunicorn believes (wsgi.url_scheme): the same list the gateway
# believes X-Forwarded-For/-Proto/-Host from (GATEWAY_TRUSTED_PROXIES, settings.py); empty trusts none.
forwarded_allow_ips = ",".join(str(network) for network in env_networks("GATEWAY_TRUSTED_PROXIES"))


# Metrics (core/metrics.py): every worker writes its counts to files in PROMETHEUS_MULTIPROC_DIR and
# a scrape of /metrics, whichever worker answers it, adds them up. The hooks below run in the master.
METRICS_DIR = "PROMETHEUS_MULTIPROC_DIR"
_METRICS_DIR_CREATED = "GATEWAY_METRICS_DIR_CREATED"  # the directory on_starting made (removed on exit)


# A worker that dies without exiting (SIGKILL, the OOM killer) leaves its concurrency slots leased and
# its holds open; the master then runs `manage.py worker_gone <instance>:<pid>` in a process of its
# own (the master imports nothing of the application) to give them back at once. A worker that exits
# (a restart, a shutdown) leaves a mark in _EXITS_DIR first: it has finished its calls.
INSTANCE_ENV = "GATEWAY_INSTANCE_ID"  # core/process_identity.py
_EXITS_DIR = "GATEWAY_WORKER_EXITS_DIR"
_ABORTED = "GATEWAY_WORKER_ABORTED"


def on_starting(server: object) -> None:
    """Before the first worker starts (not again on a reload): a fresh metrics directory when none
    is set; one that is set is emptied of what a previous run left, so the totals never carry a dead
    run's counts. The workers inherit the variable before they import the application, which is when
    prometheus_client decides to share its values through files (with --preload, set it yourself).
    The instance's name and the directory of the workers' exit marks, inherited the same way."""
    os.environ.setdefault(INSTANCE_ENV, uuid.uuid4().hex[:12])
    os.environ[_EXITS_DIR] = tempfile.mkdtemp(prefix="gateway-exits-")
    if not os.environ.get(METRICS_DIR):
        os.environ[METRICS_DIR] = os.environ[_METRICS_DIR_CREATED] = tempfile.mkdtemp(
            prefix="gateway-metrics-"
        )
    directory = Path(os.environ[METRICS_DIR])
    directory.mkdir(parents=True, exist_ok=True)
    for leftover in directory.glob("*.db"):
        leftover.unlink(missing_ok=True)


def worker_abort(worker: object) -> None:
    """In a worker stopped by gunicorn's timeout (SIGABRT): its calls are cut, so it leaves no mark."""
    os.environ[_ABORTED] = "1"


def worker_exit(server: object, worker: object) -> None:
    """In a worker that exits (not one killed): the mark that it has no call left in flight."""
    directory = os.environ.get(_EXITS_DIR)
    if directory and not os.environ.get(_ABORTED):
        Path(directory, str(worker.pid)).touch()  # type: ignore[attr-defined]


def child_exit(server: object, worker: object) -> None:
    """A worker is gone: its live gauges (streams open) stop counting; its counters stay in the
    totals. prometheus_client is imported here, in the master, only once a worker has exited. A
    worker that left no exit mark died mid-call: `worker_gone` gives back its slots and holds."""
    from prometheus_client import multiprocess

    pid = worker.pid  # type: ignore[attr-defined]
    multiprocess.mark_process_dead(pid)
    mark = Path(os.environ.get(_EXITS_DIR, ""), str(pid))
    if os.environ.get(_EXITS_DIR) and mark.exists():
        mark.unlink(missing_ok=True)
        return
    instance = os.environ.get(INSTANCE_ENV)
    if not instance:  # on_starting never ran: no worker of this master owned a hold or a slot
        return
    subprocess.Popen(  # noqa: S603 - this interpreter, this project, a pid; reaped by the master
        [sys.executable, str(ROOT / "manage.py"), "worker_gone", f"{instance}:{pid}"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )


def on_exit(server: object) -> None:
    """Remove the metrics directory on_starting made (one given in the environment is kept), and the
    directory of exit marks."""
    created = os.environ.get(_METRICS_DIR_CREATED)
    if created and created == os.environ.get(METRICS_DIR):
        shutil.rmtree(created, ignore_errors=True)
    if os.environ.get(_EXITS_DIR):
        shutil.rmtree(os.environ[_EXITS_DIR], ignore_errors=True)


def post_worker_init(worker: object) -> None:
    """Do before the first call what the first call would do: import the URLconf, and with it every
    view and what they import (~0.35 s on 2 cores), open the cache client (importing redis-py) and
    the database pool, and read the configuration generation (which opens the Redis connection that
    tells the process when it changes). Without this, the first call of every new worker (after a
    deploy, a restart or max_requests) takes ~0.4 s. Nothing here may stop the worker from starting: a
    database or cache that cannot be reached now is reported by the first call that needs it.

    Then set what is loaded aside from the garbage collector (`gc.freeze`): the objects of the
    modules, classes and settings live as long as the process, yet every full collection walked them
    again, and a full collection stops every call and stream of the worker while it runs. Frozen,
    a full collection walks only what the calls made (docs/benchmarks.md, "Serving settings", gives
    the pauses and what they did to streams).

    Last, the young generation is collected every GUNICORN_GC_GEN0_THRESHOLD allocations (20,000;
    Python's 700 made several collections in every call, each walking the objects of the calls in
    flight, though a finished call leaves nothing in cycles for them to find; 0 keeps Python's)."""
    import gc

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
    gc.collect()  # what the start left unreachable is freed, not frozen
    gc.freeze()
    gen0 = env_int("GUNICORN_GC_GEN0_THRESHOLD", 20_000, minimum=0)
    if gen0:
        gc.set_threshold(gen0, *gc.get_threshold()[1:])
