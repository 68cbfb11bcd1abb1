"""Recall by meaning on the probe sets, with a real model through litellm's real HTTP path.

all-MiniLM-L6-v2 (int8 ONNX, tests/embedding_models.py) is served by the scripted server;
``LiteLLMEmbedder`` reaches it as it would reach any OpenAI-compatible server. The floors sit a
little under what ``bench/recall_meaning.py`` measures (docs/benchmarks.md), so that a change
that makes the ranking worse fails here. "Ceiling": the same model's vectors ranked by cosine
alone, with no floor (what the vectors could find at best; it returns something for every
query, related or not).

- the first paraphrase probe (every content word differs from the target's): recall@3 within
  0.05 of the ceiling where keywords get 0, every unrelated query returns nothing, and the
  decoys of at least 11 of the 15 near misses stay out of the top 3;
- the held-out paraphrase probe (written blind; the meaning part's constants are calibrated on
  it, docs/benchmarks.md): recall@3 within 0.05 of the ceiling, at least 95 % of the unrelated
  queries return nothing, the decoys of at least 17 of the 22 near misses stay out of the top 3;
- the original probe: no regression (recall@3 and MRR >= 0.95, the floors of
  ``recall_probes.problems``: unrelated queries empty, expected firsts first).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from llm_server import ScriptedLLM
from recall_probes import (
    DEPTH,
    HELDOUT,
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


async def _memory(folder: Path, llm: ScriptedLLM | None) -> EpisodicMemory:
    embedder = None if llm is None else LiteLLMEmbedder("openai/minilm", **llm.params)
    memory = EpisodicMemory(InMemoryProvider(), max_episodes=1000, embedder=embedder)
    for _, episode in load_episodes(time.time(), folder):
        await memory.record(episode)
    return memory


async def _report(folder: Path, llm: ScriptedLLM | None) -> Report:
    memory = await _memory(folder, llm)

    async def recall(probe: Probe) -> list[str]:
        ranking = await memory.explain(probe.query, DEPTH, intent=probe.intent)
        assert ranking.by == ("keywords" if llm is None else "hybrid")
        return [scored.episode.id for scored in ranking]

    return await evaluate(recall, load_probes(folder))


async def _ceiling(folder: Path, llm: ScriptedLLM) -> float:
    """recall@3 of the same vectors ranked by cosine alone (reads the memory's vector index)."""
    memory = await _memory(folder, llm)
    await memory.explain("load the vectors")

    async def recall(probe: Probe) -> list[str]:
        vector, error = await memory._semantic.query_vector(probe.query)
        assert error is None, error
        seqs, sims = memory._semantic.vectors.similarities(vector)
        return [memory._held.index.episode(int(seqs[i])).id for i in np.argsort(-sims)[:DEPTH]]

    report = await evaluate(recall, [p for p in load_probes(folder) if p.labelled])
    return report.recall_at_3


async def test_paraphrases_are_recalled_and_unrelated_queries_return_nothing(
    llm: ScriptedLLM,
) -> None:
    keywords = await _report(PARAPHRASES, None)
    hybrid = await _report(PARAPHRASES, llm)
    ceiling = await _ceiling(PARAPHRASES, llm)
    assert keywords.recall_at_3 < 0.05
    assert hybrid.recall_at_3 >= 0.74
    assert hybrid.recall_at_3 >= ceiling - 0.05
    assert hybrid.unrelated >= 20
    assert hybrid.unrelated_recalled == {}
    assert hybrid.decoy_queries == 15
    assert len(hybrid.decoys_in_top3) <= 3


async def test_the_held_out_paraphrases_generalise(llm: ScriptedLLM) -> None:
    keywords = await _report(HELDOUT, None)
    hybrid = await _report(HELDOUT, llm)
    ceiling = await _ceiling(HELDOUT, llm)
    assert keywords.recall_at_3 < 0.05
    assert hybrid.recall_at_3 >= 0.79
    assert hybrid.recall_at_3 >= ceiling - 0.05
    assert hybrid.unrelated >= 20
    assert len(hybrid.unrelated_recalled) <= hybrid.unrelated * 0.05
    assert hybrid.decoy_queries == 22
    assert len(hybrid.decoys_in_top3) <= 5


async def test_the_original_probe_does_not_regress(llm: ScriptedLLM) -> None:
    hybrid = await _report(PROBES, llm)
    assert problems(hybrid) == []
    assert hybrid.recall_at_3 >= 0.95
    assert hybrid.mrr >= 0.95
