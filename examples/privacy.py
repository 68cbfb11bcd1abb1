"""Retention, forgetting and redaction, offline:

- a secret in an episode is redacted before anything is stored;
- an episode past its ``forget_after`` (or older than ``max_age``) is never recalled;
- ``sweep()`` and ``forget(...)`` delete payloads from the store for real.

    python examples/privacy.py
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio

from deepcrew_episodic import Episode, EpisodicMemory, Redactor
from deepcrew_episodic.providers import FileMemoryProvider


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


async def main() -> None:
    path = Path(tempfile.mkdtemp()) / "episodes.json"
    redactor = Redactor(extra={"customer-id": r"\bCUST-\d{5}\b"})
    async with FileMemoryProvider(path) as backend:
        memory = EpisodicMemory(
            backend, namespace="support", max_age=timedelta(days=90), redact=redactor
        )
        stored = await memory.record(
            Episode(
                query="Connect the billing job to postgres://billing:hunter2@db:5432/main",
                response="Connected for CUST-00417 with key AKIAIOSFODNN7EXAMPLE",
                outcome="success",
                tags=["billing"],
            )
        )
        print("stored query:   ", stored.query)
        print("stored response:", stored.response)

        await memory.record(
            Episode(
                query="Billing export for the Acme account",
                response="Exported",
                outcome="success",
                tags=["billing"],
                forget_after=iso(datetime.now(UTC) - timedelta(minutes=1)),  # already expired
            )
        )
        await memory.record(
            Episode(
                query="Billing dispute from last year",
                response="Refunded",
                timestamp=iso(datetime.now(UTC) - timedelta(days=200)),  # older than max_age
                tags=["billing"],
            )
        )
        recalled = await memory.recall("billing", top_k=10)
        print(f"recall 'billing': {len(recalled)} episode(s) -> {[e.query for e in recalled]}")

        print("in the file before sweep:", "Acme" in path.read_text())
        print(f"sweep deleted {await memory.sweep()} expired episode(s)")
        print("in the file after sweep: ", "Acme" in path.read_text())

        print(f"forget(containing='postgres') deleted {await memory.forget(containing='postgres')}")
        print(f"episodes left: {len(await memory.load())}")
        print("secret ever written to disk:", "hunter2" in path.read_text())


if __name__ == "__main__":
    anyio.run(main)
