"""Episodic memory for pydantic-ai agents, as a capability.

:class:`EpisodicMemoryCapability` is passed to ``Agent(capabilities=[...])`` (or to one
``agent.run(capabilities=[...])``). Around every run it does what ``run_agent`` does with
``Agent.episodic_memory``, through :class:`~deepcrew_episodic.EpisodicHook`:

- before the model sees the task, it recalls the episodes relevant to the run's user prompt and
  adds the ``## Relevant past experience`` block to the instructions (a dynamic instruction of
  its own, sent after the agent's, the same on every request of the run);
- after the run, it records one episode with the outcome pydantic-ai knows: an output accepted
  by the agent's output validators is ``success``, output that the validators kept rejecting
  until the run gave up is ``failure``, an answer nothing checked is ``claimed_success``, an
  answer whose check crashed is ``unknown`` (tag ``unverified``), a run that raised is a
  ``failure`` naming the error (``abandoned``, tag ``infrastructure``, when the
  model provider could not be used), with the tools the run called;
- :meth:`EpisodicMemoryCapability.episodes_of` gives the recalled and recorded episodes of a
  result (or of the error a run raised), so the application can grade the run later.

A memory that fails never fails the run: recall and record failures are logged and counted in
``memory.counters`` by the hook, and the run's answer is returned as it would be without
memory.

Needs ``pip install 'deepcrew-episodic[pydantic-ai]'``. pydantic-ai runs on asyncio only.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import (
    ConfigurationError,
    Episode,
    EpisodicHook,
    EpisodicMemory,
    MissingDependencyError,
    Recorded,
    StreamEvent,
)

INSTALL_HINT = "pip install 'deepcrew-episodic[pydantic-ai]'"

try:
    import pydantic_core
    from pydantic_ai import exceptions as pai_exceptions
    from pydantic_ai.capabilities import AbstractCapability, CapabilityOrdering
    from pydantic_ai.messages import ModelRequest, UserPromptPart
    from pydantic_ai.tools import DeferredToolRequests, RunContext
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the extra
    raise MissingDependencyError(
        f"the pydantic-ai integration needs pydantic-ai: {INSTALL_HINT}"
    ) from exc

__all__ = ["INSTALL_HINT", "EpisodicMemoryCapability", "EpisodicRun"]

# pydantic-ai's errors for a provider that could not be used, whatever the task (the same rule
# as the runner's for litellm): rate-limited, out of quota or credit, unavailable or overloaded,
# failing with a server error, unreachable or timed out, refusing the credentials. A request it
# rejected for its content (ModelRequestRejectedError: a context window, a bad argument) or a
# model it does not know (ModelNotFoundError) is the run's failure. Looked up by name, so a
# pydantic-ai release without one of the categories still loads.
PROVIDER_OUTAGES = (
    "ModelRateLimitError",
    "ModelQuotaExceededError",
    "ModelUnavailableError",
    "ModelServerError",
    "ModelConnectionError",
    "ModelRequestTimeout",
    "ModelAuthenticationError",
)
# An uncategorised ModelHTTPError: unauthorized, payment required, forbidden, request timeout,
# rate-limited, or any 5xx.
OUTAGE_STATUSES = frozenset({401, 402, 403, 408, 429})
ATTACHED = "_deepcrew_episodic_runs"


@dataclass(frozen=True)
class EpisodicRun:
    """What memory did for one pydantic-ai run: what it recalled into the run and what it
    recorded, with why either failed. Grade the run later with its :attr:`recorded_id`::

        run = capability.episodes_of(result)
        await memory.grade(run.recorded_id, outcome="success")   # the user confirmed it
    """

    run_id: str
    query: str
    recalled: tuple[Episode, ...] = ()
    recorded: Episode | None = None
    recall_error: str | None = None
    record_error: str | None = None

    @property
    def recalled_ids(self) -> list[str]:
        """The ids of the episodes injected into the run, best first."""
        return [e.id for e in self.recalled if e.id]

    @property
    def recorded_id(self) -> str | None:
        """The id of the episode recorded for the run, or ``None`` when none was."""
        return None if self.recorded is None else self.recorded.id

    @property
    def outcome(self) -> str | None:
        """The recorded episode's outcome, or ``None`` when none was recorded."""
        return None if self.recorded is None else self.recorded.outcome


