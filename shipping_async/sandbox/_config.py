"""The sandbox's options: limits, validity, retry schedule and the hub lane table."""

from __future__ import annotations

from typing import Literal, TypedDict

import msgspec

from shipping_async.sandbox.countries import COUNTRIES

__all__ = ["DEFAULT_HUB_LANES", "HubLane", "RateMode", "SandboxConfig", "SandboxOptions"]

RateMode = Literal["sliding", "fixed"]

_EU_COUNTRY_IDS = frozenset(country.id for country in COUNTRIES.values() if country.eu)


class HubLane(msgspec.Struct, frozen=True, kw_only=True):
    """A consolidation hub and the lanes it serves.

    A lane ``origin -> destination`` is served when ``destination`` is in
    ``destination_country_ids`` and ``origin`` is in ``origin_country_ids`` (``None``: any
    origin). The local leg (hub to destination) is carried by ``local_carrier``.
    """

    name: str
    hub_country_id: int
    destination_country_ids: frozenset[int]
    origin_country_ids: frozenset[int] | None = None
    local_carrier: str = "Hub Local Courier"
    local_service: str = "Domestic"
    local_currency: str = "EUR"

    def serves(self, origin_country_id: int, destination_country_id: int) -> bool:
        """Whether this hub serves the lane."""
        if destination_country_id not in self.destination_country_ids:
            return False
        return self.origin_country_ids is None or origin_country_id in self.origin_country_ids


#: One hub in the Netherlands serving every lane into the EU; nothing into the US or
#: any other non-EU destination.
DEFAULT_HUB_LANES: tuple[HubLane, ...] = (
    HubLane(name="Amsterdam hub", hub_country_id=528, destination_country_ids=_EU_COUNTRY_IDS),
)


class SandboxConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Every tunable of the sandbox; durations are seconds of the sandbox clock."""

    #: POST /orders: at most ``rate_limit`` requests per ``rate_window`` seconds per account.
    rate_limit: int = 20
    rate_window: float = 60.0
    rate_mode: RateMode = "sliding"
    #: How long a quote's estimates stay orderable (``quote_expired`` flips afterwards).
    estimate_validity: float = 900.0
    hub_lanes: tuple[HubLane, ...] = DEFAULT_HUB_LANES
    #: Webhook deliveries: an answer slower than this counts as a failure.
    delivery_timeout: float = 10.0
    #: Delays before each retry of a failed delivery, counted from the failure.
    retry_delays: tuple[float, ...] = (20.0, 40.0, 60.0, 80.0)
    #: The account's currency: hub estimates are converted into it.
    account_currency: str = "USD"
    #: Pickup slots: cut-off, earliest pickup, closing time (local), minimum window.
    pickup_cut_off: str = "16:00"
    pickup_earliest: str = "09:00"
    pickup_closing: str = "18:00"
    pickup_minimum_minutes: int = 120
    pickup_business_days: int = 5
    #: The request log keeps the latest this many authenticated requests (a ring buffer).
    request_log_size: int = 100_000

    def __post_init__(self) -> None:
        if self.request_log_size < 1:
            raise ValueError("request_log_size must be >= 1")
        if self.rate_limit < 1 or self.rate_window <= 0:
            raise ValueError("rate_limit must be >= 1 and rate_window > 0")
        if self.rate_mode not in ("sliding", "fixed"):
            raise ValueError(f"rate_mode must be 'sliding' or 'fixed', got {self.rate_mode!r}")
        if self.estimate_validity <= 0 or self.delivery_timeout <= 0:
            raise ValueError("estimate_validity and delivery_timeout must be > 0")
        if any(delay < 0 for delay in self.retry_delays):
            raise ValueError("retry_delays must be >= 0")


class SandboxOptions(TypedDict, total=False):
    """Keyword options of ``create_app`` and ``SandboxServer``: the fields of
    :class:`SandboxConfig` (see there for meanings and defaults)."""

    rate_limit: int
    rate_window: float
    rate_mode: RateMode
    estimate_validity: float
    hub_lanes: tuple[HubLane, ...]
    delivery_timeout: float
    retry_delays: tuple[float, ...]
    account_currency: str
    pickup_cut_off: str
    pickup_earliest: str
    pickup_closing: str
    pickup_minimum_minutes: int
    pickup_business_days: int
    request_log_size: int
