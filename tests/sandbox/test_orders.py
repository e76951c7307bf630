"""Orders: full response shape, JSON and multipart creation, get, cancel and waybills."""

from __future__ import annotations

import re
from typing import Any

import aiohttp
import pytest

from shipping_async.clock import ManualClock
from shipping_async.sandbox import SandboxServer

from .support import (
    ADDRESS_KEYS,
    COUNTRY_KEYS,
    INVALID,
    ORDER_KEYS,
    TOKEN,
    Api,
    address,
    order_body,
)

SHIPMENT_KEYS = {"shipping_service", "waybill", "waybill_document_link", "tracking_link", "status"}
LINKS = sorted(key for key in ORDER_KEYS if key.endswith("_link") and key != "tracking_link")
GONE_LIVE = {
    "success": False,
    "error": "Order cannot be cancelled, this shipment has already gone live",
    "errors": [],
}


async def test_order_has_every_field_of_the_spec(api: Api) -> None:
    quote = await api.quote()
    estimate = quote["estimates"][0]
    body = order_body(estimate["estimate_id"])
    reply = await api.call("POST", "/orders", json=body)
    assert reply.status == 201
    assert set(reply.body) == {"order"}
    order = reply.body["order"]
    assert set(order) == ORDER_KEYS
    assert order["status"] == "order_received"
    assert order["ccd_status"] == "ccd_not_required"
    assert re.fullmatch(r"\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} UTC", order["created_at"])
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", order["pickup_date"])
    assert "@" in order["assigned_admin"]
    assert order["scheduled_pickup"] == ""
    assert order["quote_id"] == quote["id"]
    assert order["customer_reference"] == "cref-1"
    assert order["description_of_contents"] == "Books"
    assert order["pickup_instructions"] == "Ring twice"
    assert order["purpose_of_shipment_id"] == 1
    assert isinstance(order["company_id"], int)
    assert (order["value_of_goods"], order["value_of_goods_currency"]) == (120.5, "USD")
    assert order["measured_weight"] is None
    assert order["invoice_data"] is None
    assert order["invoice_number"] is None
    assert order["date_delivered"] is None
    assert order["broker_address"] is None
    assert order["importer_of_record_address"] is None
    assert order["waybill"] is None
    assert order["tracking_link"] is None
    assert order["eei_eligible"] is False
    assert order["send_consignee_tracking_details"] is True
    assert all(order[link] == "" for link in LINKS)
    assert order["shipments"] == [
        {
            "shipping_service": estimate["shipping_service"],
            "waybill": "",
            "waybill_document_link": "",
            "tracking_link": "",
            "status": "order_received",
        }
    ]


async def test_order_addresses_are_in_response_form(api: Api) -> None:
    order = await api.order()
    origin = order["origin_address"]
    assert set(origin) == ADDRESS_KEYS
    assert set(origin["country"]) == COUNTRY_KEYS
    assert origin["country"]["iso_code_2"] == "US"
    assert origin["address_3"] is None
    assert origin["tax_number"] is None
    assert origin["address_2"] is None  # absent fields come back as null
    assert origin["time_zone_id"] == "America/New_York"
    assert origin["export_code"] == "EIN-1"
    assert isinstance(origin["latitude"], float)
    assert "1 Main Street" in origin["summary"]
    assert order["destination_address"]["country"]["iso_code_3"] == "CAN"


async def test_optional_addresses_and_clearance_detail_are_shown(api: Api) -> None:
    order = await api.order(
        broker_address=address(124, name="Broker"),
        importer_of_record_address=address(124, name="Importer"),
        clearance_detail={
            "reason_for_shipment_id": 1,
            "invoice_number": "INV-9",
            "purchase_order_number": "PO-1",
        },
    )
    assert order["broker_address"]["name"] == "Broker"
    assert set(order["broker_address"]) == ADDRESS_KEYS
    assert order["importer_of_record_address"]["name"] == "Importer"
    assert order["invoice_number"] == "INV-9"


