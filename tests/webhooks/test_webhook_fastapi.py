"""The FastAPI example receiver (examples/fastapi_receiver.py), over httpx's ASGITransport."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import httpx
import msgspec
import pytest

from shipping_async import AsyncShippingClient, SandboxServer
from shipping_async.models.webhooks import WebhookEvent

from .support import place_order

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi_receiver.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fastapi_receiver", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_fastapi_receiver_hands_each_hub_leg_event_to_the_handler_at_least_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHIPPING_WEBHOOK_TOKEN", "unused-at-import")
    example = load_example()
    handled: list[WebhookEvent] = []
    failures = ["database is down"]

    async def fails_first(event: WebhookEvent) -> None:
        if failures:
            raise RuntimeError(failures.pop())
        handled.append(event)

    async with (
        SandboxServer(speed=400, seed=5) as sandbox,
        AsyncShippingClient(sandbox.token, base_url=sandbox.base_url) as client,
    ):
        # Nothing listens on port 9: the sandbox's own attempts fail, and the test
        # delivers the bodies the sandbox sent, as the API would, to the app in process.
        webhook = await client.webhooks.create(
            "http://127.0.0.1:9/webhooks", ["shipment.updated.status"]
        )
        order = await place_order(client, hub=True)
        await sandbox.control.wait_for_deliveries()
        first_leg, second_leg = [
            msgspec.json.encode(record.body)
            for record in sandbox.control.deliveries()
            if record.attempt == 1
        ]
        app = example.create_app(client=client, webhook_token=webhook.token, handler=fails_first)
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://receiver") as http,
        ):

            async def deliver(body: bytes) -> tuple[int, str]:
                response = await http.post("/webhooks", content=body)
                return response.status_code, response.text

            answers = [
                await deliver(first_leg),  # the handler fails: 500, so the API retries
                await deliver(first_leg),  # the retry
                await deliver(second_leg),  # byte-identical: the other leg's event
                await deliver(first_leg),  # a late retry: both legs handled already
                await deliver(b'{"object_id": 1'),
                await deliver(first_leg.replace(webhook.token.encode(), b"forged-token")),
            ]

    assert first_leg == second_leg
    assert [status for status, _ in answers] == [500, 200, 200, 200, 400, 401]
    assert [text for _, text in answers[1:4]] == ["handled", "handled", "duplicate"]
    assert [(e.object_id, e.updated_value) for e in handled] == [(order.id, "order_received")] * 2
