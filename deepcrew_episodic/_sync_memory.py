"""``SyncEpisodicMemory``: the same memory for code that does not ``await``.

Scripts, notebooks and WSGI applications call ``memory.recall(...)`` without an event loop of
their own. This facade owns one: a daemon thread runs an anyio event loop with a blocking portal,
and every method sends the matching :class:`EpisodicMemory` coroutine to it and waits for the
result. There is one implementation of the memory, the async one; this module only carries calls
across threads.
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from collections.abc import Callable, Coroutine
from datetime import timedelta, tzinfo
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from ._embed import Embedder
from ._exceptions import ConfigurationError
from ._log import Counters
from ._memory import EpisodicMemory
from ._redact import Redactor
from .providers._base import MemoryProvider

__all__ = ["SyncEpisodicMemory"]

T = TypeVar("T")
P = ParamSpec("P")
F = TypeVar("F", bound=Callable[..., Any])


def _blocking(
    method: Callable[Concatenate[EpisodicMemory, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[SyncEpisodicMemory, P], T]:
    """The facade's method for the coroutine *method* of :class:`EpisodicMemory`: the same
    signature and docstring, run on the facade's event loop, returning what it returns."""
    name = method.__name__

    def call(self: SyncEpisodicMemory, /, *args: P.args, **kwargs: P.kwargs) -> T:
        # Looked up on the memory, not *method* itself: a subclass's override is the one run.
        result: T = self._call(getattr(self.memory, name), *args, **kwargs)
        return result

    return _alike(call, method)


def _here(
    method: Callable[Concatenate[EpisodicMemory, P], T],
) -> Callable[Concatenate[SyncEpisodicMemory, P], T]:
    """The facade's method for *method*, a method of :class:`EpisodicMemory` without I/O:
    run in the caller's thread."""
    name = method.__name__

    def call(self: SyncEpisodicMemory, /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = getattr(self.memory, name)(*args, **kwargs)
        return result

    return _alike(call, method)


def _alike(call: F, method: Callable[..., Any]) -> F:
    # help() and inspect.signature() show *method*'s signature (through __wrapped__) and docs.
    functools.update_wrapper(call, method)
    call.__module__ = __name__
    call.__qualname__ = f"SyncEpisodicMemory.{method.__name__}"
    return call


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
        """See :meth:`EpisodicMemory.namespaces`: the namespaces holding a log in this memory's
        store (its connection belongs to this facade's event loop), sorted."""
        return self._call(EpisodicMemory.namespaces, self.memory.backend)

    # --- the memory's methods: each coroutine becomes a call that waits for its result ------

    record = _blocking(EpisodicMemory.record)
    reflect = _blocking(EpisodicMemory.reflect)
    recall = _blocking(EpisodicMemory.recall)
    explain = _blocking(EpisodicMemory.explain)
    history = _blocking(EpisodicMemory.history)
    refresh = _blocking(EpisodicMemory.refresh)
    load = _blocking(EpisodicMemory.load)
    page = _blocking(EpisodicMemory.page)
    latest = _blocking(EpisodicMemory.latest)
    stats = _blocking(EpisodicMemory.stats)
    select = _blocking(EpisodicMemory.select)
    forget = _blocking(EpisodicMemory.forget)
    sweep = _blocking(EpisodicMemory.sweep)
    shrink = _blocking(EpisodicMemory.shrink)
    clear = _blocking(EpisodicMemory.clear)
    grade = _blocking(EpisodicMemory.grade)
    grades = _blocking(EpisodicMemory.grades)
    used = _blocking(EpisodicMemory.used)
    uses = _blocking(EpisodicMemory.uses)
    restore = _blocking(EpisodicMemory.restore)
    backfill = _blocking(EpisodicMemory.backfill)
    reembed = _blocking(EpisodicMemory.reembed)

    # Without I/O: run in the caller's thread, on what the memory last read.
    check = _here(EpisodicMemory.check)
    render = _here(EpisodicMemory.render)
    fit = _here(EpisodicMemory.fit)
    is_expired = _here(EpisodicMemory.is_expired)
    searched_text = _here(EpisodicMemory.searched_text)
    recorded_at = _here(EpisodicMemory.recorded_at)

    # --- properties ---------------------------------------------------------------------------

    @property
    def namespace(self) -> str:
        """See :attr:`EpisodicMemory.namespace`."""
        return self.memory.namespace

    @property
    def max_episodes(self) -> int:
        """See :attr:`EpisodicMemory.max_episodes`."""
        return self.memory.max_episodes

    @property
    def recall_k(self) -> int:
        """See :attr:`EpisodicMemory.recall_k`."""
        return self.memory.recall_k

    @property
    def reflect_model(self) -> str | None:
        """See :attr:`EpisodicMemory.reflect_model`."""
        return self.memory.reflect_model

    @property
    def max_age(self) -> timedelta | None:
        """See :attr:`EpisodicMemory.max_age`."""
        return self.memory.max_age

    @property
    def tz(self) -> tzinfo | str:
        """See :attr:`EpisodicMemory.tz`."""
        return self.memory.tz

    @property
    def redactor(self) -> Redactor | None:
        """See :attr:`EpisodicMemory.redactor`."""
        return self.memory.redactor

    @property
    def backend(self) -> MemoryProvider:
        """See :attr:`EpisodicMemory.backend`."""
        return self.memory.backend

    @property
    def counters(self) -> Counters:
        """See :attr:`EpisodicMemory.counters`."""
        return self.memory.counters

    @property
    def embedder(self) -> Embedder | Callable[..., Any] | None:
        """See :attr:`EpisodicMemory.embedder`."""
        return self.memory.embedder

    @property
    def embedder_name(self) -> str | None:
        """See :attr:`EpisodicMemory.embedder_name`."""
        return self.memory.embedder_name

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