async def test_us_export_above_2500_usd_is_eei_eligible(api: Api) -> None:
    quote = await api.quote(value_of_goods="3000")
    reply = await api.call("POST", "/orders", json=order_body(quote["estimates"][0]["estimate_id"]))
    order = reply.body["order"]
    assert order["eei_eligible"] is True
    assert re.fullmatch(r"X\d{14}", order["internal_transaction_number"])


async def test_hub_order_has_two_legs_clearance_first(api: Api) -> None:
    quote = await api.quote(destination_country_id=276, hub_transit=True)
    estimate = quote["estimates"][0]
    reply = await api.call(
        "POST", "/orders", json=order_body(estimate["estimate_id"], destination=276)
    )
    assert reply.status == 201
    order = reply.body["order"]
    assert set(order) == ORDER_KEYS
    legs = order["shipments"]
    assert [set(leg) for leg in legs] == [SHIPMENT_KEYS, SHIPMENT_KEYS]
    assert legs[0]["shipping_service"] == estimate["shipping_service"]
    assert legs[1]["shipping_service"] == "Domestic"
    assert [leg["status"] for leg in legs] == ["order_received", "order_received"]


async def test_hub_order_keeps_the_quote_lane_whatever_the_addresses(api: Api) -> None:
    quote = await api.quote(destination_country_id=276, hub_transit=True)
    # Addresses naming other countries do not re-route: still two legs via the hub.
    body = order_body(quote["estimates"][0]["estimate_id"], destination=250)
    reply = await api.call("POST", "/orders", json=body)
    assert reply.status == 201
    assert len(reply.body["order"]["shipments"]) == 2
    assert reply.body["order"]["quote_id"] == quote["id"]


def _address_without(field: str) -> dict[str, Any]:
    origin = address(840)
    del origin[field]
    return {"origin_address": origin}


REQUIRED = [
    "origin_address",
    "destination_address",
    "pickup_instructions",
    "purpose_of_shipment_id",
    "quote_estimate_id",
    "customer_reference",
    "description_of_contents",
]
BAD_CHANGES = [
    *(
        pytest.param(_address_without(field), id=f"address-without-{field}")
        for field in ("name", "address_1", "city", "country_id")
    ),
    pytest.param({"origin_address": address(999)}, id="address-unknown-country"),
    pytest.param({"origin_address": address(840, nickname="x")}, id="address-unknown-field"),
    pytest.param({"origin_address": address(840, city="  ")}, id="address-empty-city"),
    pytest.param({"broker_address": address(1)}, id="broker-unknown-country"),
    pytest.param({"purpose_of_shipment_id": 7}, id="unknown-purpose"),
    pytest.param({"customer_reference": ""}, id="empty-customer-reference"),
    pytest.param({"quote_estimate_id": "x"}, id="estimate-id-as-text"),
    pytest.param({"giftwrap": True}, id="unknown-field"),
    pytest.param(
        {"hs_codes": [{"code": "1", "cost": "1", "description": "d", "quantity": 0}]},
        id="hs-quantity-zero",
    ),
    pytest.param(
        {"hs_codes": [{"code": "1", "cost": "one", "description": "d", "quantity": 1}]},
        id="hs-cost-not-decimal",
    ),
    pytest.param(
        {"hs_codes": [{"code": "1", "cost": "1", "description": "d", "quantity": 1, "hs": 2}]},
        id="hs-unknown-field",
    ),
    pytest.param({"clearance_detail": {"invoice": "1"}}, id="clearance-unknown-field"),
]


@pytest.mark.parametrize("field", REQUIRED)
async def test_order_missing_a_required_field_is_400(api: Api, field: str) -> None:
    quote = await api.quote()
    body = order_body(quote["estimates"][0]["estimate_id"])
    del body["order"][field]
    reply = await api.call("POST", "/orders", json=body)
    assert (reply.status, reply.body) == (400, INVALID)


