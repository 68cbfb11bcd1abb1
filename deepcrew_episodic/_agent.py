"""``Agent`` (what to run) and its tools, made from plain callables.

A tool is a plain Python function, sync or async. Its JSON schema comes from its type hints
(pydantic builds each parameter's schema, so ``int``, ``list[str]``, ``X | None``,
``Literal[...]``, enums, pydantic models and ``Annotated[x, Field(description=...)]`` all
work); its description is the first docstring line, and an ``Args:`` section describes the
parameters. The model's arguments are validated against the same types before the call.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, get_type_hints

import anyio
from pydantic import TypeAdapter, ValidationError

from ._exceptions import ConfigurationError
from ._hook import check_intent
from ._phases import PHASE_TOOL
from ._validate import integer, number, optional_number

if TYPE_CHECKING:
    from ._followup import FollowUpGrader
    from ._memory import EpisodicMemory
    from ._verify import LoopConfig

__all__ = ["Agent", "Tool", "ToolArgumentsError"]

ToolErrors = Literal["report", "raise"]
InfrastructureFailures = Literal["abandoned", "skip"]
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass
class Agent:
    """An LLM agent: a litellm model, a system prompt and Python tools (deepcrew-ai's fields).

    Parameters
    ----------
    name:
        Identifies the agent in events, logs and recorded episodes (``agent_id``).
    model:
        A litellm model name, e.g. ``"openai/gpt-4o-mini"``.
    system_prompt:
        Sent first, as a system message. Do not repeat it in the run's messages.
    tools:
        Python callables (sync or async) the model may call.
    max_turns:
        Model calls per run; a model still calling tools after that raises ``MaxTurnsError``.
    temperature, max_tokens:
        Forwarded to the model when set.
    extra_params:
        Passed verbatim to ``litellm.acompletion`` (``api_base``, ``api_key``, ``timeout``,
        ``num_retries``, ``drop_params``, ``mock_response``, ...).
    episodic_memory:
        Recall relevant past runs before each run and record each run after it.
    min_relevance:
        The relevance floor of that recall (default ``None``: the memory's
        ``min_relevance``); a past run less relevant than this is not injected.
    loop_config:
        Run a refinement loop (see :class:`~deepcrew_episodic.LoopConfig`).
    tool_errors:
        ``"report"`` (deepcrew-ai's behaviour): a tool that raises has the error sent back to
        the model as its result. ``"raise"``: the run stops with ``ToolError``.
    infrastructure_failures:
        A run that fails because the model provider could not be used (unreachable, timed
        out, rate-limited, overloaded, refusing the credentials) is not the agent's failure:
        ``"abandoned"`` records it as ``abandoned`` (tag ``infrastructure``, the error class
        named; recall leaves it out), ``"skip"`` records nothing. The error is raised either way.
    distill_model:
        A litellm model that turns each finished run's transcript into a TASK / APPROACH /
        OUTCOME / LESSON episode (one call per recorded episode). ``None``: the run is stored
        as it is (query and final answer).
    distill_params, distill_timeout:
        Passed to that call (``api_base``, ``num_retries``, ...); seconds it may take in all.
        A call that fails, times out or answers unparseably is logged, counted in
        ``memory.counters.reflection_failures``, and the plain episode is stored instead.
    min_turns:
        A finished run with fewer non-system messages than this (the final answer included),
        or without a task (no user text), is not recorded.
    transcript_dir:
        A directory where each recorded run's transcript is written as JSONL (one message a
        line, redacted like the episodes, file mode 0600, never overwritten); the episode's
        ``transcript_ref`` is the file's path.
    intent:
        What recall looks for among equally relevant past runs: ``"any"`` (the default),
        ``"what_worked"`` (successes first) or ``"what_failed"`` (failures first, to avoid a
        repeat mistake). ``run_agent(..., intent=...)`` overrides it for one run.
    grade_followups:
        In a conversation (``run_agent(..., conversation_id=...)``), the user's next message
        grades the conversation's previous run (``True``: by the documented rule; or a
        :class:`~deepcrew_episodic.FollowUpModel` or a function of the message and the
        previous episode), and a message that is only a thank-you is not recorded. See
        :class:`~deepcrew_episodic.EpisodicHook`.
    record_phases:
        Give the model a ``finish_phase`` tool: each call records one episode of the run for
        the phase that ended (its name, task, approach, outcome and lesson; the run's
        ``run_id``), so a long run is remembered phase by phase. The run's final answer is
        recorded as usual. Needs ``episodic_memory``.

    Example::

        def lookup_order(order_id: int) -> dict[str, str]:
            "Look an order up by its number."
            return {"status": "shipped"}

        agent = Agent(name="support", model="openai/gpt-4o-mini", tools=[lookup_order],
                      episodic_memory=EpisodicMemory(FileMemoryProvider("episodes.json")))
        result = await run_agent(agent, [{"role": "user", "content": "Where is order 1182?"}])
    """

    name: str
    model: str
    system_prompt: str = ""
    tools: list[Callable[..., Any]] = field(default_factory=list)
    max_turns: int = 10
    temperature: float | None = None
    max_tokens: int | None = None
    extra_params: dict[str, Any] = field(default_factory=dict)
    episodic_memory: EpisodicMemory | None = None
    min_relevance: float | None = None
    loop_config: LoopConfig | None = None
    tool_errors: ToolErrors = "report"
    infrastructure_failures: InfrastructureFailures = "abandoned"
    distill_model: str | None = None
    distill_params: dict[str, Any] = field(default_factory=dict)
    distill_timeout: float = 30.0
    min_turns: int = 2
    transcript_dir: str | os.PathLike[str] | None = None
    intent: str = "any"
    grade_followups: bool | FollowUpGrader = False
    record_phases: bool = False

    def __post_init__(self) -> None:
        check_intent(self.intent, "Agent.intent")
        if not isinstance(self.name, str) or not self.name:
            raise ConfigurationError(f"Agent.name must be a non-empty string, not {self.name!r}")
        if not isinstance(self.model, str) or not self.model:
            raise ConfigurationError(
                f"Agent.model must be a litellm model name, not {self.model!r}"
            )
        integer("Agent.max_turns", self.max_turns, minimum=1)
        self.min_relevance = optional_number(
            "Agent.min_relevance", self.min_relevance, minimum=0.0, maximum=1.0
        )
        if self.tool_errors not in ("report", "raise"):
            raise ConfigurationError(
                f"Agent.tool_errors must be 'report' or 'raise', not {self.tool_errors!r}"
            )
        if self.infrastructure_failures not in ("abandoned", "skip"):
            raise ConfigurationError(
                f"Agent.infrastructure_failures must be 'abandoned' or 'skip', not "
                f"{self.infrastructure_failures!r}"
            )
        if self.distill_model is not None and (
            not isinstance(self.distill_model, str) or not self.distill_model
        ):
            raise ConfigurationError(
                f"Agent.distill_model must be a litellm model name or None, not "
                f"{self.distill_model!r}"
            )
        if not isinstance(self.distill_params, dict):
            raise ConfigurationError(
                f"Agent.distill_params must be a dict of litellm arguments, not "
                f"{type(self.distill_params).__name__}"
            )
        self.distill_timeout = number(
            "Agent.distill_timeout", self.distill_timeout, minimum=0, exclusive_minimum=True
        )
        integer("Agent.min_turns", self.min_turns, minimum=1)
        if self.transcript_dir is not None and (
            not isinstance(self.transcript_dir, str | os.PathLike)
            or not os.fspath(self.transcript_dir)
        ):
            raise ConfigurationError(
                f"Agent.transcript_dir must be a directory path or None, not "
                f"{self.transcript_dir!r}"
            )
        if not isinstance(self.grade_followups, bool) and not callable(self.grade_followups):
            raise ConfigurationError(
                f"Agent.grade_followups must be True, False, a FollowUpModel or a function, "
                f"not {type(self.grade_followups).__name__}"
            )
        if not isinstance(self.record_phases, bool):
            raise ConfigurationError(
                f"Agent.record_phases must be True or False, not {self.record_phases!r}"
            )
        tools = self.tool_specs()  # a tool that cannot be described fails here, not mid-run
        if self.record_phases and PHASE_TOOL in tools:
            raise ConfigurationError(
                "a tool is named 'finish_phase', the tool record_phases=True gives the model; "
                "rename it"
            )

    def tool_specs(self) -> dict[str, Tool]:
        """The agent's tools by name (raises ``ConfigurationError`` for a bad tool)."""
        tools: dict[str, Tool] = {}
        for fn in self.tools:
            tool = Tool.from_callable(fn)
            if tool.name in tools:
                raise ConfigurationError(f"two tools are named {tool.name!r}")
            tools[tool.name] = tool
        return tools


