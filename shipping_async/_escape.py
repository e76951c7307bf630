"""Text from a file, a socket or an answer made safe to show: control characters escaped.

A key such as ``"\\x1b[2J"`` would clear a terminal and a ``"\\n"`` in a server's error text
would forge a line of output or of a log; :func:`escape_controls` writes every such
character as its Python escape (``\\x1b``, ``\\n``), so what is shown is what the value
holds. Bidirectional overrides (U+202A-U+202E, U+2066-U+2069) are escaped too: they
reorder what a reader sees. One rule for the terminal, the CSV results and the log lines;
:func:`cut` bounds what they quote, since a server's text can be any length.
"""

from __future__ import annotations

import re

__all__ = ["cut", "escape_controls"]

_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# The same, but for the tab and line breaks that a CSV cell or a traceback keeps.
_UNSAFE_BUT_LINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    return match[0].encode("unicode_escape").decode("ascii")


def escape_controls(text: str, *, keep_lines: bool = False) -> str:
    """``text`` with every control character and bidirectional override escaped; with
    ``keep_lines``, tab, line feed and carriage return are kept as they are.

    >>> escape_controls("ACME\\x1b[2J\\n42"), escape_controls("a\\tb\\n", keep_lines=True)
    ('ACME\\\\x1b[2J\\\\n42', 'a\\tb\\n')
    """
    # Most text has nothing to escape: str.isprintable() (C) is false for every character
    # either pattern matches (controls, and the overrides, which are format characters).
    if text.isprintable():
        return text
    return (_UNSAFE_BUT_LINES if keep_lines else _UNSAFE).sub(_escape, text)


def cut(text: str, limit: int) -> str:
    """``text`` up to ``limit`` characters, saying how many more there were.

    >>> cut("abcdef", 4)
    'abcd... (2 more characters)'
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"
