"""The ``finish_phase`` tool: a long run split into one episode per phase by the model itself.

With ``Agent(record_phases=True)`` the runner offers the model one more tool. The model calls it
when a phase of the task ends (a subgoal done, the plan changed): each call records one episode
of the run (the run's ``run_id``, the phase's name, its own task, approach, outcome and lesson)
through the run's :class:`~deepcrew_episodic.EpisodicHook`, and the model goes on. The outcome
is the model's own word: ``success`` is recorded as ``claimed_success`` (nothing checked it),
as a distilled run's is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._exceptions import ConfigurationError

if TYPE_CHECKING:
    from ._episode import Outcome
    from ._events import StreamEvent
    from ._hook import EpisodicHook, Recorded

__all__ = ["PHASE_TOOL", "PhaseRecorder", "phase_tool_spec"]

PHASE_TOOL = "finish_phase"
_CLAIMS: dict[str, Outcome] = {
    "success": "claimed_success",
    "partial": "partial",
    "failure": "failure",
}
_TEXT_FIELDS = ("phase", "task", "approach", "lesson")


def phase_tool_spec() -> dict[str, Any]:
    """The ``tools`` entry the model sees."""
    return {
        "type": "function",
        "function": {
            "name": PHASE_TOOL,
            "description": (
                "Call this when a phase of the task ends (a subgoal is done, or the plan "
                "changes), to remember what this phase did for future runs. Then go on."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "phase": {
                        "type": "string",
                        "description": "a short name for the phase, e.g. 'reproduce the bug'",
                    },
                    "task": {"type": "string", "description": "what this phase set out to do"},
                    "approach": {"type": "string", "description": "how it went about it"},
                    "outcome": {"type": "string", "enum": list(_CLAIMS)},
                    "lesson": {
                        "type": "string",
                        "description": "one sentence a future run of a similar phase should know",
                    },
                },
                "required": ["phase", "task", "outcome"],
            },
        },
    }


@dataclass
class PhaseRecorder:
    """Records the model's ``finish_phase`` calls of one run as episodes of that run."""

    hook: EpisodicHook
    run_id: str
    conversation_id: str = ""
    recorded: list[Recorded] = field(default_factory=list)  # what each call stored, in order

    async def __call__(self, args: dict[str, Any]) -> tuple[str, tuple[StreamEvent, ...]]:
        """The tool's result for the model, and the events recording it emitted. Arguments
        that do not fit raise ``ConfigurationError`` (sent back to the model as the tool's
        error); a memory failure is tolerated as every record is (logged, counted)."""
        problems = [
            f"{name!r} must be a string"
            for name in _TEXT_FIELDS
            if name in args and not isinstance(args[name], str)
        ]
        if not str(args.get("phase", "")).strip() or not str(args.get("task", "")).strip():
            problems.append("'phase' and 'task' are required")
        outcome = args.get("outcome")
        if outcome not in _CLAIMS:
            problems.append(f"'outcome' must be one of {', '.join(_CLAIMS)}")
        if problems:
            raise ConfigurationError(f"invalid call to {PHASE_TOOL!r}: " + "; ".join(problems))
        phase = " ".join(str(args["phase"]).split())
        recorded = await self.hook.record_phase(
            self.run_id,
            phase,
            str(args["task"]),
            approach=str(args.get("approach") or ""),
            lesson=str(args.get("lesson") or "") or None,
            outcome=_CLAIMS[str(outcome)],
            conversation_id=self.conversation_id or None,
            source="agent",  # the model's own word on its phase
        )
        self.recorded.append(recorded)
        if recorded.episode is None:
            return f"phase {phase!r} could not be recorded; go on", recorded.events
        return f"phase {phase!r} recorded; go on", recorded.events
