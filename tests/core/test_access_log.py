"""gunicorn's access log line, written by `AccessLogger` without gunicorn's generic atoms: the same
line gunicorn writes for the configured format, and gunicorn's own formatting for any other format."""

from __future__ import annotations

import datetime
from types import SimpleNamespace

import pytest
from gunicorn.config import Config
from gunicorn.glogging import Logger

from core.access_log import ACCESS_LOG_FORMAT, AccessLogger


def logged_line(logger_class: type[Logger], tmp_path, *, access_log_format: str, path_info: str) -> str:
    log_file = tmp_path / f"{logger_class.__name__}.log"
    config = Config()
    config.set("accesslog", str(log_file))
    config.set("access_log_format", access_log_format)
    logger = logger_class(config)
    response = SimpleNamespace(
        status="200 OK",
        sent=187,
        headers=[("Content-Type", "application/json"), ("X-Request-Id", "req_abc123")],
    )
    environ = {
        "REMOTE_ADDR": "10.0.0.7",
        "REQUEST_METHOD": "POST",
        "RAW_URI": f"{path_info}?key=sk-secret",
        "PATH_INFO": path_info,
        "QUERY_STRING": "key=sk-secret",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_AUTHORIZATION": "Bearer sk-secret",
    }
    request = SimpleNamespace(headers=[("AUTHORIZATION", "Bearer sk-secret")])
    logger.access(response, request, environ, datetime.timedelta(seconds=1, microseconds=234_567))
    for handler in logger.access_log.handlers:
        handler.flush()
    return log_file.read_text()


@pytest.mark.parametrize("path_info", ["/v1/images/generations", '/v1/odd"path'])
def test_it_writes_the_line_gunicorn_writes_for_the_configured_format(tmp_path, path_info):
    ours = logged_line(AccessLogger, tmp_path, access_log_format=ACCESS_LOG_FORMAT, path_info=path_info)
    gunicorns = logged_line(Logger, tmp_path, access_log_format=ACCESS_LOG_FORMAT, path_info=path_info)
    assert ours == gunicorns
    assert "sk-secret" not in ours
    assert ours.endswith(" 200 187 1234ms rid=req_abc123\n")


def test_any_other_format_is_formatted_by_gunicorn(tmp_path):
    other = '%(h)s %(r)s %(s)s "%(a)s"'
    ours = logged_line(AccessLogger, tmp_path, access_log_format=other, path_info="/v1/models")
    assert ours == logged_line(Logger, tmp_path, access_log_format=other, path_info="/v1/models")
    assert ours.startswith("10.0.0.7 POST /v1/models?key=sk-secret HTTP/1.1 200")