@pytest.mark.parametrize("changes", BAD_CHANGES)
async def test_invalid_order_is_400(api: Api, changes: dict[str, Any]) -> None:
    quote = await api.quote()
    body = order_body(quote["estimates"][0]["estimate_id"])
    body["order"].update(changes)
    reply = await api.call("POST", "/orders", json=body)
    assert (reply.status, reply.body) == (400, INVALID)


async def test_order_without_the_order_wrapper_is_400(api: Api) -> None:
    quote = await api.quote()
    body = order_body(quote["estimates"][0]["estimate_id"])["order"]
    reply = await api.call("POST", "/orders", json=body)
    assert (reply.status, reply.body) == (400, INVALID)


async def test_order_needs_an_estimate_of_a_created_quote(api: Api) -> None:
    reply = await api.call("POST", "/orders", json=order_body(424242))
    assert reply.status == 400
    assert reply.body == INVALID


async def test_the_local_leg_estimate_cannot_be_ordered(api: Api) -> None:
    quote = await api.quote(destination_country_id=276, hub_transit=True)
    clearance_ids = {e["estimate_id"] for e in quote["estimates"]}
    # Local-leg estimates get the ids right after each clearance estimate's.
    local_id = quote["estimates"][0]["estimate_id"] + 1
    assert local_id not in clearance_ids
    reply = await api.call("POST", "/orders", json=order_body(local_id, destination=276))
    assert reply.status == 400


async def test_expired_estimate_is_refused_with_400() -> None:
    clock = ManualClock()
    async with (
        SandboxServer(token=TOKEN, clock=clock, estimate_validity=60) as server,
        aiohttp.ClientSession() as session,
    ):
        api = Api(session, server)
        quote = await api.quote()
        estimate_id = quote["estimates"][0]["estimate_id"]
        clock.advance(59)
        fresh = await api.call("POST", "/orders", json=order_body(estimate_id))
        clock.advance(1)
        stale = await api.call("POST", "/orders", json=order_body(estimate_id))
    assert fresh.status == 201
    assert (stale.status, stale.body) == (400, INVALID)
    assert "expired" in stale.headers["X-Sandbox-Detail"]


def _form(estimate_id: int, *, destination: int = 124) -> aiohttp.FormData:
    form = aiohttp.FormData(default_to_multipart=True)
    fields = {
        "order[origin_address][name]": "Ada Shipper",
        "order[origin_address][address_1]": "1 Main Street",
        "order[origin_address][city]": "New York",
        "order[origin_address][country_id]": "840",
        "order[origin_address][export_code]": "EIN-1",
        "order[destination_address][name]": "Bob Receiver",
        "order[destination_address][address_1]": "2 Queen St",
        "order[destination_address][city]": "Toronto",
        "order[destination_address][country_id]": str(destination),
        "order[pickup_instructions]": "",
        "order[purpose_of_shipment_id]": "1",
        "order[quote_estimate_id]": str(estimate_id),
        "order[customer_reference]": "multipart-1",
        "order[description_of_contents]": "Books",
        "order[hs_codes][0][code]": "4901.99",
        "order[hs_codes][0][cost]": "60.25",
        "order[hs_codes][0][description]": "Books",
        "order[hs_codes][0][quantity]": "2",
        "order[hs_codes][0][weight]": "1.5",
        "order[hs_codes][1][code]": "4902.10",
        "order[hs_codes][1][cost]": "5",
        "order[hs_codes][1][description]": "Newspapers",
        "order[hs_codes][1][quantity]": "1",
    }
    for name, value in fields.items():
        form.add_field(name, value)
    return form


