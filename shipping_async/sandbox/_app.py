"""``create_app``: the aiohttp application of the sandbox, its routes and middlewares.

Middlewares, outermost first: the request log, JSON error bodies for whatever escapes
(unknown routes, 405, 413, bugs), bearer authentication, injected faults, and the 400 of
spec 7 for invalid input.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Unpack

from aiohttp import web

from shipping_async.clock import Clock, ScaledClock
from shipping_async.sandbox import _orders, _pickups, _quotes, _webhooks
from shipping_async.sandbox._accounts import Accounts, TokensSpec
from shipping_async.sandbox._config import SandboxConfig, SandboxOptions
from shipping_async.sandbox._control import CONTROL_PREFIX, control_errors
from shipping_async.sandbox._control import routes as control_routes
from shipping_async.sandbox._core import ACCOUNT_KEY, API_PREFIX, SANDBOX_KEY, Sandbox, api_path
from shipping_async.sandbox._faults import Fault
from shipping_async.sandbox._log import MAX_LOGGED_BODY, RequestRecord, note, noting, redact
from shipping_async.sandbox._wire import (
    InvalidInput,
    error_response,
    format_utc_millis,
    invalid_input,
)

__all__ = ["create_app"]

_logger = logging.getLogger("shipping_async.sandbox")
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_DROPS = ("drop_before", "drop_after")


def _is_api(request: web.Request) -> bool:
    return request.path == API_PREFIX or request.path.startswith(API_PREFIX + "/")


@web.middleware
async def _request_log(request: web.Request, handler: _Handler) -> web.StreamResponse:
    if not _is_api(request):
        return await handler(request)
    sandbox = request.app[SANDBOX_KEY]
    log = sandbox.log
    if _account(request, sandbox.accounts) is None:
        # Logged only once authenticated: anyone can send a request without a token.
        log.refused += 1
        return await handler(request)
    record = RequestRecord(
        id=0,
        method=request.method,
        path=api_path(request),
        status=None,
        at=format_utc_millis(sandbox.clock.now()),
        monotonic=sandbox.clock.monotonic(),
    )
    log.append(record)
    record.headers = redact(request.headers)
    if request.content_type != "multipart/form-data" and request.can_read_body:
        # Read once here (aiohttp keeps it for the handler); multipart bodies are streamed
        # by their handler and logged without their content.
        record.body = (await request.read())[:MAX_LOGGED_BODY]
    response: web.StreamResponse | None = None
    with noting() as details:
        try:
            response = await handler(request)
            return response
        finally:
            record.fault = details.fault
            record.customer_reference = details.customer_reference
            record.order_id = details.order_id
            record.detail = details.detail
            record.account = details.account
            if response is not None and details.fault not in _DROPS:
                record.status = response.status


@web.middleware
async def _json_errors(request: web.Request, handler: _Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = error_response(exc.status, exc.reason)
        for header in ("Allow", "WWW-Authenticate"):
            if header in exc.headers:
                response.headers[header] = exc.headers[header]
        return response
    except Exception:
        _logger.exception("sandbox bug while handling %s %s", request.method, request.path)
        return error_response(500, "Internal sandbox error; see the sandbox log")


def _account(request: web.Request, accounts: Accounts) -> str | None:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return accounts.account_of(given.strip())


@web.middleware
async def _auth(request: web.Request, handler: _Handler) -> web.StreamResponse:
    if not (_is_api(request) or request.path.startswith(CONTROL_PREFIX + "/")):
        return await handler(request)
    account = _account(request, request.app[SANDBOX_KEY].accounts)
    if account is None:
        if "Authorization" not in request.headers:
            text = "Access token missing: send the header Authorization: Bearer <token>"
        else:
            text = "Access token invalid"
        response = error_response(401, text)
        response.headers["WWW-Authenticate"] = 'Bearer realm="shipping-sandbox"'
        return response
    request[ACCOUNT_KEY] = account
    note().account = account
    return await handler(request)


def _drop(request: web.Request) -> web.Response:
    # Closing the transport makes aiohttp's write of the returned response fail quietly:
    # the client sees the connection close without any answer.
    if request.transport is not None:
        request.transport.abort()
    return web.Response(status=500)


async def _apply(
    fault: Fault, sandbox: Sandbox, request: web.Request, handler: _Handler
) -> web.StreamResponse:
    if fault.kind == "drop_before":
        return _drop(request)
    if fault.kind == "status":
        assert fault.status is not None
        # An injected 429 without a text reads like the real one, in the sandbox's window.
        default = sandbox.rate_text() if fault.status == 429 else None
        return error_response(fault.status, fault.error_text(default))
    if fault.kind == "delay":
        await sandbox.clock.sleep(fault.seconds or 0.0)
        return await handler(request)
    response = await handler(request)
    if fault.kind == "delay_after":
        # Processed (an order IS created), answered late: what a slow gateway does.
        await sandbox.clock.sleep(fault.seconds or 0.0)
        return response
    if fault.kind == "drop_after":
        return _drop(request)
    if fault.kind == "status_after":  # processed, then a gateway's error instead
        assert fault.status is not None
        return error_response(fault.status, fault.error_text())
    body = response.body if isinstance(response, web.Response) else b""
    raw = body if isinstance(body, bytes) else b""
    return web.Response(
        body=raw[: len(raw) // 2] or b"{", status=response.status, content_type="application/json"
    )


@web.middleware
async def _faults(request: web.Request, handler: _Handler) -> web.StreamResponse:
    if not _is_api(request):
        return await handler(request)
    sandbox = request.app[SANDBOX_KEY]
    fault = sandbox.faults.take(request.method, api_path(request))
    if fault is None:
        return await handler(request)
    note().fault = fault.kind
    return await _apply(fault, sandbox, request, handler)


@web.middleware
async def _invalid_input(request: web.Request, handler: _Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except InvalidInput as exc:
        note().detail = str(exc)
        return invalid_input(str(exc))


def create_app(
    *,
    token: str | None = None,
    tokens: TokensSpec | None = None,
    clock: Clock | None = None,
    speed: float = 1.0,
    seed: int | None = None,
    **options: Unpack[SandboxOptions],
) -> web.Application:
    """The sandbox as an aiohttp application, for mounting it yourself.

    ``clock`` defaults to ``ScaledClock(speed)``; pass one or the other. The sandbox
    object is ``app[SANDBOX_KEY]`` (its ``token`` is the one to send) and
    ``SandboxControl(app[SANDBOX_KEY])`` is the in-process control handle.

    ``tokens`` makes several accounts instead of one, each with its own POST /orders
    budget: a count (``account-1`` ... with generated tokens, reproducible from ``seed``),
    a list of tokens (one account each) or a mapping account -> token(s); the accounts
    are ``app[SANDBOX_KEY].accounts``. Give ``token`` or ``tokens``, not both.

    >>> app = create_app(token="t0ken", speed=100, rate_mode="fixed")
    >>> app = create_app(tokens={"acme": "t1", "globex": "t2"}, speed=100)
    """
    if clock is None:
        clock = ScaledClock(speed)
    elif speed != 1.0:
        raise ValueError("pass either clock or speed: speed only builds the default clock")
    sandbox = Sandbox(
        accounts=Accounts.build(token=token, tokens=tokens, seed=seed),
        clock=clock,
        seed=seed,
        config=SandboxConfig(**options),
    )
    app = web.Application(
        middlewares=[_request_log, _json_errors, _auth, _faults, _invalid_input, control_errors]
    )
    app[SANDBOX_KEY] = sandbox
    for module in (_quotes, _orders, _pickups, _webhooks):
        app.add_routes(module.routes(API_PREFIX))
    app.add_routes(control_routes())

    async def close_dispatcher(_: web.Application) -> None:
        await sandbox.dispatcher.close()

    app.on_cleanup.append(close_dispatcher)
    return app
