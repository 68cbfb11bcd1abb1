"""Episodic memory for LangGraph: nodes that recall into the graph's state and record the run.

:class:`EpisodicNodes` gives a graph what ``Agent.episodic_memory`` gives deepcrew's own
runner, in the shapes LangGraph uses:

- a prebuilt ReAct agent: ``create_react_agent(model, tools, pre_model_hook=nodes.pre_model_hook,
  post_model_hook=nodes.post_model_hook, state_schema=EpisodicAgentState)``;
- a hand-made ``StateGraph(EpisodicState)``: a ``recall`` node first, ``nodes.model_input(state)``
  as the model's messages, a check node of your own if you have one, a ``record`` node last.

Recall runs once per user turn; its ``## Relevant past experience`` block is kept in the state
(``state["episodic"]``) and put before the conversation as a system message each time the model
is called, never written into ``messages``, so a ReAct loop of ten model calls sees one copy.
The record step stores one episode per turn: the outcome a check node put in the state (or the
``verifier`` returned) is verified, the model's own final answer with no check is
``claimed_success``; the tools called are listed. :meth:`EpisodicNodes.ainvoke` and
:meth:`EpisodicNodes.astream` run a graph and record a run that raises as a ``failure`` naming
the error (``abandoned`` when the model provider could not be used). The recalled and recorded
ids are in ``state["episodic"]``, to grade the run later with ``memory.grade``.

Memory never fails the run: a recall or a record that fails is logged, counted in
``memory.counters`` and named in ``state["episodic"]``, and the graph goes on.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Annotated, Any, Literal, NotRequired, TypedDict, cast, get_args

from deepcrew_episodic import (
    ConfigurationError,
    Episode,
    EpisodicHook,
    EpisodicMemory,
    MissingDependencyError,
    Outcome,
    Recorded,
    StreamEvent,
    Verdict,
    outcome_for_score,
)

try:
    from langchain_core.messages import (
        AIMessage,
        AnyMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        convert_to_messages,
    )
    from langchain_core.runnables import RunnableConfig
    from langgraph.graph.message import add_messages
    from langgraph.managed import RemainingSteps
    from langgraph.pregel import Pregel
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError(
        "deepcrew_episodic.integrations.langgraph needs LangGraph: "
        "pip install 'deepcrew-episodic[langgraph]'"
    ) from exc

__all__ = [
    "EpisodicAgentState",
    "EpisodicNodes",
    "EpisodicRun",
    "EpisodicState",
    "GraphVerifier",
    "merge_run",
]

log = logging.getLogger("deepcrew_episodic")

_OUTCOMES: tuple[str, ...] = get_args(Outcome)
# What LangGraph's prebuilt agent answers in place of the model when its steps run out: the
# run's failure (deepcrew's runner records MaxTurnsError the same way), never a claimed answer.
OUT_OF_STEPS = "Sorry, need more steps to process this request."
# Set on an error once its failure is recorded, so that a middleware and the runner around it
# do not both record it.
_RECORDED = "_deepcrew_episodic_recorded"
_INTERRUPT = "__interrupt__"  # langgraph.constants.INTERRUPT, as graph.ainvoke returns it


class EpisodicRun(TypedDict, total=False):
    """What memory did in the current turn, under ``state["episodic"]``.

    Written by the recall step: ``query`` (the user's message recalled for), ``block`` (the
    text shown to the model, ``""`` when nothing was recalled), ``recalled_ids``,
    ``recall_error`` and ``namespace`` (the memory's). Written by the record step: ``recorded_id`` (the episode to grade later;
    ``None`` when nothing was stored) and ``record_error``. Yours to write from a check node
    before the record step: ``outcome`` (a verified outcome), ``score`` (in [0, 1]; alone, it
    stands for an outcome: ``success`` from 0.7, ``failure`` below 0.3) and ``lesson`` (one
    sentence the next run should see).
    """

    turn: str
    namespace: str
    query: str
    block: str
    recalled_ids: list[str]
    recall_error: str | None
    outcome: Outcome | None
    score: float | None
    lesson: str | None
    recorded_id: str | None
    record_error: str | None


def merge_run(left: EpisodicRun | None, right: EpisodicRun | None) -> EpisodicRun:
    """The reducer of ``state["episodic"]``: a node's update adds to what is there, so a check
    node can write ``{"episodic": {"outcome": "success"}}`` without erasing the recall."""
    return cast(EpisodicRun, {**(left or {}), **(right or {})})


class EpisodicState(TypedDict):
    """A hand-made graph's state: ``messages`` (LangGraph's ``add_messages``) and the memory's
    ``episodic`` key. Subclass it to add your own keys."""

    messages: Annotated[list[AnyMessage], add_messages]
    episodic: NotRequired[Annotated[EpisodicRun, merge_run]]


class EpisodicAgentState(EpisodicState):
    """The state for ``create_react_agent(..., state_schema=EpisodicAgentState)``: LangGraph's
    agent state (``messages``, ``remaining_steps``) and the ``episodic`` key."""

    remaining_steps: NotRequired[RemainingSteps]


GraphVerifier = Callable[[str, str], Verdict | Awaitable[Verdict]]
"""Grades a finished turn: ``(query, answer) -> Verdict``, a plain or an async function."""


class EpisodicNodes:
    """Recall and record nodes for a LangGraph graph, built on :class:`EpisodicHook`.

    Parameters
    ----------
    memory:
        The :class:`~deepcrew_episodic.EpisodicMemory` to recall from and record into.
    agent_id, top_k, max_block_chars, recall_timeout, record_timeout, tags, on_event:
        As for :class:`~deepcrew_episodic.EpisodicHook` (the hook is :attr:`hook`).
    verifier:
        Grades each finished turn that no check node graded: ``(query, answer) -> Verdict``
        (plain or async). Its score is the outcome's (verified), its feedback the lesson. One
        that raises leaves the turn ``unknown``, tag ``unverified``.

    Example (a prebuilt ReAct agent)::

        nodes = EpisodicNodes(memory, agent_id="support")
        agent = create_react_agent(model, tools, state_schema=EpisodicAgentState,
                                   pre_model_hook=nodes.pre_model_hook,
                                   post_model_hook=nodes.post_model_hook)
        state = await nodes.ainvoke(agent, {"messages": [("user", "Rotate the API key")]})
        print(state["episodic"]["recalled_ids"], state["episodic"]["recorded_id"])
    """

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
    ) -> None:
        if verifier is not None and not callable(verifier):
            raise ConfigurationError(
                f"verifier must be a function (query, answer) -> Verdict, not {verifier!r}"
            )
        self.hook = EpisodicHook(
            memory,
            agent_id=agent_id,
            on_event=on_event,
            top_k=top_k,
            max_block_chars=max_block_chars,
            recall_timeout=recall_timeout,
            record_timeout=record_timeout,
            tags=tags,
        )
        self.memory = memory
        self.verifier = verifier

    # --- recall -----------------------------------------------------------------------------

    async def recall(self, state: Any) -> dict[str, Any]:
        """A node: recall for the last user message and keep the block in ``state["episodic"]``
        (with the recalled ids). Put it first in a hand-made graph; the model node then calls
        the model with :meth:`model_input`. Resets the turn's verdict and recorded id, so a
        thread kept by a checkpointer starts each turn afresh."""
        messages = _messages(state)
        turn, query = _last_user(messages)
        run = _run(state)
        theirs = run.get("namespace")
        if run.get("turn") == turn and theirs is not None and theirs != self.memory.namespace:
            # A second memory's nodes in one graph: both would keep their turn in the one
            # "episodic" key, the second recall hiding the first's block and the second record
            # skipped as already done. Said now, before anything is lost.
            raise ConfigurationError(
                f"this turn was already recalled from the memory of namespace {theirs!r}: "
                "a graph takes the nodes of one EpisodicMemory (its state has one "
                "'episodic' key)"
            )
        return {"episodic": await self._recall(turn, query)}

    def model_input(self, state: Any) -> list[BaseMessage]:
        """The messages to call the model with: the state's ``messages`` with the recalled
        block as a system message after the leading system messages (unchanged when nothing
        was recalled). The state's ``messages`` are not changed."""
        run = _run(state)
        return _with_block(_messages(state), run.get("block") or "")

    async def pre_model_hook(self, state: Any) -> dict[str, Any]:
        """``create_react_agent(pre_model_hook=...)``: recall on the turn's first model call,
        and on every call give the model the conversation with the block
        (``llm_input_messages``, which LangGraph does not write into ``messages``). Needs
        ``state_schema=EpisodicAgentState`` (or a schema with its ``episodic`` key)."""
        messages = _messages(state)
        turn, query = _last_user(messages)
        run = _run(state)
        update: dict[str, Any] = {}
        if run.get("turn") != turn:
            if not _has_run_key(state) and _answered(messages):
                # The turn's first call wrote the recall, and it is gone: the state has no
                # key for it, and every model call would recall (and count a use) again.
                raise ConfigurationError(
                    "the graph's state has no 'episodic' key: build the agent with "
                    "state_schema=EpisodicAgentState (or a schema that includes it)"
                )
            run = await self._recall(turn, query)
            update["episodic"] = run
        update["llm_input_messages"] = _with_block(messages, run.get("block") or "")
        return update

    # --- record -----------------------------------------------------------------------------

    async def record(self, state: Any) -> dict[str, Any]:
        """A node: record the turn as one episode, once its answer is final (the last message
        is the model's, with no tool call pending; otherwise nothing happens). The outcome is
        the one in ``state["episodic"]`` (a check node's), else the :attr:`verifier`'s, else
        ``claimed_success``: the model's own answer, which nobody checked. Writes
        ``recorded_id`` (or ``record_error``) into ``state["episodic"]``."""
        messages = _messages(state)
        if not messages or not _final(messages[-1]):
            return {}
        run = _run(state)
        turn, query = _last_user(messages)
        if run.get("turn") == turn and run.get("recorded_id"):
            return {}  # this turn is already recorded (a graph that passes here twice)
        if not query.strip():
            return {}
        answer = _text(messages[-1])
        tools = _tools_used(messages)
        recorded = await self._record_answer(run, query, answer, tools)
        return {
            "episodic": {"turn": turn, "recorded_id": recorded.id, "record_error": recorded.error}
        }

    async def post_model_hook(self, state: Any) -> dict[str, Any]:
        """``create_react_agent(post_model_hook=...)``: :meth:`record`, which records after
        the model's final answer and does nothing after a call that asks for tools."""
        return await self.record(state)

    async def failed(self, state: Any, error: BaseException) -> Recorded | None:
        """Record the turn in *state* as a run that raised *error*: a ``failure`` episode naming
        the error, with the tools called so far and any partial answer (``abandoned``, tag
        ``infrastructure``, when the model provider could not be used), and a note on *error*
        naming the episode. An error already recorded is not recorded again (``None``), nor is
        a state without a user message. You re-raise."""
        if getattr(error, _RECORDED, False):
            return None
        messages = _messages(state)
        _turn, query = _last_user(messages)
        if not query.strip():
            return None
        partial = ""
        if messages and isinstance(messages[-1], AIMessage):
            partial = _text(messages[-1])
        recorded = await self.hook.failed(
            query, error, partial_response=partial, tools_used=_tools_used(messages)
        )
        # An exception type with __slots__ cannot carry the mark: at worst, a second record.
        with contextlib.suppress(AttributeError):
            setattr(error, _RECORDED, True)
        if recorded.episode is not None:
            error.add_note(f"{recorded.episode.outcome} episode {recorded.episode.id} recorded")
        else:
            error.add_note(f"the failure was not recorded: {recorded.error}")
        return recorded

    # --- running a graph --------------------------------------------------------------------

    async def ainvoke(
        self, graph: Pregel[Any, Any, Any, Any], input: Any, config: RunnableConfig | None = None
    ) -> dict[str, Any]:
        """``graph.ainvoke(input, config)``, and a run that raises is recorded: a ``failure``
        episode naming the error and listing the tools called so far (``abandoned``, tag
        ``infrastructure``, when the model provider could not be used), then the error is
        raised with a note naming the episode. Returns the final state, with the pending
        interrupts under ``"__interrupt__"`` as ``graph.ainvoke`` returns them."""
        last: dict[str, Any] | None = None
        interrupts: list[Any] = []
        try:
            # What graph.ainvoke does, keeping the state of each step for a failure.
            async for mode, chunk in graph.astream(
                input, config, stream_mode=["updates", "values"]
            ):
                if mode == "values" and isinstance(chunk, dict):
                    last = chunk
                elif isinstance(chunk, dict) and chunk.get(_INTERRUPT) is not None:
                    interrupts.extend(chunk[_INTERRUPT])
        except Exception as exc:
            await self.failed(last if last is not None else input, exc)
            raise
        state = dict(last) if last is not None else {}
        if interrupts:
            state[_INTERRUPT] = interrupts
        return state

    async def astream(
        self,
        graph: Pregel[Any, Any, Any, Any],
        input: Any,
        config: RunnableConfig | None = None,
        *,
        stream_mode: str | Sequence[str] = "updates",
    ) -> AsyncIterator[Any]:
        """``graph.astream(input, config, stream_mode=...)``, yielding exactly what it yields,
        with a run that raises recorded as :meth:`ainvoke` records it."""
        modes = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
        asked = list(dict.fromkeys(modes))
        last: dict[str, Any] | None = None
        try:
            async for mode, chunk in graph.astream(
                input,
                config,
                stream_mode=cast(Any, list(dict.fromkeys([*asked, "values"]))),
            ):
                if mode == "values" and isinstance(chunk, dict):
                    last = chunk
                if mode in asked:
                    yield chunk if isinstance(stream_mode, str) else (mode, chunk)
        except Exception as exc:
            await self.failed(last if last is not None else input, exc)
            raise

    # --- internals --------------------------------------------------------------------------

    async def _recall(self, turn: str, query: str) -> EpisodicRun:
        recalled = await self.hook.before_run([], query=query)
        return {
            "turn": turn,
            "namespace": self.memory.namespace,
            "query": query,
            "block": recalled.block,
            "recalled_ids": [e.id for e in recalled.episodes if e.id],
            "recall_error": recalled.error,
            # A new turn's verdict and record start empty (a checkpointed thread keeps the
            # last turn's state).
            "outcome": None,
            "score": None,
            "lesson": None,
            "recorded_id": None,
            "record_error": None,
        }

    async def _record_answer(
        self, run: EpisodicRun, query: str, answer: str, tools: list[str]
    ) -> Recorded:
        if answer.strip() == OUT_OF_STEPS:
            return await self.hook.after_run(
                query,
                f"Run failed: out of steps before a final answer ({OUT_OF_STEPS})",
                outcome="failure",
                tools_used=tools,
                source="verifier",
            )
        try:
            outcome, score, lesson = _verdict(run)
        except ConfigurationError as exc:
            # A check that wrote no valid verdict graded nothing: the answer is kept ungraded
            # (the runner's rule for a verifier that returns no Verdict), never recorded as the
            # agent's failure, and the mistake is raised (marked, so ainvoke does not record
            # it again as a failed run).
            ungraded = await self.hook.unverified(query, answer, exc, tools_used=tools)
            setattr(exc, _RECORDED, True)
            if ungraded.id is not None:
                exc.add_note(f"unknown episode {ungraded.id} recorded, ungraded")
            raise
        judged = False
        if outcome is None and score is None and self.verifier is not None:
            try:
                verdict = self.verifier(query, answer)
                if inspect.isawaitable(verdict):
                    verdict = await verdict
                if not isinstance(verdict, Verdict):
                    raise ConfigurationError(
                        f"the verifier must return a Verdict, not {type(verdict).__name__}"
                    )
            except Exception as exc:
                # Grading is memory's, not the answer's: the run keeps its answer, and the
                # episode says it was not graded.
                log.warning(
                    "the verifier failed (%s: %s); the turn is recorded unverified",
                    type(exc).__name__,
                    exc,
                )
                return await self.hook.unverified(query, answer, exc, tools_used=tools)
            score, lesson = verdict.score, verdict.feedback or None
            judged = getattr(self.verifier, "outcome_source", None) == "judge"
        # A verdict the graph or the verifier gave is a check (a verifier that says it is a
        # model judging, as LoopConfig reads it: a judge's); no verdict is the model's claim.
        source: Literal["agent", "verifier", "judge"] = (
            "agent" if outcome is None and score is None else "judge" if judged else "verifier"
        )
        if outcome is None:
            outcome = "claimed_success" if score is None else outcome_for_score(score)
        try:
            episode = Episode(
                query=query,
                response=answer,
                outcome=outcome,
                score=score,
                reflection=lesson,
                tools_used=tools,
                outcome_source=source,
            )
        except Exception as exc:  # text no episode can hold: the run goes on without it
            self.memory.counters.record_failures += 1
            log.warning(
                "recording the %s episode failed (%s: %s)", outcome, type(exc).__name__, exc
            )
            return Recorded(None, f"{type(exc).__name__}: {exc}")
        return await self.hook.record(episode)


