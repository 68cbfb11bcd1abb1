"""Recall by meaning from the store's index: a memory that has not read the log ranks from the
vectors the store keeps, with exactly the episodes, scores and parts of the log read in process.
"""

from __future__ import annotations

import hashlib
import random
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from deepcrew_episodic import EmbedderMismatchError, Episode, EpisodicMemory
from deepcrew_episodic._episode import now_iso
from deepcrew_episodic.providers import SQLiteMemoryProvider
from deepcrew_episodic.testing._embedder import ConceptEmbedder

pytestmark = pytest.mark.anyio

DAY = 86400.0
NOW = 1_780_000_000.0
WORDS = [
    "deploy",
    "refund",
    "invoice",
    "charged",
    "billed",
    "twice",
    "double",
    "gateway",
    "timeout",
    "login",
    "broken",
    "outage",
    "website",
    "customer",
    "queue",
    "redis",
]
OUTCOMES = ["success", "failure", "partial", "unknown", "claimed_success", "abandoned"]


class DenseEmbedder:
    """Each word a fixed dense random direction; a text the normalised sum of its words'.
    Dense vectors put every component through the store's compact copy."""

    def __init__(self, name: str = "dense", dimension: int = 96) -> None:
        self.name = name
        self.dimension = dimension

    def _word(self, word: str) -> Any:
        seed = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest())
        return np.random.default_rng(seed).standard_normal(self.dimension)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            words = text.lower().split() or ["empty"]
            out.append(sum(self._word(w) for w in words).tolist())
        return out


def _embedder(kind: str, name: str | None = None) -> Any:
    if kind == "concepts":
        return ConceptEmbedder(name or "concepts")
    return DenseEmbedder(name or "dense")


async def _varied_log(path: Path, rng: random.Random, embedder: Any) -> None:
    """Episodes with and without vectors, runs, phases, grades, uses and expiry."""
    provider = SQLiteMemoryProvider(path)
    writer = EpisodicMemory(provider, max_episodes=1000, clock=lambda: NOW, embedder=embedder)
    plain = EpisodicMemory(provider, max_episodes=1000, clock=lambda: NOW)  # writes no vector
    for n in range(90):
        days = rng.choice([0, 1, 5, 30, 90, 400]) + n / 997
        episode = Episode(
            query=" ".join(rng.sample(WORDS, rng.randint(1, 4))),
            reflection=" ".join(rng.sample(WORDS, rng.randint(0, 5))) or None,
            outcome=rng.choice(OUTCOMES),  # type: ignore[arg-type]
            timestamp=now_iso(NOW - days * DAY),
            run_id=rng.choice(["", "", "", "r1", "r2"]),
            phase=rng.choice(["", "", "plan"]),
            forget_after=now_iso(NOW - DAY) if rng.random() < 0.05 else None,
        )
        await (plain if rng.random() < 0.15 else writer).record(episode)
    stored = await writer.load()
    for episode in rng.sample(stored, 15):
        for _ in range(rng.randint(1, 4)):
            await writer.used(episode.id)
    for episode in rng.sample(stored, 15):
        await writer.grade(episode.id, outcome=rng.choice(["success", "failure"]), source="user")
    await writer.forget(rng.choice(stored).id)
    await provider.aclose()


def _parts(ranking: Any) -> list[tuple[Any, ...]]:
    return [
        (
            s.episode.id,
            s.episode.outcome,
            s.score,
            s.relevance,
            s.keyword,
            s.similarity,
            s.meaning,
            s.recency,
            s.outcome_weight,
            s.matched,
            s.uses,
            s.episode.reflection,
        )
        for s in ranking
    ]


def _summary(ranking: Any) -> tuple[Any, ...]:
    return (
        ranking.by,
        ranking.embedder_error,
        _parts(ranking),
        _parts(ranking.under_floor),
    )


