"""A pydantic-ai agent with an episodic memory, in one capability.

python examples/pydantic_ai_agent.py   (needs pip install 'deepcrew-episodic[pydantic-ai]')

Offline: pydantic-ai's own ``FunctionModel`` stands in for the model (no API key, no network).
It behaves like a forgetful model: without past experience it first answers without naming the
new key, and the agent's output validator sends it back; with the first run's episode in its
instructions it gets it right the first time. Swap in ``"openai:gpt-5.2"`` (or any model) and
nothing else changes.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from deepcrew_episodic import EpisodicMemory
from deepcrew_episodic.integrations.pydantic_ai import EpisodicMemoryCapability
from deepcrew_episodic.providers import SQLiteMemoryProvider

BLOCK = "## Relevant past experience"
instructions_seen: list[str] = []


def forgetful_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Looks the key up, then answers; names the new key only when told to or reminded."""
    instructions_seen.append(info.instructions or "")
    last = messages[-1]
    parts = last.parts if isinstance(last, ModelRequest) else []
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("lookup_key", {"account": "billing"})])
    remembers = BLOCK in (info.instructions or "")
    told = not any(isinstance(p, ToolReturnPart) for p in parts)  # a retry, not a tool result
    if remembers or told:
        answer = "Create key-2, move every client to it, then revoke key-1."
    else:
        answer = "Create a new key and revoke the old one."
    return ModelResponse(parts=[TextPart(answer)])


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with SQLiteMemoryProvider(Path(tmp) / "episodes.db") as backend:
            memory = EpisodicMemory(backend, namespace="support")
            episodic = EpisodicMemoryCapability(memory)
            agent = Agent(
                FunctionModel(forgetful_model),
                capabilities=[episodic],
                instructions="Answer in one sentence.",
                name="support",
            )

            @agent.tool_plain
            def lookup_key(account: str) -> str:
                """The API keys of an account."""
                return f"{account}: key-1 (active)"

            @agent.output_validator
            def names_the_new_key(output: str) -> str:
                # The verdict memory records: an answer this accepts is a verified success.
                if "key-2" not in output:
                    raise ModelRetry("Name the new key (key-2) so the user can find it.")
                return output

            questions = ["How do I rotate the billing API key?", "Rotate the billing key again"]
            runs = []
            for n, question in enumerate(questions, 1):
                instructions_seen.clear()
                result = await agent.run(question)
                run = episodic.episodes_of(result)
                runs.append(run)
                print(f"run {n}: recalled {len(run.recalled)}, recorded {run.outcome}")
                print(f"  model calls: {len(instructions_seen)}; answer: {result.output}")

            print("Instructions the model saw in run 2:")
            print(instructions_seen[0])

            # Later, the user writes back that a client broke: grade run 2 with what you learnt.
            second = runs[1].recorded_id
            assert second is not None
            await memory.grade(
                second, outcome="failure", source="user", note="a client still used key-1"
            )
            graded = {e.id: e.outcome for e in await memory.load()}
            print(f"graded: {graded[second]}")


if __name__ == "__main__":
    asyncio.run(main())
