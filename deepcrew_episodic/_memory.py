"""``EpisodicMemory``: record past runs, recall the relevant ones, render them for a prompt."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import timedelta, tzinfo
from typing import Any

from ._embed import DEFAULT_EMBED_FIELDS, SIMILARITY_FLOOR, Embedder
from ._episode import Episode, Outcome
from ._grade import Grade
from ._grading import Grading
from ._held import HeldLog
from ._history import History
from ._listing import Page
from ._log import Counters, EpisodeLog, list_namespaces
from ._options import Options
from ._query import Searcher
from ._recall import DEFAULT_FIELDS, HALF_LIFE_DAYS, MIN_RELEVANCE, Ranking, RecallIndex, Scored
from ._redact import Redactor
from ._render import fit_recalled
from ._restore import Restorer
from ._retention import Retention
from ._semantic import embed_log, semantic_part
from ._shown import Shown
from ._stats import MemoryStats, count_stats
from ._store_reads import StoreReads
from ._telemetry import Telemetry, traced, tracing
from ._time import TimeLike, TimeReader
from ._write import Writer
from .providers._base import MemoryProvider, as_provider

__all__ = ["EpisodicMemory", "MemoryStats"]


class EpisodicMemory:
    """A durable ring buffer of :class:`Episode` records with relevance + recency recall.

    Parameters
    ----------
    backend:
        Any :class:`~deepcrew_episodic.providers.MemoryProvider`, or any object with
        deepcrew-ai's four provider methods (``store``, ``retrieve``, ``search``, ``clear``).
    namespace:
        Isolates one log from another in a shared backend: 1 to 256 characters, no control or
        invisible ones (``"tenant/42"``); deepcrew-ai's logs are read in place.
    max_episodes:
        Ring-buffer capacity: the newest ``max_episodes`` are kept.
    recall_k:
        How many episodes :meth:`recall` returns by default.
    reflect_model, reflect_timeout, reflect_params:
        A litellm model that writes each recorded episode a one-sentence lesson (one call per
        record; a failure is logged and counted, never fatal), the seconds to wait for it, and
        extra ``litellm.acompletion`` arguments (``api_base``, ``api_key``, ...).
    recall_fields:
        The fields recall matches: any of ``query``, ``tags``, ``reflection``, ``response``,
        ``tools_used``.
    max_age:
        Retention: older episodes are never returned and :meth:`sweep` deletes them; ``None``
        keeps them until the ring buffer drops them.
    half_life_days:
        Age at which an episode's recency tie-break halves.
    redact:
        Secrets (API keys, tokens, passwords in URLs, private keys) in any text field become
        ``[REDACTED:<kind>]`` before it is stored or sent to ``reflect_model``: ``True`` (default)
        by the built-in rules, ``False`` never, a :class:`~deepcrew_episodic.Redactor` by its own.
    clock:
        The time in POSIX seconds, for timestamps, retention and recency (default
        ``time.time``): tests pass one they can move instead of sleeping.
    embedder:
        Recall by meaning as well as by keywords (docs/recall.md): an
        :class:`~deepcrew_episodic.Embedder` (such as :class:`~deepcrew_episodic.LiteLLMEmbedder`)
        or a callable from a list of texts to one vector per text (a sync one runs in a worker
        thread); needs ``pip install 'deepcrew-episodic[embeddings]'``. ``None`` (default):
        keywords only, and numpy is never imported.
    embed_fields, embed_timeout:
        The fields embedded (default query, reflection and tags: the response drowns the task's
        signal), and the seconds to wait for one call (a record or a recall goes on without).
    similarity_floor, min_similarity:
        How far an episode's cosine similarity to the query must rise above what the query
        reaches with unrelated everyday text (same model) to mean the same (0.05, calibrated on
        all-MiniLM-L6-v2; higher: fewer, surer episodes), and an absolute floor on top of it.
    min_relevance:
        Less relevant episodes are not returned (one word shared with a long question is not
        relevance). Relevance is from 0 to 1: the keyword part or, with an embedder, ``keyword
        + meaning * (1 - keyword)``; the default is calibrated on the probe sets (docs/recall.md),
        ``0`` returns all that share a term or a meaning. :meth:`recall` and :meth:`explain`
        can override it; :meth:`explain` lists what fell under it.
    reinforce:
        Rank an episode used in runs a little higher (at most +20%, growing with the log of its
        uses; see :meth:`used`). ``False`` ranks as if nothing was ever used.
    telemetry:
        OpenTelemetry spans for record, recall, grade, forget and the other writes, on the GenAI
        memory conventions (docs/telemetry.md): ``True`` on the global tracer provider, a
        :class:`~deepcrew_episodic.Telemetry` to choose it or opt in to content; needs ``pip
        install 'deepcrew-episodic[otel]'``. ``False`` (default): opentelemetry never imported.
    tz:
        The time zone of dates, phrases and offset-less ISO times in every ``since``, ``until``
        and ``before``: an IANA name (``"Europe/Paris"``) or a ``tzinfo``; default UTC.

    Example::

        memory = EpisodicMemory(FileMemoryProvider("episodes.json"), namespace="support")
        await memory.record(Episode(query="Refund order 1182", response="Refunded",
                                    outcome="success", tags=["billing"]))
        system_block = memory.render(await memory.recall("how do I refund an order?"))
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
        clock: Callable[[], float] = time.time,
        embedder: Embedder | Callable[..., Any] | None = None,
        embed_fields: Sequence[str] = DEFAULT_EMBED_FIELDS,
        similarity_floor: float = SIMILARITY_FLOOR,
        min_similarity: float | None = None,
        min_relevance: float = MIN_RELEVANCE,
        embed_timeout: float = 10.0,
        reinforce: bool = True,
        telemetry: bool | Telemetry = False,
        tz: str | tzinfo | None = None,
    ) -> None:
        self._log = episodes = EpisodeLog(as_provider(backend), namespace, max_episodes)
        self._options = options = Options.checked(
            recall_k=recall_k,
            reflect_model=reflect_model,
            reflect_timeout=reflect_timeout,
            reflect_params=reflect_params,
            recall_fields=recall_fields,
            max_age=max_age,
            half_life_days=half_life_days,
            redact=redact,
            clock=clock,
            embedder=embedder,
            embed_fields=embed_fields,
            similarity_floor=similarity_floor,
            min_similarity=min_similarity,
            min_relevance=min_relevance,
            embed_timeout=embed_timeout,
            reinforce=reinforce,
            tz=tz,
        )
        self._times = times = TimeReader(options.tz, clock)
        # The log as this process holds it (read whole only when the store keeps no index).
        self._held = held = HeldLog(episodes, RecallIndex(options.recall_fields), clock)
        self._retention = retention = Retention(episodes, held, options, times.read)
        # Reads from the index the store keeps, for a provider that keeps one.
        self._store = store = StoreReads(episodes, held.index, options, retention.past)
        self._semantic = semantic = semantic_part(episodes, options, held, store)
        self._grading = Grading(episodes, held, retention, options)
        self._writer = Writer(episodes, semantic, store, held, options)
        self._searcher = Searcher(held, store, semantic, retention.expired, times, options)
        self._restorer = Restorer(episodes, held, options, self._writer)
        self._shown = Shown(held, store, retention, options)
        self._telemetry = tracing(telemetry, self.namespace, options.redactor, self.counters)

    @property
    def namespace(self) -> str:
        """The log this memory reads and writes in its backend."""
        return self._log.namespace

    @property
    def max_episodes(self) -> int:
        """The ring size: how many of the newest episodes this memory shows."""
        return self._log.max

    @property
    def recall_k(self) -> int:
        """How many episodes :meth:`recall` returns when no ``top_k`` is given."""
        return self._options.recall_k

    @property
    def tz(self) -> tzinfo | str:
        """The ``tz`` as given (an IANA name or a ``tzinfo``; ``datetime.UTC`` unless set)."""
        return self._times.tz

    @property
    def reflect_model(self) -> str | None:
        """The litellm model that writes each recorded episode's lesson (``None``: none)."""
        return self._options.reflection.model

    @property
    def max_age(self) -> timedelta | None:
        """The retention policy: episodes older than this are hidden and swept."""
        return self._options.max_age

    @property
    def redactor(self) -> Redactor | None:
        """The redactor applied before storing, or ``None`` when redaction is off."""
        return self._options.redactor

    @property
    def backend(self) -> MemoryProvider:
        """The provider (deepcrew-ai providers appear wrapped in an adapter)."""
        return self._log.provider

    @property
    def counters(self) -> Counters:
        """Counts of tolerated failures (see :class:`~deepcrew_episodic.Counters`)."""
        return self._log.counters

    @property
    def embedder(self) -> Embedder | Callable[..., Any] | None:
        """The embedder this memory was given (``None``: keywords only)."""
        return self._options.embedder

    @property
    def embedder_name(self) -> str | None:
        """The embedder's name as this memory records it in the log (read once)."""
        return self._options.embedder_name

    @traced("record")
    async def record(self, episode: Episode | Any) -> Episode:
        """Store a copy of *episode* (an :class:`Episode`, a deepcrew-ai ``Episode`` or a dict)
        and return it: every field checked again, secrets redacted, ``id``, ``timestamp`` and
        (with ``reflect_model``) ``reflection`` filled in, on *episode* too. A wrong field raises
        :class:`InvalidEpisodeError` naming it, writing nothing; an ``id`` is unique in the
        namespace across processes, and one that holds a secret is refused."""
        return await self._writer.record(episode)

    def check(self, episode: Episode | Any) -> Episode:
        """Run :meth:`record`'s checks and return the redacted copy it would store (without the
        ``id`` and ``timestamp`` it fills in), writing nothing: to validate a batch first."""
        return self._writer.check(episode)

    async def reflect(self, episode: Episode) -> str | None:
        """Ask ``reflect_model`` for a one-sentence lesson; ``None`` without a model, when the
        model answers ``NONE``, or when the call fails (logged and counted)."""
        return await self._writer.reflect(episode)

    @traced("clear")
    async def clear(self) -> None:
        """Delete every episode of this namespace (payloads included, deepcrew-ai's log too).
        Other namespaces and unrelated keys are untouched."""
        await self._retention.clear()

    @traced("forget")
    async def forget(
        self,
        ids: str | Collection[str] | None = None,
        *,
        outcome: str | Collection[str] | None = None,
        tags: Collection[str] | None = None,
        before: TimeLike | None = None,
        containing: str | None = None,
        corrupt: bool = False,
        dry_run: bool = False,
    ) -> int:
        """Delete episodes for real (the payload is gone, not hidden); return how many
        (``dry_run=True``: how many would be, deleting nothing; :meth:`select` lists them).

        An episode must match every criterion given: ``ids``, ``outcome`` (one or several),
        ``tags`` (at least one), ``before`` (a time as ``since`` takes; a timedelta: older than
        that), ``containing`` (case-insensitive, in :meth:`searched_text`); expired ones too.
        ``corrupt=True`` deletes the undecodable records every read path skips. With none of
        these, raises :class:`ConfigurationError` (:meth:`clear` deletes all)."""
        return await self._retention.forget(
            ids,
            outcome=outcome,
            tags=tags,
            before=before,
            containing=containing,
            corrupt=corrupt,
            dry_run=dry_run,
        )

    async def select(
        self,
        ids: str | Collection[str] | None = None,
        *,
        outcome: str | Collection[str] | None = None,
        tags: Collection[str] | None = None,
        before: TimeLike | None = None,
        containing: str | None = None,
    ) -> list[Episode]:
        """The episodes :meth:`forget` with the same arguments would delete, oldest first:
        across the whole log, expired ones included (see :meth:`is_expired`). Copies."""
        return await self._retention.selected(
            ids, outcome=outcome, tags=tags, before=before, containing=containing
        )

    def is_expired(self, episode: Episode) -> bool:
        """Whether *episode* is past its ``forget_after`` or older than ``max_age`` now: hidden
        from every read path and deleted by :meth:`sweep`."""
        return self._shown.is_expired(episode)

    async def latest(self, conversation_id: str) -> Episode | None:
        """The newest unexpired episode with this ``conversation_id`` (graded, a copy) or ``None``,
        read from the store: a process handling a chat's turn finds what another recorded."""
        return await self._shown.latest(conversation_id)

    @classmethod
    async def open(cls, backend: MemoryProvider | Any, **options: Any) -> EpisodicMemory:
        """An :class:`EpisodicMemory` at the log's own ring size unless *options* give
        ``max_episodes``: a tool inspecting a log then neither hides nor shrinks anything."""
        memory = cls(backend, **options)
        if "max_episodes" not in options:
            await memory._log.adopt_ring()
        return memory

    @staticmethod
    async def namespaces(backend: MemoryProvider | Any) -> list[str]:
        """The namespaces holding a log in *backend* (this library's and deepcrew-ai's), sorted."""
        return await list_namespaces(as_provider(backend))

    @traced("shrink")
    async def shrink(self, max_episodes: int) -> int:
        """Lower the log's ring size to *max_episodes*, deleting every episode outside it; return
        how many. The only way to shrink a log: a memory with a smaller ``max_episodes`` shows
        fewer but deletes none of them, and a larger one raises the ring again when it records."""
        return await self._retention.shrink(max_episodes)

    @traced("sweep")
    async def sweep(self, *, dry_run: bool = False) -> int:
        """Delete expired episodes and the keys the ring no longer shows; return how many keys
        were deleted (``dry_run=True``: would be, deleting nothing)."""
        return await self._retention.sweep(dry_run=dry_run, tracing=self._telemetry)

    async def refresh(self) -> int:
        """Bring this memory up to date with its store (one round trip when nothing changed); return
        its revision, which changes whenever what it shows (episodes, grades, uses...) changed."""
        return await self._shown.refresh()

    async def stats(self) -> MemoryStats:
        """Counts for this namespace: episodes by outcome, expired and corrupt records not
        shown, the oldest and newest timestamps, and the bytes stored."""
        return await count_stats(
            self._log, self._held, self._retention.expired, self._options.clock, self._semantic
        )

    async def load(self, *, include_expired: bool = False, graded: bool = True) -> list[Episode]:
        """Every episode this memory shows, oldest first, as copies graded (``graded=False``: as
        recorded, for a backup); expired ones only with *include_expired* (never in a prompt)."""
        return await self._shown.load(include_expired=include_expired, graded=graded)

    async def page(self, limit: int = 50, offset: int = 0) -> Page:
        """The newest *limit* episodes after the *offset* newest (newest first, as :meth:`load`
        gives them) and how many there are (:class:`~deepcrew_episodic.Page`); an indexed store
        reads only those."""
        return await self._shown.page(limit, offset)

    async def recall(
        self,
        query: str,
        top_k: int | None = None,
        *,
        intent: str = "any",
        tags: Collection[str] | None = None,
        outcome: str | Collection[str] | None = None,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
        min_relevance: float | None = None,
    ) -> list[Episode]:
        """Up to *top_k* (default ``recall_k``) episodes relevant to *query*, best first.

        An episode sharing no term with *query* is returned only when it means the same (with an
        ``embedder``). ``intent="what_failed"`` ranks failures first among equally relevant
        episodes, ``"what_worked"`` successes. Filters: ``tags`` (at least one), ``outcome`` (one
        or several), ``since`` (recorded at or after) and ``until`` (before): an ISO-8601 date or
        time, a duration or ``timedelta`` meaning that long ago (``"7d"``), a phrase (``"last
        tuesday"``, ``"this week"``), a ``datetime``, a ``date`` or POSIX seconds, read in ``tz``;
        a day (week, month, year) runs from ``since``'s start to ``until``'s end. ``min_relevance``
        overrides the memory's floor (``0``: none). See docs/recall.md."""
        scored = await self.explain(
            query,
            top_k,
            intent=intent,
            tags=tags,
            outcome=outcome,
            since=since,
            until=until,
            min_relevance=min_relevance,
        )
        return [s.episode for s in scored]

    @traced("explain")
    async def explain(
        self,
        query: str,
        top_k: int | None = None,
        *,
        intent: str = "any",
        tags: Collection[str] | None = None,
        outcome: str | Collection[str] | None = None,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
        min_relevance: float | None = None,
    ) -> Ranking:
        """:meth:`recall`, with each episode's score and why (``why()``), how the list was ranked
        (by keywords, hybrid, or keywords because the embedder failed), the relevance floor it
        applied and what that kept out of the top k (:class:`~deepcrew_episodic.Ranking`)."""
        return await self._searcher.explain(
            query,
            top_k,
            intent=intent,
            tags=tags,
            outcome=outcome,
            since=since,
            until=until,
            min_relevance=min_relevance,
        )

    async def history(
        self,
        task: str,
        *,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
        tags: Collection[str] | None = None,
    ) -> History:
        """The past runs of *task*, oldest first, and where their run of successes broke
        (:class:`~deepcrew_episodic.History`): all :meth:`recall` finds with these filters, one
        item per run (its latest iteration); an undated episode takes its place in the log."""
        every = await self._searcher.every_run(task)
        found = await self.explain(task, every, tags=tags, since=since, until=until)
        return self._searcher.history(task, found)

    def render(self, episodes: Sequence[Episode | Scored], *, max_chars: int | None = None) -> str:
        """The ``## Relevant past experience`` block for *episodes* (best first), ``""`` for none:
        a dated line each, stored text neutralised (no heading, fake system section or end of the
        block), expired ones left out, secrets redacted. With *max_chars*, the best items that
        fit whole, in rank order: never longer, never empty when one item fits."""
        return self.fit(episodes, max_chars=max_chars)[0]

    def fit(
        self, episodes: Sequence[Episode | Scored], *, max_chars: int | None = None
    ) -> tuple[str, list[Episode]]:
        """:meth:`render`, and the episodes the block shows (redacted, in the order shown):
        for callers that report exactly what was injected."""
        return fit_recalled(episodes, max_chars, self.redactor, self.is_expired)

    @traced("grade")
    async def grade(
        self,
        episode_id: str,
        *,
        outcome: Outcome | None = None,
        score: float | None = None,
        note: str = "",
        verified: bool | None = None,
        source: str | None = None,
    ) -> Grade:
        """Grade an episode after it was recorded, with the signal that arrives late (a user's
        "that worked", a test run); return the grade, a record of its own that every read path
        applies (docs/recall.md): the best source wins (verifier, user, the agent's claim, a
        model judging), the newest among equals; an agent's ``success`` reads ``claimed_success``.

        Give *outcome*, *score* (in [0, 1]; alone, see :func:`~deepcrew_episodic.outcome_for_score`)
        or both. *source*: ``"verifier"``, ``"user"``, ``"agent"`` or ``"judge"``; without it,
        *verified* says whether the grade was checked (default) or a claim; both must agree.
        Raises :class:`ConfigurationError` for an unknown or expired episode or a wrong value."""
        return await self._grading.grade(
            episode_id, outcome=outcome, score=score, note=note, verified=verified, source=source
        )

    async def grades(self, episode_id: str | None = None) -> list[Grade]:
        """The grades of an episode, oldest first (``[]`` when it has none); without an id,
        every grade of the log, oldest first (one read for a listing of many episodes)."""
        return await self._shown.grades(episode_id)

    async def uses(self) -> dict[str, int]:
        """How many times each episode this memory keeps was used (see :meth:`used`), by id;
        episodes never used are left out. For a backup: :meth:`restore` takes the count."""
        return await self._shown.uses()

    async def restore(
        self,
        episode: Episode | Any,
        *,
        grades: Sequence[Grade | Mapping[str, Any]] = (),
        uses: int = 0,
    ) -> Episode:
        """Record *episode* from a backup with its *grades* (oldest first: :class:`Grade`
        objects or the mappings ``export`` writes) and use count, so that it reads as it did;
        return the stored copy. It is recorded as by :meth:`record` (its ``id`` and
        ``timestamp`` kept; notes redacted too). All is checked first: a wrong grade or count,
        or an id already stored, raises :class:`InvalidEpisodeError` and writes nothing."""
        return await self._restorer.restore(episode, grades, uses, self.record)

    @traced("used")
    async def used(self, ids: str | Collection[str]) -> None:
        """Count one use of each episode (the runner and :class:`EpisodicHook` do, for those they
        inject), kept beside it, for ``reinforce``; ids no longer in the log are ignored."""
        await self._held.count_uses(ids)

    async def backfill(
        self, *, batch_size: int = 64, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """Embed every episode without a usable vector (found by keywords only until then),
        *batch_size* texts a call; return how many vectors were written. *progress* gets
        ``(done, total)`` after each batch. Raises :class:`EmbeddingError` when a call fails (run
        it again to go on), :class:`EmbedderMismatchError` when the log's vectors are another
        embedder's (see :meth:`reembed`), :class:`ConfigurationError` without an embedder."""
        return await embed_log(self._semantic, batch_size, progress, everything=False)

    async def reembed(
        self, *, batch_size: int = 64, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """:meth:`backfill` for every vector, making this embedder the log's (after a change of
        model): readers with the old one ignore the old vectors at once. An interrupted reembed
        leaves the rest without a usable vector, for backfill to finish."""
        return await embed_log(self._semantic, batch_size, progress, everything=True)

    def searched_text(self, episode: Episode) -> str:
        """What ``containing`` looks in for *episode*, as of the last read (no I/O): its text
        fields and grades' notes in ``search_form`` (white space, hidden, Unicode, case folded)."""
        return self._shown.searched_text(episode)

    def recorded_at(self, episode: Episode) -> float | None:
        """The POSIX time ``since``/``until``/``before`` file *episode* under, as of the last read
        (no I/O): its timestamp or, if unusable, the dated episode's before it; else ``None``."""
        return self._shown.recorded_at(episode)
