"""A store path, or a file a store keeps beside it, that is not a regular file (a FIFO, a
socket, a directory, a device) is refused at once with a ``StorageError`` naming it: never
opened blocking (a FIFO would hang every command for ever), never read as data, never replaced.

Each attempt runs in a subprocess with a deadline, so a regression shows as a failure, not as
a suite that never ends.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")

DEADLINE = 20.0

# Opens the provider, lists, records and recalls; prints the outcome as one JSON line.
_ATTEMPT = """
import asyncio, json, sys
from deepcrew_episodic import Episode, EpisodicMemory, StorageError
from deepcrew_episodic.providers import FileMemoryProvider, SQLiteMemoryProvider

kind, path = sys.argv[1], sys.argv[2]

async def main():
    backend = (FileMemoryProvider if kind == "json" else SQLiteMemoryProvider)(path)
    try:
        memory = EpisodicMemory(backend, namespace="special")
        await memory.record(Episode(query="rotate the key"))
        return {"ok": len(await memory.recall("rotate"))}
    except StorageError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    finally:
        try:
            await backend.aclose()
        except StorageError:
            pass

print(json.dumps(asyncio.run(main())))
"""


def _attempt(kind: str, path: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _ATTEMPT, kind, str(path)],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.mkdir()


def _device(path: Path) -> None:
    path.symlink_to("/dev/zero")  # endless bytes: read as a store, it never ends either


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Callable[[Path], None]]:
    made: list[socket.socket] = []

    def make(path: Path) -> None:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        server.listen()
        made.append(server)

    yield make
    for server in made:
        server.close()


MAKERS: dict[str, Callable[[Path], None]] = {
    "fifo": _fifo,
    "directory": _directory,
    "device": _device,
}
WHAT = {"fifo": "a FIFO", "directory": "a directory", "device": "a character device"}


@pytest.mark.parametrize("what", [*MAKERS, "socket"])
@pytest.mark.parametrize(
    ("kind", "place"),
    [
        ("json", ""),
        ("json", ".lock"),
        ("sqlite", ""),
        ("sqlite", "-wal"),
        ("sqlite", "-shm"),
        ("sqlite", "-journal"),
    ],
)
def test_a_store_file_that_is_not_a_regular_file_is_refused_naming_it(
    tmp_path: Path,
    kind: str,
    place: str,
    what: str,
    unix_socket: Callable[[Path], None],
) -> None:
    store = tmp_path / ("mem.json" if kind == "json" else "mem.db")
    odd = Path(f"{store}{place}")
    (unix_socket if what == "socket" else MAKERS[what])(odd)
    result = _attempt(kind, store)
    assert result.get("error") == "StorageError", result
    message = str(result["message"])
    assert str(odd) in message
    assert "not a regular file" in message
    if what != "socket":
        assert WHAT[what] in message
    # Nothing was put in its place, and nothing was created beside a refused store file.
    assert not odd.is_file()
    if not place:
        assert sorted(p.name for p in tmp_path.iterdir()) == [odd.name]


def test_a_fifo_swapped_in_after_the_first_read_is_refused_too(tmp_path: Path) -> None:
    script = """
import asyncio, json, os, sys
from deepcrew_episodic import StorageError
from deepcrew_episodic.providers import FileMemoryProvider

async def main():
    backend = FileMemoryProvider(sys.argv[1])
    await backend.write({"a": "1"})
    os.replace(sys.argv[1], sys.argv[1] + ".bak")
    os.mkfifo(sys.argv[1])
    try:
        await backend.retrieve_many(["a"])
    except StorageError as exc:
        return str(exc)
    finally:
        await backend.aclose()

print(json.dumps(asyncio.run(main())))
"""
    store = tmp_path / "mem.json"
    done = subprocess.run(
        [sys.executable, "-c", script, str(store)], capture_output=True, text=True, timeout=DEADLINE
    )
    assert done.returncode == 0, done.stderr
    assert "is a FIFO, not a regular file" in json.loads(done.stdout)


@pytest.mark.parametrize("name", ["mem.json", "mem.db"])
@pytest.mark.parametrize("command", [["stats"], ["record", "-q", "rotate the key"], ["timeline"]])
def test_the_cli_refuses_a_fifo_store_at_once(
    tmp_path: Path, name: str, command: list[str]
) -> None:
    store = tmp_path / name
    os.mkfifo(store)
    done = subprocess.run(
        [sys.executable, "-m", "deepcrew_episodic", "--store", str(store), *command],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode != 0
    assert f"{store} is a FIFO, not a regular file" in done.stderr
    assert "Traceback" not in done.stderr
    assert store.exists()
    assert not store.is_file()
