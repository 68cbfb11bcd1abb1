"""The user's next message grades the run before it: the hook and the runner, end to end.

With ``grade_followups`` and a ``conversation_id``, ``before_run`` finds the conversation's
previous run in the store (a fresh worker per turn finds it too), grades it with the user's
verdict (a verified grade whose note holds the message), and decides how this turn is
recorded: a thank-you is not a run, a "still broken" is another try at the previous task.
A grading model and the runner: tests/test_followups_runner.py.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import Clock
from stores import Store

from deepcrew_episodic import (
    ConfigurationError,
    Episode,
    EpisodicHook,
    EpisodicMemory,
    FollowUp,
)
from deepcrew_episodic.providers import InMemoryProvider, MemoryProvider, SQLiteMemoryProvider

pytestmark = pytest.mark.anyio

TASK = "The CSV export times out for large accounts"
ANSWER = "Raise the export timeout to 120 seconds."


def ask(*turns: str) -> list[dict[str, Any]]:
    """A conversation: the user's turns, each but the last answered."""
    messages: list[dict[str, Any]] = []
    for n, text in enumerate(turns):
        messages.append({"role": "user", "content": text})
        if n < len(turns) - 1:
            messages.append({"role": "assistant", "content": f"answer {n}"})
    return messages


async def turn(
    hook: EpisodicHook, conversation: str, messages: list[dict[str, Any]], answer: str
) -> tuple[Any, Any]:
    recalled = await hook.before_run(messages, conversation_id=conversation)
    recorded = await hook.after_run(recalled.query, answer, conversation_id=conversation)
    return recalled, recorded


def graded_hook(memory: EpisodicMemory, **options: Any) -> EpisodicHook:
    return EpisodicHook(memory, agent_id="support", grade_followups=True, **options)


# --- the hook ---------------------------------------------------------------------------------


async def test_a_thank_you_grades_the_previous_run_and_is_not_a_run_of_its_own() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    hook = graded_hook(memory)
    _, first = await turn(hook, "chat-1", ask(TASK), ANSWER)
    assert first.episode.conversation_id == "chat-1"
    recalled, recorded = await turn(hook, "chat-1", ask(TASK, "Thanks, that fixed it!"), "Glad!")
    assert recalled.followup == FollowUp("success", new_request=False)
    assert recalled.grade.episode_id == first.id
    assert (recalled.grade.outcome, recalled.grade.verified) == ("success", True)
    assert recalled.grade.note == "user follow-up: Thanks, that fixed it!"
    assert (recorded.episode, recorded.error, recorded.events) == (None, None, ())
    [episode] = await memory.load()
    assert (episode.id, episode.outcome) == (first.id, "success")


async def test_still_broken_grades_a_failure_and_the_next_answer_is_another_try_at_the_task() -> (
    None
):
    memory = EpisodicMemory(InMemoryProvider())
    hook = graded_hook(memory)
    _, first = await turn(hook, "chat-1", ask(TASK), ANSWER)
    recalled, retry = await turn(
        hook, "chat-1", ask(TASK, "Still broken, same point."), "Use the background export."
    )
    assert recalled.grade.outcome == "failure"
    # Recalled and recorded under the task, not under "still broken": the block of this very
    # turn already shows the first answer as a failure.
    assert recalled.query == TASK
    assert "; failed (reported by the user)] asked: " in recalled.block
    assert retry.episode.query == TASK
    assert retry.episode.response == "Use the background export."
    assert retry.episode.outcome == "unknown"
    # The next follow-up grades the retry, not the first answer again.
    recalled, _ = await turn(hook, "chat-1", ask(TASK, "x", "That worked!"), "Great.")
    assert recalled.grade.episode_id == retry.id
    outcomes = {e.id: e.outcome for e in await memory.load()}
    assert outcomes == {first.id: "failure", retry.id: "success"}


async def test_a_verdict_with_a_new_question_grades_and_runs_the_question_as_a_task() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    hook = graded_hook(memory)
    _, first = await turn(hook, "c", ask(TASK), ANSWER)
    message = "That worked, thanks! How do I export invoices too?"
    recalled, recorded = await turn(hook, "c", ask(TASK, message), "Reports > Invoices > Export.")
    assert recalled.followup == FollowUp("success", new_request=True)
    assert recalled.grade.episode_id == first.id
    assert recorded.episode.query == message
    assert recorded.episode.conversation_id == "c"


