"""A Redis provider on redis-py's asyncio client, for a single server or a Redis Cluster.

Every redis error is translated to :class:`StorageError` in :func:`_translated`, with the
original kept as ``__cause__``. redis-py's client is asyncio-only, so this provider is too.

Redis Cluster (``cluster=True``): a batch read (MGET) and a transaction (MULTI/EXEC) must touch
keys of one hash slot. So in cluster mode each key carries a hash tag made of its first two
``:``-separated segments (cut before any ``}``): ``episodic:ns:e:5`` is stored as
``<prefix>{episodic:ns}:e:5``. Every key of one episodic namespace therefore lives in one slot,
and the episode log's reads and writes stay single batches and atomic transactions; different
namespaces spread over the cluster. A ``write`` that spans several slots (keys of several
namespaces) is one transaction per slot. ``keys(prefix)`` scans every master. A
``write_if`` or ``increment_and_write`` is one Lua script, so all its keys must share a slot
(they do when they belong to one namespace); otherwise it raises :class:`ConfigurationError`.

Keys and values go to redis-py with ``encoding_errors="surrogateescape"``: stored bytes that are
not UTF-8 come back as lone surrogates instead of failing the whole read, and such a string
passed back refers to the original bytes (so an undecodable record can be deleted). A client
passed in as *client* keeps its own settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import threading
import weakref
from collections.abc import (
    AsyncIterator,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager, nullcontext
from typing import Any, TypeVar

# redis-py is asyncio-only: anyio's asyncio backend is loaded with this module, not by the
# first recall's thread hop (about 25 ms in a fresh process).
import anyio._backends._asyncio
import anyio.to_thread

from .._exceptions import (
    ConfigurationError,
    CorruptDataError,
    MissingDependencyError,
    StorageError,
    StorageTimeoutError,
    StorageUnavailableError,
)
from . import _redis_index as index
from ._base import Fresh, MemoryProvider, Then, cache_size

try:
    import redis.asyncio as redis_asyncio
    from redis import exceptions as redis_exceptions
    from redis.asyncio.cluster import RedisCluster
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError(
        "RedisMemoryProvider needs redis-py: pip install 'deepcrew-episodic[redis]'"
    ) from exc

__all__ = ["RedisMemoryProvider"]

T = TypeVar("T")

log = logging.getLogger("deepcrew_episodic")

# Create the counter at `initial` when absent or "" (one that is not ASCII digits, at most 18 of
# them, is set to `repair` when one is given, and refused otherwise), then INCR it: one atomic
# step on the server. Returns the new value followed by the values of KEYS[2..] (the keys
# increment_and_write reads).
_INCREMENT = """
local current = redis.call('GET', KEYS[1])
if not current or current == '' then
  redis.call('SET', KEYS[1], ARGV[1])
elseif #current > 18 or not string.match(current, '^%d+$') then
  if ARGV[2] == '' then
    return redis.error_reply('ERR counter is not an integer of at most 18 digits')
  end
  redis.call('SET', KEYS[1], ARGV[2])
end
local reply = {redis.call('INCR', KEYS[1])}
for i = 2, #KEYS do
  reply[i] = redis.call('GET', KEYS[i])
