"""Grade a run from the user's next message: "thanks, that fixed it" / "still broken".

python examples/grade_from_followup.py

Nobody checks a support bot's answer when it is given, so every run is recorded as ``unknown``,
and outcome-aware recall (``intent="what_worked"``) has nothing to go on: ``stats()`` says the
outcome signal is not wired. The signal arrives one turn later, in the user's follow-up. This
example keeps the id of each recorded run (``Recorded.id``), reads the follow-up with a tiny
keyword rule, and grades the run with ``memory.grade``. The episodes are never rewritten: each
grade is a record of its own, applied on every read. Once the follow-ups are wired, the answer
that worked ranks first and the warning is gone.

Offline: the bot's answers are canned (the hook does not care where an answer came from; with a
model, call it between ``before_run`` and ``after_run`` as ``examples/bare_litellm.py`` does).
"""

from __future__ import annotations

import re
from typing import Any

import anyio

from deepcrew_episodic import EpisodicHook, EpisodicMemory, Outcome
from deepcrew_episodic.providers import InMemoryProvider

# (the user's question, the bot's answer, the user's next message)
CONVERSATIONS = [
    (
        "The CSV export times out for large accounts",
        "Raise the export timeout to 120 seconds under Settings > Advanced.",
        "Still broken, it times out at the same point.",
    ),
    (
        "Password reset email never arrives",
        "Our sender domain was on a blocklist; it is delisted, ask them to retry.",
        "Thanks, that fixed it!",
    ),
    (
        "CSV export of a large account times out",
        "Use the background export: Reports > Export > 'Email me the file'. It has no time limit.",
        "That worked, the file arrived in five minutes. Thanks!",
    ),
    (
        "How do I add a second admin to our workspace?",
        "Settings > Members > Invite, then set the role to Admin.",
        "ok",
    ),
    (
        "Invoice PDF shows the old VAT number",
        "Update it under Billing > Company details; the next invoice picks it up.",
        "Solved, the new invoice is right.",
    ),
    (
        "Webhook deliveries fail with 401",
        "Rotate the signing secret and paste the new one into your endpoint.",
        "Didn't help, still 401 on every delivery.",
    ),
    (
        "Can I change the billing currency?",
        "Yes, once per year, under Billing > Plan.",
        "How long does the change take?",
    ),
    (
        "Two-factor codes rejected for one user",
        "Their phone's clock drifts; turn on automatic time and try a fresh code.",
        "That was it, works now.",
    ),
    (
        "Dashboard charts are blank in Safari",
        "Clear the site data for our domain and reload.",
        "Nope, still blank.",
    ),
    (
        "What is the rate limit of the reports API?",
        "600 requests per minute per token.",
        "thanks",
    ),
]

NEXT_QUESTION = "CSV export keeps timing out on a big account"

# Checked first: "not fixed" and "thanks, but still broken" are failures.
BROKEN = re.compile(r"\b(still|not|nope|broken|same error)\b|n't\b", re.IGNORECASE)
WORKED = re.compile(r"\b(fixed|worked|works|solved|that was it)\b", re.IGNORECASE)


def verdict(follow_up: str) -> Outcome | None:
    """What the user's next message says about the previous answer, or ``None`` when it says
    nothing (a plain "thanks" is politeness, not proof; a new question is a new run). A wrong
    verified grade misleads recall until another one corrects it, so anything unclear stays
    ungraded."""
    if BROKEN.search(follow_up):
        return "failure"
    if WORKED.search(follow_up):
        return "success"
    return None


async def show_ranking(memory: EpisodicMemory, intent: str) -> None:
    print(f"recall({NEXT_QUESTION!r}, intent={intent!r}):")
    for hit in await memory.explain(NEXT_QUESTION, intent=intent):
        print(f"  {hit.score:.3f} [{hit.episode.outcome}] {hit.episode.response[:60]!r}")
        print(f"        {hit.why()}")


async def show_stats(memory: EpisodicMemory) -> None:
    stats = await memory.stats()
    counts = {outcome: n for outcome, n in stats.by_outcome.items() if n}
    print(f"stats: {stats.total} episodes {counts}, {stats.grades} grade(s)")
    print(f"  warnings: {stats.warnings or 'none'}")


async def main() -> None:
    memory = EpisodicMemory(InMemoryProvider(), namespace="support-bot")
    hook = EpisodicHook(memory, agent_id="support-bot")

    print("== 1. The bot answers; nobody has checked an answer yet ==")
    waiting: dict[str, str] = {}  # episode id -> the follow-up that will arrive for it
    for question, answer, follow_up in CONVERSATIONS:
        messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
        recalled = await hook.before_run(messages)  # past runs, injected into this one
        recorded = await hook.after_run(recalled.query, answer)  # no outcome: unknown
        if recorded.episode is None:  # recording failed (logged and counted): nothing to grade
            print(f"  not recorded: {recorded.error}")
            continue
        waiting[recorded.episode.id] = follow_up
        print(f"  recorded {recorded.episode.id[:8]} ({recorded.episode.outcome}): {question}")
    await show_stats(memory)
    await show_ranking(memory, "what_worked")
    print("  (no outcome to go on: the first CSV answer leads because it was injected into a")
    print("  later run, which counts a use; being shown is not the same as having worked)")

    print("\n== 2. The follow-ups arrive: each grades the run before it ==")
    for episode_id, follow_up in waiting.items():
        outcome = verdict(follow_up)
        if outcome is None:
            print(f"  {episode_id[:8]} {follow_up!r}: no verdict, stays unknown")
            continue
        await memory.grade(episode_id, outcome=outcome, note=f"user: {follow_up}")
        print(f"  {episode_id[:8]} {follow_up!r}: graded {outcome}")
    await show_stats(memory)
    await show_ranking(memory, "what_worked")
    await show_ranking(memory, "what_failed")

    print("\n== 3. The next run ==")
    recalled = await hook.before_run([{"role": "user", "content": NEXT_QUESTION}])
    print(recalled.block)
    failed = next(i for i, f in waiting.items() if verdict(f) == "failure")
    print(f"\ngrades of {failed[:8]}: {await memory.grades(failed)}")


if __name__ == "__main__":
    anyio.run(main)
