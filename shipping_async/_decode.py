"""Reading a 2xx answer into its model: strictly, or leniently (odd fields kept raw).

The one seam between the bytes of an answer and the models. :class:`Answer` says how an
operation's answer is read: the wire type (an envelope), how to unwrap the result, and
which fields identify what the server did (an order's ``id``, a webhook's ``id`` and
``token``). :func:`read_answer` decodes with the cached typed decoder; when that fails:

- ``strict``: the error goes up (our own tests run strict, so drift from the spec fails
  loudly; the sandbox decodes requests strictly on its side).
- ``lenient`` (the client's default): the field that failed is taken out of the answer and
  kept, raw, in the result's ``undecoded`` (an :class:`~shipping_async.models.Undecoded`
  per field: path, raw value, reason); decoding is tried again. A field that cannot be
  left out (required) takes its object out with it: a list item is dropped, an optional
  object becomes ``None``. Only when the answer's own object or one of its identifying
  fields has to go is the answer unreadable, and the ``ValidationError`` goes up: for a
  POST that did something, that is an outcome-unknown error (see ``_retry.py``).

msgspec reports one error per attempt, so each repair costs one more decode; at most
:data:`MAX_REPAIRS` are made before the answer counts as unreadable.
"""

from __future__ import annotations

import logging
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

import msgspec

from shipping_async.models._base import (
    Model,
    Undecoded,
    attach_undecoded,
    decoder,
    struct_fields,
    unwrap_optional,
)

__all__ = ["MAX_REPAIRS", "Answer", "read_answer"]

E = TypeVar("E")
T = TypeVar("T")

_log = logging.getLogger("shipping_async")

#: Repairs tried on one answer before it counts as unreadable.
MAX_REPAIRS: Final = 64
_SHOWN: Final = 120  # characters of a reason shown in the log line

