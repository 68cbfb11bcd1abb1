"""Keep the log in SQLite, written by several agent processes at once. No server, no API key.

Four processes record 50 episodes each, all concurrently, into one database file; then a
reader loads them (none lost) and recalls the relevant ones.

python examples/sqlite_store.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import anyio

from deepcrew_episodic import Episode, EpisodicMemory
from deepcrew_episodic.providers import SQLiteMemoryProvider

PROCESSES, EACH = 4, 50
TOPICS = [
    ("Refund a double charge on order {n}", "Refunded the duplicate charge.", "billing"),
    ("Reset the 2FA of account {n}", "Reset 2FA after an identity check.", "accounts"),
    ("Deploy build {n} to staging", "Deployed; smoke tests green.", "devops"),
]


async def write(path: str, worker: int) -> None:
    """One agent process: its records run concurrently, like parallel agent runs."""
    async with SQLiteMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend, namespace="support-bot", max_episodes=10_000)

        async def one(i: int) -> None:
            query, response, tag = TOPICS[i % len(TOPICS)]
            n = worker * 1000 + i
            await memory.record(
                Episode(query=query.format(n=n), response=response, outcome="success", tags=[tag])
            )

        async with anyio.create_task_group() as tg:
            for i in range(EACH):
                tg.start_soon(one, i)


async def read(path: str) -> None:
    async with SQLiteMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend, namespace="support-bot", max_episodes=10_000)
        episodes = await memory.load()
        print(f"{len(episodes)} episodes from {PROCESSES} processes ({PROCESSES * EACH} recorded)")
        recalled = await memory.recall("A customer was charged twice, how do I refund?", top_k=2)
        print(memory.render(recalled))


def main() -> None:
    path = str(Path(tempfile.mkdtemp()) / "episodes.db")
    writers = [
        subprocess.Popen([sys.executable, __file__, "--write", path, str(w)])
        for w in range(PROCESSES)
    ]
    for writer in writers:
        if writer.wait() != 0:
            raise SystemExit(f"a writer process failed with exit code {writer.returncode}")
    anyio.run(read, path)
    print(f"\nThe log lives in {path}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        anyio.run(write, sys.argv[2], int(sys.argv[3]))
    else:
        main()