@pytest.mark.parametrize("message", ["How long does the change take?", "this doesn't work?"])
async def test_a_new_question_grades_nothing_and_is_recorded_as_it_is(message: str) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    hook = graded_hook(memory)
    await turn(hook, "c", ask(TASK), ANSWER)
    recalled, recorded = await turn(hook, "c", ask(TASK, message), "An answer.")
    assert recalled.followup == FollowUp(None, new_request=True)
    assert recalled.grade is None
    assert recorded.episode.query == message
    assert await memory.grades() == []


async def test_ok_grades_nothing_and_records_nothing() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    hook = graded_hook(memory)
    await turn(hook, "c", ask(TASK), ANSWER)
    recalled, recorded = await turn(hook, "c", ask(TASK, "ok"), "Anything else?")
    assert (recalled.followup, recalled.grade) == (FollowUp(None, False), None)
    assert recorded.episode is None
    assert [e.outcome for e in await memory.load()] == ["unknown"]


async def test_the_first_message_of_a_conversation_is_a_run_even_when_it_reads_as_thanks() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    hook = graded_hook(memory)
    recalled, recorded = await turn(hook, "new", ask("thanks"), "You're welcome")
    assert recalled.followup is None
    assert recorded.episode is not None


async def test_two_conversations_interleaved_grade_their_own_runs(store: Store) -> None:
    async with store.open() as provider:
        memory = EpisodicMemory(provider, namespace="chats")
        hook = graded_hook(memory)
        _, a = await turn(hook, "chat-a", ask("Webhook deliveries fail with 401"), "Rotate it.")
        _, b = await turn(hook, "chat-b", ask("Charts are blank in Safari"), "Clear site data.")
        await turn(hook, "chat-a", ask("x", "Nope, still 401."), "Check the header name.")
        await turn(hook, "chat-b", ask("x", "That was it, works now."), "Good.")
        outcomes = {e.query: e.outcome for e in await memory.load() if e.id in (a.id, b.id)}
        assert outcomes == {
            "Webhook deliveries fail with 401": "failure",
            "Charts are blank in Safari": "success",
        }
        grades = await memory.grades()
        assert {(g.episode_id, g.outcome) for g in grades} == {(a.id, "failure"), (b.id, "success")}


async def test_a_fresh_worker_per_turn_finds_the_previous_run_in_the_store(store: Store) -> None:
    # A serverless chat backend: nothing survives between turns but the store.
    shared: MemoryProvider | None = None if store.shared_across_processes else store.open()

    async def worker(conversation: str, messages: list[dict[str, Any]], answer: str) -> Any:
        provider = shared if shared is not None else store.open()
        try:
            memory = EpisodicMemory(provider, namespace="serverless")
            return await turn(graded_hook(memory), conversation, messages, answer)
        finally:
            if shared is None:
                await provider.aclose()

    _, first = await worker("chat-9", ask(TASK), ANSWER)
    await worker("chat-other", ask("Invoice shows the old VAT number"), "Update billing.")
    recalled, recorded = await worker("chat-9", ask(TASK, "Didn't help."), "Try the background one")
    assert recalled.grade.episode_id == first.id
    assert recorded.episode.query == TASK
    provider = shared if shared is not None else store.open()
    try:
        memory = EpisodicMemory(provider, namespace="serverless")
        assert (await memory.latest("chat-9")).id == recorded.id
        [graded] = [e for e in await memory.load() if e.id == first.id]
        assert graded.outcome == "failure"
    finally:
        await provider.aclose()


TURN_IN_ANOTHER_PROCESS = """
import sys, anyio
from deepcrew_episodic import EpisodicHook, EpisodicMemory
from deepcrew_episodic.providers import SQLiteMemoryProvider

async def main():
    async with SQLiteMemoryProvider(sys.argv[1]) as backend:
        hook = EpisodicHook(EpisodicMemory(backend, namespace="chat"), grade_followups=True)
        messages = [{"role": "user", "content": sys.argv[2]}]
        recalled = await hook.before_run(messages, conversation_id="t-7")
        recorded = await hook.after_run(recalled.query, "Rotate it.", conversation_id="t-7")
        print(recorded.id)

anyio.run(main)
"""


