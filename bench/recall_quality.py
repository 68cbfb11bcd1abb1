"""Recall quality on the probe set (tests/probes/): ours beside deepcrew-ai 0.6.1's Jaccard.

    python bench/recall_quality.py [--details] [--no-ancestor]

Rows:
- deepcrew-episodic: the real ``EpisodicMemory`` on ``InMemoryProvider``, default settings.
- without the relevance floor (``min_relevance=0``): the ranking as it was before the floor;
  the near misses (queries sharing one incidental word with the log) are what it keeps out.
- ablations of our ranking (same terms, same index), to show what each choice buys:
  plain Jaccard (no length cap), no stemming, recency as a pure tie-break (weight 0), and
  recency without a floor (weight 1: an episode's score halves every 30 days).
  ``--sweep`` adds the length cap and recency weight grid behind the chosen values.
- deepcrew-ai 0.6.1: its ``EpisodicMemory`` (``pip install deepcrew-ai==0.6.1``) on its own
  ``InMemoryProvider``, recording the same episodes in the same (oldest first) order. It has no
  intents, so probes with an intent run without one.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from recall_probes import (
    DEPTH,
    Probe,
    RecallFn,
    Report,
    evaluate,
    load_episodes,
    load_probes,
    problems,
)

from deepcrew_episodic import EpisodicMemory
from deepcrew_episodic import _recall as recall_module
from deepcrew_episodic._recall import RecallIndex
from deepcrew_episodic.providers import InMemoryProvider


async def ours(**options: Any) -> RecallFn:
    memory = EpisodicMemory(InMemoryProvider(), max_episodes=10_000, **options)
    for _, episode in load_episodes(time.time()):
        await memory.record(episode)

    async def recall(probe: Probe) -> list[str]:
        found = await memory.recall(probe.query, top_k=DEPTH, intent=probe.intent)
        return [e.id for e in found]

    return recall


def variant(**options: Any) -> RecallFn:
    """Our index with one choice changed (the memory's filters play no part on this set)."""
    index = RecallIndex(**options)
    now = time.time()
    for seq, (_, episode) in enumerate(load_episodes(now), start=1):
        index.add(seq, episode)

    async def recall(probe: Probe) -> list[str]:
        found = index.search(probe.query, DEPTH, now=now, intent=probe.intent)
        return [scored.episode.id for _, scored in found]

    return recall


def unstemmed() -> RecallFn:
    real = recall_module.stem
    recall_module.stem = lambda word: word  # type: ignore[assignment]  # bench-only ablation
    recall_module._term.cache_clear()  # it remembers stems
    try:
        return variant()
    finally:
        recall_module.stem = real
        recall_module._term.cache_clear()


async def ancestor() -> RecallFn:
    import dataclasses

    from deepcrew import Episode as OldEpisode
    from deepcrew import EpisodicMemory as OldMemory
    from deepcrew import InMemoryProvider as OldProvider

    OLD_FIELDS = {f.name for f in dataclasses.fields(OldEpisode)}
    memory = OldMemory(OldProvider(), max_episodes=10_000)
    keys: dict[tuple[str, str], str] = {}
    for key, episode in load_episodes(time.time()):
        # deepcrew-ai's Episode has none of our newer fields (id, forget_after, approach, ...)
        data = {k: v for k, v in episode.to_dict().items() if k in OLD_FIELDS}
        await memory.record(OldEpisode(**data))
        keys[(episode.query, episode.timestamp)] = key

    async def recall(probe: Probe) -> list[str]:
        found = await memory.recall(probe.query, top_k=DEPTH)
        return [keys[(e.query, e.timestamp)] for e in found]

    return recall


def row(name: str, report: Report) -> str:
    unrelated = f"{report.unrelated - len(report.unrelated_recalled)}/{report.unrelated}"
    near = f"{len(report.near_misses_recalled)}/{report.near_misses}"
    firsts = len(report.wrong_first)
    return (
        f"| {name:<38} | {report.recall_at_3:8.3f} | {report.mrr:6.3f} | {unrelated:>15} "
        f"| {near:>20} | {firsts:>11} | {'pass' if not problems(report) else 'FAIL':>6} |"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--details", action="store_true", help="per-kind figures and misses")
    parser.add_argument("--no-ancestor", action="store_true", help="skip deepcrew-ai 0.6.1")
    parser.add_argument("--sweep", action="store_true", help="length cap x recency weight grid")
    args = parser.parse_args()
    probes = load_probes()
    labelled = sum(1 for p in probes if p.labelled)
    unrelated = sum(1 for p in probes if p.unrelated)
    print(
        f"{len(load_episodes(time.time()))} episodes, {labelled} labelled queries, "
        f"{unrelated} unrelated queries, {len(probes) - labelled - unrelated} near misses\n"
    )
    systems: list[tuple[str, RecallFn]] = [
        ("deepcrew-episodic", await ours()),
        ("  without the relevance floor", await ours(min_relevance=0)),
        ("  ablation: plain Jaccard (no cap)", variant(length_cap=None)),
        ("  ablation: no stemming", unstemmed()),
        ("  ablation: recency weight 0", variant(recency_weight=0.0)),
        ("  ablation: recency weight 1", variant(recency_weight=1.0)),
    ]
    if not args.no_ancestor:
        systems.append(("deepcrew-ai 0.6.1", await ancestor()))
    print(
        "| system                                 | recall@3 |    MRR | unrelated empty "
        "| near misses recalled | wrong first | floors |"
    )
    print(
        "|----------------------------------------|---------:|-------:|----------------:"
        "|---------------------:|------------:|-------:|"
    )
    reports = []
    for name, recall in systems:
        report = await evaluate(recall, probes)
        reports.append((name, report))
        print(row(name, report))
    if args.sweep:
        print("\nrecall@3 / MRR / wrong firsts by length cap (rows) and recency weight (columns)\n")
        weights = [0.0, 0.1, 0.2, 0.3, 0.5]
        print("| cap  | " + " | ".join(f"weight {w:<13}" for w in weights) + " |")
        print("|------|" + "|".join("-" * 22 for _ in weights) + "|")
        for cap in [3, 4, 6, 8, 10, 12, 16, 24, None]:
            cells = []
            for weight in weights:
                report = await evaluate(variant(length_cap=cap, recency_weight=weight), probes)
                cells.append(
                    f"{report.recall_at_3:.3f} / {report.mrr:.3f} / {len(report.wrong_first)}"
                )
            print(
                f"| {cap if cap else 'none':<4} | " + " | ".join(f"{c:<20}" for c in cells) + " |"
            )
    if args.details:
        for name, report in reports:
            print(f"\n## {name.strip()}")
            for kind, (r3, mrr, n) in report.by_kind.items():
                print(f"  {kind:<12} recall@3 {r3:.3f}  MRR {mrr:.3f}  ({n} queries)")
            for problem in problems(report):
                print(f"  - {problem}")
            for qid, top3 in report.misses.items():
                print(f"  miss {qid}: top 3 = {top3}")


if __name__ == "__main__":
    anyio.run(main)
