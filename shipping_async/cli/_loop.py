"""The event loop the long-running commands run on: uvloop when installed, else asyncio's."""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

__all__ = ["LOOP_ENV", "run"]

T = TypeVar("T")

#: ``asyncio`` keeps asyncio's own loop even where uvloop is installed.
LOOP_ENV: Final = "SHIPPING_EVENT_LOOP"


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop (libuv; transports and the scheduler in C: a worker spends about a
    fifth of its CPU in asyncio's own Python), unless absent or ``SHIPPING_EVENT_LOOP``
    says ``asyncio``."""
    if os.environ.get(LOOP_ENV, "").strip().lower() == "asyncio":
        return None
    if importlib.util.find_spec("uvloop") is None:
        return None
    import uvloop

    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the loop :func:`_loop_factory` picks."""
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(main)