end
return reply
"""
# The compare-and-set over several keys, which keeps the recall index: see _redis_index.py.
_WRITE_IF = index.WRITE_IF
_SCAN_BATCH = 1000
# redis-py 7+ reads its own version from the package metadata (the disk) for every connection it
# opens, on the event loop's thread, unless it is given its driver info: built once, here.
try:
    from redis import __version__ as _REDIS_VERSION
    from redis.driver_info import DriverInfo

    _DRIVER: dict[str, Any] = {"driver_info": DriverInfo(lib_version=_REDIS_VERSION)}
except ImportError:  # pragma: no cover - redis-py before 7 has no driver info
    _DRIVER = {}
_GLOB = re.compile(r"([*?\[\]\\])")


class RedisMemoryProvider(MemoryProvider):
    """Keeps every key as a Redis string under *prefix*.

    Parameters
    ----------
    url:
        A ``redis://`` or ``rediss://`` URL.
    prefix:
        Prepended to every key; deepcrew-ai's default, so its logs are read in place.
    client:
        An existing ``redis.asyncio.Redis`` (or ``redis.asyncio.cluster.RedisCluster``) to use
        instead of connecting to *url*. It is not closed by :meth:`aclose`.
    max_connections:
        Size of the connection pool; more concurrent calls wait for a free connection. On a
        cluster, at most this many commands are in flight at once.
    cluster:
        Connect to a Redis Cluster through any of its nodes (*url*), with redis-py's cluster
        client, and tag every key so that each namespace lives in one hash slot (see the
        module docstring). Implied when *client* is a ``RedisCluster``.
    recall_cache_bytes:
        The most this provider keeps, for all its namespaces together, of what recalls read
        from the index (postings, facts, decoded episodes), reused by the next recall while
        the namespace's log and index have not changed (32 MiB by default; ``0``: nothing is
        kept).

    Example::

        async with RedisMemoryProvider("redis://localhost:6379/0") as backend:
            memory = EpisodicMemory(backend, namespace="support")

        async with RedisMemoryProvider("redis://10.0.0.5:7000", cluster=True) as backend:
            memory = EpisodicMemory(backend, namespace="support")
    """

    shared_across_processes = True
    recall_index = True
    # A script that increments and reads, then a compare-and-set: two steps (see
    # increment_and_write), so a stalled writer's episode can land below the ring.
    atomic_increment_and_write = False

    def __init__(
        self,
        url: str = "redis://localhost:6379/0",
        *,
        prefix: str = "deepcrew:",
        client: Any | None = None,
        max_connections: int = 32,
        cluster: bool = False,
        recall_cache_bytes: int = 32 << 20,
    ) -> None:
        if not isinstance(url, str):
            raise ConfigurationError(f"url must be a redis:// URL string, not {type(url).__name__}")
        if not isinstance(prefix, str):
            raise ConfigurationError(f"prefix must be a string, not {type(prefix).__name__}")
        self.recall_cache_bytes = cache_size(recall_cache_bytes)
        self._prefix = prefix
        self._pattern_prefix = _GLOB.sub(r"\\\1", prefix)
        self._cluster = cluster or isinstance(client, RedisCluster)
        if self._cluster and ("{" in prefix or "}" in prefix):
            raise ConfigurationError(
                f"prefix {prefix!r} contains a brace; in cluster mode braces would change "
                f"the hash tag that keeps a namespace in one slot"
            )
        self._url, self._max_connections = url, max_connections
        if client is not None:
            self._client = client
            self._owns_client = False
        else:
            self._client = self._connect()
            self._owns_client = True
        # The recall index is read in a worker thread through a synchronous client made from
        # the same settings; for a client passed in whose settings cannot be carried over,
        # this provider keeps no index reader (recall reads the log in process).
        self._sync_settings = self._sync_factory()
        if self._sync_settings is None:
            # Declared per instance: the class declares it, this client cannot honour it.
            setattr(self, "recall_index", False)  # noqa: B010 - a ClassVar, shadowed here
        self._sync_lock = threading.Lock()
        self._sync_client: Any = None
        self._sync_pid = 0
        self._fresh_state()
        # Clients inherited from the parent in a forked child: kept, never used or closed
        # (their sockets are the parent's, and closing one from here would break its stream).
        self._inherited: list[Any] = []
        _LIVE.add(self)

    def _connect(self) -> Any:
        url, max_connections = self._url, self._max_connections
        if self._cluster:
            if not url.startswith(("redis://", "rediss://")):
                raise ConfigurationError(
                    f"not a redis cluster URL: {_shown(url)!r} (expected redis://host:port of any node)"
                )
            try:
                return RedisCluster.from_url(
                    url,
                    decode_responses=True,
                    encoding_errors="surrogateescape",
                    max_connections=max_connections,
                    **_DRIVER,
                )
            except (ValueError, redis_exceptions.RedisClusterException) as exc:
                raise ConfigurationError(
                    f"invalid redis cluster URL {_shown(url)!r}: {_hide(str(exc), url)}"
                ) from exc
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigurationError(
                f"not a redis URL: {_shown(url)!r} (expected redis://host:port/db or rediss://...)"
            )
        try:
            # A blocking pool makes a burst of concurrent calls wait for a connection
            # instead of failing with "Too many connections".
            pool = redis_asyncio.BlockingConnectionPool.from_url(
                url,
                decode_responses=True,
                encoding_errors="surrogateescape",
                max_connections=max_connections,
                **_DRIVER,
            )
            return redis_asyncio.Redis(connection_pool=pool)
        except ValueError as exc:
            raise ConfigurationError(
                f"invalid redis URL {_shown(url)!r}: {_hide(str(exc), url)}"
            ) from exc

    def _fresh_state(self) -> None:
        """The locks and scripts bound to the client (and, once used, to an event loop)."""
        # A cluster client fails a command when a node's pool is full instead of waiting,
        # so in-flight commands are capped here; the single-node pool blocks by itself.
        self._gate: AbstractAsyncContextManager[Any] = (
            asyncio.Semaphore(self._max_connections) if self._cluster else nullcontext()
        )
        self._ready = not self._cluster
        self._init_lock = asyncio.Lock()
        self._settings: list[str] | None = None
        self._increment = _Script(self._client, _INCREMENT)
        self._write_if = _Script(self._client, _WRITE_IF)

    def _forked(self) -> None:
        """In a forked child: a client of its own. The parent's connections are its own
        (two processes on one socket would read each other's replies) and its locks belong
        to the parent's event loop. A client given by the caller is the caller's to renew."""
        # The index reader's client is this provider's own, made again on first use.
        self._sync_lock = threading.Lock()
        self._sync_client = None
        if not self._owns_client:
            return
        for connection in _connections(self._client):
            _disown(connection)
        self._inherited.append(self._client)
        self._client = self._connect()
        self._fresh_state()

    @property
    def client(self) -> Any:
        """The underlying ``redis.asyncio`` client."""
        return self._client

    def _key(self, key: str) -> str:
        if self._cluster:
            tag, rest = _split_tag(key)
            return f"{self._prefix}{{{tag}}}{rest}"
        return self._prefix + key

    def _unkey(self, full: str) -> str | None:
        """The key a stored key stands for; ``None`` for a key this provider did not write."""
        rest = full[len(self._prefix) :]
        if not self._cluster:
            return rest
        close = rest.find("}")
        if not rest.startswith("{") or close < 0:
            return None
        return rest[1:close] + rest[close + 1 :]

    def _scan_pattern(self, prefix: str) -> str:
        if not self._cluster:
            return self._pattern_prefix + _GLOB.sub(r"\\\1", prefix) + "*"
        tag, rest = _split_tag(prefix)
        if rest:  # the prefix fixes the whole tag
            return f"{self._pattern_prefix}{{{_glob(tag)}}}{_glob(rest)}*"
        # The tag of a matching key starts with the prefix (a prefix without a second ':'
        # or a '}' cannot end the tag early); the filter in keys() settles the rest.
        return f"{self._pattern_prefix}{{{_glob(prefix)}*"

    @asynccontextmanager
    async def _call(self, op: str, key: str) -> AsyncIterator[None]:
        async with _guarded(self._gate, op, key):
            if not self._ready:
                await self._initialize()
            yield

    async def _initialize(self) -> None:
        # A cold cluster client hit by a burst of concurrent first commands fails inside
        # redis-py (each one starts discovering the nodes); one discovery, awaited by all.
        async with self._init_lock:
            if not self._ready:
                await self._client.initialize()
                self._ready = True

    def _one_slot(self, op: str, full: list[str]) -> None:
        """A script runs on one node: in cluster mode its keys must share a hash slot."""
        if self._cluster and len({self._client.keyslot(k) for k in full}) > 1:
            raise ConfigurationError(
                f"redis cluster {op}: the keys {full[:4]!r}... are in different hash slots; "
                f"one call may only touch keys of one namespace"
            )

    # --- the contract, and the batch writes redis does in fewer round trips ------------------

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        if not keys:
            return []
        full = [self._key(k) for k in keys]
        async with self._call("MGET", keys[0]):
            if self._cluster:
                # One MGET per slot touched: a namespace's keys are one slot, one MGET.
                values = await self._client.mget_nonatomic(full)
            else:
                values = await self._client.mget(full)
        return [_text(v) for v in values]

    async def read_revised(
        self, prefix: str, keys: Sequence[str]
    ) -> tuple[list[str | None], str | None]:
        """The values of *keys* and the revision of the namespace's recall index, in one
        ``MGET`` (the revision key lives in the namespace's slot): every script that changes
        the index sets it to a new random token."""
        if not self.recall_index or not keys:
            return await super().read_revised(prefix, keys)
        namespace = prefix[len("episodic:") : -1]
        full = [self._key(k) for k in keys]
        full.append(self._index_base(namespace) + index.REVISION)
        async with self._call("MGET", keys[0]):
            if self._cluster:
                values = await self._client.mget_nonatomic(full)
            else:
                values = await self._client.mget(full)
        found = [_text(v) for v in values]
        return found[:-1], "r" + (found[-1] or "")

    async def write(self, items: Mapping[str, str], delete: Collection[str] = ()) -> None:
        doomed_keys = [k for k in delete if k not in items]
        if not items and not doomed_keys:
            return
        first = next(iter(items), None) or next(iter(delete))
        if not self._cluster:
            ops = index.upkeep(self._index_base, items, doomed_keys)
            stored = {self._key(k): v for k, v in items.items()}
            await self._transaction(first, stored, [self._key(k) for k in doomed_keys], ops)
            return
        # A cluster transaction is confined to one slot: one per slot touched (a single one
        # for the keys of one namespace, which share their hash tag).
        by_slot: dict[int, tuple[dict[str, str], list[str]]] = {}
        for key, value in items.items():
            by_slot.setdefault(self._client.keyslot(self._key(key)), ({}, []))[0][key] = value
        for key in doomed_keys:
            by_slot.setdefault(self._client.keyslot(self._key(key)), ({}, []))[1].append(key)
        for slot_items, slot_doomed in by_slot.values():
            ops = index.upkeep(self._index_base, slot_items, slot_doomed)
            stored = {self._key(k): v for k, v in slot_items.items()}
            await self._transaction(first, stored, [self._key(k) for k in slot_doomed], ops)

    async def _transaction(
        self, first: str, stored: dict[str, str], doomed: list[str], ops: list[str]
    ) -> None:
        if self._cluster or ops:
            # One script (its keys share a slot on a cluster): as atomic as MULTI/EXEC, it
            # keeps the recall index in the same step, and it keeps off redis-py's cluster
            # transactions, which join a thread per command on the event loop's thread.
            keys = [*stored, *doomed]
            args: list[str | int] = [0, len(stored), *stored.values(), *ops]
            async with self._call("EVALSHA write", first):
                await self._write_if(keys=keys, args=args)
            return
        async with (
            self._call("MULTI/EXEC", first),
            self._client.pipeline(transaction=True) as pipe,
        ):
            if stored:
                pipe.mset(stored)
            if doomed:
                pipe.unlink(*doomed)
            await pipe.execute()

    async def delete(self, keys: Iterable[str]) -> None:
        wanted = list(keys)
        if index.has_records(wanted):
            # Episode and grade records leave the recall index in the step that deletes them.
            groups: dict[int, list[str]] = {}
            for key in wanted:
                slot = self._client.keyslot(self._key(key)) if self._cluster else 0
                groups.setdefault(slot, []).append(key)
            for group in groups.values():
                for start in range(0, len(group), _SCAN_BATCH):
                    await self.write({}, group[start : start + _SCAN_BATCH])
            return
        full = [self._key(k) for k in wanted]
        for start in range(0, len(full), _SCAN_BATCH):
            batch = full[start : start + _SCAN_BATCH]
            async with self._call("UNLINK", batch[0]):
                await self._client.unlink(*batch)

    async def keys(self, prefix: str) -> list[str]:
        pattern = self._scan_pattern(prefix)
        found: list[str] = []
        async with self._call("SCAN", prefix):
            # On a cluster, scan_iter walks every master in turn.
            async for full in self._client.scan_iter(match=pattern, count=_SCAN_BATCH):
                key = self._unkey(_text(full))  # type: ignore[arg-type]
                if key is not None and key.startswith(prefix) and not self._indexes(key):
                    found.append(key)
        found.sort()
        return found

    async def _increment_and_read(
        self, key: str, read: Sequence[str], initial: int, repair: int | None
    ) -> tuple[int, dict[str, str | None]]:
        full = [self._key(key), *(self._key(k) for k in read)]
        self._one_slot("increment_and_write", full)
        args = [initial, "" if repair is None else repair]
        try:
            async with self._call("INCR", key):
                reply = await self._increment(keys=full, args=args)
        except StorageError as exc:
            if "not an integer" in str(exc.__cause__):
                raise CorruptDataError(f"counter {key!r} does not hold an integer") from exc
            raise
        return int(reply[0]), {k: _text(v) for k, v in zip(read, reply[1:], strict=True)}

    async def write_if(
        self,
        expect: Mapping[str, str | None],
        items: Mapping[str, str],
        delete: Collection[str] = (),
    ) -> bool:
        if not expect:
            await self.write(items, delete)
            return True
        doomed = [k for k in delete if k not in items]
        full = [self._key(k) for k in (*expect, *items, *doomed)]
        self._one_slot("write_if", full)
        args: list[str | int] = [len(expect), len(items)]
        args += ["0" if v is None else "1" + v for v in expect.values()]
        args += list(items.values())
        args += index.upkeep(self._index_base, items, doomed)
        async with self._call("EVALSHA write_if", next(iter(expect))):
            return bool(await self._write_if(keys=full, args=args))

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
        # Two scripts: the increment reads the keys `then` depends on, the write checks they
        # still hold those values (and is retried with fresh ones when they changed). The keys
        # the new value names are taken as absent, and read only when the check fails.
        value, values = await self._increment_and_read(key, list(read), initial, repair)
        named = [k for k in (fresh(value) if fresh else ()) if k not in values]
        values.update(dict.fromkeys(named))
        wanted = list(values)
        while True:
            items, delete = then(value, values)
            if await self.write_if(values, items, delete):
                return value
            values = dict(zip(wanted, await self.retrieve_many(wanted), strict=True))

    async def unsafe_settings(self) -> list[str]:
        """A server whose ``maxmemory-policy`` may evict keys without a TTL (``allkeys-*``)
        can drop a log's counters and episodes. Asked once (``CONFIG GET``); a server that
        refuses the command (a managed service, an ACL) is taken as unknown."""
        if self._settings is None:
            try:
                async with self._call("CONFIG GET", "maxmemory-policy"):
                    reply = await self._client.config_get("maxmemory-policy")
            except StorageError as exc:
                log.debug("redis CONFIG GET maxmemory-policy refused; not checked: %s", exc)
                self._settings = []
                return []
            policies = {_text(v) or "" for v in _config_values(reply, "maxmemory-policy")}
            self._settings = [
                f"the redis server's maxmemory-policy is {policy!r}: when it reaches maxmemory "
                f"it evicts any key, a log's counters and episodes among them; use "
                f"'noeviction' (or a volatile-* policy: the log's keys have no TTL)"
                for policy in sorted(policies)
                if policy.startswith("allkeys-")
            ]
        return list(self._settings)

    async def clear(self) -> None:
        """Remove every entry of this provider (all namespaces), their recall indexes too."""
        await super().clear()
        pattern = index.index_keys_pattern(self._pattern_prefix)
        async with self._call("SCAN", "ix:"):
            found = [
                _text(k) async for k in self._client.scan_iter(match=pattern, count=_SCAN_BATCH)
            ]
        for key in found:  # one by one: on a cluster they lie in the slots of many namespaces
            async with self._call("UNLINK", "ix:"):
                await self._client.unlink(key)

    # --- the recall index ---------------------------------------------------------------

    def _index_base(self, namespace: str) -> str:
        """Where the recall index of *namespace* lives: in its log's hash slot, under a key
        form ``keys()`` never lists (see _redis_index.py)."""
        tag, rest = _split_tag(f"episodic:{namespace}")
        return f"{self._prefix}ix:{len(namespace)}{{{tag}}}{rest}:"

    def _indexes(self, key: str) -> bool:
        """Whether *key* (as ``keys()`` would return it) is an index key (a single server
        lists every key under the prefix; a cluster's index keys never look like ours)."""
        return not self._cluster and index.is_index_key(key)

    async def read_index(self, prefix: str, fn: Callable[[Any], T]) -> T:
        """Run ``fn(reader)`` in a worker thread with an
        :class:`~deepcrew_episodic._index.IndexReader` on a synchronous client, for the
        namespace whose keys start with *prefix* (``episodic:<ns>:``). Records above the
        index's watermarks (written by an older version, or outside the library) are indexed
        first. Each read is one script, atomic on its own; a search that finds the index
        changed under it between two reads raises ``StaleIndexError``."""
        if not self.recall_index:
            return await super().read_index(prefix, fn)
        namespace = prefix[len("episodic:") : -1]
        base, log_prefix = self._index_base(namespace), self._key(prefix)

        def run() -> T:
            with _sync_translated("recall", prefix):
                reader = index.RedisIndexReader(self._sync(), base, log_prefix)
                reader.catch_up(namespace)
                return fn(reader)

        return await anyio.to_thread.run_sync(run)

    def _sync_factory(self) -> Callable[[], Any] | None:
        """How to make the synchronous client the index reader uses (``None``: it cannot be
        made from the client passed in; said in the log)."""
        import redis as redis_sync
        from redis.cluster import ClusterNode
        from redis.cluster import RedisCluster as SyncCluster

        common: dict[str, Any] = {
            "decode_responses": True,
            "encoding_errors": "surrogateescape",
            **_DRIVER,
        }
        if self._owns_client:
            url = self._url
            if self._cluster:
                return lambda: SyncCluster.from_url(url, **common)
            return lambda: redis_sync.Redis.from_url(url, **common)
        client = self._client
        try:
            if isinstance(client, RedisCluster):
                found = _carried(client.connection_kwargs)
                nodes = [
                    ClusterNode(n.host, n.port)  # type: ignore[no-untyped-call]
                    for n in client.startup_nodes
                ]
                if found is None or not nodes:
                    raise ValueError("it authenticates through a credential provider")
                cluster_settings = found
                return lambda: SyncCluster(startup_nodes=nodes, **cluster_settings, **common)
            pool = client.connection_pool
            found = _carried(pool.connection_kwargs)
            kind = _SYNC_CONNECTIONS.get(pool.connection_class.__name__)
            if found is None:
                raise ValueError("it authenticates through a credential provider")
            if kind is None:
                raise ValueError(f"its connections are {pool.connection_class.__name__}")
            settings = found
            connection_class = getattr(redis_sync, kind)
            connection_class(**settings, **common)  # checks the settings; opens nothing
            return lambda: redis_sync.Redis(
                connection_pool=redis_sync.ConnectionPool(
                    connection_class=connection_class, **settings, **common
                )
            )
        except (AttributeError, TypeError, ValueError) as exc:
            log.warning(
                "redis: no recall index reader for the client passed in (%s); recall reads "
                "the log in this process (pass a URL instead to recall from the store)",
                exc,
            )
            return None

    def _sync(self) -> Any:
        """The synchronous client of this process (made on first use, again after a fork)."""
        with self._sync_lock:
            if self._sync_client is None or self._sync_pid != os.getpid():
                assert self._sync_settings is not None
                self._sync_client = self._sync_settings()
                self._sync_pid = os.getpid()
            return self._sync_client

    async def aclose(self) -> None:
        sync, self._sync_client = self._sync_client, None
        if sync is not None and self._sync_pid == os.getpid():
            await anyio.to_thread.run_sync(_close_sync_client, sync)
        if self._owns_client:
            async with _translated("CLOSE", ""):
                await self._client.aclose()
                if not self._cluster:
                    await self._client.connection_pool.disconnect()


class _Script:
    """A Lua script run by its SHA, and sent whole (EVAL) to a server that does not know it.

    redis-py's ``register_script`` answers NOSCRIPT with a SCRIPT LOAD to every node, which
    races with the commands in flight on a cluster client (a concurrent burst of first calls
    fails inside redis-py); EVAL caches the script on the node that needs it, in one step.
    """

    def __init__(self, client: Any, source: str) -> None:
        self._client = client
        self._source = source
        self._sha = hashlib.sha1(source.encode()).hexdigest()

    async def __call__(self, keys: Sequence[str], args: Sequence[str | int]) -> Any:
        try:
            return await self._client.evalsha(self._sha, len(keys), *keys, *args)
        except redis_exceptions.NoScriptError:
            return await self._client.eval(self._source, len(keys), *keys, *args)


def _config_values(reply: Any, name: str) -> list[Any]:
    """The values of *name* in a CONFIG GET reply: a dict from one server, a dict of such
    dicts (one per node) from a cluster client."""
    if not isinstance(reply, dict):
        return []
    found = [v for k, v in reply.items() if _text(k) == name]
    for value in reply.values():
        if isinstance(value, dict):
            found += _config_values(value, name)
    return found


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):  # a client passed in without decode_responses
        return value.decode("utf-8", "surrogateescape")
    return value  # type: ignore[no-any-return]


def _secrets(url: str) -> list[str]:
    """The password of *url*, in every spelling an error message might carry it."""
    from urllib.parse import parse_qs, unquote, urlsplit

    found: list[str] = []
    try:
        parts = urlsplit(url)
        if parts.password:
            found.append(parts.password)
        for value in parse_qs(parts.query).get("password", []):
            found.append(value)
    except ValueError:
        pass
    # userinfo taken raw, for URLs urlsplit cannot parse ("#", "/" or "?" in the password)
    _scheme, sep, rest = url.partition("://")
    userinfo = rest.rpartition("@")[0] if sep else ""
    if ":" in userinfo:
        found.append(userinfo.partition(":")[2])
    return [s for x in found for s in {x, unquote(x)} if s]


def _hide(text: str, url: str) -> str:
    for secret in sorted(_secrets(url), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _shown(url: str) -> str:
    """*url* as it may appear in a message: without its password."""
    return _hide(url, url)


def _split_tag(key: str) -> tuple[str, str]:
    """Split *key* into its cluster hash tag and the rest: the tag ends before the second
    ':' or before the first '}' (which would end a Redis hash tag), whichever comes first."""
    first = key.find(":")
    second = key.find(":", first + 1) if first >= 0 else -1
    cut = min(i for i in (second, key.find("}"), len(key)) if i >= 0)
    return key[:cut], key[cut:]


def _glob(text: str) -> str:
    return _GLOB.sub(r"\\\1", text)


@asynccontextmanager
async def _guarded(
    gate: AbstractAsyncContextManager[Any], op: str, key: str
) -> AsyncIterator[None]:
    async with gate, _translated(op, key):
        yield


# The settings a synchronous client takes from an asyncio one, and its connection classes.
_CARRIED = frozenset(
    {
        "host",
        "port",
        "db",
        "path",
        "username",
        "password",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "client_name",
        "protocol",
        "ssl_keyfile",
        "ssl_certfile",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_data",
        "ssl_check_hostname",
        "ssl_min_version",
        "ssl_ciphers",
    }
)
_SYNC_CONNECTIONS = {
    "Connection": "Connection",
    "SSLConnection": "SSLConnection",
    "UnixDomainSocketConnection": "UnixDomainSocketConnection",
}


def _carried(settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """The connection settings of an asyncio client a synchronous one can take (``None``:
    it authenticates through a credential provider, which is asyncio-only)."""
    if settings.get("credential_provider") is not None:
        return None
    return {k: v for k, v in settings.items() if k in _CARRIED and v is not None}


@contextmanager
def _sync_translated(op: str, key: str) -> Iterator[None]:
    """:func:`_translated` for the synchronous client of the index reader."""
    try:
        yield
    except (redis_exceptions.RedisError, redis_exceptions.RedisClusterException, OSError) as exc:
        raise _storage_error(op, key, exc) from exc


@asynccontextmanager
async def _translated(op: str, key: str) -> AsyncIterator[None]:
    """The one place where redis-py's errors become ours (see _storage_error)."""
    try:
        yield
    except (redis_exceptions.RedisError, redis_exceptions.RedisClusterException, OSError) as exc:
        raise _storage_error(op, key, exc) from exc


# What a server that cannot serve the call raises: the connection refused, lost or not had
# (ConnectionError, and OSError below redis-py), a server still loading its data, a cluster
# that is down, resharding or failing over (a write that reached a replica).
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    redis_exceptions.ConnectionError,
    redis_exceptions.ClusterDownError,
    redis_exceptions.TryAgainError,
    redis_exceptions.ReadOnlyError,
    OSError,
)


def _storage_error(op: str, key: str, exc: BaseException) -> StorageError:
    message = f"redis {op} failed for key {key!r}: {exc}"
    # Both TimeoutErrors (redis-py's, and the OSError a socket raises), and a pool that had no
    # free connection in time (a ConnectionError raised from a TimeoutError).
    timeouts = (redis_exceptions.TimeoutError, TimeoutError)
    if isinstance(exc, timeouts) or isinstance(exc.__cause__, timeouts):
        return StorageTimeoutError(message)
    if isinstance(exc, _UNAVAILABLE) or (
        # A cluster none of whose nodes answers (redis-py raises no ConnectionError for it).
        isinstance(exc, redis_exceptions.RedisClusterException)
        and (
            "cannot be connected" in str(exc)
            or isinstance(exc.__cause__, (redis_exceptions.ConnectionError, OSError))
        )
    ):
        return StorageUnavailableError(message)
    return StorageError(message)


def _close_sync_client(client: Any) -> None:
    """Close the index reader's synchronous client and every connection it opened.

    redis-py's ``close()`` does not do it alone: a synchronous ``RedisCluster`` gives each
    node a client over a pool of its own that ``close()`` leaves connected, and a ``Redis``
    built over a pool (the one made for a client passed in) leaves that pool connected. Those
    sockets would stay open until the collector reached them, and then, as often as not, be
    finalized before redis-py's connection could close them: an unclosed-socket warning in
    whatever code happens to be running."""
    disconnect_nodes = getattr(client, "disconnect_connection_pools", None)
    if disconnect_nodes is not None:  # a cluster: one pool per node
        disconnect_nodes()
        client.close()
    else:
        client.close()  # first: it hands a connection it holds back to the pool
        client.connection_pool.disconnect()


def _connections(client: Any) -> list[Any]:
    """Every connection *client* holds (redis-py keeps them in its pools, one per node)."""
    pools = [getattr(client, "connection_pool", None)]
    found: list[Any] = []
    for pool in pools:
        if pool is not None:
            found += list(getattr(pool, "_available_connections", ()))
            found += list(getattr(pool, "_in_use_connections", ()))
    if isinstance(client, RedisCluster):
        for node in client.get_nodes():
            found += list(getattr(node, "_connections", ()))
    return found


def _disown(connection: Any) -> None:
    """Leave an inherited connection to the parent. Closing or even dropping it here would
    run asyncio's close, which unregisters its socket from the event loop's epoll instance,
    shared with the parent across the fork: the parent would never hear that socket again.
    So the transport is marked closing (its close does nothing), its socket's descriptor is
    closed in this process only, and the connection forgets its streams."""
    writer = getattr(connection, "_writer", None)
    transport = getattr(writer, "transport", None)
    if transport is not None:
        transport._closing = True  # close() returns at once, touching no event loop
        sock = getattr(transport, "_sock", None)
        if sock is not None:
            transport._sock = None
            # This process's descriptor; the parent keeps its own. One already gone is fine.
            with contextlib.suppress(OSError):
                os.close(sock.detach())
    if writer is not None:
        connection._writer = connection._reader = None


# Every provider of this process, given a client of its own in a forked child.
_LIVE: weakref.WeakSet[RedisMemoryProvider] = weakref.WeakSet()


def _after_fork() -> None:
    for provider in list(_LIVE):
        provider._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
