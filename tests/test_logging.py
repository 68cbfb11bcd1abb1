"""The library logs to ``deepcrew_episodic`` and prints nothing unless the application asks."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from deepcrew_episodic import Episode, EpisodicMemory
from deepcrew_episodic.providers import MemoryProvider

pytestmark = pytest.mark.anyio
SECRET_TEXT = "the customer's card ends in 4242"


async def test_record_recall_forget_and_sweep_are_logged_without_episode_text(
    provider: MemoryProvider, caplog: pytest.LogCaptureFixture
) -> None:
    memory = EpisodicMemory(provider, namespace="logs")
    with caplog.at_level(logging.DEBUG, logger="deepcrew_episodic"):
        stored = await memory.record(Episode(query=f"refund order: {SECRET_TEXT}"))
        found = await memory.recall("refund order")
        await memory.forget(stored.id)
        await memory.sweep()
    messages = [r.getMessage() for r in caplog.records if r.name == "deepcrew_episodic"]
    recall = [m for m in messages if m.startswith("recall in 'logs'")]
    assert len(recall) == 1
    assert found[0].id in recall[0]
    assert " ms" in recall[0]
    assert any(m.startswith("forget in 'logs'") for m in messages)
    assert any(m.startswith("sweep of 'logs'") for m in messages)
    assert any(
        r.getMessage() == "episode recorded" and getattr(r, "id", None) == stored.id
        for r in caplog.records
    )
    assert not any(SECRET_TEXT in m for m in messages)


def test_nothing_is_printed_unless_logging_is_configured() -> None:
    code = (
        "import anyio, json\n"
        "from deepcrew_episodic import EpisodicMemory\n"
        "from deepcrew_episodic.providers import InMemoryProvider\n"
        "async def main():\n"
        "    p = InMemoryProvider()\n"
        "    await p.write({'episodic:x:__seq__': '1', 'episodic:x:e:1': '{broken'})\n"
        "    m = EpisodicMemory(p, namespace='x')\n"
        "    await m.load()\n"
        "    assert m.counters.corrupt_records == 1\n"
        "anyio.run(main)\n"
    )
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""  # a warning was logged, and not printed
    loud = subprocess.run(
        [sys.executable, "-c", "import logging; logging.basicConfig()\n" + code],
        capture_output=True,
        text=True,
    )
    assert "skipping undecodable record" in loud.stderr
