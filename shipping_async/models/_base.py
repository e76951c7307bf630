"""The shared model base, the API's wire formats for dates and times, and cached codecs."""

from __future__ import annotations

import collections.abc
import functools
import re
import types
import typing
from collections.abc import Callable
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any, Final, TypeVar

import msgspec

from shipping_async.errors import RequestValidationError

__all__ = [
    "ApiTimestamp",
    "ClockTime",
    "DayMonthYear",
    "HourMinute",
    "Model",
    "Undecoded",
    "attach_undecoded",
    "decoder",
    "enc_hook",
    "passed_as_made",
    "struct_fields",
    "unwrap_optional",
    "validate_request",
    "validated_json",
]

T = TypeVar("T")


class Undecoded(msgspec.Struct, frozen=True, kw_only=True):
    """A field of an answer that did not decode, kept as it came.

    ``path`` is relative to the model it was reported on (``created_at``,
    ``shipments[1].status``, ``estimates[0]`` for a dropped list item); ``value`` is the raw
    JSON value; ``reason`` says what was expected.
    """

    path: str
    value: Any
    reason: str


class Model(msgspec.Struct, kw_only=True, omit_defaults=True, dict=True):
    """Base of every model: keyword-only, unknown fields ignored, defaults left out.

    ``dict=True`` lets a decoded answer carry :attr:`undecoded` without it being a field
    (a field could collide with a key the server sends, and would be encoded back).
    """

    @property
    def undecoded(self) -> tuple[Undecoded, ...]:
        """The fields of the answer that did not decode and were left out (lenient mode).

        Empty when the whole answer decoded. Each entry keeps the raw value, so nothing the
        server sent is lost: ``order.undecoded[0].value``.
        """
        found: tuple[Undecoded, ...] = getattr(self, "_undecoded", ())
        return found


def attach_undecoded(model: Model, undecoded: list[Undecoded]) -> None:
    """Record on ``model`` what its answer held that did not decode."""
    model._undecoded = tuple(undecoded)  # type: ignore[attr-defined]


# The API writes dates and times in four formats. Each gets a subclass of the standard
# type so that decoding (``dec_hook``) and encoding (``enc_hook``) convert exactly once,
# here, and callers only ever see ``datetime``, ``date`` and ``time`` values.


_TIMESTAMP = re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2}) (\d{1,2}):(\d{1,2}):(\d{1,2}) UTC")

#: Texts of dates and times whose fields were read, kept per kind (a day's pickup dates
#: and the carriers' times of day repeat in every answer); emptied when this many.
_REMEMBERED = 1024


def _remember(
    memo: dict[str, tuple[int, int, int]], text: str, parts: tuple[int, int, int]
) -> None:
    if len(memo) >= _REMEMBERED:
        memo.clear()
    memo[text] = parts


class ApiTimestamp(datetime):
    """An aware UTC datetime written ``YYYY/MM/DD HH:MM:SS UTC`` (``Order.created_at``)."""

    __slots__ = ()

    FORMAT = "%Y/%m/%d %H:%M:%S UTC"

    @classmethod
    def parse(cls, text: str) -> ApiTimestamp:
        # The form the API writes, 2026/01/05 09:30:15 UTC, as ISO text for the C parser
        # (a quarter of the time); anything else, or what it refuses, takes the regex.
        if (
            len(text) == 23
            and text[4] == "/"
            and text[7] == "/"
            and text[10] == " "
            and text.endswith(" UTC")
            and text.isascii()
        ):
            try:
                return cls.fromisoformat(f"{text[:4]}-{text[5:7]}-{text[8:19]}+00:00")
            except ValueError:
                pass
        # A regex and int() rather than strptime: strptime took half the time of decoding
        # a whole order (benchmarks/decode_order.py).
        match = _TIMESTAMP.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"expected a time as YYYY/MM/DD HH:MM:SS UTC, got {text!r}")
        year, month, day, hour, minute, second = map(int, match.groups())
        return cls(year, month, day, hour, minute, second, tzinfo=UTC)

    def wire(self) -> str:
        return self.astimezone(UTC).strftime(self.FORMAT)


