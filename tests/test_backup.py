"""A backup round trip restores the memory as it read: ``export`` then ``import`` into a new
store gives back the episodes, their grades (outcome, score, note, verified, time) and their use
counts, so that every read (the graded outcome, the ranking with reinforcement) is the same. A
second import into the same store duplicates and overwrites nothing. Through the CLI on every
store it takes, and through the API it uses (``uses()``, ``restore()``)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from stores import Store

from deepcrew_episodic import Episode, EpisodicMemory, Grade, InvalidEpisodeError
from deepcrew_episodic.cli import main
from deepcrew_episodic.providers import FileMemoryProvider, MemoryProvider, open_provider

pytestmark = pytest.mark.anyio


async def fill(memory: EpisodicMemory) -> None:
    """Episodes graded every way the rule distinguishes, used a few times, one expired."""
    claimed = await memory.record(Episode(query="rotate the signing key", outcome="partial"))
    await memory.grade(claimed.id, outcome="success", verified=False, note="the model says ok")
    twice = await memory.record(Episode(query="rotate the deploy key", outcome="unknown"))
    await memory.grade(twice.id, outcome="failure", note="CI failed: naïve ✓ ‮ test")
    await memory.grade(twice.id, score=0.9, note="fixed, re-run green")
    plain = await memory.record(Episode(query="refund order 77", outcome="failure", score=0.1))
    for _ in range(3):
        await memory.used([plain.id])
    await memory.used([twice.id])
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    await memory.record(Episode(query="expired key rotation", forget_after=past))


async def reads(memory: EpisodicMemory) -> dict[str, Any]:
    """Everything a reader sees of a memory, by id."""
    grades = [
        (g.episode_id, g.outcome, g.score, g.note, g.verified, g.timestamp)
        for g in await memory.grades()
    ]
    return {
        "load": [e.to_dict() for e in await memory.load()],
        "recorded": [e.to_dict() for e in await memory.load(graded=False)],
        "grades": sorted(grades),
        "uses": await memory.uses(),
        "recall": [e.id for e in await memory.recall("rotate key refund", top_k=5)],
        "stats": {
            k: v
            for k, v in vars(await memory.stats()).items()
            if k not in {"stored_bytes", "expired", "capacity"}
        },
    }


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_export_then_import_restores_what_the_memory_read(store: Store, tmp_path: Path) -> None:
    if store.kind == "dict":
        pytest.skip("the command line opens a store by its location; memory: is per process")

    async def seeded() -> dict[str, Any]:
        async with store.open() as provider:
            source = EpisodicMemory(provider)
            await fill(source)
            return await reads(source)

    async def read(target: str) -> dict[str, Any]:
        async with open_provider(target) as provider:
            return await reads(EpisodicMemory(provider))

    before = anyio.run(seeded)
    assert before["uses"]  # the fixture did use episodes
    backup = tmp_path / "backup.jsonl"
    where = store.target.replace("redis://", "redis+cluster://", store.kind == "cluster")
    code, _, err = cli("--store", where, "export", "-o", str(backup))
    assert code == 0, err
    for restored in (str(tmp_path / "restored.db"), str(tmp_path / "restored.json")):
        code, out, err = cli("--store", restored, "import", str(backup))
        assert (code, out.strip()) == (0, f"imported 3 episodes from {backup}"), err
        assert anyio.run(read, restored) == before
        # Again into the same store: nothing added, nothing rewritten.
        code, out, err = cli("--store", restored, "import", str(backup))
        assert (code, out.strip()) == (0, f"imported 0 episodes from {backup}, 3 already present")
        assert anyio.run(read, restored) == before


@pytest.mark.parametrize("target", ["restored.json", "restored.db"])
def test_a_backup_into_a_smaller_ring_keeps_its_newest_and_a_second_import_changes_nothing(
    tmp_path: Path, target: str
) -> None:
    """A new store created by ``import --max-episodes 5`` gets that ring; the backup's newest
    episodes are kept with their grades and uses, the older ones left out; importing the same
    backup again neither adds nor pushes out anything."""
    source = str(tmp_path / "source.json")

    async def seeded() -> None:
        async with open_provider(source, create=True) as provider:
            memory = EpisodicMemory(provider, max_episodes=10)
            for i in range(12):  # the first two are evicted from the source's own ring
                start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=i)
                episode = await memory.record(
                    Episode(query=f"task {i}", timestamp=start.isoformat())
                )
                if i in (1, 10):
                    await memory.grade(episode.id, outcome="failure", note=f"note {i}")
                if i in (1, 4, 8, 11):
                    await memory.used(episode.id)

    async def read(where: str) -> tuple[list[str], list[str], list[int], int]:
        async with open_provider(where) as provider:
            memory = await EpisodicMemory.open(provider)
            episodes = await memory.load()
            uses = await memory.uses()
            return (
                [e.query for e in episodes],
                [g.note for g in await memory.grades()],
                [uses.get(e.id, 0) for e in episodes],
                memory.max_episodes,
            )

    anyio.run(seeded)
    backup = tmp_path / "backup.jsonl"
    assert cli("--store", source, "export", "-o", str(backup))[0] == 0
    restored = str(tmp_path / target)
    code, out, err = cli("--store", restored, "--max-episodes", "5", "import", str(backup))
    assert (code, out.strip()) == (0, f"imported 5 episodes from {backup}"), err
    assert "5 older episodes" in err
    newest = ["task 7", "task 8", "task 9", "task 10", "task 11"]
    assert anyio.run(read, restored) == (newest, ["note 10"], [0, 1, 0, 0, 1], 5)
    for again in (["--dry-run"], ["--yes"], []):
        code, out, err = cli("--store", restored, "import", str(backup), *again)
        assert code == 0, err
        assert "push 0 stored episodes" in err if again == ["--dry-run"] else "imported 0" in out
        assert anyio.run(read, restored) == (newest, ["note 10"], [0, 1, 0, 0, 1], 5)


async def test_restore_through_the_api(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="r")
    grade = Grade("ignored", "failure", 0.2, "broke in staging", True, "2025-01-02T03:04:05Z")
    stored = await memory.restore(
        Episode(query="migrate the db", id="ep-1", timestamp="2025-01-01T00:00:00Z"),
        grades=[grade, {"outcome": "success", "score": None, "note": "ok", "verified": True}],
        uses=4,
    )
    assert (stored.id, stored.timestamp) == ("ep-1", "2025-01-01T00:00:00Z")
    [shown] = await memory.load()
    assert shown.outcome == "success"
    grades = await memory.grades("ep-1")
    assert [(g.outcome, g.note, g.timestamp[:4]) for g in grades] == [
        ("failure", "broke in staging", "2025"),
        ("success", "ok", str(datetime.now(UTC).year)),
    ]
    assert await memory.uses() == {"ep-1": 4}
    # Restored twice: refused, and nothing of the first is changed.
    with pytest.raises(InvalidEpisodeError, match="already stored"):
        await memory.restore(Episode(query="other", id="ep-1"), grades=[grade], uses=9)
    assert len(await memory.grades("ep-1")) == 2
    assert await memory.uses() == {"ep-1": 4}


@pytest.mark.parametrize(
    ("grades", "uses", "message"),
    [
        ([{"outcome": "great"}], 0, "grade 1: invalid grade"),
        ([{"outcome": "success", "score": 7}], 0, "grade 1"),
        ([{"outcome": "success", "verified": "yes"}], 0, "grade 1"),
        (["success"], 0, "grade 1: a grade is a JSON object"),
        ({"outcome": "success"}, 0, "grades must be a list"),
        ([], -1, "uses"),
        ([], True, "uses"),
        ([], 10**16, "uses"),
    ],
)
async def test_restore_checks_everything_before_writing(
    grades: Any, uses: Any, message: str
) -> None:
    from deepcrew_episodic.providers import InMemoryProvider

    memory = EpisodicMemory(InMemoryProvider())
    with pytest.raises(InvalidEpisodeError, match=message):
        await memory.restore(Episode(query="q", id="x"), grades=grades, uses=uses)
    assert await memory.load() == []
    assert await memory.grades() == []


def test_a_restored_grade_note_is_redacted(tmp_path: Path) -> None:
    backup = tmp_path / "b.jsonl"
    note = "token ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    backup.write_text(
        json.dumps({"query": "q", "id": "a1", "grades": [{"outcome": "success", "note": note}]})
        + "\n"
    )
    store = str(tmp_path / "s.json")
    assert cli("--store", store, "import", str(backup))[0] == 0
    assert "ghp_" not in Path(store).read_text()
    assert "[REDACTED:github-token]" in Path(store).read_text()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"query": "q", "grades": [{"outcome": "nope"}]}, "line 2: grade 1: invalid grade"),
        ({"query": "q", "grades": "success"}, "line 2: grades: a list"),
        ({"query": "q", "uses": "3"}, "line 2: uses: a whole number"),
        ({"query": "q", "uses": -2}, "line 2: uses"),
    ],
)
def test_import_names_a_bad_grade_or_count_by_line_and_imports_nothing(
    tmp_path: Path, line: dict[str, Any], message: str
) -> None:
    backup = tmp_path / "b.jsonl"
    backup.write_text(json.dumps({"query": "fine"}) + "\n" + json.dumps(line) + "\n")
    store = tmp_path / "s.json"
    code, _, err = cli("--store", str(store), "import", str(backup))
    assert code == 1
    assert message in err
    assert len(err.strip().splitlines()) == 1

    async def count() -> int:
        async with FileMemoryProvider(store) as provider:
            return len(await EpisodicMemory(provider).load())

    assert not store.exists() or anyio.run(count) == 0


def test_an_import_file_with_odd_unicode_line_ends_and_a_bom(tmp_path: Path) -> None:
    """JSONL lines end at LF (CRLF too); U+2028, U+2029, U+0085 and U+001C inside a string are
    text, not line ends; a UTF-8 byte order mark at the start is not part of the first line."""
    odd = "a\u2028b\u2029c\u0085d\x1ce"
    lines = [json.dumps({"query": odd}, ensure_ascii=False), json.dumps({"query": "second"})]
    source = tmp_path / "odd.jsonl"
    source.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + b"\r\n")
    store = tmp_path / "s.json"
    code, out, err = cli("--store", str(store), "import", str(source))
    assert (code, out.strip()) == (0, f"imported 2 episodes from {source}"), err

    async def queries() -> list[str]:
        async with FileMemoryProvider(store) as provider:
            return [e.query for e in await EpisodicMemory(provider).load()]

    assert anyio.run(queries) == [odd, "second"]


async def test_a_grade_note_that_redaction_lengthens_still_restores() -> None:
    # grade() takes a note of NOTE_CHARS; its redacted form is what a backup holds.
    from deepcrew_episodic.providers import InMemoryProvider

    memory = EpisodicMemory(InMemoryProvider())
    stored = await memory.record(Episode(query="rotate the keys"))
    note = ("password=hunter2 " * 200)[:2000]
    await memory.grade(stored.id, outcome="success", note=note)
    [grade] = await memory.grades(stored.id)
    assert "hunter2" not in grade.note
    assert len(grade.note) <= 2000
    for _ in range(2):  # a backup of the restored copy restores too
        [episode] = await memory.load(graded=False)
        copy = EpisodicMemory(InMemoryProvider())
        await copy.restore(episode, grades=[grade])
        [grade] = await copy.grades(stored.id)
        assert len(grade.note) <= 2000
        assert "hunter2" not in grade.note
        memory = copy
