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
        Isolates one log from another in a shared backend: any text of 1 to 256 characters
        without control or invisible characters (``"support bot"``, ``"tenant/42"``,
        ``"agent:v2"``); deepcrew-ai's logs under such names are read in place.
    max_episodes:
        Ring-buffer capacity: the newest ``max_episodes`` are kept.
    recall_k:
        How many episodes :meth:`recall` returns by default.
    reflect_model:
        A litellm model name: each recorded episode then gets a one-sentence lesson (one model
        call per record; a failed call is logged and counted, never fatal).
    reflect_timeout:
        Seconds to wait for the reflection call.
    reflect_params:
        Extra keyword arguments for ``litellm.acompletion`` (``api_base``, ``api_key``, ...).
    recall_fields:
        Episode fields recall matches: any of ``query``, ``tags``, ``reflection``,
        ``response``, ``tools_used``.
    max_age:
        Retention: older episodes are never returned and :meth:`sweep` deletes them. ``None``
        keeps them until the ring buffer drops them.
    half_life_days:
        Age at which an episode's recency tie-break halves.
    redact:
        Secrets (API keys, tokens, passwords in URLs, private keys) in every text field become
        ``[REDACTED:<kind>]`` before an episode is stored or sent to ``reflect_model``.
        ``True`` (default): the built-in rules; ``False``: no redaction; a
        :class:`~deepcrew_episodic.Redactor` adds or replaces rules.
    clock:
        The time in POSIX seconds, for timestamps, retention and recency (default
        ``time.time``): tests pass a clock they can move instead of sleeping.
    embedder:
        Recall by meaning as well as by keywords (docs/recall.md): an
        :class:`~deepcrew_episodic.Embedder` (such as
        :class:`~deepcrew_episodic.LiteLLMEmbedder`) or a callable taking a list of texts and
        returning one vector per text (a sync one runs in a worker thread); needs ``pip install
        'deepcrew-episodic[embeddings]'``. ``None`` (default): keywords only, numpy never
        imported.
    embed_fields:
        The fields whose text is embedded (default query, reflection and tags; the response is
        left out, it drowns the task's signal).
    similarity_floor:
        How far an episode's cosine similarity to the query must rise above what the query
        reaches with unrelated everyday text (same model) to count as meaning the same (0.05,
        calibrated on all-MiniLM-L6-v2; docs/recall.md). Higher: fewer, surer episodes.
    min_similarity:
        An absolute cosine floor on top of ``similarity_floor`` (``None``: none).
    min_relevance:
        Episodes less relevant to the query than this are not returned (one word shared with a
        long question is not relevance). Relevance, from 0 to 1, is the keyword part, or with an
        embedder ``keyword + meaning * (1 - keyword)``; the default is calibrated on the probe
        sets (docs/recall.md). ``0`` returns every episode sharing a term or a meaning.
        :meth:`recall` and :meth:`explain` can override it; :meth:`explain` lists what fell
        under it (:attr:`Ranking.under_floor`).
    embed_timeout:
        Seconds to wait for one embedding call (a record or a recall goes on without it).
    reinforce:
        Rank an episode used in runs a little higher (at most +20%, growing with the log of its
        uses; see :meth:`used`). ``False`` ranks as if nothing was ever used.
    telemetry:
        OpenTelemetry spans for record, recall, grade, forget and the other writes, on the
        GenAI memory conventions (docs/telemetry.md): ``True`` on the global tracer provider, a
        :class:`~deepcrew_episodic.Telemetry` to choose the provider or opt in to content;
        needs ``pip install 'deepcrew-episodic[otel]'``. ``False`` (default): no span,
        opentelemetry never imported.
    tz:
        The time zone of times given without one (dates, phrases such as ``"yesterday"``, ISO
        times without an offset) in every ``since``, ``until`` and ``before``
        (docs/recall.md#time): an IANA name (``"Europe/Paris"``) or a ``tzinfo``; default UTC.

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
        self._log = episodes = EpisodeLog(self._provider, namespace, max_episodes)
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
        # Recall by meaning: only with an embedder (numpy is imported by it, never otherwise).
        self._semantic = semantic = semantic_part(episodes, options, held, store)
        self._grading = Grading(episodes, held, retention, options)
        self._writer = Writer(episodes, semantic, store, held, options)
        self._searcher = Searcher(held, store, semantic, retention.expired, times, options)
        self._restorer = Restorer(episodes, held, options)
        self._shown = Shown(held, store, retention, options)
        self._telemetry = tracing(
            telemetry, namespace=self.namespace, redactor=options.redactor, counters=self.counters
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
        return self._options.redactor

    @property
    def backend(self) -> MemoryProvider:
        """The provider (deepcrew-ai providers appear wrapped in an adapter)."""
        return self._provider

    @property
    def counters(self) -> Counters:
        """Counts of tolerated failures: corrupt records skipped, indexes rebuilt, reflection
        calls failed, recalls failed during a run."""
        return self._log.counters

    @property
    def embedder(self) -> Embedder | Callable[..., Any] | None:
        """The embedder this memory was given (``None``: keywords only)."""
        return self._options.embedder

    @property
    def embedder_name(self) -> str | None:
        """The embedder's name as this memory records it in the log (read once)."""
        return self._options.embedder_name

    # --- writing ------------------------------------------------------------------------

    @traced("record")
    async def record(self, episode: Episode | Any) -> Episode:
        """Store a copy of *episode* (an :class:`Episode`, a deepcrew-ai ``Episode`` or a dict)
        and return the stored copy: redacted, with ``id``, ``timestamp`` and (with
        ``reflect_model``) ``reflection`` filled in. Like deepcrew-ai, it fills those in on
        *episode* too, but returns the stored copy, never *episode*, whose text may hold a
        secret redacted from the store; changing *episode* afterwards changes nothing stored.

        Every field is checked again (a list may have been edited since construction): a wrong
        one raises :class:`InvalidEpisodeError` naming it, and nothing is written. Secrets are
        redacted first (``redact``), so neither the store nor the reflection model sees them;
        an ``id`` that holds one is refused. An explicit ``id`` is unique in the namespace,
        across every process.
        """
        return await self._writer.record(episode)

    def check(self, episode: Episode | Any) -> Episode:
        """Run :meth:`record`'s checks on *episode* and return the redacted copy it would store
        (without the ``id`` and ``timestamp`` it fills in); write nothing. Raises
        :class:`InvalidEpisodeError` naming the field. For validating a batch before writing."""
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
        """Delete episodes for real (the payload is gone, not hidden); return how many.

        An episode must match every criterion given: ``ids``, ``outcome`` (one or several),
        ``tags`` (at least one), ``before`` (recorded before a time, as :meth:`recall`'s
        ``since`` reads it; a timedelta means "older than this"), ``containing``
        (case-insensitive text in any text field or grade note, see :meth:`searched_text`).
        Expired episodes not swept yet are deleted too. ``corrupt=True`` deletes the records
        that cannot be decoded (every read path skips and counts them), alone or with the
        others. ``dry_run=True`` deletes nothing and returns how many would be deleted
        (:meth:`select` lists them). Without ``ids``, a filter or ``corrupt``, raises
        :class:`ConfigurationError` (:meth:`clear` deletes all).

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
        return await self._retention.selected(
            ids, outcome=outcome, tags=tags, before=before, containing=containing
        )

    def is_expired(self, episode: Episode) -> bool:
        """Whether *episode* is past its ``forget_after`` or older than ``max_age`` now: hidden
        from every read path and deleted by :meth:`sweep`."""
        return self._shown.is_expired(episode)

    async def latest(self, conversation_id: str) -> Episode | None:
        """The newest unexpired episode recorded with this ``conversation_id``, as its grades
        make it (a copy); ``None`` when this memory shows none. Read from the store, so the
        process handling one turn of a chat finds what another recorded the turn before.

        Example::

            previous = await memory.latest("thread-42")
            if previous is not None:
                await memory.grade(previous.id, outcome="success", note="user: that worked")
        """
        return await self._shown.latest(conversation_id)

    @classmethod
    async def open(cls, backend: MemoryProvider | Any, **options: Any) -> EpisodicMemory:
        """An :class:`EpisodicMemory` on an existing log at the log's own ring size (the
        ``max_episodes`` it was written with, unless *options* give one), so that a tool
        inspecting the log neither hides nor shrinks anything. Same options otherwise.

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

        A ring only grows on its own: a memory with a smaller ``max_episodes`` on a log a larger
        one fills shows its newest ``max_episodes`` but never deletes what the larger one shows
        (not by recording, :meth:`forget` or :meth:`sweep`). This is the one call that shrinks
        the log for every memory on it; a memory configured larger raises the ring again when
        it records.
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
        """Bring this memory up to date with its store (one round trip when nothing changed)
        and return its revision, a number that changes whenever what it shows changed
        (episodes, grades, uses, vectors): for a viewer or cache to redo work only then."""
        return await self._shown.refresh()

    async def stats(self) -> MemoryStats:
        """Counts for this namespace: episodes by outcome, expired and corrupt records not
        shown, the oldest and newest timestamps, and the bytes stored."""
        return await count_stats(
            self._log, self._held, self._retention.expired, self._options.clock, self._semantic
        )

    async def load(self, *, include_expired: bool = False, graded: bool = True) -> list[Episode]:
        """Every stored episode this memory shows, oldest first, as copies; expired ones only
        with *include_expired* (for inspection: no read path that feeds a prompt shows them).
        Each reads as its grades make it (see :meth:`grade`); ``graded=False`` gives them as
        recorded (for a backup that keeps the grades beside them)."""
        return await self._shown.load(include_expired=include_expired, graded=graded)

    async def page(self, limit: int = 50, offset: int = 0) -> Page:
        """The newest *limit* episodes after skipping the *offset* newest, newest first, as
        :meth:`load` gives them, and how many this memory shows in all
        (:class:`~deepcrew_episodic.Page`). On a store that keeps the recall index only those
        episodes are read, so a listing's first page costs what a page costs.

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

        An episode that shares no term with *query* is returned only when the memory has an
        ``embedder`` and the episode means the same (docs/recall.md). ``intent="what_failed"``
        ranks failures first among equally relevant episodes, ``"what_worked"`` successes.
        ``tags`` keeps episodes with at least one of the tags, ``outcome`` those with that
        outcome (or one of them), ``since`` those recorded at or after a time and ``until``
        those recorded before one: an ISO-8601 date or time, a duration or ``timedelta``
        meaning that long ago (``"7d"``), a phrase (``"yesterday"``, ``"last tuesday"``,
        ``"this week"``), a ``datetime``, a ``date`` or POSIX seconds, read in the memory's
        ``tz``. A date or phrase naming a day (week, month, year) covers all of it: ``since``
        takes its first instant, ``until`` its end, so ``since="yesterday", until="yesterday"``
        is yesterday (docs/recall.md#time). ``min_relevance`` overrides the memory's relevance
        floor for this call (``0``: none).
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
        """:meth:`recall` with each episode's score and why (matched terms, the keyword and
        meaning parts, recency, outcome weight), and how the list was ranked
        (:class:`~deepcrew_episodic.Ranking`: by keywords, hybrid, or keywords because the
        embedder failed), the relevance floor applied and what it kept out of the top k
        (``under_floor``).

        Example::

            for hit in await memory.explain("refund a duplicate charge", intent="what_failed"):
                print(f"{hit.score:.3f} {hit.episode.query!r}: {hit.why()}")
        """
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
        """The past runs of *task*, oldest first, and where the run of successes broke: "when
        did this start failing?" (see :class:`~deepcrew_episodic.History`).

        The runs are those :meth:`recall` finds for *task* with these filters (the same
        ranking and floor, no limit on their number), so history agrees with what an agent
        given *task* is shown: one item per run (its latest iteration, with its grades),
        expired and abandoned runs left out. An episode without a usable timestamp takes its
        place in the log (the time of the dated episode recorded before it).

        Example::

            history = await memory.history("deploy to staging", since="this month")
            for item in history:
                print(item.episode.timestamp, item.episode.outcome)
            if history.broke is not None:
                print("failing since", history.broke.episode.timestamp)
        """
        every = await self._searcher.every_run(task)
        found = await self.explain(task, every, tags=tags, since=since, until=until)
        return self._searcher.history(task, found)

    def render(self, episodes: Sequence[Episode | Scored], *, max_chars: int | None = None) -> str:
        """The ``## Relevant past experience`` block for *episodes* (best first, as
        :meth:`recall` or :meth:`explain` return them), ``""`` for none.

        One dated line per item (outcome, score, tools, the question and the lesson, or the
        answer without a lesson); stored text is neutralised so that it cannot open a heading,
        fake a system section or end the block. With *max_chars*, items are taken best first
        and one that does not fit what is left is skipped whole: the block never exceeds
        *max_chars* and is never empty when one item fits. Expired episodes are never shown.
        Secrets are redacted here too: an episode stored by deepcrew-ai, or by a memory with
        ``redact=False``, may hold one.

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
            episodes, max_chars=max_chars, redactor=self.redactor, expired=self.is_expired
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
        """Grade an episode after it was recorded, with the signal that arrives late ("thanks,
        that worked" / "still broken", a test run); return the grade. It is a record of its
        own (the episode is never rewritten) that every read path applies: the outcome from the
        best source wins (a verifier, then the user, then the agent's claim, then a model
        judging), the newest among equals; a verified outcome beats a claimed one, and a
        ``success`` the agent claimed reads ``claimed_success`` (see ``docs/recall.md``).

        Give *outcome*, *score* (in [0, 1]; alone it stands for an outcome, see
        :func:`~deepcrew_episodic.outcome_for_score`) or both. *source*: ``"verifier"`` (a
        test, an exit code), ``"user"``, ``"agent"`` (a claim) or ``"judge"`` (a model judging
        the run). Without it, *verified* says whether the grade was checked (the default) or is
        the agent's claim; given both, they must agree. Raises :class:`ConfigurationError` when
        no episode has *episode_id*, when it has expired, or on a wrong value.

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
        objects or the mappings ``export`` writes) and its use count, so that it reads as it
        did when backed up; return the stored copy. It is recorded as :meth:`record` does
        (checked, redacted, its ``id`` and ``timestamp`` kept); each grade keeps its outcome,
        score, note (redacted), verified flag and time. All is checked before anything is
        written: a wrong grade or count raises :class:`InvalidEpisodeError` naming it, and so
        does an id already stored (a backup restored twice neither duplicates nor overwrites).

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
        those they injected into a run); ids no longer in the log are ignored. With
        ``reinforce``, a used episode ranks a little higher (at most 20%). The count is kept
        beside the episode, which is never rewritten."""
        await self._held.count_uses(ids)

    # --- recall by meaning -----------------------------------------------------------------

    async def backfill(
        self, *, batch_size: int = 64, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """Embed every episode of the log without a usable vector (recorded before the embedder
        was set, by deepcrew-ai, or while it failed), *batch_size* texts per call; return how
        many vectors were written. Until then such episodes are found by keywords only.
        *progress* is called with ``(done, total)`` after each batch.

        Raises :class:`EmbeddingError` when a call fails (the batches before it are kept: run
        it again to go on), :class:`EmbedderMismatchError` when the log's vectors are another
        embedder's (:meth:`reembed` replaces them), :class:`ConfigurationError` without an
        embedder.
        """
        return await embed_log(self._semantic, batch_size, progress, everything=False)

    async def reembed(
        self, *, batch_size: int = 64, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """Rebuild every vector of the log with this memory's embedder and record it as the
        log's embedder (after a change of model); return how many vectors were written.
        Arguments and errors as :meth:`backfill`'s.

        Readers with the old embedder ignore the old vectors at once (never mixed). An
        interrupted reembed leaves the episodes not yet done without a usable vector:
        :meth:`backfill` finishes the work.
        """
        return await embed_log(self._semantic, batch_size, progress, everything=True)

    # --- the rules a tool filters a listing by (no I/O, as of the last read) -----------------

    def searched_text(self, episode: Episode) -> str:
        """What ``containing`` (:meth:`forget`, :meth:`select`) looks in for *episode*: every
        text field and its grades' notes, in search form (``search_form``: white space, hidden
        characters, Unicode forms and case folded). For a tool filtering by the same rule."""
        return self._shown.searched_text(episode)

    def recorded_at(self, episode: Episode) -> float | None:
        """The POSIX time every ``since``/``until``/``before`` files *episode* under: its
        timestamp or, when that cannot be used (garbled, in the future), the time of the dated
        episode recorded before it. ``None`` when no time is known (an episode this memory has
        not read, or no dated one before it). For a tool filtering a timeline as recall does."""
        return self._shown.recorded_at(episode)
