"""The text log writes one line per record: a caller's control characters in a message are escaped,
a traceback's lines are indented below its record (core/log_lines.py)."""

from __future__ import annotations

import logging
import sys

from core.access_log import ACCESS_LOG_FORMAT, AccessLogger
from core.log_lines import LineFormatter, line_escape
from tests.core.test_access_log import logged_line


def _record(msg: str, *args: object, exc_info=None) -> logging.LogRecord:
    return logging.LogRecord("gateway.call", logging.INFO, __file__, 1, msg, args, exc_info)


def test_a_message_with_line_breaks_and_control_characters_is_one_line():
    model = "x\nusage_record_lost {}\r\x00\x1b[31m\x85\u2028\u2029\x7fy"
    line = LineFormatter("%(levelname)s %(message)s").format(_record("call model=%s", model))

    assert line == "INFO call model=x\\nusage_record_lost {}\\r\\x00\\x1b[31m\\x85\\u2028\\u2029\\x7fy"
    assert len(line.splitlines()) == 1


def test_text_without_control_characters_is_left_as_it_is():
    text = 'alpha-image-2 "quoted" \\n café 漢字 \U0001f600'
    assert line_escape(text) == text


def test_a_traceback_keeps_its_lines_indented_under_its_record():
    try:
        raise ValueError("bad model\nusage_record_lost {}")
    except ValueError:
        record = _record("could not write %s", "a\nb", exc_info=sys.exc_info())
    line = LineFormatter("%(message)s").format(record)

    first, *rest = line.split("\n")
    assert first == "could not write a\\nb"
    assert rest and all(part.startswith("  ") for part in rest)
    assert "  usage_record_lost {}" in rest


def test_a_path_with_a_newline_stays_on_its_access_log_line(tmp_path):
    line = logged_line(AccessLogger, tmp_path, access_log_format=ACCESS_LOG_FORMAT, path_info="/v1/x\nforged")
    assert line.count("\n") == 1
    assert '"POST /v1/x\\nforged HTTP/1.1" 200' in line
