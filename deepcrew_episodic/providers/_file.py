"""A JSON file provider, safe across threads and processes.

The file is deepcrew-ai's format: one JSON object mapping string keys to string values, so a
file written by deepcrew-ai is read in place and vice versa.

How it stays correct:

* Writes run under an exclusive ``flock`` on a sidecar ``<name>.lock`` file (and a thread lock
  within the process), write a temporary file in the same directory and ``os.replace`` it over
  the original, so a reader or a killed writer only ever sees a whole old or a whole new file.
  Temporary files are created ``0600`` (``O_EXCL``) and named after their writer's pid; every
  write removes those left by a writer that died (see :meth:`FileMemoryProvider._sweep_orphans`).
  A rewrite keeps the store file's mode; a new store file is ``0600``.
* Compare-and-set (``write_if``) and ``increment_and_write`` read what they depend on and write
  inside that one locked replace: atomic across processes.
* Each writer stamps a fresh token into the lock file *before* replacing the data, so every
  process can tell cheaply whether its cached copy is still current.
* A file that cannot be decoded raises :class:`CorruptDataError` naming it, and is never
  written to: the provider refuses every write until the file is repaired.
* Every ``OSError`` (a read-only directory, a full disk, a directory where the file should be)
  becomes :class:`StorageError` naming the path, the original kept as ``__cause__``.
* Values that are not valid Unicode (lone surrogates, what ``surrogateescape`` makes of bytes
  that are not UTF-8) are stored as JSON escapes and read back unchanged; a file holding bytes
  that are not UTF-8 inside its strings is read with ``surrogateescape``.
* All file I/O runs in a worker thread; the event loop never blocks on the disk.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import stat
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from .._exceptions import ConfigurationError, CorruptDataError, StorageError
from .._validate import shown
from ._base import (
    Fresh,
    MemoryProvider,
    Then,
    check_regular,
    differs,
    next_step,
    open_regular,
    store_path,
)

__all__ = ["FileMemoryProvider", "read_file_store"]

log = logging.getLogger("deepcrew_episodic")

T = TypeVar("T")
_Sig = tuple[int, int, int]
_Change = Callable[[dict[str, str]], tuple[Iterable[str], Mapping[str, str]] | None]
# A temporary file this old is an orphan even when a process with its writer's pid is alive
# (the pid may have been reused): no write takes this long.
_ORPHAN_GRACE_SECONDS = 60.0


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
    atomic_increment_and_write = True

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        # Through a symlink, replace the target, not the link (os.replace would swap the link
        # for a regular file and the target would never see a write again). Resolving reads
        # the file system, so it waits for the first operation, in a worker thread.
        self._path = Path(store_path(path))
        self._resolved = False
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
        # The store file's permission bits, kept on every rewrite (None: no file yet).
        self._mode: int | None = None
        self._pid = os.getpid()
        self._tmp_prefix = f".{self._path.name}."
        _LIVE.add(self)

    @property
    def path(self) -> Path:
        """The JSON file this provider keeps its data in (symlinks followed once it has been
        used)."""
        return self._path

    # --- the contract -----------------------------------------------------------------------

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        return await self._read(lambda d: [d.get(k) for k in keys])

    async def keys(self, prefix: str) -> list[str]:
        def listed(data: dict[str, str]) -> list[str]:
            # Listing is how forget, sweep and clear start, and they may end up writing
            # nothing: the orphans go now (under the shared lock no writer is mid-write).
            self._sweep_orphans()
            return sorted(k for k in data if k.startswith(prefix))

        return await self._read(listed)

    async def write_if(
        self,
        expect: Mapping[str, str | None],
        items: Mapping[str, str],
        delete: Collection[str] = (),
    ) -> bool:
        _check_values(items)
        matched: list[bool] = []

        def change(data: dict[str, str]) -> tuple[Iterable[str], dict[str, str]] | None:
            get = data.get
            if any(differs(get(k), v) for k, v in expect.items()):
                return None  # nothing changes, nothing is written
            matched.append(True)
            return delete, dict(items)

        await self._modify(change)
        return bool(matched)

    async def increment_and_write(
        self,
        key: str,
        then: Then,
        *,
        initial: int = 0,
        repair: int | None = None,
        read: Sequence[str] = (),
        fresh: Fresh | None = None,
    ) -> int:
        # One locked replace (half the I/O of the portable read + write_if); the read keys
        # are read under the same lock, so `then` runs once on values nobody can change.
        result: list[int] = []

        def change(data: dict[str, str]) -> tuple[Iterable[str], dict[str, str]]:
            value, items, delete = next_step(key, data.get, then, initial, repair, read, fresh)
            _check_values(items)
            result.append(value)
            return delete, items

        await self._modify(change)
        return result[0]

    async def aclose(self) -> None:
        # The mutex may be held by a worker waiting on another process's lock: wait off-loop.
        await _off_loop(self._close_lock_file)

    # --- machinery ------------------------------------------------------------------------

    async def _read(self, fn: Callable[[dict[str, str]], T]) -> T:
        def run() -> T:
            with self._translated("read"), self._guard(), self._flock(fcntl.LOCK_SH):
                self._refresh()
                return fn(self._data)

        return await _off_loop(run)

    async def _modify(self, change: _Change) -> None:
        """Apply what *change* computes from the current data (keys to delete, items to
        store), in one replace. When *change* returns ``None``, nothing is written."""

        def run() -> None:
            with self._translated("write"), self._guard(), self._flock(fcntl.LOCK_EX):
                self._refresh()
                self._sweep_orphans()
                changed = change(self._data)
                if changed is None:
                    return
                doomed, updates = changed
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
        with self._translated("close"), self._guard():
            if self._lock_fd is not None:
                fd, self._lock_fd = self._lock_fd, None
                os.close(fd)

    @contextmanager
    def _translated(self, op: str) -> Iterator[None]:
        """The one place where the file system's errors become ours."""
        try:
            yield
        except OSError as exc:
            where = exc.filename or self._path
            raise StorageError(
                f"cannot {op} {self._path} ({where}): {exc.strerror or exc}"
            ) from exc

    def _guard(self) -> threading.Lock:
        """The in-process mutex (made anew in a forked child: see :func:`_after_fork`)."""
        return self._mutex

    def _forked(self) -> None:
        """In a forked child, before any other thread exists: a child inherits the parent's
        lock file descriptor, and ``flock`` belongs to the open file, so parent and child would
        not exclude each other. The child opens its own (closing the inherited one leaves the
        parent's lock in place), takes a fresh mutex (the parent's may have been held by a
        thread that does not exist here) and reloads."""
        self._pid = os.getpid()
        self._mutex = threading.Lock()
        if self._lock_fd is not None:
            with _suppress_oserror():
                os.close(self._lock_fd)
            self._lock_fd = None
        self._loaded = False

    def _resolve(self) -> None:
        """Follow symlinks to the real store file, once (in a worker thread, under the mutex)."""
        if not self._resolved:
            check_regular(self._path, "JSON store file")  # named as given, link or not
            self._path = self._path.resolve()
            self._lock_path = self._path.with_name(self._path.name + ".lock")
            self._tmp_prefix = f".{self._path.name}."
            self._resolved = True

    def _flock(self, mode: int) -> _Flock:
        self._resolve()
        if self._lock_fd is None:
            # A FIFO, a device or a directory at either path is refused before anything is
            # opened: opening a FIFO blocks until someone opens its other end, for ever.
            check_regular(self._path, "JSON store file")
            try:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                # Whoever may write the store must be able to open its lock file too.
                try:
                    lock_mode = stat.S_IMODE(os.stat(self._path).st_mode)
                except FileNotFoundError:
                    lock_mode = 0o600
            except OSError as exc:
                raise StorageError(f"cannot open lock file {self._lock_path}: {exc}") from exc
            self._lock_fd = open_regular(
                self._lock_path, os.O_RDWR | os.O_CREAT, lock_mode, "lock file"
            )
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
            self._mode = None
            self._loaded = True
            return
        except OSError as exc:
            raise StorageError(f"cannot stat {self._path}: {exc}") from exc
        if not stat.S_ISREG(st.st_mode):  # swapped for a FIFO or a device since it was opened
            check_regular(self._path, "JSON store file")
        self._mode = stat.S_IMODE(st.st_mode)
        sig = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._loaded and sig == self._sig and token == self._token:
            return
        try:
            fd = open_regular(self._path, os.O_RDONLY, 0, "JSON store file")
            with os.fdopen(fd, "rb") as fh:
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
        # O_EXCL: a fresh file of ours, never someone's planted link; 0600 until it is whole.
        tmp = directory / f"{self._tmp_prefix}{os.getpid()}.{os.urandom(6).hex()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise StorageError(f"cannot write {self._path}: {exc}") from exc
        try:
            try:
                if self._mode is not None and self._mode != 0o600:
                    os.fchmod(fd, self._mode)  # a rewrite keeps the store file's mode
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
        """Remove temp files left by writers that died mid-write: each one is a whole copy of
        the store, which ``forget`` must not leave behind.

        Runs on every write and every :meth:`keys`, under the lock (exclusive or shared), so
        no writer of ours is mid-write. A temp
        file still counts as live while its writer's pid is alive and it is younger than a
        grace period: a safety margin for a writer the lock cannot exclude (a file system
        without working ``flock``). A name without a pid is an older version's, always
        written under the same lock.
        """
        prefix = self._tmp_prefix
        now = time.time()
        with os.scandir(self._path.parent) as entries:
            strays = [e for e in entries if e.name.startswith(prefix) and e.name.endswith(".tmp")]
        for entry in strays:
            parts = entry.name[len(prefix) : -len(".tmp")].split(".")
            pid = int(parts[0]) if len(parts) == 2 and parts[0].isdigit() else None
            try:
                if (
                    pid is not None
                    and pid != os.getpid()
                    and _alive(pid)
                    and now - entry.stat(follow_symlinks=False).st_mtime < _ORPHAN_GRACE_SECONDS
                ):
                    continue
                os.unlink(entry.path)
            except FileNotFoundError:
                continue  # another writer removed it first
            except OSError as exc:
                # The write itself goes on (it may still succeed); the copy stays, said aloud.
                log.warning("cannot remove the orphaned temporary file %s: %s", entry.path, exc)