@dataclass
class _RunState:
    """One run's memory, on the capability copy pydantic-ai uses for that run only."""

    hook: EpisodicHook
    query: str = ""
    block: str = ""
    recalled: tuple[Episode, ...] = ()
    recall_error: str | None = None
    validators: bool = False
    tools: list[str] = field(default_factory=list)
    rejections: int = 0
    last_rejection: str = ""
    last_rejected: str = ""
    # An output check that crashed (not a rejection): the error and the answer it was judging.
    check_error: Exception | None = None
    unchecked: str = ""


class EpisodicMemoryCapability(AbstractCapability[Any]):
    """Recall before each run of a pydantic-ai agent, record after it.

    Parameters
    ----------
    memory:
        The :class:`~deepcrew_episodic.EpisodicMemory` to recall from and record into.
    agent_id:
        Stored on every episode (default: the agent's ``name``, or ``""``).
    verified:
        Whether an accepted output is a verified ``success``. ``None`` (default): when the agent
        has output validators (``@agent.output_validator``), or when a check rejected an
        earlier output of the same run and then accepted one; otherwise the answer is
        ``claimed_success``. ``True`` or ``False`` decides it for every run.
    top_k, max_block_chars, recall_timeout, record_timeout, tags, on_event, intent,
    min_relevance:
        As for :class:`~deepcrew_episodic.EpisodicHook`.

    Example::

        memory = EpisodicMemory(SQLiteMemoryProvider("episodes.db"), namespace="support")
        episodic = EpisodicMemoryCapability(memory)
        agent = Agent(model, capabilities=[episodic])
        result = await agent.run("How do I rotate an API key?")
        print(episodic.episodes_of(result).recorded_id)
    """

    def __init__(
        self,
        memory: EpisodicMemory,
        *,
        agent_id: str | None = None,
        verified: bool | None = None,
        top_k: int | None = None,
        max_block_chars: int | None = None,
        recall_timeout: float | None = 10.0,
        record_timeout: float | None = 60.0,
        tags: Sequence[str] = (),
        on_event: Callable[[StreamEvent], Any] | None = None,
        intent: str = "any",
        min_relevance: float | None = None,
    ) -> None:
        if not isinstance(memory, EpisodicMemory):
            raise ConfigurationError(
                f"EpisodicMemoryCapability takes an EpisodicMemory, not {type(memory).__name__}"
            )
        if verified is not None and not isinstance(verified, bool):
            raise ConfigurationError(f"verified must be True, False or None, not {verified!r}")
        if agent_id is not None and not isinstance(agent_id, str):
            raise ConfigurationError(f"agent_id must be a string or None, not {agent_id!r}")
        self.id = None
        self.description = None
        self.defer_loading = False
        self.memory = memory
        self.agent_id = agent_id
        self.verified = verified
        self._hook_options: dict[str, Any] = {
            "top_k": top_k,
            "max_block_chars": max_block_chars,
            "recall_timeout": recall_timeout,
            "record_timeout": record_timeout,
            "tags": list(tags),
            "on_event": on_event,
            "intent": intent,
            "min_relevance": min_relevance,
        }
        # Builds the hook once here so that a bad setting fails now, not in the first run.
        EpisodicHook(memory, **self._hook_options)
        # Shared by every run's copy of this capability: what it attaches to a run's result
        # (or error) is found under this key.
        self._token = object()
        self._state: _RunState | None = None

    # --- what the application calls --------------------------------------------------------

    def episodes_of(self, outcome: object) -> EpisodicRun:
        """What memory did for the run that returned *outcome* (its ``AgentRunResult``) or
        raised it (the exception ``agent.run`` raised). Raises ``ConfigurationError`` for
        anything this capability did not see come out of a run."""
        attached = getattr(outcome, "__dict__", None)
        runs = attached.get(ATTACHED) if isinstance(attached, dict) else None
        run = runs.get(self._token) if isinstance(runs, dict) else None
        if not isinstance(run, EpisodicRun):
            raise ConfigurationError(
                f"this {type(outcome).__name__} did not come out of a run with this "
                "EpisodicMemoryCapability"
            )
        return run

    # --- pydantic-ai's extension points ----------------------------------------------------

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # a memory is a live object: not something an agent spec can name

    def get_ordering(self) -> CapabilityOrdering | None:
        # Outermost: the run this records is the whole run, with every other capability's
        # effect on it (an output check of theirs is seen as a rejection here).
        return CapabilityOrdering(position="outermost")

    async def for_run(self, ctx: RunContext[Any]) -> EpisodicMemoryCapability:
        agent = ctx.agent
        name = getattr(agent, "name", None)
        agent_id = self.agent_id if self.agent_id is not None else (name or "")
        run = copy.copy(self)
        # pydantic-ai 2.x has no public accessor for an agent's output validators; they live
        # on Agent._output_validators (read defensively: no validators if it moves). An agent
        # whose validators this cannot see still gets verified outcomes once one rejects.
        validators = bool(getattr(agent, "_output_validators", None))
        run._state = _RunState(EpisodicHook(self.memory, agent_id=agent_id, **self._hook_options))
        run._state.validators = validators
        return run

    def get_instructions(self) -> Any:
        # The run's copy answers with its block on every request of the run; the block is
        # recalled once, in wrap_run, before the first request.
        return self._instructions

    def _instructions(self, ctx: RunContext[Any]) -> str:
        return "" if self._state is None else self._state.block

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Any) -> Any:
        state = self._state
        if state is None:  # pragma: no cover - pydantic-ai always calls for_run first
            return await handler()
        await self._recall(ctx, state)
        try:
            result = await handler()
        except Exception as exc:
            # A cancelled run (a token, ctx.cancel(), its timeout=, its task) arrives here as
            # asyncio's CancelledError, not an Exception: it has no outcome and records nothing.
            await self._record_error(ctx, state, exc)
            raise
        await self._record_result(ctx, state, result)
        return result

    async def before_tool_execute(
        self, ctx: RunContext[Any], *, call: Any, tool_def: Any, args: Any
    ) -> Any:
        if self._state is not None:
            self._state.tools.append(str(call.tool_name))
        return args

    async def wrap_output_process(
        self, ctx: RunContext[Any], *, output_context: Any, output: Any, handler: Any
    ) -> Any:
        # The agent's output validators run inside this handler: an output that comes back
        # passed them, a ModelRetry out of it is their (or an output function's) rejection.
        try:
            return await handler(output)
        except (pai_exceptions.ModelRetry, pai_exceptions.ToolRetryError) as exc:
            state = self._state
            if state is not None and not ctx.partial_output:
                state.rejections += 1
                state.last_rejection = _rejection_text(exc)
                state.last_rejected = _answer_text(output)
            raise
        except Exception as exc:
            # A check that crashed judged nothing: the answer is there, ungraded (the runner's
            # rule for a verifier that fails). An output function's own error is the run's.
            state = self._state
            if state is not None and not ctx.partial_output and not output_context.has_function:
                state.check_error = exc
                state.unchecked = _answer_text(output)
            raise

    # --- internals -------------------------------------------------------------------------

    async def _recall(self, ctx: RunContext[Any], state: _RunState) -> None:
        state.query = _query(ctx)
        recalled = await state.hook.before_run([], query=state.query)
        state.block = recalled.block
        state.recalled = tuple(recalled.episodes)
        state.recall_error = recalled.error

    async def _record_result(self, ctx: RunContext[Any], state: _RunState, result: Any) -> None:
        done = None
        output = result.output
        # A run paused for deferred tool calls has no outcome yet: the run that continues it
        # (its prompt read from the message history) records it.
        if state.query.strip() and not isinstance(output, DeferredToolRequests):
            checked = self.verified
            if checked is None:
                checked = state.validators or state.rejections > 0
            done = await state.hook.after_run(
                state.query,
                _answer_text(output),
                outcome="success" if checked else "claimed_success",
                tools_used=state.tools,
                run_id=ctx.run_id,
                source="verifier" if checked else "agent",
            )
        self._remember(result, self._summary(ctx, state, done))

    async def _record_error(self, ctx: RunContext[Any], state: _RunState, exc: Exception) -> None:
        done = None
        if not state.query.strip():
            pass  # no task, nothing to remember
        elif state.check_error is not None and exc is state.check_error:
            done = await state.hook.unverified(
                state.query, state.unchecked, exc, tools_used=state.tools, run_id=ctx.run_id
            )
        elif state.rejections and isinstance(exc, pai_exceptions.UnexpectedModelBehavior):
            # The checks rejected every answer until the run gave up: their verdict, a
            # verified failure, with the reason and the last answer.
            response = f"Rejected by the output check: {state.last_rejection}"
            if state.last_rejected.strip():
                response += f"\nLast answer: {state.last_rejected.strip()}"
            done = await state.hook.after_run(
                state.query,
                response,
                outcome="failure",
                tools_used=state.tools,
                run_id=ctx.run_id,
                source="verifier",
            )
        else:
            done = await state.hook.failed(
                state.query,
                exc,
                tools_used=state.tools,
                run_id=ctx.run_id,
                infrastructure=_provider_outage(exc),
            )
        if done is not None and done.episode is not None:
            exc.add_note(f"{done.episode.outcome} episode {done.episode.id} recorded")
        self._remember(exc, self._summary(ctx, state, done))

    def _summary(
        self, ctx: RunContext[Any], state: _RunState, done: Recorded | None
    ) -> EpisodicRun:
        return EpisodicRun(
            run_id=ctx.run_id or "",
            query=state.query,
            recalled=state.recalled,
            recorded=None if done is None else done.episode,
            recall_error=state.recall_error,
            record_error=None if done is None else done.error,
        )

    def _remember(self, outcome: object, run: EpisodicRun) -> None:
        # Kept on the result (or the error) itself, as pydantic-ai keeps a result's workspace:
        # it lives exactly as long as the object the application holds, and a long-lived
        # agent keeps nothing per run. Keyed by this capability, so two memories on one agent
        # each find their own.
        attached = getattr(outcome, "__dict__", None)
        if isinstance(attached, dict):
            attached.setdefault(ATTACHED, {})[self._token] = run


