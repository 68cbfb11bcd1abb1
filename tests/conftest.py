from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

# Tests and tools run offline: litellm must not fetch its model cost map.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).parent))

from llm_server import ScriptedLLM, scripted_llm
from redis_cluster import redis_cluster
from redis_server import redis_server
from stores import KINDS, Store

from deepcrew_episodic.providers import MemoryProvider


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real redis-server on a free loopback port, for the whole session."""
    with redis_server() as (port, _proc):
        yield f"redis://127.0.0.1:{port}/0"


@pytest.fixture
def clean_redis(redis_url: str) -> str:
    import redis

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
def cluster_target(redis_cluster_ports: list[int]) -> str:
    """The cluster, emptied: the URL of one of its nodes."""
    import redis

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


@pytest.fixture
def sqlite_target(tmp_path: Path) -> str:
    return str(tmp_path / "episodes.db")


@pytest.fixture
async def provider(store: Store) -> AsyncIterator[MemoryProvider]:
    async with store.open() as opened:
        yield opened


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    """A scripted OpenAI-compatible server (see ``tests/llm_server.py``); fails the test if a
    request arrived that no scripted reply matched."""
    with scripted_llm() as server:
        yield server
        assert not server.unscripted, (
            f"{len(server.unscripted)} request(s) had no scripted reply; last user message: "
            f"{server.unscripted[-1].last_user_text!r}"
        )
