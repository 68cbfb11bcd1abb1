"""Record a few agent runs into a JSON file and recall the relevant ones. No API key, no server.

python examples/quickstart.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio

from deepcrew_episodic import Episode, EpisodicMemory
from deepcrew_episodic.providers import FileMemoryProvider


async def main() -> None:
    path = Path(tempfile.mkdtemp()) / "episodes.json"
    async with FileMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend, namespace="support-bot")

        await memory.record(
            Episode(
                query="How do I rotate the billing API key?",
                response="Created a second key, switched traffic, revoked the old one.",
                outcome="success",
                score=0.92,
                tools_used=["vault"],
                tags=["billing", "security"],
                reflection="Rotate keys with two live keys so clients never see a gap.",
            )
        )
        await memory.record(
            Episode(
                query="Refund order 1182 twice charged",
                response="Refunded the duplicate charge.",
                outcome="success",
                score=0.8,
                tools_used=["payments"],
                tags=["billing"],
            )
        )
        await memory.record(
            Episode(
                query="Deploy the search service to production",
                response="Deploy failed: the migration locked the users table.",
                outcome="failure",
                score=0.1,
                tags=["devops"],
                reflection="Run the users-table migration before the deploy, off-peak.",
            )
        )

        question = "Is rotating an API key zero-downtime?"
        recalled = await memory.recall(question)
        print(f"{len(recalled)} relevant past episode(s) for: {question}\n")
        print(memory.render(recalled))

        nothing = await memory.recall("What is the capital of France?")
        print(f"\nUnrelated question recalls {len(nothing)} episodes.")
        print(f"\nThe log lives in {path}")


if __name__ == "__main__":
    anyio.run(main)