async def test_the_previous_run_recorded_by_another_process_is_graded(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    done = await anyio.run_process(
        [sys.executable, "-c", TURN_IN_ANOTHER_PROCESS, str(db), "Webhook deliveries fail with 401"]
    )
    first = done.stdout.decode().strip()
    async with SQLiteMemoryProvider(db) as backend:
        memory = EpisodicMemory(backend, namespace="chat")
        recalled = await graded_hook(memory).before_run(
            ask("Webhook deliveries fail with 401", "Nope, still 401."), conversation_id="t-7"
        )
        assert recalled.grade.episode_id == first
        assert [e.outcome for e in await memory.load()] == ["failure"]


async def test_a_turn_handled_twice_grades_once() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    hook = graded_hook(memory)
    _, first = await turn(hook, "c", ask(TASK), ANSWER)
    messages = ask(TASK, "Thanks, that fixed it!")
    once = await hook.before_run(messages, conversation_id="c")
    again = await graded_hook(memory).before_run(messages, conversation_id="c")  # a retry
    assert once.grade is not None
    assert again.grade is None
    assert again.followup == once.followup
    assert len(await memory.grades(first.id)) == 1


async def test_a_run_graded_already_gets_the_users_grade_too() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    hook = graded_hook(memory)
    _, first = await turn(hook, "c", ask(TASK), ANSWER)
    await memory.grade(first.id, outcome="success", note="the export test passed")
    recalled, _ = await turn(hook, "c", ask(TASK, "still broken"), "Another try.")
    assert [g.note for g in await memory.grades(first.id)] == [
        "the export test passed",
        "user follow-up: still broken",
    ]
    assert recalled.grade.outcome == "failure"


async def test_a_follow_up_after_the_run_was_forgotten_or_expired_grades_nothing(
    clock: Clock,
) -> None:
    memory = EpisodicMemory(InMemoryProvider(), clock=clock, max_age=timedelta(days=7))
    hook = graded_hook(memory)
    _, forgotten = await turn(hook, "gone", ask(TASK), ANSWER)
    await memory.forget(forgotten.id)
    recalled, recorded = await turn(hook, "gone", ask(TASK, "that worked"), "Great.")
    assert (recalled.followup, recalled.grade) == (None, None)
    assert recorded.episode.query == "that worked"  # no previous run: an ordinary turn

    await turn(hook, "old", ask(TASK), ANSWER)
    clock.now += timedelta(days=8).total_seconds()
    recalled, _ = await turn(hook, "old", ask(TASK, "still broken"), "Retry.")
    assert recalled.grade is None
    assert await memory.grades() == []
    assert memory.counters.grading_failures == 0  # nothing to grade is not a failure


async def test_a_run_the_provider_never_answered_is_not_graded() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    hook = graded_hook(memory)
    await turn(hook, "c", ask(TASK), ANSWER)
    outage = await hook.failed(
        TASK, TimeoutError("no answer"), infrastructure=True, conversation_id="c"
    )
    assert outage.episode.outcome == "abandoned"
    recalled, recorded = await turn(hook, "c", ask(TASK, "still broken"), "Retry.")
    assert (recalled.followup, recalled.grade) == (None, None)
    assert recorded.episode.query == "still broken"


async def test_previous_id_names_the_run_to_grade() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    hook = graded_hook(memory)
    _, first = await turn(hook, "c", ask(TASK), ANSWER)
    await turn(hook, "c", ask(TASK, "Also: how do I export invoices?"), "Reports > Invoices.")
    recalled = await hook.before_run(
        ask(TASK, "x", "The first one didn't help"), conversation_id="c", previous_id=first.id
    )
    assert recalled.grade.episode_id == first.id
    await memory.forget(first.id)
    recalled = await hook.before_run(ask("no luck"), conversation_id="c", previous_id=first.id)
    assert recalled.grade is None
    assert memory.counters.grading_failures == 1  # the named run is gone: said, counted


async def test_without_the_option_a_follow_up_is_a_run_and_the_conversation_is_stored() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    hook = EpisodicHook(memory)
    await turn(hook, "c", ask(TASK), ANSWER)
    recalled, recorded = await turn(hook, "c", ask(TASK, "Thanks, that fixed it!"), "Glad!")
    assert (recalled.followup, recalled.grade) == (None, None)
    assert recorded.episode.conversation_id == "c"
    assert await memory.grades() == []
    # No conversation named: no follow-up to read either.
    recalled = await graded_hook(memory).before_run(ask(TASK, "still broken"))
    assert recalled.followup is None


async def test_the_note_holds_the_message_redacted_then_cut() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    hook = graded_hook(memory)
    await turn(hook, "c", ask(TASK), ANSWER)
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 3
    message = "still broken with key " + key + " " + "and more words " * 100
    recalled, _ = await turn(hook, "c", ask(TASK, message), "Retry.")
    note = recalled.grade.note
    assert key[:12] not in note
    assert "[REDACTED:" in note
    assert len(note) <= len("user follow-up: ") + 300


async def test_a_failing_grader_grades_nothing_and_the_run_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(message: str, previous: Episode) -> FollowUp:
        raise RuntimeError("grader down")

    def wrong(message: str, previous: Episode) -> str:
        return "success"

    for grader in (broken, wrong):
        memory = EpisodicMemory(InMemoryProvider())
        hook = EpisodicHook(memory, grade_followups=grader)  # type: ignore[arg-type]
        await turn(hook, "c", ask(TASK), ANSWER)
        recalled, recorded = await turn(hook, "c", ask(TASK, "still broken"), "Retry.")
        assert (recalled.followup, recalled.grade) == (None, None)
        assert recorded.episode.query == "still broken"  # an ordinary turn
        assert memory.counters.grading_failures == 1
        assert await memory.grades() == []
    assert "reading the follow-up in conversation c failed" in caplog.text
    assert "still broken" not in caplog.text  # the log holds no episode text


async def test_a_custom_async_grader_sees_the_previous_episode() -> None:
    seen: list[tuple[str, str]] = []

    async def grader(message: str, previous: Episode) -> FollowUp:
        seen.append((message, previous.query))
        return FollowUp("partial", new_request=False, by="mine")

    memory = EpisodicMemory(InMemoryProvider())
    hook = EpisodicHook(memory, grade_followups=grader)
    await turn(hook, "c", ask(TASK), ANSWER)
    recalled, retry = await turn(hook, "c", ask(TASK, "meh"), "Retry.")
    assert seen == [("meh", TASK)]
    assert recalled.grade.outcome == "partial"
    assert retry.episode.query == TASK  # a partial is another try at the task too


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"grade_followups": "yes"}, "grade_followups must be True, False"),
    ],
)
def test_the_option_is_checked(options: dict[str, Any], why: str) -> None:
    with pytest.raises(ConfigurationError, match=why):
        EpisodicHook(EpisodicMemory(InMemoryProvider()), **options)


