"""Episodic memory for the OpenAI Agents SDK (``openai-agents``): :func:`run` is
``Runner.run`` that recalls before the model sees the task and records after the run, and
:func:`run_streamed` the same for ``Runner.run_streamed``.

Example::

    from deepcrew_episodic.integrations.openai_agents import run

    result = await run(agent, "Where is order 7?", memory=memory)
    print(result.final_output, result.recalled_ids, result.recorded_id)

The ``## Relevant past experience`` block reaches the model through the SDK's own
``RunConfig.call_model_input_filter``, appended to the instructions of every model call of the
run (handoffs included), so it is never written to a ``Session`` or to ``to_input_list()``.
The outcome is the verdict the run carries: a tripped guardrail is a verified ``failure``,
passing output guardrails or a *verifier*'s score a verified grade, the model's own final
answer a claim (``claimed_success``). Memory never fails the run: what
:class:`~deepcrew_episodic.EpisodicHook` does (logged, counted, an event) is what happens here.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import traceback
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deepcrew_episodic import (
    ConfigurationError,
    Episode,
    EpisodicHook,
    EpisodicMemory,
    MissingDependencyError,
    Outcome,
    Recorded,
    Verdict,
    VerifierError,
)

try:
    from agents import (
        Agent,
        InputGuardrail,
        InputGuardrailTripwireTriggered,
        ItemHelpers,
        OutputGuardrail,
        OutputGuardrailTripwireTriggered,
        RunConfig,
        Runner,
        RunResult,
        RunResultStreaming,
        RunState,
        ToolCallItem,
    )
    from agents.exceptions import AgentsException, ModelTimeoutError
    from agents.guardrail import GuardrailFunctionOutput
    from agents.items import RunItem, TResponseInputItem
    from agents.result import RunResultBase
    from agents.run_config import CallModelData, CallModelInputFilter, ModelInputData
    from agents.stream_events import StreamEvent as AgentsStreamEvent
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError(
        "deepcrew_episodic.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'deepcrew-episodic[openai-agents]'"
    ) from exc

__all__ = ["EpisodicRun", "EpisodicStream", "RunVerifier", "run", "run_streamed"]

log = logging.getLogger("deepcrew_episodic")

RunVerifier = Callable[[str, RunResultBase], Verdict | Awaitable[Verdict]]
"""Grades a finished run: ``(task, result) -> Verdict``, a plain or an async function."""

# A guardrail's output_info is whatever the application returned: shown this long at most.
INFO_CHARS = 500


class _WhatMemoryDid:
    """The ids and outcome a run's memory side reports, shared by :class:`EpisodicRun` and
    :class:`EpisodicStream`."""

    recalled: list[Episode]
    recorded: Episode | None

    @property
    def recalled_ids(self) -> list[str]:
        """The ids of the episodes injected into this run, in the order shown."""
        return [episode.id for episode in self.recalled]

    @property
    def recorded_id(self) -> str | None:
        """The id of the episode recorded for this run, or ``None`` when nothing was stored."""
        return None if self.recorded is None else self.recorded.id

    @property
    def outcome(self) -> Outcome | None:
        """The recorded episode's outcome, or ``None`` when nothing was stored."""
        return None if self.recorded is None else self.recorded.outcome


@dataclass(frozen=True)
class EpisodicRun(_WhatMemoryDid):
    """What :func:`run` returns: the SDK's :class:`~agents.RunResult` and what memory did.

    ``recalled`` are the episodes the model was shown (best first), ``recorded`` the episode
    stored for this run (its :attr:`recorded_id` is what ``memory.grade`` takes when the
    verdict arrives later). ``recall_error`` / ``record_error`` say why memory could not help;
    the run went on all the same. A run paused for a tool approval (:attr:`interrupted`)
    records nothing: the run that resumes it does.
    """

    result: RunResult
    query: str
    recalled: list[Episode] = field(default_factory=list)
    recall_error: str | None = None
    recorded: Episode | None = None
    record_error: str | None = None

    @property
    def final_output(self) -> Any:
        """The run's final output (``result.final_output``)."""
        return self.result.final_output

    @property
    def interrupted(self) -> bool:
        """Whether the run paused for a tool approval (nothing was recorded)."""
        return bool(self.result.interruptions)


