"""The shared model base, the API's wire formats for dates and times, and cached codecs."""

from __future__ import annotations

import functools
import re
from datetime import UTC, date, datetime, time
from typing import Any, TypeVar

import msgspec

from shipping_async.errors import RequestValidationError

__all__ = [
    "ApiTimestamp",
    "ClockTime",
    "DayMonthYear",
    "HourMinute",
    "Model",
    "decoder",
    "enc_hook",
    "validate_request",
]

T = TypeVar("T")


class Model(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Base of every model: keyword-only, unknown fields ignored, defaults left out."""


# The API writes dates and times in four formats. Each gets a subclass of the standard
# type so that decoding (``dec_hook``) and encoding (``enc_hook``) convert exactly once,
# here, and callers only ever see ``datetime``, ``date`` and ``time`` values.


_TIMESTAMP = re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2}) (\d{1,2}):(\d{1,2}):(\d{1,2}) UTC")


class ApiTimestamp(datetime):
    """An aware UTC datetime written ``YYYY/MM/DD HH:MM:SS UTC`` (``Order.created_at``)."""

    FORMAT = "%Y/%m/%d %H:%M:%S UTC"

    @classmethod
    def parse(cls, text: str) -> ApiTimestamp:
        # A regex and int() rather than strptime: strptime took half the time of decoding
        # a whole order (benchmarks/decode_order.py).
        match = _TIMESTAMP.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"expected a time as YYYY/MM/DD HH:MM:SS UTC, got {text!r}")
        year, month, day, hour, minute, second = map(int, match.groups())
        return cls(year, month, day, hour, minute, second, tzinfo=UTC)

    def wire(self) -> str:
        return self.astimezone(UTC).strftime(self.FORMAT)


class DayMonthYear(date):
    """A date written ``DD-MM-YYYY`` (pickup dates)."""

    FORMAT = "%d-%m-%Y"

    @classmethod
    def parse(cls, text: str) -> DayMonthYear:
        parsed = datetime.strptime(text.strip(), cls.FORMAT)
        return cls(parsed.year, parsed.month, parsed.day)

    @classmethod
    def of(cls, value: date) -> DayMonthYear:
        return cls(value.year, value.month, value.day)

    def wire(self) -> str:
        return self.strftime(self.FORMAT)


_CLOCK_TIME = re.compile(r"^(\d{1,2}):(\d{2})(?:[.:](\d{2}))?$")


class ClockTime(time):
    """A time of day written ``HH:MM.SS`` (cut-off and earliest pickup times).

    ``HH:MM:SS`` and ``HH:MM`` are accepted too: the separator is the kind of detail a
    server changes without notice.
    """

    @classmethod
    def parse(cls, text: str) -> ClockTime:
        match = _CLOCK_TIME.match(text.strip())
        if match is None:
            raise ValueError(f"expected a time as HH:MM.SS, got {text!r}")
        hour, minute, second = (int(part or 0) for part in match.groups())
        return cls(hour, minute, second)

    def wire(self) -> str:
        return f"{self.hour:02d}:{self.minute:02d}.{self.second:02d}"


class HourMinute(time):
    """A time of day written ``HH:MM`` (pickup windows)."""

    @classmethod
    def parse(cls, text: str) -> HourMinute:
        parsed = ClockTime.parse(text)
        return cls(parsed.hour, parsed.minute)

    @classmethod
    def of(cls, value: time) -> HourMinute:
        return cls(value.hour, value.minute)

    def wire(self) -> str:
        return f"{self.hour:02d}:{self.minute:02d}"


_WIRE_TYPES: dict[type[Any], Any] = {
    ApiTimestamp: ApiTimestamp.parse,
    DayMonthYear: DayMonthYear.parse,
    ClockTime: ClockTime.parse,
    HourMinute: HourMinute.parse,
}


def dec_hook(type_: type[Any], obj: Any) -> Any:
    parse = _WIRE_TYPES.get(type_)
    if parse is None:
        raise NotImplementedError(f"no decoder for {type_!r}")
    if isinstance(obj, type_):
        return obj
    if not isinstance(obj, str):
        raise ValueError(f"expected a string, got {type(obj).__name__}")
    return parse(obj)


def enc_hook(obj: Any) -> Any:
    if isinstance(obj, ApiTimestamp | DayMonthYear | ClockTime | HourMinute):
        return obj.wire()
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


@functools.cache
def decoder(type_: Any) -> msgspec.json.Decoder[Any]:
    """The one JSON decoder for ``type_``, created on first use."""
    return msgspec.json.Decoder(type_, dec_hook=dec_hook)


_MSGSPEC_PATH = re.compile(r"^(?P<reason>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)


def validate_request(request: T) -> T:
    """Check a request against its declared types and constraints, before it is sent.

    Raises ``RequestValidationError`` naming the field path, e.g.
    ``packages[2].width: Expected `float` > 0.0``. The server's own 400 only ever says
    "Invalid input, object invalid", so this is the caller's one chance to learn which
    field is wrong.
    """
    try:
        msgspec.convert(
            msgspec.to_builtins(request, enc_hook=enc_hook),
            type(request),
            dec_hook=dec_hook,
        )
    except (msgspec.ValidationError, TypeError, ValueError) as exc:
        match = _MSGSPEC_PATH.match(str(exc))
        assert match is not None  # the pattern matches any text
        path = (match["path"] or "").lstrip(".") or type(request).__name__
        raise RequestValidationError(path, match["reason"]) from exc
    check = getattr(request, "check", None)
    if check is not None:
        check()
    return request
