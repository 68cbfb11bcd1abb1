"""Grade a run from the user's next message: "thanks, that fixed it" / "still broken".

python examples/grade_from_followup.py

Nobody checks a support bot's answer when it is given, so every run is recorded as ``unknown``,
and outcome-aware recall (``intent="what_worked"``) has nothing to go on: ``stats()`` says the
outcome signal is not wired. The signal arrives one turn later, in the user's follow-up. One
line of configuration wires it: ``EpisodicHook(memory, grade_followups=True)``, and each call
names its conversation (``conversation_id=``). The user's next message then grades the
conversation's previous run (``memory.grade``: the episode is never rewritten, each grade is a
record of its own) before this turn's recall, by a documented rule ("thanks" alone or a new
question grades nothing). A plain "thanks, that worked" is not recorded as a run of its own;
"still broken" makes the next answer another try at the same task, recorded under it.

Every turn is handled as a serverless chat backend would: a fresh memory and hook on the
store, nothing kept in the process between turns; the conversation's previous run is found in
the store by its ``conversation_id``. Ten conversations run side by side.

Offline: the bot's answers are canned (the hook does not care where an answer came from; with a
model, call it between ``before_run`` and ``after_run`` as ``examples/bare_litellm.py`` does).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import anyio

from deepcrew_episodic import EpisodicHook, EpisodicMemory
from deepcrew_episodic.providers import FileMemoryProvider

# (the user's question, the bot's answer, the user's next message, the bot's reply to it)
CONVERSATIONS = [
    (
        "The CSV export times out for large accounts",
        "Raise the export timeout to 120 seconds under Settings > Advanced.",
        "Still broken, it times out at the same point.",
        "Then use the background export: Reports > Export > 'Email me the file'.",
    ),
    (
        "Password reset email never arrives",
        "Our sender domain was on a blocklist; it is delisted, ask them to retry.",
        "Thanks, that fixed it!",
        "Glad to hear it!",
    ),
    (
        "CSV export of a large account times out",
        "Use the background export: Reports > Export > 'Email me the file'. It has no time limit.",
        "That worked, the file arrived in five minutes. Thanks!",
        "You're welcome.",
    ),
    (
        "How do I add a second admin to our workspace?",
        "Settings > Members > Invite, then set the role to Admin.",
        "ok",
        "Anything else I can help with?",
    ),
    (
        "Invoice PDF shows the old VAT number",
        "Update it under Billing > Company details; the next invoice picks it up.",
        "Solved, the new invoice is right.",
        "Great.",
    ),
    (
        "Webhook deliveries fail with 401",
        "Rotate the signing secret and paste the new one into your endpoint.",
        "Didn't help, still 401 on every delivery.",
        "Check that your endpoint reads the X-Signature header, not X-Hub-Signature.",
    ),
    (
        "Can I change the billing currency?",
        "Yes, once per year, under Billing > Plan.",
        "How long does the change take?",
        "It applies from the next invoice.",
    ),
    (
        "Two-factor codes rejected for one user",
        "Their phone's clock drifts; turn on automatic time and try a fresh code.",
        "That was it, works now.",
        "Good.",
    ),
    (
        "Dashboard charts are blank in Safari",
        "Clear the site data for our domain and reload.",
        "Nope, still blank.",
        "Turn off 'Prevent cross-site tracking' for our domain.",
    ),
    (
        "What is the rate limit of the reports API?",
        "600 requests per minute per token.",
        "thanks",
        "Any time.",
    ),
]

NEXT_QUESTION = "CSV export keeps timing out on a big account"


async def handle_turn(
    path: Path, conversation: str, messages: list[dict[str, Any]], answer: str
) -> tuple[Any, Any]:
    """One turn of one chat, as a short-lived worker handles it: open, recall, answer, record."""
    async with FileMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend, namespace="support-bot")
        hook = EpisodicHook(memory, agent_id="support-bot", grade_followups=True)
        recalled = await hook.before_run(messages, conversation_id=conversation)
        # ... the model would answer here, with recalled.messages ...
        recorded = await hook.after_run(recalled.query, answer, conversation_id=conversation)
        return recalled, recorded


async def show_ranking(memory: EpisodicMemory, intent: str) -> None:
    print(f"recall({NEXT_QUESTION!r}, intent={intent!r}):")
    for hit in await memory.explain(NEXT_QUESTION, intent=intent):
        print(f"  {hit.score:.3f} [{hit.episode.outcome}] {hit.episode.response[:60]!r}")
        print(f"        {hit.why()}")


async def show(path: Path, *intents: str) -> None:
    async with FileMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend, namespace="support-bot")
        stats = await memory.stats()
        counts = {outcome: n for outcome, n in stats.by_outcome.items() if n}
        print(f"stats: {stats.total} episodes {counts}, {stats.grades} grade(s)")
        print(f"  warnings: {stats.warnings or 'none'}")
        for intent in intents:
            await show_ranking(memory, intent)


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "episodes.json"

        print("== 1. The bot answers; nobody has checked an answer yet ==")
        for n, (question, answer, _, _) in enumerate(CONVERSATIONS):
            messages = [{"role": "user", "content": question}]
            _, recorded = await handle_turn(path, f"chat-{n}", messages, answer)
            if recorded.episode is None:  # recording failed (logged and counted)
                print(f"  not recorded: {recorded.error}")
                continue
            print(
                f"  chat-{n}: recorded {recorded.id[:8]} ({recorded.episode.outcome}): {question}"
            )
        await show(path, "what_worked")
        print("  (no outcome to go on: the first CSV answer leads because it was injected into a")
        print("  later run, which counts a use; being shown is not the same as having worked)")

        print("\n== 2. The follow-ups arrive: each grades the run before it ==")
        for n, (question, answer, follow_up, reply) in enumerate(CONVERSATIONS):
            messages = [
                {"role": "user", "content": question},
                {"role": "assistant", "content": answer},
                {"role": "user", "content": follow_up},
            ]
            recalled, recorded = await handle_turn(path, f"chat-{n}", messages, reply)
            grade = recalled.grade
            verdict = f"graded {grade.outcome}" if grade else "no verdict, stays unknown"
            if recorded.episode is None and recorded.error is None:
                kept = "the reply is not a run of its own"
            elif recorded.episode is not None:
                kept = f"reply recorded as a run of {recorded.episode.query!r}"
            else:
                kept = f"not recorded: {recorded.error}"
            print(f"  chat-{n} {follow_up!r}: {verdict}; {kept}")
        await show(path, "what_worked", "what_failed")

        print("\n== 3. The next run ==")
        recalled, _ = await handle_turn(
            path, "chat-new", [{"role": "user", "content": NEXT_QUESTION}], "(answer)"
        )
        print(recalled.block)
        async with FileMemoryProvider(path) as backend:
            memory = EpisodicMemory(backend, namespace="support-bot")
            first = await memory.select(containing="Raise the export timeout")
            print(f"\ngrades of {first[0].id[:8]}: {await memory.grades(first[0].id)}")


if __name__ == "__main__":
    anyio.run(main)
