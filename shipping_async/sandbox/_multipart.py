"""POST /orders as ``multipart/form-data``: Rails-style flattened fields plus file parts.

Wire convention (the SDK encodes the same way):

- every field of the JSON body becomes one text part named by its path in brackets:
  ``order[origin_address][city]``, ``order[quote_estimate_id]``;
- list items are indexed from 0 without gaps: ``order[hs_codes][0][code]``;
- values are text: numbers as their decimal text, booleans ``true``/``false``; a ``None``
  field is simply not sent;
- files are parts with a filename named ``order[commercial_invoice]`` or
  ``order[materials_safety_data_sheet]``, at most once each and at most 10 MiB each.

Text values are then converted to the strict request type with ``msgspec.convert(...,
strict=False)``, which turns numeric and boolean text into numbers and booleans.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from shipping_async.sandbox._schemas import OrderRequest
from shipping_async.sandbox._wire import InvalidInput

__all__ = ["FILE_PARTS", "MAX_FILE_BYTES", "Upload", "read_order_form"]

#: File part name -> the order's document link it fills.
FILE_PARTS = {
    "order[commercial_invoice]": "commercial_invoice_link",
    "order[materials_safety_data_sheet]": "materials_safety_data_sheet_link",
}
MAX_FILE_BYTES = 10 * 1024 * 1024
_KEY = re.compile(r"^([^\[\]]+)((?:\[[^\[\]]+\])*)$")


class Upload(msgspec.Struct, frozen=True):
    """One uploaded file."""

    link_field: str
    filename: str
    content_type: str
    content: bytes


def _path(name: str) -> list[str]:
    match = _KEY.match(name)
    if match is None:
        raise InvalidInput(f"multipart: part name {name!r} is not a bracketed field path")
    return [match.group(1), *re.findall(r"\[([^\[\]]+)\]", match.group(2))]


def _insert(tree: dict[str, Any], path: list[str], value: str, name: str) -> None:
    node = tree
    for key in path[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise InvalidInput(f"multipart: {name!r} nests under a field that has a value")
        node = child
    if path[-1] in node:
        raise InvalidInput(f"multipart: field {name!r} is sent twice")
    node[path[-1]] = value


def _lists(node: Any, name: str) -> Any:
    """Turn every dict whose keys are all indices into a list, checking 0..n-1."""
    if not isinstance(node, dict):
        return node
    converted = {key: _lists(value, f"{name}[{key}]") for key, value in node.items()}
    if converted and all(key.isdigit() for key in converted):
        indices = sorted(int(key) for key in converted)
        if indices != list(range(len(indices))):
            raise InvalidInput(f"multipart: {name} list indices must run 0..n-1 without gaps")
        return [converted[str(index)] for index in indices]
    return converted


async def _read_file(part: BodyPartReader, name: str) -> bytes:
    content = bytearray()
    while chunk := await part.read_chunk():
        content.extend(chunk)
        if len(content) > MAX_FILE_BYTES:
            raise InvalidInput(f"multipart: {name} is larger than {MAX_FILE_BYTES} bytes")
    return bytes(content)


async def read_order_form(request: web.Request) -> tuple[OrderRequest, list[Upload]]:
    """Decode a multipart POST /orders into the strict request and its uploads."""
    try:
        return await _read_order_form(request)
    except (ValueError, LookupError, HttpProcessingError) as exc:
        # aiohttp's refusals: no boundary, a body that is not multipart, a part cut short,
        # an invalid part header, text not in its charset or an unknown charset: a 400.
        raise InvalidInput(f"multipart: {exc}") from None


async def _read_order_form(request: web.Request) -> tuple[OrderRequest, list[Upload]]:
    tree: dict[str, Any] = {}
    uploads: dict[str, Upload] = {}
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader) or not part.name:
            raise InvalidInput("multipart: every part needs a name (no nested multipart)")
        name = part.name
        if part.filename is not None:
            if name not in FILE_PARTS:
                raise InvalidInput(f"multipart: unexpected file part {name!r}")
            if name in uploads:
                raise InvalidInput(f"multipart: file part {name!r} is sent twice")
            uploads[name] = Upload(
                link_field=FILE_PARTS[name],
                filename=part.filename,
                content_type=part.headers.get("Content-Type", "application/octet-stream"),
                content=await _read_file(part, name),
            )
        else:
            _insert(tree, _path(name), await part.text(), name)
    try:
        body = msgspec.convert(_lists(tree, "body"), OrderRequest, strict=False)
    except msgspec.ValidationError as exc:
        raise InvalidInput(f"multipart: {exc}") from exc
    return body, list(uploads.values())
