"""How fast does the web viewer answer on a large log?

Fills a SQLite store with 100,000 episodes in their stored form (as bench/compare.py does:
seconds, not the minutes recording them would take), serves the viewer with uvicorn on a free
loopback port, and measures the time to first byte of each page over real HTTP: the first
request (the log is read and indexed once), then ``--requests`` warm ones (p50 / p90). The
target (issue 15): the timeline's first byte within 200 ms warm on SQLite.

A log this large takes about a second to load (``load()`` copies every episode), so the viewer
keeps what it loaded until the log changes (docs/viewer.md); the "reload" row is the page after
a change (here: after the refresh window, which forces the same reload).

    python bench/viewer.py                    # 100,000 episodes
    python bench/viewer.py --size 10000 --requests 100
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).parent))

from compare import episode_fields

TARGET_MS = 200.0


async def fill(path: Path, size: int) -> None:
    from deepcrew_episodic import Episode
    from deepcrew_episodic._log import EpisodeLog  # the stored form, written directly
    from deepcrew_episodic.providers import SQLiteMemoryProvider

    provider = SQLiteMemoryProvider(path)
    log = EpisodeLog(provider, "default", size)
    items = {
        log.entry_key(seq, None): Episode(
            **episode_fields(seq), id=uuid.UUID(int=seq).hex
        ).to_json()
        for seq in range(1, size + 1)
    }
    items[log.seq_key] = str(size)
    items[log.ring_key] = str(size)
    await provider.write(items)
    await provider.aclose()


async def first_byte(host: str, port: int, path: str, cookie: str) -> float:
    """Milliseconds from sending a GET to reading the first byte of the answer."""
    reader, writer = await asyncio.open_connection(host, port)
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nCookie: dce_token={cookie}\r\n"
        f"Connection: close\r\n\r\n"
    )
    started = time.perf_counter()
    writer.write(request.encode())
    await writer.drain()
    head = await reader.read(1)
    elapsed = (time.perf_counter() - started) * 1000
    rest = await reader.read()
    writer.close()
    status = (head + rest).split(b" ", 2)[1]
    if status != b"200":
        raise RuntimeError(f"{path}: HTTP {status.decode()}")
    return elapsed


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=50)
    options = parser.parse_args()

    import uvicorn

    from deepcrew_episodic import EpisodicMemory
    from deepcrew_episodic.providers import SQLiteMemoryProvider
    from deepcrew_episodic.viewer import create_app

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "viewer.db"
        started = time.perf_counter()
        await fill(path, options.size)
        print(f"filled {options.size:,} episodes in {time.perf_counter() - started:.1f} s")
        async with SQLiteMemoryProvider(path) as provider:
            memory = await EpisodicMemory.open(provider)
            token = secrets.token_urlsafe(32)
            refresh = 10.0
            app = create_app(memory, token=token, label=str(path.name), refresh_seconds=refresh)
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sock.listen(128)
            host, port = sock.getsockname()
            server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
            serving = asyncio.create_task(server.serve(sockets=[sock]))
            while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
                await asyncio.sleep(0.01)
            pages = [
                ("timeline /", "/"),
                ("timeline, page 100", "/?page=100"),
                ("timeline, filter + search", "/?outcome=failure&tag=billing&q=acme"),
                ("overview", "/overview"),
                ("playground", "/playground?task=refund+a+duplicate+charge+acme&top_k=5"),
            ]
            rows = []
            first = await first_byte(host, port, "/", token)  # loads and indexes the log
            rows.append(("first page (log loaded)", [first], ""))
            for name, url in pages:
                await first_byte(host, port, url, token)  # this page's own first use
                samples = [
                    await first_byte(host, port, url, token) for _ in range(options.requests)
                ]
                rows.append((name, samples, ""))
            await asyncio.sleep(refresh + 0.5)
            reload = await first_byte(host, port, "/", token)
            rows.append((f"reload after {refresh:.0f} s", [reload], ""))
            server.should_exit = True
            await serving
    print(f"\nviewer, SQLite, {options.size:,} episodes, time to first byte (ms)\n")
    print(f"{'page':<30} {'p50':>8} {'p90':>8} {'n':>4}")
    for name, samples, _ in rows:
        p50 = statistics.median(samples)
        p90 = pct(samples, 0.9) if len(samples) >= 10 else float("nan")
        print(f"{name:<30} {p50:>8.1f} {p90:>8.1f} {len(samples):>4}")
    timeline = statistics.median(rows[1][1])
    verdict = "meets" if timeline <= TARGET_MS else "MISSES"
    print(f"\ntimeline warm p50 {timeline:.1f} ms: {verdict} the {TARGET_MS:.0f} ms target")


if __name__ == "__main__":
    asyncio.run(main())
