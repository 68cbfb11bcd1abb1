"""The ranking rules on top of the keyword (or hybrid) score: filters, reinforcement, one item
per run, and the lessons of a run's failed iterations.

They read the log through a :class:`View`, so the same rules rank from the in-process index
(a memory that holds the log) and from a store that keeps the index (a memory that reads
only what a query touches): both return the same items with the same scores.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Collection, Iterable
from itertools import chain
from typing import Protocol

from ._episode import OUTCOMES, Episode, run_key
from ._exceptions import ConfigurationError
from ._recall import Postings, Ranking, Scored
from ._validate import strings

__all__ = [
    "LESSONS_CHARS",
    "MAX_BOOST",
    "View",
    "copied_ranking",
    "keyword_ranking",
    "outcome_filter",
    "rank",
    "tag_filter",
    "under_floor",
]

# The largest reinforcement factor (see boost).
MAX_BOOST = 1.2
# A run's item carries the lessons of its failed iterations, cut here.
LESSONS_CHARS = 1200

Found = list[tuple[int, Scored]]


class View(Protocol):
    """What the ranking rules read of the episodes a memory shows."""

    reinforce: bool

    def any_uses(self) -> bool:
        """Whether any episode shown may have been used (reinforcement can change an order)."""

    def any_runs(self) -> bool:
        """Whether any run may have more than one iteration."""

    def uses(self, seq: int) -> int: ...

    def recorded(self, seq: int) -> float:
        """The time *seq* ranks and is filtered by."""

    def run(self, key: str) -> list[int]:
        """The seqs of the run (a run_key) shown, oldest first."""

    def indexed(self, seq: int) -> bool: ...

    def episode(self, seq: int) -> Episode:
        """The episode as its grades make it."""

    def expired(self, seq: int, now: float) -> bool: ...

    def outcome(self, seq: int) -> str:
        """Its outcome as its grades make it."""

    def tags(self, seq: int) -> frozenset[str]:
        """Its tags, case-folded."""


def boost(view: View, seq: int) -> float:
    """The reinforcement factor of an episode used *n* times: 1 + min(0.2, ln(1 + n) / 10)."""
    uses = view.uses(seq) if view.reinforce else 0
    return 1.0 + min(MAX_BOOST - 1.0, math.log1p(uses) / 10.0) if uses else 1.0


def keyword_ranking(
    view: View,
    index: Postings,
    query: str,
    k: int,
    *,
    now: float,
    intent: str,
    half_life_days: float,
    outcomes: Collection[str] | None,
    tags: set[str] | frozenset[str] | None,
    since: float | None,
    until: float | None,
    floor: float,
    search: Callable[[int, Callable[[int], bool], list[tuple[int, Scored]]], Found] | None = None,
    score: Callable[[int], Scored | None] | None = None,
) -> tuple[Found, list[Scored]]:
    """The top *k* for *query* with every rule applied, and what fell under the relevance
    floor (see :func:`rank`). *search* and *score* replace the keyword search and the scoring
    of one episode (the hybrid ranking passes its own)."""

    # Filters and the retention check run only for a candidate that would enter the top k.
    def accept(seq: int) -> bool:
        if view.expired(seq, now):
            return False
        if until is not None and not -math.inf < view.recorded(seq) < until:
            return False  # recorded at or after until (or at no time known)
        outcome = view.outcome(seq)
        if outcomes is not None and outcome not in outcomes:
            return False
        if outcome == "abandoned" and outcomes is None:
            return False  # a run that never got to the task: asked for by name only
        return tags is None or bool(tags & view.tags(seq))

    # What the latest search found under the floor (see Ranking.under_floor).
    under: list[tuple[int, Scored]] = []

    def searched(n: int) -> Found:
        under.clear()
        if search is not None:
            return search(n, accept, under)
        return index.search(
            query,
            n,
            now=now,
            intent=intent,
            half_life_days=half_life_days,
            since=since,
            accept=accept,
            min_relevance=floor,
            under=under,
        )

    def scored(seq: int) -> Scored | None:
        # One episode as search scores it, the filters applied (a run's later iterations).
        if not view.indexed(seq) or (since is not None and view.recorded(seq) < since):
            return None
        if not accept(seq):
            return None
        if score is not None:
            found = score(seq)
        else:
            found = index.score(seq, query, now=now, intent=intent, half_life_days=half_life_days)
        return None if found is None or found.relevance < floor else found

    found = rank(view, searched, scored, k, now, under)
    return found, under_floor(view, found, under, k)


def rank(
    view: View,
    search: Callable[[int], Found],
    score: Callable[[int], Scored | None],
    k: int,
    now: float,
    under: list[tuple[int, Scored]] | None = None,
) -> Found:
    """The top *k* of *search* with reinforcement applied and one item per run.

    A run's item is its latest iteration that the query and the filters admit (*score*
    answers for one episode: ``None`` when it is not returned), scored as itself: so the
    item shown is the item scored, and an expired, filtered-out or abandoned iteration is
    never shown. Which iteration that is depends on the run alone, never on how many
    other episodes the search had to fetch. Its lesson carries those of the unexpired
    iterations that failed before it.

    Exact: more candidates are fetched until nothing left unfetched could reach the k-th
    (an unfetched episode scores at most the last fetched score times the largest boost,
    and a run none of whose iterations was fetched is such an episode). *under*, what
    each search found under the floor, is made exact the same way (see under_floor).
    """
    boosting = view.reinforce and view.any_uses()
    if not boosting and not view.any_runs():
        return search(k)
    wanted = max(2 * k, 16)
    chosen_runs: dict[str, tuple[int, Scored] | None] = {}  # run -> its item
    while True:
        found = search(wanted)
        items: list[tuple[float, float, int, Scored]] = []
        taken: set[str] = set()
        for seq, scored in found:
            run = run_key(scored.episode)  # one item per run and phase
            if run:
                if run in taken:
                    continue
                taken.add(run)
                if run not in chosen_runs:
                    chosen_runs[run] = _run_item(view, run, seq, scored, score)
                item = chosen_runs[run]
                if item is None:
                    continue
                seq, scored = item
            factor = boost(view, seq)
            if factor != 1.0:
                scored = dataclasses.replace(
                    scored, score=scored.score * factor, uses=view.uses(seq)
                )
            items.append((scored.score, view.recorded(seq), seq, scored))
        chosen = heapq.nlargest(k, items, key=lambda t: t[:3])
        limit = found[-1][1].score * (MAX_BOOST if boosting else 1.0) if found else 0.0
        if len(found) < wanted or (len(chosen) == k and chosen[-1][0] >= limit):
            if not under or len(under) + len(found) < wanted:
                break  # nothing under the floor, or all of it was fetched
            # What the floor kept out must be exact too: an episode under it that was not
            # fetched scores at most the lowest of the unfloored top `wanted` (the episodes
            # under the floor and the best of those above it), boosted.
            fetched = [s.score for _, s in chain(under, found[: wanted - len(under)])]
            kept = [(seq, scored) for _, _, seq, scored in chosen]
            best = _beside(view, kept, under, k)
            bound = min(fetched) * (MAX_BOOST if boosting else 1.0)
            if len(best) == k and best[-1][0] >= bound:
                break
        wanted *= 4
    return [(seq, _as_run(view, seq, scored, now)) for _, _, seq, scored in chosen]


def under_floor(view: View, found: Found, under: list[tuple[int, Scored]], k: int) -> list[Scored]:
    """The episodes of *under* (what the last search found under the floor) that would have
    been among the top *k* beside *found*: boosted as :func:`rank` boosts, one per run, a run
    that *found* shows left out."""
    if not under:
        return []
    return [scored for _, _, _, scored, fell in _beside(view, found, under, k) if fell]


def _beside(
    view: View, found: Found, under: list[tuple[int, Scored]], k: int
) -> list[tuple[float, float, int, Scored, bool]]:
    """The top *k* of *found* and *under* together (boosted, one per run), each marked
    whether it fell under the floor."""
    # One per run and phase, as rank groups them (the phases of a run are items of their own).
    shown_runs = {run for _, scored in found if (run := run_key(scored.episode))}
    items: list[tuple[float, float, int, Scored, bool]] = [
        (scored.score, view.recorded(seq), seq, scored, False) for seq, scored in found
    ]
    for seq, scored in under:
        run = run_key(scored.episode)
        if run:
            if run in shown_runs:
                continue
            shown_runs.add(run)
        factor = boost(view, seq)
        if factor != 1.0:
            scored = dataclasses.replace(scored, score=scored.score * factor, uses=view.uses(seq))
        items.append((scored.score, view.recorded(seq), seq, scored, True))
    return heapq.nlargest(k, items, key=lambda t: t[:3])


def _run_item(
    view: View, run: str, seq: int, scored: Scored, score: Callable[[int], Scored | None]
) -> tuple[int, Scored] | None:
    """The item of *run*, of which the search found iteration *seq*: its latest iteration
    that *score* admits (*seq* itself when no later one is)."""
    for later in reversed(view.run(run)):
        if later <= seq:
            break
        found = score(later)
        if found is not None:
            return later, found
    return seq, scored


def _as_run(view: View, seq: int, scored: Scored, now: float) -> Scored:
    """*scored* (a run's chosen iteration) with the lessons of the iterations of its run
    that failed before it and have not expired."""
    run = run_key(scored.episode)
    seqs = view.run(run) if run else []
    if len(seqs) < 2:
        return scored
    lessons = [
        ep.reflection
        for s in seqs
        if s < seq
        and view.indexed(s)
        and not view.expired(s, now)
        and (ep := view.episode(s)).outcome in ("failure", "partial")
        and ep.reflection
    ]
    shown = scored.episode.copy()
    # Whole lessons only, as many as fit: a lesson cut in its middle could end inside a
    # secret (stored by deepcrew-ai or with redact=False) that nothing recognises once cut.
    head = f"{shown.reflection} Earlier attempts: " if shown.reflection else "Earlier attempts: "
    fitting: list[str] = []
    room = LESSONS_CHARS - len(head)
    for lesson in lessons:
        if len(lesson) + 2 * bool(fitting) > room:
            break
        room -= len(lesson) + 2 * bool(fitting)
        fitting.append(lesson)
    if fitting:
        shown.reflection = head + "; ".join(fitting)
    return dataclasses.replace(scored, episode=shown, iterations=len(seqs))


def copied_ranking(found: Iterable[Scored], floor: float, under: Iterable[Scored]) -> Ranking:
    """A :class:`Ranking` of copies (nothing a caller changes reaches the cache)."""
    ranking = Ranking(dataclasses.replace(s, episode=s.episode.copy()) for s in found)
    ranking.min_relevance = floor
    ranking.under_floor = tuple(dataclasses.replace(s, episode=s.episode.copy()) for s in under)
    return ranking


def tag_filter(tags: Collection[str] | None) -> set[str] | None:
    if tags is None:
        return None
    return {t.casefold() for t in strings("tags", tags)}


def outcome_filter(outcome: str | Collection[str] | None) -> set[str] | None:
    if outcome is None:
        return None
    chosen = set(strings("outcome", outcome, one=True))
    bad = chosen - set(OUTCOMES)
    if bad:
        raise ConfigurationError(f"unknown outcome {sorted(bad)}; expected one of {OUTCOMES}")
    return chosen
