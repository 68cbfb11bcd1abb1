"""Stream a run's events, episode events included (StreamPolicy.verbose()).

python examples/streaming.py

Offline (no OPENAI_API_KEY) litellm's ``mock_response`` answers. One past episode is seeded so
the run has something to recall; the run itself is recorded at the end.
"""

from __future__ import annotations

import os

import anyio

from deepcrew_episodic import (
    Agent,
    Episode,
    EpisodicMemory,
    EventType,
    StreamPolicy,
    stream_agent,
)
from deepcrew_episodic.providers import InMemoryProvider

OFFLINE = not os.environ.get("OPENAI_API_KEY")
if OFFLINE:  # litellm would otherwise try to download its model price list
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

QUESTION = [
    {"role": "user", "content": "Our nightly backup job failed again. What should I check?"}
]


async def main() -> None:
    memory = EpisodicMemory(InMemoryProvider(), namespace="ops")
    await memory.record(
        Episode(
            query="Why did the nightly backup job fail?",
            response="The backup volume was full; pruned old snapshots.",
            outcome="success",
            score=0.9,
            reflection="Check free space on the backup volume first.",
        )
    )
    agent = Agent(
        name="ops-bot",
        model="openai/gpt-4o-mini",
        episodic_memory=memory,
        extra_params={"mock_response": "Check the backup volume's free space first."}
        if OFFLINE
        else {},
    )

    print("== verbose ==")
    stream = stream_agent(agent, QUESTION, policy=StreamPolicy.verbose())
    async for event in stream:
        if event.event == EventType.TEXT_DELTA:
            continue  # the text is shown whole in DONE
        print(f"{event.event.value:<18} {event.data}")
    assert stream.result is not None
    print(f"result: episodes_recalled={stream.result.episodes_recalled}")

    print("\n== standard (no episode events) ==")
    kinds: list[str] = []
    async for event in stream_agent(agent, QUESTION, policy=StreamPolicy.standard()):
        if not kinds or kinds[-1] != event.event.value:  # one line per run of deltas
            kinds.append(event.event.value)
    print(" -> ".join(kinds))

    print("\n== one event as Server-Sent Events ==")
    async for event in stream_agent(agent, QUESTION, policy=StreamPolicy.chat()):
        if event.event == EventType.DONE:
            print(event.to_sse(), end="")


if __name__ == "__main__":
    anyio.run(main)
