"""Recall by meaning: the embedder contract, failures, cost, and what reaches the model.

Storage guarantees for vectors (every provider) live in the conformance suite
(``deepcrew_episodic.testing``); ranking quality with a real model through litellm's real HTTP
path is in ``tests/test_recall_meaning_quality.py``, the CLI in ``tests/test_cli_embeddings.py``.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from llm_server import EmbedReply, ScriptedLLM

from deepcrew_episodic import (
    ConfigurationError,
    EmbeddingError,
    Episode,
    EpisodicHook,
    EpisodicMemory,
    EventType,
    LiteLLMEmbedder,
    MissingDependencyError,
    SyncEpisodicMemory,
)
from deepcrew_episodic.providers import InMemoryProvider, MemoryProvider
from deepcrew_episodic.testing._embedder import CONCEPT_EPISODES, ConceptEmbedder

pytestmark = pytest.mark.anyio

PARAPHRASE = "payment taken two times"  # means CONCEPT_EPISODES[0], shares no word with it


async def _filled(provider: MemoryProvider | None = None, **options: Any) -> EpisodicMemory:
    options.setdefault("embedder", ConceptEmbedder())
    memory = EpisodicMemory(provider or InMemoryProvider(), **options)
    for query in CONCEPT_EPISODES:
        await memory.record(Episode(query=query, response="done", outcome="success"))
    return memory


# --- the default stays keyword-only ----------------------------------------------------------


def test_a_memory_without_an_embedder_never_imports_numpy() -> None:
    code = (
        "import asyncio, sys\n"
        "from deepcrew_episodic import Episode, EpisodicMemory\n"
        "from deepcrew_episodic.providers import InMemoryProvider\n"
        "async def main():\n"
        "    m = EpisodicMemory(InMemoryProvider())\n"
        "    await m.record(Episode(query='customer billed double', response='ok'))\n"
        "    r = await m.explain('customer billed')\n"
        "    print(r.by, len(r), r[0].similarity, 'numpy' in sys.modules)\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["keywords", "1", "None", "False"]


def test_without_numpy_an_embedder_is_refused_with_the_install_hint() -> None:
    code = (
        "import sys\n"
        "sys.modules['numpy'] = None  # as if it were not installed\n"
        "from deepcrew_episodic import EpisodicMemory, MissingDependencyError\n"
        "from deepcrew_episodic.providers import InMemoryProvider\n"
        "try:\n"
        "    EpisodicMemory(InMemoryProvider(), embedder=lambda texts: [[1.0] for _ in texts])\n"
        "except MissingDependencyError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'deepcrew-episodic[embeddings]'" in done.stdout
    assert issubclass(MissingDependencyError, ImportError)


# --- the embedder contract ---------------------------------------------------------------------


class _Nameless:
    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0] for _ in texts]


@pytest.mark.parametrize(
    ("embedder", "message"),
    [
        (_Nameless(), "needs a non-empty string attribute 'name'"),
        ("openai/text-embedding-3-small", "not str"),
        (42, "not int"),
    ],
)
def test_a_bad_embedder_is_a_configuration_error_naming_it(embedder: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        EpisodicMemory(InMemoryProvider(), embedder=embedder)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("embed_fields", ["query", "secret"]),
        ("embed_fields", []),
        ("embed_fields", ["query", "query"]),
        ("embed_fields", "query"),
        ("similarity_floor", "3"),
        ("similarity_floor", float("nan")),
        ("min_similarity", 1.5),
        ("embed_timeout", 0),
        ("embed_timeout", -1),
    ],
)
def test_bad_embedding_options_name_the_option(option: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=option):
        EpisodicMemory(InMemoryProvider(), embedder=ConceptEmbedder(), **{option: value})


async def test_a_sync_callable_runs_off_the_event_loop() -> None:
    concept = ConceptEmbedder()
    threads: list[bool] = []

    def embed(texts: list[str]) -> list[list[float]]:
        time.sleep(0.01)  # an in-process model: blocking work, so it runs in a worker thread
        threads.append(True)
        return [concept._vector(t) for t in texts]

    memory = await _filled(embedder=embed)
    found = await memory.explain(PARAPHRASE)
    assert found.by == "hybrid"
    assert found[0].episode.query == CONCEPT_EPISODES[0]
    assert memory.embedder is embed
    assert memory.embedder_name is not None
    assert memory.embedder_name.endswith("embed")  # module.qualname, recorded in the log
    assert len(threads) == len(CONCEPT_EPISODES) + 2  # records, the background, the query


async def test_an_async_callable_is_an_embedder_too() -> None:
    concept = ConceptEmbedder()

    async def embed(texts: list[str]) -> list[list[float]]:
        await anyio.lowlevel.checkpoint()
        return [concept._vector(t) for t in texts]

    memory = await _filled(embedder=embed)
    assert [e.query for e in await memory.recall(PARAPHRASE)][:1] == [CONCEPT_EPISODES[0]]


# --- what is embedded, what is sent -------------------------------------------------------------


async def test_the_task_lesson_and_tags_are_embedded_not_the_response() -> None:
    embedder = ConceptEmbedder()
    memory = EpisodicMemory(InMemoryProvider(), embedder=embedder)
    await memory.record(
        Episode(
            query="Refund order 1182",
            response="A long answer about warehouses",
            reflection="Check the payment provider first",
            tags=["billing", "refunds"],
        )
    )
    assert embedder.calls == [
        ["Refund order 1182\nCheck the payment provider first\nbilling, refunds"]
    ]
    chosen = ConceptEmbedder()
    other = EpisodicMemory(InMemoryProvider(), embedder=chosen, embed_fields=["response"])
    await other.record(Episode(query="q", response="A long answer about warehouses"))
    assert chosen.calls == [["A long answer about warehouses"]]


async def test_no_secret_and_no_hidden_character_reaches_the_embedder() -> None:
    embedder = ConceptEmbedder()
    memory = EpisodicMemory(InMemoryProvider(), embedder=embedder)
    key = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2
    await memory.record(Episode(query=f"use {key} for the\u202e customer", response="ok"))
    await memory.recall(f"customer billed with {key}\u200b")
    sent = json.dumps(embedder.calls)
    assert "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" not in sent
    assert "\\u202e" not in sent
    assert "\\u200b" not in sent
    assert "[REDACTED" in sent


@pytest.mark.parametrize("how", ["deepcrew-ai", "redact=False"])
async def test_backfill_and_reembed_send_no_stored_secret_to_the_embedder(how: str) -> None:
    key = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2
    backend = InMemoryProvider()
    task = f"customer billed double, the gateway key {key} was rotated"
    if how == "deepcrew-ai":  # an old log, stored as given
        await backend.write(
            {
                "episodic:default:0": json.dumps(
                    {"query": task, "reflection": f"rotate {key} first", "tags": [key]}
                ),
                "episodic:default:__meta__": '{"count": 1, "next": 1}',
            }
        )
    else:
        await EpisodicMemory(backend, redact=False).record(
            Episode(query=task, reflection=f"rotate {key} first", tags=[key])
        )
    embedder = ConceptEmbedder()
    memory = EpisodicMemory(backend, embedder=embedder)
    assert await memory.backfill() == 1
    assert await memory.reembed() == 1
    sent = json.dumps(embedder.calls)
    assert "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" not in sent
    assert "[REDACTED" in sent
    # The vector written is usable: a fresh reader does not ask for it again.
    again = EpisodicMemory(backend, embedder=ConceptEmbedder())
    assert await again.backfill() == 0
    assert (await again.stats()).vectors == 1
    found = await again.explain("customer billed double")
    assert [s.episode.query for s in found] == [task]
    assert found[0].similarity is not None


async def test_one_embedding_call_per_record_and_per_distinct_query() -> None:
    embedder = ConceptEmbedder()
    memory = await _filled(embedder=embedder)
    assert len(embedder.calls) == len(CONCEPT_EPISODES)
    for _ in range(3):  # a refinement loop recalls the same task every iteration
        await memory.recall(PARAPHRASE)
    await memory.recall("login broken")
    queries = [c for c in embedder.calls[len(CONCEPT_EPISODES) :] if len(c) == 1]
    assert queries == [[PARAPHRASE], ["login broken"]]
    background = [c for c in embedder.calls if len(c) > 1]
    assert len(background) == 1  # measured once per memory


async def test_backfill_batches_its_calls() -> None:
    embedder = ConceptEmbedder()
    plain = EpisodicMemory(InMemoryProvider())
    for i in range(10):
        await plain.record(Episode(query=f"customer billed double {i}", response="ok"))
    memory = EpisodicMemory(plain.backend, embedder=embedder)
    assert await memory.backfill(batch_size=4) == 10
    assert [len(c) for c in embedder.calls] == [4, 4, 2]


# --- failures are never fatal ------------------------------------------------------------------


class _Hanging(ConceptEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.hang = False

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if self.hang:
            await anyio.sleep(30)
        return await super().embed(texts)


async def test_a_hanging_embedder_times_out_and_the_memory_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    embedder = _Hanging()
    memory = await _filled(embedder=embedder, embed_timeout=0.05)
    embedder.hang = True
    with caplog.at_level(logging.WARNING, logger="deepcrew_episodic"):
        started = time.perf_counter()
        stored = await memory.record(Episode(query="login broken again", response="ok"))
        ranking = await memory.explain("login broken")
        elapsed = time.perf_counter() - started
    assert elapsed < 5
    assert stored.id in {e.id for e in await memory.load()}
    assert ranking.by == "keywords-fallback"
    assert ranking.embedder_error is not None
    assert "did not answer within 0.05 s" in ranking.embedder_error
    assert [s.episode.query for s in ranking][:1] == ["login broken again"]
    assert memory.counters.embedding_failures == 2
    messages = [r.getMessage() for r in caplog.records]
    assert any("stored without a vector" in m for m in messages)
    assert any("ranked by keywords only" in m for m in messages)


async def test_backfill_raises_a_typed_error_and_keeps_what_it_wrote() -> None:
    plain = EpisodicMemory(InMemoryProvider())
    for i in range(6):
        await plain.record(Episode(query=f"customer billed double {i}", response="ok"))

    class Flaky(ConceptEmbedder):
        attempts = 0

        async def embed(self, texts: list[str]) -> list[list[float]]:
            self.attempts += 1
            if self.attempts == 2:
                raise RuntimeError("rate limited")
            return await super().embed(texts)

    memory = EpisodicMemory(plain.backend, embedder=Flaky())
    with pytest.raises(EmbeddingError, match="rate limited"):
        await memory.backfill(batch_size=3)
    assert (await memory.stats()).vectors == 3
    assert await memory.backfill(batch_size=3) == 3
    assert (await memory.stats()).vectors == 6


async def test_a_fallback_is_said_in_the_recalled_event_even_when_nothing_was_found() -> None:
    embedder = ConceptEmbedder()
    memory = await _filled(embedder=embedder)
    hook = EpisodicHook(memory)
    found = await hook.before_run([{"role": "user", "content": PARAPHRASE}])
    assert found.count == 1
    assert found.events[0].data["ranking"] == "hybrid"
    assert found.events[0].data["embedder_error"] is None
    embedder.failure = "raise"
    missed = await hook.before_run([{"role": "user", "content": "bake sourdough bread"}])
    assert missed.count == 0
    (event,) = missed.events
    assert event.event is EventType.EPISODE_RECALLED
    assert event.data["count"] == 0
    assert event.data["ranking"] == "keywords-fallback"
    assert "embedding service unavailable" in event.data["embedder_error"]


# --- ranking -------------------------------------------------------------------------------------


async def test_explain_shows_both_parts_of_each_score() -> None:
    memory = await _filled()
    await memory.record(Episode(query="customer billed double for payment", response="ok"))
    ranking = await memory.explain("customer billed twice")
    assert ranking.by == "hybrid"
    for hit in ranking:
        assert hit.similarity is not None
        assert hit.relevance == pytest.approx(
            hit.keyword + hit.meaning * (1 - hit.keyword), abs=1e-9
        )
        assert f"keyword={hit.keyword:.2f} similarity={hit.similarity:.2f}" in hit.why()
    assert ranking[0].keyword > 0
    assert ranking[0].meaning > 0


async def test_an_exact_identifier_is_still_found_by_its_keyword() -> None:
    memory = await _filled()
    await memory.record(Episode(query="INC-40213 follow-up", response="ok"))
    assert [e.query for e in await memory.recall("INC-40213")] == ["INC-40213 follow-up"]


async def test_a_single_episode_log_recalls_a_paraphrase_and_nothing_unrelated() -> None:
    memory = EpisodicMemory(InMemoryProvider(), embedder=ConceptEmbedder())
    await memory.record(Episode(query=CONCEPT_EPISODES[0], response="ok"))
    assert len(await memory.recall(PARAPHRASE)) == 1
    assert await memory.recall("bake sourdough bread") == []
    assert await memory.recall("plan a trip to Lisbon") == []


async def test_filters_and_intents_apply_to_meaning_matches() -> None:
    memory = EpisodicMemory(InMemoryProvider(), embedder=ConceptEmbedder())
    await memory.record(
        Episode(query="customer billed double", response="r", outcome="failure", tags=["std"])
    )
    await memory.record(
        Episode(query="client charged twice", response="r", outcome="success", tags=["vip"])
    )
    failed = await memory.recall(PARAPHRASE, intent="what_failed")
    assert [e.outcome for e in failed] == ["failure", "success"]
    worked = await memory.recall(PARAPHRASE, intent="what_worked")
    assert [e.outcome for e in worked] == ["success", "failure"]
    assert [e.outcome for e in await memory.recall(PARAPHRASE, tags=["vip"])] == ["success"]
    assert [e.outcome for e in await memory.recall(PARAPHRASE, outcome="failure")] == ["failure"]


async def test_a_stale_or_garbled_vector_is_ignored_and_backfilled() -> None:
    memory = await _filled()
    backend = memory.backend
    # the episode's text changed behind the memory's back: its vector no longer matches it
    raw = json.loads((await backend.retrieve_many(["episodic:default:e:1"]))[0] or "{}")
    raw["query"] = "rotate the signing keys"
    await backend.write(
        {
            "episodic:default:e:1": json.dumps(raw),
            "episodic:default:v:2": "v1|garbage|0000|@@@",
            "episodic:default:__gen__": "changed",
        }
    )
    fresh = EpisodicMemory(backend, embedder=ConceptEmbedder())
    assert (await fresh.stats()).vectors == len(CONCEPT_EPISODES) - 2
    assert await fresh.backfill() == 2
    assert (await fresh.stats()).vectors == len(CONCEPT_EPISODES)


async def test_sweep_removes_a_vector_whose_episode_is_gone() -> None:
    memory = await _filled()
    await memory.backend.delete(["episodic:default:e:2"])
    assert "episodic:default:v:2" in await memory.backend.keys("episodic:default:v:")
    assert await memory.sweep() == 1
    assert "episodic:default:v:2" not in await memory.backend.keys("episodic:default:v:")


def test_the_sync_facade_backfills_and_reembeds() -> None:
    backend = InMemoryProvider()
    with SyncEpisodicMemory(backend) as plain:
        plain.record(Episode(query=CONCEPT_EPISODES[0], response="ok"))
    with SyncEpisodicMemory(backend, embedder=ConceptEmbedder()) as memory:
        assert memory.recall(PARAPHRASE) == []
        assert memory.backfill() == 1
        assert len(memory.recall(PARAPHRASE)) == 1
        assert memory.explain(PARAPHRASE).by == "hybrid"
    with SyncEpisodicMemory(backend, embedder=ConceptEmbedder("v2")) as other:
        assert other.reembed() == 1
        assert len(other.recall(PARAPHRASE)) == 1


class _Leaky(ConceptEmbedder):
    """An embedding service whose error echoes the key it refused, with a terminal escape."""

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if self.failure:
            raise RuntimeError(f"Incorrect API key provided: {LEAKED_KEY}\x1b[2J\nretry later")
        return await super().embed(texts)


LEAKED_KEY = "sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Jh1Gf0Ed" * 2


async def test_an_embedder_error_never_carries_a_secret_or_a_control_sequence(
    caplog: pytest.LogCaptureFixture,
) -> None:
    embedder = _Leaky()
    memory = await _filled(embedder=embedder)
    hook = EpisodicHook(memory)
    embedder.failure = "leak"
    with caplog.at_level(logging.WARNING, logger="deepcrew_episodic"):
        await memory.record(Episode(query="customer billed again", response="ok"))
        ranking = await memory.explain("customer billed")
        recalled = await hook.before_run([{"role": "user", "content": "login broken"}])
    shown = [
        ranking.embedder_error or "",
        json.dumps(recalled.events[0].data),
        *(r.getMessage() for r in caplog.records),
    ]
    assert "Incorrect API key provided" in ranking.embedder_error  # type: ignore[operator]
    for text in shown:
        assert "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Jh1Gf0Ed" not in text
        assert "\x1b" not in text
    assert memory.counters.embedding_failures == 3


async def test_a_bare_identifier_finds_its_episode_whatever_the_model_sees_in_it() -> None:
    class Blind(ConceptEmbedder):
        """A model that sees nothing in numbers: the worst case for an identifier."""

        def _vector(self, text: str) -> list[float]:
            return super()._vector("".join(c for c in text if not c.isdigit()) or "nothing")

    memory = EpisodicMemory(InMemoryProvider(), embedder=Blind())
    await memory.record(Episode(query="Refund order 51174 for a damaged parcel", response="ok"))
    await memory.record(Episode(query="the river bank of the city", response="ok"))
    assert [e.query for e in await memory.recall("51174")] == [
        "Refund order 51174 for a damaged parcel"
    ]
    # a shared word without shared meaning still drops out
    assert await memory.recall("bank transfer failed for a customer payment") == []


class _Boom(BaseException):
    """Not an Exception, and not a cancellation: still the embedder's failure."""


