"""A worker process of the conformance suite: opens the store it is given and works on it.

usage: python -m deepcrew_episodic.testing._worker STORE MODE ARGS...
  STORE is the pickled store, in hex (see ``_store.worker``).
  record NAMESPACE MAX_EPISODES COUNT LABEL [forever]
      record COUNT episodes concurrently (or forever, after printing "ready")
  claim COUNT LABEL ORDER
      print "ready" and wait for a line on stdin, then try write_if({f"claim:{i}": None},
      {...: LABEL}) for each i in 0..COUNT-1 (ORDER: "up" or "down"); print the numbers this
      process won, one a line
  bump COUNT
      print "ready" and wait for a line on stdin, then COUNT times:
      increment_and_write("episodic:bump:seq", ...) reading "episodic:bump:total" and writing
      it plus one
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Mapping

import anyio
import anyio.to_thread

from .. import Episode, EpisodicMemory
from ..providers import MemoryProvider
from ._store import StoreSpec


async def record(store: StoreSpec, args: list[str]) -> None:
    namespace, max_episodes, count, label = args[:4]
    forever = len(args) > 4
    async with store.open() as provider:
        memory = EpisodicMemory(provider, namespace=namespace, max_episodes=int(max_episodes))

        # A crash test writes large records (a kill is likelier to land mid-write); a count
        # test small ones (a file store rewrites and rereads itself whole on every record).
        padding, answer = ("padding " * 40, "x" * 300) if forever else ("", "ok")

        async def one(i: int) -> None:
            await memory.record(
                Episode(
                    query=f"writer {label} task {i} {padding}",
                    response=answer,
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


async def start_line(provider: MemoryProvider) -> None:
    """Connect, say so, and wait for the word to start: every worker starts at once."""
    await provider.retrieve_many(["warm-up"])
    print("ready", flush=True)
    await anyio.to_thread.run_sync(sys.stdin.readline)


async def claim(store: StoreSpec, args: list[str]) -> None:
    count, label, order = args[:3]
    numbers = range(int(count))
    async with store.open() as provider:
        await start_line(provider)
        for i in reversed(numbers) if order == "down" else numbers:
            if await provider.write_if({f"claim:{i}": None}, {f"claim:{i}": label}):
                print(i, flush=True)


def plus_one(seq: int, values: Mapping[str, str | None]) -> tuple[dict[str, str], list[str]]:
    return {"episodic:bump:total": str(int(values["episodic:bump:total"] or 0) + 1)}, []


async def bump(store: StoreSpec, args: list[str]) -> None:
    (count,) = args[:1]
    async with store.open() as provider:
        await start_line(provider)
        for _ in range(int(count)):
            await provider.increment_and_write(
                "episodic:bump:seq", plus_one, read=["episodic:bump:total"]
            )
    print("done", flush=True)


def main() -> None:
    store: StoreSpec = pickle.loads(bytes.fromhex(sys.argv[1]))
    mode = {"record": record, "claim": claim, "bump": bump}[sys.argv[2]]
    anyio.run(mode, store, sys.argv[3:])


if __name__ == "__main__":
    main()
