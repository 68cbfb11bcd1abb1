"""A page of the log, newest first: what a listing shows without reading the whole log."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._episode import Episode

__all__ = ["Page"]


@dataclass(frozen=True)
class Page:
    """What :meth:`~deepcrew_episodic.EpisodicMemory.page` returns: up to ``limit`` episodes
    this memory shows (unexpired, as their grades make them), newest first, after the
    ``offset`` newest; and ``total``, how many it shows in all.

    Example::

        page = await memory.page(50)
        print(f"the newest {len(page.episodes)} of {page.total}")
    """

    episodes: list[Episode] = field(default_factory=list)
    total: int = 0
    offset: int = 0
