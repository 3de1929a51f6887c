"""gunicorn's access log line, written without building gunicorn's generic atoms for every request.

gunicorn formats `access_log_format` from a dictionary of every atom it knows: the whole WSGI environ,
every request and response header, the user decoded from a Basic Authorization header and a
strftime'd timestamp, each string escaped (its cost: docs/benchmarks.md). `AccessLogger` writes the
line of `ACCESS_LOG_FORMAT`, the format gunicorn.conf.py sets, from the five values it uses, through
the same logging handler (stdout or the file of GUNICORN_ACCESSLOG, reopened on USR1 by gunicorn). Any
other format (`--access-logformat`) is formatted by gunicorn itself.

With LOG_FORMAT=json, gunicorn's own log and the access log are JSON lines too (python-json-logger),
the access line's values as fields of their own; with text, one line per record, control characters
escaped (core/log_lines.py). Health probes that pass (GET /healthz, /readyz, every
second from a load balancer) are not logged; a failing one is.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import MutableMapping
from typing import Any

from gunicorn.glogging import Logger

from core.log_lines import LineFormatter

# The request line without its query string: a key sent as ?key= must never reach a log.
ACCESS_LOG_FORMAT = '%(h)s "%(m)s %(U)s %(H)s" %(s)s %(B)s %(M)sms rid=%({x-request-id}o)s'


# gunicorn's own lines in the text format, written one line per record (core/log_lines.py): a path
# or a header in a message has its control characters escaped.
ERROR_FORMAT = "%(asctime)s [%(process)d] [%(levelname)s] %(message)s"
ERROR_DATE_FORMAT = "[%Y-%m-%d %H:%M:%S %z]"

# Polled every second by load balancers: an answer 2xx is not worth a line (api/health.py).
PROBE_PATHS = frozenset({"/healthz", "/readyz"})


def log_format_json() -> bool:
    """LOG_FORMAT=json (the settings refuse any value but text and json)."""
    return os.environ.get("LOG_FORMAT", "text").strip().lower() == "json"


def json_formatter() -> Any:
    """The JSON formatter of every log line, Django's and gunicorn's: time, level, logger, message, and
    any fields the call passed as `extra`."""
    from pythonjsonlogger.json import JsonFormatter

    return JsonFormatter(
        "{asctime}{levelname}{name}{message}",
        style="{",
        rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
    )


def _safe(value: Any) -> Any:
    """As gunicorn's SafeAtoms: strings get their double quotes escaped, other values stay."""
    return value.replace('"', '\\"') if isinstance(value, str) else value


class AccessLogger(Logger):
    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        if log_format_json():
            formatters = {self.error_log: json_formatter(), self.access_log: json_formatter()}
        else:
            formatters = {
                self.error_log: LineFormatter(ERROR_FORMAT, ERROR_DATE_FORMAT),
                self.access_log: LineFormatter("%(message)s"),
            }
        for log, formatter in formatters.items():
            for handler in log.handlers:
                handler.setFormatter(formatter)

    def access(self, resp: Any, req: Any, environ: MutableMapping[str, Any], request_time: Any) -> None:
        if not self.access_log_enabled:
            return
        if self.cfg.access_log_format != ACCESS_LOG_FORMAT:
            super().access(resp, req, environ, request_time)
            return
        status = resp.status
        if isinstance(status, str):
            status = status.split(None, 1)[0]
        path = environ.get("PATH_INFO")
        if path in PROBE_PATHS and str(status).startswith("2"):
            return
        request_id = "-"
        for name, value in resp.headers:
            if name.lower() == "x-request-id":
                request_id = value
                break
        milliseconds = request_time.seconds * 1000 + int(request_time.microseconds / 1000)
        line = '%s "%s %s %s" %s %s %sms rid=%s' % (  # noqa: UP031 - the format gunicorn would apply
            _safe(environ.get("REMOTE_ADDR", "-")),
            _safe(environ.get("REQUEST_METHOD")),
            _safe(path),
            _safe(environ.get("SERVER_PROTOCOL")),
            _safe(status),
            getattr(resp, "sent", None),
            milliseconds,
            _safe(request_id),
        )
        fields = {
            "client": environ.get("REMOTE_ADDR", "-"),
            "method": environ.get("REQUEST_METHOD"),
            "path": path,
            "status": int(status) if str(status).isdigit() else status,
            "bytes": getattr(resp, "sent", None),
            "latency_ms": milliseconds,
            "request_id": request_id,
        }
        try:
            # The fields are ignored by the text formatter and become the JSON line's fields.
            self.access_log.info("%s", line, extra=fields)
        except Exception:
            self.error(traceback.format_exc())