# Every provider of this process, reset in a forked child while it is still single-threaded
# (a check done later, in whichever worker thread comes first, races with the others).
_LIVE: weakref.WeakSet[FileMemoryProvider] = weakref.WeakSet()


def _after_fork() -> None:
    for provider in list(_LIVE):
        provider._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def read_file_store(path: str | os.PathLike[str]) -> dict[str, str]:
    """Every key and value of the JSON store at *path*, read on the calling thread.

    It blocks on the disk, so it is for a process without an event loop: the command line's
    reading commands use it, and start faster for not importing anyio and asyncio. It takes
    the same shared lock and raises the same errors as a read through the provider (a
    missing file reads as empty).
    """
    provider = FileMemoryProvider(path)
    try:
        with provider._translated("read"), provider._guard(), provider._flock(fcntl.LOCK_SH):
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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


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


def _json_problem(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError):
        return str(exc)
    return "it holds an integer of more than 4,300 digits"


def _decode(path: Path, raw: bytes) -> dict[str, str]:
    try:
        try:
            data = json.loads(raw)
        except UnicodeDecodeError:
            # Bytes that are not UTF-8 inside a string (a hand edit in another encoding): they
            # come back as lone surrogates, which the core reports as a corrupt record, instead
            # of making the whole file unreadable.
            data = json.loads(raw.decode("utf-8", "surrogateescape"))
    except (ValueError, RecursionError) as exc:
        # ValueError beyond JSONDecodeError: an integer of more than 4,300 digits, which
        # Python refuses to convert (a hand edit, or a hostile file).
        reason = _json_problem(exc)
        raise CorruptDataError(
            f"{path} is not valid JSON ({reason}); it was left untouched. "
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
                f"{path}: the value of {shown(key)} is a JSON {type(value).__name__}, not a "
                "string; "
                f"the file was left untouched."
            )
    return data


def _check_values(items: Mapping[str, str]) -> None:
    for key, value in items.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ConfigurationError(
                f"FileMemoryProvider stores strings only; got {type(value).__name__} "
                f"for key {shown(key)}"
            )
