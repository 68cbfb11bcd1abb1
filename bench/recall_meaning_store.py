"""First hybrid recall in a fresh process, SQLite, from the store's index (vectors included).

    python bench/recall_meaning_store.py --size 100000            # fills /tmp, then measures
    python bench/recall_meaning_store.py --size 100000 --path s.db --reuse

The log: bench/compare.py's realistic episodes, each with a 384-dimension vector of a
deterministic in-process embedder (``random``: a fixed pseudo-random vector per text, as in
bench/recall_meaning.py; ``words``: the normalised sum of a fixed vector per word, so episodes
of one topic are close to each other and to a query about it). Each measurement is a fresh
process: import, open, the query's vector and the background's computed first (the embedding
is not counted), then one ``explain()`` timed, then the process's RSS over what it held after
the import. ``in process`` is the same recall after ``load()`` (the whole log read).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

DIMENSION = 384
NOW = time.time()  # one clock for every process of a run: the same recency, the same scores
QUERIES = [
    "how do I refund a duplicate charge on order acme quickly?",
    "rotate the API key of the reporting service",
    "ticket #100017",
    "customer cannot sign in after the password reset",
]


def vectors(kind: str, texts: list[str]) -> Any:
    import numpy as np

    def seeded(text: str) -> Any:
        seed = int.from_bytes(hashlib.blake2b(text.encode()).digest()[:8])
        return np.random.default_rng(seed).standard_normal(DIMENSION)

    if kind == "random":
        return np.stack([seeded(t) for t in texts]).astype(np.float32)
    rows = []
    for text in texts:
        words = text.lower().split() or [""]
        rows.append(sum(seeded(w) for w in words))
    return np.stack(rows).astype(np.float32)


def embedder(kind: str) -> Any:
    def embed(texts: list[str]) -> Any:
        return vectors(kind, texts)

    embed.name = f"bench-{kind}-{DIMENSION}"  # type: ignore[attr-defined]
    return embed


async def fill(path: Path, size: int, kind: str) -> None:
    import uuid

    from compare import episode_fields

    from deepcrew_episodic import Episode
    from deepcrew_episodic._embed import (
        DEFAULT_EMBED_FIELDS,
        check_vectors,
        digest,
        embed_text,
        encode_identity,
        encode_vector,
        fingerprint,
    )
    from deepcrew_episodic._log import EpisodeLog
    from deepcrew_episodic._redact import as_redactor
    from deepcrew_episodic.providers import SQLiteMemoryProvider

    name = f"bench-{kind}-{DIMENSION}"
    mark = fingerprint(name, DIMENSION)
    redactor = as_redactor(True)
    provider = SQLiteMemoryProvider(path)
    log = EpisodeLog(provider, "default", size)
    step = 10_000
    for start in range(1, size + 1, step):
        seqs = range(start, min(size, start + step - 1) + 1)
        episodes = [Episode(**episode_fields(s), id=uuid.UUID(int=s).hex) for s in seqs]
        texts = [embed_text(e, DEFAULT_EMBED_FIELDS, redactor) for e in episodes]
        rows = check_vectors(vectors(kind, texts), len(texts), name)
        items = {}
        for seq, episode, text, row in zip(seqs, episodes, texts, rows, strict=True):
            items[log.entry_key(seq, None)] = episode.to_json()
            items[log.vector_key(seq)] = encode_vector(row, mark, digest(text))
        if start == 1:
            items[log.embedder_key] = encode_identity(name, DIMENSION)
        items[log.seq_key] = str(seqs[-1])
        items[log.ring_key] = str(size)
        await provider.write(items)
        print(f"  {seqs[-1]:,} written", file=sys.stderr)
    await provider.aclose()


MEASURE = r"""
import asyncio, json, resource, sys, time
sys.path.insert(0, {bench!r})
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
import numpy
import deepcrew_episodic
from deepcrew_episodic import EpisodicMemory
from deepcrew_episodic.providers import SQLiteMemoryProvider
from recall_meaning_store import embedder
after_import = rss()
async def main():
    memory = EpisodicMemory(SQLiteMemoryProvider({path!r}), max_episodes={size},
                            embedder=embedder({kind!r}), clock=lambda: {now!r})
    await memory._semantic.query_vector({query!r})  # the embedding, not counted
    if {loaded!r}:
        await memory.load()
    started = time.perf_counter()
    ranking = await memory.explain({query!r}, 5)
    ms = (time.perf_counter() - started) * 1000
    print(json.dumps({{"ms": ms, "by": ranking.by, "held_mb": rss() - after_import,
                      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "import_mb": after_import, "ids": [s.episode.id for s in ranking],
                      "scores": [s.score for s in ranking]}}))
asyncio.run(main())
"""


def measure(path: Path, size: int, kind: str, query: str, loaded: bool) -> dict[str, Any]:
    code = MEASURE.format(
        bench=str(Path(__file__).resolve().parent),
        path=str(path),
        size=size,
        kind=kind,
        query=query,
        loaded=loaded,
        now=NOW,
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--kind", choices=["random", "words"], default="random")
    parser.add_argument("--path", type=Path)
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--in-process", action="store_true", help="also time the old path")
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    path = args.path or Path(tempfile.gettempdir()) / f"meaning-{args.kind}-{args.size}.db"
    if not (args.reuse and path.exists()):
        path.unlink(missing_ok=True)
        started = time.perf_counter()
        import anyio

        anyio.run(fill, path, args.size, args.kind)
        print(f"filled in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    print("| query | first hybrid recall (ms) | held over import (MB) | peak RSS (MB) |")
    print("|---|---:|---:|---:|")
    for query in QUERIES:
        got = measure(path, args.size, args.kind, query, False)
        line = f"| {query} | {got['ms']:.1f} | {got['held_mb']:.1f} | {got['peak_mb']:.0f} |"
        if args.in_process:
            old = measure(path, args.size, args.kind, query, True)
            same = old["ids"] == got["ids"] and old["scores"] == got["scores"]
            line += f" in process {old['ms']:.1f} ms, same: {same}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
