"""Hostile values in a store or a file get a typed error naming where, never a bare Python
error: an integer of more than 4,300 digits (Python refuses to convert one), a stored id that
holds a control character, a public method given an argument of the wrong type. On every
provider, and on every output path: the API, the CLI (one line), the viewer (its error page,
with its security headers), import (named by line)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import httpx
import pytest

from deepcrew_episodic import (
    ConfigurationError,
    CorruptDataError,
    Episode,
    EpisodicMemory,
    SyncEpisodicMemory,
)
from deepcrew_episodic.cli import main
from deepcrew_episodic.providers import FileMemoryProvider, InMemoryProvider, MemoryProvider
from deepcrew_episodic.viewer import COOKIE, CSP, create_app

pytestmark = pytest.mark.anyio

BIG = "9" * 5000


async def overwrite(provider: MemoryProvider, key: str, value: str) -> None:
    # A store that keeps episodes append-only (SQLite's trigger) refuses a rewrite.
    await provider.delete([key])
    await provider.write({key: value})


@pytest.mark.parametrize(
    "record",
    [
        '{"query": "broken", "score": ' + BIG + "}",
        '{"query": "broken", "timestamp": ' + BIG + "}",
        '{"query": "broken", "tags": [' + BIG + "]}",
        '{"query": "broken", "id": "ok\\u001b[2Jhidden"}',
        '{"query": "broken", "id": "bell\\u0007"}',
        '{"query": "broken", "id": "rtl\\u202eevil"}',
        '{"query": "broken", "id": "two\\nlines"}',
        '{"query": "broken", "id": "zero\\u200bwidth"}',
    ],
)
async def test_a_hostile_record_is_counted_corrupt_and_forget_corrupt_finds_it(
    provider: MemoryProvider, record: str
) -> None:
    memory = EpisodicMemory(provider, namespace="h")
    for i in range(3):
        await memory.record(Episode(query=f"refund order {i}"))
    await overwrite(provider, "episodic:h:e:2", record)
    fresh = EpisodicMemory(provider, namespace="h")
    assert [e.query for e in await fresh.load()] == ["refund order 0", "refund order 2"]
    assert (await fresh.stats()).corrupt == 1
    assert [e.query for e in await fresh.recall("refund order", top_k=5)] != []
    assert fresh.counters.corrupt_records == 1
    assert await fresh.forget(corrupt=True, dry_run=True) == 1
    assert await fresh.forget(corrupt=True) == 1
    assert await provider.retrieve("episodic:h:e:2") is None
    assert (await fresh.stats()).corrupt == 0  # the same memory no longer counts it


@pytest.mark.parametrize("big", [BIG, "9" * 400], ids=["past-the-json-limit", "past-a-float"])
async def test_a_grade_or_a_use_count_with_a_huge_integer_is_skipped(
    provider: MemoryProvider, big: str
) -> None:
    memory = EpisodicMemory(provider, namespace="h")
    ep = await memory.record(Episode(query="refund order"))
    await memory.grade(ep.id, outcome="success")
    await memory.used([ep.id])
    grade_key = next(k for k in await provider.keys("episodic:h:g:"))
    await overwrite(
        provider,
        grade_key,
        f'{{"episode": "{ep.id}", "outcome": "failure", "score": {big}, "verified": true}}',
    )
    fresh = EpisodicMemory(provider, namespace="h")
    [shown] = await fresh.load()
    assert shown.outcome == "unknown"  # the unreadable grade is skipped, and counted
    assert await fresh.grades() == []
    assert fresh.counters.corrupt_records >= 1
    assert isinstance(await fresh.uses(), dict)


async def test_the_wrong_argument_type_is_a_typed_error() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    ep = await memory.record(Episode(query="q"))
    wrong: list[tuple[str, Any]] = [
        ("grades", [ep.id]),
        ("grades", {"id": ep.id}),
        ("grades", 5),
        ("is_expired", ep.id),
        ("is_expired", None),
        ("render", 5),
        ("render", ep),
        ("fit", None),
        ("used", 5),
        ("select", 5),
    ]

    async def call(name: str, value: Any) -> None:
        result = getattr(memory, name)(value)
        if hasattr(result, "__await__"):
            await result

    for name, value in wrong:
        with pytest.raises(ConfigurationError):
            await call(name, value)


def test_the_sync_facade_raises_the_same_typed_error() -> None:
    with SyncEpisodicMemory(InMemoryProvider()) as sync:
        ep = sync.record(Episode(query="q"))
        with pytest.raises(ConfigurationError, match="grades"):
            sync.grades([ep.id])  # type: ignore[arg-type]


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def huge_file(tmp_path: Path) -> Path:
    path = tmp_path / "store.json"
    path.write_text('{"episodic:default:__seq__": "1", "episodic:default:e:1": ' + BIG + "}")
    return path


@pytest.mark.parametrize("command", [["stats"], ["timeline"], ["export"], ["recall", "x"]])
def test_a_store_file_with_a_huge_integer_is_one_clear_line(
    huge_file: Path, command: list[str]
) -> None:
    before = huge_file.read_bytes()
    code, out, err = cli("--store", str(huge_file), *command)
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1
    assert "unexpected" not in err
    assert "more than 4,300 digits" in err
    assert str(huge_file) in err
    assert huge_file.read_bytes() == before  # never turned into an empty store


async def test_the_api_raises_corrupt_data_for_such_a_file(huge_file: Path) -> None:
    async with FileMemoryProvider(huge_file) as provider:
        with pytest.raises(CorruptDataError, match="4,300 digits"):
            await EpisodicMemory(provider).load()


async def test_the_viewer_answers_such_a_file_with_its_error_page(huge_file: Path) -> None:
    async with FileMemoryProvider(huge_file) as provider:
        memory = EpisodicMemory(provider)
        app = create_app(memory, token="t" * 32, label="test")
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as c:
            c.cookies.set(COOKIE, "t" * 32)
            for path in ("/", "/overview", "/episode/x"):
                page = await c.get(path)
                assert page.status_code == 503, path
                assert page.headers["content-security-policy"] == CSP
                assert page.headers["x-content-type-options"] == "nosniff"
                assert "Store unavailable" in page.text


@pytest.mark.parametrize(
    ("content", "where"),
    [
        (json.dumps({"query": "fine"}) + "\n" + '{"query": "x", "score": ' + BIG + "}\n", "line 2"),
        ('[{"query": "fine"}, {"query": "x", "uses": ' + BIG + "}]", "line 1"),
        (json.dumps({"query": "fine"}) + "\n" + '{"query": "x", "uses": ' + BIG + "}\n", "line 2"),
    ],
)
def test_an_import_file_with_a_huge_integer_is_named_by_line(
    tmp_path: Path, content: str, where: str
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(content)
    target = tmp_path / "out.json"
    for command in (["import", str(source)], ["record", "--file", str(source)]):
        code, _, err = cli("--store", str(target), *command)
        assert code == 1
        assert f"{source}: {where}" in err
        assert "4,300 digits" in err
        assert err.count("\n") == 1
        assert not target.exists()


class _FailingProvider(InMemoryProvider):
    """A third-party provider whose reads fail with its own, untranslated error."""

    async def retrieve_many(self, keys: Any) -> Any:
        raise ValueError("invalid literal in the provider's own parser")


async def test_any_other_failure_is_the_viewers_error_page_with_its_headers() -> None:
    memory = EpisodicMemory(_FailingProvider())
    app = create_app(memory, token="t" * 32, label="test")
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as c:
        c.cookies.set(COOKIE, "t" * 32)
        page = await c.get("/")
    assert page.status_code == 500
    assert page.headers["content-security-policy"] == CSP
    assert page.headers["cache-control"] == "no-store"
    assert "Server error" in page.text
    assert "invalid literal" not in page.text  # the error is logged, not served


GOOD = '{"query": "kept", "id": "e0", "timestamp": "2026-01-01T00:00:00Z"}'


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ('"uses": NaN', "uses: a whole number"),
        ('"uses": Infinity', "uses: a whole number"),
        ('"uses": 2.5', "uses: a whole number"),
        ('"uses": "5"', "uses: a whole number"),
        ('"uses": true', "uses: a whole number"),
        ('"uses": -1', "uses: a whole number"),
        ('"uses": 100000000000000000000', "uses: a whole number"),
        ('"grades": {"outcome": "success"}', "grades: a list"),
        ('"grades": [{"outcome": "success", "score": NaN}]', "grade 1:"),
        ('"grades": [{"outcome": "success", "score": -Infinity}]', "grade 1:"),
        ('"grades": [{"outcome": "success", "score": 1e999}]', "grade 1:"),
        ('"grades": [{"outcome": "success", "score": true}]', "grade 1:"),
        ('"score": NaN', "score"),
        ('"score": 1e999', "score"),
        ('"timestamp": 1e999', "timestamp"),
        ('"forget_after": NaN', "forget_after"),
    ],
)
def test_a_non_finite_or_wrong_number_in_an_import_is_named_and_imports_nothing(
    tmp_path: Path, extra: str, says: str
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(f'{GOOD}\n{{"query": "t", "id": "e1", {extra}}}\n')
    target = tmp_path / "out.json"
    code, _, err = cli("--store", str(target), "import", str(source))
    assert code == 1
    assert f"{source}: line 2: " in err
    assert says in err
    assert "nothing was" in err
    assert err.count("\n") == 1
    assert not target.exists()


async def test_a_wrong_argument_is_quoted_redacted_short_and_typed() -> None:
    """An argument quoted in its error: redacted, cut, and a huge integer by its size (its
    repr past 4,300 digits would itself raise)."""
    from deepcrew_episodic import ConfigurationError, InvalidEpisodeError

    key = "sk-proj-" + "Zq9" * 16
    memory = EpisodicMemory(InMemoryProvider())
    calls: list[tuple[type[Exception], Any]] = [
        (InvalidEpisodeError, lambda: memory.restore(Episode(query="q"), uses=10**5000)),
        (ConfigurationError, lambda: memory.recall("q", tags=f"{key} " + "x" * 100_000)),
        (ConfigurationError, lambda: memory.recall("q", intent=key)),
        (ConfigurationError, lambda: memory.select(containing=key.encode() * 1000)),
    ]
    for error, call in calls:
        with pytest.raises(error) as raised:
            await call()
        assert "Zq9Zq9" not in str(raised.value)
        assert len(str(raised.value)) < 300
    assert await memory.load() == []
