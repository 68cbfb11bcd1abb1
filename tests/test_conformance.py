"""The storage contract, stated once in ``deepcrew_episodic.testing`` and run here against
every provider (see ``stores.KINDS``). A provider that does not pass it does not ship.

The portable implementations in ``MemoryProvider`` and the adapter of deepcrew-ai's
four-method providers are tested below the suite.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from stores import Store

from deepcrew_episodic.providers import InMemoryProvider, MemoryProvider
from deepcrew_episodic.providers._base import as_provider
from deepcrew_episodic.testing import ProviderConformance

pytestmark = pytest.mark.anyio


class TestConformance(ProviderConformance):
    """Every test of the suite, over dict, file, redis, sqlite and a redis cluster."""

    sigkill_rounds = 50

    @pytest.fixture(autouse=True)
    def _rounds_from_the_command_line(self, sigkill_rounds: int) -> None:
        self.sigkill_rounds = sigkill_rounds  # type: ignore[misc]  # --sigkill-rounds, 50 by default

    @pytest.fixture
    def store(self, store: Store) -> Store:  # conftest's, parametrized over stores.KINDS
        return store

    def check_after_crashes(self, store: Store) -> None:  # type: ignore[override]
        if store.kind == "file":
            json.loads(Path(store.target).read_text())
            # every write removed the temporary files (whole copies) of the killed writers
            assert sorted(p.name for p in Path(store.target).parent.glob(".*.tmp")) == []


# --- the portable implementations ---------------------------------------------------------


class Interfering(MemoryProvider):
    """Implements only the contract, and changes ``key`` right after the first read of it, as
    a writer in another process would between a read and the write that depends on it."""

    def __init__(self, key: str, value: str) -> None:
        self.inner = InMemoryProvider()
        self.change: tuple[str, str] | None = (key, value)

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        values = await self.inner.retrieve_many(keys)
        if self.change is not None and self.change[0] in keys:
            await self.inner.write(dict([self.change]))
            self.change = None
        return values

    async def keys(self, prefix: str) -> list[str]:
        return await self.inner.keys(prefix)

    async def write_if(
        self,
        expect: Mapping[str, str | None],
        items: Mapping[str, str],
        delete: Collection[str] = (),
    ) -> bool:
        return await self.inner.write_if(expect, items, delete)

    async def aclose(self) -> None:
        pass


class FourMethods:
    """A deepcrew-ai 0.6 provider: ``store``, ``retrieve``, ``search``, ``clear`` only, and
    the same interference as ``Interfering``."""

    def __init__(self, key: str, value: str) -> None:
        self.data: dict[str, str] = {}
        self.change: tuple[str, str] | None = (key, value)

    async def store(self, key: str, value: str) -> None:
        self.data[key] = value

    async def retrieve(self, key: str) -> str | None:
        value = self.data.get(key)
        if self.change is not None and self.change[0] == key:
            self.data[key] = self.change[1]
            self.change = None
        return value

    async def search(self, query: str, top_k: int = 5) -> list[tuple[str, str]]:
        q = query.lower()
        found = sorted((k, v) for k, v in self.data.items() if q in k.lower() or q in v.lower())
        return found[:top_k]

    async def clear(self) -> None:
        self.data.clear()


@pytest.mark.parametrize("make", [Interfering, lambda k, v: as_provider(FourMethods(k, v))])
async def test_default_increment_and_write_reruns_then_when_a_read_key_changed(
    make: Any,
) -> None:
    provider: MemoryProvider = make("ring", "3")
    await provider.store("ring", "5")
    assert type(provider).increment_and_write is MemoryProvider.increment_and_write
    calls: list[dict[str, str | None]] = []

    def then(seq: int, values: Mapping[str, str | None]) -> tuple[dict[str, str], list[str]]:
        calls.append(dict(values))
        return {f"e:{seq}": "body", "decided-with": values["ring"] or ""}, []

    assert await provider.increment_and_write("seq", then, read=["ring"]) == 1
    assert calls == [{"ring": "5"}, {"ring": "3"}]  # the stale decision was not applied
    assert await provider.retrieve_many(["decided-with", "ring", "seq", "e:1"]) == [
        "3",
        "3",
        "1",
        "body",
    ]


async def test_the_portable_increment_and_write_is_one_compare_and_set_on_the_counter() -> None:
    """A writer in another process that moved the counter between the read and the write
    makes the step start over: the counter and the payload always change together."""
    provider = Interfering("seq", "7")
    assert await provider.increment_and_write("seq", lambda s, v: ({f"e:{s}": "x"}, [])) == 8
    assert await provider.keys("") == ["e:8", "seq"]
    assert await provider.retrieve("seq") == "8"


async def test_a_four_method_provider_gets_the_whole_contract_through_the_adapter() -> None:
    inner = FourMethods("unused", "")
    inner.change = None
    provider = as_provider(inner)
    assert as_provider(provider) is provider
    assert not provider.shared_across_processes
    await provider.write({"episodic:a:1": "one", "episodic:a:2": "two", "other": "EPISODIC:a:"})
    assert await provider.keys("episodic:a:") == ["episodic:a:1", "episodic:a:2"]
    assert await provider.retrieve_many(["episodic:a:2", "nope"]) == ["two", None]
    # no real delete: the payload goes, the key stays, and write_if takes "" as absent
    await provider.delete(["episodic:a:1"])
    assert inner.data["episodic:a:1"] == ""
    assert await provider.write_if({"episodic:a:1": None}, {"episodic:a:1": "again"})
    assert await provider.increment("n", initial=4) == 5
    assert await provider.search("TWO") == [("episodic:a:2", "two")]
    await provider.clear()
    assert inner.data == {}


def test_a_provider_must_implement_the_contract() -> None:
    class Half(MemoryProvider):
        async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
            return [None for _ in keys]

    with pytest.raises(TypeError, match=r"aclose.*keys.*write_if"):
        Half()  # type: ignore[abstract]


def test_an_object_that_is_no_provider_is_refused_naming_what_it_lacks() -> None:
    from deepcrew_episodic import ConfigurationError

    class Nearly:
        async def store(self, key: str, value: str) -> None: ...

    with pytest.raises(ConfigurationError, match="retrieve, search, clear"):
        as_provider(Nearly())