_DAY_MONTH_YEAR = re.compile(r"(\d{1,2})-(\d{1,2})-(\d{4})")
_DATES: dict[str, tuple[int, int, int]] = {}


def _date_parts(text: str) -> tuple[int, int, int]:
    """(year, month, day) of ``DD-MM-YYYY`` text, checked to make a date."""
    parts = _DATES.get(text) if type(text) is str else None
    if parts is None:
        # A regex and int() rather than strptime, as ApiTimestamp: 2.8 us instead of 7.3.
        match = _DAY_MONTH_YEAR.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"expected a date as DD-MM-YYYY, got {text!r}")
        day, month, year = map(int, match.groups())
        date(year, month, day)  # out of range: ValueError
        parts = (year, month, day)
        if type(text) is str:
            _remember(_DATES, text, parts)
    return parts


class DayMonthYear(date):
    """A date written ``DD-MM-YYYY`` (pickup dates)."""

    __slots__ = ()

    FORMAT = "%d-%m-%Y"

    @classmethod
    def parse(cls, text: str) -> DayMonthYear:
        return cls(*_date_parts(text))

    @classmethod
    def of(cls, value: date) -> DayMonthYear:
        return cls(value.year, value.month, value.day)

    def wire(self) -> str:
        # Not strftime: it writes year 1 as "1", the wire form needs four digits.
        return f"{self.day:02d}-{self.month:02d}-{self.year:04d}"


_CLOCK_TIME = re.compile(r"^(\d{1,2}):(\d{2})(?:[.:](\d{2}))?$")
_TIMES: dict[str, tuple[int, int, int]] = {}


def _clock_parts(text: str) -> tuple[int, int, int]:
    """(hour, minute, second) of ``HH:MM.SS`` (or ``HH:MM:SS``, ``HH:MM``) text, checked
    to make a time of day."""
    parts = _TIMES.get(text) if type(text) is str else None
    if parts is None:
        match = _CLOCK_TIME.match(text.strip())
        if match is None:
            raise ValueError(f"expected a time as HH:MM.SS, got {text!r}")
        hour, minute, second = (int(part or 0) for part in match.groups())
        time(hour, minute, second)  # out of range: ValueError
        parts = (hour, minute, second)
        if type(text) is str:
            _remember(_TIMES, text, parts)
    return parts


class ClockTime(time):
    """A time of day written ``HH:MM.SS`` (cut-off and earliest pickup times).

    ``HH:MM:SS`` and ``HH:MM`` are accepted too: the separator is the kind of detail a
    server changes without notice.
    """

    __slots__ = ()

    @classmethod
    def parse(cls, text: str) -> ClockTime:
        return cls(*_clock_parts(text))

    def wire(self) -> str:
        return f"{self.hour:02d}:{self.minute:02d}.{self.second:02d}"


class HourMinute(time):
    """A time of day written ``HH:MM`` (pickup windows)."""

    __slots__ = ()

    @classmethod
    def parse(cls, text: str) -> HourMinute:
        hour, minute, _ = _clock_parts(text)
        return cls(hour, minute)

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


# The values decoded from the last texts of each type, shared: an answer's pickup dates,
# cut-off times and creation stamps repeat from one answer to the next, and the values
# are immutable (the types have no __dict__). Emptied when _REMEMBERED long.
_DECODED: dict[type[Any], dict[str, Any]] = {type_: {} for type_ in _WIRE_TYPES}


