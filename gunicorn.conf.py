"""gunicorn settings. Every value can be set from the environment; see README, "Production".

gthread workers: a call spends nearly all its time waiting on the upstream, so threads (not
processes) carry the concurrency; a few processes use the cores. The values below were chosen from
`make bench` runs on a 2-core machine (docs/benchmarks.md, "Serving settings"):

- workers = cores (2): one process per core. 3 or 4 processes on 2 cores measured the same
  throughput and overhead (the request path is CPU-bound, and the threads of one process rarely wait
  on each other's GIL for long) at ~90 MB more memory each.
- threads = 256: calls in flight per process. A thread waiting on an upstream costs little memory
  and holds no database connection (the pool, DATABASE_POOL_MAX_SIZE = 16 per process, lends one
  only while the thread talks to PostgreSQL), so 2 x 256 threads carry 500 slow calls on 32
  connections. At fast upstreams 16 and 256 threads measured the same. Without the pool
  (DATABASE_POOL_MAX_SIZE=0) every thread keeps its own connection: lower the threads to keep
  workers x threads under PostgreSQL's max_connections.
- glibc malloc arenas: 2 (GUNICORN_MALLOC_ARENAS). By default glibc gives threads up to 8 x cores
  arenas, each keeping the peak of the image bodies it once held; with the GIL, more arenas buy no
  speed. Measured with 4 MB answers: 743 -> 472 MB peak per worker (docs/benchmarks.md). A fixed
  mmap threshold (MALLOC_MMAP_THRESHOLD_) was measured too: no less memory, 8 ms more CPU a call.
- keepalive 5 s: idle keep-alive connections wait in the worker's poller, not in a thread, so
  clients that reuse connections (the SDKs, wrk) skip the TCP handshake at no thread cost.
"""

import ctypes
import ctypes.util
import os

bind = os.environ.get("GATEWAY_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "gthread"
threads = int(os.environ.get("GUNICORN_THREADS", "256"))
# Image calls can take minutes upstream; the gateway enforces its own upstream deadlines.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "300"))
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "30"))
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "5"))
max_requests = int(os.environ.get("GUNICORN_MAX_REQUESTS", "0"))
max_requests_jitter = int(os.environ.get("GUNICORN_MAX_REQUESTS_JITTER", "0"))
accesslog = os.environ.get("GUNICORN_ACCESSLOG", "-")
# The request line is logged without its query string: a key sent as ?key= must never reach a log.
access_log_format = '%(h)s "%(m)s %(U)s %(H)s" %(s)s %(B)s %(M)sms rid=%({x-request-id}o)s'
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


_mallopt(M_ARENA_MAX, int(os.environ.get("GUNICORN_MALLOC_ARENAS", "2")), "MALLOC_ARENA_MAX")