def _messages(state: Any) -> list[BaseMessage]:
    raw = state.get("messages") if isinstance(state, dict) else getattr(state, "messages", None)
    if not isinstance(raw, list | tuple):
        return []
    if all(isinstance(m, BaseMessage) for m in raw):
        return list(raw)
    try:  # a graph's raw input (dicts, tuples), before LangGraph converted it
        return convert_to_messages(raw)
    except Exception:
        return [m for m in raw if isinstance(m, BaseMessage)]


def _has_run_key(state: Any) -> bool:
    if isinstance(state, dict):
        return "episodic" in state
    return getattr(state, "episodic", None) is not None


def _run(state: Any) -> EpisodicRun:
    raw = state.get("episodic") if isinstance(state, dict) else getattr(state, "episodic", None)
    return cast(EpisodicRun, raw) if isinstance(raw, dict) else {}


def _last_user(messages: Sequence[BaseMessage]) -> tuple[str, str]:
    """The last user message's id (the turn) and text; ``("", "")`` when there is none."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, HumanMessage):
            return message.id or f"#{index}", _text(message)
    return "", ""


def _after_user(messages: Sequence[BaseMessage]) -> Sequence[BaseMessage]:
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], HumanMessage):
            return messages[index + 1 :]
    return messages


def _answered(messages: Sequence[BaseMessage]) -> bool:
    return any(isinstance(m, AIMessage) for m in _after_user(messages))


def _final(message: BaseMessage) -> bool:
    return isinstance(message, AIMessage) and not message.tool_calls


def _text(message: BaseMessage) -> str:
    return message.text


def _tools_used(messages: Sequence[BaseMessage]) -> list[str]:
    """The tools the model called in this turn (its tool calls and the tools' answers)."""
    names: list[str] = []
    for message in _after_user(messages):
        if isinstance(message, AIMessage):
            names.extend(call["name"] for call in message.tool_calls if call.get("name"))
        elif isinstance(message, ToolMessage) and message.name:
            names.append(message.name)
    return sorted(set(names))


def _with_block(messages: Sequence[BaseMessage], block: str) -> list[BaseMessage]:
    if not block:
        return list(messages)
    at = 0
    while at < len(messages) and isinstance(messages[at], SystemMessage):
        at += 1
    return [*messages[:at], SystemMessage(block), *messages[at:]]


def _verdict(run: EpisodicRun) -> tuple[Outcome | None, float | None, str | None]:
    outcome, score, lesson = run.get("outcome"), run.get("score"), run.get("lesson")
    if outcome is not None and (not isinstance(outcome, str) or outcome not in _OUTCOMES):
        raise ConfigurationError(
            f'state["episodic"]["outcome"] must be one of {", ".join(_OUTCOMES)} or None, '
            f"not {outcome!r}"
        )
    if score is not None and (
        isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1
    ):
        raise ConfigurationError(
            f'state["episodic"]["score"] must be a number in [0, 1] or None, not {score!r}'
        )
    if lesson is not None and not isinstance(lesson, str):
        raise ConfigurationError(
            f'state["episodic"]["lesson"] must be a string or None, not {type(lesson).__name__}'
        )
    return outcome, None if score is None else float(score), lesson or None
