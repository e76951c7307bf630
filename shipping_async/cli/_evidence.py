"""A run that owns a webhook: ``--webhook-listen``/``--webhook-url`` on ``bulk`` and ``worker``.

The run registers (or updates) the webhook for ``shipment.updated.status`` with
:func:`~shipping_async.webhooks.ensure_webhook`, serves the receiver on the listen
address, and records every ``order_received`` event in the journal as evidence; several
workers may share one webhook (``--webhook-id``, a balancer in front): whichever receives
a delivery records it, and the journal dedupes. The reconciler then settles unknown
orders while the run works and after it: a settled job continues with waybill and pickup.
Without these options nothing of this runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from shipping_async.bulk.reconcile import Reconciler, ReconcileReport
from shipping_async.clock import Clock

__all__ = ["WebhookPlan", "add_webhook_options", "open_evidence", "settle_unknowns"]

#: Real seconds between reconciler passes while unknown jobs wait for their evidence.
POLL = 0.5


@dataclass(frozen=True, kw_only=True)
class WebhookPlan:
    host: str
    port: int
    url: str
    webhook_id: int | None = None
    resend_after_silence: bool = False


def add_webhook_options(parser: argparse.ArgumentParser) -> None:
    """The options of a run that owns a webhook (see the module)."""
    group = parser.add_argument_group("settling unknown orders from webhook evidence")
    group.add_argument(
        "--webhook-listen", metavar="HOST:PORT", help="serve the webhook receiver here"
    )
    group.add_argument(
        "--webhook-url", metavar="URL", help="the public URL the API delivers events to"
    )
    group.add_argument(
        "--webhook-id", type=int, help="the webhook to reuse (shared by several workers)"
    )
    group.add_argument(
        "--resend-unknown-after-silence",
        action="store_true",
        help="re-send an unknown order once no order_received event came within the API's "
        "whole retry horizon while other events arrived (default: only report it)",
    )


def webhook_plan(args: argparse.Namespace) -> WebhookPlan | None:
    """The plan from the options, ``None`` without them; ``ValueError`` names a bad one."""
    listen, url = getattr(args, "webhook_listen", None), getattr(args, "webhook_url", None)
    if not listen and not url:
        if getattr(args, "resend_unknown_after_silence", False):
            raise ValueError("--resend-unknown-after-silence needs --webhook-listen/--webhook-url")
        return None
    if not listen or not url:
        raise ValueError("--webhook-listen and --webhook-url go together")
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--webhook-listen: not HOST:PORT: {listen!r}")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"--webhook-url: not an http(s) URL: {url!r}")
    return WebhookPlan(
        host=host.strip("[]"),
        port=int(port),
        url=url,
        webhook_id=args.webhook_id,
        resend_after_silence=args.resend_unknown_after_silence,
    )


async def open_evidence(
    stack: contextlib.AsyncExitStack,
    plan: WebhookPlan,
    journal: Any,
    client: Any,
    clock: Clock,
    client_for: Any = None,
) -> Reconciler:
    """Ensure the webhook, serve its receiver until ``stack`` closes; the reconciler."""
    from aiohttp import web

    from shipping_async.models.webhooks import WebhookStatus
    from shipping_async.webhooks import create_webhook_app, ensure_webhook, webhook_socket

    webhook = await ensure_webhook(
        client, plan.url, ["shipment.updated.status"], webhook_id=plan.webhook_id
    )
    print(f"webhook {webhook.id} ({webhook.status}) -> {plan.url}", file=sys.stderr, flush=True)

    async def active() -> bool:
        current = await client.webhooks.get(webhook.id)
        return bool(current.status == WebhookStatus.ACTIVE)

    reconciler = Reconciler(
        journal,
        client,
        clock=clock,
        resend_after_silence=plan.resend_after_silence,
        webhook_active=active,
        client_for=client_for,
    )

    async def on_event(event: Any) -> None:
        await reconciler.record([event])  # durable before the 200: at least once

    # The receiver serves the path of the public URL (a proxy in front keeps paths).
    app = create_webhook_app(on_event, token=webhook.token, path=urlsplit(plan.url).path or "/")
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    site = web.SockSite(runner, webhook_socket(plan.host, plan.port))
    await site.start()
    return reconciler


async def settle_unknowns(reconciler: Reconciler, stop: asyncio.Event) -> ReconcileReport:
    """Reconcile until no unknown job is still within its horizon; all that was done."""
    total = ReconcileReport()
    while not stop.is_set():
        report = await reconciler.run_once()
        total.settled += report.settled
        total.resent += report.resent
        total.remaining = report.remaining
        if not any(left.waiting for left in report.remaining):
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), POLL)
    return total


def print_report(report: ReconcileReport, out: Any = None) -> None:
    """What a pass settled, re-sent and left, one line each (escaped)."""
    from shipping_async.cli._terminal import printable

    out = out or sys.stdout
    for settled in report.settled:
        line = f"settled {settled.key}: order {settled.order_id} ({settled.evidence})"
        print(printable(line), file=out)
    for resent in report.resent:
        print(printable(f"re-sent {resent.key}: {resent.evidence}"), file=out)
    for left in report.remaining:
        print(printable(f"unknown {left.key}: {left.reason}"), file=out)
    out.flush()