async def _both(path: Path, embedder: Any, **options: Any) -> tuple[EpisodicMemory, EpisodicMemory]:
    """A memory that ranks from the store's index, and one that read the log first."""
    fresh = EpisodicMemory(
        SQLiteMemoryProvider(path),
        max_episodes=1000,
        clock=lambda: NOW,
        embedder=embedder,
        **options,
    )
    loaded = EpisodicMemory(
        SQLiteMemoryProvider(path),
        max_episodes=1000,
        clock=lambda: NOW,
        embedder=embedder,
        **options,
    )
    await loaded.load()
    return fresh, loaded


async def _same_rankings(
    fresh: EpisodicMemory, loaded: EpisodicMemory, rng: random.Random, n: int = 25
) -> None:
    for _ in range(n):
        query = " ".join(rng.sample(WORDS, rng.randint(1, 4)))
        options: dict[str, Any] = {
            "intent": rng.choice(["any", "what_failed", "what_worked"]),
            "outcome": rng.choice([None, None, {"failure", "abandoned"}]),
            "tags": None,
            "since": rng.choice([None, None, NOW - 40 * DAY]),
            "until": rng.choice([None, None, NOW - 2 * DAY]),
            "min_relevance": rng.choice([None, 0.0, 0.3]),
        }
        k = rng.choice([1, 3, 8])
        got = await fresh.explain(query, k, **options)
        want = await loaded.explain(query, k, **options)
        assert not fresh._log.synced  # it ranked from the store's index
        assert _summary(got) == _summary(want), (query, k, options)


@pytest.mark.parametrize("kind", ["concepts", "dense"])
@pytest.mark.parametrize("seed", range(3))
async def test_hybrid_ranking_from_the_store_equals_the_log_read_in_process(
    tmp_path: Path, kind: str, seed: int
) -> None:
    rng = random.Random(seed)
    path = tmp_path / "store.db"
    await _varied_log(path, rng, _embedder(kind))
    fresh, loaded = await _both(path, _embedder(kind))
    await _same_rankings(fresh, loaded, rng)
    ranking = await fresh.explain("customer billed twice", 8)
    assert ranking.by == "hybrid"
    assert any(s.meaning > 0 for s in ranking)  # the meaning part is exercised