async def run(
    agent: Agent[Any],
    input: str | list[TResponseInputItem] | RunState[Any],
    *,
    memory: EpisodicMemory | EpisodicHook,
    verifier: RunVerifier | None = None,
    run_config: RunConfig | Mapping[str, Any] | None = None,
    **runner_kwargs: Any,
) -> EpisodicRun:
    """``Runner.run(agent, input, ...)`` with episodic memory around it.

    Before the run, the episodes relevant to the task (the last user message of *input*)
    are recalled and their block is added to the instructions of each model call. After it,
    one episode is recorded with the outcome the run carries:

    - *verifier* given: its :class:`~deepcrew_episodic.Verdict` decides (a score of 0.7 or
      more is ``success``, below 0.3 ``failure``, ``partial`` between); its feedback is kept
      with the answer.
    - output guardrails ran and none tripped: ``success`` (verified by them).
    - neither: ``claimed_success``, the model's own say-so.
    - a guardrail tripped (``InputGuardrailTripwireTriggered``,
      ``OutputGuardrailTripwireTriggered``): ``failure``, naming the guardrail and what it
      reported; the exception is re-raised.
    - a guardrail raised (its own exception, not a tripwire): the answer an output guardrail
      was checking, ungraded (``unknown``, tag ``unverified``); the exception is re-raised.
    - any other exception: ``failure`` naming the error, or ``abandoned`` (tag
      ``infrastructure``) when the model provider could not be used (unreachable, timed out,
      rate-limited, overloaded, refusing the key); the exception is re-raised with a note
      naming the recorded episode.

    *memory* is an :class:`~deepcrew_episodic.EpisodicMemory` (episodes get the agent's name
    as ``agent_id``) or an :class:`~deepcrew_episodic.EpisodicHook` for its settings
    (``agent_id``, ``tags``, ``top_k``, ``max_block_chars``, ``on_event``). *run_config* and
    every other keyword argument go to ``Runner.run`` unchanged; a ``call_model_input_filter``
    of yours runs first, then the block is added. A memory that fails on recall or record
    never fails the run: the failure is logged, counted in ``memory.counters`` and returned
    as ``recall_error`` / ``record_error``. A *verifier* that raises records the answer
    ungraded (``unknown``, tag ``unverified``) and raises
    :class:`~deepcrew_episodic.VerifierError`.
    """
    setup = _Setup(agent, input, memory, verifier, run_config)
    query, recalled, recall_error, config = await setup.recall()
    try:
        result = await Runner.run(agent, input, run_config=config, **runner_kwargs)
    except Exception as error:
        await setup.record_error(query, error)
        raise
    query, recorded = await setup.record(query, result)
    return EpisodicRun(
        result,
        query,
        recalled,
        recall_error,
        None if recorded is None else recorded.episode,
        None if recorded is None else recorded.error,
    )


def run_streamed(
    agent: Agent[Any],
    input: str | list[TResponseInputItem] | RunState[Any],
    *,
    memory: EpisodicMemory | EpisodicHook,
    verifier: RunVerifier | None = None,
    run_config: RunConfig | Mapping[str, Any] | None = None,
    **runner_kwargs: Any,
) -> EpisodicStream:
    """``Runner.run_streamed`` with episodic memory around it: what :func:`run` does, for a
    run whose events you stream. Iterate :meth:`EpisodicStream.stream_events` to the end: it
    recalls, starts the run, yields the SDK's events and records the run after the last one
    (or when the stream raises, before re-raising). Example::

        streamed = run_streamed(agent, "Where is order 7?", memory=memory)
        async for event in streamed.stream_events():
            ...
        print(streamed.final_output, streamed.recorded_id)
    """
    setup = _Setup(agent, input, memory, verifier, run_config)
    return EpisodicStream(setup, runner_kwargs)


