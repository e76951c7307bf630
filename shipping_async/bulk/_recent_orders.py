"""A run that starts remembers the orders its journal sent within the last window.

A process that dies (or stops) leaves the server's rate window as full as it made it; a
new process with an empty in-process limiter would send a first wave into that window
and get 429s. So before a run's first order, every order intent the journal recorded
within the last window holds a permit until ``intent time + window + margin`` (plus
:data:`SEND_ALLOWANCE` real seconds for the request to have reached the server).

One clock: the journal stamps intents with real wall-clock time and measures their ages
itself (the database's ``now()``, or the host's clock for a file), in real seconds; the
ages are then converted onto the limiter's clock (a sandbox's scaled clock, say).
"""

from __future__ import annotations

import logging

from shipping_async.bulk.journal import Journal
from shipping_async.clock import Clock
from shipping_async.limiter import OrderLimiter, RemembersSent

__all__ = ["SEND_ALLOWANCE", "hold_recent_orders"]

_log = logging.getLogger(__name__)

#: Real seconds a recorded intent's request may take to reach the server (the intent's
#: commit, the permit, the connection, the write). The limiter's own permits count from
#: the answer, which covers any latency; a remembered intent has only its start, so it
#: holds this much longer. A real-time floor like every infrastructure duration: at the
#: API's 60 s window the 2 % margin (1.2 s) covers it anyway, but on a sandbox at speed
#: 100 the margin is 12 real milliseconds, less than a loaded machine's commit and send.
SEND_ALLOWANCE = 0.5


async def hold_recent_orders(
    journal: Journal, limiter: OrderLimiter, clock: Clock, *, account: str | None = None
) -> int:
    """Make ``limiter`` hold a permit for each recent order intent of ``journal``.

    ``clock`` is the limiter's; ``account`` restricts the intents to one account's jobs
    (``None``: every job of the journal shares this limiter). Returns how many intents
    were found. A limiter whose permits outlive the process (Redis) is left alone.
    """
    if not isinstance(limiter, RemembersSent):
        return 0
    # Twice the window, in real seconds: window + margin with room to spare; the limiter
    # forgets at once whatever has already cooled.
    within = 2 * limiter.window / clock.from_real(1.0) + SEND_ALLOWANCE
    ages = await journal.order_intent_ages(within=within, account=account)
    if ages:
        limiter.remember_sent(clock.from_real(age - SEND_ALLOWANCE) for age in ages)
        _log.info("%d order(s) sent within the last window hold permits of %r", len(ages), limiter)
    return len(ages)