@pytest.mark.parametrize("hub", [pytest.param(False, id="direct"), pytest.param(True, id="hub")])
async def test_multipart_order_attaches_the_commercial_invoice(api: Api, hub: bool) -> None:
    destination = 276 if hub else 124
    quote = await api.quote(destination_country_id=destination, hub_transit=hub)
    form = _form(quote["estimates"][0]["estimate_id"], destination=destination)
    form.add_field(
        "order[commercial_invoice]",
        b"%PDF-1.4 invoice",
        filename="invoice.pdf",
        content_type="application/pdf",
    )
    reply = await api.call("POST", "/orders", data=form)
    assert reply.status == 201, reply.headers.get("X-Sandbox-Detail")
    order = reply.body["order"]
    assert set(order) == ORDER_KEYS
    assert order["customer_reference"] == "multipart-1"
    assert len(order["shipments"]) == (2 if hub else 1)
    link = order["commercial_invoice_link"]
    assert link.endswith("/invoice.pdf")
    assert order["materials_safety_data_sheet_link"] == ""
    async with api.session.get(link, headers={"Authorization": f"Bearer {TOKEN}"}) as response:
        assert response.status == 200
        assert await response.read() == b"%PDF-1.4 invoice"
        assert response.content_type == "application/pdf"


async def test_multipart_order_attaches_the_safety_data_sheet(api: Api) -> None:
    quote = await api.quote()
    form = _form(quote["estimates"][0]["estimate_id"])
    form.add_field("order[materials_safety_data_sheet]", b"msds", filename="msds.pdf")
    reply = await api.call("POST", "/orders", data=form)
    assert reply.status == 201
    assert reply.body["order"]["materials_safety_data_sheet_link"].endswith("/msds.pdf")
    assert reply.body["order"]["commercial_invoice_link"] == ""


@pytest.mark.parametrize(
    ("name", "value", "filename"),
    [
        pytest.param("order[packing_list]", b"x", "p.pdf", id="unknown-file-part"),
        pytest.param("order[hs_codes][3][code]", "9", None, id="list-index-gap"),
        pytest.param("order[origin_address]", "x", None, id="value-and-branch"),
        pytest.param("order[colour]", "red", None, id="unknown-field"),
        pytest.param("order[hs_codes][][code]", "9", None, id="unindexed-list"),
    ],
)
async def test_bad_multipart_is_400(api: Api, name: str, value: Any, filename: str | None) -> None:
    quote = await api.quote()
    form = _form(quote["estimates"][0]["estimate_id"])
    form.add_field(name, value, filename=filename)
    reply = await api.call("POST", "/orders", data=form)
    assert (reply.status, reply.body) == (400, INVALID)
    assert reply.headers["X-Sandbox-Detail"].startswith("multipart:")


async def test_multipart_numbers_are_coerced_only_where_numbers_belong(api: Api) -> None:
    quote = await api.quote()
    form = _form(quote["estimates"][0]["estimate_id"])
    form.add_field("order[origin_address][postal_code]", "10001")
    reply = await api.call("POST", "/orders", data=form)
    assert reply.body["order"]["origin_address"]["postal_code"] == "10001"
    assert reply.body["order"]["origin_address"]["country_id"] == 840


async def test_urlencoded_order_is_400(api: Api) -> None:
    quote = await api.quote()
    form = aiohttp.FormData({"order[quote_estimate_id]": str(quote["estimates"][0]["estimate_id"])})
    reply = await api.call("POST", "/orders", data=form)
    assert (reply.status, reply.body) == (400, INVALID)


async def test_get_order_returns_the_order(api: Api) -> None:
    order = await api.order()
    reply = await api.call("GET", f"/orders/{order['id']}")
    assert reply.status == 200
    assert reply.body == {"order": order}


async def test_get_unknown_order_is_404(api: Api) -> None:
    reply = await api.call("GET", "/orders/31337")
    assert reply.status == 404
    assert reply.body == {"success": False, "error": "Order with id 31337 not found", "errors": []}


@pytest.mark.parametrize("hub", [pytest.param(False, id="direct"), pytest.param(True, id="hub")])
async def test_cancel_cancels_every_leg(api: Api, hub: bool) -> None:
    order = await api.order(hub=hub)
    reply = await api.call("DELETE", f"/orders/{order['id']}")
    assert reply.status == 200
    assert reply.body == {"success": True, "error": "", "errors": []}
    after = (await api.call("GET", f"/orders/{order['id']}")).body["order"]
    assert after["status"] == "cancelled"
    assert {leg["status"] for leg in after["shipments"]} == {"cancelled"}