class EpisodicStream(_WhatMemoryDid):
    """What :func:`run_streamed` returns. Until :meth:`stream_events` starts, :attr:`result`
    is ``None``; after it ends, the fields say what memory did, as on :class:`EpisodicRun`.
    A stream you stop reading before its end records nothing."""

    def __init__(self, setup: _Setup, runner_kwargs: dict[str, Any]) -> None:
        self._setup = setup
        self._runner_kwargs = runner_kwargs
        self._started = False
        self.result: RunResultStreaming | None = None
        self.query = ""
        self.recalled: list[Episode] = []
        self.recall_error: str | None = None
        self.recorded: Episode | None = None
        self.record_error: str | None = None

    async def stream_events(self) -> AsyncGenerator[AgentsStreamEvent, None]:
        """Recall, run, and yield the SDK's stream events; record the run after the last."""
        if self._started:
            raise ConfigurationError("an EpisodicStream streams its run once")
        self._started = True
        setup = self._setup
        self.query, self.recalled, self.recall_error, config = await setup.recall()
        self.result = Runner.run_streamed(
            setup.agent, setup.input, run_config=config, **self._runner_kwargs
        )
        try:
            async for event in self.result.stream_events():
                yield event
        except Exception as error:
            await setup.record_error(self.query, error)
            raise
        self.query, recorded = await setup.record(self.query, self.result)
        if recorded is not None:
            self.recorded, self.record_error = recorded.episode, recorded.error

    @property
    def final_output(self) -> Any:
        """The run's final output (``None`` until the stream has ended)."""
        return None if self.result is None else self.result.final_output

    @property
    def interrupted(self) -> bool:
        """Whether the run paused for a tool approval (nothing was recorded)."""
        return self.result is not None and bool(self.result.interruptions)


class _Setup:
    """One run's memory: the recall before it and the record after it, for either runner."""

    def __init__(
        self,
        agent: Agent[Any],
        input: str | list[TResponseInputItem] | RunState[Any],
        memory: EpisodicMemory | EpisodicHook,
        verifier: RunVerifier | None,
        run_config: RunConfig | Mapping[str, Any] | None,
    ) -> None:
        if verifier is not None and not callable(verifier):
            raise ConfigurationError(
                "verifier must be a (task, result) -> Verdict callable, "
                f"not {type(verifier).__name__}"
            )
        self.agent = agent
        self.input = input
        self.hook = _hook_for(memory, agent)
        self.verifier = verifier
        self.config = _run_config(run_config)

    async def recall(self) -> tuple[str, list[Episode], str | None, RunConfig | None]:
        if isinstance(self.input, RunState):
            # A resumed run: the task is the paused run's, known from the result. The paused
            # run recalled; a resumed one adds no block of its own.
            return "", [], None, self.config
        query = _task_text(self.input)
        found = await self.hook.before_run([{"role": "user", "content": query}], query=query)
        return query, list(found.episodes), found.error, _with_block(self.config, found.block)

    async def record_error(self, query: str, error: Exception) -> None:
        if isinstance(self.input, RunState):
            query = _query_of(getattr(error, "run_data", None), query)
        if not query.strip():
            return  # no task to remember (as for run_agent): nothing is recorded
        recorded = await _record_error(self.hook, query, error)
        if recorded.id is not None:
            error.add_note(f"deepcrew-episodic recorded this run as episode {recorded.id}")

    async def record(
        self, query: str, result: RunResult | RunResultStreaming
    ) -> tuple[str, Recorded | None]:
        if isinstance(self.input, RunState):
            query = _task_text(result.input)
        if result.interruptions or not query.strip():
            return query, None
        return query, await _record_result(self.hook, query, result, self.verifier)


def _task_text(input: str | Sequence[Any]) -> str:
    """The text of the task: *input* itself, or the last user message's text in a list of
    input items (plain or ``input_text`` parts)."""
    if isinstance(input, str):
        return input
    for item in reversed(list(input)):
        if isinstance(item, Mapping) and item.get("role") == "user":
            return _content_text(item.get("content"))
    return ""


# --- internals --------------------------------------------------------------------------------


def _hook_for(memory: EpisodicMemory | EpisodicHook, agent: Agent[Any]) -> EpisodicHook:
    if isinstance(memory, EpisodicHook):
        return memory
    if isinstance(memory, EpisodicMemory):
        return EpisodicHook(memory, agent_id=agent.name)
    raise ConfigurationError(
        f"memory must be an EpisodicMemory or an EpisodicHook, not {type(memory).__name__}"
    )


