"""What the file provider promises beyond the conformance suite: corrupt files are reported,
never overwritten; other writers' changes are always seen."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from deepcrew_episodic import CorruptDataError, Episode, EpisodicMemory, StorageError
from deepcrew_episodic.providers import FileMemoryProvider

pytestmark = pytest.mark.anyio


async def _fill(path: Path, n: int = 3) -> None:
    async with FileMemoryProvider(path) as provider:
        memory = EpisodicMemory(provider, namespace="ns")
        for i in range(n):
            await memory.record(Episode(query=f"episode {i}", response="r"))


@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text[: len(text) // 2],  # truncated mid-write by something else
        lambda text: "",  # emptied
        lambda text: text.replace('"', "'", 3),  # not JSON any more
        lambda text: "[1, 2, 3]",  # JSON, but not an object
        lambda text: '{"episodic:ns:__seq__": 3}',  # an object, but not of strings
    ],
)
async def test_corrupt_file_raises_naming_it_and_is_never_overwritten(
    tmp_path: Path, damage: Callable[[str], str]
) -> None:
    path = tmp_path / "episodes.json"
    await _fill(path)
    path.write_text(damage(path.read_text()))
    before = path.read_bytes()
    async with FileMemoryProvider(path) as provider:
        memory = EpisodicMemory(provider, namespace="ns")
        with pytest.raises(CorruptDataError, match=re.escape(path.name)):
            await memory.load()
        with pytest.raises(CorruptDataError, match=re.escape(path.name)):
            await memory.record(Episode(query="new", response="r"))
        with pytest.raises(CorruptDataError):
            await memory.clear()
        with pytest.raises(CorruptDataError):
            await provider.store("k", "v")
    assert path.read_bytes() == before


async def test_undecodable_bytes_are_corrupt_too(tmp_path: Path) -> None:
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe\x00 not text")
    async with FileMemoryProvider(path) as provider:
        with pytest.raises(CorruptDataError, match=r"binary\.json"):
            await provider.store("k", "v")
    assert path.read_bytes() == b"\xff\xfe\x00 not text"


async def test_corrupt_file_error_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    async with FileMemoryProvider(path) as provider:
        with pytest.raises(StorageError) as info:
            await provider.retrieve("x")
    assert "left untouched" in str(info.value)


async def test_missing_file_and_directory_are_created_on_first_write(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "episodes.json"
    async with FileMemoryProvider(path) as provider:
        assert await provider.retrieve("x") is None
        assert not path.exists()
        await provider.store("x", "1")
    assert json.loads(path.read_text()) == {"x": "1"}


async def test_a_change_by_another_writer_is_always_seen(tmp_path: Path) -> None:
    path = tmp_path / "shared.json"
    async with FileMemoryProvider(path) as a, FileMemoryProvider(path) as b:
        await a.store("k", "1")
        assert await b.retrieve("k") == "1"
        for i in range(2, 50):  # same size each time: the token, not the size, tells
            await b.store("k", str(i % 10))
            assert await a.retrieve("k") == str(i % 10)


async def test_a_hand_edit_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "edited.json"
    async with FileMemoryProvider(path) as provider:
        await provider.store("k", "before")
        path.write_text(json.dumps({"k": "after, by hand"}))
        assert await provider.retrieve("k") == "after, by hand"


async def test_reads_deepcrew_ai_file_format_and_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps({"tool:search:agent": "a result", "other": "x"}, indent=2))
    async with FileMemoryProvider(path) as provider:
        assert await provider.search("result") == [("tool:search:agent", "a result")]
        await provider.store("new", "value")
    assert json.loads(path.read_text()) == {
        "tool:search:agent": "a result",
        "other": "x",
        "new": "value",
    }


async def test_orphaned_temp_files_are_removed_by_the_next_writer(tmp_path: Path) -> None:
    path = tmp_path / "episodes.json"
    orphan = tmp_path / ".episodes.json.abc123.tmp"
    orphan.write_text("half a file")
    unrelated = tmp_path / ".other.json.abc.tmp"
    unrelated.write_text("not ours")
    async with FileMemoryProvider(path) as provider:
        await provider.store("k", "v")
    assert not orphan.exists()
    assert unrelated.exists()


async def test_fsync_mode_writes_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "durable.json"
    async with FileMemoryProvider(path, fsync=True) as provider:
        memory = EpisodicMemory(provider, namespace="ns")
        await memory.record(Episode(query="durable", response="r"))
    async with FileMemoryProvider(path) as provider:
        assert [e.query for e in await EpisodicMemory(provider, namespace="ns").load()] == [
            "durable"
        ]


async def test_only_strings_are_stored(tmp_path: Path) -> None:
    async with FileMemoryProvider(tmp_path / "t.json") as provider:
        with pytest.raises(ValueError, match="strings only"):
            await provider.store("k", 3)  # type: ignore[arg-type]
        assert await provider.retrieve("k") is None
