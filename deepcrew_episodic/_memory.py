"""``EpisodicMemory``: record past runs, recall the relevant ones, render them for a prompt."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import timedelta, tzinfo
from typing import Any

from ._embed import DEFAULT_EMBED_FIELDS, SIMILARITY_FLOOR, Embedder
from ._episode import Episode, Outcome
from ._exceptions import ConfigurationError
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
from ._shown import Shown
from ._stats import MemoryStats, count_stats
from ._store_reads import StoreReads
from ._telemetry import Telemetry, traced, tracing
from ._time import TimeLike, TimeReader
from ._validate import strings
from ._write import Writer
from .providers._base import MemoryProvider, as_provider

__all__ = ["EpisodicMemory", "MemoryStats"]

log = logging.getLogger("deepcrew_episodic")


class EpisodicMemory:
    """A durable ring buffer of :class:`Episode` records with relevance + recency recall.

    Parameters
    ----------
    backend:
        Any :class:`~deepcrew_episodic.providers.MemoryProvider`, or any object with
        deepcrew-ai's four provider methods (``store``, ``retrieve``, ``search``, ``clear``).
    namespace:
        Isolates one log from another in a shared backend. Any text of 1 to 256 characters
        without control or invisible characters (``"support bot"``, ``"tenant/42"``,
        ``"agent:v2"``); deepcrew-ai's logs under such names are read in place.
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
    clock:
        The time in POSIX seconds, for timestamps, retention and recency (default
        ``time.time``). Tests pass a clock they can move instead of sleeping.
    embedder:
        Recall by meaning as well as by keywords (see docs/recall.md): an
        :class:`~deepcrew_episodic.Embedder` (such as
        :class:`~deepcrew_episodic.LiteLLMEmbedder`) or a plain callable taking a list of texts
        and returning one vector per text (a sync one runs in a worker thread). ``None``
        (default): keywords only, and numpy is never imported. Needs
        ``pip install 'deepcrew-episodic[embeddings]'``.
    embed_fields:
        The episode fields whose text is embedded (default: query, reflection and tags; the
        response is left out, it drowns the task's signal).
    similarity_floor:
        How far an episode's cosine similarity to the query must rise above what the query
        reaches with unrelated everyday text, with the same model, to count as meaning the
        same (0.05, calibrated on all-MiniLM-L6-v2; see docs/recall.md). Higher returns fewer,
        surer episodes.
    min_similarity:
        An absolute cosine floor on top of ``similarity_floor`` (``None``: none).
    min_relevance:
        The relevance floor: an episode whose relevance to the query is below it is not
        returned (a single word shared with a long question is not relevance). Relevance is
        the keyword part, or with an embedder the combined ``keyword + meaning * (1 -
        keyword)``, from 0 to 1; the default is calibrated on the probe sets (see
        docs/recall.md). ``0`` returns every episode that shares a term or a meaning; each
        :meth:`recall` and :meth:`explain` can override it, and :meth:`explain` lists what fell
        under it (:attr:`Ranking.under_floor`).
    embed_timeout:
        Seconds to wait for one embedding call (a record or a recall goes on without it).
    reinforce:
        Rank an episode that was used in runs a little higher (at most +20%, growing with the
        log of its uses; see :meth:`used`). ``False`` ranks as if nothing was ever used.
    telemetry:
        OpenTelemetry spans for record, recall, grade, forget and the other writes, on the
        GenAI memory conventions (see docs/telemetry.md): ``True`` on the global tracer
        provider, a :class:`~deepcrew_episodic.Telemetry` to choose the provider or opt in to
        content. ``False`` (default): no span, and opentelemetry is never imported. Needs
        ``pip install 'deepcrew-episodic[otel]'``.
    tz:
        The time zone of the times given without one: dates, phrases ("yesterday", "this
        week") and ISO times without an offset, in every ``since``, ``until`` and ``before``
        (see docs/recall.md#time). An IANA name (``"Europe/Paris"``) or a ``tzinfo``; default
        UTC.

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
        self._provider = as_provider(backend)
        self._log = EpisodeLog(self._provider, namespace, max_episodes)
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
        self._clock = clock
        self._times = TimeReader(options.tz, clock)
        self._redactor = options.redactor
        self._embedder = options.embedding.embedder if options.embedding else None
        self._index = RecallIndex(options.recall_fields)
        # The log as this process holds it (read whole only when the store keeps no index).
        self._held = HeldLog(self._log, self._index, clock)
        self._retention = Retention(self._log, self._held, clock, options.max_age, self._times.read)
        self._grading = Grading(self._log, self._held, self._retention, clock, self._redactor)
        # Reads from the index the store keeps, for a provider that keeps one.
        self._store = StoreReads(
            self._log,
            self._index,
            self._embedder,
            clock,
            options.half_life_days,
            options.reinforce,
            self._retention.past,
        )
        # Recall by meaning: only with an embedder (numpy is imported by it, never otherwise).
        self._semantic: Semantic | None = None
        self._vectors: Any = None  # the semantic part's VectorIndex, with an embedder
        if options.embedding is not None:
            from ._semantic import Semantic

            embedding = options.embedding
            self._semantic = Semantic(
                self._log,
                embedding.embedder,
                embedding.fields,
                self._redactor,
                embedding.timeout,
                self._held.sync,
                embedding.similarity_floor,
                embedding.min_similarity,
            )
            self._vectors = self._semantic.vectors
            self._held.vectors = self._semantic
            self._store.semantic = self._semantic
        self._writer = Writer(
            self._log,
            self._semantic,
            self._store,
            self._held,
            clock,
            self._redactor,
            options.reflection,
        )
        self._searcher = Searcher(
            self._held,
            self._store,
            self._semantic,
            self._retention.expired,
            self._times,
            options,
            clock,
        )
        self._restorer = Restorer(self._log, self._held, clock, self._redactor)
        self._shown = Shown(self._held, self._store, self._retention, options, clock)
        self._telemetry = tracing(
            telemetry, namespace=self.namespace, redactor=self._redactor, counters=self.counters
        )

    # --- properties -------------------------------------------------------------------

    @property
    def namespace(self) -> str:
        return self._log.namespace

    @property
    def max_episodes(self) -> int:
        return self._log.max

    @property
    def recall_k(self) -> int:
        return self._options.recall_k

    @property
    def tz(self) -> tzinfo | str:
        """The time zone of dates and phrases given without one, as given (an IANA name or a
        ``tzinfo``; ``datetime.UTC`` unless set)."""
        return self._times.tz

    @property
    def reflect_model(self) -> str | None:
        return self._options.reflection.model

    @property
    def max_age(self) -> timedelta | None:
        """The retention policy: episodes older than this are hidden and swept."""
        return self._options.max_age

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

    @traced("record")
    async def record(self, episode: Episode | Any) -> Episode:
        """Store a copy of *episode* and return the stored copy (redacted, ``id`` and
        ``timestamp`` filled in, and ``reflection`` when ``reflect_model`` is set). Like
        deepcrew-ai, ``record`` also fills ``id``, ``timestamp`` and ``reflection`` in on
        *episode* itself; unlike it, it returns the stored copy, never the object passed in,
        whose text may hold a secret that was redacted from the store.

        Accepts an :class:`Episode`, a deepcrew-ai ``Episode`` dataclass or a dict. Every field
        is checked again here (a list may have been edited since construction): invalid input
        raises :class:`InvalidEpisodeError` naming the field, and nothing is written. Secrets
        are redacted first (see ``redact``), so neither the store nor the reflection model ever
        sees them; an ``id`` that holds a secret is refused. What is stored is a copy: changing
        *episode* afterwards changes nothing stored. An explicit ``id`` is unique in the
        namespace, across every process.
        """
        return await self._writer.record(episode)

    def check(self, episode: Episode | Any) -> Episode:
        """Run every check :meth:`record` runs on *episode*, and return the redacted copy it
        would store (without the ``id`` and ``timestamp`` it fills in); write nothing. Raises
        :class:`InvalidEpisodeError` naming the field. For tools that validate a whole batch
        before writing any of it.
        """
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
        """Delete episodes from the backend for real (the payload is gone, not hidden); return
        how many were deleted.

        ``corrupt=True`` deletes the records that cannot be decoded (which every read path
        skips and counts), alone or with the episodes selected otherwise. ``dry_run=True``
        deletes nothing and returns how many would be deleted (:meth:`select` lists them).

        Select them by ``ids`` and/or a filter; an episode must match every criterion given:
        ``outcome`` (one or several), ``tags`` (at least one of them), ``before`` (recorded
        before a time: a datetime, an ISO-8601 string, POSIX seconds, or a timedelta meaning
        "older than this"), ``containing`` (case-insensitive text in any text field of the episode or of its grades'
        notes). Expired
        episodes that have not been swept yet are deleted too. :meth:`clear` deletes all.

        Example::

            await memory.forget(["3f2a..."])                        # by id
            await memory.forget(containing="acme corp")             # every mention of a customer
            await memory.forget(outcome="failure", before=timedelta(days=90))
        """
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
        found = await self._retention.select(
            ids=ids, outcome=outcome, tags=tags, before=before, containing=containing
        )
        return [ep.copy() for _, ep in found]

    def is_expired(self, episode: Episode) -> bool:
        """Whether *episode* is past its ``forget_after`` or older than ``max_age`` now: hidden
        from every read path and deleted by :meth:`sweep`."""
        return self._shown.is_expired(episode)

    async def latest(self, conversation_id: str) -> Episode | None:
        """The newest unexpired episode recorded in conversation *conversation_id* (its
        ``conversation_id`` field), as its grades make it; ``None`` when this memory shows
        none (never recorded, forgotten, evicted or expired). Read from the store, so a
        process that handles one turn of a chat finds the run the turn before recorded in
        another. A copy.

        Example::

            previous = await memory.latest("thread-42")
            if previous is not None:
                await memory.grade(previous.id, outcome="success", note="user: that worked")
        """
        return await self._shown.latest(conversation_id)

    @classmethod
    async def open(cls, backend: MemoryProvider | Any, **options: Any) -> EpisodicMemory:
        """An :class:`EpisodicMemory` on an existing log at the log's own ring size: the
        ``max_episodes`` it was written with, unless *options* give one (tools that inspect a
        log use this, so they neither hide nor shrink anything). Same options otherwise.

        Example::

            memory = await EpisodicMemory.open(SQLiteMemoryProvider("episodes.db"),
                                               namespace="support")
        """
        memory = cls(backend, **options)
        if "max_episodes" not in options:
            await memory._log.adopt_ring()
        return memory

    @staticmethod
    async def namespaces(backend: MemoryProvider | Any) -> list[str]:
        """The namespaces that hold a log in *backend* (this library's and deepcrew-ai's),
        sorted.

        Example::

            for namespace in await EpisodicMemory.namespaces(backend):
                print(namespace, (await EpisodicMemory(backend, namespace=namespace).stats()).total)
        """
        return await list_namespaces(as_provider(backend))

    @traced("shrink")
    async def shrink(self, max_episodes: int) -> int:
        """Lower the log's ring size to *max_episodes* and delete every episode outside it;
        return how many were deleted.

        The ring of a log only grows on its own: a memory with a smaller ``max_episodes`` on a
        namespace that a larger one fills shows its newest ``max_episodes`` but never deletes
        what the larger one shows (not by recording, :meth:`forget` or :meth:`sweep`). This is
        the one call that shrinks the log for every memory on it; this memory then keeps
        *max_episodes* (a memory configured larger raises the ring again when it records).
        """
        return await self._retention.shrink(max_episodes)

    @traced("sweep")
    async def sweep(self, *, dry_run: bool = False) -> int:
        """Delete expired episodes (``forget_after`` passed, or older than ``max_age``) and
        keys the ring no longer shows; return how many keys were deleted. ``dry_run=True``
        deletes nothing and returns how many keys would be deleted."""
        return await self._retention.sweep(
            dry_run=dry_run, count=None if self._telemetry is None else self._telemetry.count
        )

    # --- reading --------------------------------------------------------------------------

    async def refresh(self) -> int:
        """Bring this memory up to date with its store (one round trip when nothing changed,
        only what is new otherwise) and return its revision: a number that changes whenever
        what the memory shows changed (episodes, grades, uses, vectors). For a viewer or a
        cache that wants to redo its work only when the log changed."""
        await self._held.sync()
        return self._held.revision

    async def stats(self) -> MemoryStats:
        """Counts for this namespace: episodes by outcome, expired and corrupt records not
        shown, the oldest and newest timestamps, and the bytes stored."""
        await self._held.sync()
        return await count_stats(
            self._log, self._held, self._retention.expired, self._clock(), self._vectors
        )

    async def load(self, *, include_expired: bool = False, graded: bool = True) -> list[Episode]:
        """Every stored episode this memory shows, oldest first; expired ones only with
        *include_expired* (for inspection: no read path that feeds a prompt shows them). With
        *graded* (the default) each reads as its grades make it (see :meth:`grade`);
        ``graded=False`` gives the episodes as they were recorded (for a backup that keeps the
        grades beside them). The episodes are copies: changing them changes nothing stored."""
        return await self._shown.load(include_expired=include_expired, graded=graded)

    async def page(self, limit: int = 50, offset: int = 0) -> Page:
        """The newest *limit* episodes this memory shows after skipping the *offset* newest,
        newest first, as :meth:`load` gives them (unexpired, graded; copies), and how many it
        shows in all (:class:`~deepcrew_episodic.Page`). On a store that keeps the recall index
        it reads only those episodes, so a listing's first page costs what a page costs.

        Example::

            first = await memory.page(20)
            second = await memory.page(20, offset=20)
        """
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

        Episodes that share no term with *query* are never returned, unless the memory has
        an ``embedder`` and an episode means the same as *query* (see docs/recall.md). ``intent="what_failed"``
        ranks failures first among equally relevant episodes, ``"what_worked"`` successes.
        ``tags`` keeps episodes with at least one of the tags, ``outcome`` those with that
        outcome (or one of them), ``since`` those recorded at or after a time and ``until``
        those recorded before one: an ISO-8601 date or time, a duration or ``timedelta``
        meaning that long ago (``"7d"``), a phrase (``"yesterday"``, ``"last tuesday"``,
        ``"this week"``), a ``datetime``, a ``date`` or POSIX seconds, read in the memory's
        ``tz``. A date or a phrase naming a day (or a week, month, year) covers all of it:
        ``since`` takes its first instant, ``until`` its end, so
        ``since="yesterday", until="yesterday"`` is yesterday (see docs/recall.md#time).
        ``min_relevance`` overrides the memory's relevance floor for this call (``0``: none).
        """
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
        """Like :meth:`recall`, with each episode's score and why (matched terms, the keyword
        and meaning parts, recency, outcome weight). The list also says how it was ranked
        (:class:`~deepcrew_episodic.Ranking`: by keywords, hybrid, or keywords because the
        embedder failed), the relevance floor it applied, and the episodes that would have
        been in the top k without it (``under_floor``).

        Example::

            for hit in await memory.explain("refund a duplicate charge", intent="what_failed"):
                print(f"{hit.score:.3f} {hit.episode.query!r}: {hit.why()}")
        """
        checked = await self._searcher.query(
            query,
            top_k,
            intent=intent,
            tags=tags,
            outcome=outcome,
            since=since,
            until=until,
            min_relevance=min_relevance,
        )
        return await self._searcher.explain(checked)

    async def history(
        self,
        task: str,
        *,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
        tags: Collection[str] | None = None,
    ) -> History:
        """The past runs of *task* over time, oldest first, and where the run of successes
        broke: "when did this start failing?" (see :class:`~deepcrew_episodic.History`).

        The runs are those :meth:`recall` finds for *task* (the same ranking, relevance floor
        and filters, with no limit on their number), so history agrees with what an agent
        given *task* is shown: one item per run (its latest iteration), each read with its
        grades; expired and abandoned runs are left out, as recall leaves them. An episode
        without a usable timestamp takes its place in the log (the time of the dated episode
        recorded before it). ``since``, ``until`` and ``tags`` are recall's.

        Example::

            history = await memory.history("deploy to staging", since="this month")
            for item in history:
                print(item.episode.timestamp, item.episode.outcome)
            if history.broke is not None:
                print("failing since", history.broke.episode.timestamp)
        """
        if not isinstance(task, str):
            raise ConfigurationError(f"task must be a string, not {type(task).__name__}")
        await self._held.sync()
        everything = max(1, self._log.max, len(self._held.known))  # recall with no limit
        found = await self.explain(task, everything, tags=tags, since=since, until=until)
        return History(self._held.by_time(found), task=task)

    def render(self, episodes: Sequence[Episode | Scored], *, max_chars: int | None = None) -> str:
        """The ``## Relevant past experience`` block for *episodes* (best first, as
        :meth:`recall` or :meth:`explain` return them), ``""`` for none.

        Each item is one dated line (outcome, score, tools, the question and the lesson, or
        the answer when there is no lesson); stored text is neutralised so that it cannot
        open a heading, fake a system section or end the block. With *max_chars*, items are
        taken best first and one that does not fit in what is left is skipped whole, so the
        block holds the best items that fit, in rank order; it never exceeds *max_chars* and
        is never empty when one item fits. Expired episodes are never shown.

        Secrets are redacted here too (with this memory's redactor): an episode stored by
        deepcrew-ai, or by a memory with ``redact=False``, may hold one.

        Example::

            block = memory.render(await memory.recall(task), max_chars=1500)
        """
        return self.fit(episodes, max_chars=max_chars)[0]

    def fit(
        self, episodes: Sequence[Episode | Scored], *, max_chars: int | None = None
    ) -> tuple[str, list[Episode]]:
        """:meth:`render`, and the episodes the block shows (redacted, in the order shown):
        for callers that report exactly what was injected."""
        return fit_recalled(
            episodes, max_chars=max_chars, redactor=self._redactor, expired=self.is_expired
        )

    # --- outcomes learnt later, and uses -----------------------------------------------------

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
        """Grade an episode after it was recorded: the signal that arrives late ("thanks, that
        worked" / "still broken", a test run). The grade is a record of its own; the episode
        is never rewritten. Every read path applies the grades: the outcome from the best
        source wins (a verifier, then the user, then the agent's claim, then a model judging),
        the newest among equals; a verified outcome beats a claimed one, and a ``success``
        claimed by the agent reads ``claimed_success`` (see ``docs/recall.md``).

        Give *outcome*, *score* (in [0, 1]; without an outcome it stands for one, see
        :func:`~deepcrew_episodic.outcome_for_score`) or both. *source* says where the grade
        came from: ``"verifier"`` (a test, an exit code), ``"user"``, ``"agent"`` (a claim)
        or ``"judge"`` (a model judging the run). Without it, *verified* says whether the
        grade was checked (the default) or is the agent's claim (``verified=False``); given
        both, they must agree. Raises :class:`ConfigurationError` when no episode has
        *episode_id*, when it has expired, or on a wrong value.

        Example::

            result = await run_agent(agent, "Why is the export slow?")
            ...  # the user's next message: "that fixed it, thanks"
            await memory.grade(result.recorded_ids[-1], outcome="success", note="user confirmed")
        """
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
        objects, or the mappings ``export`` writes) and its use count, so that it reads as it
        did when it was backed up; return the stored copy. The episode is recorded like
        :meth:`record` does (checked, redacted, its ``id`` and ``timestamp`` kept); each grade
        keeps its outcome, score, note (redacted), verified flag and time. Everything is
        checked before anything is written: a wrong grade or count raises
        :class:`InvalidEpisodeError` naming it, and an id already stored raises too (a backup
        restored twice neither duplicates nor overwrites anything).

        Example::

            for line in backup:                      # export's JSONL, one episode a line
                item = json.loads(line)
                await memory.restore({k: v for k, v in item.items() if k not in ("grades", "uses")},
                                     grades=item.get("grades", []), uses=item.get("uses", 0))
        """
        self.check(episode)
        kept = self._restorer.check(grades, uses)
        stored = await self.record(episode)
        await self._restorer.restore(stored, kept, uses)
        return stored

    @traced("used")
    async def used(self, ids: str | Collection[str]) -> None:
        """Count one use of each episode (the runner and :class:`EpisodicHook` call it with
        the episodes they injected into a run). With ``reinforce`` (the default), an episode
        that was used ranks a little higher: at most 20% more. The count is kept beside the
        episode, which is never rewritten; ids no longer in the log are ignored."""
        await self._held.count_uses(set(strings("ids", ids, one=True)))

    # --- recall by meaning -----------------------------------------------------------------

    @property
    def embedder(self) -> Embedder | Callable[..., Any] | None:
        """The embedder this memory was given (``None``: keywords only)."""
        return getattr(self._embedder, "original", self._embedder)

    @property
    def embedder_name(self) -> str | None:
        """The embedder's name as this memory records it in the log (read once)."""
        return None if self._embedder is None else self._embedder.name

    async def backfill(
        self, *, batch_size: int = 64, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """Embed every episode the log keeps that has no usable vector (recorded before the
        embedder was set, by deepcrew-ai, or while the embedder failed), *batch_size* texts per
        call; return how many vectors were written. Until then such episodes are found by
        keywords only. *progress* is called with ``(done, total)`` after each batch.

        Raises :class:`EmbeddingError` when a call fails (the vectors of the batches before it
        are kept: run it again to go on) and :class:`EmbedderMismatchError` when the log's
        vectors are another embedder's (:meth:`reembed` replaces them).
        """
        return await self._embed_log(batch_size, progress, everything=False)

    async def reembed(
        self, *, batch_size: int = 64, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """Rebuild every vector of the log with this memory's embedder and record it as the
        log's embedder (after a change of model); return how many vectors were written.

        Readers with the old embedder stop using the old vectors at once (they are ignored,
        not mixed). Interrupted, it leaves the episodes not yet done without a usable vector:
        :meth:`backfill` finishes the work.
        """
        return await self._embed_log(batch_size, progress, everything=True)

    async def _embed_log(
        self, batch_size: int, progress: Callable[[int, int], None] | None, *, everything: bool
    ) -> int:
        if self._semantic is None:
            raise ConfigurationError("this memory has no embedder: pass embedder= to build one")
        return await self._semantic.embed_log(batch_size, progress, everything=everything)

    async def _query_vector(self, query: str) -> tuple[Any, str | None]:
        assert self._semantic is not None  # (a memory without an embedder has no query vector)
        return await self._semantic.query_vector(query)

    # --- the rules a tool filters a listing by (no I/O) -------------------------------------

    def searched_text(self, episode: Episode) -> str:
        """What ``containing`` looks in for *episode* (:meth:`forget`, :meth:`select`), in its
        search form (``search_form``: white space, hidden characters, Unicode forms and case
        folded): every text field of the episode and its grades' notes, as of the last read.
        No I/O: for a tool that filters a listing by the same rule (the viewer's search)."""
        return self._shown.searched_text(episode)

    def recorded_at(self, episode: Episode) -> float | None:
        """The time, as POSIX seconds, that every ``since``/``until``/``before`` of this memory
        files *episode* under: its timestamp or, for one that cannot be used (garbled, or in
        the future), the time of the dated episode recorded before it in the log. ``None``
        when no time is known (an episode this memory has not read, or one with no dated
        episode before it). No I/O, as of the last read: for a tool that filters a listing
        by time as :meth:`recall` does (the command line's and the viewer's timeline)."""
        return self._shown.recorded_at(episode)
