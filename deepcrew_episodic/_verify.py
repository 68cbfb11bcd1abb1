"""Grading a run: ``Verdict``, the ``Verifier`` protocol, ``LoopConfig`` and ``LLMVerifier``.

What the refinement loop (``_refinement``) is configured with. litellm is imported only when
:class:`LLMVerifier` calls a model.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import anyio

from ._episode import Outcome, outcome_for_score
from ._exceptions import ConfigurationError, VerifierError
from ._hook import describe
from ._litellm import load_litellm
from ._redact import Redactor, as_redactor, safe_message
from ._source import OutcomeSource
from ._validate import integer, number

if TYPE_CHECKING:
    from ._memory import EpisodicMemory
    from ._result import AgentResult

__all__ = ["LLMVerifier", "LoopConfig", "Verdict", "Verifier", "parse_verdict"]

REFINE_PROMPT = (
    "Your previous answer was not yet complete or sufficiently accurate. "
    "Please refine and improve it."
)


@dataclass(frozen=True)
class Verdict:
    """A verifier's grade for one answer: ``score`` in [0, 1] and feedback for the next try."""

    score: float
    feedback: str = ""

    def __post_init__(self) -> None:
        number("Verdict.score", self.score, minimum=0.0, maximum=1.0)
        if not isinstance(self.feedback, str):
            raise ConfigurationError(
                f"Verdict.feedback must be a string, not {type(self.feedback).__name__}"
            )


@runtime_checkable
class Verifier(Protocol):
    """Grades an answer: ``async (query, result) -> Verdict``. Any async function fits::

    async def has_citation(query: str, result: AgentResult) -> Verdict:
        ok = "[1]" in result.text
        return Verdict(1.0 if ok else 0.4, "" if ok else "Cite a source as [1].")
    """

    async def __call__(self, query: str, result: AgentResult, /) -> Verdict: ...


@dataclass
class LoopConfig:
    """The refinement loop around a run (deepcrew-ai's ``LoopConfig``, graded by outcome).

    Parameters
    ----------
    max_iterations:
        At most this many full runs.
    verifier:
        Grades each iteration (a :class:`Verifier`, e.g. :class:`LLMVerifier`). Required.
    target_score:
        A score at or above this is a ``success`` and ends the loop.
    failure_score:
        A score below this is a ``failure``; in between is ``partial``.
    episodic_memory:
        Where the iterations are recorded; defaults to ``Agent.episodic_memory``. Recall
        always uses ``Agent.episodic_memory``, once, before the first iteration.
    refine_prompt:
        The user message that asks for the next iteration; the verifier's feedback follows it.
    outcome_source:
        Where the verifier's outcomes come from, as the episodes record it: ``"verifier"`` (a
        test, a check in code) or ``"judge"`` (a model grading the answer), which ranks below
        the agent's own claim. ``None`` (default): ``"judge"`` for an :class:`LLMVerifier` (or
        a verifier whose ``outcome_source`` attribute says ``"judge"``), else ``"verifier"``.

    Example::

        agent.loop_config = LoopConfig(max_iterations=3,
                                       verifier=LLMVerifier("openai/gpt-4o-mini"))
    """

    max_iterations: int = 3
    verifier: Verifier | Callable[..., Any] | None = None
    target_score: float = 0.8
    failure_score: float = 0.3
    episodic_memory: EpisodicMemory | None = None
    refine_prompt: str = REFINE_PROMPT
    outcome_source: str | None = None

    def __post_init__(self) -> None:
        integer("LoopConfig.max_iterations", self.max_iterations, minimum=1)
        if self.verifier is None or not callable(self.verifier):
            raise ConfigurationError(
                "LoopConfig needs a verifier: an async (query, result) -> Verdict callable"
            )
        for name in ("target_score", "failure_score"):
            number(f"LoopConfig.{name}", getattr(self, name), minimum=0.0, maximum=1.0)
        if self.failure_score > self.target_score:
            raise ConfigurationError(
                f"LoopConfig.failure_score ({self.failure_score}) must not exceed "
                f"target_score ({self.target_score})"
            )
        if self.outcome_source is not None and self.outcome_source not in ("verifier", "judge"):
            raise ConfigurationError(
                f"LoopConfig.outcome_source must be 'verifier', 'judge' or None, not "
                f"{safe_message(repr(self.outcome_source), 60)}"
            )

    def source(self) -> OutcomeSource:
        """Where this loop's outcomes come from: ``"verifier"`` or ``"judge"`` (see
        ``outcome_source``)."""
        said = self.outcome_source
        if said is None:
            said = getattr(self.verifier, "outcome_source", None)
        return "judge" if said == "judge" else "verifier"

    def outcome(self, score: float) -> Outcome:
        """``success`` / ``failure`` / ``partial`` for an iteration's score: the library's one
        score rule (:func:`~deepcrew_episodic.outcome_for_score`) with this loop's thresholds."""
        return outcome_for_score(score, success=self.target_score, failure=self.failure_score)

    def refine_message(self, verdict: Verdict) -> str:
        feedback = verdict.feedback.strip()
        if not feedback:
            return self.refine_prompt
        return f"{self.refine_prompt}\n\nReviewer feedback on your previous answer:\n{feedback}"


