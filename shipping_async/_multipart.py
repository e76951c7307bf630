"""Multipart bodies for POST /orders with documents, in the Rails form convention.

The spec says the order may be sent as ``multipart/form-data`` but not how the parts are
named, so this is our choice (the sandbox parses exactly this, and it is what a Rails
server decodes into the same ``order`` hash as the JSON body):

- nested keys in brackets: ``order[origin_address][city]``;
- list items by index: ``order[hs_codes][0][code]``;
- booleans as ``true``/``false``, numbers and decimals as their text, ``None`` left out;
- each document as a file part named ``order[<document>]``, the document being an
  :class:`~shipping_async.models.OrderDocument` value: ``order[commercial_invoice]``,
  ``order[materials_safety_data_sheet]``.

Change the convention here and nowhere else.
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeAlias

import aiohttp
import msgspec

from shipping_async.errors import RequestValidationError
from shipping_async.models import OrderDocument, OrderRequest
from shipping_async.models._base import enc_hook

__all__ = ["FileSpec", "Upload", "flatten", "load_files", "order_form"]

#: A document to upload: its bytes, a path to read, or ``(filename, bytes, content_type)``.
FileSpec: TypeAlias = bytes | str | os.PathLike[str] | tuple[str, bytes, str]

ROOT = "order"
_DEFAULT_TYPE = "application/octet-stream"


@dataclass(frozen=True, slots=True)
class Upload:
    """A document read into memory, ready to be a file part (and re-sent unchanged)."""

    filename: str
    content: bytes
    content_type: str


def flatten(value: Any, prefix: str) -> list[tuple[str, str]]:
    """Rails-style form fields for ``value`` (builtins: dict, list, str, numbers, bool).

    >>> flatten({"a": {"b": [1, True]}, "c": None}, "order")
    [('order[a][b][0]', '1'), ('order[a][b][1]', 'true')]
    """
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [pair for key, item in value.items() for pair in flatten(item, f"{prefix}[{key}]")]
    if isinstance(value, list | tuple):
        return [
            pair for index, item in enumerate(value) for pair in flatten(item, f"{prefix}[{index}]")
        ]
    if isinstance(value, bool):  # before int: bool is an int
        return [(prefix, "true" if value else "false")]
    if isinstance(value, str | int | float | Decimal):
        return [(prefix, str(value))]
    raise TypeError(f"{prefix}: cannot put a {type(value).__name__} in a form field")


async def load_files(files: Mapping[str, FileSpec]) -> dict[OrderDocument, Upload]:
    """Check the document names and read every document once (paths in a thread)."""
    uploads: dict[OrderDocument, Upload] = {}
    for name, spec in files.items():
        try:
            document = OrderDocument(name)
        except ValueError:
            known = ", ".join(member.value for member in OrderDocument)
            raise RequestValidationError(
                f"files[{name}]", f"not a document the API takes (one of: {known})"
            ) from None
        uploads[document] = _header_safe(document, await _load(document, spec))
    return uploads


def _header_safe(document: OrderDocument, upload: Upload) -> Upload:
    # The file name and content type go into the part's headers: a CR or LF there would
    # end the header early and let the value write headers of its own.
    for name, value in (("filename", upload.filename), ("content_type", upload.content_type)):
        bad = next((char for char in value if ord(char) < 0x20 or ord(char) == 0x7F), None)
        if bad is not None:
            raise RequestValidationError(
                f"files[{document.value}].{name}",
                f"holds the control character {bad!r}, which cannot go into a header",
            )
    return upload


async def _load(document: OrderDocument, spec: FileSpec) -> Upload:
    field = f"files[{document.value}]"
    if isinstance(spec, bytes | bytearray):
        return Upload(document.value, bytes(spec), _DEFAULT_TYPE)
    if isinstance(spec, tuple):
        if len(spec) != 3 or not isinstance(spec[1], bytes | bytearray):
            raise RequestValidationError(field, "expected (filename, bytes, content_type)")
        filename, content, content_type = spec
        return Upload(str(filename), bytes(content), str(content_type))
    if isinstance(spec, str | os.PathLike):
        path = Path(spec)
        try:
            content = await asyncio.to_thread(path.read_bytes)
        except OSError as exc:
            raise RequestValidationError(
                field, f"cannot read {path}: {exc.strerror or exc}"
            ) from exc
        content_type = mimetypes.guess_type(path.name)[0] or _DEFAULT_TYPE
        return Upload(path.name, content, content_type)
    raise RequestValidationError(
        field,
        f"expected bytes, a path or (filename, bytes, content_type), got {type(spec).__name__}",
    )


def order_form(
    request: OrderRequest, uploads: Mapping[OrderDocument, Upload]
) -> Callable[[], aiohttp.FormData]:
    """A factory of the multipart body: aiohttp consumes a ``FormData`` once per send."""
    fields = flatten(msgspec.to_builtins(request, enc_hook=enc_hook), ROOT)

    def build() -> aiohttp.FormData:
        form = aiohttp.FormData()
        for name, value in fields:
            form.add_field(name, value)
        for document, upload in uploads.items():
            form.add_field(
                f"{ROOT}[{document.value}]",
                upload.content,
                filename=upload.filename,
                content_type=upload.content_type,
            )
        return form

    return build