def dec_hook(type_: type[Any], obj: Any) -> Any:
    if type(obj) is str:  # what JSON gives: no instance of type_
        decoded = _DECODED.get(type_)
        if decoded is not None:
            value = decoded.get(obj)
            if value is None:
                value = _WIRE_TYPES[type_](obj)
                if len(decoded) >= _REMEMBERED:
                    decoded.clear()
                decoded[obj] = value
            return value
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

    Returns the request to send: a copy equal to ``request`` in which values given in
    their wire form (decimal text ``"120.50"``, ``"07-01-2026"``, ``"10:00"``) are parsed
    into the model's types; sent as it is (unchanged), it is not checked again. A value
    of a type that cannot be sent at all (an arbitrary object) raises ``TypeError``;
    anything else wrong raises ``RequestValidationError``.

    Raises ``RequestValidationError`` naming every bad field with its path, e.g.
    ``packages[0].width: Expected `float` > 0.0; packages[2].weight: ...``. The
    server's own 400 only ever says "Invalid input, object invalid", so this is the
    caller's one chance to learn which fields are wrong.
    """
    checked, _ = _validated(request)
    return checked


def _validated(request: T) -> tuple[T, bytes]:
    """:func:`validate_request` and the JSON of the request it returns, which it carries
    from then on (see :func:`validated_json`)."""
    if not isinstance(request, msgspec.Struct):
        raise TypeError(f"expected a request model, got {type(request).__name__}")
    # A value of a type msgspec cannot encode at all (an open file, a set of objects) is
    # a TypeError, the documented one: not a value the caller mistyped, a wrong object.
    try:
        wire = msgspec.to_builtins(request, enc_hook=enc_hook)
    except NotImplementedError as exc:  # our enc_hook's word for "not a type we send"
        raise TypeError(f"{type(request).__name__}: unsupported value: {exc}") from exc
    problems = _wire_forms(wire, type(request), "")
    checked = request
    if problems:
        problems.extend(_problems(wire, type(request), ""))
    else:
        # The checks run on the request as it will be sent: wire text already parsed.
        # One conversion when all is well; only a failed one is walked for every problem.
        try:
            checked = msgspec.convert(wire, type(request), dec_hook=dec_hook)
        except (msgspec.ValidationError, TypeError, ValueError):
            problems = _problems(wire, type(request), "")
    check = getattr(checked, "check", None)
    if check is not None:
        try:
            check()
        except RequestValidationError as exc:
            named = {field for field, _ in problems}
            problems.extend(item for item in exc.problems if item[0] not in named)
        except (TypeError, ValueError, ArithmeticError, AttributeError):
            # A check on a value of the wrong type: that value is already named.
            if not problems:
                raise
    if problems:
        field, reason = problems[0]
        raise RequestValidationError(field, reason, problems=problems)
    checked_json = _encode_request(checked)
    _mark(checked, checked_json)
    return checked, checked_json


#: The attribute of a model that holds the JSON with which it passed validate_request.
_VALID_JSON: Final = "_valid_json"
_encode_request = msgspec.json.Encoder(enc_hook=enc_hook).encode


def _mark(request: Any, json: bytes) -> None:
    if isinstance(request, Model):  # a struct with a __dict__ (not a field, never sent)
        setattr(request, _VALID_JSON, json)


def passed_as_made(request: T) -> T:
    """``request`` marked as :func:`validate_request` marks what it returns, for a maker
    that only makes requests validate_request would return as they are (its tests show
    it): sent unchanged, it is not checked again."""
    _mark(request, _encode_request(request))
    return request


def validated_json(request: T) -> tuple[T, bytes]:
    """:func:`validate_request` and the JSON of what it returns: what a request sends.

    A request returned by :func:`validate_request` (or this) whose JSON has not changed
    since is not checked again: the verdict is a function of that JSON, and the JSON is
    made for sending anyway. So a request checked once (a batch's input as its reader
    checked it, a request sent again) costs an encoding and a comparison; one changed
    since is checked in full, as a new one.
    """
    passed = getattr(request, _VALID_JSON, None)
    if passed is not None:
        try:
            request_json = _encode_request(request)
        except (TypeError, ValueError, NotImplementedError):
            pass  # validate_request says what is wrong with it
        else:
            if request_json == passed:
                return request, request_json
    return _validated(request)


# Wire forms a request accepts where the model holds a richer type (spec sections 2.3-2.8).
_DECIMAL_TEXT = re.compile(r"[0-9]+(\.[0-9]+)?")
_ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
#: Money above this is refused: no shipment is worth it, and a huge exponent would make
#: the fixed-point text the spec asks for huge too.
MAX_DECIMAL = 10**15
MAX_DECIMAL_PLACES = 12
#: The years a request date may have: those the OpenAPI document's date patterns admit.
MIN_YEAR, MAX_YEAR = 1900, 2099


_PLAIN_DECIMAL = re.compile(r"([0-9]+)(?:\.([0-9]+))?")


def _decimal_text(value: Any) -> str:
    """A money value as the spec's decimal text (``120.50``), or ``ValueError``."""
    if type(value) is str:
        # The common case, plain text within bounds, without a Decimal: the text itself
        # but for leading zeros, as format(Decimal(value), "f") writes it.
        plain = _PLAIN_DECIMAL.fullmatch(value)
        if plain is not None:
            whole, places = plain.groups()
            whole = whole.lstrip("0") or "0"
            if len(whole) <= 15 and (places is None or len(places) <= MAX_DECIMAL_PLACES):
                return whole if places is None else f"{whole}.{places}"
    return _decimal_number_text(value)


