"""Drop an event delivered twice: a bounded memory of accepted events, 16 bytes per event."""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import msgspec

from shipping_async.models.webhooks import WebhookEvent

__all__ = ["DEDUPE_BYTES_PER_EVENT", "DEFAULT_DEDUPE_SIZE", "EventDeduplicator", "event_key"]

#: How many accepted events the receiver remembers. The API retries a delivery for about
#: 200 s (20 + 40 + 60 + 80), so this must exceed the events received in that time:
#: 10,000 keys cover 50 events/s for 200 s in about 1.3 MB.
DEFAULT_DEDUPE_SIZE = 10_000

#: Upper bound of the memory one remembered event takes (measured on CPython 3.11 with
#: tracemalloc: the 16-byte digest object plus its ordered-dict entry, about 130 bytes),
#: whatever the size of the event's values: ``max_events * DEDUPE_BYTES_PER_EVENT`` bounds
#: the whole store.
DEDUPE_BYTES_PER_EVENT = 200

_KEY_ENCODER = msgspec.json.Encoder()


def event_key(event: WebhookEvent) -> bytes:
    """What makes two deliveries the same event, as a 16-byte BLAKE2b digest.

    The digest covers the order, the event type, both values and the timestamp; the token
    is left out (it is the same for every delivery of one webhook). A fixed-size digest
    keeps the memory per event the same however long the values a sender puts in them
    (a collision needs 2**64 events). Two legs of a hub order moving to the same value in
    the same millisecond share a key: the body has no leg field to tell them apart, see
    ``EventDeduplicator.check_and_add``'s ``allowance``.
    """
    fields = (
        event.object_type,
        event.object_id,
        event.event_type,
        event.original_value,
        event.updated_value,
        event.updated_at_utc.isoformat(),
    )
    return hashlib.blake2b(_KEY_ENCODER.encode(fields), digest_size=16).digest()


class EventDeduplicator:
    """Remembers the last ``max_events`` accepted events, least recently seen forgotten first.

    ::

        seen = EventDeduplicator(max_events=10_000)
        if seen.check_and_add(event):
            ...  # first delivery of this event

    Memory is bounded by ``max_events`` digests whatever the traffic and the event sizes:
    at most ``max_events * DEDUPE_BYTES_PER_EVENT`` bytes (2 MB at the default 10,000;
    a delivery's values are never kept). The memory lives in one process: receivers behind
    a load balancer each drop only what they saw themselves.
    """

    __slots__ = ("_counts", "_max_events")

    def __init__(self, max_events: int = DEFAULT_DEDUPE_SIZE) -> None:
        if max_events < 1:
            raise ValueError(f"max_events: must be >= 1, got {max_events!r}")
        self._max_events = max_events
        # digest -> how many deliveries with that body were accepted (more than one only
        # for the identical events of several legs of one order).
        self._counts: OrderedDict[bytes, int] = OrderedDict()

    @property
    def max_events(self) -> int:
        return self._max_events

    def check_and_add(self, event: WebhookEvent, *, allowance: int = 1) -> bool:
        """True (and count it) when fewer than ``allowance`` deliveries of this event were
        accepted; False for a repeat beyond that.

        ``allowance`` is how many distinct events can share this body: 1, or the number of
        legs of a hub order that may have fired it (their deliveries are byte-identical).
        Synchronous on purpose: the check and the insertion happen with no await between
        them, so two concurrent deliveries of one event cannot both be accepted.
        """
        key = event_key(event)
        count = self._counts.get(key, 0)
        if count:
            # A retry keeps the key fresh: more retries of it may still be on their way.
            self._counts.move_to_end(key)
        if count >= allowance:
            return False
        self._counts[key] = count + 1
        if len(self._counts) > self._max_events:
            self._counts.popitem(last=False)
        return True

    def times(self, event: WebhookEvent) -> int:
        """How many deliveries of this event were accepted (0 when unknown or forgotten)."""
        return self._counts.get(event_key(event), 0)

    def discard(self, event: WebhookEvent) -> None:
        """Take back one acceptance (its handler failed): the API's retry is let through."""
        key = event_key(event)
        count = self._counts.get(key, 0)
        if count > 1:
            self._counts[key] = count - 1
        elif count == 1:
            del self._counts[key]

    def __contains__(self, event: object) -> bool:
        return isinstance(event, WebhookEvent) and event_key(event) in self._counts

    def __len__(self) -> int:
        return len(self._counts)

    def __repr__(self) -> str:
        return f"EventDeduplicator({len(self._counts)}/{self._max_events} events)"