def _query(ctx: RunContext[Any]) -> str:
    """The run's task: the text of its user prompt, or, for a run that continues a
    conversation without a new prompt, of the last user prompt in its history."""
    if ctx.prompt is not None:
        return _prompt_text(ctx.prompt)
    for message in reversed(ctx.messages):
        if isinstance(message, ModelRequest):
            for part in reversed(message.parts):
                if isinstance(part, UserPromptPart):
                    return _prompt_text(part.content)
    return ""


def _prompt_text(prompt: object) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        # Text items only: an image or a document has no words to recall by.
        texts = [
            item if isinstance(item, str) else getattr(item, "content", None) for item in prompt
        ]
        return "\n".join(t for t in texts if isinstance(t, str))
    return ""


def _answer_text(output: object) -> str:
    if isinstance(output, str):
        return output
    try:
        return pydantic_core.to_json(output).decode()
    except Exception:  # not serialisable: its repr still says what it was
        return repr(output)


def _rejection_text(exc: Exception) -> str:
    if isinstance(exc, pai_exceptions.ModelRetry):
        return exc.message
    part = getattr(exc, "tool_retry", None)
    content = getattr(part, "content", None)
    return content if isinstance(content, str) else str(exc)


def _provider_outage(error: BaseException) -> bool:
    """Whether *error* says the model provider could not be used, in pydantic-ai's terms; a
    fallback that ran out of models is an outage when every model's error was one."""
    if isinstance(error, ExceptionGroup):
        return bool(error.exceptions) and all(_provider_outage(e) for e in error.exceptions)
    kinds = tuple(
        kind
        for kind in (getattr(pai_exceptions, name, None) for name in PROVIDER_OUTAGES)
        if isinstance(kind, type)
    )
    if isinstance(error, kinds):
        return True
    status = getattr(error, "status_code", None)
    return (
        isinstance(error, pai_exceptions.ModelHTTPError)
        and isinstance(status, int)
        and (status in OUTAGE_STATUSES or 500 <= status <= 599)
    )
