"""The OpenAPI document is valid, every body and parameter has an example, and the SDK reads them.

Mock servers (Prism, see ``tests/prism``) answer from these examples, so each one must fit
its schema (checked with every object closed, as the conformance tests do) and decode
strictly into the SDK's models.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from importlib import resources
from typing import Any

import jsonschema_rs
import pytest
from openapi_spec_validator import validate

from shipping_async._decode import Answer, read_answer
from shipping_async.resources._success import SUCCESS
from shipping_async.resources.orders import _AVAILABILITIES, _ORDER, _SCHEDULED_PICKUP
from shipping_async.resources.quotes import _QUOTE
from shipping_async.resources.webhooks import _WEBHOOK

from .test_openapi_conformance import _closed


def _document() -> dict[str, Any]:
    text = resources.files("shipping_async.sandbox").joinpath("openapi.json").read_text()
    document: dict[str, Any] = json.loads(text)
    return document


DOCUMENT = _document()
#: How the SDK reads each operation's success answer.
ANSWERS: dict[str, Answer[Any, Any]] = {
    "createQuote": _QUOTE,
    "getQuote": _QUOTE,
    "createOrder": _ORDER,
    "getOrder": _ORDER,
    "cancelOrder": SUCCESS,
    "createWaybill": _ORDER,
    "listPickupAvailabilities": _AVAILABILITIES,
    "schedulePickup": _SCHEDULED_PICKUP,
    "createWebhook": _WEBHOOK,
    "getWebhook": _WEBHOOK,
    "replaceWebhook": _WEBHOOK,
    "updateWebhook": _WEBHOOK,
    "deleteWebhook": SUCCESS,
}


def _resolve(node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        target: Any = DOCUMENT
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def _operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in {**DOCUMENT["paths"], **DOCUMENT["webhooks"]}.items():
        for method, operation in item.items():
            if method != "parameters":
                yield path, method, operation


def _media() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(where, status or 'request', media object) of every body in the document."""
    for path, method, operation in _operations():
        label = f"{method.upper()} {path}"
        body = _resolve(operation.get("requestBody", {}))
        for kind, media in body.get("content", {}).items():
            yield f"{label} request {kind}", "request", media
        for status, response in operation.get("responses", {}).items():
            for kind, media in _resolve(response).get("content", {}).items():
                yield f"{label} {status} {kind}", status, media


def _validator(schema: dict[str, Any]) -> Any:
    closed = {**DOCUMENT, "components": {**DOCUMENT["components"]}}
    closed["components"]["schemas"] = _closed(DOCUMENT["components"]["schemas"])
    return jsonschema_rs.validator_for({**closed, **_closed(schema)})


def test_the_document_is_a_valid_openapi_31_document() -> None:
    validate(DOCUMENT)  # openapi-spec-validator: raises on the first problem


def test_every_body_and_parameter_has_an_example() -> None:
    missing = [where for where, _, media in _media() if not media.get("examples")]
    for path, method, operation in _operations():
        item = DOCUMENT["paths"].get(path, {})
        for parameter in [*item.get("parameters", []), *operation.get("parameters", [])]:
            if "example" not in parameter and "examples" not in parameter:
                missing.append(f"{method.upper()} {path} parameter {parameter['name']}")
    assert missing == []


@pytest.mark.parametrize(
    ("where", "media"), [pytest.param(w, m, id=w) for w, _, m in _media() if "json" in w]
)
def test_every_json_example_fits_its_schema_with_every_object_closed(
    where: str, media: dict[str, Any]
) -> None:
    validator = _validator(media["schema"])
    for name, example in media["examples"].items():
        errors = [error.message for error in validator.iter_errors(example["value"])]
        assert errors == [], f"{where} example {name!r}"


@pytest.mark.parametrize(
    ("operation_id", "status", "media"),
    [
        pytest.param(operation["operationId"], status, media, id=f"{operation['operationId']}")
        for _, _, operation in _operations()
        if "operationId" in operation
        for status, response in operation["responses"].items()
        if status.startswith("2")
        for media in [_resolve(response)["content"]["application/json"]]
    ],
)
def test_every_success_example_decodes_strictly_into_the_sdk_models(
    operation_id: str, status: str, media: dict[str, Any]
) -> None:
    answer = ANSWERS[operation_id]
    for example in media["examples"].values():
        raw = json.dumps(example["value"]).encode()
        read_answer(raw, answer, lenient=False, what=operation_id)


def test_the_examples_show_both_quote_shapes_both_weight_spellings_and_hub_orders() -> None:
    text = json.dumps(DOCUMENT["paths"])
    assert '"billable_weight": {' in text
    assert '"billable_weights": {' in text
    quotes = DOCUMENT["paths"]["/quotes"]["post"]["responses"]["201"]["content"]
    assert set(quotes["application/json"]["examples"]) == {"direct", "hub"}
    orders = DOCUMENT["paths"]["/orders/{id}"]["get"]["responses"]["200"]["content"]
    hub = orders["application/json"]["examples"]["hub"]["value"]["order"]
    assert len(hub["shipments"]) == 2


def _properties(node: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    if isinstance(node, dict):
        for name, schema in node.get("properties", {}).items():
            yield path, name, schema
        for key, value in node.items():
            yield from _properties(value, f"{path}/{key}")
    elif isinstance(node, list):
        for value in node:
            yield from _properties(value, path)


def test_every_date_and_time_carries_a_format_or_an_example_in_its_wire_form() -> None:
    timely = re.compile(r"(_at|_at_utc|date|time|_from|_to|_delivered|time_zone_id)$")
    bare = [
        f"{path}.{name}"
        for path, name, schema in _properties(DOCUMENT)
        if timely.search(name)
        and "$ref" not in schema
        and schema.get("type") != "boolean"
        and not {"format", "examples", "example"} & set(schema)
    ]
    assert bare == []


def _pattern(schema: str, field: str) -> re.Pattern[str]:
    return re.compile(DOCUMENT["components"]["schemas"][schema]["properties"][field]["pattern"])


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        pytest.param("31-01-2026", True, id="31-jan"),
        pytest.param("30-04-2026", True, id="30-apr"),
        pytest.param("29-02-2028", True, id="leap-day"),
        pytest.param("31-04-2026", False, id="31-apr"),
        pytest.param("29-02-2026", False, id="29-feb-common-year"),
        pytest.param("00-01-2026", False, id="day-0"),
        pytest.param("01-13-2026", False, id="month-13"),
        pytest.param("01-01-0000", False, id="year-0"),
    ],
)
def test_date_patterns_admit_only_real_dates_so_generators_build_real_ones(
    text: str, valid: bool
) -> None:
    assert bool(_pattern("PickupAvailability", "pickup_date").fullmatch(text)) is valid
    day, month, year = text.split("-")
    stamp = f"{year}/{month}/{day} 23:59:59 UTC"
    assert bool(_pattern("Order", "created_at").fullmatch(stamp)) is valid
