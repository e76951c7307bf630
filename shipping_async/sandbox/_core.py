"""The sandbox object every handler works on: config, clock, store and the services."""

from __future__ import annotations

from datetime import datetime

from aiohttp import web

from shipping_async.clock import Clock
from shipping_async.sandbox._accounts import Accounts, generate_token
from shipping_async.sandbox._config import SandboxConfig
from shipping_async.sandbox._delivery import Dispatcher
from shipping_async.sandbox._faults import FaultBook
from shipping_async.sandbox._log import RequestLog
from shipping_async.sandbox._ratelimit import RateLimiter
from shipping_async.sandbox._state import Order, Quote, Store, Webhook

__all__ = ["ACCOUNT_KEY", "API_PREFIX", "SANDBOX_KEY", "Sandbox", "api_path", "generate_token"]

#: Every API path starts here; base_url ends with it.
API_PREFIX = "/client_api/v2"


def api_path(request: web.Request) -> str:
    """The request's path relative to the API prefix: ``/orders/12/waybills``."""
    return request.path.removeprefix(API_PREFIX)


class Sandbox:
    """One simulated service: what the handlers, the control API and the handle share."""

    __slots__ = ("accounts", "clock", "config", "dispatcher", "faults", "limiter", "log", "seed",
                 "store")  # fmt: skip

    def __init__(
        self,
        *,
        token: str | None = None,
        clock: Clock,
        seed: int | None,
        config: SandboxConfig,
        accounts: Accounts | None = None,
    ):
        if accounts is None:
            accounts = Accounts.build(token=token, tokens=None, seed=seed)
        elif token is not None:
            raise ValueError("pass either token or accounts, not both")
        #: The tokens accepted and the account (order budget) of each.
        self.accounts = accounts
        self.clock = clock
        self.seed = seed
        self.config = config
        self.store = Store(seed)
        self.limiter = RateLimiter(
            clock, limit=config.rate_limit, window=config.rate_window, mode=config.rate_mode
        )
        self.faults = FaultBook()
        self.log = RequestLog(config.request_log_size)
        self.dispatcher = Dispatcher(clock, config, self._webhook)

    @property
    def token(self) -> str:
        """The first token accepted (the only one unless several were given)."""
        return self.accounts.tokens[0]

    def _webhook(self, webhook_id: int) -> Webhook | None:
        return self.store.webhooks.get(webhook_id)

    def estimate_expired(self, quote: Quote) -> bool:
        """Whether the quote's estimates are past their validity on the sandbox clock."""
        return self.clock.monotonic() - quote.created_at >= self.config.estimate_validity

    def rate_text(self) -> str:
        """The 429 text of POST /orders: ``20 of 20 in 0.6 seconds`` (the window in real
        seconds, as a client on real time must wait it)."""
        limit, window = self.config.rate_limit, self.real_seconds(self.config.rate_window)
        return f"{limit} of {limit} in {window:g} seconds"

    def real_seconds(self, seconds: float) -> float:
        """How many real seconds ``seconds`` of sandbox time last (as the 429 text reports).

        A clock without ``to_real`` (system or manual time) runs at real speed.
        """
        to_real = getattr(self.clock, "to_real", None)
        return float(to_real(seconds)) if callable(to_real) else seconds

    def emit(
        self,
        order: Order,
        event_type: str,
        original_value: str,
        updated_value: str,
        *,
        at: datetime | None = None,
    ) -> None:
        """Fire one event of ``order`` to the subscribed webhooks, stamped ``at`` (now)."""
        self.dispatcher.emit(
            list(self.store.webhooks.values()),
            order_id=order.id,
            event_type=event_type,
            original_value=original_value,
            updated_value=updated_value,
            at=at,
        )

    def set_leg_status(
        self, order: Order, index: int, status: str, *, at: datetime | None = None
    ) -> None:
        """Move one leg, firing ``shipment.updated.status`` when the spec says it fires.

        Legs moved together pass one ``at``: their events are then byte-identical, as the
        API's are for the two legs of a new hub order.
        """
        leg = order.legs[index]
        original, leg.status = leg.status, status
        if status != original and status in ("order_received", "in_transit", "delivered"):
            self.emit(order, "shipment.updated.status", original, status, at=at)

    async def reset(self) -> None:
        """Back to an empty sandbox: same tokens, seed and config; ids replay from the seed."""
        await self.dispatcher.reset()
        self.store = Store(self.seed)
        self.limiter.reset()
        self.faults.clear()
        self.log.clear()


#: The account whose token authenticated the request (set by the auth middleware).
ACCOUNT_KEY: web.RequestKey[str] = web.RequestKey("shipping_async.sandbox.account", str)

#: Where :func:`create_app` keeps the :class:`Sandbox` of an application.
SANDBOX_KEY: web.AppKey[Sandbox] = web.AppKey("shipping_async.sandbox", Sandbox)
