"""The write path: the checks an episode passes, its redaction, its lesson from
``reflect_model``, its vector, and the append to the log with its id claimed."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ._episode import FIELDS, Episode, new_id, now_iso, outcome_for_score, parse_time
from ._exceptions import InvalidEpisodeError
from ._held import FUTURE_SKEW_SECONDS, HeldLog
from ._log import EpisodeLog
from ._options import Options
from ._redact import safe_message
from ._store_reads import StoreReads
from ._unicode import escape_hidden

if TYPE_CHECKING:
    from ._semantic import Semantic  # only built with an embedder

__all__ = ["Writer"]

log = logging.getLogger("deepcrew_episodic")


class Writer:
    """How one memory records an episode."""

    def __init__(
        self,
        episodes: EpisodeLog,
        semantic: Semantic | None,
        store: StoreReads,
        held: HeldLog,
        options: Options,
    ) -> None:
        self._log = episodes
        self._semantic = semantic
        self._store = store
        self._held = held
        self._clock = options.clock
        self._redactor = options.redactor
        self._reflection = options.reflection  # reflect_model: the lesson a model writes

    async def record(self, episode: Episode | Any) -> Episode:
        """See :meth:`EpisodicMemory.record`."""
        stored = self.check(episode)
        given = episode if isinstance(episode, Episode) else None
        claim: str | None = None
        if not stored.id:
            stored.id = new_id()
        else:
            if await self._stored_id(stored.id):
                raise InvalidEpisodeError(
                    f"an episode with id {safe_message(stored.id, 140)!r} is already stored in "
                    f"namespace {escape_hidden(self._log.namespace)!r}; record a copy without the "
                    f"id to store it again"
                )
            claim = await self._log.claim(stored.id)
        try:
            if not stored.timestamp:
                stored.timestamp = now_iso(self._clock())
            # A distilled run (it has an approach) already got its lesson, or declined one
            # (NONE): a second model must not invent it.
            if self._reflection.model and stored.reflection is None and not stored.approach:
                lesson = await self.reflect(stored)
                if lesson:
                    stored.reflection = lesson
            semantic = self._semantic
            vector = await semantic.episode_vector(stored) if semantic is not None else None
            _, with_vector = await self._log.append(stored, claim=claim, vector=vector)
            if semantic is not None and vector is not None and not with_vector:
                semantic.embedding_failed(
                    "record", "the log's vectors are now another embedder's (a reembed ran)"
                )
        except BaseException:
            if claim is not None:
                import anyio  # only on this path: reading a memory never loads it

                with anyio.CancelScope(shield=True):
                    await _quietly(self._log.release(claim))
            raise
        log.debug(
            "episode recorded",
            extra={"namespace": self._log.namespace, "outcome": stored.outcome, "id": stored.id},
        )
        if given is not None:
            # deepcrew-ai fills these in on the caller's object; its text stays as given.
            given.id, given.timestamp = stored.id, stored.timestamp
            if given.reflection is None and stored.reflection is not None:
                given.reflection = stored.reflection
        return stored.copy()

    async def _stored_id(self, episode_id: str) -> bool:
        """Whether this memory shows an episode with id *episode_id* (record() refuses to
        store a second one)."""
        if self._store.reads_store():
            found = await self._store.stored_id(episode_id)
            if found is not None:
                return found
        await self._held.sync()
        return episode_id in self._held.ids

    def check(self, episode: Episode | Any) -> Episode:
        """See :meth:`EpisodicMemory.check`."""
        stored = self._redact(_checked_copy(episode))
        if stored.outcome == "unknown" and stored.score is not None:
            stored.outcome = outcome_for_score(stored.score)  # the one rule, on every path
        for name in ("id", "conversation_id"):
            value = getattr(stored, name)
            kind = self._redactor.find(value) if value and self._redactor is not None else None
            if kind is not None:
                raise InvalidEpisodeError(
                    f"invalid episode: {name}: it looks like a secret ({kind}); ids are stored "
                    f"and shown as they are, so they are never redacted"
                )
        if stored.timestamp:
            when = parse_time(stored.timestamp)
            if when > self._clock() + FUTURE_SKEW_SECONDS:
                raise InvalidEpisodeError(
                    f"invalid episode: timestamp: {stored.timestamp!r} is in the future; "
                    f"leave it empty to use the current time"
                )
        return stored

    async def reflect(self, episode: Episode) -> str | None:
        """See :meth:`EpisodicMemory.reflect`."""
        model = self._reflection.model
        if not model:
            return None
        from ._reflect import ask_for_lesson

        try:
            lesson = await ask_for_lesson(
                model,
                self._redact(Episode.coerce(episode)),
                timeout_s=self._reflection.timeout,
                params=self._reflection.params,
                redactor=self._redactor,
            )
            # The model may echo a secret it was never shown (from its own context).
            return self._redactor.redact(lesson) if lesson and self._redactor else lesson
        except Exception as exc:
            self._log.counters.reflection_failures += 1
            log.warning(
                "reflection with %s failed (%s); recording without a lesson",
                model,
                safe_message(f"{type(exc).__name__}: {exc}"),
            )
            return None

    def _redact(self, episode: Episode) -> Episode:
        return self._redactor.redact_episode(episode) if self._redactor else episode


def _checked_copy(episode: Any) -> Episode:
    if isinstance(episode, Episode):
        # Check every field again: a list may have been edited since construction.
        return Episode(**{name: getattr(episode, name) for name in FIELDS})
    return Episode.coerce(episode).copy()


async def _quietly(awaitable: Any) -> None:
    try:
        await awaitable
    except Exception as exc:
        log.warning("could not release an id claim (%s: %s)", type(exc).__name__, exc)
