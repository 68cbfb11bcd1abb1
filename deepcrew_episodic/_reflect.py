"""The optional reflection call: one litellm request per recorded episode for a one-sentence,
reusable lesson. litellm is imported here, on the first call, never at package import."""

from __future__ import annotations

import re
from typing import Any

import anyio

from ._episode import Episode, score_contradicts
from ._litellm import load_litellm
from ._redact import Redactor

SYSTEM_PROMPT = (
    "You distil one reusable lesson from one run of an AI agent: a single sentence that would "
    "help a future run of a similar task. Answer with only that sentence. If the run teaches "
    "nothing worth carrying forward, answer exactly NONE. Never invent a lesson."
)
RESPONSE_CHARS = 1500
LESSON_CHARS = 300
_DECLINED = {"NONE", "N/A", "NO LESSON", "NOTHING"}
_LABEL = re.compile(r"^(?:lesson|answer)\s*:\s*", re.IGNORECASE)
_NONE_FIRST = re.compile(r"NONE\b(?![-'])")


def reflection_prompt(episode: Episode) -> list[dict[str, str]]:
    # A score that says the opposite of the outcome is not shown anywhere, not here either.
    shown = episode.score is not None and not score_contradicts(episode.outcome, episode.score)
    score = f" (score {episode.score:.2f})" if shown else ""
    tools = ", ".join(episode.tools_used) or "none"
    user = (
        f"Task: {episode.query}\n"
        f"Outcome: {episode.outcome}{score}\n"
        f"Tools used: {tools}\n"
        f"Answer: {episode.response[:RESPONSE_CHARS]}"
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def parse_lesson(text: str | None, redactor: Redactor | None = None) -> str | None:
    """The lesson in a model's answer, or ``None`` when it declined or said nothing.

    Declining is ``NONE`` alone (any case, with or without a full stop or quotes) or an answer
    that starts with the upper-case word ``NONE`` ("NONE - nothing new here"). "None of the
    retries helped; ..." is a lesson, not a refusal.
    """
    if not text:
        return None
    # Quotes and markdown emphasis around the answer ("**NONE**", "_NONE_") are not part of it.
    lesson = " ".join(text.split()).strip().strip("\"'`*_").strip()
    lesson = _LABEL.sub("", lesson).strip().strip("\"'`*_").strip()
    if not lesson or lesson.rstrip(".!").strip().upper() in _DECLINED:
        return None
    if _NONE_FIRST.match(lesson):
        return None
    # Redacted before it is cut: a cut secret is no longer recognisable by its shape.
    if redactor is not None:
        lesson = redactor.redact(lesson)
    if len(lesson) > LESSON_CHARS:
        lesson = lesson[: LESSON_CHARS - 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"
    return lesson


async def ask_for_lesson(
    model: str,
    episode: Episode,
    *,
    timeout_s: float,
    params: dict[str, Any],
    redactor: Redactor | None = None,
) -> str | None:
    """Call *model* once, for at most *timeout_s* seconds in all (litellm's own retries
    included); raises on any failure (the caller decides what to tolerate)."""
    litellm = await load_litellm()

    # ours last: a caller's params cannot turn the call into a stream or drop the timeout
    kwargs = {**params, "stream": False, "timeout": timeout_s}
    with anyio.fail_after(timeout_s):
        response = await litellm.acompletion(
            model=model, messages=reflection_prompt(episode), **kwargs
        )
    return parse_lesson(response.choices[0].message.content, redactor)
