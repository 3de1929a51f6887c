"""gunicorn settings. Every value can be set from the environment; see README, "Production".

gthread workers: a call spends nearly all its time waiting on the upstream, so threads (not
processes) carry the concurrency; a few processes use the cores. The values below were chosen from
`make bench` runs on a 2-core machine (docs/benchmarks.md, "Serving settings"):

- workers = cores (2): one process per core. The request path is CPU- and round-trip-bound, not
  process-bound; more processes on 2 cores only add memory (~90 MB each) and database connections.
- threads = 16 while every thread keeps its own database connection (CONN_MAX_AGE > 0, no pool):
  workers x threads connections must stay under PostgreSQL's max_connections (100 by default); at
  64 or 256 threads the bench ran out of connections ("too many clients") and throughput did not
  rise. Calls in flight are capped at workers x threads, so 500 slow calls in flight need
  GUNICORN_THREADS=256 together with DATABASE_POOL_MAX_SIZE (a bounded pool per process) and a
  pipeline that gives its connection back before the upstream call (docs/benchmarks.md).
- keepalive 5 s: idle keep-alive connections wait in the worker's poller, not in a thread, so
  clients that reuse connections (the SDKs, wrk) skip the TCP handshake at no thread cost.
"""

import os

bind = os.environ.get("GATEWAY_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "gthread"
threads = int(os.environ.get("GUNICORN_THREADS", "16"))
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
