"""Redis Cluster specifics, against a real three-master cluster (``tests/redis_cluster.py``).

The whole conformance suite also runs on the cluster (kind ``"cluster"`` in ``stores.KINDS``):
500 concurrent records, 8 processes x 200, SIGKILL, ring buffer, recall, clear. This module
checks what only a cluster has: the hash-tag layout that keeps a namespace in one slot, batch
reads and atomic writes that stay single commands there, and scans over every master.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis
from redis.asyncio.cluster import RedisCluster
from redis_server import free_port

from deepcrew_episodic import (
    ConfigurationError,
    Episode,
    EpisodicMemory,
    StorageUnavailableError,
)
from deepcrew_episodic.providers import RedisMemoryProvider

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py's cluster client is asyncio-only


def ep(query: str) -> Episode:
    return Episode(query=query, response="done", outcome="success")


@pytest.fixture
def nodes(cluster_target: str, redis_cluster_ports: list[int]) -> Iterator[list[redis.Redis]]:
    """A plain client per master, to look at where keys landed and what commands ran."""
    clients = [
        redis.Redis(host="127.0.0.1", port=p, decode_responses=True) for p in redis_cluster_ports
    ]
    yield clients
    for client in clients:
        client.close()


@pytest.fixture
async def cluster(cluster_target: str) -> AsyncIterator[RedisMemoryProvider]:
    async with RedisMemoryProvider(cluster_target, cluster=True) as provider:
        yield provider


def calls(nodes: list[redis.Redis], command: str) -> int:
    """How many times *command* ran, summed over the masters."""
    total = 0
    for node in nodes:
        stats = node.info("commandstats")
        total += int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))
    return total


def keys_per_node(nodes: list[redis.Redis]) -> list[list[str]]:
    return [sorted(str(k) for k in node.keys("*")) for node in nodes]


async def test_a_namespace_lives_in_one_slot_under_its_hash_tag(
    cluster: RedisMemoryProvider, nodes: list[redis.Redis]
) -> None:
    memory = EpisodicMemory(cluster, namespace="support", max_episodes=5)
    for i in range(8):  # wraps the ring: evictions are deletes in the same slot
        await memory.record(ep(f"refund order case{i}"))
    stored = [k for per_node in keys_per_node(nodes) for k in per_node]
    # The recall index of the namespace lives in its slot too, under keys of its own.
    index = [k for k in stored if k.startswith("deepcrew:ix:7{episodic:support}:")]
    assert index
    assert sorted(set(stored) - set(index)) == sorted(
        [
            f"deepcrew:{{episodic:support}}:{index}"
            for index in ("__seq__", "__gen__", "__max__", "__base__")
        ]
        + [f"deepcrew:{{episodic:support}}:e:{seq}" for seq in range(4, 9)]
    )
    assert len({nodes[0].cluster("keyslot", k) for k in stored}) == 1
    assert sum(1 for per_node in keys_per_node(nodes) if per_node) == 1


async def test_namespaces_spread_over_the_masters_and_keys_scans_them_all(
    cluster: RedisMemoryProvider, nodes: list[redis.Redis]
) -> None:
    names = [f"team{i}" for i in range(30)]
    for name in names:
        await EpisodicMemory(cluster, namespace=name).record(ep(f"deploy {name}"))
    assert all(keys_per_node(nodes))  # every master holds some namespace
    per_namespace = ("__base__", "__gen__", "__max__", "__seq__", "e:1")
    found = await cluster.keys("episodic:")
    assert found == sorted(f"episodic:{n}:{k}" for n in names for k in per_namespace)
    assert await cluster.keys("episodic:team1") == sorted(
        f"episodic:{n}:{k}" for n in names if n.startswith("team1") for k in per_namespace
    )
    assert await cluster.keys("episodic:team1:") == [f"episodic:team1:{k}" for k in per_namespace]


async def test_a_cold_load_is_two_mgets_no_scan_and_a_record_two_scripts(
    cluster: RedisMemoryProvider, nodes: list[redis.Redis]
) -> None:
    writer = EpisodicMemory(cluster, namespace="billing", max_episodes=1000)
    for i in range(300):
        await writer.record(ep(f"invoice case{i}"))
    for node in nodes:
        node.config_resetstat()
    reader = EpisodicMemory(cluster, namespace="billing", max_episodes=1000)
    assert len(await reader.load()) == 300
    assert calls(nodes, "mget") == 2  # the index keys, then all 300 episodes
    # The newest episode stored, asked of the recall index (its head read in one script, then
    # one ZREVRANGE): no GET per episode, and no SCAN.
    assert calls(nodes, "get") <= 3
    assert calls(nodes, "zrevrange") == 1
    assert calls(nodes, "scan") == 0
    for node in nodes:
        node.config_resetstat()
    await writer.record(ep("invoice new"))
    # two scripts: the counter (which reads the ring size), then the compare-and-set write
    assert calls(nodes, "evalsha") + calls(nodes, "eval") == 2
    assert calls(nodes, "exec") == 0


async def test_keys_with_braces_and_colons_round_trip(cluster: RedisMemoryProvider) -> None:
    odd = ["plain", "a:b", "a:b:c", "}x", "a}b:c", "{tag}:v", "x{y:z}:w", "a:{b}:c", "", "::"]
    await cluster.write({k: f"value of {k}" for k in odd})
    assert await cluster.keys("") == sorted(odd)
    assert await cluster.retrieve_many(odd) == [f"value of {k}" for k in odd]
    assert await cluster.keys("a:") == ["a:b", "a:b:c", "a:{b}:c"]
    assert await cluster.keys("a}") == ["a}b:c"]
    assert await cluster.keys("x{y:z}") == ["x{y:z}:w"]
    assert await cluster.search("VALUE OF a:", top_k=10) == [
        (k, f"value of {k}") for k in ["a:b", "a:b:c", "a:{b}:c"]
    ]
    await cluster.delete(odd[:5])
    assert await cluster.keys("") == sorted(odd[5:])
    await cluster.clear()
    assert await cluster.keys("") == []


async def test_a_write_across_namespaces_lands_whole(cluster: RedisMemoryProvider) -> None:
    items = {f"episodic:ns{i}:e:1": f"body {i}" for i in range(20)}
    await cluster.write(items, delete=["episodic:ns0:old", "episodic:ns7:old"])
    assert await cluster.retrieve_many(list(items)) == list(items.values())


async def test_an_atomic_step_across_hash_slots_is_refused_and_writes_nothing(
    cluster: RedisMemoryProvider,
) -> None:
    with pytest.raises(ConfigurationError, match="hash slots"):
        await cluster.write_if({"episodic:a:x": None}, {"episodic:b:x": "1"})
    with pytest.raises(ConfigurationError, match="hash slots"):
        await cluster.write_if({"episodic:a:x": None}, {"episodic:a:x": "1"}, ["episodic:b:y"])
    with pytest.raises(ConfigurationError, match="hash slots"):
        await cluster.increment_and_write(
            "episodic:a:__seq__", lambda seq, values: ({}, []), read=["episodic:b:__max__"]
        )
    assert await cluster.keys("") == []
    # keys of one namespace share a slot, whatever characters the namespace holds
    for ns in ("x}y", "a{b", "{c}", "agent:v2", "é\U0001f600"):
        keys = [f"episodic:{ns}:{k}" for k in ("__seq__", "__max__", "e:1", "e:2")]
        assert await cluster.write_if({keys[0]: None}, {keys[2]: "v"}, [keys[3]])
        assert (
            await cluster.increment_and_write(
                keys[0], lambda seq, values, keys=keys: ({keys[3]: str(values)}, []), read=keys[1:2]
            )
            == 1
        )
        assert await cluster.retrieve_many(keys) == ["1", None, "v", str({keys[1]: None})]


async def test_a_cluster_client_can_be_passed_in(cluster_target: str) -> None:
    client = RedisCluster.from_url(cluster_target, decode_responses=True)
    try:
        async with RedisMemoryProvider(client=client) as provider:  # cluster mode implied
            await provider.store("episodic:x:e:1", "v")
        assert await client.get("deepcrew:{episodic:x}:e:1") == "v"  # and not closed by aclose
    finally:
        await client.aclose()


def test_misconfiguration_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="brace"):
        RedisMemoryProvider("redis://127.0.0.1:7000", cluster=True, prefix="app{1}:")
    with pytest.raises(ConfigurationError, match="cluster URL"):
        RedisMemoryProvider("unix:///tmp/redis.sock", cluster=True)


async def test_an_unreachable_cluster_is_unavailable() -> None:
    async with RedisMemoryProvider(f"redis://127.0.0.1:{free_port()}", cluster=True) as provider:
        with pytest.raises(StorageUnavailableError, match="redis"):
            await provider.retrieve("episodic:x:__seq__")
