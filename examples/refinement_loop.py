"""A refinement loop: a verifier grades each iteration, and each iteration is one episode.

python examples/refinement_loop.py

The verifier is a plain async function (an ``LLMVerifier`` works the same way). Its feedback
goes into the next iteration's prompt; the loop stops once the score reaches ``target_score``.

With OPENAI_API_KEY set the agent uses openai/gpt-4o-mini. Without, a small offline "model"
(a litellm ``CustomLLM``) writes the drafts: it adds whatever the reviewer's feedback in its
prompt asks for, which is enough to watch the loop converge.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import anyio

from deepcrew_episodic import (
    Agent,
    AgentResult,
    EpisodicMemory,
    EventType,
    LoopConfig,
    StreamPolicy,
    Verdict,
    stream_agent,
)
from deepcrew_episodic.providers import InMemoryProvider

OFFLINE = not os.environ.get("OPENAI_API_KEY")
if OFFLINE:  # litellm would otherwise try to download its model price list
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

QUERY = "Write a short incident summary for yesterday's checkout outage."
# part of a good summary -> (what shows it is there, the sentence the offline drafter adds)
REQUIRED = {
    "timeline": ("14:02", "Checkout failed from 14:02 to 14:40 UTC."),
    "root cause": ("certificate", "The cause was an expired TLS certificate on the gateway."),
    "follow-up": ("monitored", "Certificate expiry is now monitored."),
}


async def reviewer(query: str, result: AgentResult) -> Verdict:
    """Score = share of the required parts present; feedback asks for the first missing one."""
    text = result.text.lower()
    missing = [part for part, (marker, _) in REQUIRED.items() if marker not in text]
    score = round(1 - len(missing) / len(REQUIRED), 2)
    return Verdict(score, f"Add the {missing[0]}." if missing else "")


def offline_model() -> str:
    """Register the offline drafter with litellm and return its model name."""
    import litellm
    from litellm.llms.custom_llm import CustomLLM

    class Drafter(CustomLLM):
        async def astreaming(  # type: ignore[override]
            self, model: str, messages: list[dict[str, Any]], *args: Any, **kwargs: Any
        ) -> AsyncIterator[dict[str, Any]]:
            asked = " ".join(str(m.get("content")) for m in messages if m["role"] == "user")
            parts = ["Checkout was down yesterday afternoon."]
            parts += [
                line for part, (_, line) in REQUIRED.items() if f"the {part}" in asked.lower()
            ]
            for word in " ".join(parts).split(" "):
                yield {"text": word + " ", "is_finished": False, "finish_reason": "", "usage": None}
            usage = {
                "prompt_tokens": len(asked.split()),
                "completion_tokens": 20,
                "total_tokens": 0,
            }
            yield {"text": "", "is_finished": True, "finish_reason": "stop", "usage": usage}

    litellm.custom_provider_map = [{"provider": "offline", "custom_handler": Drafter()}]
    return "offline/drafter"


async def main() -> None:
    memory = EpisodicMemory(InMemoryProvider(), namespace="incidents")
    agent = Agent(
        name="writer",
        model=offline_model() if OFFLINE else "openai/gpt-4o-mini",
        episodic_memory=memory,
        loop_config=LoopConfig(max_iterations=4, verifier=reviewer, target_score=0.9),
    )
    stream = stream_agent(
        agent, [{"role": "user", "content": QUERY}], policy=StreamPolicy.verbose()
    )
    async for event in stream:
        if event.event == EventType.VERIFIER_SCORED:
            print(
                f"iteration {event.data['iteration'] + 1}: score {event.data['score']:.2f} "
                f"-> {event.data['outcome']}; feedback: {event.data['feedback'] or '-'}"
            )
        elif event.event == EventType.EPISODE_RECORDED:
            print(f"  recorded episode {event.data['id'][:8]} ({event.data['outcome']})")
    result = stream.result
    assert result is not None
    print(f"\nloop_iterations={result.loop_iterations}")
    print(f"final answer: {result.text.strip()}")
    print("\nEpisodes recorded (one per iteration, all under the original query):")
    for episode in await memory.load():
        print(f"- {episode.outcome:<8} score={episode.score:.2f} query={episode.query!r}")


if __name__ == "__main__":
    anyio.run(main)
