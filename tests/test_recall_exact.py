"""Recall through the memory is exactly the brute-force ranking: with the relevance floor, the
filters, runs and phases, reinforcement and expiry all at once."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from llm_server import ScriptedLLM

from deepcrew_episodic import Episode, EpisodicMemory, LiteLLMEmbedder
from deepcrew_episodic._episode import now_iso, parse_time, run_key
from deepcrew_episodic._recall import LENGTH_CAP, episode_terms, outcome_weight, terms
from deepcrew_episodic.providers import InMemoryProvider

DAY = 86400.0
NOW = 1_780_000_000.0
WORDS = [
    "deploy",
    "refund",
    "invoice",
    "charge",
    "gateway",
    "timeout",
    "schema",
    "worker",
    "queue",
    "redis",
    "billing",
    "cache",
]
OUTCOMES = ["success", "failure", "partial", "unknown", "claimed_success", "abandoned"]
SOURCES = ["", "verifier", "user", "agent", "judge"]


def brute_force(
    episodes: list[Episode],
    uses: dict[str, int],
    query: str,
    k: int,
    *,
    intent: str,
    floor: float,
    outcome: set[str] | None,
    since: float | None,
) -> list[tuple[str, float]]:
    q = terms(query)
    items: dict[str, tuple[float, float, int, str]] = {}
    for position, episode in enumerate(episodes):
        when = episode.time()
        assert when is not None
        if episode.forget_after is not None and parse_time(episode.forget_after) <= NOW:
            continue
        if since is not None and when < since:
            continue
        if outcome is not None and episode.outcome not in outcome:
            continue
        if outcome is None and episode.outcome == "abandoned":
            continue
        e = episode_terms(episode, ("query", "tags", "reflection"))
        m = len(q & e)
        if not m:
            continue
        rel = m / (len(q) + max(m, min(len(e), LENGTH_CAP)) - m)
        if rel < floor:
            continue
        factor = 0.8 + 0.2 * 0.5 ** (max(0.0, NOW - when) / DAY / 30.0)
        used = uses.get(episode.id, 0)
        boost = 1.0 + min(0.2, math.log1p(used) / 10.0) if used else 1.0
        score = rel * factor * outcome_weight(intent, episode) * boost
        key = run_key(episode) or f"\x01{episode.id}"
        items[key] = (score, when, position, episode.id)  # a run's latest iteration wins
    ranked = sorted(items.values(), reverse=True)[:k]
    return [(i, s) for s, _, _, i in ranked]


@pytest.mark.anyio
@pytest.mark.parametrize("seed", range(6))
async def test_recall_equals_brute_force_with_floor_runs_uses_and_expiry(seed: int) -> None:
    rng = random.Random(seed)
    memory = await varied_memory(rng)
    stored = await memory.load(include_expired=True)
    uses = await memory.uses()
    assert len(uses) == 25
    for _ in range(30):
        query = " ".join(rng.sample(WORDS, rng.randint(1, 6)))
        k = rng.choice([1, 3, 8])
        intent = rng.choice(["any", "what_failed", "what_worked"])
        floor = rng.choice([0.0, 0.1, 0.15, 0.3])
        outcome = rng.choice([None, {"failure", "abandoned"}])
        since = rng.choice([None, NOW - 31 * DAY])
        got = await memory.explain(
            query,
            k,
            intent=intent,
            min_relevance=floor,
            outcome=outcome,
            since=None if since is None else since,
        )
        want = brute_force(
            stored,
            uses,
            query,
            k,
            intent=intent,
            floor=floor,
            outcome=outcome,
            since=since,
        )
        assert [round(s.score, 9) for s in got] == [round(s, 9) for _, s in want], (
            query,
            intent,
            floor,
            [s.episode.id for s in got],
            [i for i, _ in want],
        )
        assert [s.episode.id for s in got] == [i for i, _ in want]


async def varied_memory(
    rng: random.Random, *, runs: bool = True, **options: object
) -> EpisodicMemory:
    memory = EpisodicMemory(
        InMemoryProvider(),
        max_episodes=1000,
        clock=lambda: NOW,
        **options,  # type: ignore[arg-type]
    )
    for n in range(120):
        days = rng.choice([0, 1, 5, 30, 90, 400]) + n / 997
        await memory.record(
            Episode(
                query=" ".join(rng.sample(WORDS, rng.randint(1, 5))),
                reflection=" ".join(rng.sample(WORDS, rng.randint(0, 8))) or None,
                outcome=rng.choice(OUTCOMES),  # type: ignore[arg-type]
                outcome_source=rng.choice(SOURCES),  # type: ignore[arg-type]
                timestamp=now_iso(NOW - days * DAY),
                run_id=rng.choice(["", "", "", "r1", "r2", "r3"]) if runs else "",
                phase=rng.choice(["", "", "plan"]) if runs else "",
                forget_after=now_iso(NOW - DAY) if rng.random() < 0.05 else None,
            )
        )
    for episode in rng.sample(await memory.load(), 25):
        for _ in range(rng.randint(1, 5)):
            await memory.used(episode.id)
    for episode in rng.sample(await memory.load(), 20):  # outcomes learnt later
        await memory.grade(
            episode.id,
            outcome=rng.choice(["success", "failure", "partial"]),
            source=rng.choice(["verifier", "user", "agent", "judge"]),
        )
    return memory


@pytest.mark.anyio
@pytest.mark.parametrize("seed", range(3))
async def test_hybrid_recall_does_not_depend_on_how_many_are_asked_for(
    llm: ScriptedLLM, seed: int
) -> None:
    # The pruned hybrid search with runs, uses, expiry, filters and the floor: the top k is
    # the first k of the top of everything, and under_floor agrees with the unfloored top k.
    rng = random.Random(seed)
    memory = await varied_memory(rng, embedder=LiteLLMEmbedder("openai/hash-64", **llm.params))
    for _ in range(15):
        query = " ".join(rng.sample(WORDS, rng.randint(1, 6)))
        k = rng.choice([1, 3, 8])
        intent = rng.choice(["any", "what_failed", "what_worked"])
        floor = rng.choice([0.0, 0.15, 0.3])
        outcome = rng.choice([None, {"failure", "abandoned"}])
        options: dict[str, Any] = {"intent": intent, "outcome": outcome}
        everything = await memory.explain(query, 1000, min_relevance=floor, **options)
        assert everything.by == "hybrid"
        got = await memory.explain(query, k, min_relevance=floor, **options)
        assert [(s.episode.id, s.score) for s in got] == [
            (s.episode.id, s.score) for s in list(everything)[:k]
        ], (query, intent, floor)


@pytest.mark.anyio
@pytest.mark.parametrize("seed", range(4))
async def test_under_the_floor_is_the_unfloored_top_k_below_it(seed: int) -> None:
    # With uses, expiry and filters (no runs: a run's item may differ without the floor).
    rng = random.Random(100 + seed)
    memory = await varied_memory(rng, runs=False)
    for _ in range(30):
        query = " ".join(rng.sample(WORDS, rng.randint(1, 6)))
        k = rng.choice([1, 3, 8])
        options: dict[str, Any] = {
            "intent": rng.choice(["any", "what_failed", "what_worked"]),
            "outcome": rng.choice([None, {"failure", "abandoned"}]),
        }
        floor = rng.choice([0.1, 0.15, 0.3, 0.5])
        unfloored = await memory.explain(query, k, min_relevance=0, **options)
        floored = await memory.explain(query, k, min_relevance=floor, **options)
        assert [(s.episode.id, s.score) for s in floored.under_floor] == [
            (s.episode.id, s.score) for s in unfloored if s.relevance < floor
        ], (query, floor, options)
