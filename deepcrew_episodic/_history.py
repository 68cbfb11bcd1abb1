"""``History``: the outcomes of the past runs of one task over time, and where the run of
successes broke ("when did this start failing?"). Built by :meth:`EpisodicMemory.history`."""

from __future__ import annotations

from collections.abc import Iterable

from ._recall import Scored

__all__ = ["FAILED", "WORKED", "History"]

# The outcomes that say a run worked, and those that say it did not. ``unknown`` and
# ``abandoned`` say neither: they neither continue a run of successes nor break it.
WORKED = ("success", "claimed_success")
FAILED = ("failure", "partial")


class History(list[Scored]):
    """What :meth:`~deepcrew_episodic.EpisodicMemory.history` returns: the runs that match a
    task, **oldest first** (a list of :class:`~deepcrew_episodic.Scored`, one item per run as
    recall shows it: its latest iteration, read with its grades), and what they say.

    ``broke`` is the first run that failed (``failure`` or ``partial``) after the newest one
    that worked (``success`` or ``claimed_success``), when nothing has worked since: where the
    run of successes broke. ``None`` when the newest run with an outcome worked, or when no
    run ever worked (then ``failing`` says whether any failed). ``last_success`` is the newest
    run that worked. ``unknown`` outcomes are listed but neither continue nor break a run.

    Example::

        history = await memory.history("deploy to staging")
        if history.broke is not None:
            print("failing since", history.broke.episode.timestamp)
    """

    task: str
    broke: Scored | None
    last_success: Scored | None

    def __init__(self, items: Iterable[Scored] = (), *, task: str = "") -> None:
        super().__init__(items)
        self.task = task
        self.last_success = None
        self.broke = None
        for item in self:
            outcome = item.episode.outcome
            if outcome in WORKED:
                self.last_success, self.broke = item, None
            elif outcome in FAILED and self.broke is None and self.last_success is not None:
                self.broke = item

    @property
    def failing(self) -> bool:
        """Whether the newest run with an outcome (other than ``unknown``) failed."""
        for item in reversed(self):
            if item.episode.outcome in WORKED:
                return False
            if item.episode.outcome in FAILED:
                return True
        return False

    @property
    def failures_since(self) -> int:
        """How many runs failed since the newest one that worked (all of them if none did)."""
        count = 0
        for item in reversed(self):
            if item.episode.outcome in WORKED:
                break
            count += item.episode.outcome in FAILED
        return count
