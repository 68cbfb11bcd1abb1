"""A separate OS process that records episodes into a store (multi-process and crash tests).

usage: python _worker.py KIND TARGET NAMESPACE MAX_EPISODES COUNT LABEL [forever]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import anyio
from stores import Store

from deepcrew_episodic import Episode, EpisodicMemory


async def main() -> None:
    kind, target, namespace, max_episodes, count, label = sys.argv[1:7]
    forever = len(sys.argv) > 7
    async with Store(kind, target).open() as provider:
        memory = EpisodicMemory(provider, namespace=namespace, max_episodes=int(max_episodes))

        async def one(i: int) -> None:
            await memory.record(
                Episode(
                    query=f"writer {label} task {i} " + "padding " * 40,
                    response="x" * 300,
                    outcome="success",
                    tags=[label],
                )
            )

        if forever:
            i = 0
            print("ready", flush=True)
            while True:
                await one(i)
                i += 1
        async with anyio.create_task_group() as tg:
            for i in range(int(count)):
                tg.start_soon(one, i)
    print("done", flush=True)


if __name__ == "__main__":
    anyio.run(main)
