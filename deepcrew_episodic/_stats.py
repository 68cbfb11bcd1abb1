"""``EpisodicMemory.stats()``: what one namespace holds, counted from the log as this process
holds it, and the warnings an outcome signal that is not wired gives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ._episode import OUTCOMES
from ._grade import checked_grade
from ._held import HeldLog
from ._log import EpisodeLog
from ._source import CHECKED_SOURCES, SOURCES

if TYPE_CHECKING:
    from ._semantic import Semantic  # only built with an embedder

__all__ = ["MemoryStats", "count_stats"]


@dataclass(frozen=True)
class MemoryStats:
    """What :meth:`EpisodicMemory.stats` reports for one namespace."""

    total: int
    """Episodes that read paths return (expired and corrupt ones excluded)."""
    by_outcome: dict[str, int] = field(default_factory=dict)
    expired: int = 0
    """Past ``forget_after`` or ``max_age``: hidden, deleted by :meth:`EpisodicMemory.sweep`."""
    corrupt: int = 0
    """Records that cannot be decoded: skipped, counted, left in place."""
    oldest: str | None = None
    newest: str | None = None
    capacity: int = 0
    """``max_episodes``: the ring keeps the newest this many."""
    stored_bytes: int = 0
    """Keys and values of this namespace, in bytes."""
    vectors: int = 0
    """Episodes counted in ``total`` that have a usable vector (with an embedder; the others
    are found by keywords until :meth:`EpisodicMemory.backfill` embeds them)."""
    embedder: str | None = None
    """The embedder that wrote the log's vectors, with their dimension (``None``: none yet)."""
    grades: int = 0
    """Grades given to the episodes counted in ``total``."""
    most_used: list[tuple[str, int]] = field(default_factory=list)
    """The ids of the (at most five) episodes used most in runs, with their use counts."""
    warnings: list[str] = field(default_factory=list)
    """What looks wrong, in words: an outcome signal that is not wired (nearly every episode
    ``unknown`` or ``claimed_success``), or one wired to no check (nearly every episode a
    success, and nearly none of those successes from a verifier or the user)."""
    by_source: dict[str, int] = field(default_factory=dict)
    """Episodes by where their outcome (grades applied) is read as coming from: ``verifier``,
    ``user``, ``agent``, ``judge``, and ``""`` (no source recorded, or an ``unknown`` outcome)."""
    unknown_sources: int = 0
    """Episodes naming an outcome source this version does not know (another tool's): shown
    as stored, ranked as no source."""


# stats() warns when at least this share of at least UNWIRED_MIN episodes carry no verified label.
UNWIRED_SHARE = 0.9
UNWIRED_MIN = 10


# stats() warns that everything is success when at least this share of at least UNWIRED_MIN
# episodes are successes (claimed or not) and fewer than CHECKED_SUCCESS_SHARE of them came
# from a verifier or the user: a store that looks informative and carries no information.
ALL_SUCCESS_SHARE = 0.9
CHECKED_SUCCESS_SHARE = 0.1


def _success_warnings(total: int, successes: int, checked: int) -> list[str]:
    if (
        total < UNWIRED_MIN
        or successes < ALL_SUCCESS_SHARE * total
        or checked >= CHECKED_SUCCESS_SHARE * successes
    ):
        return []
    return [
        f"everything is success: {successes} of {total} episodes are successes and "
        f"{successes - checked} of those come from no verifier or user (the agent's claim, a "
        f"model judging, or no recorded source), so the labels carry no information; record "
        f"your tests' or the user's verdict with its source, or grade runs later (see "
        f"docs/recall.md#outcome-sources)"
    ]


def _label_warnings(by_outcome: dict[str, int]) -> list[str]:
    total = sum(by_outcome.values())
    unlabelled = by_outcome.get("unknown", 0) + by_outcome.get("claimed_success", 0)
    if total < UNWIRED_MIN or unlabelled < UNWIRED_SHARE * total:
        return []
    return [
        f"outcome signal not wired: {unlabelled} of {total} episodes are unknown or "
        f"claimed_success, so outcome-aware recall (what_worked, what_failed) has nothing to "
        f"go on; record a verified outcome or grade runs later (see docs/recall.md#outcomes)"
    ]


async def count_stats(
    episodes: EpisodeLog,
    held: HeldLog,
    is_expired: Callable[[int, float], bool],
    clock: Callable[[], float],
    semantic: Semantic | None,
) -> MemoryStats:
    """See :meth:`EpisodicMemory.stats`: the log as *held* holds it (synced first), now."""
    await held.sync()
    now = clock()
    vectors = None if semantic is None else semantic.vectors
    by_outcome = dict.fromkeys(OUTCOMES, 0)
    by_source: dict[str, int] = {}
    successes = checked_successes = foreign = 0
    expired = 0
    times: list[tuple[float, str]] = []
    shown: set[int] = set()
    for seq, raw in episodes.cached():
        ep = held.view(raw)
        if is_expired(seq, now):
            expired += 1
            continue
        shown.add(seq)
        by_outcome[ep.outcome] = by_outcome.get(ep.outcome, 0) + 1
        source = ep.effective_source
        by_source[source] = by_source.get(source, 0) + 1
        foreign += bool(ep.outcome_source) and ep.outcome_source not in SOURCES
        if ep.outcome in ("success", "claimed_success"):
            successes += 1
            # A verified grade of no named source is checked too (grade()'s default).
            checked_successes += source in CHECKED_SOURCES or checked_grade(
                raw, held.grades.get(raw.id, ())
            )
        known = held.known[seq]
        if known.dated:
            times.append((known.recorded, ep.timestamp))
    return MemoryStats(
        total=sum(by_outcome.values()),
        by_outcome=by_outcome,
        expired=expired,
        corrupt=episodes.corrupt,
        oldest=min(times)[1] if times else None,
        newest=max(times)[1] if times else None,
        capacity=episodes.max,
        stored_bytes=await episodes.stored_bytes(),
        vectors=sum(1 for s in vectors if s in shown) if vectors is not None else 0,
        grades=sum(len(g) for i, g in held.grades.items() if held.ids.get(i) in shown),
        most_used=[
            (held.known[seq].id, count)
            for seq, count in sorted(
                ((s, c) for s, c in held.uses.items() if s in shown and c > 0),
                key=lambda item: (-item[1], -item[0]),
            )[:5]
        ],
        warnings=_label_warnings(by_outcome)
        or _success_warnings(sum(by_outcome.values()), successes, checked_successes),
        by_source=by_source,
        unknown_sources=foreign,
        embedder=(
            f"{identity[0]} ({identity[1]} dimensions)" if (identity := episodes.identity) else None
        ),
    )