class _BadFloat:
    def __float__(self) -> float:
        raise RuntimeError("no float here")


def _answers(kind: str, texts: list[str]) -> Any:
    import numpy as np

    if kind == "base-exception":
        raise _Boom("boom")
    if kind == "zero-dim":
        return np.array(1.0)
    if kind == "bad-float":
        return [[_BadFloat(), 1.0] for _ in texts]
    if kind == "complex":
        return np.array([[1 + 2j, 3j] for _ in texts])
    if kind == "object":
        return np.array([["a", "b"] for _ in texts], dtype=object)
    if kind == "none":
        return None
    if kind == "ragged":
        return [[1.0, 2.0], [1.0]][: len(texts)] if len(texts) > 1 else [[1.0, 2.0, 3.0]]
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind", ["base-exception", "zero-dim", "bad-float", "complex", "object", "none"]
)
async def test_any_misbehaving_embedder_costs_no_episode_and_no_run(kind: str) -> None:
    good = ConceptEmbedder()
    broken = False

    def embed(texts: list[str]) -> Any:
        return _answers(kind, texts) if broken else [good._vector(t) for t in texts]

    memory = await _filled(embedder=embed)
    broken = True
    stored = await memory.record(Episode(query="login broken again", response="ok"))
    assert stored.id in {e.id for e in await memory.load()}
    ranking = await memory.explain("login broken")
    assert ranking.by == "keywords-fallback"
    recalled = await EpisodicHook(memory).before_run([{"role": "user", "content": "login"}])
    assert recalled.error is None
    assert memory.counters.embedding_failures >= 2