@pytest.mark.parametrize("kind", ["concepts", "dense"])
async def test_a_paraphrase_is_found_from_the_store_without_a_shared_word(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "store.db"
    writer = EpisodicMemory(SQLiteMemoryProvider(path), embedder=_embedder(kind), clock=lambda: NOW)
    for query in ["customer billed double", "login broken", "website outage", "redis queue"]:
        await writer.record(Episode(query=query, timestamp=now_iso(NOW), outcome="success"))
    fresh, loaded = await _both(path, _embedder(kind))
    paraphrase = "client payment taken two times" if kind == "concepts" else "billed double"
    got = await fresh.explain(paraphrase, 3, min_relevance=0)
    assert _summary(got) == _summary(await loaded.explain(paraphrase, 3, min_relevance=0))
    assert got[0].episode.query == "customer billed double"
    assert got.by == "hybrid"


async def test_vectors_of_another_embedder_are_refused_and_a_reembed_replaces_them(
    tmp_path: Path,
) -> None:
    rng = random.Random(7)
    path = tmp_path / "store.db"
    await _varied_log(path, rng, _embedder("dense", "old-model"))
    fresh, loaded = await _both(path, _embedder("dense", "new-model"))
    with pytest.raises(EmbedderMismatchError):
        await fresh.explain("customer billed")
    with pytest.raises(EmbedderMismatchError):
        await loaded.explain("customer billed")
    # The reembed rewrites every vector in place: the store's copies follow.
    rebuilt = EpisodicMemory(
        SQLiteMemoryProvider(path), max_episodes=1000, embedder=_embedder("dense", "new-model")
    )
    assert await rebuilt.reembed() > 0
    fresh, loaded = await _both(path, _embedder("dense", "new-model"))
    await _same_rankings(fresh, loaded, rng, 15)
    old = EpisodicMemory(
        SQLiteMemoryProvider(path), max_episodes=1000, embedder=_embedder("dense", "old-model")
    )
    with pytest.raises(EmbedderMismatchError):
        await old.explain("customer billed")


async def test_a_failing_query_embedding_falls_back_to_keywords_from_the_store(
    tmp_path: Path,
) -> None:
    rng = random.Random(3)
    path = tmp_path / "store.db"
    await _varied_log(path, rng, _embedder("concepts"))
    broken = ConceptEmbedder()
    fresh, loaded = await _both(path, broken)
    broken.failure = "raise"
    got = await fresh.explain("customer billed twice", 5)
    want = await loaded.explain("customer billed twice", 5)
    assert got.by == "keywords-fallback"
    assert got.embedder_error is not None
    assert "unavailable" in got.embedder_error
    assert _summary(got) == _summary(want)
    assert fresh.counters.embedding_failures == 1


async def test_an_unusable_stored_vector_leaves_its_episode_to_keywords(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    writer = EpisodicMemory(
        SQLiteMemoryProvider(path), embedder=_embedder("dense"), clock=lambda: NOW
    )
    for query in ["customer billed double", "refund the invoice", "gateway timeout"]:
        await writer.record(Episode(query=query, timestamp=now_iso(NOW), outcome="success"))
    # A hand edit: one vector no longer decodes, another is another text's.
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE kv SET value = 'v1|garbage' WHERE key = 'episodic:default:v:1'")
        (other,) = conn.execute(
            "SELECT value FROM kv WHERE key = 'episodic:default:v:3'"
        ).fetchone()
        conn.execute("UPDATE kv SET value = ? WHERE key = 'episodic:default:v:2'", (other,))
    fresh, loaded = await _both(path, _embedder("dense"))
    for query in ["billed double", "customer", "refund invoice", "gateway timeout"]:
        got = await fresh.explain(query, 3, min_relevance=0)
        assert _summary(got) == _summary(await loaded.explain(query, 3, min_relevance=0))
        for s in got:
            if s.episode.query != "gateway timeout":
                assert s.similarity is None  # no usable vector: keywords only
    assert [s.episode.query for s in await fresh.explain("billed double", 3)] == [
        "customer billed double"
    ]


# Hand edits of the postings: each posting of one episode (the hybrid search counts the
# query's terms from them in one read) made a seq that is not an integer, or one too large.
POSTING_EDITS = {
    "a real": "seq + 0.5",
    "text": "'x' || seq",
    "too large": "seq + (1 << 60)",
}


@pytest.mark.parametrize("edit", sorted(POSTING_EDITS))
async def test_an_edited_posting_leaves_the_hybrid_ranking_as_in_process(
    tmp_path: Path, edit: str
) -> None:
    rng = random.Random(7)
    path = tmp_path / "store.db"
    await _varied_log(path, rng, _embedder("dense"))
    with sqlite3.connect(path) as conn:
        conn.execute(
            f"UPDATE ix_post SET seq = {POSTING_EDITS[edit]} WHERE n IS NULL AND seq = "
            "(SELECT max(seq) FROM ix_post WHERE n IS NULL)"
        )
    fresh, loaded = await _both(path, _embedder("dense"))
    for query in ["customer billed twice", "refund", *(rng.choice(WORDS) for _ in range(6))]:
        got = await fresh.explain(query, 5, min_relevance=0)
        assert _summary(got) == _summary(await loaded.explain(query, 5, min_relevance=0))
    # A seq that does not read is the index disagreeing with itself: logged, counted, and the
    # log read in process answers; one too large only points at no episode.
    assert (fresh.counters.recovered_indexes > 0) == (edit != "too large")


async def test_a_forgotten_episode_leaves_no_copy_of_its_vector(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    memory = EpisodicMemory(
        SQLiteMemoryProvider(path), max_episodes=3, embedder=_embedder("dense"), clock=lambda: NOW
    )
    for query in ["customer billed double", "refund the invoice", "gateway timeout", "redis"]:
        await memory.record(Episode(query=query, timestamp=now_iso(NOW), outcome="success"))
    stored = await memory.load()
    await memory.forget(stored[0].id)

    def copies() -> list[bytes]:
        with sqlite3.connect(path) as conn:
            (data,) = conn.execute("SELECT data FROM ix_vblock").fetchone()
            (slots,) = conn.execute("SELECT count(*) FROM ix_vslot").fetchone()
        dim = DenseEmbedder().dimension
        assert slots == len(
            [c for c in (data[i * dim : (i + 1) * dim] for i in range(8)) if any(c)]
        )
        return [data[i * dim : (i + 1) * dim] for i in range(8)]

    kept = [bool(any(c)) for c in copies()]
    # Seq 1 was evicted by the ring, the first kept one forgotten: only two copies remain.
    assert kept[:5] == [False, False, False, True, True]
    fresh = EpisodicMemory(SQLiteMemoryProvider(path), max_episodes=3, embedder=_embedder("dense"))
    assert [s.episode.query for s in await fresh.explain("gateway timeout", 3)] == [
        "gateway timeout"
    ]
    await memory.clear()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM ix_vblock").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM ix_vslot").fetchone() == (0,)


async def test_a_store_written_before_the_vector_copies_gains_them_on_open(
    tmp_path: Path,
) -> None:
    rng = random.Random(11)
    path = tmp_path / "store.db"
    await _varied_log(path, rng, _embedder("dense"))
    # As a store of schema 2 was: the log alone, no index tables.
    with sqlite3.connect(path) as conn:
        for kind, name in conn.execute(
            "SELECT type, name FROM sqlite_master WHERE name LIKE 'ix_%' AND type IN "
            "('table', 'trigger')"
        ).fetchall():
            conn.execute(f"DROP {kind} IF EXISTS {name}")
        conn.execute("PRAGMA user_version = 2")
    fresh, loaded = await _both(path, _embedder("dense"))
    await _same_rankings(fresh, loaded, rng, 10)
    with sqlite3.connect(path) as conn:
        (slots,) = conn.execute("SELECT count(*) FROM ix_vslot").fetchone()
        (vectors,) = conn.execute(
            "SELECT count(*) FROM kv WHERE key GLOB 'episodic:default:v:*'"
        ).fetchone()
    assert slots == vectors > 0


@pytest.mark.parametrize(
    "settings",
    [{"min_similarity": 0.3}, {"similarity_floor": -0.2}, {"reinforce": False}],
)
async def test_the_meaning_settings_apply_from_the_store_as_in_process(
    tmp_path: Path, settings: dict[str, Any]
) -> None:
    rng = random.Random(5)
    path = tmp_path / "store.db"
    await _varied_log(path, rng, _embedder("dense"))
    fresh, loaded = await _both(path, _embedder("dense"), **settings)
    await _same_rankings(fresh, loaded, rng, 12)


# --- the candidate streams: which keyword matches a hybrid search reads ------------------------
#
# A large part of the log shares one common word with the question ("customer"), each a weak
# keyword match that counts only when it means something too (or is on an identifier, or has
# no usable vector). The search reads the keyword candidates in streams and stops early; these
# logs put an episode of each kind among the crowd and compare both paths.

FILLER = [f"{a}{b}" for a in ("zor", "vek", "lum", "pra", "tis", "gad") for b in "abcdefghij"]


async def _crowd(path: Path, rng: random.Random, embedder: Any) -> dict[str, str]:
    """300 weak matches of "customer", and among them an episode of each kind that counts."""
    provider = SQLiteMemoryProvider(path)
    writer = EpisodicMemory(provider, max_episodes=1000, clock=lambda: NOW, embedder=embedder)
    plain = EpisodicMemory(provider, max_episodes=1000, clock=lambda: NOW)  # writes no vector
    special = {
        # a weak keyword match (one word of the question) whose meaning is strong
        "meaning": "client payment taken two times customer zorq vekq lumq",
        # a weak keyword match on an identifier
        "identifier": "ticket 4417 zorr vekr lumr prar tisr",
        # a weak keyword match without a vector
        "no vector": "customer zors veks lums pras tiss gads",
    }
    texts = ["customer " + " ".join(rng.sample(FILLER, 5)) for _ in range(300)] + list(
        special.values()
    )
    rng.shuffle(texts)
    for n, text in enumerate(texts):
        episode = Episode(
            query=text,
            outcome=rng.choice(OUTCOMES[:4]),  # type: ignore[arg-type]
            timestamp=now_iso(NOW - rng.choice([0, 3, 40, 200]) * DAY - n),
        )
        vectorless = text == special["no vector"] or rng.random() < 0.02
        await (plain if vectorless else writer).record(episode)
    await provider.aclose()
    return special


CROWD_QUERIES = [
    "customer billed twice",
    "customer cannot sign in after the password reset",
    "ticket 4417",
    "customer ticket 4417 billed",
    "customer",
    "nothing matches this question",
]


@pytest.mark.parametrize("seed", range(2))
async def test_weak_matches_that_count_are_found_among_a_crowd_of_weak_ones(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    path = tmp_path / "store.db"
    special = await _crowd(path, rng, _embedder("concepts"))
    fresh, loaded = await _both(path, _embedder("concepts"))
    for query in CROWD_QUERIES:
        for k in (1, 3, 10):
            for options in (
                {},
                {"min_relevance": 0.0},
                {"intent": "what_failed"},
                {"outcome": "success"},
                {"since": NOW - 10 * DAY},
            ):
                got = await fresh.explain(query, k, **options)  # type: ignore[arg-type]
                want = await loaded.explain(query, k, **options)  # type: ignore[arg-type]
                assert not fresh._log.synced
                assert got.by == "hybrid"
                assert _summary(got) == _summary(want), (query, k, options)
    # Each kind that counts is found, and the weak matches that do not count are not.
    found = await fresh.explain("customer billed twice", 3)
    assert found[0].episode.query == special["meaning"]
    assert found[0].keyword > 0
    assert found[0].meaning > 0
    ticket = await fresh.explain("ticket 4417 billed", 3)
    assert special["identifier"] in [s.episode.query for s in ticket]
    assert all(s.keyword < 0.3 for s in ticket)  # it counts for its identifier
    every = await fresh.explain("customer", 400, min_relevance=0)
    assert special["no vector"] in [s.episode.query for s in every]
    for s in every:  # what a weak match needs to count
        assert s.similarity is None or s.meaning >= 0.25 or s.keyword >= 0.3 or s.keyword == 0


async def test_a_small_view_of_a_crowded_log_ranks_from_the_store_as_in_process(
    tmp_path: Path,
) -> None:
    # The memory shows the newest 120 episodes only: the special ones may be outside it.
    path = tmp_path / "store.db"
    await _crowd(path, random.Random(2), _embedder("concepts"))
    options = {"max_episodes": 120, "clock": lambda: NOW, "embedder": _embedder("concepts")}
    fresh = EpisodicMemory(SQLiteMemoryProvider(path), **options)  # type: ignore[arg-type]
    loaded = EpisodicMemory(SQLiteMemoryProvider(path), **options)  # type: ignore[arg-type]
    await loaded.load()
    for query in CROWD_QUERIES:
        for k, floor in ((1, None), (5, None), (5, 0.0), (40, None)):
            got = await fresh.explain(query, k, min_relevance=floor)
            want = await loaded.explain(query, k, min_relevance=floor)
            assert not fresh._log.synced
            assert _summary(got) == _summary(want), (query, k, floor)


async def test_vectors_made_from_other_fields_leave_every_weak_match_to_keywords(
    tmp_path: Path,
) -> None:
    # The store keeps a copy of every vector, but none is usable by a memory that embeds
    # other fields: each weak match counts, and the search finds them as in process.
    rng = random.Random(4)
    path = tmp_path / "store.db"
    await _crowd(path, rng, _embedder("dense"))
    fresh, loaded = await _both(path, _embedder("dense"), embed_fields=("tags", "reflection"))
    for query in CROWD_QUERIES:
        for k in (1, 5):
            for floor in (None, 0.0):
                got = await fresh.explain(query, k, min_relevance=floor)
                want = await loaded.explain(query, k, min_relevance=floor)
                assert not fresh._log.synced
                assert _summary(got) == _summary(want), (query, k, floor)
    weak = await fresh.explain("customer", 5, min_relevance=0)
    assert len(weak) == 5
    assert all(s.similarity is None for s in weak)


async def test_a_log_mostly_without_vectors_ranks_from_the_store_as_in_process(
    tmp_path: Path,
) -> None:
    # More episodes without a vector than are scored one by one: the search finds them by
    # keywords (an embedder configured after the log was written, before any backfill).
    path = tmp_path / "store.db"
    provider = SQLiteMemoryProvider(path)
    plain = EpisodicMemory(provider, max_episodes=5000, clock=lambda: NOW)
    rng = random.Random(9)
    for n in range(2200):
        words = " ".join(rng.sample(FILLER, 5))
        await plain.record(
            Episode(query=f"customer {words}", timestamp=now_iso(NOW - n * 60), outcome="success")
        )
    writer = EpisodicMemory(
        provider, max_episodes=5000, clock=lambda: NOW, embedder=_embedder("dense")
    )
    await writer.record(Episode(query="customer billed twice", timestamp=now_iso(NOW)))
    await provider.aclose()
    fresh = EpisodicMemory(
        SQLiteMemoryProvider(path),
        max_episodes=5000,
        clock=lambda: NOW,
        embedder=_embedder("dense"),
    )
    loaded = EpisodicMemory(
        SQLiteMemoryProvider(path),
        max_episodes=5000,
        clock=lambda: NOW,
        embedder=_embedder("dense"),
    )
    await loaded.load()
    for query in ["customer", "customer billed twice", "zora vekb", "billed"]:
        for floor in (None, 0.0):
            got = await fresh.explain(query, 5, min_relevance=floor)
            want = await loaded.explain(query, 5, min_relevance=floor)
            assert not fresh._log.synced
            assert _summary(got) == _summary(want), (query, floor)


async def test_a_question_close_in_meaning_to_most_of_a_large_log_ranks_as_in_process(
    tmp_path: Path,
) -> None:
    # A few words make every episode: most of the log is a meaning candidate for any
    # question of them (more than the store orders by their facts one by one), at every age,
    # outcome, length and grade.
    rng = random.Random(12)
    path = tmp_path / "store.db"
    provider = SQLiteMemoryProvider(path)
    writer = EpisodicMemory(
        provider, max_episodes=2000, clock=lambda: NOW, embedder=_embedder("dense")
    )
    vocabulary = WORDS[:6]
    for n in range(900):
        words = rng.sample(vocabulary, rng.randint(1, 4)) + rng.sample(FILLER, rng.randint(0, 4))
        await writer.record(
            Episode(
                query=" ".join(words),
                outcome=rng.choice(OUTCOMES[:4]),  # type: ignore[arg-type]
                timestamp=now_iso(NOW - rng.choice([0, 2, 30, 90, 400]) * DAY - n),
            )
        )
    stored = await writer.load()
    for episode in rng.sample(stored, 40):
        await writer.grade(episode.id, outcome=rng.choice(["success", "failure"]), source="user")
    await provider.aclose()
    fresh, loaded = await _both(path, _embedder("dense"))
    for _ in range(12):
        query = " ".join(rng.sample(vocabulary, rng.randint(1, 3)))
        for k, options in (
            (1, {}),
            (3, {}),
            (10, {"min_relevance": 0.0}),
            (3, {"intent": "what_failed"}),
            (3, {"since": NOW - 10 * DAY}),
        ):
            got = await fresh.explain(query, k, **options)  # type: ignore[arg-type]
            want = await loaded.explain(query, k, **options)  # type: ignore[arg-type]
            assert not fresh._log.synced
            assert got.by == "hybrid"
            assert _summary(got) == _summary(want), (query, k, options)
