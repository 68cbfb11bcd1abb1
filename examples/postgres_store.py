"""Keep the log in PostgreSQL, written by several agent processes at once. No API key.

Needs a PostgreSQL server and the extra: ``pip install 'deepcrew-episodic[postgres]'``. The
server is named by ``DATABASE_URL`` (a ``postgresql://`` URL or a libpq ``key=value`` string);
the tables go in a schema of their own, ``episodic_example``, created on first use.

Four processes record 50 episodes each, all concurrently, into one namespace; then a reader in
a fresh process recalls the relevant ones from the store's index (it never reads the whole log)
and counts them (none lost). The namespace is new on every run and deleted at the end.

DATABASE_URL=postgresql://app:secret@localhost/agents python examples/postgres_store.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import anyio

from deepcrew_episodic import Episode, EpisodicMemory
from deepcrew_episodic.providers import PostgresMemoryProvider

SCHEMA = "episodic_example"
PROCESSES, EACH = 4, 50
TOPICS = [
    ("Refund a double charge on order {n}", "Refunded the duplicate charge.", "billing"),
    ("Reset the 2FA of account {n}", "Reset 2FA after an identity check.", "accounts"),
    ("Deploy build {n} to staging", "Deployed; smoke tests green.", "devops"),
]


def provider(dsn: str) -> PostgresMemoryProvider:
    # A few connections per process: each record holds one for two round trips.
    return PostgresMemoryProvider(dsn, schema=SCHEMA, max_connections=4, timeout=10)


async def write(dsn: str, namespace: str, worker: int) -> None:
    """One agent process: its records run concurrently, like parallel agent runs."""
    async with provider(dsn) as backend:
        memory = EpisodicMemory(backend, namespace=namespace, max_episodes=10_000)

        async def one(i: int) -> None:
            query, response, tag = TOPICS[i % len(TOPICS)]
            n = worker * 1000 + i
            await memory.record(
                Episode(query=query.format(n=n), response=response, outcome="success", tags=[tag])
            )

        async with anyio.create_task_group() as tg:
            for i in range(EACH):
                tg.start_soon(one, i)


async def read(dsn: str, namespace: str) -> None:
    async with provider(dsn) as backend:
        memory = EpisodicMemory(backend, namespace=namespace, max_episodes=10_000)
        recalled = await memory.recall("A customer was charged twice, how do I refund?", top_k=2)
        print(memory.render(recalled))
        stats = await memory.stats()
        print(f"\n{stats.total} episodes from {PROCESSES} processes ({PROCESSES * EACH} recorded)")
        await memory.clear()  # the example's namespace only; the schema stays


def main() -> None:
    dsn = os.environ.get("DATABASE_URL")
    if not dsn:
        raise SystemExit(
            "set DATABASE_URL to a PostgreSQL server, e.g. postgresql://localhost/agents"
        )
    namespace = f"example-{uuid.uuid4().hex[:8]}"
    writers = [
        subprocess.Popen([sys.executable, __file__, "--write", namespace, str(w)])
        for w in range(PROCESSES)
    ]
    for writer in writers:
        if writer.wait() != 0:
            raise SystemExit(f"a writer process failed with exit code {writer.returncode}")
    anyio.run(read, dsn, namespace)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        anyio.run(write, os.environ["DATABASE_URL"], sys.argv[2], int(sys.argv[3]))
    else:
        main()