@pytest.mark.parametrize("scale", [3e38, 1e-30])
async def test_vectors_of_any_magnitude_are_kept(scale: float) -> None:
    good = ConceptEmbedder()

    def embed(texts: list[str]) -> list[list[float]]:
        return [[x * scale for x in good._vector(t)] for t in texts]

    memory = await _filled(embedder=embed)
    assert (await memory.stats()).vectors == len(CONCEPT_EPISODES)
    assert memory.counters.embedding_failures == 0
    assert [e.query for e in await memory.recall(PARAPHRASE)][:1] == [CONCEPT_EPISODES[0]]


async def test_the_name_is_read_once_and_a_sync_embed_method_runs_in_a_thread() -> None:
    class Drifting:
        """Reports a new revision on every read of its name, and embeds synchronously."""

        def __init__(self) -> None:
            self.reads = 0
            self.concept = ConceptEmbedder()

        @property
        def name(self) -> str:
            self.reads += 1
            return f"model-rev{self.reads}"

        def embed(self, texts: list[str]) -> list[list[float]]:
            time.sleep(0.01)  # blocking: must not run on the event loop
            return [self.concept._vector(t) for t in texts]

    memory = await _filled(embedder=Drifting())
    assert memory.embedder_name == "model-rev1"
    assert (await memory.stats()).vectors == len(CONCEPT_EPISODES)
    assert memory.counters.embedding_failures == 0


