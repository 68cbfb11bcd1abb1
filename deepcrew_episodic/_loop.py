"""The refinement loop: run, verify, record one episode, refine with the feedback, repeat.

Each iteration is graded by a verifier and recorded as exactly one episode whose query is the
original user query: ``success`` when the score reaches ``target_score`` (the loop stops),
``failure`` below ``failure_score``, ``partial`` in between. A verifier that fails grades
nothing: the answer is recorded as ``unknown`` and the ``VerifierError`` is raised. The
verifier's feedback goes into the next iteration's prompt.

Memory goes through an :class:`~deepcrew_episodic.EpisodicHook`; the events of each hook call
come back on its result (``Recorded.events``) and are yielded in order with the run's own.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol

from ._events import EventType, StreamEvent, emit
from ._exceptions import VerifierError
from ._hook import EpisodicHook, Recorded, describe
from ._result import AgentResult
from ._verify import LoopConfig, Verdict

__all__ = ["Attempt", "Refinement", "Task", "judge", "recorded_attempt"]


class Attempt(Protocol):
    """One run of the model/tool turns, as the runner provides it to the loop."""

    text: str

    @property
    def tools_used(self) -> list[str]: ...

    def events(self) -> AsyncGenerator[StreamEvent, None]: ...

    def result(self) -> AgentResult: ...


@dataclass(frozen=True)
class Task:
    """What one run is asked to do, and where its episodes go."""

    query: str
    messages: list[dict[str, Any]]
    agent_id: str
    hook: EpisodicHook | None
    attempt: Callable[[list[dict[str, Any]]], Attempt]


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
            async with aclosing(recorded_attempt(run, task, self.recorded)) as events:
                async for event in events:
                    yield event
            result = run.result()
            try:
                verdict = await judge(config, task.query, result)
            except VerifierError as exc:
                # Not graded is not failed: the answer is kept as unknown, the outage raised.
                if task.hook is not None:
                    ungraded = await task.hook.unverified(
                        task.query, result.text, exc, tools_used=result.tools_used
                    )
                    self.recorded.append(ungraded)
                    for event in ungraded.events:
                        yield event
                    if ungraded.episode is not None:
                        exc.add_note(f"unverified episode {ungraded.episode.id} recorded")
                raise
            self._results.append(result)
            self._verdicts.append(verdict)
            outcome = config.outcome(verdict.score)
            recorded = None
            if task.hook is not None:
                recorded = await task.hook.after_run(
                    task.query,
                    result.text,
                    outcome=outcome,
                    score=verdict.score,
                    tools_used=result.tools_used,
                )
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
    run: Attempt, task: Task, recorded: list[Recorded]
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
        if task.hook is not None:
            failure = await task.hook.failed(
                task.query, exc, partial_response=run.text, tools_used=run.tools_used
            )
            recorded.append(failure)
            for event in failure.events:
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
