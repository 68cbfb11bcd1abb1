"""Recall by meaning: quality on both probe sets, and recall latency with vectors.

    python bench/recall_meaning.py                       # both parts, ~3 min
    python bench/recall_meaning.py --models minilm --no-latency
    python bench/recall_meaning.py --no-quality --sizes 1000,100000

Quality. Each model is a real embedding model served by the scripted OpenAI-compatible server
of ``tests/`` on 127.0.0.1 and reached through litellm's real HTTP path (``LiteLLMEmbedder``):
``minilm`` (all-MiniLM-L6-v2, int8 ONNX) and ``wordllama`` (static WordLlama embeddings). Rows,
for the paraphrase probe (``tests/probes/paraphrase``: every content word of a query differs
from its target's) and the original probe (``tests/probes``):

- ``keywords``: the default memory, no embedder;
- ``hybrid``: ``EpisodicMemory(embedder=...)`` with its default settings;
- ``cosine ceiling``: the same model's vectors ranked by cosine alone, no floor (an upper bound
  for what the vectors can find; it returns something for every query, related or not).

Columns: recall@3 and MRR over the labelled queries, unrelated queries that return nothing,
near misses whose decoy (an episode sharing words but not meaning) stays out of the top 3.

Latency. ``explain()`` p50 / p90 over logs of N episodes with 384-dimension vectors, excluding
the query's embedding call (the query vectors are cached before timing, as the memory's LRU
cache does in a refinement loop), next to keyword-only recall on the same log, and the memory
the vectors take. Targets: <= 1 ms at 1,000 episodes and <= 25 ms at 100,000.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import numpy as np
from embedding_models import available
from llm_server import ScriptedLLM, scripted_llm
from recall_probes import (
    DEPTH,
    HELDOUT,
    PARAPHRASES,
    PROBES,
    Probe,
    RecallFn,
    Report,
    evaluate,
    load_episodes,
    load_probes,
)

from deepcrew_episodic import Episode, EpisodicMemory, LiteLLMEmbedder
from deepcrew_episodic._episode import now_iso
from deepcrew_episodic.providers import InMemoryProvider

SETS = {"paraphrase": PARAPHRASES, "heldout": HELDOUT, "original": PROBES}


async def filled(folder: Path, **options: Any) -> EpisodicMemory:
    memory = EpisodicMemory(InMemoryProvider(), max_episodes=10_000, **options)
    for _, episode in load_episodes(time.time(), folder):
        await memory.record(episode)
    return memory


def by_memory(memory: EpisodicMemory) -> RecallFn:
    async def recall(probe: Probe) -> list[str]:
        found = await memory.explain(probe.query, DEPTH, intent=probe.intent)
        return [scored.episode.id for scored in found]

    return recall


def by_cosine(memory: EpisodicMemory) -> RecallFn:
    """Rank every episode by cosine similarity alone (bench-only: reads the memory's index)."""

    async def recall(probe: Probe) -> list[str]:
        vector, error = await memory._semantic.query_vector(probe.query)
        assert error is None, error
        seqs, sims = memory._semantic.vectors.similarities(vector)
        order = np.argsort(-sims, kind="stable")[:DEPTH]
        return [memory._held.index.episode(int(seqs[i])).id for i in order]

    return recall


def quality_row(model: str, probe_set: str, ranking: str, report: Report) -> str:
    unrelated = report.unrelated - len(report.unrelated_recalled)
    decoys = report.decoy_queries - len(report.decoys_in_top3)
    empty = (
        f"{unrelated}/{report.unrelated} ({unrelated / report.unrelated:.0%})"
        if report.unrelated
        else "—"
    )
    return (
        f"| {model} | {probe_set} | {ranking} | {report.recall_at_3:.3f} | {report.mrr:.3f} "
        f"| {empty} | {f'{decoys}/{report.decoy_queries}' if report.decoy_queries else '—'} |"
    )


async def quality(models: list[str], llm: ScriptedLLM) -> None:
    print("| model | probe | ranking | recall@3 | MRR | unrelated empty | decoys out of top 3 |")
    print("|---|---|---|---:|---:|---:|---:|")
    for name, folder in SETS.items():
        probes = load_probes(folder)
        keywords = await filled(folder)
        print(quality_row("—", name, "keywords", await evaluate(by_memory(keywords), probes)))
        for model in models:
            embedder = LiteLLMEmbedder(f"openai/{model}", **llm.params)
            memory = await filled(folder, embedder=embedder)
            hybrid = await evaluate(by_memory(memory), probes)
            print(quality_row(model, name, "hybrid", hybrid))
            ceiling = await evaluate(by_cosine(memory), [p for p in probes if p.labelled])
            print(quality_row(model, name, "cosine ceiling", ceiling))


# --- latency --------------------------------------------------------------------------------

DIMENSION = 384
_WORDS = [f"w{i}" for i in range(5000)]


def random_vectors(texts: list[str]) -> Any:
    """A fixed pseudo-random unit vector per text: the cost of the ranking, not of a model."""
    rows = [
        np.random.default_rng(int.from_bytes(hashlib.blake2b(t.encode()).digest()[:8]))
        .standard_normal(DIMENSION)
        .astype(np.float32)
        for t in texts
    ]
    return np.stack(rows)


random_vectors.name = "bench-random-384"  # type: ignore[attr-defined]


async def latency(sizes: list[int], samples: int) -> None:
    print(
        "\n| episodes | hybrid p50 / p90 (ms) | keywords p50 / p90 (ms) | vectors in memory "
        "| per vector |"
    )
    print("|---:|---:|---:|---:|---:|")
    for size in sizes:
        rng = random.Random(size)
        backend = InMemoryProvider()
        memory = EpisodicMemory(backend, max_episodes=size, embedder=random_vectors)
        start = time.time() - size * 60
        for i in range(size):
            text = " ".join(rng.choice(_WORDS) for _ in range(8))
            await memory.record(
                Episode(query=text, response="done", timestamp=now_iso(start + i * 60))
            )
        plain = EpisodicMemory(backend, max_episodes=size)
        queries = [" ".join(rng.choice(_WORDS) for _ in range(6)) for _ in range(40)]
        for query in queries:  # load, and cache every query's vector
            await memory.explain(query)
            await plain.explain(query)
        cells = []
        for target in (memory, plain):
            times = []
            for i in range(samples):
                query = queries[i % len(queries)]
                began = time.perf_counter()
                await target.explain(query)
                times.append((time.perf_counter() - began) * 1000)
            times.sort()
            cells.append(f"{statistics.median(times):.3f} / {times[int(len(times) * 0.9)]:.3f}")
        held = memory._semantic.vectors.nbytes
        print(f"| {size:,} | {cells[0]} | {cells[1]} | {held / 1e6:.1f} MB | {held / size:.0f} B |")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="minilm,wordllama")
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--no-quality", action="store_true")
    parser.add_argument("--no-latency", action="store_true")
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    for model in models:
        if not available(model):
            sys.exit(f"model {model!r} is not installed here: pip install -e '.[dev]'")
    if not args.no_quality:
        with scripted_llm() as llm:
            await quality(models, llm)
    if not args.no_latency:
        await latency([int(s) for s in args.sizes.split(",")], args.samples)


if __name__ == "__main__":
    anyio.run(main)
