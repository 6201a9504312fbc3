"""A PostgreSQL server on loopback for the tests: Debian's binaries, a throwaway cluster.

The server is started once per test session (initdb into a temporary folder, `pg_ctl start`
on a free port, its unix socket in the same folder) and every test that wants PostgreSQL gets
a database of its own. initdb refuses to run as root, so as root the cluster belongs to the
`postgres` user that Debian's package creates (or to `nobody`).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

USER = "a2rl"  # the cluster's superuser; loopback connections are trusted


def pg_bindir() -> Path | None:
    """Where initdb and pg_ctl live: Debian keeps them off PATH, one folder per major version."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                   key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0)
    for candidate in reversed(found):
        if (Path(candidate) / "initdb").is_file():
            return Path(candidate)
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_owner(argv: list[str], owner: str | None) -> list[str]:
    if owner is None:
        return argv
    return ["setpriv", f"--reuid={owner}", f"--regid={pwd.getpwnam(owner).pw_gid}",
            "--clear-groups", *argv]


@dataclass
class PgServer:
    bindir: Path
    root: Path
    port: int
    owner: str | None  # the OS user the server runs as when the tests run as root
    cheating: set[str] = field(default_factory=set)  # databases of tests marked `cheats`

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """A fresh, empty database; returns its SQLAlchemy URL."""
        import psycopg

        name = name or f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(host="127.0.0.1", port=self.port, user=USER, dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        subprocess.run(_as_owner([str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"),
                                  "-m", "immediate", "-w", "stop"], self.owner),
                       capture_output=True, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)


def start_postgres(bindir: Path) -> PgServer:
    owner = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres").pw_name
        except KeyError:
            owner = "nobody"
    root = Path(tempfile.mkdtemp(prefix="a2rl-pg-"))
    if owner is not None:
        entry = pwd.getpwnam(owner)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    server = PgServer(bindir=bindir, root=root, port=_free_port(), owner=owner)
    data, log = root / "data", root / "server.log"
    init = subprocess.run(_as_owner([str(bindir / "initdb"), "-D", str(data), "-U", USER,
                                     "--auth=trust", "-E", "UTF8", "--no-sync"], owner),
                          capture_output=True, text=True, timeout=120)
    if init.returncode != 0:
        raise RuntimeError(f"initdb failed: {init.stderr[-2000:]}")
    # Durability is not under test: skip the fsyncs that would dominate the suite's time.
    opts = (f"-c listen_addresses=127.0.0.1 -p {server.port} -k {root} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300")
    started = subprocess.run(_as_owner([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log),
                                        "-o", opts, "-w", "-t", "60", "start"], owner),
                             capture_output=True, text=True, timeout=90)
    if started.returncode != 0:
        tail = log.read_text()[-2000:] if log.exists() else started.stderr
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"PostgreSQL did not start: {tail}")
    return server


@pytest.fixture(scope="session")
def postgres() -> Iterator[PgServer]:
    """One PostgreSQL server for the session (skipped where it is missing, failed in CI)."""
    from .conftest import require  # conftest imports this module

    bindir = pg_bindir()
    require(bindir is not None,
            "PostgreSQL is not installed: apt-get install postgresql (scripts/system-deps.sh)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        require(False, "psycopg is not installed: bash scripts/setup.sh")
    assert bindir is not None
    server = start_postgres(bindir)
    try:
        yield server
        from .audit_guard import postgres_findings

        found = postgres_findings(server.port, USER, server.cheating)
        if found:
            pytest.fail(f"{len(found)} honest runs raised a high audit flag: "
                        + " | ".join(found[:20]))
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store URL on each dialect the store supports."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'a2rl.db'}"
    server: PgServer = request.getfixturevalue("postgres")
    url = server.create_database()
    if request.node.get_closest_marker("cheats"):
        server.cheating.add(url.rsplit("/", 1)[1])
    return url
