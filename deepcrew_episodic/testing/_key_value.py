"""The key/value contract: what every provider does with keys and values, called directly."""

from __future__ import annotations

from typing import ClassVar

import pytest

from ..providers import MemoryProvider
from ._capability import Capability
from ._store import StoreSpec

__all__ = ["KeyValueContract"]


class KeyValueContract(Capability):
    """Reads, batches, listings by exact prefix, compare-and-set, deletes, and bytes left
    undecodable by another program: the four abstract methods and what the base class builds on
    them. Required of every provider.
    """

    capability: ClassVar[str] = "key/value contract"

    async def test_store_retrieve_search_clear(self, provider: MemoryProvider) -> None:
        await provider.store("b:key", "Hello World")
        await provider.store("a:other", "nothing here")
        await provider.store("c:third", "say hello")
        assert await provider.retrieve("b:key") == "Hello World"
        assert await provider.retrieve("missing") is None
        await provider.store("b:key", "replaced")
        assert await provider.retrieve("b:key") == "replaced"
        # case-insensitive substring on key or value, sorted by key, cut at top_k
        assert await provider.search("HELLO") == [("c:third", "say hello")]
        assert await provider.search(":", top_k=2) == [
            ("a:other", "nothing here"),
            ("b:key", "replaced"),
        ]
        await provider.clear()
        assert await provider.retrieve("b:key") is None
        assert await provider.search("") == []

    async def test_batch_capabilities(self, provider: MemoryProvider) -> None:
        await provider.write({"p:1": "one", "p:2": "two", "q:1": "other"})
        assert await provider.retrieve_many(["p:2", "nope", "p:1"]) == ["two", None, "one"]
        assert await provider.retrieve_many([]) == []
        assert await provider.keys("p:") == ["p:1", "p:2"]
        await provider.write({"p:3": "three"}, delete=["p:1"])
        assert await provider.retrieve_many(["p:1", "p:3"]) == [None, "three"]
        await provider.delete(["p:2", "absent"])
        assert await provider.keys("p:") == ["p:3"]
        assert await provider.keys("q:") == ["q:1"]
        await provider.delete([])
        await provider.write({})
        assert await provider.keys("") == ["p:3", "q:1"]

    async def test_write_if_sets_only_when_every_expected_value_holds(
        self, provider: MemoryProvider
    ) -> None:
        p = provider
        # None: absent, or ""
        assert await p.write_if({"episodic:cas:a": None}, {"episodic:cas:a": "first"}) is True
        assert await p.write_if({"episodic:cas:a": None}, {"episodic:cas:a": "second"}) is False
        assert await p.retrieve("episodic:cas:a") == "first"
        await p.store("episodic:cas:empty", "")
        assert await p.write_if({"episodic:cas:empty": None}, {"episodic:cas:empty": "taken"})
        assert await p.retrieve("episodic:cas:empty") == "taken"
        # "" expects "" exactly, not an absent key
        assert not await p.write_if({"episodic:cas:absent": ""}, {"episodic:cas:absent": "x"})
        assert await p.retrieve("episodic:cas:absent") is None
        await p.store("episodic:cas:blank", "")
        assert await p.write_if({"episodic:cas:blank": ""}, {"episodic:cas:blank": "x"}) is True

        # several keys: one mismatch changes nothing at all (no store, no delete)
        await p.write(
            {"episodic:cas:1": "one", "episodic:cas:2": "two", "episodic:cas:gone": "doomed"}
        )
        before = await p.keys("episodic:cas:")
        assert not await p.write_if(
            {"episodic:cas:1": "one", "episodic:cas:2": "TWO", "episodic:cas:3": None},
            {"episodic:cas:new": "x", "episodic:cas:1": "changed"},
            ["episodic:cas:gone"],
        )
        assert await p.keys("episodic:cas:") == before
        assert await p.retrieve_many(
            ["episodic:cas:1", "episodic:cas:gone", "episodic:cas:new"]
        ) == ["one", "doomed", None]
        # all match: items stored, deletes done, and an item named in delete is stored
        assert await p.write_if(
            {"episodic:cas:1": "one", "episodic:cas:2": "two", "episodic:cas:3": None},
            {"episodic:cas:new": "x", "episodic:cas:1": "changed"},
            ["episodic:cas:gone", "episodic:cas:1", "episodic:cas:never-was"],
        )
        assert await p.retrieve_many(
            ["episodic:cas:1", "episodic:cas:gone", "episodic:cas:new"]
        ) == ["changed", None, "x"]
        # no expectation: a plain write
        assert await p.write_if({}, {"episodic:cas:plain": "p"}, ["episodic:cas:new"]) is True
        assert await p.retrieve_many(["episodic:cas:plain", "episodic:cas:new"]) == ["p", None]

    async def test_keys_returns_exactly_the_keys_that_start_with_the_prefix(
        self, provider: MemoryProvider
    ) -> None:
        written = {
            f"episodic:{ns}:{suffix}": f"value of {ns!r}"
            for ns in KEY_NAMESPACES
            for suffix in ("__seq__", "e:1", "e:10")
        }
        written["episodic:a"] = "a key that only looks related"
        written["episodic:"] = "the bare prefix"
        await provider.write(written)
        prefixes = {""}
        for key in written:  # every cut of every key: the namespace prefix and its neighbours
            prefixes.update(key[:i] for i in range(len("episodic:") - 1, len(key) + 1))
        for prefix in sorted(prefixes):
            expected = sorted(k for k in written if k.startswith(prefix))
            assert await provider.keys(prefix) == expected, prefix
        # a prefix, not a substring: these are inside every key, at the start of none
        for inside in ("pisodic:", ":", "e:1", "__seq__", "a*b?[c]{d}:"):
            assert await provider.keys(inside) == [], inside
        assert await provider.retrieve_many(list(written)) == list(written.values())
        await provider.delete([f"episodic:{ns}:e:1" for ns in KEY_NAMESPACES])
        assert await provider.keys("episodic:a:") == [
            "episodic:a::__seq__",
            "episodic:a::e:10",
            "episodic:a:__seq__",
            "episodic:a:e:10",
        ]

    async def test_undecodable_stored_bytes_are_read_as_surrogates_and_can_be_deleted(
        self, store: StoreSpec, provider: MemoryProvider
    ) -> None:
        await provider.write({"episodic:raw:e:1": "readable", "episodic:raw:e:2": "readable"})
        # another program overwrote a value, and left a key that is not UTF-8 either
        try:
            store.write_raw(b"episodic:raw:e:2", b'{"query": "caf\xe9 \xff", "response": "r"}')
        except NotImplementedError:
            pytest.skip("the store holds no bytes that another program could leave undecodable")
        store.write_raw(b"episodic:raw:x\xe9", b"\xc3(")
        bad_key = "episodic:raw:x\udce9"
        listed = await provider.keys("episodic:raw:")
        assert listed == ["episodic:raw:e:1", "episodic:raw:e:2", bad_key]
        assert await provider.retrieve_many(["episodic:raw:e:2", bad_key, "episodic:raw:e:1"]) == [
            '{"query": "caf\udce9 \udcff", "response": "r"}',
            "\udcc3(",
            "readable",
        ]
        assert await provider.search("x\udce9", top_k=10) == [(bad_key, "\udcc3(")]
        # a surrogate-holding string passed back names the original bytes
        assert await provider.write_if({bad_key: "\udcc3("}, {bad_key: "rewritten \udcff"})
        assert await provider.retrieve(bad_key) == "rewritten \udcff"
        await provider.delete([bad_key, "episodic:raw:e:2"])
        assert await provider.keys("episodic:raw:") == ["episodic:raw:e:1"]
        assert await provider.retrieve_many(["episodic:raw:e:2", bad_key]) == [None, None]

    @pytest.mark.parametrize(
        "value",
        [
            "",
            " ",
            "line\nbreak\r\n\ttab",
            "nul \x00 inside",
            "\u2028 \u2029 \x85 separators",
            "\ufeffbom and \u200b zero width",
            "équipe, e\u0301quipe",
            "emoji \U0001f9e0 and \U0010ffff",
            '{"json": "looking", "n": [1, 2]}',
            "\\ backslash \" quote ' apostrophe % _ * ? [",
            "x" * 300_000,
        ],
        ids=lambda value: repr(value[:12]),
    )
    async def test_any_text_value_comes_back_exactly_as_written(
        self, provider: MemoryProvider, value: str
    ) -> None:
        await provider.write({"episodic:val:a": value, "episodic:val:b": "neighbour"})
        assert await provider.retrieve_many(["episodic:val:a", "episodic:val:b"]) == [
            value,
            "neighbour",
        ]
        assert await provider.write_if({"episodic:val:a": value}, {"episodic:val:c": value})
        assert await provider.retrieve_many(["episodic:val:c"]) == [value]


KEY_NAMESPACES = [
    "support bot",
    "tenant/42",
    "agent:v2",
    "agent",
    "user@example.com",
    "équipe",
    "a*b?[c]{d}",
    "x}y",
    "x",
    "a",
    "a:",
    "a;",
    "a\\b",
    "{a}",
    "}",
    "a\U0001f600",
    "a\U0010ffff",
    "a\uffff",
    "a\x7f",
    "a\u0080",
    "a\ud7ff",
    "a\ue000",
    "\U0010ffff",
    "a b\tc",
    "%_",
    "a\x00b",
]
