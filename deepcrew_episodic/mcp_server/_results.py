"""The shapes the tools return: their output schemas, and the structured content a client
gets beside the text the model reads. Every string in them is neutralised (see ``_safe``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = [
    "EpisodeItem",
    "Forgotten",
    "GradeResult",
    "RecallResult",
    "RecalledItem",
    "Recorded",
    "Timeline",
]


class EpisodeItem(BaseModel):
    """One past run, as every tool shows it."""

    id: str = Field(description="the episode's id: give it to `grade` (or `forget`)")
    when: str = Field(description="when it was recorded (ISO-8601, UTC offset included)")
    outcome: str = Field(
        description="what happened, grades applied: success or failure (verified), "
        "claimed_success (a claim nobody checked), partial, abandoned, unknown"
    )
    source: str = Field(
        description="who says so: verifier (a test or check), user, agent (its own claim), "
        "judge (a model grading the run), or '' when not recorded"
    )
    score: float | None = Field(description="how well it went, 0 to 1, when known")
    task: str = Field(description="what the agent was asked")
    answer: str = Field(description="what it answered (cut when long)")
    lesson: str | None = Field(description="the one-line lesson learnt, when there is one")
    tags: list[str]
    tools: list[str] = Field(description="the tools the run used")
    grades: int = Field(description="how many grades it received after the run")


class RecalledItem(EpisodeItem):
    """A recalled episode and why it ranked where it did."""

    relevance: float = Field(description="the recall score (relevance, recency, outcome)")
    why: str = Field(description="the matched terms and the parts of the score")


class RecallResult(BaseModel):
    block: str = Field(
        description="the '## Relevant past experience' block to read before the task "
        "('' when nothing relevant is stored)"
    )
    items: list[RecalledItem] = Field(description="the recalled episodes, best first")
    ranking: str = Field(description="how they were ranked: keywords or hybrid (with meaning)")


class Recorded(BaseModel):
    id: str = Field(description="the stored episode's id: keep it to grade the run later")
    outcome: str = Field(
        description="the outcome as stored (success becomes claimed_success unless verified)"
    )
    when: str
    redacted: bool = Field(description="whether secrets were removed before storing")


class GradeResult(BaseModel):
    id: str
    graded: str = Field(description="the outcome this grade gave")
    verified: bool
    source: str = Field(description="who gave this grade: verifier, user, agent, or ''")
    now_reads: str = Field(
        description="the episode's outcome now, every grade applied (a verified outcome "
        "outweighs a claim)"
    )
    grades: int = Field(description="how many grades the episode has now")


class Timeline(BaseModel):
    episodes: list[EpisodeItem] = Field(description="the matching episodes, newest first")
    matching: int = Field(description="how many episodes match the filters (before the limit)")
    total: int = Field(description="how many episodes the memory shows in all")


class Forgotten(BaseModel):
    deleted: int = Field(description="how many episodes were deleted for good")
    not_found: list[str] = Field(description="the ids given that no stored episode has")
    dry_run: bool
