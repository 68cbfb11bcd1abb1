"""Start a real redis-server on a free loopback port for the tests.

Skips when no server binary can be found, fails instead under ``REQUIRE_REDIS=1`` (CI).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

PORT_ATTEMPTS = 3


class ServerExited(RuntimeError):
    """The server stopped before it answered (typically: its port was taken meanwhile)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def unavailable(reason: str) -> None:
    if os.environ.get("REQUIRE_REDIS") == "1":
        pytest.fail(f"REQUIRE_REDIS=1 but {reason}")
    pytest.skip(reason)


def wait_for(port: int, proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerExited(f"redis-server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("redis-server did not answer PING in time")


@contextmanager
def redis_server(*extra: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """Yield the port and process of a fresh redis-server; stopped and its files removed after.

    The free port is probed before the server binds it, so another process (a parallel pytest
    worker) can take it in between: the server then exits at once, and is started again on
    another port.
    """
    binary = shutil.which("redis-server")
    if binary is None:
        unavailable("redis-server is not installed")
        raise AssertionError("unreachable")
    for attempt in range(PORT_ATTEMPTS):
        port = free_port()
        workdir = tempfile.mkdtemp(prefix="redis-test-")
        proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                workdir,
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            try:
                wait_for(port, proc)
            except ServerExited as exc:
                if attempt + 1 < PORT_ATTEMPTS:
                    continue  # most likely the port was taken: try another
                unavailable(str(exc))
            except RuntimeError as exc:
                unavailable(str(exc))
            yield port, proc
            return
        finally:
            stop(proc)
            shutil.rmtree(workdir, ignore_errors=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
