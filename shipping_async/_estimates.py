"""The estimates a client has quoted: which quote each belongs to and when it was seen.

``orders.create`` carries only ``quote_estimate_id``; after a long wait for its permit it
must ask ``GET /quotes/{id}`` whether the estimate is still valid, so the quote's id and
age are remembered here when ``quotes.create`` (or ``quotes.get``) returns the estimate.
Bounded: the oldest entries go first.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

__all__ = ["EstimateBook"]

_REMEMBERED: Final = 10_000


class EstimateBook:
    """``estimate_id -> (quote_id, seen_at)`` for the last estimates quoted."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: OrderedDict[int, tuple[int, float]] = OrderedDict()

    def note(self, quote_id: int, estimate_ids: list[int], seen_at: float) -> None:
        """Remember estimates first seen at ``seen_at`` (a later sighting keeps the first)."""
        for estimate_id in estimate_ids:
            if estimate_id not in self._seen:
                self._seen[estimate_id] = (quote_id, seen_at)
        while len(self._seen) > _REMEMBERED:
            self._seen.popitem(last=False)

    def get(self, estimate_id: int) -> tuple[int, float] | None:
        """``(quote_id, seen_at)`` of an estimate this client quoted, else ``None``."""
        return self._seen.get(estimate_id)
