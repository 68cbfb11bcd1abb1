"""Recall by meaning, the part of a memory that exists only when it is given an embedder: the
episodes' vectors as this process holds them, the query's vector, and the embedding of the log
(record, backfill, reembed). numpy is imported here, never by a keyword-only memory."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ._embed import (
    Embedder,
    QueryCache,
    check_vectors,
    clean_text,
    decode_identity,
    digest,
    embed_text,
    encode_identity,
    encode_vector,
    fingerprint,
    literal_secrets,
    load_numpy,
)
from ._episode import Episode
from ._exceptions import ConfigurationError, EmbedderMismatchError, EmbeddingError
from ._held import HeldLog
from ._log import Changes, EpisodeLog
from ._options import Embedding, Options
from ._ranking import View, keyword_ranking
from ._recall import RecallIndex, Scored
from ._redact import Redactor, safe_message
from ._store_reads import StoreReads
from ._unicode import escape_hidden
from ._validate import integer

__all__ = ["Semantic", "embed_log", "semantic_part"]

log = logging.getLogger("deepcrew_episodic")

# Passes of backfill/reembed after the first, for what was recorded meanwhile (see embed_log).
_CATCH_UP_PASSES = 8


class Semantic:
    """The vectors of one log and the calls to its embedder."""

    def __init__(
        self,
        episodes: EpisodeLog,
        embedding: Embedding,
        redactor: Redactor | None,
        sync: Callable[[], Awaitable[None]],
    ) -> None:
        load_numpy()  # fail here, with the install hint, not on the first recall
        from ._vectors import VectorIndex

        self._log = episodes
        self.embedder: Embedder = embedding.embedder
        self.fields: Sequence[str] = embedding.fields
        self._redactor = redactor
        self._timeout = embedding.timeout
        self._sync = sync  # the held copy's: a pass reads the log as this memory holds it
        self.similarity_floor = embedding.similarity_floor
        self.min_similarity = embedding.min_similarity
        self.vectors = VectorIndex()
        self._queries = QueryCache()
        self._background: Any = None  # the background sentences' vectors (see _vectors.py)
        self._reembedding = 0  # reembeds of this memory under way (see episode_vector)
        episodes.vectors = True

    def reset(self) -> None:
        self.vectors.reset()

    def remove(self, seq: int) -> None:
        self.vectors.remove(seq)

    async def embed_log(
        self, batch_size: int, progress: Callable[[int, int], None] | None, *, everything: bool
    ) -> int:
        batch_size = integer("batch_size", batch_size, minimum=1, maximum=4096)
        if progress is not None and not callable(progress):
            raise ConfigurationError(f"progress must be a callable or None, not {progress!r}")
        self._reembedding += everything
        try:
            written = await self.embed_pass(batch_size, progress, everything, 0)
            # Episodes recorded meanwhile (by this memory, another process, a keyword-only
            # writer, or an old embedder whose vectors the reembed has just made unusable) are
            # not in the pass's list: each further pass embeds what still has no usable
            # vector, until one finds nothing. Only then is the log complete.
            for _ in range(_CATCH_UP_PASSES):
                more = await self.embed_pass(batch_size, progress, False, written)
                if more == 0:
                    break
                written += more
            else:
                raise EmbeddingError(
                    f"episodes kept arriving without a usable vector during "
                    f"{'reembed' if everything else 'backfill'} of {self._log.namespace!r}; "
                    f"{written} vectors were written: run backfill() again"
                )
        finally:
            self._reembedding -= everything
        log.info(
            "%s of %r: %d vectors written",
            "reembed" if everything else "backfill",
            self._log.namespace,
            written,
        )
        return written

    async def embed_pass(
        self,
        batch_size: int,
        progress: Callable[[int, int], None] | None,
        everything: bool,
        done: int,
    ) -> int:
        """Embed the episodes the log keeps now (*everything*, or those without a usable
        vector) and return how many vectors were written; *done* were written before."""
        embedder = self.embedder
        await self._sync()
        if not everything:
            self.check_embedder()
        identity = self._log.embedder
        ours = decode_identity(identity)
        todo: list[tuple[int, Episode, str]] = []
        cached = set(self.vectors) if not everything else set()
        beyond, _ = await self._log.beyond_view()
        stored = (
            await self._log.stored_vectors([s for s, _ in beyond])
            if beyond and not everything
            else [None] * len(beyond)
        )
        usable = {
            seq
            for (seq, ep), decoded in zip(beyond, stored, strict=True)
            if decoded and self.usable_vector(decoded, ep, ours) is not None
        }
        for seq, ep in [*beyond, *self._log.cached()]:
            if everything or (seq not in cached and seq not in usable):
                todo.append((seq, ep, embed_text(ep, self.fields, self._redactor)))
        written = 0
        if progress is not None and (todo or not done):
            progress(done, done + len(todo))
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            matrix = await self.embed([text for _, _, text in batch], "backfill")
            dimension = int(matrix.shape[1])
            mine = encode_identity(embedder.name, dimension)
            seen = decode_identity(identity)
            if everything and seen != (embedder.name, dimension):
                if not await self._log.set_embedder(identity, mine):
                    raise EmbedderMismatchError(
                        "another process changed the log's embedder during reembed; run it again"
                    )
                identity = mine
            elif seen is None:
                # None yet, or unreadable: record ours, unless another writer just did.
                if not await self._log.set_embedder(identity, mine):
                    await self._sync()
                    self.check_embedder()
                identity = mine
            elif seen != (embedder.name, dimension):
                have = decode_identity(identity)
                raise EmbeddingError(
                    f"embedder {embedder.name!r} answered vectors of {dimension} dimensions; the "
                    f"log's vectors have {have[1] if have else '?'}: reembed to replace them"
                )
            mark = fingerprint(embedder.name, dimension)
            vectors = {
                seq: encode_vector(row, mark, digest(text))
                for (seq, _, text), row in zip(batch, matrix, strict=True)
            }
            if not await self._log.write_vectors(vectors, identity):
                raise EmbedderMismatchError(
                    "another process changed the log's embedder while vectors were written; "
                    "run it again"
                )
            written += len(vectors)
            if progress is not None:
                progress(done + written, done + len(todo))
        if written:
            await self._log.touch()  # every reader (this one too) reloads with the vectors
        return written

    def ours(self) -> bool:
        """Whether the log's vectors are (or may become) this memory's embedder's."""
        found = decode_identity(self._log.embedder)
        return found is None or found[0] == self.embedder.name

    def check_embedder(self) -> None:
        """Refuse a log whose vectors another embedder wrote (as of the last sync)."""
        found = decode_identity(self._log.embedder)
        if found is None or found[0] == self.embedder.name:
            return
        raise EmbedderMismatchError(
            f"the vectors of log {escape_hidden(self._log.namespace)!r} were written by embedder "
            f"{escape_hidden(found[0])!r} ({found[1]} dimensions), not by this memory's "
            f"{escape_hidden(self.embedder.name)!r}: use that embedder, or rebuild the vectors "
            f"with memory.reembed() (CLI: deepcrew-episodic reembed)"
        )

    async def embed(self, texts: list[str], purpose: str) -> Any:
        """Unit vectors for *texts* (one call, with the timeout); :class:`EmbeddingError`."""
        import anyio

        name = self.embedder.name
        try:
            with anyio.fail_after(self._timeout):
                raw = await self.embedder.embed(texts)
        except TimeoutError:
            raise EmbeddingError(
                f"embedder {name!r} did not answer within {self._timeout:g} s ({purpose})"
            ) from None
        except (KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException as exc:
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                raise
            # The message may echo the key the provider refused, carry a whole traceback
            # (litellm's do) or control characters: its first line, redacted, escaped and cut.
            # Not chained (`from None`): the original, unredacted, would travel with it.
            lines = str(exc).strip().splitlines()
            first = lines[0] if lines else ""
            if not isinstance(exc, EmbeddingError):
                first = f"embedder {name!r} failed ({purpose}): {type(exc).__name__}: {first}"
            for secret in literal_secrets(self.embedder):
                first = first.replace(secret, "[REDACTED:api-key]")
            raise EmbeddingError(safe_message(first)) from None
        return check_vectors(raw, len(texts), name)

    def embedding_failed(self, purpose: str, reason: str) -> None:
        self._log.counters.embedding_failures += 1
        what = "stored without a vector" if purpose == "record" else "ranked by keywords only"
        log.warning(
            "embedding for %s in %r failed (%s); %s", purpose, self._log.namespace, reason, what
        )

    async def episode_vector(self, episode: Episode) -> tuple[str, str] | None:
        """The stored vector of *episode* and the embedder record it goes with; ``None`` when
        the embedder failed (logged and counted; ``backfill`` adds it later)."""
        if not self._log.synced:
            await self._log.read_embedder()  # not a whole sync: a record stays cheap
        if self._reembedding and not self.ours():
            # This memory's own reembed has not recorded its embedder yet: the episode goes
            # in without a vector, and the reembed's last pass embeds it.
            return None
        self.check_embedder()
        text = embed_text(episode, self.fields, self._redactor)
        try:
            row = (await self.embed([text], "record"))[0]
        except EmbeddingError as exc:
            self.embedding_failed("record", str(exc))
            return None
        problem = self.dimension_problem(len(row))
        if problem:
            self.embedding_failed("record", problem)
            return None
        name = self.embedder.name
        mark = fingerprint(name, len(row))
        return encode_vector(row, mark, digest(text)), encode_identity(name, len(row))

    def dimension_problem(self, dimension: int) -> str | None:
        found = decode_identity(self._log.embedder)
        if found is not None and found[1] != dimension:
            return (
                f"embedder {found[0]!r} answered vectors of {dimension} dimensions; the log's "
                f"have {found[1]}"
            )
        if (
            self.vectors.dimension is not None
            and len(self.vectors)
            and (self.vectors.dimension != dimension)
        ):
            return (
                f"the embedder answered vectors of {dimension} dimensions; this memory's have "
                f"{self.vectors.dimension}"
            )
        return None

    async def query_vector(self, query: str) -> tuple[Any, str | None]:
        """The query's unit vector (cached), or ``None`` and why (logged and counted)."""
        from ._vectors import BACKGROUND

        text = clean_text(self.redact_text(query))
        vector = self._queries.get(text)
        try:
            if self._background is None:
                background = await self.embed(list(BACKGROUND), "recall")
                problem = self.dimension_problem(background.shape[1])
                if problem:
                    raise EmbeddingError(problem)
                self._background = background
                self.vectors.set_background(background)
            if vector is None:
                vector = (await self.embed([text], "recall"))[0]
                problem = self.dimension_problem(len(vector))
                if problem is None and self._background.shape[1] != len(vector):
                    self._background = None  # the model changed: measure it again next time
                    problem = "the embedder changed its dimension between two calls"
                if problem:
                    raise EmbeddingError(problem)
                self._queries.put(text, vector)
        except EmbeddingError as exc:
            self.embedding_failed("recall", str(exc))
            return None, str(exc)
        return vector, None

    def redact_text(self, text: str) -> str:
        # The query goes to the embedding model: a secret in it must not.
        return self._redactor.redact(text) if self._redactor else text

    def usable_vector(
        self, decoded: tuple[str, str, Any], episode: Episode, identity: tuple[str, int] | None
    ) -> Any | None:
        """The vector stored for *episode* (decoded), if this embedder made it from the
        episode's current text; ``None`` otherwise (it is then ignored, and rebuilt by
        backfill)."""
        mark, text_digest, vector = decoded
        name = self.embedder.name
        if identity is not None and (identity[0] != name or identity[1] != len(vector)):
            return None
        if mark != fingerprint(name, len(vector)):
            return None
        if text_digest != digest(embed_text(episode, self.fields, self._redactor)):
            return None
        return vector

    def apply(self, changes: Changes) -> None:
        identity = decode_identity(self._log.embedder)
        if identity is None or identity[0] != self.embedder.name:
            return  # none of these vectors can be ours (see _check_embedder)
        episodes = dict(changes.added)
        for seq, decoded in changes.vectors.items():
            episode = episodes.get(seq)
            if episode is None:
                continue
            vector = self.usable_vector(decoded, episode, identity)
            if vector is not None:
                self.vectors.add(seq, vector)

    def ranking(
        self,
        view: View,
        index: RecallIndex,
        query: str,
        query_vector: Any,
        k: int,
        *,
        now: float,
        intent: str,
        half_life_days: float,
        outcomes: set[str] | None,
        tags: set[str] | None,
        since: float | None,
        until: float | None,
        floor: float,
    ) -> tuple[list[tuple[int, Scored]], list[Scored]]:
        """The hybrid ranking of the log held in process: the keyword index and the vectors
        together, under the same ranking rules (see _ranking.py and _vectors.py)."""
        from ._vectors import hybrid_rules

        search, score = hybrid_rules(
            index,
            self.vectors,
            query,
            query_vector,
            now=now,
            intent=intent,
            half_life_days=half_life_days,
            similarity_floor=self.similarity_floor,
            min_similarity=self.min_similarity,
            since=since,
            floor=floor,
        )
        return keyword_ranking(
            view,
            index,
            query,
            k,
            now=now,
            intent=intent,
            half_life_days=half_life_days,
            outcomes=outcomes,
            tags=tags,
            since=since,
            until=until,
            floor=floor,
            search=search,
            score=score,
        )


def semantic_part(
    episodes: EpisodeLog, options: Options, held: HeldLog, store: StoreReads
) -> Semantic | None:
    """A memory's recall by meaning, fed each sync's vectors by *held* and read by *store*;
    ``None`` without an embedder (numpy is then never imported)."""
    if options.embedding is None:
        return None
    semantic = Semantic(episodes, options.embedding, options.redactor, held.sync)
    held.vectors = semantic
    store.semantic = semantic
    return semantic


async def embed_log(
    semantic: Semantic | None,
    batch_size: int,
    progress: Callable[[int, int], None] | None,
    *,
    everything: bool,
) -> int:
    """See :meth:`EpisodicMemory.backfill` (*everything*: :meth:`EpisodicMemory.reembed`)."""
    if semantic is None:
        raise ConfigurationError("this memory has no embedder: pass embedder= to build one")
    return await semantic.embed_log(batch_size, progress, everything=everything)
