"""Guarantees of the episode log that every provider must keep (part of the conformance suite:
parametrized over every provider kind through the ``store`` / ``provider`` fixtures).

- No call deletes an episode that a memory with a larger ring still shows; only ``shrink()``
  lowers the ring.
- An explicit episode id is stored at most once, whatever the concurrency.
- Namespaces accept any text deepcrew-ai accepts and stay isolated from each other.
- Corrupt index keys are rebuilt, an undecodable record is skipped, counted and can be forgotten.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from stores import Store

from deepcrew_episodic import (
    ConfigurationError,
    Episode,
    EpisodicMemory,
    InvalidEpisodeError,
)
from deepcrew_episodic.providers import MemoryProvider

pytestmark = pytest.mark.anyio
WORKER = str(Path(__file__).with_name("_worker.py"))


def ep(query: str, **fields: object) -> Episode:
    return Episode(query=query, response=fields.pop("response", "ok"), **fields)  # type: ignore[arg-type]


# --- the ring only shrinks when asked --------------------------------------------------------


async def test_a_smaller_ring_never_deletes_what_a_larger_ring_shows(
    provider: MemoryProvider,
) -> None:
    big = EpisodicMemory(provider, namespace="ring", max_episodes=80)
    small = EpisodicMemory(provider, namespace="ring", max_episodes=10)
    for i in range(50):
        await big.record(ep(f"big task {i}"))
    shown = await small.load()
    assert len(shown) == 10  # a memory shows its own ring's worth

    assert await small.forget([shown[0].id]) == 1
    assert len(await big.load()) == 49
    assert await small.sweep() == 0
    assert len(await big.load()) == 49
    # forget and sweep act on the whole log, not only on what the smaller memory shows
    assert await small.forget(containing="big task 3") == 11  # 3 and 30..39
    assert len(await big.load()) == 38
    for i in range(20):  # appends by the small ring evict by the log's ring, not its own
        await small.record(ep(f"small task {i}"))
    assert len(await big.load()) == 58
    assert len(await small.load()) == 10
    # a fresh memory of any size sees the same log
    assert len(await EpisodicMemory(provider, namespace="ring", max_episodes=1000).load()) == 58


async def test_shrink_is_the_one_way_to_lower_the_ring(provider: MemoryProvider) -> None:
    big = EpisodicMemory(provider, namespace="shrink", max_episodes=50)
    for i in range(30):
        await big.record(ep(f"task {i}"))
    other = EpisodicMemory(provider, namespace="shrink", max_episodes=5)
    assert await other.shrink(12) == 18
    assert other.max_episodes == 12
    assert [e.query for e in await big.load()] == [f"task {i}" for i in range(18, 30)]
    keys = [k for k in await provider.keys("episodic:shrink:e:")]
    assert len(keys) == 12
    # the ring stays at 12 for a smaller writer
    for i in range(5):
        await other.record(ep(f"more {i}"))
    assert len(await big.load()) == 12
    with pytest.raises(ConfigurationError):
        await other.shrink(0)


async def test_a_larger_ring_grows_the_log_for_every_writer(provider: MemoryProvider) -> None:
    small = EpisodicMemory(provider, namespace="grow", max_episodes=5)
    for i in range(8):
        await small.record(ep(f"a {i}"))
    big = EpisodicMemory(provider, namespace="grow", max_episodes=20)
    assert len(await big.load()) == 5  # what the small ring kept
    await big.record(ep("big"))
    for i in range(10):
        await small.record(ep(f"b {i}"))
    assert len(await big.load()) == 16  # 5 + 1 + 10: the small writer evicts by 20 now


@pytest.mark.slow
async def test_mixed_rings_from_many_processes_lose_nothing(store: Store) -> None:
    if not store.shared_across_processes:
        pytest.skip(f"{store.kind} is private to its process")
    async with store.open() as provider:
        await EpisodicMemory(provider, namespace="mixed", max_episodes=2000).record(ep("first"))
    rings = [2000, 7, 2000, 30]
    children = [
        subprocess.Popen(
            [sys.executable, WORKER, store.kind, store.target, "mixed", str(r), "60", f"w{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i, r in enumerate(rings)
    ]
    for child in children:
        _, err = await anyio.to_thread.run_sync(child.communicate)
        assert child.returncode == 0, err.decode()[-2000:]
    async with store.open() as provider:
        episodes = await EpisodicMemory(provider, namespace="mixed", max_episodes=2000).load()
    assert len(episodes) == 1 + 60 * len(rings)


# --- explicit ids are unique -----------------------------------------------------------------


async def test_an_explicit_id_is_stored_once_under_concurrency(provider: MemoryProvider) -> None:
    outcomes: list[str] = []

    async def one(i: int) -> None:
        memory = EpisodicMemory(provider, namespace="ids")  # each its own cache, like processes
        try:
            await memory.record(ep(f"attempt {i}", id="same"))
            outcomes.append("stored")
        except InvalidEpisodeError:
            outcomes.append("refused")

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(one, i)
    assert sorted(outcomes) == ["refused"] * 7 + ["stored"]
    stored = await EpisodicMemory(provider, namespace="ids").load()
    assert [e.id for e in stored] == ["same"]


async def test_an_explicit_id_can_be_recorded_again_once_forgotten(
    provider: MemoryProvider,
) -> None:
    memory = EpisodicMemory(provider, namespace="ids2", max_episodes=3)
    await memory.record(ep("first", id="run-1"))
    with pytest.raises(InvalidEpisodeError, match="already stored"):
        await EpisodicMemory(provider, namespace="ids2", max_episodes=3).record(
            ep("again", id="run-1")
        )
    assert await memory.forget("run-1") == 1
    await memory.record(ep("second", id="run-1"))
    assert [e.query for e in await memory.load()] == ["second"]
    for i in range(3):  # evicted by the ring: the id is free again
        await memory.record(ep(f"filler {i}"))
    await memory.record(ep("third", id="run-1"))
    assert [e.query for e in await memory.load() if e.id == "run-1"] == ["third"]
    # sweep removes claims whose episode is gone, and never a live one
    await memory.sweep()
    with pytest.raises(InvalidEpisodeError, match="already stored"):
        await memory.record(ep("fourth", id="run-1"))


@pytest.mark.parametrize(
    "bad_id",
    ["\x1b[2J", "line\nforged", "tab\there", "zero\u200bwidth", "bidi\u202eevil", "x" * 129, " "],
)
def test_an_id_is_one_visible_token(bad_id: str) -> None:
    with pytest.raises(InvalidEpisodeError, match="id"):
        Episode(query="q", id=bad_id)


async def test_an_id_holding_a_secret_is_refused(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="secret-id")
    with pytest.raises(InvalidEpisodeError, match="secret"):
        await memory.record(ep("q", id="AKIAIOSFODNN7EXAMPLE"))
    assert await memory.load() == []


# --- namespaces ------------------------------------------------------------------------------

NAMESPACES = [
    "support bot",
    "tenant/42",
    "agent:v2",
    "user@example.com",
    "équipe",
    "a*b?[c]",
    "x}y{z",
    "100%",
    "emoji 🧠",
    ".hidden",
    "-dash",
]


async def test_any_printable_namespace_works_and_stays_isolated(
    provider: MemoryProvider,
) -> None:
    plain = EpisodicMemory(provider, namespace="a")
    await plain.record(ep("in a"))
    memories = {ns: EpisodicMemory(provider, namespace=ns) for ns in [*NAMESPACES, "a:b", "a:e"]}
    for ns, memory in memories.items():
        await memory.record(ep(f"in {ns}"))
    for ns, memory in memories.items():
        assert [e.query for e in await memory.load()] == [f"in {ns}"]
    await plain.clear()
    assert await plain.load() == []
    for ns in memories:
        fresh = EpisodicMemory(provider, namespace=ns)
        assert [e.query for e in await fresh.load()] == [f"in {ns}"], ns
        await fresh.clear()
        assert await EpisodicMemory(provider, namespace=ns).load() == []
    # clearing one left every other alone until its own turn came
    assert await EpisodicMemory(provider, namespace="a").load() == []


@pytest.mark.parametrize("bad", ["", "x" * 257, "a\nb", "a\x1bb", "a\u200bb", 5, None])
def test_an_unusable_namespace_is_a_clear_error(bad: object) -> None:
    from deepcrew_episodic.providers import InMemoryProvider

    with pytest.raises(ConfigurationError, match="namespace"):
        EpisodicMemory(InMemoryProvider(), namespace=bad)  # type: ignore[arg-type]


async def test_a_deepcrew_log_under_any_namespace_is_read_in_place(
    provider: MemoryProvider,
) -> None:
    for ns in ("support bot", "tenant/42", "agent:v2"):
        raw = f"episodic:{ns}:"
        await provider.write(
            {
                raw + "__meta__": json.dumps({"count": 2, "next": 0}),
                raw + "0": json.dumps({"query": f"old one {ns}", "outcome": "success"}),
                raw + "1": json.dumps({"query": f"old two {ns}", "outcome": "failure"}),
            }
        )
        memory = EpisodicMemory(provider, namespace=ns)
        assert [e.query for e in await memory.load()] == [f"old one {ns}", f"old two {ns}"]
        await memory.record(ep(f"new {ns}"))
        assert len(await EpisodicMemory(provider, namespace=ns).load()) == 3
    # the deepcrew log named "agent:v2" is not a part of "agent"
    assert await EpisodicMemory(provider, namespace="agent").load() == []
    await EpisodicMemory(provider, namespace="agent").clear()
    assert len(await EpisodicMemory(provider, namespace="agent:v2").load()) == 3


async def test_the_one_ambiguous_layout_is_refused(provider: MemoryProvider) -> None:
    """deepcrew-ai's slots of a log named "x:e" are spelt like our entries of "x"."""
    await EpisodicMemory(provider, namespace="x").record(ep("ours"))
    await provider.write({"episodic:x:e:__meta__": json.dumps({"count": 1, "next": 0})})
    with pytest.raises(ConfigurationError, match="overlap"):
        await EpisodicMemory(provider, namespace="x").load()
    with pytest.raises(ConfigurationError, match="overlap"):
        await EpisodicMemory(provider, namespace="x:e").load()


