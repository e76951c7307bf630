"""examples/webapp.py (FastAPI) against the sandbox fixture, through httpx's ASGITransport.

Judged by the sandbox's own request log and order list, never by the SDK's view: no
duplicate order for any customer_reference; every cancelled create either never reached
the server or was recorded with its order id (or as unknown); a lost answer settles from
the webhook and its retry sends nothing; every hub leg's event reaches the app's
handler; nothing on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import socket
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from aiohttp import web
from resources.support import order_request, quote_request

from shipping_async import AsyncShippingClient, CancelledOrder, SQLiteOrderLedger
from shipping_async.sandbox import SandboxServer

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SPEED = 100.0

# The API's delivery timeout, 1 real s at speed 100: a loaded machine's receiver meets it.
pytestmark = pytest.mark.shipping_sandbox(speed=SPEED, seed=16, delivery_timeout=100)


def shipment(reference: str, *, hub: bool = False) -> dict[str, Any]:
    return {
        "hub_transit": hub,
        "customer_reference": reference,
        "sender": {"name": "Desk", "address_1": "1 Harbor", "city": "Oakland", "country_id": 840},
        "recipient": {"name": "Lena", "address_1": "Torstr 1", "city": "Berlin", "country_id": 276},
        "parcels": [{"weight": 2.5, "length": 30, "width": 20, "height": 10}],
        "value_of_goods": "120.00",
    }  # fmt: skip


class WebApp:
    """The example app, started through its lifespan, and an httpx client of it."""

    def __init__(self, module: ModuleType, http: httpx.AsyncClient) -> None:
        self.module = module
        self.http = http

    @property
    def client(self) -> Any:
        return self.module.app.state.client

    @property
    def cancelled(self) -> list[CancelledOrder]:
        return list(self.module.app.state.cancelled)

    @property
    def events(self) -> list[Any]:
        return list(self.module.app.state.events)

    async def ship(self, reference: str, *, hub: bool = False) -> httpx.Response:
        return await self.http.post("/shipments", json=shipment(reference, hub=hub))


class Bridge:
    """The app's ``POST /webhooks`` on a loopback port, so that the sandbox's deliveries
    reach the app, which itself runs in process behind ASGITransport."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/webhooks"
        self._runner: web.AppRunner | None = None

    async def start(self, http: httpx.AsyncClient) -> None:
        async def forward(request: web.Request) -> web.Response:
            headers = {"content-type": request.headers.get("content-type", "application/json")}
            answer = await http.post("/webhooks", content=await request.read(), headers=headers)
            return web.Response(status=answer.status_code, text=answer.text)

        app = web.Application()
        app.router.add_post("/webhooks", forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.SockSite(self._runner, self._sock).start()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._sock.close()


async def _start(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    max_wait: float,
    webhook_url: str | None = None,
) -> Any:
    monkeypatch.setenv("WEBAPP_ORDER_LEDGER", str(tmp_path / "orders.ledger"))
    monkeypatch.setenv("WEBAPP_MAX_WAIT", str(max_wait))
    if webhook_url is not None:
        monkeypatch.setenv("WEBAPP_WEBHOOK_URL", webhook_url)
    else:
        monkeypatch.delenv("WEBAPP_WEBHOOK_URL", raising=False)
    spec = importlib.util.spec_from_file_location("webapp_example", EXAMPLES / "webapp.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered like an import, so that pydantic resolves the app's annotations.
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
async def webapp(
    shipping_sandbox: SandboxServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[WebApp]:
    module = await _start(tmp_path, monkeypatch, max_wait=600)
    async with module.app.router.lifespan_context(module.app):
        transport = httpx.ASGITransport(app=module.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://webapp") as http:
            yield WebApp(module, http)


@pytest.fixture
async def webapp_with_webhook(
    shipping_sandbox: SandboxServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[WebApp]:
    """The app with its own webhook (``WEBAPP_WEBHOOK_URL``), delivered to by the sandbox."""
    bridge = Bridge()
    module = await _start(tmp_path, monkeypatch, max_wait=600, webhook_url=bridge.url)
    transport = httpx.ASGITransport(app=module.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://webapp") as http:
        await bridge.start(http)
        try:
            async with module.app.router.lifespan_context(module.app):
                yield WebApp(module, http)
        finally:
            await bridge.close()


def posts(sandbox: SandboxServer, reference: str) -> list[Any]:
    """The server's POST /orders records for ``reference`` (from the body it logged on
    arrival: the record's own customer_reference is filled in once it was handled)."""
    return [
        record
        for record in sandbox.control.requests(method="POST", path="/orders")
        if record.body and json.loads(record.body)["order"]["customer_reference"] == reference
    ]


def orders_by_reference(sandbox: SandboxServer) -> Counter[str]:
    return Counter(order["customer_reference"] for order in sandbox.control.orders())


@contextlib.contextmanager
def logging_unconfigured() -> Iterator[None]:
    """Logging as in an app that configured none: pytest's handlers taken off the root
    logger, so a record that no handler takes reaches stderr through ``lastResort``."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers.clear()
    root.setLevel(logging.WARNING)
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


async def _until(condition: Any, what: str, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.002)


async def test_fifty_concurrent_ships_with_faults_cancellations_and_retries_never_duplicate(
    webapp_with_webhook: WebApp,
    shipping_sandbox: SandboxServer,
    capfd: pytest.CaptureFixture[str],
) -> None:
    with logging_unconfigured():
        await _fifty_concurrent_ships(webapp_with_webhook, shipping_sandbox)
    # The SDK logged warnings all along (429s, 5xx, lost answers, cancellations): its
    # NullHandler kept every one of them off stderr.
    assert capfd.readouterr().err == ""


async def _fifty_concurrent_ships(webapp: WebApp, sandbox: SandboxServer) -> None:
    control = sandbox.control
    # The first POSTs meet 429s (the SDK pauses and re-sends), then 5xx answers from a
    # gateway (nothing created), then lost answers (created, never answered).
    control.add_fault("status", "/orders", method="POST", status=429, count=3)
    control.add_fault("status", "/orders", method="POST", status=502, count=2)
    control.add_fault("drop_after", "/orders", method="POST", count=3)

    references = [f"W-{n:02d}" for n in range(50)]
    hubs = set(references[::10])  # through a hub: two legs, two order_received events
    tasks = {ref: asyncio.create_task(webapp.ship(ref, hub=ref in hubs)) for ref in references}

    # 50 at once, 20 per window: 30 wait in the limiter. Cancel five of those (their
    # browsers went away): nothing may reach the server for them.
    def first_window_sent() -> bool:
        quoted = control.requests(method="POST", path="/quotes")
        sent = control.requests(method="POST", path="/orders")
        return len(quoted) == 50 and all(r.status for r in quoted) and len(sent) >= 20

    await _until(first_window_sent, "the first window's orders")
    await asyncio.sleep(0.05)  # each quoted order reaches the limiter; the window is 0.6 s
    before_wire = [ref for ref in references if not posts(sandbox, ref)][-5:]
    assert len(before_wire) == 5
    for ref in before_wire:
        tasks[ref].cancel()
    answers: dict[str, httpx.Response] = {}
    for ref, task in tasks.items():
        try:
            answers[ref] = await task
        except asyncio.CancelledError:
            assert ref in before_wire

    # Cancelled after the wire: a slow answer (the order IS created) its caller abandons.
    control.add_fault("delay_after", "/orders", method="POST", seconds=60, count=3)
    after_wire = ["W-50", "W-51"]
    late = {ref: asyncio.create_task(webapp.ship(ref)) for ref in after_wire}
    await _until(lambda: all(posts(sandbox, ref) for ref in after_wire), "the POSTs")
    for task in late.values():
        task.cancel()
    for task in late.values():
        with pytest.raises(asyncio.CancelledError):
            await task
    # Timed out by its caller's own bound (asyncio.timeout, 0.3 s; the answer takes 0.6):
    # before the wire or on it, whichever the loaded machine made it (checked below).
    timed_out = "W-52"
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await webapp.ship(timed_out)
    control.clear_faults()  # the third slow answer, if W-52 never sent its order

    # Lost answers and 5xx: the callers retry with the same reference.
    unknown = [ref for ref, answer in answers.items() if answer.status_code == 502]
    assert len(unknown) == 5, {ref: a.status_code for ref, a in answers.items()}
    created = {ref: [r.order_id for r in posts(sandbox, ref) if r.order_id] for ref in unknown}
    lost = {ref: ids[0] for ref, ids in created.items() if ids}  # made, answer dropped
    refused = [ref for ref, ids in created.items() if not ids]  # a gateway's 502
    assert (len(lost), len(refused)) == (3, 2)

    # A lost answer's order announces itself: once the API had the app's 200 for that
    # event (the ledger settled from it first), the retry gets the order, sending nothing.
    def announced() -> bool:
        done = {r.object_id for r in control.deliveries() if r.result == "delivered"}
        return set(lost.values()) <= done

    await _until(announced, "the lost orders' order_received deliveries")
    for ref, order_id in lost.items():
        sent = len(posts(sandbox, ref))  # 1, or 2 when a 429 came first
        answers[ref] = await webapp.ship(ref, hub=ref in hubs)
        assert answers[ref].status_code == 201, answers[ref].text
        assert answers[ref].json()["order_id"] == order_id
        assert len(posts(sandbox, ref)) == sent  # the retry sent no POST
    # Nothing announces an order never created: the ledger refuses to send it again
    # until the operator says no order exists (silence proves it only after the API's
    # 380 s retry horizon, and frees it only when opted in); the retry then sends.
    for ref in refused:
        sent = len(posts(sandbox, ref))
        again = await webapp.ship(ref, hub=ref in hubs)
        assert again.status_code == 502  # still unresolved: not sent a second time
        assert len(posts(sandbox, ref)) == sent
        resolution = {"order_id": None}
        assert (await webapp.http.post(f"/shipments/{ref}/resolve", json=resolution)).is_success
        answers[ref] = await webapp.ship(ref, hub=ref in hubs)
        assert answers[ref].status_code == 201, answers[ref].text

    # Every caller that was answered got its order, 201.
    assert {ref: a.status_code for ref, a in answers.items()} == dict.fromkeys(answers, 201)

    # The sandbox's order list: exactly one order per answered reference, none twice.
    counts = orders_by_reference(sandbox)
    assert max(counts.values()) == 1, [ref for ref, n in counts.items() if n > 1]
    for ref, answer in answers.items():
        (order_id,) = [r.order_id for r in posts(sandbox, ref) if r.order_id is not None]
        assert answer.json()["order_id"] == order_id

    # Every cancelled or timed-out create: provably not sent, or recorded with its id or
    # as unknown.
    recorded = {report.customer_reference: report for report in webapp.cancelled}
    for ref in [*before_wire, *after_wire, timed_out]:
        sent = [r for r in posts(sandbox, ref) if r.order_id is not None]
        report = recorded.get(ref)
        if not posts(sandbox, ref):
            # Never reached the server (and said so, if it got as far as orders.create).
            assert report is None or report.outcome == "not_sent"
        elif sent:
            assert report is not None
            assert (report.outcome, report.order_id) == ("created", sent[0].order_id)
        else:
            assert report is not None
            assert report.outcome in ("unknown", "not_created")
    assert all(not posts(sandbox, ref) for ref in before_wire)
    assert [recorded[ref].outcome for ref in before_wire] == ["not_sent"] * 5
    assert [recorded[ref].outcome for ref in after_wire] == ["created", "created"]

    # The 429s were absorbed: no caller saw one, and every order went out once.
    statuses = Counter(r.status for r in control.requests(method="POST", path="/orders"))
    assert statuses[429] == 3

    # Every leg's order_received reached the app's handler: both of a hub order's
    # byte-identical events, each other order's one.
    legs = {order["id"]: len(order["shipments"]) for order in control.orders()}
    assert sorted(set(legs.values())) == [1, 2]

    def heard() -> Counter[int]:
        return Counter(e.object_id for e in webapp.events if e.updated_value == "order_received")

    await _until(lambda: heard() == legs, "every leg's event", seconds=10)


async def test_a_busy_app_tells_the_wait_up_front_and_sends_nothing(
    webapp: WebApp, shipping_sandbox: SandboxServer
) -> None:
    limiter = webapp.client.order_limiter
    for _ in range(limiter.limit):  # the window's orders are spent elsewhere
        await limiter.release(await limiter.acquire(), sent=True)
    webapp.module.MAX_WAIT = 30  # this app waits at most 30 s: less than a window

    wait = (await webapp.http.get("/shipments/wait")).json()
    busy = await webapp.ship("BUSY-1")

    assert wait["expected_wait"] == pytest.approx(60 * 1.02, abs=1.0)
    assert busy.status_code == 503
    assert busy.json()["sent"] is False
    assert int(busy.headers["Retry-After"]) >= 55
    assert posts(shipping_sandbox, "BUSY-1") == []


async def test_max_wait_answers_within_50_ms_of_the_bound_and_sends_nothing(
    shipping_sandbox: SandboxServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    max_wait = 20.0  # seconds of the sandbox's clock: 0.2 real seconds at speed 100
    module = await _start(tmp_path, monkeypatch, max_wait=max_wait)
    async with module.app.router.lifespan_context(module.app):
        limiter = module.app.state.client.order_limiter
        held = [await limiter.acquire() for _ in range(limiter.limit)]  # on the wire, long
        transport = httpx.ASGITransport(app=module.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://webapp") as http:
            started = time.monotonic()
            answer = await http.post("/shipments", json=shipment("SLOW-1"))
            took = time.monotonic() - started
        for permit in held:
            await limiter.release(permit, sent=False)

    quote_time = 0.05  # the handler quotes first (one local round trip)
    assert answer.status_code == 503
    assert answer.json()["sent"] is False
    assert max_wait / SPEED <= took < max_wait / SPEED + 0.05 + quote_time
    assert posts(shipping_sandbox, "SLOW-1") == []


@pytest.mark.shipping_sandbox(speed=SPEED, seed=16, estimate_validity=30)
async def test_an_estimate_that_expires_while_queued_is_rechecked_not_sent_expired(
    webapp: WebApp, shipping_sandbox: SandboxServer
) -> None:
    limiter = webapp.client.order_limiter
    for _ in range(limiter.limit):
        await limiter.release(await limiter.acquire(), sent=True)

    answer = await webapp.ship("EXP-1")

    assert answer.status_code == 201, answer.text
    log = [(r.method, r.path.split("/")[1], r.status) for r in shipping_sandbox.control.requests()]
    # Quoted, waited a window (the 30 s estimate expired), re-checked, quoted again,
    # ordered once: never a POST /orders refused for an expired estimate.
    assert log == [
        ("POST", "quotes", 201),
        ("GET", "quotes", 200),
        ("POST", "quotes", 201),
        ("POST", "orders", 201),
    ]


async def test_a_cancelled_create_waits_for_its_answer_no_longer_than_the_timeout(
    shipping_sandbox: SandboxServer, tmp_path: Path
) -> None:
    control = shipping_sandbox.control
    # Created at once, answered 1 real second later: past the client's 0.3 s timeout.
    control.add_fault("delay_after", "/orders", method="POST", seconds=100)
    reports: list[CancelledOrder] = []
    async with (
        await SQLiteOrderLedger.open(tmp_path / "orders.ledger") as ledger,
        AsyncShippingClient(
            timeout=0.3, order_ledger=ledger, on_cancelled_order=reports.append
        ) as client,
    ):
        quote = await client.quotes.create(quote_request())
        request = order_request(quote_estimate_id=quote.estimates[0].estimate_id)
        task = asyncio.create_task(client.orders.create(request))
        await _until(lambda: posts(shipping_sandbox, request.customer_reference), "the POST")
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        waited = time.monotonic() - started
        entry = await ledger.get(request.customer_reference)

    assert waited < 0.3 + 0.2  # the answer was given up on at the timeout
    assert [(r.outcome, r.customer_reference) for r in reports] == [
        ("unknown", request.customer_reference)
    ]
    assert entry is not None
    assert entry.state == "unknown"
    assert len(control.orders()) == 1  # the order exists: unknown was the right word