def _decimal_number_text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected decimal text such as '120.50', got {type(value).__name__}")
    if isinstance(value, str) and not _DECIMAL_TEXT.fullmatch(value):
        # str(Decimal) may have written 1E+5 or -0: read it as a number, judge it below.
        try:
            number = Decimal(value)
        except ArithmeticError:
            raise ValueError(f"expected decimal text such as '120.50', got {value!r}") from None
    else:
        number = Decimal(repr(value) if isinstance(value, float) else value)
    if not number.is_finite():
        raise ValueError(f"must be a finite decimal, got {value!r}")
    if number.is_signed():
        raise ValueError(f"must be a decimal >= 0, got {value!r}")
    if number >= MAX_DECIMAL:
        raise ValueError(f"must be below {MAX_DECIMAL:.0e}, got {value!r}")
    exponent = number.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -MAX_DECIMAL_PLACES:
        raise ValueError(f"at most {MAX_DECIMAL_PLACES} decimal places, got {value!r}")
    return format(number, "f")


def _text_memo(convert: Callable[[Any], str]) -> Callable[[Any], str]:
    """``convert`` remembering its answers for the last texts it was given (the dates and
    times of pickups repeat from one request to the next); anything else is converted."""
    remembered = functools.lru_cache(maxsize=1024)(convert)

    @functools.wraps(convert)
    def converted(value: Any) -> str:
        return remembered(value) if type(value) is str else convert(value)

    return converted


@_text_memo
def _wire_date(value: Any) -> str:
    """``DD-MM-YYYY`` (the wire form) or an ISO date, as the ISO text msgspec reads."""
    if isinstance(value, str) and _ISO_DATE.fullmatch(value.strip()):
        parsed: date = date.fromisoformat(value.strip())
    elif isinstance(value, str):
        parsed = DayMonthYear.parse(value)
    else:
        raise ValueError(f"expected a date or DD-MM-YYYY text, got {type(value).__name__}")
    if not MIN_YEAR <= parsed.year <= MAX_YEAR:
        raise ValueError(f"must be a date in {MIN_YEAR}-{MAX_YEAR}, got {value!r}")
    return parsed.isoformat()


@_text_memo
def _wire_time(value: Any) -> str:
    """``HH:MM`` (the wire form, seconds allowed), as the ISO text msgspec reads."""
    if not isinstance(value, str):
        raise ValueError(f"expected a time or HH:MM text, got {type(value).__name__}")
    parsed = ClockTime.parse(value)
    return time(parsed.hour, parsed.minute, parsed.second).isoformat()


