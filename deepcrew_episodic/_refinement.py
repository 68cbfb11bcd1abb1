"""The refinement loop: run, verify, record one episode, refine with the feedback, repeat.

Each iteration is graded by a verifier and recorded as exactly one episode whose query is the
original user query: ``success`` when the score reaches ``target_score`` (the loop stops),
``failure`` below ``failure_score``, ``partial`` in between. A verifier that fails grades
nothing: the answer is recorded as ``unknown`` and the ``VerifierError`` is raised. The
verifier's feedback goes into the next iteration's prompt.

Memory goes through an :class:`~deepcrew_episodic.EpisodicHook`; the events of each hook call
come back on its result (``Recorded.events``) and are yielded in order with the run's own.
How a finished attempt becomes an episode (left out when trivial, distilled, its transcript
kept) is :func:`record_answer`, shared by a plain run and each loop iteration; every episode
of one run carries the run's ``run_id``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ._distill import DistillationError, distill, is_trivial, write_transcript
from ._episode import Episode, Outcome
from ._events import EventType, StreamEvent, emit
from ._exceptions import VerifierError
from ._hook import EpisodicHook, Recorded, describe, infrastructure_error
from ._result import AgentResult
from ._source import OutcomeSource
from ._verify import LoopConfig, Verdict

__all__ = [
    "Attempt",
    "Recording",
    "Refinement",
    "Task",
    "judge",
    "record_answer",
    "recorded_attempt",
]

log = logging.getLogger("deepcrew_episodic")


class Attempt(Protocol):
    """One run of the model/tool turns, as the runner provides it to the loop."""

    text: str

    @property
    def tools_used(self) -> list[str]: ...

    def events(self) -> AsyncGenerator[StreamEvent, None]: ...

    def result(self) -> AgentResult: ...

    def transcript(self) -> list[dict[str, Any]]:
        """Every message of the attempt so far, its final or partial answer last."""
        ...


@dataclass(frozen=True)
class Recording:
    """How a run's attempts become episodes (the ``Agent`` options of the same names)."""

    min_turns: int = 2
    distill_model: str | None = None
    distill_params: dict[str, Any] = field(default_factory=dict)
    distill_timeout: float = 30.0
    transcript_dir: str | os.PathLike[str] | None = None
    infrastructure_failures: Literal["abandoned", "skip"] = "abandoned"


@dataclass(frozen=True)
class Task:
    """What one run is asked to do, and where its episodes go."""

    query: str
    messages: list[dict[str, Any]]
    agent_id: str
    hook: EpisodicHook | None
    attempt: Callable[[list[dict[str, Any]]], Attempt]
    run_id: str = ""
    recording: Recording = field(default_factory=Recording)
    conversation_id: str = ""  # the chat the run answers in ("": none)
    phase: str = ""  # the phase of a longer run this run is ("": none)
    transcript_name: str = ""  # the stem of its transcript files (default: the run_id)


