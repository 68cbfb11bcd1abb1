"""Open a store from a short string: ``open_provider("episodes.db")``.

Which provider a spec names, decided in one place (the command line uses it too):

=====================================================  ==============================================
spec                                                   provider
=====================================================  ==============================================
``memory:``                                            :class:`InMemoryProvider` (empty, per process)
a path ending in ``.json``                             :class:`FileMemoryProvider`
a path ending in ``.db``, ``.sqlite``, ``.sqlite3``    :class:`SQLiteMemoryProvider`
``redis://``, ``rediss://``, ``unix://`` URLs          :class:`RedisMemoryProvider`
``redis+cluster://``, ``rediss+cluster://`` URLs       :class:`RedisMemoryProvider` with ``cluster=True``
``postgresql://``, ``postgres://`` URLs                :class:`PostgresMemoryProvider` (``?schema=``: its schema)
=====================================================  ==============================================

A scheme is matched before a suffix, so ``redis://host/0?client_name=bot.json`` is Redis. A
cluster is named by its scheme, not by a ``?cluster=true`` parameter: the kind of store stays
visible where the dispatch reads it, and the URL reaches redis-py unedited (``cluster=`` in a
query is refused with that hint, since redis-py would pass it on to every connection).

:func:`register_provider` adds a scheme or a suffix (mem0's factory, in a few lines). Optional
dependencies load only when their kind is opened: redis-py for a Redis URL, psycopg for a
PostgreSQL URL (a missing one raises
:class:`~deepcrew_episodic.MissingDependencyError` with the ``pip install`` command), sqlite3 for
a SQLite file. No error message carries the password of a URL.
"""

from __future__ import annotations

import re
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl

from .._exceptions import ConfigurationError, MissingDependencyError, StorageError
from ._base import MemoryProvider, check_regular
from ._secrets import _redacted, _scrubbed

__all__ = ["ProviderFactory", "open_provider", "register_provider"]


class ProviderFactory(Protocol):
    """Builds the provider for *spec*. ``create=False`` means the store must already exist;
    *options* are the keyword arguments given to :func:`open_provider`."""

    def __call__(self, spec: str, *, create: bool, **options: Any) -> MemoryProvider: ...


# A scheme is two characters or more, so that a Windows drive ("C:\\...") stays a path.
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]+):")
_KINDS = (
    "expected a path ending in .json, .db, .sqlite or .sqlite3, a redis://, rediss://, "
    "unix:// or redis+cluster:// URL, a postgresql:// URL, or memory:"
)


def _memory(spec: str, *, create: bool, **options: Any) -> MemoryProvider:
    from ._dict import InMemoryProvider

    if spec != "memory:":
        raise ConfigurationError(f"the memory store takes no path: use 'memory:', not {spec!r}")
    _no_options("memory:", options)
    return InMemoryProvider()


def _json(spec: str, *, create: bool, **options: Any) -> MemoryProvider:
    from ._file import FileMemoryProvider

    _check_file(spec, create, "JSON")
    return FileMemoryProvider(spec, **options)


def _sqlite(spec: str, *, create: bool, **options: Any) -> MemoryProvider:
    _check_file(spec, create, "SQLite")
    try:
        from ._sqlite import SQLiteMemoryProvider
    except ModuleNotFoundError as exc:
        if exc.name != "sqlite3":
            raise
        raise MissingDependencyError(
            f"{spec}: a SQLite store needs Python's sqlite3 module, which this Python was "
            f"built without; use a .json file or a redis:// URL"
        ) from exc
    return SQLiteMemoryProvider(spec, **options)


def _redis(spec: str, *, create: bool, **options: Any) -> MemoryProvider:
    scheme = spec.partition(":")[0].lower()
    cluster = scheme.endswith("+cluster")
    if any(key.lower() == "cluster" for key, _ in _query(spec)):
        raise ConfigurationError(
            f"{_redacted(spec)}: name a Redis Cluster by its scheme, redis+cluster:// or "
            f"rediss+cluster://, not by a 'cluster' parameter"
        )
    # redis-py reads a lower-case scheme only (URL schemes are case-insensitive).
    spec = scheme.removesuffix("+cluster") + spec[len(scheme) :]
    if cluster:
        options = {**options, "cluster": True}
    from ._redis import RedisMemoryProvider  # raises MissingDependencyError with the hint

    return RedisMemoryProvider(spec, **options)


def _postgres(spec: str, *, create: bool, **options: Any) -> MemoryProvider:
    # raises MissingDependencyError with the hint
    from ._postgres import PostgresMemoryProvider, split_schema

    dsn, schema = split_schema(spec)  # ?schema=NAME is ours: libpq never sees it
    if schema is not None:
        if "schema" in options:
            raise ConfigurationError(
                "give the schema in the URL (?schema=) or as schema=, not both"
            )
        options = {**options, "schema": schema}
    return PostgresMemoryProvider(dsn, **options)


_SCHEMES: dict[str, ProviderFactory] = {
    "memory": _memory,
    "redis": _redis,
    "rediss": _redis,
    "unix": _redis,
    "redis+cluster": _redis,
    "rediss+cluster": _redis,
    "postgresql": _postgres,
    "postgres": _postgres,
}
_SUFFIXES: dict[str, ProviderFactory] = {
    ".json": _json,
    ".db": _sqlite,
    ".sqlite": _sqlite,
    ".sqlite3": _sqlite,
}


