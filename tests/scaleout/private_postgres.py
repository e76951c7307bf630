"""A PostgreSQL cluster of one test's own, on a free port, to crash and start again.

The machine's shared PostgreSQL (127.0.0.1:5432) is never stopped by a test. Outage tests
make their own cluster with ``initdb`` and ``pg_ctl`` as the ``postgres`` user (the server
refuses to run as root): one template cluster per test session, copied per test, so a test
pays for a copy and a start (well under a second), not for ``initdb``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["PrivatePostgres", "postgres_template", "private_postgres"]

_SERVER_USER = "postgres"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _as_server_user(*command: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    prefix = ["runuser", "-u", _SERVER_USER, "--"] if os.geteuid() == 0 else []
    return subprocess.run(
        [*prefix, *command], check=check, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def _chown_to_server_user(path: Path) -> None:
    if os.geteuid() != 0:
        return
    user = pwd.getpwnam(_SERVER_USER)
    for root, dirs, files in os.walk(path):
        os.chown(root, user.pw_uid, user.pw_gid)
        for name in dirs + files:
            os.chown(os.path.join(root, name), user.pw_uid, user.pw_gid, follow_symlinks=False)


class PrivatePostgres:
    """One cluster in a temporary folder: ``start()``, ``crash()`` (immediate stop), ``dsn``."""

    def __init__(self, template: Path) -> None:
        self.port = _free_port()
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._dir = Path(tempfile.mkdtemp(prefix="pg-"))
        self._data = self._dir / "data"
        shutil.copytree(template, self._data, symlinks=True)
        _chown_to_server_user(self._dir)
        self._dir.chmod(0o755)
        self._data.chmod(0o700)

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        # fsync off: the tests crash the server process, never the machine, so the OS still
        # holds every committed write; commits stay synchronous so none is lost to the crash.
        options = (
            f"-p {self.port} -k {self._dir} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off"
        )
        _as_server_user(
            "pg_ctl", "-D", str(self._data), "-o", options, "-w", "-l", str(self._dir / "log"),
            "start",
        )  # fmt: skip

    def crash(self) -> None:
        """Stop at once, as a crash would (no checkpoint, connections cut)."""
        _as_server_user("pg_ctl", "-D", str(self._data), "-m", "immediate", "-w", "stop")

    @property
    def running(self) -> bool:
        return (self._data / "postmaster.pid").exists()

    def cleanup(self) -> None:
        if self.running:
            _as_server_user("pg_ctl", "-D", str(self._data), "-m", "immediate", "stop", check=False)
        shutil.rmtree(self._dir, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[Path]:
    """An ``initdb``-made data folder, made once per session and copied by each test."""
    folder = Path(tempfile.mkdtemp(prefix="pg-template-"))
    _chown_to_server_user(folder)
    data = folder / "data"
    _as_server_user("initdb", "-D", str(data), "-A", "trust", "-U", _SERVER_USER, "--no-sync")
    yield data
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def private_postgres(postgres_template: Path) -> Iterator[PrivatePostgres]:
    """A running PostgreSQL of this test alone (see :class:`PrivatePostgres`)."""
    server = PrivatePostgres(postgres_template)
    server.start()
    yield server
    server.cleanup()
