"""gunicorn settings. Every value can be set from the environment; see README, "Production".

gthread workers: a call spends nearly all its time waiting on the upstream, so threads (not
processes) carry the concurrency; a few processes use the cores.
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