def _run_config(config: RunConfig | Mapping[str, Any] | None) -> RunConfig | None:
    if config is None or isinstance(config, RunConfig):
        return config
    if isinstance(config, Mapping):  # Runner.run takes the fields as a dict too
        try:
            return RunConfig(**config)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"run_config is not a valid RunConfig: {exc}") from exc
    raise ConfigurationError(
        f"run_config must be an agents.RunConfig, a dict of its fields or None, "
        f"not {type(config).__name__}"
    )


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type") in ("input_text", "text")
        ]
        return "\n".join(part for part in parts if part)
    return ""


def _with_block(config: RunConfig | None, block: str) -> RunConfig | None:
    """*config* with the block added to the instructions of each model call."""
    if not block:
        return config
    config = config if config is not None else RunConfig()
    return dataclasses.replace(
        config, call_model_input_filter=_block_filter(block, config.call_model_input_filter)
    )


def _block_filter(block: str, inner: CallModelInputFilter | None) -> CallModelInputFilter:
    async def add_past_experience(data: CallModelData[Any]) -> ModelInputData:
        model_data = data.model_data
        if inner is not None:
            updated = inner(data)
            model_data = await updated if inspect.isawaitable(updated) else updated
            if not isinstance(model_data, ModelInputData):
                return model_data  # the SDK names the application's mistake (a UserError)
        # After the agent's own instructions, so they stay first (as EpisodicHook does).
        instructions = model_data.instructions
        text = f"{instructions.rstrip()}\n\n{block}" if instructions else block
        return ModelInputData(input=model_data.input, instructions=text)

    return add_past_experience


async def _record_result(
    hook: EpisodicHook, query: str, result: RunResultBase, verifier: RunVerifier | None
) -> Recorded:
    answer = _output_text(result.final_output)
    tools = _tools_used(result.new_items)
    tripped = [r for r in result.output_guardrail_results if r.output.tripwire_triggered]
    if tripped:
        # A guardrail rejected a tool's final output and the SDK kept a placeholder instead
        # of raising: the verdict is still the guardrail's.
        return await hook.after_run(
            query,
            _rejection(hook, "output guardrail", tripped[0].guardrail.get_name(), tripped[0].output)
            + f"\nAnswer: {answer}",
            outcome="failure",
            tools_used=tools,
            source="verifier",
        )
    if verifier is not None:
        verdict = await _verdict(verifier, query, result, hook, answer, tools)
        feedback = verdict.feedback.strip()
        text = f"{answer}\nVerifier: {feedback}" if feedback else answer
        # A verifier that says it is a model judging (as LoopConfig reads it) is a judge's.
        judged = getattr(verifier, "outcome_source", None) == "judge"
        return await hook.after_run(
            query,
            text,
            score=verdict.score,
            tools_used=tools,
            source="judge" if judged else "verifier",
        )
    checked = [r.guardrail.get_name() for r in result.output_guardrail_results]
    if checked:
        return await hook.after_run(
            query,
            f"{answer}\nPassed output guardrails: {', '.join(checked)}",
            outcome="success",
            tools_used=tools,
            source="verifier",
        )
    return await hook.after_run(query, answer, outcome="claimed_success", tools_used=tools)


async def _verdict(
    verifier: RunVerifier,
    query: str,
    result: RunResultBase,
    hook: EpisodicHook,
    answer: str,
    tools: list[str],
) -> Verdict:
    try:
        verdict = verifier(query, result)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        if not isinstance(verdict, Verdict):
            raise VerifierError(f"the verifier returned {type(verdict).__name__}, not a Verdict")
    except Exception as exc:
        error = (
            exc
            if isinstance(exc, VerifierError)
            else VerifierError(f"the verifier raised {_describe(exc)}")
        )
        ungraded = await hook.unverified(query, answer, error, tools_used=tools)
        if ungraded.id is not None:
            error.add_note(f"unverified episode {ungraded.id} recorded")
        if error is exc:
            raise
        raise error from exc
    return verdict


