"""One log record, one line: the text log's formatter escapes every control character of a message.

A caller's values reach log lines (a model name, a path, an error's text). Unescaped, a newline in one
of them would start a line of the caller's making, which a reader of the log, or a tool such as
`usage_records_restore`, would take for the gateway's own. So the message of every record (its
arguments included) has its control characters (C0, DEL, C1, and the Unicode line and paragraph
separators) written as `\\n`, `\\x00`, `\\u2028`...; a traceback keeps its lines, each indented, so
that every line starting in the first column is the start of a record. The JSON format escapes its
values itself (python-json-logger).
"""

from __future__ import annotations

import logging
import re
from typing import Any

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def line_escape(text: str) -> str:
    """`text` with its control characters escaped: one line, whatever it holds."""
    return _CONTROL.sub(_escaped, text)


def _indented(text: str) -> str:
    return "\n".join("  " + line_escape(line) for line in text.splitlines())


class LineFormatter(logging.Formatter):
    """logging.Formatter whose records are one line each (a traceback's lines are indented below)."""

    def format(self, record: logging.LogRecord) -> str:
        copy = logging.makeLogRecord(vars(record))
        copy.msg, copy.args = line_escape(record.getMessage()), None
        copy.exc_text = None  # formatted (and indented) by this formatter, not another handler's
        return super().format(copy)

    def formatException(self, ei: Any) -> str:
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _indented(super().formatStack(stack_info))
