"""Addresses (request and response forms) and the country object of order responses."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated
from zoneinfo import ZoneInfo

import msgspec

from shipping_async.models._base import Model

__all__ = ["Address", "Country", "OrderAddress", "TaxesAndDutiesConfig"]

_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
_CountryId = Annotated[int, msgspec.Meta(gt=0, lt=1000)]


class Address(Model):
    """An address as sent in quote and order requests.

    The spec does not say which sub-fields are required; we require ``name``,
    ``address_1``, ``city`` and ``country_id`` (the least a carrier can deliver to).
    ``import_code`` and ``export_code`` are used by orders only.
    """

    name: _NonEmpty
    address_1: _NonEmpty
    city: _NonEmpty
    country_id: _CountryId
    company: str | None = None
    address_2: str | None = None
    province: str | None = None
    postal_code: str | None = None
    email: str | None = None
    phone: str | None = None
    classification: str | None = None
    import_code: str | None = None
    export_code: str | None = None


class TaxesAndDutiesConfig(Model):
    """The duty threshold of a country."""

    id: int | None = None
    minimum_value_of_goods: Decimal | None = None
    minimum_value_of_goods_currency_id: str | None = None


class Country(Model):
    """A country as embedded in order responses."""

    id: int
    name: str = ""
    iso_code_2: str = ""
    iso_code_3: str = ""
    default_postal_code: str | None = None
    postal_code_required: bool = False
    carrier_export_code: str = ""
    carrier_import_code: str = ""
    carrier_tax_code: str = ""
    export_code_label: str = ""
    import_code_label: str = ""
    tax_number_label: str = ""
    taxes_and_duties_config: TaxesAndDutiesConfig | None = None
    vat_rate: Decimal | None = None


class OrderAddress(Model):
    """An address as returned inside an order (the response form)."""

    id: int | None = None
    name: str | None = None
    company: str | None = None
    address_1: str | None = None
    address_2: str | None = None
    address_3: str | None = None
    city: str | None = None
    province: str | None = None
    postal_code: str | None = None
    country_id: int | None = None
    country: Country | None = None
    email: str | None = None
    phone: str | None = None
    classification: str | None = None
    import_code: str | None = None
    export_code: str | None = None
    latitude: float | None = None
    longitude: float | None = None
    summary: str | None = None
    tax_number: str | None = None
    time_zone_id: str | None = None

    @property
    def time_zone(self) -> ZoneInfo | None:
        """``time_zone_id`` as a ``zoneinfo.ZoneInfo`` (``None`` when absent)."""
        return ZoneInfo(self.time_zone_id) if self.time_zone_id else None
