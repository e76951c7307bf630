"""Text from cells, keys and answers made safe for a terminal: control characters escaped.

A key such as ``"\\x1b[2J"`` would clear the screen and a ``"\\n"`` in an error text would
forge a line of output; :func:`printable` writes every such character as its Python escape
(``\\x1b``, ``\\n``), so what the terminal shows is what the value holds. Bidirectional
overrides (U+202A-U+202E, U+2066-U+2069) are escaped too: they reorder what a reader sees.
:func:`one_line` caps an error to a line; :func:`without_password` hides a URL's password.
"""

from __future__ import annotations

from shipping_async._escape import escape_controls

__all__ = ["one_line", "printable", "rich_text", "without_password"]


def printable(value: object) -> str:
    """``str(value)`` with every control character written as its escape sequence.

    >>> printable("ACME\\x1b[2J\\n42")
    'ACME\\\\x1b[2J\\\\n42'
    """
    return escape_controls(str(value))


def rich_text(value: object) -> str:
    """:func:`printable`, with rich's markup escaped too (``[/]`` shows as written)."""
    from rich.markup import escape

    return escape(printable(value))


def one_line(exc: BaseException) -> str:
    """An error for one line of a terminal: its text (or type), escaped and capped."""
    return printable(str(exc)[:300] or type(exc).__name__)


def without_password(url: str) -> str:
    """A URL without its password, for messages."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return parts._replace(netloc=netloc).geturl()
    return url