def register_provider(scheme_or_suffix: str, factory: ProviderFactory) -> None:
    """Make :func:`open_provider` build a provider with *factory* for a scheme (``"mongo:"``
    or ``"mongo://"``: any spec starting ``mongo:``) or a file suffix (``".lmdb"``). A later
    registration replaces an earlier one, the built-in kinds included.

    *factory* is called as ``factory(spec, create=..., **options)`` and returns a
    :class:`MemoryProvider`.

    Example::

        register_provider("mongo://", lambda spec, *, create, **options: MongoProvider(spec))
        backend = open_provider("mongo://db.internal/agents")
    """
    if not callable(factory):
        raise ConfigurationError(f"factory must be callable, not {type(factory).__name__}")
    name = scheme_or_suffix if isinstance(scheme_or_suffix, str) else ""
    if name.startswith(".") and len(name) > 1 and "/" not in name:
        _SUFFIXES[name.lower()] = factory
        return
    scheme = name.removesuffix("//").removesuffix(":")
    if _SCHEME.fullmatch(scheme + ":") is None:
        raise ConfigurationError(
            f"register_provider: {scheme_or_suffix!r} is neither a scheme ('name:' or "
            f"'name://', two characters or more) nor a file suffix ('.ext')"
        )
    _SCHEMES[scheme.lower()] = factory


def open_provider(
    spec: str, *, create: bool = True, snapshot: bool = False, **options: Any
) -> MemoryProvider:
    """The provider *spec* names (see the module docstring for the kinds), not yet connected:
    use it as an async context manager, or call ``aclose()``.

    ``create=False`` refuses a file store that does not exist (:class:`StorageError`, the
    ``FileNotFoundError`` as its cause) instead of starting an empty one, so a typo in a path
    does not look like an empty memory; it creates nothing, not even a lock file.

    ``snapshot=True`` (JSON files only) reads the file once, now, on the calling thread, into
    an :class:`InMemoryProvider`: what a read-only tool wants. It holds no lock afterwards and
    needs no event loop (every call on it completes at once), and nothing written to it
    reaches the file. Call it before an event loop starts or from a worker thread.

    *options* go to the provider's constructor (``fsync=True`` for a JSON file,
    ``prefix=`` or ``max_connections=`` for Redis, ``schema=`` for PostgreSQL). An unknown spec raises
    :class:`ConfigurationError` listing the kinds; no message carries a URL's password.

    Example::

        async with open_provider("episodes.db") as backend:
            memory = await EpisodicMemory.open(backend, namespace="support")
    """
    if not isinstance(spec, str) or not spec.strip():
        shown = repr(spec) if isinstance(spec, str) else type(spec).__name__
        raise ConfigurationError(f"a store spec must be a non-empty string, not {shown}")
    factory = _factory(spec)
    if snapshot:
        if factory is not _json:
            raise ConfigurationError(
                f"snapshot=True reads a JSON file store; {_redacted(spec)!r} is not one"
            )
        _no_options("a snapshot", options)
        return _snapshot(spec)
    try:
        return factory(spec, create=create, **options)
    except ConfigurationError as exc:
        # A provider may quote the URL it was given: what reaches the caller never holds
        # its password.
        clean = _scrubbed(str(exc), spec)
        if clean == str(exc):
            raise
        raise ConfigurationError(clean) from None


def _factory(spec: str) -> ProviderFactory:
    found = _SCHEME.match(spec)
    if found is not None:
        factory = _SCHEMES.get(found.group(1).lower())
        if factory is not None:
            return factory
        if spec[found.end() :].startswith("//"):
            raise ConfigurationError(f"unknown store kind '{found.group(1)}://...'; {_KINDS}")
    lowered = spec.lower()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if lowered.endswith(suffix):
            return _SUFFIXES[suffix]
    raise ConfigurationError(f"unknown store {_redacted(spec)!r}; {_KINDS}")


def _check_file(spec: str, create: bool, kind: str) -> None:
    path = Path(spec)
    if path.is_dir():
        raise StorageError(f"{spec} is a directory, not a {kind} store")
    check_regular(spec, f"{kind} store")  # a FIFO, a socket, a device
    if not create and not path.exists():
        raise StorageError(
            f"no store at {spec}: the file does not exist (check the path)"
        ) from FileNotFoundError(2, "No such file or directory", spec)


def _snapshot(spec: str) -> MemoryProvider:
    from ._dict import InMemoryProvider
    from ._file import read_file_store

    _check_file(spec, False, "JSON")
    copy = InMemoryProvider()
    _complete(copy.write(read_file_store(spec)))
    return copy


def _complete(coro: Coroutine[Any, Any, None]) -> None:
    # InMemoryProvider's methods never suspend: run one to its end without an event loop.
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    raise RuntimeError("an in-memory write suspended")


def _no_options(what: str, options: dict[str, Any]) -> None:
    if options:
        raise ConfigurationError(f"{what} takes no options, got {sorted(options)}")


def _query(spec: str) -> list[tuple[str, str]]:
    return parse_qsl(spec.partition("?")[2].partition("#")[0], keep_blank_values=True)
