"""An agent that remembers: the second, related run recalls the first one.

python examples/agent_quickstart.py

With OPENAI_API_KEY set it calls openai/gpt-4o-mini; without, litellm's ``mock_response``
answers offline, so the example runs anywhere. Episodes go to a JSON file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import anyio

from deepcrew_episodic import Agent, EpisodicMemory, run_agent
from deepcrew_episodic.providers import FileMemoryProvider

OFFLINE = not os.environ.get("OPENAI_API_KEY")
if OFFLINE:  # litellm would otherwise try to download its model price list
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def answer(mock: str) -> dict[str, Any]:
    """The model parameters for one run: a canned answer offline, nothing extra online."""
    return {"mock_response": mock} if OFFLINE else {}


async def main() -> None:
    path = Path(tempfile.mkdtemp()) / "episodes.json"
    async with FileMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend, namespace="platform-bot")
        agent = Agent(
            name="assistant",
            model="openai/gpt-4o-mini",
            system_prompt="You are a concise platform engineer.",
            episodic_memory=memory,
        )
        print(f"model: {agent.model} ({'offline mock' if OFFLINE else 'live'})")

        agent.extra_params = answer(
            "Create a second key, move clients to it, then revoke the old key."
        )
        first = await run_agent(agent, [{"role": "user", "content": "How do I rotate an API key?"}])
        print(f"run 1: episodes_recalled={first.episodes_recalled}")
        print(f"run 1: recorded a {first.recorded[0].outcome!r} episode")

        agent.extra_params = answer("Yes, if both keys stay valid while clients switch over.")
        second = await run_agent(
            agent, [{"role": "user", "content": "Is API key rotation zero-downtime?"}]
        )
        print(f"run 2: episodes_recalled={second.episodes_recalled}")
        print("\nInjected before run 2:\n")
        print(memory.render(second.recalled))
        print(f"\n{len(await memory.load())} episodes in {path.name}")


if __name__ == "__main__":
    anyio.run(main)
