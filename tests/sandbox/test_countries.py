"""The country table: ISO numeric ids, wire fields, EU flags and time zones."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from shipping_async.sandbox._pricing import CURRENCY_RATES_TO_USD
from shipping_async.sandbox.countries import COUNTRIES, country_by_iso2

from .support import COUNTRY_KEYS

REQUIRED = {
    840: "US", 124: "CA", 484: "MX", 826: "GB", 276: "DE", 250: "FR", 528: "NL", 56: "BE",
    724: "ES", 380: "IT", 372: "IE", 616: "PL", 752: "SE", 40: "AT", 208: "DK", 246: "FI",
    620: "PT", 203: "CZ", 756: "CH", 578: "NO", 392: "JP", 156: "CN", 344: "HK", 702: "SG",
    36: "AU", 554: "NZ", 410: "KR", 356: "IN", 76: "BR", 784: "AE",
}  # fmt: skip


def test_table_holds_the_required_countries_by_iso_numeric_id() -> None:
    assert len(COUNTRIES) >= 25
    for country_id, iso2 in REQUIRED.items():
        assert COUNTRIES[country_id].iso_code_2 == iso2
        assert country_by_iso2(iso2.lower()).id == country_id


def test_every_country_has_the_wire_fields_and_a_real_time_zone() -> None:
    for country in COUNTRIES.values():
        wire = country.to_wire()
        assert set(wire) == COUNTRY_KEYS
        assert len(wire["iso_code_3"]) == 3
        assert 0 <= wire["vat_rate"] < 1
        assert set(wire["taxes_and_duties_config"]) == {
            "id",
            "minimum_value_of_goods",
            "minimum_value_of_goods_currency_id",
        }
        assert wire["taxes_and_duties_config"]["minimum_value_of_goods_currency_id"] in (
            CURRENCY_RATES_TO_USD
        )
        assert ZoneInfo(country.time_zone_id)
        if not country.postal_code_required:
            assert country.default_postal_code is not None or country.iso_code_2 == "IE"


def test_eu_flag_matches_membership() -> None:
    eu = {c.iso_code_2 for c in COUNTRIES.values() if c.eu}
    assert {"DE", "FR", "NL", "IE", "PL"} <= eu
    assert not eu & {"US", "GB", "CH", "NO", "JP"}
    assert COUNTRIES[840].time_zone_id == "America/New_York"
