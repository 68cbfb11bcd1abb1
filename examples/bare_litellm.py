"""Episodic memory in your own agent loop: EpisodicHook around plain ``litellm.acompletion``.

python examples/bare_litellm.py

No Agent, no runner: ``before_run`` recalls and returns the messages with the block inserted,
``after_run`` records the episode, ``failed`` records a crashed run. Offline (no
OPENAI_API_KEY) litellm's ``mock_response`` answers.
"""

from __future__ import annotations

import os
from typing import Any

import anyio

from deepcrew_episodic import EpisodicHook, EpisodicMemory, StreamEvent
from deepcrew_episodic.providers import InMemoryProvider

OFFLINE = not os.environ.get("OPENAI_API_KEY")
if OFFLINE:  # litellm would otherwise try to download its model price list
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
MODEL = "openai/gpt-4o-mini"


def show(event: StreamEvent) -> None:
    print(f"  [event] {event.event.value} {event.data}")


async def ask(hook: EpisodicHook, question: str, mock: str) -> str:
    """One run of a minimal agent: recall, call the model, record."""
    import litellm

    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a terse SRE assistant."},
        {"role": "user", "content": question},
    ]
    recalled = await hook.before_run(messages)
    print(f"  sending {len(recalled.messages)} messages, {recalled.count} episode(s) recalled")
    try:
        response = await litellm.acompletion(
            model=MODEL, messages=recalled.messages, **({"mock_response": mock} if OFFLINE else {})
        )
    except Exception as exc:
        await hook.failed(recalled.query, exc)  # a crashed run is worth remembering too
        raise
    text = str(response.choices[0].message.content or "")
    # Grade however you like: a test result, a user's thumbs up, a verifier score.
    await hook.after_run(recalled.query, text, outcome="success", score=0.9)
    return text


async def main() -> None:
    memory = EpisodicMemory(InMemoryProvider(), namespace="sre")
    hook = EpisodicHook(memory, agent_id="sre-bot", on_event=show)

    print("run 1: How do I drain a Kubernetes node safely?")
    await ask(
        hook,
        "How do I drain a Kubernetes node safely?",
        "Cordon it, then kubectl drain --ignore-daemonsets; check PodDisruptionBudgets first.",
    )

    print("\nrun 2: The Kubernetes node drain is stuck, what now?")
    answer = await ask(
        hook,
        "The Kubernetes node drain is stuck, what now?",
        "A PodDisruptionBudget is probably blocking eviction; scale the deployment up.",
    )
    print(f"  answer: {answer}")

    recalled = await hook.before_run([{"role": "user", "content": "drain a node"}])
    print("\nThe block a third run would get:\n")
    print(recalled.block)


if __name__ == "__main__":
    anyio.run(main)
