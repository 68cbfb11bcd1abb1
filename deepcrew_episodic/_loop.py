"""The refinement loop: run, verify, record one episode, refine with the feedback, repeat.

Each iteration is graded by a verifier and recorded as exactly one episode whose query is the
original user query: ``success`` when the score reaches ``target_score`` (the loop stops),
``failure`` below ``failure_score``, ``partial`` in between. A verifier that fails grades
nothing: the answer is recorded as ``unknown`` and the ``VerifierError`` is raised. The verifier's feedback goes into
the next iteration's prompt. litellm is imported only when :class:`LLMVerifier` calls a model.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import anyio

from ._agent import AgentResult
from ._episode import Outcome
from ._events import EventType, StreamEvent, emit
from ._exceptions import ConfigurationError, VerifierError
from ._hook import EpisodicHook, Recorded, describe
from ._validate import integer, number

if TYPE_CHECKING:
    from ._memory import EpisodicMemory

__all__ = ["LLMVerifier", "LoopConfig", "Verdict", "Verifier", "parse_verdict", "recorded_attempt"]

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

    def outcome(self, score: float) -> Outcome:
        """``success`` / ``failure`` / ``partial`` for an iteration's score."""
        if score >= self.target_score:
            return "success"
        if score < self.failure_score:
            return "failure"
        return "partial"

    def refine_message(self, verdict: Verdict) -> str:
        feedback = verdict.feedback.strip()
        if not feedback:
            return self.refine_prompt
        return f"{self.refine_prompt}\n\nReviewer feedback on your previous answer:\n{feedback}"


class Attempt(Protocol):
    """One run of the model/tool turns, as the runner provides it to the loop."""

    text: str

    @property
    def tools_used(self) -> list[str]: ...

    def events(self) -> AsyncGenerator[StreamEvent, None]: ...

    def result(self) -> AgentResult: ...


@dataclass
class LoopRecord:
    """What the loop did, for the runner to put on the final result."""

    results: list[AgentResult] = field(default_factory=list)
    recorded: list[Recorded] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)


async def refine(
    config: LoopConfig,
    *,
    query: str,
    messages: list[dict[str, Any]],
    attempt: Callable[[list[dict[str, Any]]], Attempt],
    hook: EpisodicHook | None,
    drain: Callable[[], list[StreamEvent]],
    agent_id: str,
    record: LoopRecord,
) -> AsyncGenerator[StreamEvent, None]:
    """Run the loop, yielding its events. An iteration whose run fails (model error, tool
    crash, max turns) records a ``failure`` episode and re-raises; one whose verifier fails
    records the answer ungraded (``unknown``, tag ``unverified``) and raises ``VerifierError``.

    Each iteration's episode is recorded before ``VERIFIER_SCORED`` is yielded, so a consumer
    that stops reading there keeps it; its ``EPISODE_RECORDED`` event follows."""
    history = list(messages)
    for i in range(config.max_iterations):
        yield emit(EventType.LOOP_ITERATION, {"iteration": i, "converged": False}, agent_id)
        run = attempt(history)
        async with aclosing(
            recorded_attempt(run, query=query, hook=hook, drain=drain, recorded=record.recorded)
        ) as events:
            async for event in events:
                yield event
        result = run.result()
        try:
            verdict = await judge(config, query, result)
        except VerifierError as exc:
            # Not graded is not failed: the answer is kept as unknown, the outage is raised.
            if hook is not None:
                ungraded = await hook.unverified(
                    query, result.text, exc, tools_used=result.tools_used
                )
                record.recorded.append(ungraded)
                for event in drain():
                    yield event
                if ungraded.episode is not None:
                    exc.add_note(f"unverified episode {ungraded.episode.id} recorded")
            raise
        record.results.append(result)
        record.verdicts.append(verdict)
        outcome = config.outcome(verdict.score)
        if hook is not None:
            record.recorded.append(
                await hook.after_run(
                    query,
                    result.text,
                    outcome=outcome,
                    score=verdict.score,
                    tools_used=result.tools_used,
                )
            )
        yield emit(
            EventType.VERIFIER_SCORED,
            {
                "iteration": i,
                "score": verdict.score,
                "outcome": outcome,
                "feedback": verdict.feedback,
            },
            agent_id,
        )
        for event in drain():
            yield event
        if outcome == "success":
            yield emit(EventType.LOOP_ITERATION, {"iteration": i, "converged": True}, agent_id)
            return
        history = [
            *history,
            {"role": "assistant", "content": result.text},
            {"role": "user", "content": config.refine_message(verdict)},
        ]


