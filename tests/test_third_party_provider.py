"""A provider written outside the library (examples/third_party_provider.py, on the standard
library's sqlite3) passes the shipped conformance suite: the few lines below are all a third
party writes."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))

from third_party_provider import Sqlite3Provider

from deepcrew_episodic.providers import InMemoryProvider
from deepcrew_episodic.testing import ProviderConformance, Store


def write_raw(target: str, key: bytes, value: bytes) -> None:
    """Bytes that are not UTF-8, as another program could leave them in the table."""
    conn = sqlite3.connect(target)
    with conn:
        conn.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, value))
    conn.close()


class TestSqlite3Provider(ProviderConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Store:
        return Store(Sqlite3Provider, str(tmp_path / "episodes.db"), raw_writer=write_raw)


def test_the_example_runs_and_keeps_the_newest_episodes() -> None:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    example = Path(__file__).parent.parent / "examples" / "third_party_provider.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "3 episodes kept (a ring of 3, 4 recorded)"
    assert lines[1] == "recalled: Deploy build 42 to staging -> Deployed after a migration."
    assert lines[2] == "recalled: Deploy build 41 to staging -> Deployed; smoke tests green."
    assert lines[3] == (
        "keys: ['episodic:support-bot:e:2', 'episodic:support-bot:e:3', 'episodic:support-bot:e:4']"
    )


class _IgnoresFresh(InMemoryProvider):
    """A provider written against the contract before ``fresh``: its own increment_and_write
    reads the counter and *read*, never the record the new number names."""

    async def increment_and_write(  # type: ignore[override]
        self,
        key: str,
        then: Any,
        *,
        initial: int = 0,
        repair: int | None = None,
        read: Sequence[str] = (),
        **ignored: Any,
    ) -> int:
        wanted = [key, *read]
        current = dict(zip(wanted, await self.retrieve_many(wanted), strict=True))
        value = int(current[key] or initial) + 1
        items, delete = then(value, {k: current[k] for k in read})
        await self.write({**items, key: str(value)}, delete)
        return value


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_provider_that_lets_a_counter_overwrite_a_record_fails_the_kit(
    anyio_backend: str,
) -> None:
    kit = ProviderConformance()
    # (A memory's first append moves a counter found behind the records past them before it
    # writes, so the episode-log tests pass even here: the counter test is the one that
    # catches a provider which writes over a record its new number names.)
    with pytest.raises((AssertionError, KeyError)):
        await kit.test_increment_and_write_reads_the_keys_the_new_value_names(_IgnoresFresh())
    # the same tests pass on a provider that keeps the contract
    await kit.test_no_episode_counter_state_overwrites_or_hides_an_episode(
        InMemoryProvider(), "behind"
    )
    await kit.test_increment_and_write_reads_the_keys_the_new_value_names(InMemoryProvider())