@pytest.mark.parametrize(
    "status",
    [
        "awaiting_schedule_pickup",
        "awaiting_pickup",
        "awaiting_swap_out",
        "pickup_missed",
        "incomplete",
    ],
)
async def test_cancel_before_live_succeeds(api: Api, status: str) -> None:
    order = await api.order()
    api.server.control.set_status(order["id"], status)
    reply = await api.call("DELETE", f"/orders/{order['id']}")
    assert reply.status == 200


@pytest.mark.parametrize("status", ["in_transit", "delivered", "cancelled"])
async def test_cancel_once_live_or_cancelled_is_422(api: Api, status: str) -> None:
    order = await api.order(hub=True)
    api.server.control.set_status(order["id"], status)
    reply = await api.call("DELETE", f"/orders/{order['id']}")
    assert reply.status == 422
    assert reply.body == GONE_LIVE
    after = (await api.call("GET", f"/orders/{order['id']}")).body["order"]
    assert after["status"] == status


async def test_cancel_is_refused_when_one_hub_leg_is_live(api: Api) -> None:
    order = await api.order(hub=True)
    api.server.control.set_status(order["id"], "in_transit", leg=1)
    reply = await api.call("DELETE", f"/orders/{order['id']}")
    assert (reply.status, reply.body) == (422, GONE_LIVE)


async def test_cancel_unknown_order_is_404(api: Api) -> None:
    reply = await api.call("DELETE", "/orders/777")
    assert reply.status == 404
    assert reply.body == {"success": False, "error": "Order with id 777 not found", "errors": []}


async def test_waybill_per_leg_on_a_hub_order(api: Api) -> None:
    order = await api.order(hub=True)
    reply = await api.call("POST", f"/orders/{order['id']}/waybills")
    assert reply.status == 201
    waybilled = reply.body["order"]
    assert set(waybilled) == ORDER_KEYS
    legs = waybilled["shipments"]
    waybills = [leg["waybill"] for leg in legs]
    assert all(waybills)
    assert len(set(waybills)) == 2
    assert all(leg["tracking_link"].endswith(leg["waybill"]) for leg in legs)
    assert all(leg["waybill_document_link"] for leg in legs)
    assert {leg["status"] for leg in legs} == {"awaiting_schedule_pickup"}
    assert waybilled["status"] == "awaiting_schedule_pickup"
    # The top-level fields describe one leg only: the first.
    assert waybilled["waybill"] == legs[0]["waybill"]
    assert waybilled["tracking_link"] == legs[0]["tracking_link"]
    assert waybilled["waybill_document_link"] == legs[0]["waybill_document_link"]


async def test_waybill_on_a_direct_order_and_again_keeps_it(api: Api) -> None:
    order = await api.order()
    first = await api.call("POST", f"/orders/{order['id']}/waybills")
    second = await api.call("POST", f"/orders/{order['id']}/waybills")
    assert len(first.body["order"]["shipments"]) == 1
    assert first.body["order"]["shipments"][0]["waybill"]
    assert second.status == 201
    assert second.body == first.body


async def test_waybill_document_is_served(api: Api) -> None:
    order = await api.order()
    reply = await api.call("POST", f"/orders/{order['id']}/waybills")
    link = reply.body["order"]["shipments"][0]["waybill_document_link"]
    async with api.session.get(link, headers={"Authorization": f"Bearer {TOKEN}"}) as response:
        assert response.status == 200
        assert (await response.read()).startswith(b"%PDF")


async def test_waybill_unknown_order_is_404_and_cancelled_is_422(api: Api) -> None:
    missing = await api.call("POST", "/orders/4040/waybills")
    order = await api.order()
    await api.call("DELETE", f"/orders/{order['id']}")
    cancelled = await api.call("POST", f"/orders/{order['id']}/waybills")
    assert missing.status == 404
    assert missing.body["error"] == "Order with id 4040 not found"
    assert cancelled.status == 422
    assert cancelled.body["errors"] == []