async def recorded_attempt(
    run: Attempt,
    *,
    query: str,
    hook: EpisodicHook | None,
    drain: Callable[[], list[StreamEvent]],
    recorded: list[Recorded],
) -> AsyncGenerator[StreamEvent, None]:
    """The events of *run* (a plain run or one loop iteration). If it raises, a ``failure``
    episode naming the error is recorded (appended to *recorded*, its events yielded) and the
    error is re-raised with a note naming the episode. Closing the generator early (the
    consumer left) is a cancellation, not a failure: nothing is recorded."""
    try:
        async with aclosing(run.events()) as events:
            async for event in events:
                yield event
    except Exception as exc:
        if hook is not None:
            failure = await hook.failed(
                query, exc, partial_response=run.text, tools_used=run.tools_used
            )
            recorded.append(failure)
            for event in drain():
                yield event
            if failure.episode is not None:
                exc.add_note(f"failure episode {failure.episode.id} recorded")
        raise


async def judge(config: LoopConfig, query: str, result: AgentResult) -> Verdict:
    """Ask the verifier; anything but a :class:`Verdict` becomes a ``VerifierError``."""
    assert config.verifier is not None  # checked by LoopConfig
    try:
        verdict = await config.verifier(query, result)
    except VerifierError:
        raise
    except Exception as exc:
        raise VerifierError(f"the verifier raised {describe(exc)}") from exc
    if not isinstance(verdict, Verdict):
        raise VerifierError(f"the verifier returned {type(verdict).__name__}, not a Verdict")
    return verdict


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

    Example::

        LoopConfig(verifier=LLMVerifier("openai/gpt-4o-mini", rubric="Cites the docs."))
    """

    def __init__(
        self,
        model: str,
        *,
        rubric: str | None = None,
        timeout: float = 30.0,
        params: dict[str, Any] | None = None,
        json_mode: bool = True,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigurationError(f"LLMVerifier needs a litellm model name, not {model!r}")
        timeout = number("LLMVerifier timeout", timeout, minimum=0, exclusive_minimum=True)
        self.model = model
        self.rubric = rubric
        self.timeout = timeout
        self.params = dict(params or {})
        self.json_mode = json_mode

    def messages(self, query: str, answer: str) -> list[dict[str, str]]:
        rubric = f"Grading criteria:\n{self.rubric.strip()}\n" if self.rubric else ""
        return [
            {"role": "system", "content": VERIFIER_PROMPT.format(rubric=rubric)},
            {"role": "user", "content": f"Query:\n{query}\n\nAnswer to grade:\n{answer}"},
        ]

    async def __call__(self, query: str, result: AgentResult, /) -> Verdict:
        import litellm

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
        raise VerifierError(f"the verifier's answer is not a JSON object: {raw[:RAW_CHARS]!r}")
    score = data.get("score")
    if isinstance(score, str):
        with contextlib.suppress(ValueError):
            score = float(score.strip())
    if (
        isinstance(score, bool)
        or not isinstance(score, int | float)
        or not math.isfinite(score)
        or not 0 <= score <= 1
    ):
        raise VerifierError(
            f"the verifier gave no score in [0, 1] (score={data.get('score')!r}): {raw[:RAW_CHARS]!r}"
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


def _json_object(raw: str) -> dict[str, Any] | None:
    text = raw.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else text[3:]
        text = text.rsplit("```", 1)[0]
    for candidate in (text, *(m.group() for m in [_OBJECT.search(text)] if m)):
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None
