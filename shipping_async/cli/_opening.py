"""What a ``bulk`` or ``worker`` run opens before it feeds or drains: its telemetry, the
API (an embedded sandbox, or the clock of an external one), the journal, the limiters.

:func:`open_run` says each failure in one line on stderr and returns ``None`` (the run
exits with the setup code); whatever opened is closed by the run's ``AsyncExitStack``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shipping_async.cli._telemetry import RunTelemetry
from shipping_async.cli._terminal import one_line, without_password
from shipping_async.clock import Clock, ScaledClock, SystemClock

if TYPE_CHECKING:
    from shipping_async.cli._run import RunPlan

__all__ = ["Opened", "limiters", "open_run"]

_log = logging.getLogger("shipping_async.cli")


@dataclass(frozen=True, slots=True)
class Opened:
    """What a run has opened on its stack before it feeds or drains."""

    stack: contextlib.AsyncExitStack
    journal: Any
    clock: Clock
    base_url: str | None
    environ: dict[str, str] | None  # the tokens of an embedded sandbox
    telemetry: RunTelemetry
    path: str  # the journal file of a fed run ("" for a shared journal)


async def open_run(plan: RunPlan, stack: contextlib.AsyncExitStack) -> Opened | None:
    """Open what ``plan`` needs on ``stack``; ``None`` after saying what failed."""
    try:
        telemetry = RunTelemetry(plan.args)
        await stack.enter_async_context(telemetry.serving())
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    opened = await _open_api(plan, stack)
    if opened is None:
        return None
    clock, base_url, environ = opened
    path = "" if plan.shared else _journal_path(plan, stack)
    journal = await _open_journal(plan, stack, clock, path)
    if journal is None:
        return None
    await stack.enter_async_context(telemetry.watching(journal))
    return Opened(stack, journal, clock, base_url, environ, telemetry, path)


def limiters(plan: RunPlan, clock: Clock) -> Callable[[str], Any]:
    """The order limiter of an account, as ``plan`` says, on ``clock``."""
    from shipping_async.scaleout.factory import open_limiter

    def limiter_for(account: str) -> Any:
        # The budget is in real seconds; the limiter runs on the clients' clock.
        return open_limiter(
            plan.limiter,
            account=account,
            limit=plan.limit,
            window=plan.window_real * plan.speed,
            lease=1.5 * plan.timeout * plan.speed,  # a request's longest life, on the clock
            clock=clock,
        )

    return limiter_for


async def _open_api(
    plan: RunPlan, stack: contextlib.AsyncExitStack
) -> tuple[Clock, str | None, dict[str, str] | None] | None:
    """The clock, base URL and (for an embedded sandbox) the environment of tokens."""
    if plan.sandbox:
        from shipping_async.sandbox import SandboxServer

        sandbox = SandboxServer(speed=plan.speed)
        await stack.enter_async_context(sandbox)
        return sandbox.clock, sandbox.base_url, {"SHIPPING_ACCESS_TOKEN": sandbox.token}
    if plan.fed:
        from shipping_async._client import token_from_environment

        base_url = plan.base_url or os.environ.get("SHIPPING_BASE_URL", "")
        if not token_from_environment() or not base_url:
            print(
                "error: set SHIPPING_ACCESS_TOKEN (or SHIPPING_ACCESS_TOKEN_FILE) and "
                "--base-url (or SHIPPING_BASE_URL), "
                "or use --sandbox",
                file=sys.stderr,
            )
            return None
    elif not plan.limiter or plan.limiter == "memory":
        print(
            "warning: --limiter memory keeps this worker's own order budget; run more "
            "than one worker per account only with --limiter redis://...",
            file=sys.stderr,
        )
    # An external sandbox: the run goes on its time.
    clock: Clock = ScaledClock(plan.speed) if plan.speed != 1.0 else SystemClock()
    return clock, plan.base_url, None


async def _open_journal(
    plan: RunPlan, stack: contextlib.AsyncExitStack, clock: Clock, path: str
) -> Any:
    from shipping_async.bulk._outage import steady, unreachable
    from shipping_async.bulk.journal import JournalError
    from shipping_async.scaleout.factory import open_journal

    spec = plan.journal if plan.shared else path
    assert spec is not None
    try:
        store: Any = await open_journal(spec, clock=clock, sent_marks=True)
    except Exception as exc:
        if not isinstance(exc, JournalError | OSError | ValueError) and not unreachable(exc):
            raise
        shown = without_password(spec) if plan.shared else spec
        print(f"error: journal {shown}: {one_line(exc)}", file=sys.stderr)
        _log.debug("opening the journal failed", exc_info=True)
        return None
    stack.push_async_callback(store.close)
    # Every operation of the run waits out a lost connection (up to --max-store-outage).
    journal = steady(store, max_outage=plan.max_store_outage)
    if plan.fed:
        held = sum((await journal.counts()).values())
        if held and not plan.resume:
            print(
                f"error: the journal {spec} already holds {held} shipments; pass "
                "--resume to continue that batch, or --journal NEW for a new one",
                file=sys.stderr,
            )
            return None
    return journal


def _journal_path(plan: RunPlan, stack: contextlib.AsyncExitStack) -> str:
    """The journal file of a fed run: ``--journal``, a temporary one for the embedded
    sandbox, else next to the input."""
    if plan.journal:
        return str(plan.journal)
    if plan.sandbox:  # the embedded sandbox forgets everything: so does its journal
        folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="shipping-bulk-"))
        return str(Path(folder) / "batch.journal")
    return f"{plan.input}.journal"
