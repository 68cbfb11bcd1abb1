"""Outcome sources: where an episode's (or a grade's) outcome came from, and what it is worth.

An outcome is only as good as what set it. The sources, best to worst:

``verifier``
    A test suite, an exit code, a verifier function, an error the run raised: checked
    outside the agent.
``user``
    The user's next turn ("thanks, that worked" / "still broken"): checked, one turn late.
``agent``
    The agent's own claim (``claimed_success`` is always one). Agents report success
    generously.
``judge``
    A model judging the transcript (an ``LLMVerifier``, a grading model): costly, and its
    errors are correlated with the agent's.
``""``
    Nothing recorded: records written before sources existed, deepcrew-ai logs, other tools.
    A ``success`` or ``failure`` without a source reads as it always did, as verified; a
    ``claimed_success`` without one is the agent's claim.

A source value this library does not know (a newer writer, another tool) is kept as stored and
shown, and read as no source (``""``); :class:`~deepcrew_episodic.MemoryStats` counts such
episodes. One table of the rules, used by ranking, grading, the block, the CLI and the viewer.
"""

from __future__ import annotations

from typing import Literal, cast

__all__ = ["OutcomeSource"]

OutcomeSource = Literal["verifier", "user", "agent", "judge", ""]
SOURCES: tuple[str, ...] = ("verifier", "user", "agent", "judge")
# Checked outside the agent: an outcome from one of these is verified.
CHECKED_SOURCES = frozenset({"verifier", "user"})
# Outcomes that say whether the approach worked; a source changes what they are worth.
VERDICTS = frozenset({"success", "failure"})


def source_of(outcome: str, source: str) -> OutcomeSource:
    """The source *outcome* is read as coming from: *source* when this library knows it,
    ``agent`` for a ``claimed_success`` (unless a judge said it), ``""`` for an ``unknown``
    outcome (nothing was said) and for a source from no writer this library knows."""
    if outcome == "unknown":
        return ""
    if outcome == "claimed_success":
        return "judge" if source == "judge" else "agent"
    return cast(OutcomeSource, source) if source in SOURCES else ""


def is_verified(outcome: str, source: str) -> bool:
    """Whether *outcome* was checked outside the agent: a ``success`` or ``failure`` from a
    verifier or the user, or from no recorded source (as such records always read)."""
    said = source_of(outcome, source)
    return outcome in VERDICTS and (said in CHECKED_SOURCES or said == "")


def precedence(outcome: str, source: str) -> int:
    """Which outcome of an episode wins when several were given (its own, its grades): the
    lowest number, the newest among equals. A verifier beats the user, the user beats the
    agent's claim, the claim beats a model's judgement; a verdict with no recorded source
    ranks with the user's (so any checked grade still overrides it, as it always did), and
    an outcome with neither a verdict nor a source (``unknown``, an unsourced ``partial``)
    gives way to any grade."""
    said = source_of(outcome, source)
    if said == "":
        return 1 if outcome in VERDICTS else 4
    return SOURCES.index(said)


def check_source(value: object) -> OutcomeSource:
    """*value* if it is a source this library writes; ``ValueError`` naming the choices."""
    if not isinstance(value, str) or (value and value not in SOURCES):
        choices = ", ".join(repr(s) for s in (*SOURCES, ""))
        raise ValueError(f"expected one of {choices}, not {value!r}"[:300])
    return cast(OutcomeSource, value)


def source_label(outcome: str, source: str) -> str:
    """The short label a listing shows beside an outcome: the source it is read as coming from
    (``verifier``, ``user``, ``agent``, ``judge``), ``""`` when none is recorded, or a stored
    value this version does not know, marked as such (it is ranked as no source)."""
    said = source_of(outcome, source)
    if said or not source or outcome == "unknown":
        return said
    return f"{source}: unknown source"


_WORKED = {
    "success": "worked",
    "claimed_success": "worked",
    "failure": "failed",
    "partial": "partly worked",
}


def outcome_words(outcome: str, source: str) -> str:
    """What happened and who says so, for a person or a model reading it: ``worked (verified
    by a check)``, ``failed (reported by the user)``, ``claimed to work (unverified)``, ``a
    model judged it failed (unverified)``, ``outcome unknown``."""
    said = source_of(outcome, source)
    what = _WORKED.get(outcome)
    if what is None:
        if outcome == "abandoned":
            return "abandoned before it finished"
        return "outcome unknown" if outcome == "unknown" else outcome
    if said == "judge":
        return f"a model judged it {what} (unverified)"
    if said == "agent":
        if what == "worked":
            return "claimed to work (unverified)"
        return f"the agent said it {what} (unverified)"
    if said == "user":
        return f"{what} ({'confirmed' if what == 'worked' else 'reported'} by the user)"
    if said == "verifier":
        return f"{what} (verified by a check)"
    return f"{what} (verified)" if outcome in VERDICTS else what
