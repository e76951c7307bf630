"""One client per account for a worker: tokens from the environment or a config file.

Jobs name the account they ship on (``ShipmentJob.account``; ``""`` is the default
account). A worker serves every account of the journal with one
:class:`~shipping_async.AsyncShippingClient` each, all made here, each with the order
limiter of its account. Tokens never go into the journal: they come from

1. the config file given (TOML)::

       [accounts.acme]
       token_env = "ACME_SHIPPING_TOKEN"    # or: token_file = "/run/secrets/acme"
       base_url = "https://api.example.com/client_api/v2"   # optional

2. else the environment: ``SHIPPING_ACCESS_TOKEN__ACME`` (the account name upper-cased,
   every character other than a letter or digit as ``_``) and optionally
   ``SHIPPING_BASE_URL__ACME``; the default account uses ``SHIPPING_ACCESS_TOKEN`` and
   ``SHIPPING_BASE_URL``, which are also every account's fallback base URL.
"""

from __future__ import annotations

import asyncio
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from shipping_async._client import AsyncShippingClient
from shipping_async.clock import Clock
from shipping_async.errors import ShippingError
from shipping_async.limiter import OrderLimiter
from shipping_async.scaleout.factory import close_limiter

__all__ = ["AccountClients", "AccountConfigError", "env_names"]

TOKEN_ENV = "SHIPPING_ACCESS_TOKEN"
BASE_URL_ENV = "SHIPPING_BASE_URL"

LimiterFactory = Callable[[str], OrderLimiter]


class AccountConfigError(ShippingError):
    """An account has no token (or its config entry is unusable); the text says where to put it."""


def env_names(account: str) -> tuple[str, str]:
    """The token and base-URL variables of ``account``.

    >>> env_names("acme-eu")
    ('SHIPPING_ACCESS_TOKEN__ACME_EU', 'SHIPPING_BASE_URL__ACME_EU')
    """
    if not account:
        return TOKEN_ENV, BASE_URL_ENV
    suffix = re.sub(r"[^A-Za-z0-9]", "_", account).upper()
    return f"{TOKEN_ENV}__{suffix}", f"{BASE_URL_ENV}__{suffix}"


class AccountClients:
    """Makes (on first use) and closes one client per account.

    ``limiter_for(account)`` builds that account's order limiter (a
    :class:`~shipping_async.scaleout.redis_limiter.RedisOrderLimiter` for many workers);
    ``client_options`` go to every :class:`~shipping_async.AsyncShippingClient`.
    """

    def __init__(
        self,
        limiter_for: LimiterFactory,
        *,
        config: str | Path | None = None,
        environ: Mapping[str, str] | None = None,
        base_url: str | None = None,
        clock: Clock | None = None,
        **client_options: Any,
    ) -> None:
        self._limiter_for = limiter_for
        self._environ = os.environ if environ is None else environ
        self._base_url = base_url
        self._clock = clock
        self._options = client_options
        self._accounts = _read_config(Path(config)) if config is not None else {}
        self._clients: dict[str, AsyncShippingClient] = {}
        self._limiters: list[OrderLimiter] = []
        self._session: aiohttp.ClientSession | None = None

    def _shared_session(self) -> aiohttp.ClientSession | None:
        """One connection pool for every account's client, made on first use.

        A session per account kept a pool per account: at 50 accounts a worker opened a
        new connection for most jobs (a connect is ~0.3 ms of CPU on both sides). The
        token is a header of each request, so accounts may share connections; cookies
        they may not, so the jar keeps none (the API sets none). No limit on
        connections: a session per account allowed 100 each.
        """
        if self._session is None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:  # a session belongs to a loop: the client makes its own
                return None
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), cookie_jar=aiohttp.DummyCookieJar()
            )
        return self._session

    def client(self, account: str) -> AsyncShippingClient:
        """The client of ``account``; raises :class:`AccountConfigError` without a token."""
        client = self._clients.get(account)
        if client is None:
            token, base_url = self._settings(account)
            limiter = self._limiter_for(account)
            self._limiters.append(limiter)
            client = AsyncShippingClient(
                token,
                base_url=base_url,
                order_limiter=limiter,
                clock=self._clock,
                session=self._shared_session(),
                **self._options,
            )
            self._clients[account] = client
        return client

    def check(self, accounts: list[str]) -> None:
        """Fail now, naming every account without a token, rather than mid-batch."""
        missing = []
        for account in accounts:
            try:
                self._settings(account)
            except AccountConfigError as exc:
                missing.append(str(exc))
        if missing:
            raise AccountConfigError("; ".join(missing))

    async def aclose(self) -> None:
        """Close every client and every limiter made."""
        for client in self._clients.values():
            await client.close()
        for limiter in self._limiters:
            await close_limiter(limiter)
        self._clients.clear()
        self._limiters.clear()
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _settings(self, account: str) -> tuple[str, str | None]:
        token_env, base_url_env = env_names(account)
        entry = self._accounts.get(account, {})
        token: str | None
        if "token_file" in entry:
            token = Path(entry["token_file"]).read_text(encoding="utf-8").strip()
        else:
            token = self._environ.get(entry.get("token_env", token_env))
        if not token:
            where = entry.get("token_file") or entry.get("token_env", token_env)
            raise AccountConfigError(
                f"account {account or '(default)'!r} has no access token: set {where}"
                + ("" if entry else " or add it to the accounts config file")
            )
        base_url = (
            entry.get("base_url")
            or self._environ.get(base_url_env)
            or self._base_url
            or self._environ.get(BASE_URL_ENV)
        )
        return token, base_url


def _read_config(path: Path) -> dict[str, dict[str, str]]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise AccountConfigError(f"accounts config {path}: {exc}") from exc
    accounts = data.get("accounts", {})
    allowed = {"token_env", "token_file", "base_url"}
    for name, entry in accounts.items():
        if not isinstance(entry, dict) or not set(entry) <= allowed:
            raise AccountConfigError(
                f"accounts config {path}: [accounts.{name}] may hold only "
                f"{', '.join(sorted(allowed))} (tokens stay in the environment or a file)"
            )
    return {str(name): {k: str(v) for k, v in entry.items()} for name, entry in accounts.items()}
