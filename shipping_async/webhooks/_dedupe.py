"""Drop an event delivered twice: a bounded memory of the events already accepted."""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime

from shipping_async.models.webhooks import WebhookEvent

__all__ = ["DEFAULT_DEDUPE_SIZE", "EventDeduplicator", "EventKey", "event_key"]

#: How many accepted events the receiver remembers. The API retries a delivery for about
#: 200 s (20 + 40 + 60 + 80), so this must exceed the events received in that time:
#: 10,000 keys cover 50 events/s for 200 s in about 2 MB.
DEFAULT_DEDUPE_SIZE = 10_000

EventKey = tuple[str, int, str, str | None, str | None, datetime]


def event_key(event: WebhookEvent) -> EventKey:
    """What makes two deliveries the same event: order, event type, values and timestamp.

    The token is left out (it is the same for every delivery of one webhook). Two legs of
    a hub order moving to the same value in the same millisecond would share a key; the
    API gives no leg field to tell them apart.
    """
    return (
        event.object_type,
        event.object_id,
        event.event_type,
        event.original_value,
        event.updated_value,
        event.updated_at_utc,
    )


class EventDeduplicator:
    """Remembers the last ``max_events`` accepted events, least recently seen forgotten first.

    ::

        seen = EventDeduplicator(max_events=10_000)
        if seen.check_and_add(event):
            ...  # first delivery of this event

    Memory is bounded by ``max_events`` keys whatever the traffic. The memory lives in one
    process: receivers behind a load balancer each drop only what they saw themselves.
    """

    __slots__ = ("_keys", "_max_events")

    def __init__(self, max_events: int = DEFAULT_DEDUPE_SIZE) -> None:
        if max_events < 1:
            raise ValueError(f"max_events: must be >= 1, got {max_events!r}")
        self._max_events = max_events
        self._keys: OrderedDict[EventKey, None] = OrderedDict()

    @property
    def max_events(self) -> int:
        return self._max_events

    def check_and_add(self, event: WebhookEvent) -> bool:
        """True (and remember it) for a new event; False for one already seen.

        Synchronous on purpose: the check and the insertion happen with no await between
        them, so two concurrent deliveries of one event cannot both be accepted.
        """
        key = event_key(event)
        if key in self._keys:
            # A retry keeps the key fresh: more retries of it may still be on their way.
            self._keys.move_to_end(key)
            return False
        self._keys[key] = None
        if len(self._keys) > self._max_events:
            self._keys.popitem(last=False)
        return True

    def __contains__(self, event: object) -> bool:
        return isinstance(event, WebhookEvent) and event_key(event) in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"EventDeduplicator({len(self._keys)}/{self._max_events} events)"