@pytest.mark.parametrize(
    ("conversation", "why"),
    [
        ("chat 1", "conversation_id: no white space"),
        ("x" * 129, "conversation_id: at most 128 characters"),
        ("chat\u200b", "conversation_id: no white space or invisible characters"),
    ],
)
async def test_a_bad_conversation_id_is_refused(conversation: str, why: str) -> None:
    hook = graded_hook(EpisodicMemory(InMemoryProvider()))
    with pytest.raises(ConfigurationError, match=why):
        await hook.before_run(ask(TASK), conversation_id=conversation)
    with pytest.raises(ConfigurationError, match=why):
        await hook.after_run(TASK, ANSWER, conversation_id=conversation)
    with pytest.raises(ConfigurationError, match="previous_id must be an episode id"):
        await hook.before_run(ask(TASK), conversation_id="c", previous_id="")


async def test_latest_is_the_newest_unexpired_episode_of_the_conversation(clock: Clock) -> None:
    memory = EpisodicMemory(InMemoryProvider(), clock=clock)
    first = await memory.record(Episode(query="a", conversation_id="c"))
    await memory.record(Episode(query="b", conversation_id="other"))
    assert (await memory.latest("c")).id == first.id
    clock.now += 1
    await memory.record(Episode(query="c", conversation_id="c", forget_after="2000-01-01T00:00Z"))
    assert (await memory.latest("c")).id == first.id  # the newer one has expired
    assert await memory.latest("nobody") is None
    ring = EpisodicMemory(InMemoryProvider(), max_episodes=2)
    evicted = await ring.record(Episode(query="a", conversation_id="c"))
    assert (await ring.latest("c")).id == evicted.id
    for n in range(2):
        await ring.record(Episode(query=f"other {n}"))
    assert await ring.latest("c") is None  # evicted from the ring
    kept = await ring.record(Episode(query="b", conversation_id="c"))
    assert (await ring.latest("c")).id == kept.id
    await ring.clear()
    assert await ring.latest("c") is None
    with pytest.raises(ConfigurationError, match="conversation_id must be a non-empty string"):
        await memory.latest("")