_WIRE_INPUTS: dict[Any, Any] = {Decimal: _decimal_text, date: _wire_date, time: _wire_time}

_Problems = list[tuple[str, str]]
_Walk = Callable[[Any, str], _Problems]


def _wire_forms(value: Any, type_: Any, path: str) -> _Problems:
    """Rewrite, in place, wire text of decimal, date and time fields into what msgspec reads.

    ``value`` is the request as builtins. A field typed ``Decimal``, ``date`` or ``time``
    takes its wire form (``"120.50"``, ``"07-01-2026"``, ``"10:00"``) as well as the object;
    what neither reads is returned as a problem naming the field. Lists of structs are
    walked item by item; nothing else is (a list of dates is sent as it is).
    """
    walk = _walker(type_)
    return [] if walk is None else walk(value, path)


# The walk of each request type, worked out once per type: walking every field of every
# request with issubclass() and typing.get_origin() took ~350 us a request, and looking
# each nested type up in a cache ~1 us a field. A walker visits only the fields that take
# a wire form and the structs and lists that hold some; ``None``: nothing to visit.
_WALKERS: dict[Any, _Walk | None] = {}


def _walker(type_: Any) -> _Walk | None:
    if type_ in _WALKERS:
        return _WALKERS[type_]
    inner = unwrap_optional(type_)
    walk: _Walk | None = None
    if _is_struct(inner):
        if _holds_wire_forms(inner):
            steps: list[tuple[str, str, Any, _Walk | None]] = []
            walk = _struct_walker(steps)
            _WALKERS[type_] = walk  # before its fields: a struct may hold itself
            for encode_name, name, convert, nested in _wire_plan(inner):
                child = None if convert is not None else _walker(nested)
                if convert is not None or child is not None:
                    steps.append((encode_name, name, convert, child))
    else:
        item = _list_item(inner)
        if item is not None and _may_hold_wire_forms(item):
            _WALKERS[type_] = None  # while its items are worked out
            item_walk = _walker(item)
            walk = None if item_walk is None else _list_walker(item_walk)
    _WALKERS[type_] = walk
    return walk


def _struct_walker(steps: list[tuple[str, str, Any, _Walk | None]]) -> _Walk:
    def walk(value: Any, path: str) -> _Problems:
        problems: _Problems = []
        if not isinstance(value, dict):
            return problems
        for encode_name, name, convert, child in steps:
            item = value.get(encode_name)
            if item is None:
                continue
            if convert is None:
                assert child is not None
                problems.extend(child(item, f"{path}.{name}" if path else name))
                continue
            try:
                value[encode_name] = convert(item)
            except ValueError as exc:
                problems.append((f"{path}.{name}" if path else name, str(exc)))
        return problems

    return walk


def _list_walker(item_walk: _Walk) -> _Walk:
    def walk(value: Any, path: str) -> _Problems:
        problems: _Problems = []
        if isinstance(value, list):
            for index, element in enumerate(value):
                problems.extend(item_walk(element, f"{path}[{index}]"))
        return problems

    return walk


def _holds_wire_forms(struct: Any) -> bool:
    """Whether a field that takes a wire form can be reached from ``struct`` through its
    struct and list fields (a struct that holds itself included)."""
    seen: set[Any] = set()
    pending = [struct]
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        for _, _, convert, nested in _wire_plan(current):
            if convert is not None:
                return True
            inner = unwrap_optional(nested)
            while not _is_struct(inner) and _list_item(inner) is not None:
                inner = unwrap_optional(_list_item(inner))
            if _is_struct(inner):
                pending.append(inner)
    return False


# What the walk does per request type, worked out once per type.
_WireStep = tuple[str, str, Any, Any]  # encode name, name, converter or None, nested type


