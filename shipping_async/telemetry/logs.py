"""JSON log lines: ``SHIPPING_LOG_FORMAT=json`` makes every handler we install write them.

One object per line, always the same keys, ``null`` when unknown::

    {"time": "2026-11-22T20:15:03.123456+00:00", "level": "WARNING",
     "logger": "shipping_async", "message": "429 on POST /orders ...",
     "operation": "create_order", "status": 429, "account": "acme", "job_key": "A-17",
     "error": null}

``operation`` and ``status`` come from the API call the logging task is making,
``account`` and ``job_key`` from the job stage it is in (or from ``extra={...}`` of the
call to the logger). Messages are written token-free at their source (headers through
:func:`shipping_async._http.redact`, error texts scrubbed); this formatter masks the same
patterns again, so that a bearer token, a webhook token or a URL password that slipped
into a message or a traceback still never reaches the log.

Text lines (:class:`TextFormatter`, the default) mask the same, and show what a message
quotes (a server's error text, a key) with its control characters escaped: a line break
cannot forge a line, ``ESC[2J`` cannot clear the terminal. In either format a message is
cut after :data:`MAX_MESSAGE_CHARS` and a traceback after :data:`MAX_TRACEBACK_CHARS`: a
server's text can be any length.
"""

from __future__ import annotations

import json
import logging
import os
import re
from datetime import UTC, datetime
from typing import Any, Final

from shipping_async._escape import cut, escape_controls
from shipping_async._hooks import current_call
from shipping_async.telemetry._scope import current_job

__all__ = [
    "KEYS",
    "LOG_FORMAT_ENV",
    "MAX_MESSAGE_CHARS",
    "MAX_TRACEBACK_CHARS",
    "JsonFormatter",
    "TextFormatter",
    "formatter",
    "scrub",
]

LOG_FORMAT_ENV: Final = "SHIPPING_LOG_FORMAT"
#: A longer message, or traceback, is cut there, saying how much was left out.
MAX_MESSAGE_CHARS: Final = 4_000
MAX_TRACEBACK_CHARS: Final = 20_000
#: The keys of every JSON log line, in order.
KEYS: Final = (
    "time",
    "level",
    "logger",
    "message",
    "operation",
    "status",
    "account",
    "job_key",
    "error",
)

# The same hiding as redact(): "Bearer ***"; plus a JSON or query "token" field (webhook
# tokens) and the password of a URL (journal and limiter DSNs).
_SECRETS: Final = (
    (re.compile(r"(?i)\b(bearer\s+)[^\s\"',;]+"), r"\1***"),
    (re.compile(r"(?i)(\"token\"\s*:\s*\")[^\"]*"), r"\1***"),
    (re.compile(r"(?i)(\btoken=)[^\s&\"']+"), r"\1***"),
    (re.compile(r"(://[^/\s:@]*:)[^@\s/]+@"), r"\1***@"),
)


def scrub(text: str) -> str:
    """``text`` with bearer tokens, webhook tokens and URL passwords masked."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


class JsonFormatter(logging.Formatter):
    """One JSON object per record with the :data:`KEYS`; secrets masked."""

    def format(self, record: logging.LogRecord) -> str:
        call = current_call()
        job = current_job()
        error = None
        if record.exc_info:
            error = cut(scrub(self.formatException(record.exc_info)), MAX_TRACEBACK_CHARS)
        elif record.exc_text:
            error = cut(scrub(record.exc_text), MAX_TRACEBACK_CHARS)
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": cut(scrub(record.getMessage()), MAX_MESSAGE_CHARS),
            "operation": _field(record, "operation", call.operation if call else None),
            "status": _field(record, "status", call.status if call else None),
            "account": _field(record, "account", job.account if job else None),
            "job_key": _field(record, "job_key", job.key if job else None),
            "error": error,
        }
        return json.dumps(line, default=str)  # ASCII: no control or bidi character survives


def _field(record: logging.LogRecord, name: str, fallback: object) -> object:
    value = record.__dict__.get(name, fallback)
    if value is None or isinstance(value, int | float | bool):
        return value
    return scrub(str(value))


class TextFormatter(logging.Formatter):
    """Text lines in ``fmt``: secrets masked, the message's control characters and
    bidirectional overrides escaped (a traceback keeps its line breaks), both cut."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        message = escape_controls(scrub(record.message))
        record.message = cut(message, MAX_MESSAGE_CHARS)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        text = escape_controls(scrub(super().formatException(ei)), keep_lines=True)
        return cut(text, MAX_TRACEBACK_CHARS)

    def formatStack(self, stack_info: str) -> str:
        return escape_controls(scrub(super().formatStack(stack_info)), keep_lines=True)


def formatter(text_format: str) -> logging.Formatter:
    """The formatter ``SHIPPING_LOG_FORMAT`` asks for: ``json``, or text in ``text_format``."""
    if os.environ.get(LOG_FORMAT_ENV, "").strip().lower() == "json":
        return JsonFormatter()
    return TextFormatter(text_format)
