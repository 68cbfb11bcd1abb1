"""Stream events: what a run reports as it goes, and which of them a consumer wants to see.

The names and values are deepcrew-ai 0.6.1's, so an event consumer written for it reads ours
unchanged. Two values are new: ``EPISODE_RECALL_FAILED`` and ``EPISODE_RECORD_FAILED``, the
tolerated memory failures a run reports instead of crashing (or staying silent).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["PAYLOAD_FIELDS", "EventType", "StreamEvent", "StreamPolicy", "emit"]


class EventType(StrEnum):
    """Every kind of :class:`StreamEvent` (deepcrew-ai's values, plus two memory failures)."""

    AGENT_START = "agent_start"
    TEXT_DELTA = "text_delta"
    THINKING_DELTA = "thinking_delta"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    TOOL_DENIED = "tool_denied"
    AGENT_DONE = "agent_done"
    STEP_START = "step_start"
    STEP_DONE = "step_done"
    ERROR = "error"
    DONE = "done"
    RETRY_ATTEMPT = "retry_attempt"
    FALLBACK_TRIGGERED = "fallback_triggered"
    MEMORY_STORE = "memory_store"
    MEMORY_RETRIEVE = "memory_retrieve"
    LOOP_ITERATION = "loop_iteration"
    SPAWN_AGENT = "spawn_agent"
    APEX_START = "apex_start"
    APEX_DONE = "apex_done"
    VERIFIER_SCORED = "verifier_scored"
    PLAYBOOK_UPDATED = "playbook_updated"
    BRANCH_SELECTED = "branch_selected"
    SKILL_EXTRACTED = "skill_extracted"
    EPISODE_RECALLED = "episode_recalled"
    EPISODE_RECORDED = "episode_recorded"
    # deepcrew-episodic: memory failures a run survives
    EPISODE_RECALL_FAILED = "episode_recall_failed"
    EPISODE_RECORD_FAILED = "episode_record_failed"


@dataclass
class StreamEvent:
    """One event of a run: its type, a JSON-ready payload and the agent that emitted it.

    Example::

        StreamEvent(EventType.EPISODE_RECALLED, {"count": 2, "ids": ["a1", "b2"], ...}, "assistant")
    """

    event: EventType
    data: dict[str, Any]
    agent_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        """``{"event": ..., "agent_id": ..., **data}`` (deepcrew-ai's shape)."""
        return {"event": self.event.value, "agent_id": self.agent_id, **self.data}

    def to_sse(self) -> str:
        """Encode as one Server-Sent Event, ready to write to an HTTP response."""
        payload = {"agent_id": self.agent_id, **self.data}
        return f"event: {self.event.value}\ndata: {json.dumps(payload, default=str)}\n\n"


# The data of every event this library emits, stated once: ``emit`` refuses any other shape,
# and the docs' tables are checked against it (tests/test_events_payloads.py).
PAYLOAD_FIELDS: dict[EventType, tuple[str, ...]] = {
    EventType.AGENT_START: ("model",),
    EventType.TEXT_DELTA: ("chunk",),
    EventType.THINKING_DELTA: ("chunk",),
    EventType.TOOL_CALL: ("tool", "args", "id"),
    EventType.TOOL_RESULT: ("tool", "result", "id", "error"),
    EventType.AGENT_DONE: ("input_tokens", "output_tokens"),
    EventType.LOOP_ITERATION: ("iteration", "converged"),
    EventType.VERIFIER_SCORED: ("iteration", "score", "outcome", "feedback"),
    EventType.EPISODE_RECALLED: ("count", "ids", "query", "ranking", "embedder_error"),
    EventType.EPISODE_RECORDED: ("outcome", "score", "id"),
    EventType.EPISODE_RECALL_FAILED: ("error", "error_type"),
    EventType.EPISODE_RECORD_FAILED: ("outcome", "error", "error_type"),
    EventType.DONE: (
        "text",
        "input_tokens",
        "output_tokens",
        "episodes_recalled",
        "loop_iterations",
    ),
    EventType.ERROR: ("message", "error_type"),
}


def emit(event: EventType, data: dict[str, Any], agent_id: str = "") -> StreamEvent:
    """A :class:`StreamEvent` whose data has exactly the fields :data:`PAYLOAD_FIELDS` names
    for its type (the library builds every event it emits through this)."""
    expected = PAYLOAD_FIELDS[event]
    if len(data) != len(expected) or set(data) != set(expected):
        raise AssertionError(f"{event.value} carries {sorted(data)}, declared {list(expected)}")
    return StreamEvent(event, data, agent_id)


# A consumer must always be able to tell when a stream ends, so the presets keep these.
_TERMINAL = frozenset({EventType.DONE, EventType.ERROR})
_CHAT = frozenset({EventType.TEXT_DELTA}) | _TERMINAL
_STANDARD = _CHAT | frozenset(
    {
        EventType.AGENT_START,
        EventType.AGENT_DONE,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.TOOL_DENIED,
        EventType.STEP_START,
        EventType.STEP_DONE,
        EventType.SPAWN_AGENT,
    }
)


@dataclass(frozen=True)
class StreamPolicy:
    """Which :class:`EventType` values a stream shows. A view only: it never changes the run.

    ``include=None`` lets every type through, minus ``exclude``::

        StreamPolicy.chat()       # text deltas, done, error
        StreamPolicy.standard()   # + tool calls/results, agent and step lifecycle
        StreamPolicy.verbose()    # everything, episode and loop events included
        StreamPolicy(include=frozenset({EventType.TEXT_DELTA, EventType.EPISODE_RECALLED}))

    The episode events (``EPISODE_*``) are in ``verbose()`` only.
    """

    include: frozenset[EventType] | None = None
    exclude: frozenset[EventType] = field(default_factory=frozenset)

    def allows(self, event_type: EventType) -> bool:
        if self.include is not None and event_type not in self.include:
            return False
        return event_type not in self.exclude

    @classmethod
    def chat(cls) -> StreamPolicy:
        """Response text deltas plus the terminal ``done``/``error`` events."""
        return cls(include=_CHAT)

    @classmethod
    def standard(cls) -> StreamPolicy:
        """Chat events plus tool calls/results and agent/step lifecycle."""
        return cls(include=_STANDARD)

    @classmethod
    def verbose(cls) -> StreamPolicy:
        """Every event type."""
        return cls(include=None)
