"""``forget(containing=...)``, ``forget --containing`` and the viewer's search look in every text
stored for an episode: each of its text fields (found from the model, so a field added later is
covered) and its grades' notes. What they find is deleted for real, grades included, on every
provider."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from deepcrew_episodic import ConfigurationError, Episode, EpisodicMemory, Grade
from deepcrew_episodic._episode import TIME_FIELDS, stored_texts
from deepcrew_episodic.cli import main
from deepcrew_episodic.providers import FileMemoryProvider, InMemoryProvider, MemoryProvider
from deepcrew_episodic.viewer import COOKIE, create_app

pytestmark = pytest.mark.anyio

MARK = "AcmeQqzx"  # the customer every test forgets (no secret shape: stored as written)
TEXT_TYPES = {"str", "str | None", "list[str]"}


def text_fields(model: type[Any]) -> list[str]:
    return [
        f.name
        for f in dataclasses.fields(model)
        if str(f.type) in TEXT_TYPES and f.name not in TIME_FIELDS
    ]


EPISODE_FIELDS = text_fields(Episode)


def holding(name: str, mark: str = MARK) -> dict[str, Any]:
    """An episode's fields with *mark* in field *name* only."""
    value: Any = f"run-{mark}-7" if name in ("id", "conversation_id") else f"about {mark} here"
    if name in {"tags", "tools_used"}:
        value = [f"x-{mark}"]
    fields: dict[str, Any] = {"query": "an unrelated task"}
    fields[name] = value
    return fields


async def raw_text(provider: MemoryProvider) -> str:
    keys = await provider.keys("")
    values = await provider.retrieve_many(keys)
    return "\n".join(keys + [v or "" for v in values])


def test_the_searched_fields_are_every_text_field_of_both_models() -> None:
    # The enumeration is what the library uses; this names the fields it finds today, so a
    # change to it is seen.
    assert set(EPISODE_FIELDS) == {
        "query",
        "response",
        "tools_used",
        "reflection",
        "tags",
        "agent_id",
        "id",
        "approach",
        "transcript_ref",
        "run_id",
        "phase",
        "conversation_id",
    }
    assert set(text_fields(Grade)) == {"episode_id", "note"}
    every = Episode(**{**holding("query"), **{n: holding(n)[n] for n in EPISODE_FIELDS}})
    assert sum(MARK in t for t in stored_texts(every)) == len(EPISODE_FIELDS)


@pytest.mark.parametrize("field", [*EPISODE_FIELDS, "grade note"])
async def test_forget_containing_finds_the_text_in_every_field(
    provider: MemoryProvider, field: str
) -> None:
    memory = EpisodicMemory(provider, namespace="c")
    keep = await memory.record(Episode(query="keep this one", response="about someone else"))
    if field == "grade note":
        target = await memory.record(Episode(query="an unrelated task"))
        await memory.grade(target.id, outcome="success", note=f"the {MARK} team confirmed")
    else:
        target = await memory.record(Episode(**holding(field)))
    needle = MARK.upper()  # case-insensitive
    assert [e.id for e in await memory.select(containing=needle)] == [target.id]
    assert await memory.forget(containing=needle, dry_run=True) == 1
    assert await memory.forget(containing=needle) == 1
    assert MARK not in await raw_text(provider)  # the grade's note is gone with its episode
    fresh = EpisodicMemory(provider, namespace="c")
    assert [e.id for e in await fresh.load(include_expired=True)] == [keep.id]
    assert await fresh.grades() == []


async def test_a_grade_of_another_episode_reusing_the_id_is_not_matched(
    provider: MemoryProvider,
) -> None:
    """A grade applies to the episode it graded (its stamp): an episode that reuses the id of a
    forgotten one is not matched by the old grade's note (that grade was deleted anyway)."""
    memory = EpisodicMemory(provider, namespace="c")
    first = await memory.record(Episode(query="first", id="same-id"))
    await memory.grade(first.id, outcome="failure", note=f"{MARK} said no")
    assert await memory.forget(containing=MARK) == 1
    await memory.record(Episode(query="second", id="same-id"))
    assert await memory.select(containing=MARK) == []