async def test_a_turn_after_a_thank_you_is_recorded_even_when_its_message_has_no_text() -> None:
    # The thank-you decides its own turn only: the next turn (a screenshot, a file) is a run.
    memory = EpisodicMemory(InMemoryProvider())
    hook = graded_hook(memory)
    await turn(hook, "c", ask(TASK), ANSWER)
    _, thanks = await turn(hook, "c", ask(TASK, "Thanks, that fixed it!"), "Glad!")
    assert thanks.episode is None
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    messages = [*ask(TASK, "Thanks, that fixed it!"), {"role": "user", "content": [image]}]
    recalled = await hook.before_run(messages, conversation_id="c")
    assert recalled.query == ""
    recorded = await hook.after_run(
        "What is wrong in this screenshot?", "The date filter is off.", conversation_id="c"
    )
    assert recorded.episode is not None
    assert len(await memory.load()) == 2


@pytest.mark.parametrize(
    "said",
    [
        FollowUp("abandoned", new_request=False),  # type: ignore[arg-type]
        FollowUp("unknown", new_request=False),  # type: ignore[arg-type]
        FollowUp("claimed_success", new_request=False),  # type: ignore[arg-type]
        FollowUp("success", new_request="no"),  # type: ignore[arg-type]
    ],
)
async def test_a_grader_that_says_no_verdict_the_user_can_give_grades_nothing(
    said: FollowUp,
) -> None:
    # An "abandoned" grade would hide the run from recall; "unknown" would erase its outcome.
    memory = EpisodicMemory(InMemoryProvider())
    hook = EpisodicHook(memory, grade_followups=lambda message, previous: said)
    _, first = await turn(hook, "c", ask(TASK), ANSWER)
    await memory.grade(first.id, outcome="success", note="the export test passed")
    recalled, recorded = await turn(hook, "c", ask(TASK, "hm"), "Another answer.")
    assert (recalled.followup, recalled.grade) == (None, None)
    assert memory.counters.grading_failures == 1
    assert [g.note for g in await memory.grades(first.id)] == ["the export test passed"]
    assert [e.outcome for e in await memory.recall(TASK)][:1] == ["success"]
    assert recorded.episode is not None  # an ordinary turn


async def test_a_thank_you_that_also_reports_a_new_problem_records_the_next_run() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    hook = graded_hook(memory)
    _, first = await turn(hook, "c", ask(TASK), ANSWER)
    message = "Thanks, that fixed it. The login page is broken for our EU users"
    recalled, recorded = await turn(hook, "c", ask(TASK, message), "Clear the EU SSO cache.")
    assert (recalled.grade.episode_id, recalled.grade.outcome) == (first.id, "success")
    assert recorded.episode is not None
    assert recorded.episode.query == message


async def test_a_thank_you_turn_whose_grading_failed_is_not_a_run_either() -> None:
    # Else the next follow-up would grade the "you're welcome" and retry "Thanks" as a task.
    from deepcrew_episodic import VerifierError

    memory = EpisodicMemory(InMemoryProvider())
    hook = graded_hook(memory)
    _, first = await turn(hook, "c", ask(TASK), ANSWER)
    thanks = ask(TASK, "Thanks, that fixed it!")
    recalled = await hook.before_run(thanks, conversation_id="c")
    ungraded = await hook.unverified(
        recalled.query,
        "Glad it helped!",
        VerifierError("grading service down"),
        conversation_id="c",
    )
    assert (ungraded.episode, ungraded.error) == (None, None)
    later, retry = await turn(hook, "c", ask(TASK, "Thanks, that fixed it!", "still broken"), "..")
    assert later.grade.episode_id == first.id
    assert retry.episode.query == TASK
