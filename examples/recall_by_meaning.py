"""Recall by meaning, offline: a question that shares no word with the episode it needs.

WordLlama (a small static embedding model whose weights ship in its wheel) runs in this
process as a plain sync callable; the memory runs it in a worker thread. Needs::

    pip install 'deepcrew-episodic[embeddings]' wordllama
    python examples/recall_by_meaning.py

With a hosted or served model, pass ``embedder=LiteLLMEmbedder("openai/text-embedding-3-small")``
(or ``"ollama/nomic-embed-text"`` with ``api_base=...``) instead: see docs/recall.md.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio

from deepcrew_episodic import Episode, EpisodicMemory
from deepcrew_episodic.providers import InMemoryProvider

EPISODES = [
    Episode(
        query="Customer was charged twice for order 51174",
        reflection="Refund the duplicate charge from the billing console; the bank cannot.",
        outcome="success",
        tags=["billing"],
    ),
    Episode(
        query="Password reset email never arrives",
        reflection="Our sender domain was on a blocklist; check the bounce log first.",
        outcome="success",
        tags=["email"],
    ),
    Episode(
        query="Monthly report export times out",
        reflection="Run exports over 10,000 rows as a background job.",
        outcome="failure",
        tags=["reports"],
    ),
    Episode(
        query="Change the shipping address on an open order",
        reflection="Possible until the parcel is packed; after that, contact the carrier.",
        outcome="success",
        tags=["orders"],
    ),
]

PARAPHRASE = "forgot my passcode and no mail came"  # no word in common with its episode
UNRELATED = "how long should I boil an egg?"


class WordLlamaEmbedder:
    """WordLlama as a plain sync callable: texts in, one vector per text out.

    ``name`` is what the log records as its embedder: keep it stable, and change it when the
    model or its dimension changes (the log then refuses the old vectors until ``reembed``).
    """

    name = "wordllama/l2_supercat-256"

    def __init__(self) -> None:
        try:
            import wordllama
        except ImportError:
            sys.exit("this example needs WordLlama: pip install wordllama")
        # The 256-dimension weights ship in the wheel: load them from there, never download.
        self.model = wordllama.WordLlama.load(
            cache_dir=Path(wordllama.__file__).parent, dim=256, disable_download=True
        )

    def __call__(self, texts: list[str]) -> Any:
        return self.model.embed(texts)  # numpy rows; the memory normalises and checks them


async def main() -> None:
    embedder = WordLlamaEmbedder()
    keywords = EpisodicMemory(InMemoryProvider(), namespace="support")
    hybrid = EpisodicMemory(InMemoryProvider(), namespace="support", embedder=embedder)
    for episode in EPISODES:
        await keywords.record(episode)
        await hybrid.record(episode)

    print(f"question: {PARAPHRASE!r}\n")
    found = await keywords.recall(PARAPHRASE)
    print(f"keywords only: {len(found)} episode(s)")

    ranking = await hybrid.explain(PARAPHRASE)
    print(f"keywords + meaning ({ranking.by}): {len(ranking)} episode(s)")
    for hit in ranking:
        print(f"  {hit.score:.3f} {hit.episode.query!r}")
        print(f"        {hit.why()}")
    print()
    print(hybrid.render(ranking))

    # An identifier means little to a model; its keyword part still finds the episode.
    exact = await hybrid.recall("order 51174", top_k=1)
    print(f"\n'order 51174' first: {[episode.query for episode in exact]}")

    nothing = await hybrid.recall(UNRELATED)
    print(f"unrelated {UNRELATED!r}: {len(nothing)} episode(s)")

    stats = await hybrid.stats()
    print(f"{stats.vectors} of {stats.total} episodes have a vector; embedder {stats.embedder}")


if __name__ == "__main__":
    anyio.run(main)