# A mention as stored (pasted, typed on another keyboard, split by a hidden character) and the
# needle someone types to forget it: both read the same to a person, so both match.
SPELLINGS = [
    pytest.param("Acme\u200bQqzx", "acmeqqzx", id="zero-width-space-inside"),
    pytest.param("Ac\u00adme\u2060Qq\u200dzx", "ACMEQQZX", id="soft-hyphen-word-joiner"),
    pytest.param("\uff21\uff43\uff4d\uff45\uff31\uff51\uff5a\uff58", "acmeqqzx", id="full-width"),
    pytest.param("Acme\nQqzx", "acme qqzx", id="line-break-for-a-space"),
    pytest.param("Acme   \tQqzx", "Acme Qqzx", id="white-space-run"),
    pytest.param("Acme Qq\u017ax", "acme qq\u017ax", id="precomposed"),
    pytest.param("Acme Qqz\u030cx", "acme qq\u017ex", id="decomposed-stored"),
    pytest.param("Acme Qq\u017ex", "acme qqz\u030cx", id="decomposed-needle"),
    pytest.param("ACME STRASSE", "acme stra\u00dfe", id="case-fold-sharp-s"),
    pytest.param("AcmeQqzx", "acme\u200bqqzx", id="hidden-in-the-needle"),
]


@pytest.mark.parametrize(("stored", "needle"), SPELLINGS)
@pytest.mark.parametrize("where", ["response", "tags", "grade note"])
async def test_containing_matches_a_mention_however_it_is_spelt(
    stored: str, needle: str, where: str
) -> None:
    # How a text is matched is the same whatever keeps it: one store for every spelling, and
    # the next test for each store (which hands every text back as written, see the kit).
    await _matched_and_forgotten(InMemoryProvider(), stored, needle, where)


@pytest.mark.parametrize(
    ("stored", "needle"),
    [
        p
        for p in SPELLINGS
        if p.id in ("zero-width-space-inside", "full-width", "decomposed-stored")
    ],
)
async def test_a_mention_spelt_otherwise_is_matched_and_forgotten_on_every_store(
    provider: MemoryProvider, stored: str, needle: str
) -> None:
    await _matched_and_forgotten(provider, stored, needle, "grade note")
    await _matched_and_forgotten(provider, stored, needle, "response")


async def _matched_and_forgotten(
    provider: MemoryProvider, stored: str, needle: str, where: str
) -> None:
    memory = EpisodicMemory(provider, namespace="c")
    await memory.clear()
    keep = await memory.record(Episode(query="keep this one", response="Acme Corp, Qq"))
    if where == "grade note":
        target = await memory.record(Episode(query="an unrelated task"))
        await memory.grade(target.id, outcome="success", note=f"the {stored} team confirmed")
    elif where == "tags":
        target = await memory.record(Episode(query="an unrelated task", tags=[stored]))
    else:
        target = await memory.record(Episode(query="an unrelated task", response=stored))
    assert [e.id for e in await memory.select(containing=needle)] == [target.id]
    assert await memory.forget(containing=needle) == 1
    fresh = EpisodicMemory(provider, namespace="c")
    assert [e.id for e in await fresh.load(include_expired=True)] == [keep.id]
    assert await fresh.grades() == []


async def test_a_needle_spanning_two_texts_matches_neither(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="c")
    await memory.record(Episode(query="ask Acme", response="Qqzx replied"))
    assert await memory.select(containing="acme qqzx") == []


@pytest.mark.parametrize("needle", [" ", "\u200b", "\u00ad\u2060", "\n\t"])
async def test_a_containing_with_nothing_visible_is_refused_and_deletes_nothing(
    provider: MemoryProvider, needle: str
) -> None:
    memory = EpisodicMemory(provider, namespace="c")
    await memory.record(Episode(query="keep this one", response="a b"))
    with pytest.raises(ConfigurationError, match="no visible text"):
        await memory.forget(containing=needle)
    with pytest.raises(ConfigurationError, match="no visible text"):
        await memory.select(containing=needle)
    assert len(await memory.load()) == 1


def test_cli_forget_containing_with_nothing_visible_deletes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = str(tmp_path / "episodes.json")
    assert run(capsys, "--store", store, "record", "-q", "keep me", "-r", "a b")[0] == 0
    code, _, err = run(capsys, "--store", store, "forget", "--containing", "\u200b", "--yes")
    assert code != 0
    assert "no visible text" in err
    assert "Traceback" not in err
    assert len(json.loads(run(capsys, "--store", store, "timeline", "--json")[1])) == 1


