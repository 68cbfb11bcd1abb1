"""Start a real three-master Redis Cluster on free loopback ports for the tests.

Three ``redis-server --cluster-enabled yes`` processes, joined with
``redis-cli --cluster create ... --cluster-replicas 0``, then polled until every node reports
``cluster_state:ok``. Same rule as :mod:`redis_server`: skips when no server (or no redis-cli)
can be had, fails instead under ``REQUIRE_REDIS=1``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from redis_server import free_port, redis_server, unavailable

MASTERS = 3


def _cluster_info(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
        s.sendall(b"CLUSTER INFO\r\n")
        data = b""
        while b"\r\n" not in data or len(data) < _bulk_length(data):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return data.decode(errors="replace")


def _bulk_length(data: bytes) -> int:
    """Bytes of a complete RESP bulk-string reply, once its header has arrived."""
    header, _, _ = data.partition(b"\r\n")
    if not header.startswith(b"$"):
        return len(data)
    return len(header) + 2 + int(header[1:]) + 2


def _wait_until_ok(ports: list[int], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if all("cluster_state:ok" in _cluster_info(p) for p in ports):
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the redis cluster did not reach cluster_state:ok in time")


@contextmanager
def redis_cluster() -> Iterator[list[int]]:
    """Yield the ports of three masters that together serve all 16384 slots."""
    cli = shutil.which("redis-cli")
    if cli is None:
        unavailable("redis-cli is not installed (needed to create a cluster)")
        raise AssertionError("unreachable")
    with ExitStack() as stack:
        ports: list[int] = []
        for _ in range(MASTERS):
            port, _proc = stack.enter_context(
                redis_server(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",  # inside the server's own --dir
                    # The bus port is chosen too, so that port + 10000 need not be free.
                    "--cluster-port",
                    str(free_port()),
                    "--cluster-node-timeout",
                    "5000",
                )
            )
            ports.append(port)
        created = subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in ports),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if created.returncode != 0:
            unavailable(f"redis-cli --cluster create failed: {created.stdout[-500:]}")
        try:
            _wait_until_ok(ports)
        except RuntimeError as exc:
            unavailable(str(exc))
        yield ports
