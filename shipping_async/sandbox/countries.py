"""The sandbox's country table: ISO 3166-1 numeric ids, the Country object of spec 2.4.

Each :class:`Country` carries what the wire shows (codes, labels, VAT rate, de minimis
threshold) plus what the sandbox needs to simulate: whether the country is in the EU (hub
lanes), its IANA time zone (pickup slots), its currency and a reference point (address
latitude/longitude), and a region for pricing zones.

>>> COUNTRIES[840].iso_code_2
'US'
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec

__all__ = ["COUNTRIES", "Country", "country_by_iso2"]


class Country(msgspec.Struct, frozen=True, kw_only=True):
    """One country: wire fields of spec 2.4 plus simulation data (eu, time zone, region)."""

    id: int
    iso_code_2: str
    iso_code_3: str
    name: str
    time_zone_id: str
    currency: str
    vat_rate: Decimal
    minimum_value_of_goods: Decimal
    latitude: float
    longitude: float
    region: str
    eu: bool = False
    postal_code_required: bool = True
    default_postal_code: str | None = None
    customs_code: str = "EORI"
    tax_number_label: str = "VAT number"
    carrier_tax_code: str = "VAT"
    taxes_and_duties_config_id: int = 0

    def to_wire(self) -> dict[str, Any]:
        """The Country object exactly as an order response shows it."""
        return {
            "id": self.id,
            "default_postal_code": self.default_postal_code,
            "carrier_export_code": f"{self.customs_code}_EXPORT",
            "carrier_import_code": f"{self.customs_code}_IMPORT",
            "carrier_tax_code": self.carrier_tax_code,
            "export_code_label": f"{self.customs_code} number (export)",
            "import_code_label": f"{self.customs_code} number (import)",
            "iso_code_2": self.iso_code_2,
            "iso_code_3": self.iso_code_3,
            "name": self.name,
            "postal_code_required": self.postal_code_required,
            "tax_number_label": self.tax_number_label,
            "taxes_and_duties_config": {
                "id": self.taxes_and_duties_config_id,
                "minimum_value_of_goods": self.minimum_value_of_goods,
                "minimum_value_of_goods_currency_id": self.currency,
            },
            "vat_rate": self.vat_rate,
        }


def _eu(
    id: int, iso2: str, iso3: str, name: str, tz: str, vat: str, lat: float, lon: float, **kw: Any
) -> Country:
    # EU members share the customs regime: EORI numbers, EUR 150 de minimis for duties.
    kw.setdefault("currency", "EUR")
    kw.setdefault("minimum_value_of_goods", Decimal("150"))
    return Country(
        id=id,
        iso_code_2=iso2,
        iso_code_3=iso3,
        name=name,
        time_zone_id=tz,
        vat_rate=Decimal(vat),
        latitude=lat,
        longitude=lon,
        region="europe",
        eu=True,
        **kw,
    )


def _other(
    id: int,
    iso2: str,
    iso3: str,
    name: str,
    tz: str,
    vat: str,
    lat: float,
    lon: float,
    *,
    currency: str,
    de_minimis: str,
    region: str,
    **kw: Any,
) -> Country:
    return Country(
        id=id,
        iso_code_2=iso2,
        iso_code_3=iso3,
        name=name,
        time_zone_id=tz,
        currency=currency,
        vat_rate=Decimal(vat),
        minimum_value_of_goods=Decimal(de_minimis),
        latitude=lat,
        longitude=lon,
        region=region,
        **kw,
    )


_GST = {"tax_number_label": "GST number", "carrier_tax_code": "GST"}

_TABLE: tuple[Country, ...] = (
    # North America
    _other(840, "US", "USA", "United States", "America/New_York", "0", 40.7128, -74.0060,
           currency="USD", de_minimis="800", region="north_america", customs_code="EIN",
           tax_number_label="EIN", carrier_tax_code="EIN"),
    _other(124, "CA", "CAN", "Canada", "America/Toronto", "0.05", 43.6532, -79.3832,
           currency="CAD", de_minimis="150", region="north_america", customs_code="BN",
           tax_number_label="Business number", carrier_tax_code="GST"),
    _other(484, "MX", "MEX", "Mexico", "America/Mexico_City", "0.16", 19.4326, -99.1332,
           currency="USD", de_minimis="50", region="north_america", customs_code="RFC",
           tax_number_label="RFC", carrier_tax_code="RFC"),
    # Europe: EU members
    _eu(276, "DE", "DEU", "Germany", "Europe/Berlin", "0.19", 52.5200, 13.4050),
    _eu(250, "FR", "FRA", "France", "Europe/Paris", "0.20", 48.8566, 2.3522),
    _eu(528, "NL", "NLD", "Netherlands", "Europe/Amsterdam", "0.21", 52.3676, 4.9041),
    _eu(56, "BE", "BEL", "Belgium", "Europe/Brussels", "0.21", 50.8503, 4.3517),
    _eu(724, "ES", "ESP", "Spain", "Europe/Madrid", "0.21", 40.4168, -3.7038),
    _eu(380, "IT", "ITA", "Italy", "Europe/Rome", "0.22", 41.9028, 12.4964),
    _eu(372, "IE", "IRL", "Ireland", "Europe/Dublin", "0.23", 53.3498, -6.2603,
        postal_code_required=False),
    _eu(616, "PL", "POL", "Poland", "Europe/Warsaw", "0.23", 52.2297, 21.0122),
    _eu(752, "SE", "SWE", "Sweden", "Europe/Stockholm", "0.25", 59.3293, 18.0686),
    _eu(40, "AT", "AUT", "Austria", "Europe/Vienna", "0.20", 48.2082, 16.3738),
    _eu(208, "DK", "DNK", "Denmark", "Europe/Copenhagen", "0.25", 55.6761, 12.5683),
    _eu(246, "FI", "FIN", "Finland", "Europe/Helsinki", "0.255", 60.1699, 24.9384),
    _eu(620, "PT", "PRT", "Portugal", "Europe/Lisbon", "0.23", 38.7223, -9.1393),
    _eu(203, "CZ", "CZE", "Czechia", "Europe/Prague", "0.21", 50.0755, 14.4378),
    _eu(442, "LU", "LUX", "Luxembourg", "Europe/Luxembourg", "0.17", 49.6116, 6.1319),
    _eu(300, "GR", "GRC", "Greece", "Europe/Athens", "0.24", 37.9838, 23.7275),
    # Europe: outside the EU
    _other(826, "GB", "GBR", "United Kingdom", "Europe/London", "0.20", 51.5074, -0.1278,
           currency="GBP", de_minimis="135", region="europe"),
    _other(756, "CH", "CHE", "Switzerland", "Europe/Zurich", "0.081", 47.3769, 8.5417,
           currency="CHF", de_minimis="5", region="europe", customs_code="UID",
           tax_number_label="UID number"),
    _other(578, "NO", "NOR", "Norway", "Europe/Oslo", "0.25", 59.9139, 10.7522,
           currency="NOK", de_minimis="3000", region="europe", customs_code="ORG",
           tax_number_label="Organisation number"),
    # Asia-Pacific
    _other(392, "JP", "JPN", "Japan", "Asia/Tokyo", "0.10", 35.6762, 139.6503,
           currency="JPY", de_minimis="10000", region="asia_pacific", customs_code="JCN",
           tax_number_label="Corporate number", carrier_tax_code="JCT"),
    _other(156, "CN", "CHN", "China", "Asia/Shanghai", "0.13", 31.2304, 121.4737,
           currency="CNY", de_minimis="50", region="asia_pacific", customs_code="USCC",
           tax_number_label="Unified social credit code"),
    _other(344, "HK", "HKG", "Hong Kong", "Asia/Hong_Kong", "0", 22.3193, 114.1694,
           currency="HKD", de_minimis="0", region="asia_pacific", customs_code="BR",
           tax_number_label="Business registration number", carrier_tax_code="BR",
           postal_code_required=False, default_postal_code="000000"),
    _other(702, "SG", "SGP", "Singapore", "Asia/Singapore", "0.09", 1.3521, 103.8198,
           currency="SGD", de_minimis="400", region="asia_pacific", customs_code="UEN",
           **_GST),
    _other(36, "AU", "AUS", "Australia", "Australia/Sydney", "0.10", -33.8688, 151.2093,
           currency="AUD", de_minimis="1000", region="asia_pacific", customs_code="ABN",
           **_GST),
    _other(554, "NZ", "NZL", "New Zealand", "Pacific/Auckland", "0.15", -36.8485, 174.7633,
           currency="NZD", de_minimis="1000", region="asia_pacific", customs_code="NZBN",
           **_GST),
    _other(410, "KR", "KOR", "South Korea", "Asia/Seoul", "0.10", 37.5665, 126.9780,
           currency="USD", de_minimis="150", region="asia_pacific", customs_code="PCCC",
           tax_number_label="Business registration number"),
    _other(356, "IN", "IND", "India", "Asia/Kolkata", "0.18", 19.0760, 72.8777,
           currency="INR", de_minimis="0", region="asia_pacific", customs_code="IEC",
           tax_number_label="GSTIN", carrier_tax_code="GST"),
    # Latin America and the Middle East
    _other(76, "BR", "BRA", "Brazil", "America/Sao_Paulo", "0.17", -23.5505, -46.6333,
           currency="USD", de_minimis="50", region="latin_america", customs_code="CNPJ",
           tax_number_label="CNPJ", carrier_tax_code="CNPJ"),
    _other(784, "AE", "ARE", "United Arab Emirates", "Asia/Dubai", "0.05", 25.2048, 55.2708,
           currency="AED", de_minimis="1000", region="middle_east", customs_code="TRN",
           tax_number_label="TRN", carrier_tax_code="TRN", postal_code_required=False,
           default_postal_code="00000"),
)  # fmt: skip

#: Every country the sandbox knows, by ISO 3166-1 numeric id.
COUNTRIES: dict[int, Country] = {
    country.id: msgspec.structs.replace(country, taxes_and_duties_config_id=index)
    for index, country in enumerate(_TABLE, start=1)
}

_BY_ISO2 = {country.iso_code_2: country for country in COUNTRIES.values()}


def country_by_iso2(code: str) -> Country:
    """The country with this ISO 3166-1 alpha-2 code; ``KeyError`` if the sandbox lacks it."""
    return _BY_ISO2[code.upper()]