class ToolArgumentsError(Exception):
    """The model called a tool with arguments that do not fit it (reported to the model)."""


@dataclass(frozen=True)
class _Param:
    adapter: TypeAdapter[Any]
    required: bool


@dataclass(frozen=True)
class Tool:
    """A Python callable as the model sees it: name, description, JSON schema."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any] = field(repr=False)
    params: dict[str, _Param] = field(repr=False)
    takes_kwargs: bool = False

    @classmethod
    def from_callable(cls, fn: Callable[..., Any]) -> Tool:
        if not callable(fn):
            raise ConfigurationError(f"a tool must be callable, not {type(fn).__name__}")
        name = str(getattr(fn, "_tool_name", None) or getattr(fn, "__name__", ""))
        if not _NAME.fullmatch(name):
            raise ConfigurationError(
                f"tool name {name!r} must be 1-64 letters, digits, '_' or '-' "
                f"(set one with deepcrew-style ``fn._tool_name``)"
            )
        doc = inspect.getdoc(fn) or ""
        description = str(getattr(fn, "_tool_description", None) or _first_line(doc))
        try:
            signature = inspect.signature(fn)
            hints = get_type_hints(fn, include_extras=True)
        except (TypeError, ValueError, NameError) as exc:
            raise ConfigurationError(f"tool {name!r}: cannot read its signature ({exc})") from exc
        arg_docs = _arg_docs(doc)
        properties: dict[str, Any] = {}
        required: list[str] = []
        defs: dict[str, Any] = {}
        params: dict[str, _Param] = {}
        takes_kwargs = False
        for pname, param in signature.parameters.items():
            if param.kind is param.VAR_KEYWORD:
                takes_kwargs = True
                continue
            if param.kind in (param.VAR_POSITIONAL, param.POSITIONAL_ONLY):
                raise ConfigurationError(
                    f"tool {name!r}: parameter {pname!r} cannot be passed by keyword"
                )
            hint = hints.get(pname, str)  # unannotated: a string, as in deepcrew-ai
            try:
                adapter: TypeAdapter[Any] = TypeAdapter(hint)
                schema = adapter.json_schema()
            except Exception as exc:
                raise ConfigurationError(
                    f"tool {name!r}: no JSON schema for parameter {pname!r} of type {hint!r} ({exc})"
                ) from exc
            defs.update(schema.pop("$defs", {}))  # refs point at the root: hoist them there
            schema.pop("title", None)
            if pname in arg_docs and "description" not in schema:
                schema["description"] = arg_docs[pname]
            properties[pname] = schema
            is_required = param.default is inspect.Parameter.empty
            if is_required:
                required.append(pname)
            params[pname] = _Param(adapter, is_required)
        parameters: dict[str, Any] = {
            "type": "object",
            "properties": properties,
            "required": required,
        }
        if defs:
            parameters["$defs"] = defs
        return cls(name, description, parameters, fn, params, takes_kwargs)

    def spec(self) -> dict[str, Any]:
        """The ``tools`` entry for the chat completions API."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def bind(self, args: dict[str, Any]) -> dict[str, Any]:
        """Validate the model's arguments; raises :class:`ToolArgumentsError` naming the problem."""
        problems: list[str] = []
        bound: dict[str, Any] = {}
        for pname, param in self.params.items():
            if pname not in args:
                if param.required:
                    problems.append(f"missing required argument {pname!r}")
                continue
            try:
                bound[pname] = param.adapter.validate_python(args[pname])
            except ValidationError as exc:
                first = exc.errors()[0]["msg"] if exc.errors() else str(exc)
                problems.append(f"argument {pname!r}: {first}")
        extra = [k for k in args if k not in self.params]
        if extra and not self.takes_kwargs:
            problems.append(f"unexpected argument(s) {sorted(extra)}")
        elif extra:
            bound.update({k: args[k] for k in extra})
        if problems:
            raise ToolArgumentsError(f"invalid call to {self.name!r}: " + "; ".join(problems))
        return bound

    async def call(self, args: dict[str, Any]) -> str:
        """Run the tool with validated *args*; the result as text (JSON when not a string).

        A sync function runs in a worker thread so it cannot block the event loop.
        """
        kwargs = self.bind(args)
        if inspect.iscoroutinefunction(self.fn):
            result = await self.fn(**kwargs)
        else:
            result = await anyio.to_thread.run_sync(partial(self.fn, **kwargs))
            if inspect.isawaitable(result):
                result = await result
        return result if isinstance(result, str) else json.dumps(result, default=str)


def _first_line(doc: str) -> str:
    return doc.strip().split("\n", 1)[0].strip() if doc else ""


_ARG_LINE = re.compile(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.+)$")


def _arg_docs(doc: str) -> dict[str, str]:
    """Parameter descriptions from a Google-style ``Args:`` section."""
    found: dict[str, str] = {}
    in_args = False
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            in_args = True
            continue
        if in_args:
            if not stripped:
                continue
            if not line.startswith((" ", "\t")):
                break  # the next section
            match = _ARG_LINE.match(line)
            if match:
                found[match.group(1)] = match.group(2).strip()
    return found