_ERROR = re.compile(r"^(?P<reason>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_STEP = re.compile(r"\.(?P<key>[A-Za-z_][A-Za-z0-9_]*)|\[(?P<index>\d+)\]")

_Path = tuple[str | int, ...]


@dataclass(slots=True, kw_only=True, eq=False)
class Answer(Generic[E, T]):
    """How one operation's 2xx answer is read.

    ``wire``: the type the body decodes to; ``unwrap``: the result from it. ``identity``:
    the alternatives of what makes the answer count (each a tuple of wire paths such as
    ``"order.id"`` that must be present, decoded and not null); ``()`` for reads, whose
    result is only as good as its decoding anyway. ``strip``: envelope keys left off the
    paths reported in ``undecoded`` (``"order"``: ``order.created_at`` -> ``created_at``).
    ``empty``: the body an empty answer stands for (``b"{}"`` for a bare success).
    """

    wire: Any
    unwrap: Callable[[E], T]
    identity: tuple[tuple[str, ...], ...] = ()
    strip: tuple[str, ...] = ()
    empty: bytes | None = None
    #: Worked out on first use (not at import: a decoder and the fields of a struct
    #: cost milliseconds to make): how an answer that decodes whole is read
    #: (:func:`_whole_reader`).
    _read: Callable[[bytes], T] | None = field(default=None, init=False, repr=False)


def read_answer(raw: bytes, answer: Answer[Any, T], *, lenient: bool, what: str) -> T:
    """The result of a 2xx answer ``raw`` (``what`` names the request in the log).

    Raises ``msgspec.DecodeError`` (``ValidationError`` included) or ``ValueError`` when
    the answer is unreadable: not JSON, the wrong shape, or (lenient) its identity lost.
    """
    read = answer._read
    if read is None:
        read = answer._read = _whole_reader(answer)
    try:
        return read(raw)
    except msgspec.ValidationError as exc:
        if not lenient:
            raise
        if answer.empty is not None and not raw.strip():
            raw = answer.empty
        envelope, undecoded = _repair(raw, answer.wire, exc)
    _check_identity(answer, undecoded, raw)
    result = answer.unwrap(envelope)
    reported = [_relative(item, answer.strip) for item in undecoded]
    if isinstance(result, Model):
        attach_undecoded(result, reported)
    _log.warning(
        "%s: %d field(s) of the answer did not decode and were left out%s: %s",
        what,
        len(reported),
        " (kept raw in .undecoded)" if isinstance(result, Model) else "",
        "; ".join(f"{item.path or '$'}: {_shown(item.reason)}" for item in reported),
    )
    return result


def _repair(raw: bytes, wire: Any, error: msgspec.ValidationError) -> tuple[Any, list[Undecoded]]:
    """Take failing values out of the answer until it decodes; what was taken, raw."""
    tree = msgspec.json.decode(raw)
    original = msgspec.json.decode(raw)  # values as they came, for the report
    # Lists lose items as they are repaired; each list's current -> original index.
    origins: dict[int, list[int]] = {}
    taken: dict[_Path, Undecoded] = {}
    for _ in range(MAX_REPAIRS):
        reason, path = _split(error)
        if not path:
            raise error  # the answer as a whole is wrong: nothing to keep
        # A required field that is missing (or that we took out) takes its object along.
        original_path = _take(tree, path, origins)
        inner = [
            taken.pop(key) for key in list(taken) if key[: len(original_path)] == original_path
        ]
        if inner:  # what made the required field go, so the reason says it
            reason += "".join(f"; {item.path}: {item.reason}" for item in inner)
        value = _at(original, original_path)
        taken[original_path] = Undecoded(path=_format(original_path), value=value, reason=reason)
        try:
            return decoder(wire).decode(msgspec.json.encode(tree)), list(taken.values())
        except msgspec.ValidationError as exc:
            error = exc
    raise error


def _split(error: msgspec.ValidationError) -> tuple[str, _Path]:
    """The reason and the path (in the answer as it is now) of msgspec's error."""
    match = _ERROR.match(str(error))
    assert match is not None  # the pattern matches any text
    reason, text = match["reason"], match["path"] or ""
    path: list[str | int] = []
    position = 0
    for step in _STEP.finditer(text):
        if step.start() != position:
            return reason, ()  # a step we cannot follow (a dict key): not repairable
        path.append(step["key"] if step["key"] is not None else int(step["index"]))
        position = step.end()
    if position != len(text):
        return reason, ()
    # "Object missing required field `x` - at `$.a`" is about $.a.x; the object $.a is
    # what must go, and that is the path msgspec gives.
    return reason, tuple(path)


def _take(tree: Any, path: _Path, origins: dict[int, list[int]]) -> _Path:
    """Remove the value at ``path`` from ``tree``; its path in the original answer."""
    node = tree
    original: list[str | int] = []
    for depth, step in enumerate(path):
        last = depth == len(path) - 1
        if isinstance(step, int):
            if not isinstance(node, list) or step >= len(node):
                raise ValueError(f"no item {step} to take out")
            indices = origins.setdefault(id(node), list(range(len(node))))
            original.append(indices[step])
            if last:
                del node[step]
                del indices[step]
                return tuple(original)
        else:
            if not isinstance(node, dict) or step not in node:
                raise ValueError(f"no field {step!r} to take out")
            original.append(step)
            if last:
                del node[step]
                return tuple(original)
        node = node[step]
    raise ValueError("nothing to take out")  # path was empty


def _at(tree: Any, path: _Path) -> Any:
    node = tree
    for step in path:
        node = node[step]
    return node


def _format(path: _Path) -> str:
    text = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path)
    return text.lstrip(".")


def _relative(item: Undecoded, strip: tuple[str, ...]) -> Undecoded:
    for key in strip:
        for prefix in (f"{key}.", f"{key}["):
            if item.path.startswith(prefix):
                return msgspec.structs.replace(item, path=item.path[len(key) :].lstrip("."))
    return item


