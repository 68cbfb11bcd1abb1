"""Episodic memory for LangChain's ``create_agent`` (LangGraph 1.x's prebuilt agent), as a
middleware.

:class:`EpisodicMiddleware` does what :class:`~deepcrew_episodic.integrations.langgraph.EpisodicNodes`
does for a graph, at the agent's own extension points: recall before the agent starts (once per
invocation), the block as a system message on every model call (never written into
``messages``), the turn recorded after the agent's final answer, and a model call or a tool call
that raises recorded as a ``failure`` naming the error (``abandoned`` when the model provider
could not be used) before the error goes on. The recalled and recorded ids are in
``state["episodic"]``.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, NotRequired

from deepcrew_episodic import (
    ConfigurationError,
    EpisodicMemory,
    MissingDependencyError,
    StreamEvent,
)

from .langgraph import EpisodicNodes, EpisodicRun, GraphVerifier, merge_run

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState
    from langchain.agents.middleware.types import ModelRequest, ModelResponse
    from langchain_core.messages import AIMessage, SystemMessage, ToolMessage
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.runtime import Runtime
    from langgraph.types import Command
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError(
        "deepcrew_episodic.integrations.langchain needs LangChain's agents: "
        "pip install 'deepcrew-episodic[langgraph]' langchain"
    ) from exc

__all__ = ["EpisodicMiddleware", "EpisodicMiddlewareState"]

log = logging.getLogger("deepcrew_episodic")

# Failures recorded and not yet known to be fatal, kept for this many turns at most (a turn
# whose error ended the run never comes back to claim its entry).
PENDING_TURNS = 1024


class EpisodicMiddlewareState(AgentState[Any]):
    """The agent's state with the memory's ``episodic`` key (added by the middleware)."""

    episodic: NotRequired[Annotated[EpisodicRun, merge_run]]


class EpisodicMiddleware(AgentMiddleware[EpisodicMiddlewareState, Any, Any]):
    """Episodic memory for ``create_agent(model, tools, middleware=[EpisodicMiddleware(memory)])``.

    The arguments are :class:`~deepcrew_episodic.integrations.langgraph.EpisodicNodes`'s
    (which is :attr:`nodes`). The agent must be run with ``ainvoke`` or ``astream``: memory is
    async, and a synchronous run raises ``ConfigurationError``.

    Example::

        agent = create_agent(ChatOpenAI(model="gpt-4o-mini"), tools,
                             middleware=[EpisodicMiddleware(memory, agent_id="support")])
        state = await agent.ainvoke({"messages": [("user", "Rotate the API key")]})
        print(state["episodic"]["recalled_ids"], state["episodic"]["recorded_id"])
    """

    state_schema = EpisodicMiddlewareState

    def __init__(
        self,
        memory: EpisodicMemory,
        *,
        agent_id: str = "",
        verifier: GraphVerifier | None = None,
        top_k: int | None = None,
        max_block_chars: int | None = None,
        recall_timeout: float | None = 10.0,
        record_timeout: float | None = 60.0,
        tags: Sequence[str] = (),
        on_event: Callable[[StreamEvent], Any] | None = None,
        intent: str = "any",
        min_relevance: float | None = None,
    ) -> None:
        super().__init__()
        self.nodes = EpisodicNodes(
            memory,
            agent_id=agent_id,
            verifier=verifier,
            top_k=top_k,
            max_block_chars=max_block_chars,
            recall_timeout=recall_timeout,
            record_timeout=record_timeout,
            tags=tags,
            on_event=on_event,
            intent=intent,
            min_relevance=min_relevance,
        )
        self.tools = []
        # turn -> the failure episode recorded in it: withdrawn if the turn goes on, because
        # a middleware around this one (a retry, a fallback model) recovered from the error.
        self._pending: OrderedDict[str, str] = OrderedDict()

    async def _record_failure(self, state: Any, error: Exception) -> None:
        recorded = await self.nodes.failed(state, error)
        turn = _turn(state)
        if recorded is not None and recorded.id is not None and turn:
            self._pending[turn] = recorded.id
            while len(self._pending) > PENDING_TURNS:
                self._pending.popitem(last=False)

    async def _went_on(self, state: Any) -> None:
        """The turn goes on after a failure this middleware recorded: the error did not end
        the run (a retry or fallback middleware around this one recovered from it), so the
        failure episode is withdrawn; the run is recorded when it ends."""
        turn = _turn(state)
        withdrawn = self._pending.pop(turn, None) if turn else None
        if withdrawn is None:
            return
        try:
            await self.nodes.memory.forget(withdrawn)
        except Exception as exc:  # the episode stays: a run recorded twice, not a lost one
            self.nodes.memory.counters.record_failures += 1
            log.warning(
                "withdrawing the recovered failure episode %s failed (%s)",
                withdrawn,
                type(exc).__name__,
            )
        else:
            log.info("the run recovered from the failure recorded as %s: withdrawn", withdrawn)

    async def abefore_agent(
        self, state: EpisodicMiddlewareState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return await self.nodes.recall(state)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        await self._went_on(request.state)
        run = request.state.get("episodic") or {}
        block = run.get("block") if isinstance(run, dict) else None
        if block:
            # After the agent's own system prompt (request.system_message), before the talk.
            request = request.override(messages=[SystemMessage(block), *request.messages])
        try:
            return await handler(request)
        except Exception as exc:
            await self._record_failure(request.state, exc)
            raise

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        await self._went_on(request.state)
        try:
            return await handler(request)
        except Exception as exc:
            await self._record_failure(_with_call(request), exc)
            raise

    async def aafter_agent(
        self, state: EpisodicMiddlewareState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        await self._went_on(state)
        return await self.nodes.record(state)

    # Memory is async: a synchronous run would silently go without it.
    def before_agent(
        self, state: EpisodicMiddlewareState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        raise ConfigurationError(_SYNC)

    def after_agent(
        self, state: EpisodicMiddlewareState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        raise ConfigurationError(_SYNC)


_SYNC = "EpisodicMiddleware is async: run the agent with ainvoke or astream, not invoke or stream"


def _turn(state: Any) -> str | None:
    run = state.get("episodic") if isinstance(state, dict) else None
    turn = run.get("turn") if isinstance(run, dict) else None
    return turn if isinstance(turn, str) and turn else None


def _with_call(request: ToolCallRequest) -> dict[str, Any]:
    """The state a failing tool saw, with the call that failed (so the episode names it)."""
    state = request.state if isinstance(request.state, dict) else {}
    messages = list(state.get("messages") or [])
    if not any(
        isinstance(m, AIMessage)
        and any(c.get("id") == request.tool_call.get("id") for c in m.tool_calls)
        for m in messages
    ):
        messages.append(AIMessage("", tool_calls=[request.tool_call]))
    return {**state, "messages": messages}
