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


KEY = "sk-proj-" + "Zq9" * 16  # a shape the default redactor knows


@pytest.mark.parametrize(
    ("key", "record"),
    [
        ("e:1", {"query": "q", "id": "a1", "outcome": f"x {KEY}"}),
        ("e:1", {"query": "q", "id": "a1", "timestamp": f"x {KEY}"}),
        ("e:1", {"query": "q", "id": "a1", "forget_after": f"x {KEY}"}),
        ("e:1", {"query": "q", "id": "a1", "outcome": f"x {KEY} " + "y" * 100_000}),
        ("g:1", {"episode": "a0", "outcome": f"x {KEY}"}),
        ("g:1", {"episode": "a0", "outcome": "success", "score": f"x {KEY}"}),
    ],
)
async def test_a_stored_value_quoted_in_a_warning_is_redacted_and_short(
    provider: MemoryProvider, caplog: pytest.LogCaptureFixture, key: str, record: dict[str, str]
) -> None:
    """A record another tool garbled is skipped or repaired with a warning that quotes the bad
    value: redacted, then cut (the value may hold a secret, or be megabytes long)."""
    import json

    writer = EpisodicMemory(provider, namespace="logs")
    await writer.record(Episode(query="kept", id="a0"))
    await writer.grade("a0", outcome="success")
    prefix = "episodic:logs:"
    counter = "__seq__" if key.startswith("e:") else "__grades__"
    number = (await provider.retrieve_many([prefix + counter]))[0]
    slot = f"{key[:2]}{int(number or 0) + 1}"
    await provider.write({prefix + slot: json.dumps(record), prefix + counter: slot[2:]})
    with caplog.at_level(logging.DEBUG, logger="deepcrew_episodic"):
        memory = EpisodicMemory(provider, namespace="logs")
        assert [e.id for e in await memory.load()][:1] == ["a0"]
    quoted = [r.getMessage() for r in caplog.records if "x " in r.getMessage()]
    assert quoted, [r.getMessage() for r in caplog.records]
    for message in quoted:
        assert "Zq9Zq9" not in message
        assert len(message) < 1000