async def test_a_hanging_sync_model_is_abandoned_at_the_timeout() -> None:
    release = threading.Event()
    concept = ConceptEmbedder()

    def embed(texts: list[str]) -> list[list[float]]:
        if texts and texts[0].startswith("hang"):
            release.wait(10)  # an in-process model stuck in native code
        return [concept._vector(t) for t in texts]

    memory = await _filled(embedder=embed, embed_timeout=0.2)
    try:
        started = time.perf_counter()
        stored = await memory.record(Episode(query="hang now", response="ok"))
        assert time.perf_counter() - started < 2
        assert stored.id in {e.id for e in await memory.load()}
        assert memory.counters.embedding_failures == 1
    finally:
        release.set()


@pytest.mark.parametrize(
    "garbage",
    ["[1, 2]", '{"name": "concepts", "dimension": "1024"}', "not json", "{" * 5000, ""],
)
async def test_an_unreadable_embedder_record_is_replaced_not_obeyed(garbage: str) -> None:
    memory = await _filled()
    await memory.backend.write({"episodic:default:__embedder__": garbage})
    fresh = EpisodicMemory(memory.backend, embedder=ConceptEmbedder())
    stored = await fresh.record(Episode(query="customer billed double again", response="ok"))
    assert fresh.counters.embedding_failures == 0
    raw = (await memory.backend.retrieve_many(["episodic:default:__embedder__"]))[0]
    assert json.loads(raw or "") == {"name": "concepts", "dimension": ConceptEmbedder.dimension}
    assert stored.id in {s.episode.id for s in await fresh.explain(PARAPHRASE)}


async def test_the_configured_api_key_never_comes_back_in_an_error(llm: ScriptedLLM) -> None:
    key = "zz9-Ab.Cd-ef12+X"  # no known key shape: only its literal value can catch it
    llm.embed_fallback = EmbedReply.error(401, f"credentials {key} refused")
    embedder = LiteLLMEmbedder("openai/hash-64", api_base=llm.base_url, api_key=key)
    memory = EpisodicMemory(InMemoryProvider(), embedder=embedder)
    await memory.record(Episode(query="customer billed double", response="ok"))
    ranking = await memory.explain("customer billed")
    assert ranking.by == "keywords-fallback"
    assert ranking.embedder_error is not None
    assert "refused" in ranking.embedder_error
    assert key not in ranking.embedder_error
    assert memory.counters.embedding_failures == 2