# --- the LLM verifier ---------------------------------------------------------------------

VERIFIER_PROMPT = """\
You grade an AI agent's answer to a user's query, strictly.
{rubric}Answer with only a JSON object of this form:
{{"score": <a number from 0.0 to 1.0>, "issues": ["<a specific problem>", ...], \
"suggestion": "<the most useful next step to improve the answer>"}}
An excellent answer gets a score near 1.0 and an empty "issues" list."""

RAW_CHARS = 300
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


class LLMVerifier:
    """A :class:`Verifier` that asks a litellm model for ``{"score", "issues", "suggestion"}``.

    The issues and the suggestion become the verdict's feedback. A model that fails, times out
    or answers without a usable score raises ``VerifierError`` (deepcrew-ai scored that as 0,
    which recorded a verifier outage as the agent's failure).

    The query and the answer are redacted with *redact* before they are sent (``True``, the
    default: the built-in rules; a :class:`~deepcrew_episodic.Redactor`: its rules;
    ``False``: as they are): the grading model is one more service a secret must not reach.

    Its verdicts are a model judging the answer: the episodes record them with the outcome
    source ``"judge"`` (unverified; see docs/recall.md).

    Example::

        LoopConfig(verifier=LLMVerifier("openai/gpt-4o-mini", rubric="Cites the docs."))
    """

    outcome_source = "judge"

    def __init__(
        self,
        model: str,
        *,
        rubric: str | None = None,
        timeout: float = 30.0,
        params: dict[str, Any] | None = None,
        json_mode: bool = True,
        redact: Redactor | bool = True,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigurationError(f"LLMVerifier needs a litellm model name, not {model!r}")
        timeout = number("LLMVerifier timeout", timeout, minimum=0, exclusive_minimum=True)
        self.model = model
        self.rubric = rubric
        self.timeout = timeout
        self.params = dict(params or {})
        self.json_mode = json_mode
        self.redactor = as_redactor(redact)

    def messages(self, query: str, answer: str) -> list[dict[str, str]]:
        rubric = f"Grading criteria:\n{self.rubric.strip()}\n" if self.rubric else ""
        if self.redactor is not None:
            query, answer = self.redactor.redact(query), self.redactor.redact(answer)
        return [
            {"role": "system", "content": VERIFIER_PROMPT.format(rubric=rubric)},
            {"role": "user", "content": f"Query:\n{query}\n\nAnswer to grade:\n{answer}"},
        ]

    async def __call__(self, query: str, result: AgentResult, /) -> Verdict:
        litellm = await load_litellm()

        kwargs: dict[str, Any] = {"stream": False, "timeout": self.timeout}
        if self.json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        kwargs.update(self.params)
        try:
            with anyio.fail_after(self.timeout):
                response = await litellm.acompletion(
                    model=self.model, messages=self.messages(query, result.text), **kwargs
                )
        except Exception as exc:
            raise VerifierError(f"verifier model {self.model} failed: {describe(exc)}") from exc
        return parse_verdict(response.choices[0].message.content or "")


def parse_verdict(raw: str) -> Verdict:
    """A :class:`Verdict` from a verifier model's JSON (code fences and prose around it are
    tolerated); raises ``VerifierError`` quoting the answer when there is no usable score."""
    data = _json_object(raw)
    if data is None:
        raise VerifierError(
            f"the verifier's answer is not a JSON object: {safe_message(raw, RAW_CHARS)!r}"
        )
    score = data.get("score")
    if isinstance(score, str):
        with contextlib.suppress(ValueError):
            score = float(score.strip())
    if (
        isinstance(score, bool)
        or not isinstance(score, int | float)
        # The range first: exact for an integer of any size (isfinite would overflow on one
        # past a float), and it refuses NaN too.
        or not 0 <= score <= 1
        or not math.isfinite(score)
    ):
        raise VerifierError(
            f"the verifier gave no score in [0, 1] (score={_shown(data.get('score'))}): "
            f"{safe_message(raw, RAW_CHARS)!r}"
        )
    issues = data.get("issues") or []
    if isinstance(issues, str):
        issues = [issues]
    lines = (
        [f"- {str(i).strip()}" for i in issues if str(i).strip()]
        if isinstance(issues, list)
        else []
    )
    parts = ["Issues:\n" + "\n".join(lines)] if lines else []
    suggestion = str(data.get("suggestion") or "").strip()
    if suggestion:
        parts.append(f"Suggestion: {suggestion}")
    return Verdict(float(score), "\n".join(parts))


def _shown(value: Any) -> str:
    """A value of the verifier's answer, quoted in an error: redacted, then cut."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        return "a very large integer"  # repr of one of over 4,300 digits raises
    return (
        repr(safe_message(value, 40)) if isinstance(value, str) else safe_message(repr(value), 40)
    )


def _json_object(raw: str) -> dict[str, Any] | None:
    text = raw.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else text[3:]
        text = text.rsplit("```", 1)[0]
    for candidate in (text, *(m.group() for m in [_OBJECT.search(text)] if m)):
        try:
            value = json.loads(candidate)
        except (ValueError, RecursionError):  # not JSON, an integer of over 4,300 digits, ...
            continue
        if isinstance(value, dict):
            return value
    return None
