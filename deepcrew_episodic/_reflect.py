"""The optional reflection call: one litellm request per recorded episode for a one-sentence,
reusable lesson. litellm is imported here, on the first call, never at package import."""

from __future__ import annotations

from typing import Any

import anyio

from ._episode import Episode

SYSTEM_PROMPT = (
    "You distil one reusable lesson from one run of an AI agent: a single sentence that would "
    "help a future run of a similar task. Answer with only that sentence. If the run teaches "
    "nothing worth carrying forward, answer exactly NONE. Never invent a lesson."
)
RESPONSE_CHARS = 1500
LESSON_CHARS = 300


def reflection_prompt(episode: Episode) -> list[dict[str, str]]:
    score = f" (score {episode.score:.2f})" if episode.score is not None else ""
    tools = ", ".join(episode.tools_used) or "none"
    user = (
        f"Task: {episode.query}\n"
        f"Outcome: {episode.outcome}{score}\n"
        f"Tools used: {tools}\n"
        f"Answer: {episode.response[:RESPONSE_CHARS]}"
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def parse_lesson(text: str | None) -> str | None:
    """The lesson in a model's answer, or ``None`` when it declined (``NONE``) or said nothing."""
    if not text:
        return None
    lesson = " ".join(text.split()).strip().strip('"').strip()
    if not lesson or lesson.rstrip(".").upper() in {"NONE", "N/A", "NO LESSON"}:
        return None
    return lesson[:LESSON_CHARS]


async def ask_for_lesson(
    model: str,
    episode: Episode,
    *,
    timeout_s: float,
    params: dict[str, Any],
) -> str | None:
    """Call *model* once; raises on any failure (the caller decides what to tolerate)."""
    import litellm

    with anyio.fail_after(timeout_s):
        response = await litellm.acompletion(
            model=model,
            messages=reflection_prompt(episode),
            stream=False,
            timeout=timeout_s,
            **params,
        )
    return parse_lesson(response.choices[0].message.content)
