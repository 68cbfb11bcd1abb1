"""A JSON file provider, safe across threads and processes.

The file is deepcrew-ai's format: one JSON object mapping string keys to string values, so a
file written by deepcrew-ai is read in place and vice versa.

How it stays correct:

* Writes run under an exclusive ``flock`` on a sidecar ``<name>.lock`` file (and a thread lock
  within the process), write a temporary file in the same directory and ``os.replace`` it over
  the original, so a reader or a killed writer only ever sees a whole old or a whole new file.
* Each writer stamps a fresh token into the lock file *before* replacing the data, so every
  process can tell cheaply whether its cached copy is still current.
* A file that cannot be decoded raises :class:`CorruptDataError` naming it, and is never
  written to: the provider refuses every write until the file is repaired.
* All file I/O runs in a worker thread; the event loop never blocks on the disk.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from .._exceptions import ConfigurationError, CorruptDataError, StorageError
from ._base import MemoryProvider, _parse_counter, substring_search

__all__ = ["FileMemoryProvider", "read_file_store"]

T = TypeVar("T")
_Sig = tuple[int, int, int]


class FileMemoryProvider(MemoryProvider):
    """Keeps every key in one JSON file at *path*.

    Parameters
    ----------
    path:
        The JSON file. Created (with its directory) on the first write.
    fsync:
        Also flush each write to the disk before it returns, so that it survives a power cut.
        Off (the default, like deepcrew-ai and SQLite's WAL mode with ``synchronous=NORMAL``),
        every write is still atomic and survives the death of the process, but the last writes
        before a power cut may be lost. On, a record costs about twice as long.

    Example::

        async with FileMemoryProvider("episodes.json") as backend:
            memory = EpisodicMemory(backend)
    """

    shared_across_processes = True

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        # Through a symlink, replace the target, not the link (os.replace would swap the link
        # for a regular file and the target would never see a write again).
        self._path = Path(path).resolve()
        self._lock_path = self._path.with_name(self._path.name + ".lock")
        self._fsync = fsync
        self._mutex = threading.Lock()
        self._data: dict[str, str] = {}
        # Each entry's encoded JSON, kept so that a write encodes only what changed and hands
        # the rest to the kernel as is (writev), without building the whole file in memory.
        # None until the first write after a load: a process that only reads never pays for it.
        self._fragments: dict[str, bytes] | None = None
        self._token = b""
        self._sig: _Sig | None = None
        self._loaded = False
        self._lock_fd: int | None = None
        self._swept = False
        self._pid = os.getpid()

    @property
    def path(self) -> Path:
        """The JSON file this provider keeps its data in."""
        return self._path

    # --- deepcrew-ai's contract -------------------------------------------------------

    async def store(self, key: str, value: str) -> None:
        await self.write({key: value})

    async def retrieve(self, key: str) -> str | None:
        return (await self.retrieve_many([key]))[0]

    async def search(self, query: str, top_k: int = 5) -> list[tuple[str, str]]:
        return await self._read(lambda d: substring_search(d.items(), query, top_k))

    async def clear(self) -> None:
        def change(data: dict[str, str]) -> tuple[Iterable[str], None]:
            return list(data), None

        await self._modify({}, change)

    # --- capabilities ---------------------------------------------------------------------

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        return await self._read(lambda d: [d.get(k) for k in keys])

    async def keys(self, prefix: str) -> list[str]:
        return await self._read(lambda d: sorted(k for k in d if k.startswith(prefix)))

    async def write(self, items: Mapping[str, str], delete: Collection[str] = ()) -> None:
        _check_values(items)
        await self._modify(dict(items), lambda data: (delete, None))

    async def delete(self, keys: Iterable[str]) -> None:
        doomed = list(keys)
        await self._modify({}, lambda data: (doomed, None))

    async def increment(self, key: str, *, initial: int = 0, repair: int | None = None) -> int:
        result: list[int] = []

        def change(data: dict[str, str]) -> tuple[Iterable[str], dict[str, str]]:
            value = _parse_counter(key, data.get(key), initial, repair) + 1
            result.append(value)
            return (), {key: str(value)}

        await self._modify({}, change)
        return result[0]

    async def increment_and_write(
        self,
        key: str,
        then: Callable[[int], tuple[Mapping[str, str], Collection[str]]],
        *,
        initial: int = 0,
        repair: int | None = None,
    ) -> int:
        # One locked replace for both steps: half the I/O of increment + write.
        result: list[int] = []

        def change(data: dict[str, str]) -> tuple[Iterable[str], dict[str, str]]:
            value = _parse_counter(key, data.get(key), initial, repair) + 1
            result.append(value)
            items, delete = then(value)
            _check_values(items)
            return delete, {**items, key: str(value)}

        await self._modify({}, change)
        return result[0]

    async def aclose(self) -> None:
        # The mutex may be held by a worker waiting on another process's lock: wait off-loop.
        await _off_loop(self._close_lock_file)

    # --- machinery ------------------------------------------------------------------------

    async def _read(self, fn: Callable[[dict[str, str]], T]) -> T:
        def run() -> T:
            with self._guard(), self._flock(fcntl.LOCK_SH):
                self._refresh()
                return fn(self._data)

        return await _off_loop(run)

    async def _modify(
        self,
        items: dict[str, str],
        change: Callable[[dict[str, str]], tuple[Iterable[str], dict[str, str] | None]],
    ) -> None:
        """Apply *items*, then what *change* computes from the current data, in one replace."""

        def run() -> None:
            with self._guard(), self._flock(fcntl.LOCK_EX):
                self._refresh()
                self._sweep_orphans()
                doomed, more = change(self._data)
                updates = {**items, **(more or {})}
                data = self._data
                if self._fragments is None:
                    self._fragments = {k: _fragment(k, v) for k, v in data.items()}
                fragments = self._fragments
                for key in doomed:
                    if key not in updates:
                        data.pop(key, None)
                        fragments.pop(key, None)
                for key, value in updates.items():
                    data[key] = value
                    fragments[key] = _fragment(key, value)
                self._commit()

        await _off_loop(run)

    def _close_lock_file(self) -> None:
        with self._guard():
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def _guard(self) -> threading.Lock:
        """The in-process mutex, made anew in a forked child.

        A child inherits the parent's lock file descriptor, and ``flock`` belongs to the open
        file, so parent and child would not exclude each other: the child opens its own (it
        closes the inherited one, which leaves the parent's lock in place) and reloads.
        """
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._mutex = threading.Lock()
            if self._lock_fd is not None:
                with _suppress_oserror():
                    os.close(self._lock_fd)
                self._lock_fd = None
            self._loaded = False
        return self._mutex

    def _flock(self, mode: int) -> _Flock:
        if self._lock_fd is None:
            try:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                self._lock_fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise StorageError(f"cannot open lock file {self._lock_path}: {exc}") from exc
        return _Flock(self._lock_fd, mode)

    def _read_token(self) -> bytes:
        assert self._lock_fd is not None
        return os.pread(self._lock_fd, 64, 0)

    def _refresh(self) -> None:
        """Reload the file unless the cached copy is provably current."""
        token = self._read_token()
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            self._data, self._fragments, self._sig, self._token = {}, None, None, token
            self._loaded = True
            return
        except OSError as exc:
            raise StorageError(f"cannot stat {self._path}: {exc}") from exc
        sig = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._loaded and sig == self._sig and token == self._token:
            return
        try:
            with open(self._path, "rb") as fh:
                raw = fh.read()
                fst = os.fstat(fh.fileno())
        except OSError as exc:
            raise StorageError(f"cannot read {self._path}: {exc}") from exc
        data = _decode(self._path, raw)
        self._data = data
        self._fragments = None
        self._sig = (fst.st_ino, fst.st_mtime_ns, fst.st_size)
        self._token = token
        self._loaded = True

    def _commit(self) -> None:
        assert self._lock_fd is not None
        token = os.urandom(16).hex().encode()
        # Stamp first: if we die after this, other processes merely reload an unchanged file.
        os.pwrite(self._lock_fd, token, 0)
        assert self._fragments is not None  # built by _modify
        parts: list[bytes] = [b"{"]
        for fragment in self._fragments.values():
            parts += (fragment, b",\n")
        if len(parts) > 1:
            parts[-1] = b"}\n"  # the last separator becomes the closing brace
        else:
            parts.append(b"}\n")
        directory = self._path.parent
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{self._path.name}.", suffix=".tmp")
        try:
            try:
                _write_all(fd, parts)
                if self._fsync:
                    os.fsync(fd)
                fst = os.fstat(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self._path)
            if self._fsync:
                _fsync_dir(directory)
        except BaseException as exc:
            with _suppress_oserror():
                os.unlink(tmp)
            # Our cache no longer matches the disk: reload on the next operation.
            self._loaded = False
            if isinstance(exc, OSError):
                raise StorageError(f"cannot write {self._path}: {exc}") from exc
            raise
        self._sig = (fst.st_ino, fst.st_mtime_ns, fst.st_size)
        self._token = token

    def _sweep_orphans(self) -> None:
        """Remove temp files left by writers that died mid-write (we hold the write lock,
        so no live writer owns one)."""
        if self._swept:
            return
        self._swept = True
        for stray in self._path.parent.glob(f".{self._path.name}.*.tmp"):
            with _suppress_oserror():
                stray.unlink()


def read_file_store(path: str | os.PathLike[str]) -> dict[str, str]:
    """Every key and value of the JSON store at *path*, read on the calling thread.

    It blocks on the disk, so it is for a process without an event loop: the command line's
    reading commands use it, and start faster for not importing anyio and asyncio. It takes
    the same shared lock and raises the same errors as a read through the provider (a
    missing file reads as empty).
    """
    provider = FileMemoryProvider(path)
    try:
        with provider._guard(), provider._flock(fcntl.LOCK_SH):
            provider._refresh()
            return provider._data  # a new dict, shared with nobody once the provider is gone
    finally:
        provider._close_lock_file()


async def _off_loop(fn: Callable[[], T]) -> T:
    """Run *fn* in a worker thread: the event loop never waits on the disk."""
    import anyio.to_thread  # here, not at the top: read_file_store's callers need no anyio

    return await anyio.to_thread.run_sync(fn)


class _Flock:
    def __init__(self, fd: int, mode: int) -> None:
        self._fd, self._mode = fd, mode

    def __enter__(self) -> None:
        fcntl.flock(self._fd, self._mode)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)


class _suppress_oserror:
    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> bool:
        return exc_type is not None and issubclass(exc_type, OSError)


def _fragment(key: str, value: str) -> bytes:
    return (json.dumps(key) + ": " + json.dumps(value)).encode()


def _write_all(fd: int, parts: list[bytes]) -> None:
    """Write *parts* in order with as few system calls as the kernel allows."""
    limit = min(os.sysconf("SC_IOV_MAX"), 1024)
    pending = parts
    while pending:
        batch, pending = pending[:limit], pending[limit:]
        written = os.writev(fd, batch)
        expected = sum(len(b) for b in batch)
        if written < expected:  # a short write: finish this batch the slow way
            rest = b"".join(batch)[written:]
            while rest:
                rest = rest[os.write(fd, rest) :]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _decode(path: Path, raw: bytes) -> dict[str, str]:
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptDataError(
            f"{path} is not valid JSON ({exc}); it was left untouched. "
            f"Restore it from a backup or move it aside."
        ) from exc
    if not isinstance(data, dict):
        raise CorruptDataError(
            f"{path} holds a JSON {type(data).__name__}, not an object of strings; "
            f"it was left untouched."
        )
    for key, value in data.items():
        if not isinstance(value, str):
            raise CorruptDataError(
                f"{path}: the value of {key!r} is a JSON {type(value).__name__}, not a string; "
                f"the file was left untouched."
            )
    return data


def _check_values(items: Mapping[str, str]) -> None:
    for key, value in items.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ConfigurationError(
                f"FileMemoryProvider stores strings only; got {type(value).__name__} "
                f"for key {key!r}"
            )