@pytest.mark.parametrize(("stored", "needle"), SPELLINGS[:4])
async def test_the_viewer_search_matches_a_mention_however_it_is_spelt(
    provider: MemoryProvider, stored: str, needle: str
) -> None:
    memory = EpisodicMemory(provider, max_episodes=50)
    await memory.record(Episode(query="keep me"))
    target = await memory.record(Episode(query="task", approach=f"called {stored}"))
    app = create_app(memory, token="t" * 32, allow_forget=True, label="test")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as c:
        c.cookies.set(COOKIE, "t" * 32)
        page = await c.get("/", params={"q": needle})
        assert page.status_code == 200
        assert page.text.count('<tr class="episode"') == 1
        assert f'data-id="{target.id}"' in page.text


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("field", ["approach", "agent_id", "transcript_ref", "run_id", "note"])
def test_cli_forget_containing_covers_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, field: str
) -> None:
    store = str(tmp_path / "episodes.json")

    async def fill() -> str:
        async with FileMemoryProvider(store) as provider:
            memory = EpisodicMemory(provider)
            await memory.record(Episode(query="keep me"))
            if field == "note":
                ep = await memory.record(Episode(query="task"))
                await memory.grade(ep.id, outcome="success", note=f"{MARK} is happy")
            else:
                ep = await memory.record(Episode(**holding(field)))
            return ep.id

    target = anyio.run(fill)
    code, out, err = run(
        capsys, "--store", store, "forget", "--containing", "acmeqqzx", "--dry-run"
    )
    assert code == 0, err
    assert len(out.splitlines()) == 1
    assert target[:12] in out
    code, out, _ = run(capsys, "--store", store, "forget", "--containing", "acmeqqzx", "--yes")
    assert (code, out.strip()) == (0, "forgot 1 episode")
    assert MARK not in Path(store).read_text()
    left = json.loads(run(capsys, "--store", store, "timeline", "--json")[1])
    assert [e["query"] for e in left] == ["keep me"]


@pytest.mark.parametrize("field", ["approach", "run_id", "transcript_ref", "note", "id"])
async def test_the_viewer_search_and_its_forget_page_cover_the_field(
    provider: MemoryProvider, field: str
) -> None:
    memory = EpisodicMemory(provider, max_episodes=50)
    await memory.record(Episode(query="keep me"))
    if field == "note":
        target = await memory.record(Episode(query="task"))
        await memory.grade(target.id, outcome="success", note=f"{MARK} is happy")
    else:
        target = await memory.record(Episode(**holding(field)))
    app = create_app(memory, token="t" * 32, allow_forget=True, label="test")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as c:
        c.cookies.set(COOKIE, "t" * 32)
        page = await c.get("/", params={"q": "ACMEqqzx"})
        assert page.status_code == 200
        assert f'data-id="{target.id}"' in page.text
        assert page.text.count('<tr class="episode"') == 1
        preview = await c.get("/forget", params={"q": "acmeqqzx"})
        assert preview.status_code == 200
        assert target.id in preview.text
        assert "keep me" not in preview.text


async def test_shrink_deletes_the_grades_of_what_it_deletes(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="s", max_episodes=10)
    old = await memory.record(Episode(query="an old task"))
    await memory.grade(old.id, outcome="failure", note=f"{MARK} complained")
    for i in range(4):
        await memory.record(Episode(query=f"newer task {i}"))
    kept = await memory.record(Episode(query="the newest task"))
    await memory.grade(kept.id, outcome="success", note="still here")
    assert await memory.shrink(3) == 3
    text = await raw_text(provider)
    assert MARK not in text
    assert "still here" in text
    assert [g.note for g in await EpisodicMemory(provider, namespace="s").grades()] == [
        "still here"
    ]


@pytest.mark.parametrize("q", ["\u200b", "\u00ad\u2060"])
async def test_a_viewer_search_with_nothing_visible_is_refused_and_forgets_nothing(
    provider: MemoryProvider, q: str
) -> None:
    memory = EpisodicMemory(provider, max_episodes=50)
    await memory.record(Episode(query="keep me"))
    await memory.record(Episode(query="and me"))
    app = create_app(memory, token="t" * 32, allow_forget=True, label="test")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as c:
        c.cookies.set(COOKIE, "t" * 32)
        for page in ("/", "/forget"):
            answer = await c.get(page, params={"q": q})
            assert answer.status_code == 400, page
            assert "no visible text" in answer.text
    assert len(await memory.load()) == 2
