"""Reading answers: the identity of an answer that decoded whole is read off the decoded value,
and that reads exactly as the raw answer does."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shipping_async._decode import Answer, _check_identity, _decoded_identity, read_answer
from shipping_async.models._base import Model, decoder
from shipping_async.resources.orders import _ORDER, _SCHEDULED_PICKUP
from shipping_async.resources.webhooks import _WEBHOOK

ABSENT = object()
# What an identifying field may hold: absent, null, the right type, falsy values of it,
# and the wrong type (then the typed decode fails and the lenient path takes over).
values = st.sampled_from([ABSENT, None, 0, 7001, -1, "", "PU-1", True, [], {}])


def envelope(key: str, fields: dict[str, Any]) -> bytes:
    body = {name: value for name, value in fields.items() if value is not ABSENT}
    return msgspec.json.encode({key: body})


def by_reference(raw: bytes, answer: Answer[Any, Any]) -> object:
    """What the answer reads as when its identity is checked on the raw JSON (the slow
    path, as before): the result, or the type of the error."""
    try:
        value = decoder(answer.wire).decode(raw)
        _check_identity(answer, [], raw)
    except (msgspec.ValidationError, ValueError) as exc:
        return type(exc)
    return answer.unwrap(value)


def as_read(raw: bytes, answer: Answer[Any, Any]) -> object:
    try:
        return read_answer(raw, answer, lenient=False, what="test")
    except (msgspec.ValidationError, ValueError) as exc:
        return type(exc)


@given(order_id=values, status=values)
def test_an_order_identity_reads_the_same_decoded_as_raw(order_id: Any, status: Any) -> None:
    raw = envelope("order", {"id": order_id, "status": status})
    assert as_read(raw, _ORDER) == by_reference(raw, _ORDER)


@given(confirmation=values, refusal=values, pickup_id=values)
def test_a_pickup_identity_reads_the_same_decoded_as_raw(
    confirmation: Any, refusal: Any, pickup_id: Any
) -> None:
    fields = {"confirmation_number": confirmation, "error_message": refusal, "id": pickup_id}
    raw = envelope("scheduled_pickup", fields)
    assert as_read(raw, _SCHEDULED_PICKUP) == by_reference(raw, _SCHEDULED_PICKUP)


@given(webhook_id=values, token=values)
def test_a_webhook_identity_reads_the_same_decoded_as_raw(webhook_id: Any, token: Any) -> None:
    raw = envelope("webhook", {"id": webhook_id, "token": token, "target_url": "https://x.test"})
    assert as_read(raw, _WEBHOOK) == by_reference(raw, _WEBHOOK)


def test_identities_read_off_the_decoded_value_where_it_reads_the_same() -> None:
    assert _decoded_identity(_ORDER) == ((("order", "id"),),)
    assert _decoded_identity(_SCHEDULED_PICKUP) == (
        (("scheduled_pickup", "confirmation_number"),),
        (("scheduled_pickup", "error_message"),),
    )
    # A webhook's token defaults to "": absent would read as present, so the raw answer
    # is read for it.
    assert _decoded_identity(_WEBHOOK) == ()


class _Renamed(Model, rename={"reference": "ref"}):
    reference: str | None = None


class _Rewritten(Model):
    key: str | None = None

    def __post_init__(self) -> None:
        self.key = self.key or "made up"


class _Holder(Model):
    renamed: _Renamed | None = None
    rewritten: _Rewritten | None = None


@pytest.mark.parametrize(
    ("path", "attributes"),
    [
        pytest.param("renamed.ref", ((("renamed", "reference"),),), id="wire-name"),
        pytest.param("rewritten.key", (), id="post-init-rewrites"),
        pytest.param("renamed.reference", (), id="not-a-wire-name"),
        pytest.param("renamed.ref.deeper", (), id="through-a-plain-field"),
    ],
)
def test_identity_paths_resolve_on_wire_names_and_refuse_what_may_read_otherwise(
    path: str, attributes: object
) -> None:
    answer: Answer[_Holder, _Holder] = Answer(
        wire=_Holder, unwrap=lambda holder: holder, identity=((path,),)
    )
    assert _decoded_identity(answer) == attributes


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b'{"rewritten": {}}', id="absent"),
        pytest.param(b'{"rewritten": {"key": null}}', id="null"),
    ],
)
def test_a_field_rewritten_after_decoding_is_checked_on_the_raw_answer(raw: bytes) -> None:
    answer: Answer[_Holder, _Holder] = Answer(
        wire=_Holder, unwrap=lambda holder: holder, identity=(("rewritten.key",),)
    )
    with pytest.raises(ValueError, match="identifying fields"):
        read_answer(raw, answer, lenient=False, what="test")
