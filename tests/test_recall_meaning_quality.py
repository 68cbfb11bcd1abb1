"""Recall by meaning on both probe sets, with a real model through litellm's real HTTP path.

all-MiniLM-L6-v2 (int8 ONNX, tests/embedding_models.py) is served by the scripted server;
``LiteLLMEmbedder`` reaches it as it would reach any OpenAI-compatible server. The floors sit a
little under what ``bench/recall_meaning.py`` measures (docs/benchmarks.md), so that a change
that makes the ranking worse fails here:

- paraphrases (every content word differs from the target's): recall@3 >= 0.72 where keywords
  get 0, every unrelated query returns nothing, and the decoys of at least 11 of the 15 near
  misses stay out of the top 3 (keywords keep 1 out);
- the original probe: no regression (recall@3 and MRR >= 0.95, the floors of
  ``recall_probes.problems``: unrelated queries empty, expected firsts first).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from llm_server import ScriptedLLM
from recall_probes import (
    DEPTH,
    PARAPHRASES,
    PROBES,
    Probe,
    Report,
    evaluate,
    load_episodes,
    load_probes,
    problems,
)

from deepcrew_episodic import EpisodicMemory, LiteLLMEmbedder
from deepcrew_episodic.providers import InMemoryProvider

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.xdist_group("embedding-models")]


async def _report(folder: Path, llm: ScriptedLLM | None) -> Report:
    embedder = None if llm is None else LiteLLMEmbedder("openai/minilm", **llm.params)
    memory = EpisodicMemory(InMemoryProvider(), max_episodes=1000, embedder=embedder)
    for _, episode in load_episodes(time.time(), folder):
        await memory.record(episode)

    async def recall(probe: Probe) -> list[str]:
        ranking = await memory.explain(probe.query, DEPTH, intent=probe.intent)
        assert ranking.by == ("keywords" if llm is None else "hybrid")
        return [scored.episode.id for scored in ranking]

    return await evaluate(recall, load_probes(folder))


async def test_paraphrases_are_recalled_and_unrelated_queries_return_nothing(
    llm: ScriptedLLM,
) -> None:
    keywords = await _report(PARAPHRASES, None)
    hybrid = await _report(PARAPHRASES, llm)
    assert keywords.recall_at_3 < 0.05
    assert hybrid.recall_at_3 >= 0.72
    assert hybrid.unrelated >= 20
    assert hybrid.unrelated_recalled == {}
    assert hybrid.decoy_queries == 15
    assert len(hybrid.decoys_in_top3) <= 4
    assert len(keywords.decoys_in_top3) >= 12


async def test_the_original_probe_does_not_regress(llm: ScriptedLLM) -> None:
    hybrid = await _report(PROBES, llm)
    assert problems(hybrid) == []
    assert hybrid.recall_at_3 >= 0.95
    assert hybrid.mrr >= 0.95
