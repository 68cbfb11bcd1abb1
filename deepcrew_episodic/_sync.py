"""``SyncEpisodicMemory``: the same memory for code that does not ``await``.

Scripts, notebooks and WSGI applications call ``memory.recall(...)`` without an event loop of
their own. This facade owns one: a daemon thread runs an anyio event loop with a blocking portal,
and every method sends the matching :class:`EpisodicMemory` coroutine to it and waits for the
result. There is one implementation of the memory, the async one; this module only carries calls
across threads.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from datetime import timedelta, tzinfo
from types import TracebackType
from typing import Any, TypeVar

from ._episode import Episode, Outcome
from ._exceptions import ConfigurationError
from ._grade import Grade
from ._history import History
from ._listing import Page
from ._log import Counters
from ._memory import EpisodicMemory, MemoryStats
from ._recall import Ranking, Scored
from ._time import TimeLike
from .providers._base import MemoryProvider

__all__ = ["SyncEpisodicMemory"]

T = TypeVar("T")


class SyncEpisodicMemory:
    """:class:`EpisodicMemory` with plain (blocking) methods.

    Takes the same arguments as :class:`EpisodicMemory`, or an existing one (whose provider
    must then be used from this object only). Close it (``close()`` or a ``with`` block) to
    close the provider and stop its event-loop thread.

    Example::

        from deepcrew_episodic import Episode, SyncEpisodicMemory
        from deepcrew_episodic.providers import SQLiteMemoryProvider

        with SyncEpisodicMemory(SQLiteMemoryProvider("episodes.db"), namespace="bot") as memory:
            memory.record(Episode(query="Rotate the API key", response="Done", outcome="success"))
            print(memory.render(memory.recall("how do I rotate a key?")))
    """

    def __init__(self, backend: Any, *, backend_name: str = "asyncio", **options: Any) -> None:
        if isinstance(backend, EpisodicMemory):
            if options:
                raise ConfigurationError(
                    f"an EpisodicMemory was given: its options are already set, not "
                    f"{', '.join(sorted(options))}"
                )
            self.memory = backend
        else:
            self.memory = EpisodicMemory(backend, **options)
        self._backend_name = backend_name
        self._portal, self._thread = _start_loop(backend_name)
        self._pid = os.getpid()
        # Guards _closed, _closing and _in_flight; close() waits on it for the calls in flight.
        self._state = threading.Condition()
        self._closed = False
        self._closing = False
        self._in_flight = 0
        _LIVE.add(self)

    # --- calls ------------------------------------------------------------------------------

    def _call(self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any, **kwargs: Any) -> T:
        with self._state:
            if self._closed or self._closing:
                raise ConfigurationError("this SyncEpisodicMemory is closed")
            if self._pid != os.getpid():
                self._adopt()
            self._in_flight += 1
            portal = self._portal
        try:
            result: T = portal.call(lambda: fn(*args, **kwargs))
        finally:
            with self._state:
                self._in_flight -= 1
                self._state.notify_all()
        return result

    def _adopt(self) -> None:
        """In a process forked from the one that made this facade (gunicorn ``--preload``,
        ``multiprocessing`` with ``fork``): the parent's event-loop thread does not exist here,
        so this process gets a loop thread of its own. The providers forget their parent's
        connections and locks in the child themselves. Called with ``_state`` held."""
        if self._in_flight:
            # Those calls' threads did not cross the fork: what they held (the log's lock, a
            # half-applied sync) is held for ever here.
            self._closed = True
            raise ConfigurationError(
                f"this SyncEpisodicMemory was forked from process {self._pid} while "
                f"{self._in_flight} of its calls were running there; create one in each "
                f"process (gunicorn: in a post_fork hook) or fork while it is idle"
            )
        self._portal, self._thread = _start_loop(self._backend_name)
        self._pid = os.getpid()

    @classmethod
    def open(
        cls, backend: Any, *, backend_name: str = "asyncio", **options: Any
    ) -> SyncEpisodicMemory:
        """See :meth:`EpisodicMemory.open`: a memory at the log's own ring size."""
        facade = cls(backend, backend_name=backend_name, **options)
        if "max_episodes" not in options:
            try:
                opened = facade._call(EpisodicMemory.open, backend, **options)
            except BaseException:
                facade._stop()
                raise
            facade.memory = opened
        return facade

    def namespaces(self) -> list[str]:
        """See :meth:`EpisodicMemory.namespaces` (of this memory's backend)."""
        return self._call(EpisodicMemory.namespaces, self.memory.backend)

    def record(self, episode: Episode | Any) -> Episode:
        """See :meth:`EpisodicMemory.record`."""
        return self._call(self.memory.record, episode)

    def check(self, episode: Episode | Any) -> Episode:
        """See :meth:`EpisodicMemory.check` (no I/O: runs here)."""
        return self.memory.check(episode)

    def reflect(self, episode: Episode) -> str | None:
        """See :meth:`EpisodicMemory.reflect`."""
        return self._call(self.memory.reflect, episode)

    def recall(
        self,
        query: str,
        top_k: int | None = None,
        *,
        intent: str = "any",
        tags: Collection[str] | None = None,
        outcome: str | Collection[str] | None = None,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
        min_relevance: float | None = None,
    ) -> list[Episode]:
        """See :meth:`EpisodicMemory.recall`."""
        return self._call(
            self.memory.recall,
            query,
            top_k,
            intent=intent,
            tags=tags,
            outcome=outcome,
            since=since,
            until=until,
            min_relevance=min_relevance,
        )

    def explain(
        self,
        query: str,
        top_k: int | None = None,
        *,
        intent: str = "any",
        tags: Collection[str] | None = None,
        outcome: str | Collection[str] | None = None,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
        min_relevance: float | None = None,
    ) -> Ranking:
        """See :meth:`EpisodicMemory.explain`."""
        return self._call(
            self.memory.explain,
            query,
            top_k,
            intent=intent,
            tags=tags,
            outcome=outcome,
            since=since,
            until=until,
            min_relevance=min_relevance,
        )

    def history(
        self,
        task: str,
        *,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
        tags: Collection[str] | None = None,
    ) -> History:
        """See :meth:`EpisodicMemory.history`."""
        return self._call(self.memory.history, task, since=since, until=until, tags=tags)

    def render(self, episodes: Sequence[Episode | Scored], *, max_chars: int | None = None) -> str:
        """See :meth:`EpisodicMemory.render` (no I/O: runs here)."""
        return self.memory.render(episodes, max_chars=max_chars)

    def refresh(self) -> int:
        """See :meth:`EpisodicMemory.refresh`."""
        return self._call(self.memory.refresh)

    def load(self, *, include_expired: bool = False, graded: bool = True) -> list[Episode]:
        """See :meth:`EpisodicMemory.load`."""
        return self._call(self.memory.load, include_expired=include_expired, graded=graded)

    def stats(self) -> MemoryStats:
        """See :meth:`EpisodicMemory.stats`."""
        return self._call(self.memory.stats)

    def forget(
        self,
        ids: str | Collection[str] | None = None,
        *,
        outcome: str | Collection[str] | None = None,
        tags: Collection[str] | None = None,
        before: TimeLike | None = None,
        containing: str | None = None,
        corrupt: bool = False,
        dry_run: bool = False,
    ) -> int:
        """See :meth:`EpisodicMemory.forget`."""
        return self._call(
            self.memory.forget,
            ids,
            outcome=outcome,
            tags=tags,
            before=before,
            containing=containing,
            corrupt=corrupt,
            dry_run=dry_run,
        )

    def select(
        self,
        ids: str | Collection[str] | None = None,
        *,
        outcome: str | Collection[str] | None = None,
        tags: Collection[str] | None = None,
        before: TimeLike | None = None,
        containing: str | None = None,
    ) -> list[Episode]:
        """See :meth:`EpisodicMemory.select`."""
        return self._call(
            self.memory.select,
            ids,
            outcome=outcome,
            tags=tags,
            before=before,
            containing=containing,
        )

    def latest(self, conversation_id: str) -> Episode | None:
        """See :meth:`EpisodicMemory.latest`."""
        return self._call(self.memory.latest, conversation_id)

    def page(self, limit: int = 50, offset: int = 0) -> Page:
        """See :meth:`EpisodicMemory.page`."""
        return self._call(self.memory.page, limit, offset)

    def searched_text(self, episode: Episode) -> str:
        """See :meth:`EpisodicMemory.searched_text` (no I/O: runs here)."""
        return self.memory.searched_text(episode)

    def recorded_at(self, episode: Episode) -> float | None:
        """See :meth:`EpisodicMemory.recorded_at` (no I/O: runs here)."""
        return self.memory.recorded_at(episode)

    def is_expired(self, episode: Episode) -> bool:
        """See :meth:`EpisodicMemory.is_expired` (no I/O: runs here)."""
        return self.memory.is_expired(episode)

    def sweep(self, *, dry_run: bool = False) -> int:
        """See :meth:`EpisodicMemory.sweep`."""
        return self._call(self.memory.sweep, dry_run=dry_run)

    def shrink(self, max_episodes: int) -> int:
        """See :meth:`EpisodicMemory.shrink`."""
        return self._call(self.memory.shrink, max_episodes)

    def clear(self) -> None:
        """See :meth:`EpisodicMemory.clear`."""
        self._call(self.memory.clear)

    def grade(
        self,
        episode_id: str,
        *,
        outcome: Outcome | None = None,
        score: float | None = None,
        note: str = "",
        verified: bool | None = None,
        source: str | None = None,
    ) -> Grade:
        """See :meth:`EpisodicMemory.grade`."""
        return self._call(
            self.memory.grade,
            episode_id,
            outcome=outcome,
            score=score,
            note=note,
            verified=verified,
            source=source,
        )

    def grades(self, episode_id: str | None = None) -> list[Grade]:
        """See :meth:`EpisodicMemory.grades`."""
        return self._call(self.memory.grades, episode_id)

    def used(self, ids: str | Collection[str]) -> None:
        """See :meth:`EpisodicMemory.used`."""
        self._call(self.memory.used, ids)

    def uses(self) -> dict[str, int]:
        """See :meth:`EpisodicMemory.uses`."""
        return self._call(self.memory.uses)

    def restore(
        self,
        episode: Episode | Any,
        *,
        grades: Sequence[Grade | Mapping[str, Any]] = (),
        uses: int = 0,
    ) -> Episode:
        """See :meth:`EpisodicMemory.restore`."""
        return self._call(self.memory.restore, episode, grades=grades, uses=uses)

    def backfill(
        self, *, batch_size: int = 64, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """See :meth:`EpisodicMemory.backfill`."""
        return self._call(self.memory.backfill, batch_size=batch_size, progress=progress)

    def reembed(
        self, *, batch_size: int = 64, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """See :meth:`EpisodicMemory.reembed`."""
        return self._call(self.memory.reembed, batch_size=batch_size, progress=progress)

    # --- properties ---------------------------------------------------------------------------

    @property
    def namespace(self) -> str:
        return self.memory.namespace

    @property
    def max_episodes(self) -> int:
        return self.memory.max_episodes

    @property
    def max_age(self) -> timedelta | None:
        return self.memory.max_age

    @property
    def tz(self) -> tzinfo | str:
        return self.memory.tz

    @property
    def backend(self) -> MemoryProvider:
        return self.memory.backend

    @property
    def counters(self) -> Counters:
        """See :attr:`EpisodicMemory.counters`."""
        return self.memory.counters

    # --- lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the provider and stop the event-loop thread. Idempotent and thread-safe: the
        calls already running finish first, any later call raises ``ConfigurationError``, and
        a second ``close()`` (from any thread) returns once the first is done."""
        if threading.current_thread() is self._thread and self._pid == os.getpid():
            # From a callback of one of its own calls (a progress function): waiting for that
            # call to finish would wait for ever.
            raise ConfigurationError(
                "close() was called from inside one of this SyncEpisodicMemory's own calls "
                "(a progress callback?); close it after the call returns"
            )
        with self._state:
            if self._closing or self._closed:
                self._state.wait_for(lambda: self._closed)
                return
            self._closing = True
            if self._pid != os.getpid():
                if self._in_flight:
                    # Forked mid-call: the parent's calls never end here, and what the provider
                    # held crossed the fork only to be forgotten. Nothing of this process's
                    # own to close.
                    self._closed = True
                    self._state.notify_all()
                    return
                self._portal, self._thread = _start_loop(self._backend_name)
                self._pid = os.getpid()
            self._state.wait_for(lambda: self._in_flight == 0)
        try:
            self._portal.call(self.memory.backend.aclose)
        finally:
            self._stop()

    def _stop(self) -> None:
        try:
            self._portal.call(self._portal.stop)
            self._thread.join()
        finally:
            with self._state:
                self._closing = True
                self._closed = True
                self._state.notify_all()

    def _forked(self) -> None:
        """In a forked child, before any other thread exists: a fresh condition (the
        parent's may have been held by a thread that does not exist here)."""
        self._state = threading.Condition()

    def __reduce__(self) -> Any:
        # Its loop thread cannot travel; a spawned or forkserver worker makes its own.
        raise ConfigurationError(
            "a SyncEpisodicMemory cannot be pickled (multiprocessing spawn or forkserver): "
            "create it in each process from the same store"
        )

    def __enter__(self) -> SyncEpisodicMemory:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<SyncEpisodicMemory namespace={self.namespace!r} {state}>"


# Every facade of this process, given fresh locks in a forked child while it is still
# single-threaded.
_LIVE: weakref.WeakSet[SyncEpisodicMemory] = weakref.WeakSet()


def _after_fork() -> None:
    for facade in list(_LIVE):
        facade._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _start_loop(backend_name: str) -> tuple[Any, threading.Thread]:
    """An event loop in a daemon thread (a forgotten ``close()`` never blocks the interpreter's
    exit), serving calls through a blocking portal."""
    from anyio import run
    from anyio.from_thread import BlockingPortal

    ready = threading.Event()
    holder: dict[str, Any] = {}

    async def serve() -> None:
        async with BlockingPortal() as portal:
            holder["portal"] = portal
            ready.set()
            await portal.sleep_until_stopped()

    def main() -> None:
        try:
            run(serve, backend=backend_name)
        except BaseException as exc:  # reported to the constructor below
            holder["error"] = exc
            ready.set()

    thread = threading.Thread(target=main, name="deepcrew-episodic-sync", daemon=True)
    thread.start()
    ready.wait()
    if "error" in holder:
        raise ConfigurationError(
            f"cannot start an event loop on backend {backend_name!r}: {holder['error']}"
        ) from holder["error"]
    return holder["portal"], thread
