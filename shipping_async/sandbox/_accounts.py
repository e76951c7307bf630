"""The sandbox's accounts: which bearer tokens it accepts and whose order budget each spends.

The spec leaves open whether the POST /orders limit counts per token or per account. The
sandbox counts **per account**: each account has its own budget of ``rate_limit`` orders per
``rate_window``, and every token of one account spends that one budget. A token given on its
own (``tokens=3``, a list, a file line without an account name) is an account of its own,
so for those the two readings agree; a tokens file can put several tokens on one account to
test a server that counts per account.

Tokens file: one token per line, either ``TOKEN`` or ``ACCOUNT TOKEN``; blank lines and
lines starting with ``#`` are skipped.
"""

from __future__ import annotations

import hashlib
import random
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["MAX_TOKENS", "Accounts", "TokensSpec", "generate_token", "read_tokens_file"]

#: More tokens than this is a mistake, not a test set-up (and bounds what a file can load).
MAX_TOKENS = 10_000
_MAX_TOKEN_LENGTH = 512
_MAX_FILE_BYTES = 4 * 1024 * 1024

#: ``N`` accounts with generated tokens, a list of tokens (one account each) or a mapping
#: account name -> its token(s).
TokensSpec = int | Iterable[str] | Mapping[str, str | Iterable[str]]


def generate_token(seed: int | None, index: int = 0) -> str:
    """An API token: reproducible from ``seed`` (and ``index``), else from the system's
    secure source."""
    if seed is None:
        return "sbx_" + secrets.token_hex(16)
    # A separate stream from the store's, so a reset does not change the API tokens; the
    # first token keeps the stream it had before there were several.
    stream = f"token:{seed}" if index == 0 else f"token:{seed}:{index}"
    return "sbx_" + random.Random(stream).randbytes(16).hex()


def _account_name(index: int) -> str:
    return f"account-{index + 1}"


def _check_token(token: object, where: str) -> str:
    if not isinstance(token, str) or not token:
        raise ValueError(f"{where}: a token must be a non-empty string")
    if len(token) > _MAX_TOKEN_LENGTH:
        raise ValueError(f"{where}: a token is at most {_MAX_TOKEN_LENGTH} characters")
    if not token.isascii() or not token.isprintable() or " " in token:
        raise ValueError(f"{where}: a token is printable ASCII without spaces")
    return token


def _digest(token: str | bytes) -> bytes:
    raw = token.encode() if isinstance(token, str) else token
    return hashlib.sha256(raw).digest()


class Accounts:
    """Token -> account, looked up without comparing the token itself in variable time.

    >>> accounts = Accounts({"acme": "t1", "globex": ("t2", "t3")})
    >>> accounts.account_of("t3"), accounts.tokens
    ('globex', ('t1', 't2', 't3'))
    """

    __slots__ = ("_by_digest", "by_account", "tokens")

    def __init__(self, tokens: Mapping[str, str | Iterable[str]]) -> None:
        by_account: dict[str, tuple[str, ...]] = {}
        by_digest: dict[bytes, str] = {}
        for account, given in tokens.items():
            if not isinstance(account, str) or not account or not account.isprintable():
                raise ValueError(f"account name {account!r} must be a printable non-empty string")
            listed = (given,) if isinstance(given, str) else tuple(given)
            if not listed:
                raise ValueError(f"account {account!r} has no token")
            for token in listed:
                _check_token(token, f"account {account!r}")
                digest = _digest(token)
                if digest in by_digest:
                    raise ValueError(f"account {account!r}: a token is given twice")
                by_digest[digest] = account
            by_account[account] = by_account.get(account, ()) + listed
        if not by_digest:
            raise ValueError("the sandbox needs at least one token")
        if len(by_digest) > MAX_TOKENS:
            raise ValueError(f"at most {MAX_TOKENS} tokens")
        self._by_digest = by_digest
        #: Account name -> its tokens, in the order given.
        self.by_account: Mapping[str, tuple[str, ...]] = by_account
        #: Every token, in the order given (``tokens[0]`` is the sandbox's ``token``).
        self.tokens: tuple[str, ...] = tuple(t for group in by_account.values() for t in group)

    @classmethod
    def build(cls, *, token: str | None, tokens: TokensSpec | None, seed: int | None) -> Accounts:
        """From ``create_app``'s ``token``/``tokens`` arguments (at most one of them)."""
        if token is not None and tokens is not None:
            raise ValueError("pass either token or tokens, not both")
        if tokens is None:
            return cls({_account_name(0): token or generate_token(seed)})
        if isinstance(tokens, bool):
            raise TypeError("tokens is a count, a list of tokens or a mapping account -> token")
        if isinstance(tokens, int):
            if not 1 <= tokens <= MAX_TOKENS:
                raise ValueError(f"tokens must be between 1 and {MAX_TOKENS}, got {tokens}")
            return cls({_account_name(i): generate_token(seed, i) for i in range(tokens)})
        if isinstance(tokens, str):
            raise TypeError("tokens is a count, a list of tokens or a mapping account -> token")
        if isinstance(tokens, Mapping):
            return cls(tokens)
        return cls({_account_name(i): token for i, token in enumerate(tokens)})

    def account_of(self, token: str | bytes) -> str | None:
        """The account ``token`` belongs to; ``None`` when the sandbox does not know it.

        The lookup is by SHA-256 digest, so its timing tells nothing about how much of an
        unknown token matched a real one.
        """
        return self._by_digest.get(_digest(token))

    def __len__(self) -> int:
        return len(self.by_account)


def read_tokens_file(path: str | Path) -> dict[str, list[str]]:
    """Account -> tokens from a tokens file (see the module docstring); errors name the line."""
    source = Path(path)
    with source.open("rb") as handle:
        raw = handle.read(_MAX_FILE_BYTES + 1)
    if len(raw) > _MAX_FILE_BYTES:
        raise ValueError(f"{source}: larger than {_MAX_FILE_BYTES // (1024 * 1024)} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    accounts: dict[str, list[str]] = {}
    count = 0
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) > 2:
            raise ValueError(f"{source} line {number}: expected 'TOKEN' or 'ACCOUNT TOKEN'")
        account, token = (_account_name(count), fields[0]) if len(fields) == 1 else fields
        _check_token(token, f"{source} line {number}")
        if not account.isprintable():
            raise ValueError(f"{source} line {number}: the account name is not printable")
        accounts.setdefault(account, []).append(token)
        count += 1
    if not count:
        raise ValueError(f"{source}: no token in the file")
    return accounts
