"""First recall in a fresh process on Redis, from the index the store keeps, and the cost of
keeping it on every record.

    python bench/recall_from_redis.py                       # 10k and 100k, a private server
    python bench/recall_from_redis.py --sizes 10000 --redis-url redis://127.0.0.1:6379/0

For each size: the log of ``bench/recall_scale.py``'s ``corpus()`` is written (in batches,
through the provider, so the write script keeps the index as ``record`` does); then a fresh
Python process opens a provider and a memory and times its first recall (the whole call:
the log's head, the index reader's connection, the search, the top k's records) and the next
ones, and the memory it holds; then ``record`` is timed on the full ring with the index kept
and, for comparison, with the index upkeep left out of the write (the script alone).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import anyio

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _redis import redis_server
from recall_scale import corpus

from deepcrew_episodic import EpisodicMemory, StorageError
from deepcrew_episodic.providers import RedisMemoryProvider
from deepcrew_episodic.providers import _redis_index as index

HERE = Path(__file__).resolve().parent
FRESH = textwrap.dedent(
    """
    import sys, time, resource, anyio
    sys.path.insert(0, {tests!r})
    from recall_probes import load_probes
    from deepcrew_episodic import EpisodicMemory
    from deepcrew_episodic.providers import RedisMemoryProvider
    queries = [p.query for p in load_probes()]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    async def main():
        async with RedisMemoryProvider({url!r}) as provider:
            memory = EpisodicMemory(provider, namespace={ns!r}, max_episodes={n})
            start = time.perf_counter()
            found = await memory.recall(queries[0])
            first = (time.perf_counter() - start) * 1000
            times = []
            for q in queries[1:]:
                start = time.perf_counter()
                await memory.recall(q)
                times.append((time.perf_counter() - start) * 1000)
            times.sort()
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            print(first, times[len(times) // 2], times[int(len(times) * 0.9)],
                  (rss - rss0) / 1024, len(found), memory.counters.recovered_indexes)

    anyio.run(main)
    """
)


async def build(provider: RedisMemoryProvider, ns: str, n: int) -> None:
    episodes = corpus(n)
    batch = 100  # one script each: a long one would hold the server up
    for start in range(0, n, batch):
        items = {
            f"episodic:{ns}:e:{start + i + 1}": e.__class__(
                **{**e.to_dict(), "id": uuid.uuid4().hex}
            ).to_json()
            for i, e in enumerate(episodes[start : start + batch])
        }
        for attempt in range(3):  # a loaded machine can outlast the client's read timeout
            try:
                await provider.write(items)  # the same records again: the index is replaced
                break
            except StorageError:
                if attempt == 2:
                    raise
    await provider.write({f"episodic:{ns}:__seq__": str(n), f"episodic:{ns}:__max__": str(n)})


async def record_latency(
    provider: RedisMemoryProvider, ns: str, n: int, rounds: int
) -> tuple[float, float]:
    """``record`` p50 with the index kept and with its upkeep left out of the write script,
    interleaved one by one (so that both see the same server, cache and load)."""
    memory = EpisodicMemory(provider, namespace=ns, max_episodes=n)
    upkeep = index.upkeep
    times: tuple[list[float], list[float]] = ([], [])
    try:
        for i, episode in enumerate(corpus(rounds, seed=11)):
            kept = i % 2 == 0
            index.upkeep = upkeep if kept else (lambda *a, **k: [])  # type: ignore[assignment]
            start = time.perf_counter()
            await memory.record(episode)
            times[0 if kept else 1].append((time.perf_counter() - start) * 1000)
    finally:
        index.upkeep = upkeep  # type: ignore[assignment]
    return statistics.median(times[0]), statistics.median(times[1])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--redis-url", help="use this server (its database is flushed!)")
    parser.add_argument("--rounds", type=int, default=200, help="records timed per size")
    args = parser.parse_args()
    print(
        "| episodes | first recall (ms) | next p50 / p90 (ms) | RSS over import (MB) "
        "| record p50, index kept / left out (ms) | redis memory (MB) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    with redis_server(args.redis_url) as url:
        for n in args.sizes:
            ns = f"fresh{n}"
            async with RedisMemoryProvider(url) as provider:
                await provider.clear()
                await build(provider, ns, n)
                used = await provider.client.info("memory")
                out = subprocess.run(
                    [
                        sys.executable,
                        "-c",
                        FRESH.format(url=url, ns=ns, n=n, tests=str(HERE.parent / "tests")),
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.split()
                first, p50, p90, rss, found, stale = map(float, out)
                assert found > 0, out
                assert stale == 0, out
                kept, left_out = await record_latency(provider, ns, n, args.rounds)
                await provider.clear()
            print(
                f"| {n:,} | {first:.1f} | {p50:.1f} / {p90:.1f} | {rss:.0f} "
                f"| {kept:.2f} / {left_out:.2f} | {used['used_memory'] / 2**20:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    anyio.run(main)
