"""What the file provider promises beyond the conformance suite: corrupt files are reported,
never overwritten; other writers' changes are always seen."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
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


# --- temporary files, modes and errors ----------------------------------------------------------


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


async def test_every_write_removes_the_copies_left_by_dead_writers(tmp_path: Path) -> None:
    path = tmp_path / "episodes.json"
    async with FileMemoryProvider(path) as provider:
        memory = EpisodicMemory(provider, namespace="ns")
        await memory.record(Episode(query="secret", response="r"))
        for how in ("record", "forget", "sweep", "clear"):
            # a writer killed mid-write left a whole copy of the store (after our first write)
            orphan = tmp_path / f".episodes.json.{_dead_pid()}.0a1b2c.tmp"
            orphan.write_bytes(path.read_bytes())
            live = tmp_path / f".episodes.json.{os.getppid()}.0a1b2c.tmp"  # alive, and young
            live.write_text("{}")
            stale = tmp_path / f".episodes.json.{os.getppid()}.ffffff.tmp"  # alive, but old
            stale.write_text("{}")
            os.utime(stale, (time.time() - 3600, time.time() - 3600))
            if how == "record":
                await memory.record(Episode(query="more", response="r"))
            elif how == "forget":
                await memory.forget(containing="secret")
            elif how == "sweep":
                await memory.sweep()
            else:
                await memory.clear()
            assert not orphan.exists(), how
            assert not stale.exists(), how
            assert live.exists(), how
            live.unlink()


async def test_temp_files_are_private_and_the_store_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "episodes.json"
    seen: list[int] = []
    real_replace = os.replace

    def spy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        seen.append(stat.S_IMODE(os.stat(src).st_mode))
        real_replace(src, dst)

    old_umask = os.umask(0)  # even with no umask: the mode is set, not left to chance
    try:
        async with FileMemoryProvider(path) as provider:
            os.replace = spy  # type: ignore[assignment]
            try:
                await provider.store("k", "v")
                assert stat.S_IMODE(path.stat().st_mode) == 0o600  # a new store is private
                path.chmod(0o640)  # the owner shares it with a group
                await provider.store("k", "w")
                assert stat.S_IMODE(path.stat().st_mode) == 0o640  # and a rewrite keeps that
            finally:
                os.replace = real_replace
    finally:
        os.umask(old_umask)
    assert seen[0] == 0o600  # the temp file of a new store is 0600 while it is written


@pytest.mark.parametrize("where", ["a directory", "under a file"])
async def test_file_system_errors_are_storage_errors_naming_the_path(
    tmp_path: Path, where: str
) -> None:
    if where == "a directory":
        path = tmp_path / "episodes.json"
        path.mkdir()  # EISDIR
    else:
        (tmp_path / "plain").write_text("x")
        path = tmp_path / "plain" / "episodes.json"  # ENOTDIR
    async with FileMemoryProvider(path) as provider:
        for attempt in (provider.retrieve("k"), provider.store("k", "v")):
            with pytest.raises(StorageError, match=re.escape(str(path))) as info:
                await attempt
            assert isinstance(info.value.__cause__, OSError)


_READ_ONLY = """
import sys
sys.path.insert(0, sys.argv[2])
import anyio
from deepcrew_episodic import StorageError
from deepcrew_episodic.providers import FileMemoryProvider

async def main():
    async with FileMemoryProvider(sys.argv[1]) as provider:
        assert await provider.retrieve("k") == "v"  # reads work
        try:
            await provider.store("k", "w")
        except StorageError as exc:
            print(type(exc.__cause__).__name__, exc)
        else:
            print("written")

anyio.run(main)
"""


async def test_a_read_only_directory_is_a_storage_error(tmp_path: Path) -> None:
    directory = tmp_path / "ro"
    directory.mkdir()
    path = directory / "episodes.json"
    async with FileMemoryProvider(path) as provider:
        await provider.store("k", "v")
    path.chmod(0o666)
    (directory / "episodes.json.lock").chmod(0o666)
    directory.chmod(0o555)
    tmp_path.chmod(0o755)
    # root ignores permissions: drop the capability that lets it (setpriv, util-linux)
    drop = ["--inh-caps=-dac_override,-dac_read_search"]
    drop.append("--bounding-set=-dac_override,-dac_read_search")
    prefix = ["setpriv", *drop] if os.getuid() == 0 else []
    if prefix and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: permissions cannot be tested")
    try:
        root = str(Path(__file__).parent.parent)
        done = subprocess.run(
            [*prefix, sys.executable, "-c", _READ_ONLY, str(path), root],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        directory.chmod(0o755)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("PermissionError cannot write"), done.stdout
    assert str(path) in done.stdout
    assert json.loads(path.read_text()) == {"k": "v"}
    assert sorted(p.name for p in directory.iterdir()) == ["episodes.json", "episodes.json.lock"]


async def test_bytes_that_are_not_utf8_inside_a_string_spoil_one_value_not_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"good": "ok", "caf\xe9": "cr\xe8me"}')
    async with FileMemoryProvider(path) as provider:
        assert await provider.keys("") == ["caf\udce9", "good"]
        assert await provider.retrieve("caf\udce9") == "cr\udce8me"
        await provider.delete(["caf\udce9"])
        assert await provider.keys("") == ["good"]
    assert json.loads(path.read_text()) == {"good": "ok"}


@pytest.mark.anyio
async def test_a_key_with_a_non_string_value_is_named_redacted(tmp_path: Path) -> None:
    key = "sk-proj-" + "Zq9" * 16
    path = tmp_path / "store.json"
    path.write_text(json.dumps({f"episodic:default:{key}": 5}))
    before = path.read_bytes()
    with pytest.raises(CorruptDataError, match="is a JSON int") as raised:
        async with FileMemoryProvider(path) as provider:
            await EpisodicMemory(provider).load()
    assert "Zq9Zq9" not in str(raised.value)
    assert "[REDACTED:openai-key]" in str(raised.value)
    assert path.read_bytes() == before