class Refinement:
    """One refinement loop over *task*: ``events()`` runs it, ``result()`` then holds the last
    iteration's answer with every iteration's tokens and tool calls, and ``recorded`` what each
    iteration stored. An iteration whose run fails (model error, tool crash, max turns)
    records a ``failure`` episode and re-raises; one whose verifier fails records the answer
    ungraded (``unknown``, tag ``unverified``) and raises ``VerifierError``."""

    def __init__(self, config: LoopConfig, task: Task) -> None:
        self.config = config
        self.task = task
        self.recorded: list[Recorded] = []
        self._results: list[AgentResult] = []
        self._verdicts: list[Verdict] = []

    async def events(self) -> AsyncGenerator[StreamEvent, None]:
        """Each iteration's episode is recorded before ``VERIFIER_SCORED`` is yielded, so a
        consumer that stops reading there keeps it; its ``EPISODE_RECORDED`` event follows."""
        config, task = self.config, self.task
        history = list(task.messages)
        for i in range(config.max_iterations):
            yield emit(
                EventType.LOOP_ITERATION, {"iteration": i, "converged": False}, task.agent_id
            )
            run = task.attempt(history)
            async with aclosing(recorded_attempt(run, task, self.recorded, i)) as events:
                async for event in events:
                    yield event
            result = run.result()
            try:
                verdict = await judge(config, task.query, result)
            except VerifierError as exc:
                # Not graded is not failed: the answer is kept as unknown, the outage raised.
                if task.hook is not None:
                    ref, ref_error = await keep_transcript(task, run, i)
                    ungraded = await task.hook.unverified(
                        task.query,
                        result.text,
                        exc,
                        tools_used=result.tools_used,
                        run_id=task.run_id,
                        transcript_ref=ref,
                        conversation_id=task.conversation_id,
                        phase=task.phase,
                    )
                    ungraded = _with_error(ungraded, ref_error)
                    self.recorded.append(ungraded)
                    for event in ungraded.events:
                        yield event
                    if ungraded.episode is not None:
                        exc.add_note(f"unverified episode {ungraded.episode.id} recorded")
                raise
            self._results.append(result)
            self._verdicts.append(verdict)
            outcome = config.outcome(verdict.score)
            # The verifier checked this answer: its outcome stands, whatever a distillation
            # model makes of the transcript, with the verifier's source (a model verifier is
            # a judge, not a check).
            recorded = await record_answer(
                task, run, outcome=outcome, score=verdict.score, iteration=i, source=config.source()
            )
            if recorded is not None:
                self.recorded.append(recorded)
            yield emit(
                EventType.VERIFIER_SCORED,
                {
                    "iteration": i,
                    "score": verdict.score,
                    "outcome": outcome,
                    "feedback": verdict.feedback,
                },
                task.agent_id,
            )
            if recorded is not None:
                for event in recorded.events:
                    yield event
            if outcome == "success":
                yield emit(
                    EventType.LOOP_ITERATION, {"iteration": i, "converged": True}, task.agent_id
                )
                return
            history = [
                *history,
                {"role": "assistant", "content": result.text},
                {"role": "user", "content": config.refine_message(verdict)},
            ]

    def result(self) -> AgentResult:
        """The last iteration's answer, with every iteration's tokens and tool calls."""
        last = self._results[-1]
        last.tool_calls = [call for r in self._results for call in r.tool_calls]
        last.input_tokens = sum(r.input_tokens for r in self._results)
        last.output_tokens = sum(r.output_tokens for r in self._results)
        last.loop_iterations = len(self._results)
        last.confidence = self._verdicts[-1].score
        return last


async def recorded_attempt(
    run: Attempt, task: Task, recorded: list[Recorded], iteration: int | None = None
) -> AsyncGenerator[StreamEvent, None]:
    """The events of *run* (a plain run or one loop iteration). If it raises, a ``failure``
    episode naming the error is recorded (appended to *recorded*, its events yielded) and the
    error is re-raised with a note naming the episode. A model provider that could not be
    used makes it ``abandoned`` instead, or records nothing with
    ``infrastructure_failures="skip"``. Closing the generator early (the consumer left) is a
    cancellation, not a failure: nothing is recorded."""
    try:
        async with aclosing(run.events()) as events:
            async for event in events:
                yield event
    except Exception as exc:
        if task.hook is None:
            raise
        if task.recording.infrastructure_failures == "skip" and infrastructure_error(exc):
            log.info(
                "run %s not recorded: the model provider failed (%s)", task.run_id, describe(exc)
            )
            exc.add_note("not recorded: an infrastructure failure (infrastructure_failures='skip')")
            raise
        ref, ref_error = await keep_transcript(task, run, iteration)
        failure = await task.hook.failed(
            task.query,
            exc,
            partial_response=run.text,
            tools_used=run.tools_used,
            run_id=task.run_id,
            transcript_ref=ref,
            conversation_id=task.conversation_id,
            phase=task.phase,
        )
        recorded.append(_with_error(failure, ref_error))
        for event in failure.events:
            yield event
        if failure.episode is not None:
            exc.add_note(f"{failure.episode.outcome} episode {failure.episode.id} recorded")
        raise