# --- damaged data ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("__meta__", '{"count": 1e400, "next": 0}'),
        ("__meta__", '{"count": 99999999999999999999999, "next": 0}'),
        ("__meta__", '{"count": true, "next": 0}'),
        ("__meta__", '{"count": "٣", "next": 0}'),
        ("__meta__", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["),
        ("__max__", "²"),
        ("__max__", "-5"),
        ("__max__", "1e9"),
        ("__seq__", "٣"),
        ("__seq__", "1e400"),
        ("__seq__", "-1"),
        ("__seq__", "99999999999999999999999999"),
    ],
)
async def test_a_corrupt_index_key_is_rebuilt_on_every_path(
    provider: MemoryProvider, key: str, value: str
) -> None:
    memory = EpisodicMemory(provider, namespace="idx", max_episodes=10)
    for i in range(3):
        await memory.record(ep(f"refund order {i}"))
    await provider.store(f"episodic:idx:{key}", value)
    fresh = EpisodicMemory(provider, namespace="idx", max_episodes=10)
    assert len(await fresh.load()) == 3
    assert len(await fresh.recall("refund order")) == 3
    await fresh.record(ep("refund order 3"))
    assert len(await EpisodicMemory(provider, namespace="idx", max_episodes=10).load()) == 4
    await fresh.sweep()
    assert await fresh.forget(containing="order 0") == 1
    assert len(await EpisodicMemory(provider, namespace="idx", max_episodes=10).load()) == 3


async def test_an_undecodable_record_is_skipped_counted_and_can_be_forgotten(
    provider: MemoryProvider,
) -> None:
    memory = EpisodicMemory(provider, namespace="bad")
    for i in range(3):
        await memory.record(ep(f"refund order {i}"))
    # A lone surrogate is what a provider returns for bytes that are not UTF-8.
    await provider.store("episodic:bad:e:2", '{"query": "broken \udcff"}')
    fresh = EpisodicMemory(provider, namespace="bad")
    assert [e.query for e in await fresh.load()] == ["refund order 0", "refund order 2"]
    assert fresh.counters.corrupt_records == 1
    assert (await fresh.stats()).corrupt == 1
    assert len(await fresh.recall("refund order")) == 2
    assert await fresh.forget(corrupt=True) == 1
    assert await provider.retrieve("episodic:bad:e:2") is None
    assert (await EpisodicMemory(provider, namespace="bad").stats()).corrupt == 0
