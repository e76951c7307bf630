"""A stateful local simulator of the whole shipping API, for tests, benchmarks and demos.

>>> async with SandboxServer(speed=100, seed=7) as sandbox:  # doctest: +SKIP
...     headers = {"Authorization": f"Bearer {sandbox.token}"}
...     # POST f"{sandbox.base_url}/quotes", ...; sandbox.control.set_status(...)

See ``/_sandbox/...`` (the control API) and :class:`SandboxControl` for what tests can
steer: order statuses, injected faults, the request log and webhook deliveries.
"""

from __future__ import annotations

from shipping_async.sandbox._app import create_app
from shipping_async.sandbox._config import (
    DEFAULT_HUB_LANES,
    HubLane,
    RateMode,
    SandboxConfig,
    SandboxOptions,
)
from shipping_async.sandbox._control import SandboxControl, SandboxControlError
from shipping_async.sandbox._core import API_PREFIX, SANDBOX_KEY, Sandbox
from shipping_async.sandbox._delivery import DeliveryRecord
from shipping_async.sandbox._faults import Fault
from shipping_async.sandbox._log import RequestRecord
from shipping_async.sandbox._server import SandboxServer

__all__ = [
    "API_PREFIX",
    "DEFAULT_HUB_LANES",
    "SANDBOX_KEY",
    "DeliveryRecord",
    "Fault",
    "HubLane",
    "RateMode",
    "RequestRecord",
    "Sandbox",
    "SandboxConfig",
    "SandboxControl",
    "SandboxControlError",
    "SandboxOptions",
    "SandboxServer",
    "create_app",
]
