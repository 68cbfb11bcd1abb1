"""A separate OS process that works on a store (multi-process and crash tests).

usage:
  python _worker.py KIND TARGET NAMESPACE MAX_EPISODES COUNT LABEL [forever]
      record COUNT episodes concurrently (or forever, after printing "ready")
  python _worker.py claim KIND TARGET START_AT COUNT LABEL
      at time START_AT, try write_if({f"claim:{i}": None}, {...: LABEL}) for i in 0..COUNT-1;
      print the numbers this process won, one a line
  python _worker.py bump KIND TARGET START_AT COUNT
      at time START_AT, COUNT times: increment_and_write("episodic:bump:seq", ...) reading
      "episodic:bump:total" and writing it plus one (a lost update shows as a total below the number of bumps)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import anyio
from stores import Store

from deepcrew_episodic import Episode, EpisodicMemory


async def record() -> None:
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


async def claim() -> None:
    kind, target, start_at, count, label = sys.argv[2:7]
    async with Store(kind, target).open() as provider:
        await provider.retrieve("warm-up")  # connect before the start line
        await anyio.sleep(max(0.0, float(start_at) - time.time()))
        for i in range(int(count)):
            if await provider.write_if({f"claim:{i}": None}, {f"claim:{i}": label}):
                print(i, flush=True)


def plus_one(seq: int, values: Mapping[str, str | None]) -> tuple[dict[str, str], list[str]]:
    return {"episodic:bump:total": str(int(values["episodic:bump:total"] or 0) + 1)}, []


async def bump() -> None:
    kind, target, start_at, count = sys.argv[2:6]
    async with Store(kind, target).open() as provider:
        await provider.retrieve("warm-up")
        await anyio.sleep(max(0.0, float(start_at) - time.time()))
        for _ in range(int(count)):
            await provider.increment_and_write(
                "episodic:bump:seq", plus_one, read=["episodic:bump:total"]
            )
    print("done", flush=True)


if __name__ == "__main__":
    mode = {"claim": claim, "bump": bump}.get(sys.argv[1], record)
    anyio.run(mode)
