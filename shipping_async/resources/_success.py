"""The answer of the operations that only say they succeeded (the two DELETEs)."""

from __future__ import annotations

from shipping_async._decode import Answer
from shipping_async.models.orders import _SuccessBody

__all__ = ["SUCCESS"]


def _succeeded(body: _SuccessBody) -> None:
    if body.success is False:
        raise ValueError("the answer says success: false")


#: ``{"success": true, ...}``; an empty body counts as success too.
SUCCESS: Answer[_SuccessBody, None] = Answer(wire=_SuccessBody, unwrap=_succeeded, empty=b"{}")
