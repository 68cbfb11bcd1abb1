"""``AgentResult``: what a run of an agent produced, and what memory did during it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._episode import Episode

__all__ = ["AgentResult"]


@dataclass
class AgentResult:
    """What a run produced (deepcrew-ai's fields, plus what memory did).

    ``tool_calls`` holds ``{"tool", "args", "agent_id", "id", "error"}`` per call, every
    iteration of a loop included. ``recalled`` are the episodes injected before the run,
    ``recorded`` the episodes this run stored (one, or one per loop iteration), and
    ``recorded_ids`` their ids, to grade them later (``memory.grade(result.recorded_ids[-1],
    outcome="success")``). ``run_id`` is shared by every episode of this run.
    ``recall_error`` / ``record_errors`` say why memory was skipped; the run itself went on.
    """

    agent_id: str
    text: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    model: str = ""
    confidence: float | None = None
    loop_iterations: int = 0
    episodes_recalled: int = 0
    recalled: list[Episode] = field(default_factory=list)
    recorded: list[Episode] = field(default_factory=list)
    recall_error: str | None = None
    record_errors: list[str] = field(default_factory=list)
    run_id: str = ""

    @property
    def recorded_ids(self) -> list[str]:
        """The ids of the episodes this run stored, in order (the last is the final answer's)."""
        return [episode.id for episode in self.recorded]

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def tools_used(self) -> list[str]:
        """Names of the tools called, sorted, each once."""
        return sorted({str(call["tool"]) for call in self.tool_calls})
