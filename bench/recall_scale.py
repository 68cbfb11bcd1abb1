"""Recall latency by log size and provider: p50 / p90 of ``EpisodicMemory.recall``.

    python bench/recall_scale.py                          # 1k, 10k, 100k on dict and redis
    python bench/recall_scale.py --sizes 1000 --providers dict --ancestor
    python bench/recall_scale.py --redis-url redis://127.0.0.1:6379/0   # an existing server

Targets (p50): 1,000 episodes <= 0.5 ms on InMemoryProvider and <= 2 ms on redis; 100,000
episodes <= 10 ms on InMemoryProvider and <= 20 ms on redis.

The log: the 309 probe episodes of tests/probes/ repeated with other ids, customers, amounts
and dates, plus words from a long tail, so that common terms ("customer", "deploy", "refund")
match tens of thousands of episodes at 100k while names and ids stay rare. The queries: the
probe set's 69 questions (short lookups, long questions, intents, unrelated ones).

Columns:
- ``warm``: a recall when nothing changed since the last one (one round trip for the log's
  head, then the index).
- ``after write``: a recall right after another writer recorded one episode (the reader
  fetches that one episode and indexes it).
- ``load``: the first recall of a fresh reader (reads and indexes the whole log once).

Without ``--redis-url`` a redis-server is started on a free loopback port and stopped after.
``--ancestor`` adds deepcrew-ai 0.6.1's ``EpisodicMemory`` on its dict provider (it re-reads
every episode on every recall, so it runs fewer rounds).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import re
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _redis import redis_server
from recall_probes import load_episodes, load_probes

from deepcrew_episodic import Episode, EpisodicMemory
from deepcrew_episodic.providers import InMemoryProvider, MemoryProvider

TARGETS_MS = {
    ("dict", 1_000): 0.5,
    ("redis", 1_000): 2.0,
    ("dict", 100_000): 10.0,
    ("redis", 100_000): 20.0,
}
SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "sa",
    "ti",
    "vo",
    "be",
    "da",
    "fe",
    "gi",
    "ho",
    "ju",
    "ky",
    "la",
    "ma",
    "no",
    "pe",
    "qu",
    "ri",
    "so",
    "tu",
    "ve",
    "wi",
    "xa",
    "yo",
    "ze",
]
NAMES = [
    "Acme",
    "Globex",
    "Initech",
    "Hooli",
    "Stark",
    "Wayne",
    "Tyrell",
    "Soylent",
    "Nordlicht",
    "Martin",
]


def long_tail(rng: random.Random, size: int = 20_000) -> list[str]:
    words = {"".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))) for _ in range(size)}
    return sorted(words)


def corpus(n: int, seed: int = 7) -> list[Episode]:
    """*n* episodes: the probe episodes with other numbers, names and dates, oldest first."""
    rng = random.Random(seed)
    base = [e for _, e in load_episodes(time.time())]
    tail = long_tail(rng)
    now = time.time()
    out = []
    for i in range(n):
        e = base[i % len(base)]

        def vary(text: str) -> str:
            return re.sub(r"\d+", lambda m: str(rng.randint(10, 99999)), text)

        extra = " ".join(
            tail[min(int(rng.paretovariate(1.2)) - 1, len(tail) - 1)] for _ in range(2)
        )
        who = f"{rng.choice(NAMES)} {rng.randint(1, 5000)}"
        age_days = (n - i) / n * 1000 + rng.random()
        out.append(
            dataclasses.replace(
                e,
                id="",
                query=f"{vary(e.query)} ({who}, {extra})",
                reflection=vary(e.reflection) if e.reflection else None,
                timestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - age_days * 86400)),
            )
        )
    return out


def ancestor_fields(episode: Episode) -> dict[str, Any]:
    """The fields deepcrew-ai's Episode has (it lacks our newer ones: id, forget_after,
    approach, ...), read from its own dataclass rather than listed here."""
    import dataclasses

    from deepcrew import Episode as OldEpisode

    kept = {f.name for f in dataclasses.fields(OldEpisode)}
    return {k: v for k, v in episode.to_dict().items() if k in kept}


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return statistics.median(ordered), p90


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await call()
    return (time.perf_counter() - start) * 1000.0


async def measure(provider: MemoryProvider, n: int, rounds: int) -> dict[str, Any]:
    namespace = f"bench{n}"
    writer = EpisodicMemory(provider, namespace=namespace, max_episodes=n)
    await writer.clear()
    for episode in corpus(n):
        await writer.record(episode)
    queries = [p.query for p in load_probes()]
    reader = EpisodicMemory(provider, namespace=namespace, max_episodes=n)
    load_ms = await timed(lambda: reader.recall("warm up the index"))
    warm = []
    for i in range(rounds):
        q = queries[i % len(queries)]
        warm.append(await timed(lambda q=q: reader.recall(q)))  # type: ignore[misc]
    fresh = corpus(min(n, 200), seed=11)
    after_write = []
    for i in range(min(rounds, len(fresh))):
        await writer.record(fresh[i])  # the ring drops the oldest: the log stays at n
        q = queries[i % len(queries)]
        after_write.append(await timed(lambda q=q: reader.recall(q)))  # type: ignore[misc]
    return {"warm": percentiles(warm), "after": percentiles(after_write), "load": load_ms}


async def measure_ancestor(n: int, rounds: int) -> dict[str, Any]:
    from deepcrew import Episode as OldEpisode
    from deepcrew import EpisodicMemory as OldMemory
    from deepcrew import InMemoryProvider as OldProvider

    memory = OldMemory(OldProvider(), max_episodes=n)
    for episode in corpus(n):
        await memory.record(OldEpisode(**ancestor_fields(episode)))
    queries = [p.query for p in load_probes()]
    warm = []
    for i in range(rounds):
        q = queries[i % len(queries)]
        warm.append(await timed(lambda q=q: memory.recall(q)))  # type: ignore[misc]
    return {"warm": percentiles(warm), "after": None, "load": None}


def line(provider: str, n: int, result: dict[str, Any]) -> str:
    p50, p90 = result["warm"]
    target = TARGETS_MS.get((provider, n))
    verdict = "" if target is None else ("ok" if p50 <= target else "MISSED")
    after = "" if result["after"] is None else "{:.3f} / {:.3f}".format(*result["after"])
    load = "" if result["load"] is None else f"{result['load']:.0f}"
    target_s = f"<= {target:g}" if target is not None else ""
    return (
        f"| {provider:<17} | {n:>7,} | {p50:8.3f} | {p90:8.3f} | {after:>17} | {load:>7} "
        f"| {target_s:>7} {verdict:<6} |"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument(
        "--providers", nargs="+", default=["dict", "redis"], choices=["dict", "redis"]
    )
    parser.add_argument("--redis-url", help="use this server (its database is flushed!)")
    parser.add_argument("--rounds", type=int, default=300, help="recalls per measurement")
    parser.add_argument("--ancestor", action="store_true", help="add deepcrew-ai 0.6.1 (dict)")
    args = parser.parse_args()
    print(
        "| provider          | episodes | p50 (ms) | p90 (ms) | after write p50/p90 | load (ms) "
        "| target        |"
    )
    print(
        "|-------------------|---------:|---------:|---------:|--------------------:|----------:"
        "|---------------|"
    )
    if "dict" in args.providers:
        for n in args.sizes:
            result = await measure(InMemoryProvider(), n, args.rounds)
            print(line("dict", n, result), flush=True)
    if "redis" in args.providers:
        from deepcrew_episodic.providers import RedisMemoryProvider

        with redis_server(args.redis_url) as url:
            for n in args.sizes:
                async with RedisMemoryProvider(url) as provider:
                    await provider.clear()
                    result = await measure(provider, n, args.rounds)
                    await provider.clear()
                print(line("redis", n, result), flush=True)
    if args.ancestor:
        for n in args.sizes:
            rounds = max(10, min(args.rounds, 2_000_000 // n))
            result = await measure_ancestor(n, rounds)
            print(line("deepcrew-ai 0.6.1", n, result), flush=True)


if __name__ == "__main__":
    anyio.run(main)