@functools.cache
def _wire_plan(struct: Any) -> tuple[_WireStep, ...]:
    """The fields of ``struct`` that take a wire form or may hold some, in field order."""
    steps: list[_WireStep] = []
    for field in struct_fields(struct):
        convert = _WIRE_INPUTS.get(unwrap_optional(field.type))
        if convert is not None:
            steps.append((field.encode_name, field.name, convert, None))
        elif _may_hold_wire_forms(field.type):
            steps.append((field.encode_name, field.name, None, field.type))
    return tuple(steps)


@functools.cache
def _may_hold_wire_forms(type_: Any) -> bool:
    """Whether a value of ``type_`` can hold a field :func:`_wire_forms` rewrites: a struct
    (even one without such fields: cheap, and safe for a struct that names itself), or a
    list of such values. A plain field (text, number, a list of them) is skipped."""
    inner = unwrap_optional(type_)
    if _is_struct(inner):
        return True
    item = _list_item(inner)
    return item is not None and _may_hold_wire_forms(item)


@functools.cache
def _is_struct(type_: Any) -> bool:
    return isinstance(type_, type) and issubclass(type_, msgspec.Struct)


def _problems(value: Any, type_: Any, path: str) -> list[tuple[str, str]]:
    """Every ``(path, reason)`` where ``value`` does not convert to ``type_``.

    msgspec stops at the first error; on one, this descends into a struct's fields and a
    list's items to find the others (only the failing branches are walked again).
    """
    try:
        msgspec.convert(value, type_, dec_hook=dec_hook)
    except (msgspec.ValidationError, TypeError, ValueError) as exc:
        first = _one_problem(exc, path, type_)
    else:
        return []
    inner = unwrap_optional(type_) if value is not None else None
    if isinstance(value, dict) and _is_struct(inner):
        found: list[tuple[str, str]] = []
        for field in struct_fields(inner):
            where = f"{path}.{field.name}" if path else field.name
            if field.encode_name not in value:
                if field.required:
                    found.append((where, "required and missing"))
                continue
            found.extend(_problems(value[field.encode_name], field.type, where))
        return found or [first]
    item = _list_item(inner)
    if item is not None and isinstance(value, list):
        found = []
        for index, element in enumerate(value):
            found.extend(_problems(element, item, f"{path}[{index}]"))
        # A list-level constraint (min_length) fails with every item fine.
        return found or [first]
    return [first]


def _one_problem(exc: Exception, path: str, type_: Any) -> tuple[str, str]:
    match = _MSGSPEC_PATH.match(str(exc))
    assert match is not None  # the pattern matches any text
    where = path + (match["path"] or "")
    name = getattr(type_, "__name__", "request")
    return where.lstrip(".") or name, match["reason"]


@functools.cache
def struct_fields(struct: Any) -> tuple[msgspec.structs.FieldInfo, ...]:
    """A struct type's fields, worked out once: ``msgspec.structs.fields`` evaluates the
    class's string annotations on every call (about 5 ms for a request type)."""
    return msgspec.structs.fields(struct)


@functools.cache
def unwrap_optional(type_: Any) -> Any:
    """``X | None`` -> ``X``; anything else as is."""
    args = [arg for arg in typing.get_args(type_) if arg is not type(None)]
    if typing.get_origin(type_) in (typing.Union, types.UnionType) and len(args) == 1:
        return unwrap_optional(args[0])
    if typing.get_origin(type_) is typing.Annotated:
        return unwrap_optional(args[0])
    return type_


@functools.cache
def _list_item(type_: Any) -> Any:
    """The item type of ``list[X]`` (annotated or not), else ``None``."""
    if typing.get_origin(type_) in (list, tuple, collections.abc.Sequence):
        args = typing.get_args(type_)
        if len(args) == 1 or (len(args) == 2 and args[1] is Ellipsis):
            return args[0]
    return None