async def _record_error(hook: EpisodicHook, query: str, error: Exception) -> Recorded:
    details = error.run_data if isinstance(error, AgentsException) else None
    items: list[RunItem] = list(details.new_items) if details is not None else []
    tools = _tools_used(items)
    partial = ItemHelpers.text_message_outputs(items)
    if isinstance(error, OutputGuardrailTripwireTriggered):
        checked = error.guardrail_result
        answer = _output_text(checked.agent_output)
        text = _rejection(hook, "output guardrail", checked.guardrail.get_name(), checked.output)
        return await hook.after_run(
            query,
            f"{text}\nAnswer: {answer}",
            outcome="failure",
            tools_used=tools,
            source="verifier",
        )
    crashed = _crashed_guardrail(error)
    if crashed is not None:
        # The guardrail judged nothing: the answer it was checking (none for an input
        # guardrail) is recorded ungraded, as the runner records an answer whose verifier
        # failed, never as the agent's failure.
        return await hook.unverified(query, _output_text(crashed), error, tools_used=tools)
    if isinstance(error, InputGuardrailTripwireTriggered):
        refused = error.guardrail_result
        text = _rejection(hook, "input guardrail", refused.guardrail.get_name(), refused.output)
        return await hook.after_run(
            query, text, outcome="failure", tools_used=tools, source="verifier"
        )
    if isinstance(error, ModelTimeoutError):
        # The SDK's own deadline on one model call (ModelSettings.timeout): the provider did not
        # answer in time, which the library's rule (EpisodicHook.failed) counts as an outage.
        return await hook.after_run(
            query,
            f"Run abandoned: {_describe(error)}",
            outcome="abandoned",
            tools_used=tools,
            tags=["infrastructure"],
            source="verifier",
        )
    return await hook.failed(query, error, partial_response=partial, tools_used=tools)


def _crashed_guardrail(error: BaseException) -> Any | None:
    """The output a guardrail was checking when it raised *error* (``""`` for an input
    guardrail; ``None`` when *error* did not come out of a guardrail). The SDK lets a
    guardrail's own exception through as it is, so the traceback is what tells: a frame of
    ``OutputGuardrail.run`` or ``InputGuardrail.run``."""
    for frame, _line in traceback.walk_tb(error.__traceback__):
        if frame.f_code is OutputGuardrail.run.__code__:
            output = frame.f_locals.get("agent_output")
            return "" if output is None else output
        if frame.f_code is InputGuardrail.run.__code__:
            return ""
    return None


def _rejection(hook: EpisodicHook, kind: str, name: str, verdict: GuardrailFunctionOutput) -> str:
    info = _output_text(verdict.output_info)
    redactor = hook.memory.redactor
    if redactor is not None:
        # Redacted before the cut: a cut secret is no longer recognisable when recorded.
        info = redactor.redact(info)
    if len(info) > INFO_CHARS:
        info = info[: INFO_CHARS - 1].rstrip() + "…"
    return f"Rejected by {kind} {name}" + (f": {info}" if info else "")


def _tools_used(items: Sequence[RunItem]) -> list[str]:
    names = (item.tool_name for item in items if isinstance(item, ToolCallItem))
    return sorted({name for name in names if isinstance(name, str) and name})


def _query_of(details: Any, fallback: str) -> str:
    return _task_text(details.input) if details is not None else fallback


def _output_text(value: Any) -> str:
    """A final output or a guardrail's ``output_info`` as text: a string as it is, a
    pydantic model or a dataclass as JSON, anything else as ``str()``; never raises."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value

    def render() -> str:
        dump = getattr(value, "model_dump_json", None)
        if callable(dump):
            return str(dump())
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return json.dumps(dataclasses.asdict(value), default=str, ensure_ascii=False)
        if isinstance(value, dict | list | tuple):
            return json.dumps(value, default=str, ensure_ascii=False)
        return str(value)

    try:
        return render()
    except Exception as exc:
        # Text for the record only: an output whose __str__ raises must not cost the episode;
        # the episode says what could not be shown.
        # The error's type only: its message may quote the output, secrets and all.
        log.warning(
            "could not render a %s for its episode (%s)", type(value).__name__, type(exc).__name__
        )
        return f"(unprintable {type(value).__name__}: {_describe(exc)})"


def _describe(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