def _whole_reader(answer: Answer[Any, T]) -> Callable[[bytes], T]:
    """How ``answer`` reads a body that decodes whole: decoded by the cached decoder, its
    identity checked (on the decoded value, not by decoding the body once more, wherever
    that reads the same: see :func:`_decoded_identity`), unwrapped. Raises
    ``msgspec.ValidationError`` when the body does not decode whole (then the lenient
    way repairs it)."""
    decode = decoder(answer.wire).decode
    unwrap, empty = answer.unwrap, answer.empty
    check: Callable[[Any, bytes], None] | None = None
    if answer.identity:
        paths = _decoded_identity(answer)
        if not paths:  # some identifying field cannot be read off the decoded value

            def check(envelope: Any, raw: bytes) -> None:
                _check_identity(answer, [], raw)

        else:
            # Each alternative: all of its fields present (not None along the way).
            alternatives = [
                [operator.attrgetter(".".join(names)) for names in attributes]
                for attributes in paths
            ]

            def check(envelope: Any, raw: bytes) -> None:
                for getters in alternatives:
                    if all(_present(envelope, get) for get in getters):
                        return
                _unreadable(answer)

    def read(raw: bytes) -> T:
        if empty is not None and not raw.strip():
            raw = empty
        envelope = decode(raw)
        if check is not None:
            check(envelope, raw)
        return unwrap(envelope)

    return read


def _present(envelope: Any, get: Callable[[Any], Any]) -> bool:
    try:
        return get(envelope) is not None
    except AttributeError:  # None on the way
        return False


def _decoded_identity(answer: Answer[Any, Any]) -> tuple[tuple[tuple[str, ...], ...], ...]:
    """``answer.identity`` as attribute paths on the decoded value, or ``()`` when one of
    its fields would read differently there than in the raw answer.

    In the raw answer a field counts when present and not null. On a value that decoded
    whole, that is "not ``None``" exactly when each field along the path is required or
    defaults to ``None`` (then absent and null both decode to ``None``), every field but
    the last is a struct (so present means an object), and no struct on the way rewrites
    its fields after decoding (``__post_init__``).
    """
    resolved = []
    for paths in answer.identity:
        alternative = []
        for path in paths:
            names = _attributes(answer.wire, path.split("."))
            if names is None:
                return ()
            alternative.append(names)
        resolved.append(tuple(alternative))
    return tuple(resolved)


def _attributes(wire: Any, keys: list[str]) -> tuple[str, ...] | None:
    names: list[str] = []
    node = wire
    for key in keys:
        node = unwrap_optional(node)
        if not (isinstance(node, type) and issubclass(node, msgspec.Struct)):
            return None
        if getattr(node, "__post_init__", None) is not None:
            return None
        found = [item for item in struct_fields(node) if item.encode_name == key]
        if len(found) != 1:
            return None
        (item,) = found
        if not item.required and (
            item.default is not None or item.default_factory is not msgspec.NODEFAULT
        ):
            return None
        names.append(item.name)
        node = item.type
    return tuple(names)


def _unreadable(answer: Answer[Any, Any]) -> None:
    wanted = " or ".join(", ".join(paths) for paths in answer.identity)
    raise ValueError(f"the answer's identifying fields ({wanted}) cannot be read")


def _check_identity(answer: Answer[Any, Any], undecoded: list[Undecoded], raw: bytes) -> None:
    if not answer.identity:
        return
    lost = [item.path for item in undecoded]
    tree = msgspec.json.decode(raw)
    for paths in answer.identity:
        if all(_readable(tree, path, lost) for path in paths):
            return
    _unreadable(answer)


def _readable(tree: Any, path: str, lost: list[str]) -> bool:
    if any(path == gone or path.startswith((f"{gone}.", f"{gone}[")) for gone in lost):
        return False
    node = tree
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return node is not None


def _shown(reason: str) -> str:
    """A reason fit for one log line: escaped, bounded."""
    text = reason if len(reason) <= _SHOWN else reason[:_SHOWN] + "..."
    return text.encode("unicode_escape").decode("ascii")
