"""``EpisodicMemory``: record past runs, recall the relevant ones, render them for a prompt."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ._episode import OUTCOMES, Episode, new_id, now_iso, parse_time
from ._exceptions import ConfigurationError, InvalidEpisodeError
from ._log import Changes, Counters, EpisodeLog
from ._recall import DEFAULT_FIELDS, HALF_LIFE_DAYS, INTENTS, RecallIndex, Scored
from ._redact import Redactor, as_redactor
from ._render import render_block
from .providers._base import MemoryProvider, as_provider

__all__ = ["EpisodicMemory", "MemoryStats"]

log = logging.getLogger("deepcrew_episodic")

TimeLike = datetime | timedelta | str | float


class EpisodicMemory:
    """A durable ring buffer of :class:`Episode` records with relevance + recency recall.

    Parameters
    ----------
    backend:
        Any :class:`~deepcrew_episodic.providers.MemoryProvider`, or any object with
        deepcrew-ai's four provider methods (``store``, ``retrieve``, ``search``, ``clear``).
    namespace:
        Isolates one log from another in a shared backend. Letters, digits, ``_.-``.
    max_episodes:
        Ring-buffer capacity: the newest ``max_episodes`` are kept.
    recall_k:
        How many episodes :meth:`recall` returns by default.
    reflect_model:
        A litellm model name. When set, each recorded episode gets a one-sentence lesson
        (one model call per record; a failed call is logged and counted, never fatal).
    reflect_timeout:
        Seconds to wait for the reflection call.
    reflect_params:
        Extra keyword arguments for ``litellm.acompletion`` (``api_base``, ``api_key``, ...).
    recall_fields:
        Episode fields matched by recall: any of ``query``, ``tags``, ``reflection``,
        ``response``, ``tools_used``.
    max_age:
        Retention: episodes older than this are never returned and are deleted by
        :meth:`sweep`. ``None`` keeps them until the ring buffer drops them.
    half_life_days:
        Age at which an episode's recency tie-break halves.
    redact:
        Secrets (API keys, tokens, passwords in URLs, private keys) in every text field are
        replaced by ``[REDACTED:<kind>]`` before an episode is stored or sent to
        ``reflect_model``. ``True`` (default) applies the built-in rules, ``False`` turns
        redaction off, a :class:`~deepcrew_episodic.Redactor` adds or replaces rules.

    Example::

        memory = EpisodicMemory(FileMemoryProvider("episodes.json"), namespace="support")
        await memory.record(Episode(query="Refund order 1182", response="Refunded",
                                    outcome="success", tags=["billing"]))
        past = await memory.recall("how do I refund an order?")
        system_block = memory.render(past)
    """

    def __init__(
        self,
        backend: MemoryProvider | Any,
        *,
        namespace: str = "default",
        max_episodes: int = 100,
        recall_k: int = 3,
        reflect_model: str | None = None,
        reflect_timeout: float = 20.0,
        reflect_params: dict[str, Any] | None = None,
        recall_fields: Sequence[str] = DEFAULT_FIELDS,
        max_age: timedelta | None = None,
        half_life_days: float = HALF_LIFE_DAYS,
        redact: bool | Redactor = True,
    ) -> None:
        self._provider = as_provider(backend)
        self._log = EpisodeLog(self._provider, namespace, max_episodes)
        if not isinstance(recall_k, int) or recall_k < 1:
            raise ConfigurationError(f"recall_k must be an integer >= 1, not {recall_k!r}")
        if max_age is not None and (not isinstance(max_age, timedelta) or max_age <= timedelta(0)):
            raise ConfigurationError(f"max_age must be a positive timedelta, not {max_age!r}")
        if half_life_days <= 0:
            raise ConfigurationError(f"half_life_days must be > 0, not {half_life_days!r}")
        try:
            self._index = RecallIndex(recall_fields)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        self._recall_k = recall_k
        self._reflect_model = reflect_model
        if isinstance(reflect_timeout, bool) or not (
            isinstance(reflect_timeout, int | float) and reflect_timeout > 0
        ):
            raise ConfigurationError(
                f"reflect_timeout must be > 0 seconds, not {reflect_timeout!r}"
            )
        self._reflect_timeout = float(reflect_timeout)
        self._reflect_params = dict(reflect_params or {})
        self._max_age = max_age
        self._half_life = half_life_days
        self._redactor = as_redactor(redact)
        # episode id <-> seq for the cached episodes (record() refuses an id already stored)
        self._ids: dict[str, int] = {}
        self._id_of: dict[int, str] = {}
        # seq -> (forget_at, recorded_at) for the retention check on every read path.
        self._retention: dict[int, tuple[float | None, float | None]] = {}

    # --- properties -------------------------------------------------------------------

    @property
    def namespace(self) -> str:
        return self._log.namespace

    @property
    def max_episodes(self) -> int:
        return self._log.max

    @property
    def recall_k(self) -> int:
        return self._recall_k

    @property
    def reflect_model(self) -> str | None:
        return self._reflect_model

    @property
    def max_age(self) -> timedelta | None:
        """The retention policy: episodes older than this are hidden and swept."""
        return self._max_age

    @property
    def redactor(self) -> Redactor | None:
        """The redactor applied before storing, or ``None`` when redaction is off."""
        return self._redactor

    @property
    def backend(self) -> MemoryProvider:
        """The provider (deepcrew-ai providers appear wrapped in an adapter)."""
        return self._provider

    @property
    def counters(self) -> Counters:
        """Counts of tolerated failures: corrupt records skipped, indexes rebuilt, reflection
        calls failed, recalls failed during a run."""
        return self._log.counters

    # --- writing ------------------------------------------------------------------------

    async def record(self, episode: Episode | Any) -> Episode:
        """Store *episode* and return the stored copy (``id`` and ``timestamp`` filled, and
        ``reflection`` when ``reflect_model`` is set).

        Accepts an :class:`Episode`, a deepcrew-ai ``Episode`` dataclass or a dict. Invalid
        input raises :class:`InvalidEpisodeError` naming the field, and nothing is written.
        Secrets are redacted first (see ``redact``), so neither the store nor the reflection
        model ever sees them.
        """
        stored = self._redact(Episode.coerce(episode))
        updates: dict[str, Any] = {}
        if not stored.id:
            updates["id"] = new_id()
        else:
            await self._sync()
            if stored.id in self._ids:
                raise InvalidEpisodeError(
                    f"an episode with id {stored.id!r} is already stored in namespace "
                    f"{self.namespace!r}; record a copy without the id to store it again"
                )
        if not stored.timestamp:
            updates["timestamp"] = now_iso()
        if updates:
            stored = dataclasses.replace(stored, **updates)
        if self._reflect_model and stored.reflection is None:
            lesson = await self.reflect(stored)
            if lesson:
                stored = dataclasses.replace(stored, reflection=lesson)
        await self._log.append(stored)
        log.debug(
            "episode recorded",
            extra={"namespace": self.namespace, "outcome": stored.outcome, "id": stored.id},
        )
        return stored

    async def reflect(self, episode: Episode) -> str | None:
        """Ask ``reflect_model`` for a one-sentence lesson; ``None`` without a model, when the
        model answers ``NONE``, or when the call fails (logged and counted)."""
        if not self._reflect_model:
            return None
        from ._reflect import ask_for_lesson

        try:
            lesson = await ask_for_lesson(
                self._reflect_model,
                self._redact(Episode.coerce(episode)),
                timeout_s=self._reflect_timeout,
                params=self._reflect_params,
            )
            # The model may echo a secret it was never shown (from its own context).
            return self._redactor.redact(lesson) if lesson and self._redactor else lesson
        except Exception as exc:
            self.counters.reflection_failures += 1
            log.warning(
                "reflection with %s failed (%s: %s); recording without a lesson",
                self._reflect_model,
                type(exc).__name__,
                exc,
            )
            return None

    async def clear(self) -> None:
        """Delete every episode of this namespace (payloads included, deepcrew-ai's log too).
        Other namespaces and unrelated keys are untouched."""
        await self._log.clear()

    async def forget(
        self,
        ids: str | Collection[str] | None = None,
        *,
        outcome: str | Collection[str] | None = None,
        tags: Collection[str] | None = None,
        before: TimeLike | None = None,
        containing: str | None = None,
    ) -> int:
        """Delete episodes from the backend for real (the payload is gone, not hidden); return
        how many were deleted.

        Select them by ``ids`` and/or a filter; an episode must match every criterion given:
        ``outcome`` (one or several), ``tags`` (at least one of them), ``before`` (recorded
        before a time: a datetime, an ISO-8601 string, POSIX seconds, or a timedelta meaning
        "older than this"), ``containing`` (case-insensitive text in any field). Expired
        episodes that have not been swept yet are deleted too. :meth:`clear` deletes all.

        Example::

            await memory.forget(["3f2a..."])                        # by id
            await memory.forget(containing="acme corp")             # every mention of a customer
            await memory.forget(outcome="failure", before=timedelta(days=90))
        """
        selected = await self._select(
            ids=ids, outcome=outcome, tags=tags, before=before, containing=containing
        )
        if selected:
            # Payloads that fell out of the ring (or of a smaller one) go too: "forget" must
            # not leave a copy behind that a reader with a larger ring could still show.
            strays = await self._log.stray_keys()
            await self._log.delete_seqs([seq for seq, _ in selected], also=strays)
        return len(selected)

    async def _select(
        self,
        *,
        ids: str | Collection[str] | None = None,
        outcome: str | Collection[str] | None = None,
        tags: Collection[str] | None = None,
        before: TimeLike | None = None,
        containing: str | None = None,
    ) -> list[tuple[int, Episode]]:
        """The stored episodes (expired included) matching every given criterion."""
        if ids is None and outcome is None and tags is None and before is None and not containing:
            raise ConfigurationError(
                "forget() needs ids or a filter (outcome, tags, before, containing); "
                "clear() deletes every episode"
            )
        wanted_ids = None if ids is None else ({ids} if isinstance(ids, str) else set(ids))
        outcomes = _outcomes(outcome)
        wanted_tags = {t.casefold() for t in tags} if tags is not None else None
        cut = _since(before) if before is not None else None
        needle = containing.casefold() if containing else None
        await self._sync()
        selected: list[tuple[int, Episode]] = []
        for seq, ep in self._log.cached():
            if wanted_ids is not None and ep.id not in wanted_ids:
                continue
            if outcomes is not None and ep.outcome not in outcomes:
                continue
            if wanted_tags is not None and not wanted_tags & {t.casefold() for t in ep.tags}:
                continue
            if cut is not None:
                recorded = self._retention[seq][1]
                if recorded is None or recorded >= cut:
                    continue
            if needle is not None and needle not in _text_of(ep).casefold():
                continue
            selected.append((seq, ep))
        return selected

    async def sweep(self) -> int:
        """Delete expired episodes (``forget_after`` passed, or older than ``max_age``) and
        keys the ring no longer shows; return how many keys were deleted."""
        await self._sync()
        now = time.time()
        expired = [seq for seq, _ in self._log.cached() if self._expired(seq, now)]
        strays = await self._log.stray_keys()
        if expired or strays:
            await self._log.delete_seqs(expired, also=strays)
        return len(expired) + len(strays)

    # --- reading --------------------------------------------------------------------------

    async def stats(self) -> MemoryStats:
        """Counts for this namespace: episodes by outcome, expired and corrupt records not
        shown, the oldest and newest timestamps, and the bytes stored."""
        await self._sync()
        now = time.time()
        by_outcome = dict.fromkeys(OUTCOMES, 0)
        expired = 0
        times: list[tuple[float, str]] = []
        for seq, ep in self._log.cached():
            if self._expired(seq, now):
                expired += 1
                continue
            by_outcome[ep.outcome] = by_outcome.get(ep.outcome, 0) + 1
            recorded = self._retention[seq][1]
            if recorded is not None:
                times.append((recorded, ep.timestamp))
        keys = await self._provider.keys(self._log.prefix)
        values = await self._provider.retrieve_many(keys) if keys else []
        return MemoryStats(
            total=sum(by_outcome.values()),
            by_outcome=by_outcome,
            expired=expired,
            corrupt=self._log.corrupt,
            oldest=min(times)[1] if times else None,
            newest=max(times)[1] if times else None,
            capacity=self._log.max,
            stored_bytes=sum(
                len(k.encode()) + len((v or "").encode()) for k, v in zip(keys, values, strict=True)
            ),
        )

    async def load(self) -> list[Episode]:
        """Every stored episode, oldest first (expired ones excluded)."""
        await self._sync()
        now = time.time()
        return [ep for seq, ep in self._log.cached() if not self._expired(seq, now)]

    async def recall(
        self,
        query: str,
        top_k: int | None = None,
        *,
        intent: str = "any",
        tags: Collection[str] | None = None,
        outcome: str | Collection[str] | None = None,
        since: TimeLike | None = None,
    ) -> list[Episode]:
        """Up to *top_k* (default ``recall_k``) episodes relevant to *query*, best first.

        Episodes that share no term with *query* are never returned. ``intent="what_failed"``
        ranks failures first among equally relevant episodes, ``"what_worked"`` successes.
        ``tags`` keeps episodes with at least one of the tags, ``outcome`` those with that
        outcome (or one of them), ``since`` those recorded at or after a time (a datetime, an
        ISO-8601 string, POSIX seconds, or a timedelta meaning "this long ago").
        """
        scored = await self.explain(
            query, top_k, intent=intent, tags=tags, outcome=outcome, since=since
        )
        return [s.episode for s in scored]

    async def explain(
        self,
        query: str,
        top_k: int | None = None,
        *,
        intent: str = "any",
        tags: Collection[str] | None = None,
        outcome: str | Collection[str] | None = None,
        since: TimeLike | None = None,
    ) -> list[Scored]:
        """Like :meth:`recall`, with each episode's score and why (matched terms, recency,
        outcome weight).

        Example::

            for hit in await memory.explain("refund a duplicate charge", intent="what_failed"):
                print(f"{hit.score:.3f} {hit.episode.query!r}: {hit.why()}")
        """
        if not isinstance(query, str):
            raise ConfigurationError(f"query must be a string, not {type(query).__name__}")
        k = self._recall_k if top_k is None else top_k
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise ConfigurationError(f"top_k must be an integer >= 0, not {top_k!r}")
        if intent not in INTENTS:
            raise ConfigurationError(f"intent must be one of {INTENTS}, not {intent!r}")
        outcomes = _outcomes(outcome)
        if isinstance(tags, str):
            raise ConfigurationError(f"tags must be a collection of strings, not {tags!r}")
        wanted_tags = {t.casefold() for t in tags} if tags is not None else None
        after = _since(since) if since is not None else None
        await self._sync()
        if k == 0:
            return []
        now = time.time()
        index = self._index

        # Filters and the retention check run only for a candidate that would enter the top k.
        def accept(seq: int) -> bool:
            if self._expired(seq, now):
                return False
            ep = index.episode(seq)
            if outcomes is not None and ep.outcome not in outcomes:
                return False
            return wanted_tags is None or bool(wanted_tags & {t.casefold() for t in ep.tags})

        found = index.search(
            query,
            k,
            now=now,
            intent=intent,
            half_life_days=self._half_life,
            since=after,
            accept=accept,
        )
        return [scored for _, scored in found]

    def render(self, episodes: Sequence[Episode | Scored], *, max_chars: int | None = None) -> str:
        """The ``## Relevant past experience`` block for *episodes* (best first, as
        :meth:`recall` or :meth:`explain` return them), ``""`` for none.

        Each item is one dated line (outcome, score, tools, the question and the lesson, or
        the answer when there is no lesson); stored text is neutralised so that it cannot
        open a heading, fake a system section or end the block. With *max_chars*, the
        lowest-ranked items are dropped whole until the block fits; it never exceeds
        *max_chars*. Expired episodes are never shown.

        Example::

            block = memory.render(await memory.recall(task), max_chars=1500)
        """
        now = time.time()
        shown = [Episode.coerce(e.episode if isinstance(e, Scored) else e) for e in episodes]
        shown = [e for e in shown if not self._expired_episode(e, now)]
        return render_block(shown, max_chars=max_chars)

    # --- internals ------------------------------------------------------------------------

    def _redact(self, episode: Episode) -> Episode:
        return self._redactor.redact_episode(episode) if self._redactor else episode

    async def _sync(self) -> None:
        await self._log.sync(self._apply)

    def _apply(self, changes: Changes) -> None:
        if changes.reset:
            self._index.reset()
            self._retention.clear()
            self._ids.clear()
            self._id_of.clear()
        for seq in changes.removed:
            self._index.remove(seq)
            self._retention.pop(seq, None)
            gone = self._id_of.pop(seq, None)
            if gone is not None and self._ids.get(gone) == seq:
                del self._ids[gone]
        for seq, episode in changes.added:
            self._index.add(seq, episode)
            self._ids[episode.id] = seq
            self._id_of[seq] = episode.id
            self._retention[seq] = (
                _time_or_none(episode.forget_after),
                _time_or_none(episode.timestamp),
            )

    def _expired(self, seq: int, now: float) -> bool:
        forget_at, recorded = self._retention.get(seq, (None, None))
        return self._past(forget_at, recorded, now)

    def _expired_episode(self, episode: Episode, now: float) -> bool:
        return self._past(
            _time_or_none(episode.forget_after), _time_or_none(episode.timestamp), now
        )

    def _past(self, forget_at: float | None, recorded: float | None, now: float) -> bool:
        """The retention rule, the one place it is stated: past ``forget_after``, or older
        than ``max_age``."""
        if forget_at is not None and forget_at <= now:
            return True
        return (
            self._max_age is not None
            and recorded is not None
            and recorded < now - self._max_age.total_seconds()
        )


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


def _text_of(episode: Episode) -> str:
    parts = [episode.query, episode.response, episode.reflection or ""]
    return "\n".join(parts + episode.tags + episode.tools_used)


def _time_or_none(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def _outcomes(outcome: str | Collection[str] | None) -> set[str] | None:
    if outcome is None:
        return None
    chosen = {outcome} if isinstance(outcome, str) else set(outcome)
    bad = chosen - set(OUTCOMES)
    if bad:
        raise ConfigurationError(f"unknown outcome {sorted(bad)}; expected one of {OUTCOMES}")
    return chosen


def _since(value: TimeLike) -> float:
    if isinstance(value, timedelta):
        return time.time() - value.total_seconds()
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ConfigurationError("since: a naive datetime is ambiguous; give it a tzinfo")
        return value.timestamp()
    if isinstance(value, int | float):
        return float(value)
    try:
        return parse_time(value)
    except ValueError as exc:
        raise ConfigurationError(f"since: {exc}") from None
