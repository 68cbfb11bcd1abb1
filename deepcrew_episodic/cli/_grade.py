"""``grade``: the outcome of an episode learnt after it was recorded.

``EpisodicMemory.grade`` appends the grade as a record of its own; the episode is never
rewritten. Every read path (``recall``, ``timeline``, ``stats``, the filters) applies the
grades: the grade from the best source wins, the newest among equals, and a verified outcome
beats a claimed one.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ._errors import CliError
from ._ids import resolve_id
from ._output import clean, dump, for_display, grade_json, one_line, out, quantity
from ._store import stored

if TYPE_CHECKING:
    from .. import EpisodicMemory


async def cmd_grade(args: argparse.Namespace, memory: EpisodicMemory) -> int:
    from .. import ConfigurationError

    episode_id = await _resolve(args.id, memory)
    try:
        grade = await memory.grade(
            episode_id,
            outcome=args.outcome,
            score=args.score,
            note=args.note,
            verified=False if args.claimed else None,
            source=args.source,
        )
    except ConfigurationError as exc:
        # An id the log does not hold, or a note too long: the library's message names it.
        raise CliError(f"{' '.join(clean(str(exc)).split())}: nothing was graded") from None
    # The episode as every read path now shows it (the grade applied, or outweighed).
    found = await memory.select(ids=[episode_id])
    # An episode that expired meanwhile is shown by nothing, not even here.
    episode = found[0] if found and not memory.is_expired(found[0]) else None
    grades = await memory.grades(episode_id)
    if args.json:
        dump(
            {
                "id": clean(episode_id),
                "grade": grade_json(grade),
                "episode": for_display(episode) if episode is not None else None,
                "grades": [grade_json(g) for g in grades],
            }
        )
        return 0
    kind = ("verified" if grade.verified else "claimed") + (
        f" by {grade.source}" if grade.source and grade.source != "agent" else ""
    )
    score = f", score {grade.score:.2f}" if grade.score is not None else ""
    out(f"graded {clean(episode_id)}: {grade.outcome} ({kind}{score})")
    if episode is not None:
        now = episode.outcome + (f" {episode.score:.2f}" if episode.score is not None else "")
        # This grade decides only if the episode now reads as it says.
        outweighed = (episode.outcome, episode.outcome_source) != grade.reads_as
        why = (
            " (a verified outcome outweighs this claim)"
            if outweighed and not grade.verified
            else " (a better source's outcome outweighs this grade)"
            if outweighed
            else ""
        )
        out(
            f"now reads: {now}  {one_line(episode.query, 70)}  ({quantity(len(grades), 'grade')}){why}"
        )
    return 0


async def _resolve(given: str, memory: EpisodicMemory) -> str:
    """A full id, or the one id that starts with *given* (see :mod:`._ids`). An id not found
    here is passed on as given: the library also looks beyond this view, and names the id when
    no episode has it."""
    found = resolve_id(given, await stored(memory), memory.is_expired, nothing="nothing was graded")
    return given if found is None else found
