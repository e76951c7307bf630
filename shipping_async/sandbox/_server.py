"""``SandboxServer``: the sandbox listening on a real socket, as an async context manager."""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Self, Unpack

from aiohttp import web

from shipping_async.clock import Clock
from shipping_async.sandbox._accounts import TokensSpec
from shipping_async.sandbox._app import create_app
from shipping_async.sandbox._config import SandboxOptions
from shipping_async.sandbox._control import SandboxControl
from shipping_async.sandbox._core import API_PREFIX, SANDBOX_KEY

__all__ = ["SandboxServer"]


class SandboxServer:
    """A running sandbox on ``host:port`` (port 0 picks a free one).

    >>> async with SandboxServer(speed=100, seed=1) as sandbox:  # doctest: +SKIP
    ...     sandbox.base_url  # 'http://127.0.0.1:54321/client_api/v2'
    ...     sandbox.control.set_status(order_id, "in_transit")

    Without ``token`` one is generated (reproducibly when ``seed`` is given); ``tokens``
    serves several accounts instead, each with its own order budget (``tokens=200``, a
    list, or a mapping account -> token(s); see :func:`create_app`). Options of
    :class:`~shipping_async.sandbox.SandboxConfig` are keyword arguments
    (``rate_mode="fixed"``, ``estimate_validity=60``, ``hub_lanes=...``).
    """

    __slots__ = ("_app", "_host", "_port", "_runner", "control")

    def __init__(
        self,
        *,
        token: str | None = None,
        tokens: TokensSpec | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        speed: float = 1.0,
        seed: int | None = None,
        clock: Clock | None = None,
        **options: Unpack[SandboxOptions],
    ) -> None:
        self._app = create_app(
            token=token, tokens=tokens, clock=clock, speed=speed, seed=seed, **options
        )
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self.control = SandboxControl(self._app[SANDBOX_KEY])

    @property
    def app(self) -> web.Application:
        """The aiohttp application being served."""
        return self._app

    @property
    def token(self) -> str:
        """The bearer token every request must send."""
        return self._app[SANDBOX_KEY].token

    @property
    def tokens(self) -> tuple[str, ...]:
        """Every token accepted, in the order given (``tokens[0]`` is :attr:`token`)."""
        return self._app[SANDBOX_KEY].accounts.tokens

    @property
    def accounts(self) -> Mapping[str, tuple[str, ...]]:
        """Account name -> its tokens; each account has its own POST /orders budget."""
        return self._app[SANDBOX_KEY].accounts.by_account

    @property
    def clock(self) -> Clock:
        """The clock the sandbox runs on."""
        return self._app[SANDBOX_KEY].clock

    @property
    def port(self) -> int:
        """The port listened on (the real one once started with port 0)."""
        return self._port

    @property
    def base_url(self) -> str:
        """``http://host:port/client_api/v2``: what the SDK's ``base_url`` should be."""
        if self._runner is None:
            raise RuntimeError("the sandbox is not running: use 'async with SandboxServer()'")
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self._port}{API_PREFIX}"

    async def start(self) -> None:
        """Start listening."""
        if self._runner is not None:
            raise RuntimeError("the sandbox is already running")
        # A short grace period: a request held by a delay fault must not stall shutdown.
        runner = web.AppRunner(self._app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self._host, self._port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = int(runner.addresses[0][1])

    async def close(self) -> None:
        """Stop listening, cancel pending webhook deliveries and close their session."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "running" if self._runner is not None else "stopped"
        return f"SandboxServer({self._host}:{self._port}, {state}, clock={self.clock!r})"