async def record_answer(
    task: Task,
    run: Attempt,
    *,
    outcome: Outcome | None = None,
    score: float | None = None,
    iteration: int | None = None,
    source: OutcomeSource = "verifier",
) -> Recorded | None:
    """Record the finished *run* as one episode of *task* (``None``: no memory, or a trivial
    run, which is not recorded).

    *outcome* is a verifier's verdict, from *source* (``"verifier"``, or ``"judge"`` for a
    model verifier), or ``None``: nobody checked the answer (``unknown``; a score alone is the
    agent's claim; a distillation model's reading of the transcript is a ``"judge"``'s). With ``distill_model`` the episode is the model's TASK / APPROACH / LESSON;
    if that call fails, the plain episode (query and answer) is stored and the failure
    counted in ``memory.counters.reflection_failures``. With ``transcript_dir`` the
    transcript is written first and the episode points at it.
    """
    hook = task.hook
    if hook is None:
        return None
    settings = task.recording
    transcript = run.transcript()
    if not task.query.strip() or is_trivial(transcript, settings.min_turns):
        log.debug(
            "run %s not recorded: trivial (fewer than %d turns, or no task)",
            task.run_id,
            settings.min_turns,
        )
        return None
    ref, ref_error = await keep_transcript(task, run, iteration)
    recorded: Recorded | None = None
    if settings.distill_model is not None:
        episode = await _distilled(task, transcript, outcome)
        if episode is not None:
            if outcome is not None:
                episode.outcome_source = source
            episode.score = score
            episode.tools_used = sorted(set(run.tools_used))
            episode.run_id = task.run_id
            episode.phase = task.phase
            episode.transcript_ref = ref
            recorded = await hook.record(episode, conversation_id=task.conversation_id)
    if recorded is None:
        recorded = await hook.after_run(
            task.query,
            run.text,
            outcome=outcome,
            score=score,
            tools_used=run.tools_used,
            run_id=task.run_id,
            transcript_ref=ref,
            conversation_id=task.conversation_id,
            phase=task.phase,
            source=source if outcome is not None else ("agent" if score is not None else ""),
        )
    return _with_error(recorded, ref_error)


async def _distilled(
    task: Task, transcript: list[dict[str, Any]], verified: Outcome | None
) -> Episode | None:
    hook, settings = task.hook, task.recording
    assert hook is not None
    assert settings.distill_model is not None
    try:
        return await distill(
            settings.distill_model,
            transcript,
            verified=verified,
            params=settings.distill_params,
            timeout=settings.distill_timeout,
            min_turns=settings.min_turns,
            redactor=hook.memory.redactor,
        )
    except DistillationError as exc:
        hook.memory.counters.reflection_failures += 1
        log.warning("distilling run %s failed (%s); storing the plain episode", task.run_id, exc)
        return None


async def keep_transcript(
    task: Task, run: Attempt, iteration: int | None
) -> tuple[str | None, str | None]:
    """Write *run*'s transcript under ``transcript_dir`` (``<run_id>.jsonl``, or
    ``<run_id>-<n>.jsonl`` for the n-th loop iteration): its path, or why it could not be
    written (logged and counted in ``memory.counters.record_failures``; the episode is then
    stored without it)."""
    directory = task.recording.transcript_dir
    if task.hook is None or directory is None:
        return None, None
    stem = task.transcript_name or task.run_id
    name = f"{stem}.jsonl" if iteration is None else f"{stem}-{iteration + 1}.jsonl"
    try:
        path = await write_transcript(
            directory, name, run.transcript(), redactor=task.hook.memory.redactor
        )
    except Exception as exc:
        task.hook.memory.counters.record_failures += 1
        error = f"transcript of run {task.run_id} not written: {describe(exc)}"
        log.warning("%s; the episode is stored without it", error)
        return None, error
    return path, None


def _with_error(recorded: Recorded, error: str | None) -> Recorded:
    if error is None or recorded.error is not None:
        return recorded
    return dataclasses.replace(recorded, error=error)


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
