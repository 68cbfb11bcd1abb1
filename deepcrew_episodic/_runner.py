"""``run_agent`` and ``stream_agent``: the agent loop on litellm, with episodic memory.

One run: recall (through :class:`EpisodicHook`), then up to ``max_turns`` streamed model calls,
running the Python tools the model asks for and sending their results back, then record one
episode. A run that raises records a ``failure`` episode naming the error (``abandoned`` when
the model provider could not be used), then re-raises. Every episode of one call carries the
same ``run_id``.

The run is an async generator of :class:`StreamEvent`; ``run_agent`` drains it and returns
the :class:`AgentResult`, ``stream_agent`` hands the events to the caller. No background task,
so no event is lost and nothing outlives the caller.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import Any

import anyio

from ._agent import Agent, Tool, ToolArgumentsError
from ._events import EventType, StreamEvent, StreamPolicy, emit
from ._exceptions import ConfigurationError, MaxTurnsError, ToolError
from ._hook import (
    EpisodicHook,
    Recorded,
    check_intent,
    conversation_arg,
    describe,
    phase_arg,
    user_query,
)
from ._litellm import load_litellm
from ._phases import PHASE_TOOL, PhaseRecorder, phase_tool_spec
from ._redact import safe_message
from ._refinement import Recording, Refinement, Task, record_answer, recorded_attempt
from ._result import AgentResult

__all__ = ["AgentStream", "run_agent", "stream_agent"]

log = logging.getLogger("deepcrew_episodic")


async def run_agent(
    agent: Agent,
    messages: Sequence[dict[str, Any]],
    *,
    agent_id: str | None = None,
    intent: str | None = None,
    conversation_id: str | None = None,
    run_id: str | None = None,
    phase: str = "",
) -> AgentResult:
    """Run *agent* on *messages* (OpenAI format, without the system prompt) to completion.

    With ``agent.episodic_memory``, relevant past episodes are injected before the first
    model call and the run is recorded after it; ``agent.loop_config`` runs the refinement
    loop. *intent* (default: ``agent.intent``) is what recall looks for: ``"any"``,
    ``"what_worked"`` or ``"what_failed"``. The episodes say where their outcome came from:
    a verifier's (``"judge"`` for an ``LLMVerifier``), the run's own error (``"verifier"``),
    or a distillation model's reading of the transcript (``"judge"``). Raises the model's own error (a ``litellm`` exception), ``MaxTurnsError`` or
    ``ToolError``, each after recording a ``failure`` episode (``abandoned``, or nothing,
    per ``agent.infrastructure_failures``, when the model provider could not be used), or
    ``VerifierError`` after recording the ungraded answer (outcome ``unknown``, tag
    ``unverified``). ``result.recorded_ids`` are the stored episodes' ids, to grade later.

    *conversation_id* names the chat this run answers in: stored on its episodes, and with
    ``agent.grade_followups`` the run's message first grades the conversation's previous run.
    *run_id* and *phase* record the run as one phase of a longer one: give every phase the
    same *run_id* and its own *phase* (default: a new run id, no phase).

    Example::

        result = await run_agent(agent, [{"role": "user", "content": "Rotate the API key"}])
        print(result.text, result.episodes_recalled, result.recorded[0].outcome)
        await memory.grade(result.recorded_ids[-1], outcome="success")  # the user confirmed
    """
    run = _Run(agent, messages, agent_id, intent, conversation_id, run_id, phase)
    async with aclosing(run.events()) as events:
        async for _ in events:
            pass
    assert run.result is not None
    return run.result


def stream_agent(
    agent: Agent,
    messages: Sequence[dict[str, Any]],
    *,
    policy: StreamPolicy | None = None,
    agent_id: str | None = None,
    intent: str | None = None,
    conversation_id: str | None = None,
    run_id: str | None = None,
    phase: str = "",
) -> AgentStream:
    """Run *agent* like :func:`run_agent`, yielding its :class:`StreamEvent` as they happen.

    The stream ends with ``DONE`` (the final text and token counts); the result is then on
    ``stream.result``. A failing run yields ``ERROR`` and then raises the error. ``policy``
    filters what is yielded (the episode events are in ``StreamPolicy.verbose()`` only).
    *conversation_id*, *run_id* and *phase* as in :func:`run_agent`.

    Example::

        stream = stream_agent(agent, messages, policy=StreamPolicy.verbose())
        async for event in stream:
            print(event.to_sse(), end="")
        print(stream.result.episodes_recalled)
    """
    return AgentStream(
        _Run(agent, messages, agent_id, intent, conversation_id, run_id, phase),
        policy or StreamPolicy.verbose(),
    )


class AgentStream:
    """The events of one run (iterate once); :attr:`result` is set when the run completed."""

    def __init__(self, run: _Run, policy: StreamPolicy) -> None:
        self._run = run
        self._policy = policy
        self._started = False

    @property
    def result(self) -> AgentResult | None:
        return self._run.result

    def __aiter__(self) -> AsyncGenerator[StreamEvent, None]:
        if self._started:
            raise RuntimeError("an agent stream can be iterated only once")
        self._started = True
        return self._events()

    async def _events(self) -> AsyncGenerator[StreamEvent, None]:
        aid = self._run.agent_id
        async with aclosing(self._run.events()) as events:
            try:
                async for event in events:
                    if self._policy.allows(event.event):
                        yield event
            except Exception as exc:
                if self._policy.allows(EventType.ERROR):
                    yield emit(
                        EventType.ERROR,
                        {"message": describe(exc), "error_type": type(exc).__name__},
                        aid,
                    )
                raise
        result = self._run.result
        assert result is not None
        if self._policy.allows(EventType.DONE):
            yield emit(
                EventType.DONE,
                {
                    "text": result.text,
                    "input_tokens": result.input_tokens,
                    "output_tokens": result.output_tokens,
                    "episodes_recalled": result.episodes_recalled,
                    "loop_iterations": result.loop_iterations,
                },
                aid,
            )


class _Run:
    """One call of ``run_agent``: memory through the hook, turns through :class:`_Attempt`."""

    def __init__(
        self,
        agent: Agent,
        messages: Sequence[dict[str, Any]],
        agent_id: str | None,
        intent: str | None = None,
        conversation_id: str | None = None,
        run_id: str | None = None,
        phase: str = "",
    ) -> None:
        if not isinstance(agent, Agent):
            raise ConfigurationError(f"run_agent takes an Agent, not {type(agent).__name__}")
        if isinstance(messages, str | bytes) or not all(isinstance(m, dict) for m in messages):
            raise ConfigurationError(
                "messages must be a list of {'role': ..., 'content': ...} dicts"
            )
        self.agent = agent
        self.messages = list(messages)
        self.agent_id = agent_id or agent.name
        self.intent = agent.intent if intent is None else check_intent(intent)
        if run_id is not None and (not isinstance(run_id, str) or not run_id):
            raise ConfigurationError(f"run_id must be a non-empty string or None, not {run_id!r}")
        # Transcripts are named for this call: the phases of one run share its run_id.
        self.call_id = uuid.uuid4().hex
        self.run_id = run_id or self.call_id
        self.conversation_id = conversation_arg(conversation_id)
        self.phase = phase_arg(phase)
        self.result: AgentResult | None = None

    def _hook(self, memory: Any) -> EpisodicHook | None:
        # The hook's events come back on its results; the run yields them in order.
        if memory is None:
            return None
        return EpisodicHook(
            memory,
            agent_id=self.agent_id,
            intent=self.intent,
            grade_followups=self.agent.grade_followups,
            min_relevance=self.agent.min_relevance,
        )

    async def events(self) -> AsyncGenerator[StreamEvent, None]:
        agent, aid = self.agent, self.agent_id
        tools = agent.tool_specs()
        query = user_query(self.messages)
        history: list[dict[str, Any]] = []
        if agent.system_prompt:
            history.append({"role": "system", "content": agent.system_prompt})
        history.extend(self.messages)

        recall_hook = self._hook(agent.episodic_memory)
        recalled = None
        if recall_hook is not None:
            recalled = await recall_hook.before_run(
                history, query=query, conversation_id=self.conversation_id
            )
            history = recalled.messages
            # A message that only said the previous run failed: this run is another try at
            # that run's task, recorded under it.
            query = recalled.query
            for event in recalled.events:
                yield event

        yield emit(EventType.AGENT_START, {"model": agent.model}, aid)
        cfg = agent.loop_config
        recorded: list[Recorded] = []
        record_hook = recall_hook
        if cfg is not None and cfg.episodic_memory is not None:
            record_hook = self._hook(cfg.episodic_memory)
        # With record_phases, the model's finish_phase calls record episodes of this run.
        phases = None
        if agent.record_phases and record_hook is not None:
            phases = PhaseRecorder(record_hook, self.run_id, self.conversation_id, recorded)
        task = Task(
            query,
            history,
            aid,
            record_hook,
            lambda msgs: _Attempt(agent, tools, msgs, aid, phases),
            run_id=self.run_id,
            conversation_id=self.conversation_id,
            phase=self.phase,
            transcript_name=self.call_id,
            recording=Recording(
                min_turns=agent.min_turns,
                distill_model=agent.distill_model,
                distill_params=dict(agent.distill_params),
                distill_timeout=agent.distill_timeout,
                transcript_dir=agent.transcript_dir,
                infrastructure_failures=agent.infrastructure_failures,
            ),
        )
        attempt: _Attempt | None = None
        if cfg is None:
            attempt = _Attempt(agent, tools, history, aid, phases)
            async with aclosing(recorded_attempt(attempt, task, recorded)) as events:
                async for event in events:
                    yield event
            result = attempt.result()
        else:
            loop = Refinement(cfg, task)
            async with aclosing(loop.events()) as events:
                async for event in events:
                    yield event
            result = loop.result()
            recorded.extend(loop.recorded)

        if recalled is not None:
            result.recalled = list(recalled.episodes)
            result.episodes_recalled = recalled.count
            result.recall_error = recalled.error
        after: tuple[StreamEvent, ...] = ()
        if attempt is not None:
            # Recorded before AGENT_DONE is yielded: a consumer that stops reading at
            # AGENT_DONE must not cost the episode. Its event still follows AGENT_DONE.
            # No verifier checked the answer: its outcome is not verified.
            done = await record_answer(task, attempt, score=result.confidence)
            if done is not None:
                recorded.append(done)
                after = done.events
        result.run_id = self.run_id
        result.recorded = [r.episode for r in recorded if r.episode is not None]
        result.record_errors = [r.error for r in recorded if r.error is not None]
        self.result = result
        yield emit(
            EventType.AGENT_DONE,
            {"input_tokens": result.input_tokens, "output_tokens": result.output_tokens},
            aid,
        )
        for event in after:
            yield event


class _Attempt:
    """The model/tool turns of one run (one loop iteration)."""

    def __init__(
        self,
        agent: Agent,
        tools: dict[str, Tool],
        history: list[dict[str, Any]],
        agent_id: str,
        phases: PhaseRecorder | None = None,
    ) -> None:
        self.agent = agent
        self.tools = tools
        self.phases = phases
        self._phase_events: list[StreamEvent] = []
        self.history = list(history)
        self.agent_id = agent_id
        self.text = ""
        self.tool_calls: list[dict[str, Any]] = []
        self.input_tokens = 0
        self.output_tokens = 0

    @property
    def tools_used(self) -> list[str]:
        # finish_phase is the runner's own bookkeeping, not a tool of the agent's.
        used = {str(c["tool"]) for c in self.tool_calls}
        if self.phases is not None:
            used.discard(PHASE_TOOL)
        return sorted(used)

    def transcript(self) -> list[dict[str, Any]]:
        """The conversation as the model saw it, then its final (or partial) answer."""
        answer = [{"role": "assistant", "content": self.text}] if self.text else []
        return [*self.history, *answer]

    def result(self) -> AgentResult:
        return AgentResult(
            agent_id=self.agent_id,
            text=self.text,
            tool_calls=list(self.tool_calls),
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            model=self.agent.model,
        )

    def _request(self) -> dict[str, Any]:
        agent = self.agent
        kwargs: dict[str, Any] = {
            "model": agent.model,
            "messages": self.history,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        specs = [tool.spec() for tool in self.tools.values()]
        if self.phases is not None:
            specs.append(phase_tool_spec())
        if specs:
            kwargs["tools"] = specs
            kwargs["tool_choice"] = "auto"
        if agent.temperature is not None:
            kwargs["temperature"] = agent.temperature
        if agent.max_tokens is not None:
            kwargs["max_tokens"] = agent.max_tokens
        kwargs.update(agent.extra_params)
        return kwargs

    async def events(self) -> AsyncGenerator[StreamEvent, None]:
        litellm = await load_litellm()  # only when a model is called, off the event loop

        aid = self.agent_id
        for _turn in range(self.agent.max_turns):
            response = await litellm.acompletion(**self._request())
            parts: list[str] = []
            calls: dict[int, dict[str, str]] = {}
            usage: Any = None
            async for chunk in response:
                if getattr(chunk, "usage", None):
                    usage = chunk.usage  # sent once, in the last chunk
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                if delta.content:
                    parts.append(delta.content)
                    yield emit(EventType.TEXT_DELTA, {"chunk": delta.content}, aid)
                reasoning = getattr(delta, "reasoning_content", None)
                if reasoning:
                    yield emit(EventType.THINKING_DELTA, {"chunk": reasoning}, aid)
                for tc in delta.tool_calls or []:
                    buf = calls.setdefault(tc.index or 0, {"id": "", "name": "", "args": ""})
                    if tc.id:
                        buf["id"] = tc.id
                    if tc.function is not None and tc.function.name:
                        buf["name"] = tc.function.name
                    if tc.function is not None and tc.function.arguments:
                        buf["args"] += tc.function.arguments
            if usage is not None:
                self.input_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
                self.output_tokens += int(getattr(usage, "completion_tokens", 0) or 0)
            self.text = "".join(parts)
            if not calls:
                return
            async with aclosing(self._run_tools([calls[i] for i in sorted(calls)])) as events:
                async for event in events:
                    yield event
        raise MaxTurnsError(
            f"agent {aid!r} was still calling tools after max_turns={self.agent.max_turns}"
        )

    async def _run_tools(self, calls: list[dict[str, str]]) -> AsyncGenerator[StreamEvent, None]:
        aid = self.agent_id
        parsed: list[tuple[dict[str, str], dict[str, Any] | None, str | None]] = []
        for call in calls:
            args, problem = _parse_args(call["args"])
            parsed.append((call, args, problem))
            yield emit(
                EventType.TOOL_CALL,
                {
                    "tool": call["name"],
                    "args": args if args is not None else call["args"],
                    "id": call["id"],
                },
                aid,
            )
        self.history.append(
            {
                "role": "assistant",
                "content": self.text or None,
                "tool_calls": [
                    {
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": call["name"], "arguments": json.dumps(args or {})},
                    }
                    for call, args, _ in parsed
                ],
            }
        )
        outcomes: list[tuple[str, BaseException | None]] = [("", None)] * len(parsed)

        async def run_one(index: int, name: str, args: dict[str, Any]) -> None:
            try:
                outcomes[index] = (await self._call(name, args), None)
            except Exception as exc:
                outcomes[index] = ("", exc)

        # The model asked for these together: run them concurrently, as deepcrew-ai does.
        async with anyio.create_task_group() as tg:
            for index, (call, args, problem) in enumerate(parsed):
                if problem is not None:
                    outcomes[index] = (
                        "",
                        ToolArgumentsError(f"invalid call to {call['name']!r}: {problem}"),
                    )
                else:
                    tg.start_soon(run_one, index, call["name"], args or {})

        for (call, args, _), (text, error) in zip(parsed, outcomes, strict=True):
            record: dict[str, Any] = {
                "tool": call["name"],
                "args": args if args is not None else {},
                "agent_id": aid,
                "id": call["id"],
                "error": None,
            }
            self.tool_calls.append(record)
            if error is not None:
                record["error"] = describe(error)
                if self.agent.tool_errors == "raise" and not isinstance(error, ToolArgumentsError):
                    raise ToolError(
                        f"tool {call['name']!r} raised {describe(error)}", tool=call["name"]
                    ) from error
                log.warning("tool %s failed: %s", call["name"], describe(error))
                text = f"Error executing tool '{call['name']}': {describe(error)}"
            yield emit(
                EventType.TOOL_RESULT,
                {
                    "tool": call["name"],
                    "result": text,
                    "id": call["id"],
                    "error": error is not None,
                },
                aid,
            )
            self.history.append({"role": "tool", "tool_call_id": call["id"], "content": text})
        # The episodes the model's finish_phase calls recorded, after their tool results.
        pending, self._phase_events = self._phase_events, []
        for event in pending:
            yield event

    async def _call(self, name: str, args: dict[str, Any]) -> str:
        if name == PHASE_TOOL and self.phases is not None:
            try:
                text, events = await self.phases(args)
            except ConfigurationError as exc:
                raise ToolArgumentsError(str(exc)) from None  # sent back to the model
            self._phase_events.extend(events)
            return text
        tool = self.tools.get(name)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            raise ToolArgumentsError(f"unknown tool {name!r} (tools: {known})")
        return await tool.call(args)


def _parse_args(raw: str) -> tuple[dict[str, Any] | None, str | None]:
    """The model's arguments as a dict, or why they are not one (sent back to the model;
    deepcrew-ai silently called the tool with no arguments)."""
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return None, f"arguments are not valid JSON ({exc.msg}): {safe_message(raw, 200)!r}"
    except (ValueError, RecursionError):
        return None, "arguments are not usable JSON (an integer too long, or nested too deeply)"
    if not isinstance(value, dict):
        return None, f"arguments must be a JSON object, not {type(value).__name__}"
    return value, None
