"""One item per run: which iteration stands for a run, and where it ranks, depend on the run and
the query alone, never on how many other episodes the log holds (keywords and hybrid)."""

from __future__ import annotations

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from deepcrew_episodic import Episode, EpisodicMemory
from deepcrew_episodic.providers import InMemoryProvider
from deepcrew_episodic.testing._embedder import ConceptEmbedder

pytestmark = pytest.mark.anyio

WORDS = ["deploy", "billing", "service", "prod", "migration", "rollback", "cache", "worker"]
OUTCOMES = ["success", "failure", "partial", "unknown", "claimed_success", "abandoned"]
QUERY = "deploy the billing service to prod"
NOW = 1_780_000_000.0


def _text(words: list[str]) -> str:
    return " ".join(words) or "noop"


async def _ranked(
    runs: list[list[tuple[list[str], str]]],
    others: list[list[str]],
    unrelated: list[list[str]],
    *,
    intent: str = "any",
    embedder: ConceptEmbedder | None = None,
    query: str = QUERY,
    top_k: int = 500,
) -> list[tuple[str, str]]:
    """(id, run_id) of every recalled item, best first, for a log of *runs* (their iterations
    interleaved with *others*) and then *unrelated* episodes."""
    clock = [NOW - 86400.0 * 40]

    def now() -> float:
        return clock[0]

    memory = EpisodicMemory(InMemoryProvider(), clock=now, embedder=embedder, max_episodes=10_000)
    longest = max((len(r) for r in runs), default=0)
    for step in range(longest):
        for r, run in enumerate(runs):
            if step < len(run):
                words, outcome = run[step]
                clock[0] += 3600.0
                await memory.record(
                    Episode(
                        id=f"run{r}-it{step}",
                        query=_text(words),
                        reflection=f"lesson {step} of run {r}",
                        run_id=f"run-{r}",
                        outcome=outcome,  # type: ignore[arg-type]
                    )
                )
        if step < len(others):
            clock[0] += 3600.0
            await memory.record(Episode(id=f"other{step}", query=_text(others[step])))
    for i, words in enumerate(unrelated):
        clock[0] += 60.0
        await memory.record(Episode(id=f"unrelated{i}", query=_text(words)))
    clock[0] = NOW
    found = await memory.explain(query, top_k, intent=intent)
    return [(s.episode.id, s.episode.run_id) for s in found]


ITERATION = st.tuples(st.lists(st.sampled_from(WORDS), max_size=5), st.sampled_from(OUTCOMES))
RUNS = st.lists(st.lists(ITERATION, min_size=1, max_size=3), min_size=1, max_size=3)
TEXTS = st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6), max_size=4)
# Unrelated episodes come in batches of one text (a log full of routine deploys), enough of them
# to fill any candidate window.
UNRELATED = st.lists(
    st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6), st.integers(1, 40)),
    max_size=3,
).map(lambda batches: [words for words, count in batches for _ in range(count)])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    runs=RUNS,
    others=TEXTS,
    unrelated=UNRELATED,
    intent=st.sampled_from(["any", "what_worked", "what_failed"]),
    top_k=st.sampled_from([1, 3, 500]),
)
@example(  # the failure fetched, the success behind twenty better matches
    runs=[[(["deploy"], "failure"), (["deploy"], "success")]],
    others=[],
    unrelated=[["deploy"]] * 20,
    intent="what_failed",
    top_k=1,
)
def test_unrelated_episodes_never_change_a_runs_item_or_its_order(
    runs: list[list[tuple[list[str], str]]],
    others: list[list[str]],
    unrelated: list[list[str]],
    intent: str,
    top_k: int,
) -> None:
    before = anyio.run(lambda: _ranked(runs, others, [], intent=intent, top_k=top_k))
    after = anyio.run(lambda: _ranked(runs, others, unrelated, intent=intent, top_k=top_k))
    kept = [item for item in after if not item[0].startswith("unrelated")]
    # The same iteration per run, in the same order against the rest: what the unrelated
    # episodes push out of the top k goes from the bottom.
    assert kept == before[: len(kept)]


async def test_a_failed_then_successful_run_reads_as_its_success_however_large_the_log() -> None:
    run = [
        (["deploy", "billing", "service", "prod"], "failure"),
        (["deploy", "billing"], "success"),
    ]
    for filler in (0, 30, 300):
        unrelated = [["deploy", "billing", "service", "cache"]] * filler
        for top_k in (1, 3, 500):
            found = await _ranked([run], [], unrelated, top_k=top_k)
            shown = [i[0] for i in found if i[1] == "run-0"]
            # the success, never the superseded failure; pushed down by better matches
            assert shown == (["run0-it1"] if top_k > filler else []), (filler, top_k)


async def test_a_run_of_three_reads_as_its_latest_matching_iteration_with_many_others() -> None:
    run = [
        (["deploy", "billing", "service", "prod"], "failure"),
        (["deploy", "billing", "service"], "partial"),
        (["rollback"], "success"),  # shares no word with the question: not this query's item
    ]
    for filler in (0, 50):
        unrelated = [["deploy", "billing", "service", "prod", "cache"]] * filler
        for top_k in (3, 500):
            found = await _ranked([run], [], unrelated, top_k=top_k)
            shown = [i[0] for i in found if i[1] == "run-0"]
            assert shown == (["run0-it1"] if top_k > filler else []), (filler, top_k)


async def test_hybrid_recall_keeps_a_runs_item_whatever_the_log_holds() -> None:
    run = [
        (["customer", "billed", "double", "deploy"], "failure"),
        (["payment", "duplicate"], "success"),
    ]
    for filler in (0, 40):
        unrelated = [["customer", "billed", "double", "cache"]] * filler
        for top_k in (3, 500):
            found = await _ranked(
                [run],
                [],
                unrelated,
                embedder=ConceptEmbedder(),
                query="customer charged twice",
                top_k=top_k,
            )
            shown = [i[0] for i in found if i[1] == "run-0"]
            assert shown == (["run0-it1"] if top_k > filler else []), (filler, top_k)


async def test_recall_shows_one_item_per_run() -> None:
    memory = EpisodicMemory(InMemoryProvider(), namespace="runs")
    for i, outcome in enumerate(["failure", "failure", "success"]):
        await memory.record(
            Episode(
                query="migrate the billing schema",
                run_id="loop-7",
                outcome=outcome,
                reflection=f"lesson {i}",
            )
        )
    await memory.record(Episode(query="migrate the billing schema by hand", outcome="partial"))
    found = await memory.explain("migrate the billing schema", 3)
    assert sorted(s.episode.run_id for s in found) == ["", "loop-7"]  # not three of one run
    (run,) = [s for s in found if s.episode.run_id]
    assert run.iterations == 3
    assert run.episode.outcome == "success"  # the run's latest iteration
    assert run.episode.reflection == "lesson 2 Earlier attempts: lesson 0; lesson 1"
    assert len(await memory.load()) == 4  # the raw iterations stay
