"""A warning when a PostgreSQL or Redis URL reaches a remote host without verified TLS.

The journal holds names, phones and addresses; the limiter's Redis decides how many orders
go out. On loopback or a Unix socket nothing crosses a network; anywhere else the
connection should be ``postgresql://...?sslmode=verify-full`` or ``rediss://`` (see
SECURITY.md). A warning, not a refusal: a private network may be trusted on purpose.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from urllib.parse import parse_qs, urlsplit

__all__ = ["warn_if_cleartext"]

_log = logging.getLogger("shipping_async")
_VERIFIED_SSLMODES = frozenset({"verify-full"})
_warned: set[str] = set()  # once per target: a limiter per account opens the same URL


def warn_if_cleartext(url: str) -> bool:
    """Log a warning (and return ``True``) when ``url`` reaches a remote host without
    verified TLS: ``redis://`` instead of ``rediss://``, or a PostgreSQL URL whose
    ``sslmode`` (or ``PGSSLMODE``) is not ``verify-full``."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    query = parse_qs(parts.query)
    hosts = _hosts(parts.netloc, query)
    if not hosts or all(_is_local(host) for host in hosts):
        return False
    if scheme == "redis":
        advice = "use rediss:// (TLS)"
    elif scheme in ("postgresql", "postgres"):
        mode = (query.get("sslmode") or [os.environ.get("PGSSLMODE", "")])[-1]
        if mode in _VERIFIED_SSLMODES:
            return False
        advice = "add ?sslmode=verify-full (TLS with the server's certificate checked)"
    else:
        return False
    target = f"{scheme}://{','.join(hosts)}"
    if target in _warned:
        return True
    _warned.add(target)
    _log.warning(
        "%s: the connection to a non-loopback host is not verified TLS; %s",
        target,
        advice,
    )
    return True


def _hosts(netloc: str, query: dict[str, list[str]]) -> list[str]:
    location = netloc.rpartition("@")[2]
    hosts = []
    for part in location.split(","):  # PostgreSQL allows host1:port,host2:port
        host = part.strip()
        host = host[1 : host.find("]")] if host.startswith("[") else host.partition(":")[0]
        if host:
            hosts.append(host)
    hosts += query.get("host", [])  # postgresql:///db?host=/run/postgresql
    return hosts


def _is_local(host: str) -> bool:
    if host.startswith("/") or host.lower() == "localhost":
        return True  # a Unix socket directory, or the loopback name
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
