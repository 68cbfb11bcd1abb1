"""An outcome ranks by what it says and who says so, whichever way the claim was written down:
a success the agent only claimed (recorded as ``claimed_success``, or as ``success`` from the
agent) or a model judged reads the same in the block and ranks the same under every intent."""

from __future__ import annotations

import pytest

from deepcrew_episodic import Episode, EpisodicHook, EpisodicMemory
from deepcrew_episodic._recall import INTENTS
from deepcrew_episodic.providers import InMemoryProvider

pytestmark = pytest.mark.anyio

NOW = 1_780_000_000.0


async def memory_with(*episodes: Episode) -> tuple[EpisodicMemory, list[Episode]]:
    memory = EpisodicMemory(InMemoryProvider(), clock=lambda: NOW)
    stored = [await memory.record(e) for e in episodes]
    return memory, stored


def same_day(**fields: object) -> Episode:
    return Episode(query="rotate the billing key", timestamp="2026-05-01T10:00:00Z", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("intent", INTENTS)
@pytest.mark.parametrize("judge", ["agent", "judge"])
async def test_a_claimed_success_ranks_alike_however_it_was_written(
    intent: str, judge: str
) -> None:
    memory, (as_claim, as_success) = await memory_with(
        same_day(outcome="claimed_success", outcome_source=judge),
        same_day(outcome="success", outcome_source=judge),
    )
    ranked = await memory.explain("rotate the billing key", 2, intent=intent)
    by_id = {s.episode.id: s for s in ranked}
    assert by_id[as_claim.id].episode.outcome_text() == by_id[as_success.id].episode.outcome_text()
    assert by_id[as_claim.id].outcome_weight == by_id[as_success.id].outcome_weight
    assert by_id[as_claim.id].score == by_id[as_success.id].score


@pytest.mark.parametrize("judge", ["agent", "judge"])
async def test_when_failures_are_wanted_an_unchecked_success_ranks_above_a_checked_one(
    judge: str,
) -> None:
    # It may be a failure nobody caught; a success a check confirmed is the least likely one.
    memory, (checked, claimed) = await memory_with(
        same_day(outcome="success", outcome_source="verifier"),
        same_day(outcome="success", outcome_source=judge),
    )
    ranked = await memory.explain("rotate the billing key", 2, intent="what_failed")
    assert [s.episode.id for s in ranked] == [claimed.id, checked.id]


async def test_a_success_the_hook_records_as_the_agents_ranks_as_a_claim() -> None:
    memory = EpisodicMemory(InMemoryProvider(), clock=lambda: NOW)
    checked = await memory.record(same_day(outcome="success", outcome_source="verifier"))
    hook = EpisodicHook(memory)
    done = await hook.after_run(
        "rotate the billing key", "Rotated.", outcome="success", source="agent"
    )
    assert done.episode is not None
    ranked = await memory.explain("rotate the billing key", 2, intent="what_failed")
    assert [s.episode.id for s in ranked] == [done.episode.id, checked.id]
