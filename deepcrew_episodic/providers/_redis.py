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
import weakref
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any

from .._exceptions import ConfigurationError, CorruptDataError, MissingDependencyError, StorageError
from ._base import Fresh, MemoryProvider, Then

try:
    import redis.asyncio as redis_asyncio
    from redis import exceptions as redis_exceptions
    from redis.asyncio.cluster import RedisCluster
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError(
        "RedisMemoryProvider needs redis-py: pip install 'deepcrew-episodic[redis]'"
    ) from exc

__all__ = ["RedisMemoryProvider"]

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
# A compare-and-set over several keys. KEYS: the expected keys, the keys to store, the keys to
# delete. ARGV: how many expected keys and keys to store; per expected key "0" (absent or "")
# or "1" followed by the value; the values to store. Returns 1 when it wrote, 0 when not.
_WRITE_IF = """
local expected, stored = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = 1, expected do
  local want = ARGV[2 + i]
  local have = redis.call('GET', KEYS[i])
  if string.sub(want, 1, 1) == '0' then
    if have and have ~= '' then return 0 end
  elseif have ~= string.sub(want, 2) then
    return 0
  end
end
for i = 1, stored do
  redis.call('SET', KEYS[expected + i], ARGV[2 + expected + i])
end
for i = expected + stored + 1, #KEYS do
  redis.call('UNLINK', KEYS[i])
end
return 1
"""
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

    Example::

        async with RedisMemoryProvider("redis://localhost:6379/0") as backend:
            memory = EpisodicMemory(backend, namespace="support")

        async with RedisMemoryProvider("redis://10.0.0.5:7000", cluster=True) as backend:
            memory = EpisodicMemory(backend, namespace="support")
    """

    shared_across_processes = True
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
    ) -> None:
        if not isinstance(url, str):
            raise ConfigurationError(f"url must be a redis:// URL string, not {type(url).__name__}")
        if not isinstance(prefix, str):
            raise ConfigurationError(f"prefix must be a string, not {type(prefix).__name__}")
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

    async def write(self, items: Mapping[str, str], delete: Collection[str] = ()) -> None:
        doomed = [self._key(k) for k in delete if k not in items]
        if not items and not doomed:
            return
        first = next(iter(items), None) or next(iter(delete))
        stored = {self._key(k): v for k, v in items.items()}
        if not self._cluster:
            await self._transaction(first, stored, doomed)
            return
        # A cluster transaction is confined to one slot: one per slot touched (a single one
        # for the keys of one namespace, which share their hash tag).
        by_slot: dict[int, tuple[dict[str, str], list[str]]] = {}
        for key, value in stored.items():
            by_slot.setdefault(self._client.keyslot(key), ({}, []))[0][key] = value
        for key in doomed:
            by_slot.setdefault(self._client.keyslot(key), ({}, []))[1].append(key)
        for slot_items, slot_doomed in by_slot.values():
            await self._transaction(first, slot_items, slot_doomed)

    async def _transaction(self, first: str, stored: dict[str, str], doomed: list[str]) -> None:
        if self._cluster:
            # One script per slot (its keys share it): as atomic as MULTI/EXEC, and it keeps
            # off redis-py's cluster transactions, which join a thread per command on the
            # event loop's thread.
            keys = [*stored, *doomed]
            args: list[str | int] = [0, len(stored), *stored.values()]
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
        full = [self._key(k) for k in keys]
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
                if key is not None and key.startswith(prefix):
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

    async def aclose(self) -> None:
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


@asynccontextmanager
async def _translated(op: str, key: str) -> AsyncIterator[None]:
    """The one place where redis-py's errors become ours."""
    try:
        yield
    except (redis_exceptions.RedisError, redis_exceptions.RedisClusterException) as exc:
        raise StorageError(f"redis {op} failed for key {key!r}: {exc}") from exc
    except OSError as exc:
        raise StorageError(f"redis {op} failed for key {key!r}: {exc}") from exc


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
