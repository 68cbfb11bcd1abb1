"""A follow-up that only says the previous answer worked (or only thanks) holds no task: it is
not recalled for, so no past run that happens to share its verdict word ("worked", "fixed")
reaches the prompt or is counted as used."""

from __future__ import annotations

import pytest

from deepcrew_episodic import Episode, EpisodicHook, EpisodicMemory
from deepcrew_episodic.providers import InMemoryProvider

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    "message", ["Thanks, that worked!", "perfect, that fixed it", "solved, thank you"]
)
async def test_a_thank_you_for_a_fix_recalls_nothing(message: str) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    unrelated = await memory.record(
        Episode(
            query="Email notifications stopped working after the SMTP change",
            reflection="The fix: the solved relay needed the new password.",
            outcome="success",
        )
    )
    hook = EpisodicHook(memory, grade_followups=True)
    first = await hook.before_run([{"role": "user", "content": "Reset the admin password"}])
    await hook.after_run(first.query, "Reset it.", conversation_id="thread-1")
    assert await memory.explain(message, min_relevance=0)  # it shares a word with that run
    recalled = await hook.before_run(
        [{"role": "user", "content": message}], conversation_id="thread-1"
    )
    assert recalled.followup is not None
    assert recalled.grade is not None  # the run was graded
    assert recalled.block == ""
    assert recalled.episodes == []
    assert unrelated.id not in await memory.uses()
