"""Recall by meaning: the vectors of the cached episodes and the hybrid ranking.

Imported only by a memory with an embedder (it needs numpy).

Score (see docs/recall.md)
    ``c`` is the cosine similarity of the query's vector and the episode's. How high ``c`` runs
    for unrelated texts depends on the model (about 0.1 with one, 0.7 with another) and on the
    query itself: some queries are close to everything (short, generic, or in a language
    few episodes are in). So ``c`` is measured against a fixed set of everyday sentences that no
    log is about, the *background* (:data:`BACKGROUND`: the same everyday requests in English,
    German, French and Spanish, at least :data:`HUB_TOP` in each): ``b_q`` is the mean of the
    query's :data:`HUB_TOP` highest similarities to it, what unrelated text reaches with this
    model and this query, and the part of ``c`` above it is::

        excess    = c - b_q
        meaning   = clamp((excess - similarity_floor) / MEANING_SPAN, 0, 1)      (span 0.6)
        relevance = keyword + meaning * (1 - keyword)
        score     = relevance * recency factor * outcome weight      (as for keywords)

    (The episode's own level against the background is not subtracted: on both paraphrase
    probes that cost more paraphrases than it kept decoys out; docs/benchmarks.md.)

    ``keyword`` is the Jaccard relevance of :mod:`._recall`. An episode is returned when one of
    the two parts is above zero, so an exact identifier still finds its episode, a paraphrase
    finds its own, and a query no closer to any episode than to everyday chatter returns
    nothing. The background does not depend on the log, so the floor means the same for a log
    of one episode and of a million.

    A weak keyword match (``keyword < WEAK_KEYWORD``) counts only when the model sees at least
    ``WEAK_MEANING`` of meaning in it ("the river bank" against "bank transfer failed", "what
    time does your office open" against "calendar shows the wrong time"): the word is shared,
    the meaning is not. A match on an identifier (a term with a digit: an order number, a
    ticket, a version) always counts: that is what vectors miss.

    The top k is exact: an episode whose meaning part is zero scores its keyword part when
    that counts (a strong match, an identifier, no usable vector) and nothing otherwise, so
    the keyword candidates are read in one stream per reason, best first, until none left in
    any could enter the top k (:func:`hybrid_search`); a weak match on common words, most of
    a large log, is not read at all.

Where the vectors are
    In process (:class:`VectorIndex`) every vector of the cached episodes is a row of one
    matrix. A store that keeps the index (:class:`StoreVectors`) keeps beside each vector a
    compact copy (int8 components and a scale, read for a namespace in one pass): the
    similarity each implies is within a proven bound of the exact one, so the episodes that
    could have a meaning part are found from it, and only those whose bound could enter the
    top k are decoded and measured exactly. When they are many (a query close to much of the
    log), each is first bounded without its facts (:class:`RoughBounds`: from the postings,
    then from a few columns of its row), its facts read only while that could enter the top k.
    Similarities are computed row by row (``einsum``, whose result for a row does not depend
    on the rows beside it, unlike a BLAS matrix product), so both give the same bits.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Callable, Iterator, Sequence
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
import numpy.typing as npt

from ._embed import SIMILARITY_FLOOR
from ._recall import WEIGHTS, RecallIndex, Scored, terms

if TYPE_CHECKING:
    from ._index import StoreIndex

    Index = RecallIndex | StoreIndex  # the episodes' postings, in process or in a store

__all__ = [
    "BACKGROUND",
    "HybridScorer",
    "StoreVectors",
    "VectorIndex",
    "VectorReader",
    "Vectors",
    "hub_levels",
    "hybrid_rules",
    "hybrid_search",
]

Matrix = npt.NDArray[np.float32]
Found = list[tuple[int, Scored]]

# A keyword match weaker than this counts only with a meaning part of at least WEAK_MEANING: one
# shared word is relevance only when the model agrees (calibrated: docs/benchmarks.md).
WEAK_KEYWORD = 0.3
WEAK_MEANING = 0.25
# Meaning reaches 1 this far above the floor: a clear paraphrase then outweighs a coincidental
# shared word (calibrated with all-MiniLM-L6-v2: docs/benchmarks.md).
MEANING_SPAN = 0.6
# A matched term holding a digit is an identifier (an order, a ticket, a version): models see
# little in it, so a match on one always counts.
_IDENTIFIER = re.compile(r"[0-9]")
# Up to this many episodes without a vector are scored one by one; more are found by the
# keyword search (see hybrid_search).
_LACKING = 2048

# More meaning candidates than this in a store are ordered by rough bounds first (see
# RoughBounds), and read this many at a time while one could enter the top k.
_ROUGH_OVER = 256
_ROUGH_BATCH = 128

# Everyday requests that no agent's log is about, in English and, with the same topics, in German,
# French and Spanish (at least HUB_TOP in each, so that a query in one of them is measured against
# sentences in its own language). How similar a query is to these is the level that "unrelated"
# reaches with this model (see the module doc); it must exceed it to recall anything by meaning.
BACKGROUND: tuple[str, ...] = (
    "How do I descale an electric kettle?",
    "Suggest a board game for four players.",
    "What is the difference between a crocodile and an alligator?",
    "Help me plan a vegetarian dinner menu.",
    "How often should I water a cactus?",
    "Explain the rules of cricket simply.",
    "What should I wear to a summer wedding?",
    "Recommend a podcast about ancient history.",
    "How do I get chewing gum out of hair?",
    "Give me a stretching routine for runners.",
    "How do bees make honey?",
    "Write a limerick about a cat.",
    "How do I iron a linen shirt?",
    "What is the tallest mountain in Africa?",
    "Suggest a name for a sailing boat.",
    "What's a good way to learn to whistle?",
    "How many players are on a volleyball team?",
    "Tell me about the life cycle of a butterfly.",
    "Plan a picnic for a rainy afternoon.",
    "What do pandas eat?",
    "How do I polish silver cutlery?",
    "Which spices go well with pumpkin soup?",
    "How do hot air balloons fly?",
    "Suggest a family-friendly card game.",
    "How do I crochet a granny square?",
    "What colour goes well with dark green walls?",
    "Why do cats purr?",
    "What are some easy magic tricks for children?",
    "How do I keep cut flowers fresh longer?",
    "Which instruments are in a brass band?",
    "Welche Farbe passt zu einem grauen Sofa?",
    "Wie pflege ich einen Bonsai richtig?",
    "Quel est le meilleur moment pour planter des tulipes ?",
    "Comment faire une pâte à crêpes légère ?",
    "¿Cuál es la mejor forma de aprender a nadar?",
    "¿Qué ropa llevar para una excursión en la nieve?",
    "Wie entkalke ich einen Wasserkocher?",
    "Welches Brettspiel eignet sich für vier Personen?",
    "Was ist der Unterschied zwischen einem Krokodil und einem Alligator?",
    "Hilf mir, ein vegetarisches Abendessen zu planen.",
    "Wie oft sollte ich einen Kaktus gießen?",
    "Erkläre mir einfach die Regeln von Kricket.",
    "Comment détartrer une bouilloire électrique ?",
    "Quel jeu de société conseiller pour quatre joueurs ?",
    "Quelle est la différence entre un crocodile et un alligator ?",
    "Aide-moi à préparer un menu de dîner végétarien.",
    "À quelle fréquence faut-il arroser un cactus ?",
    "Explique-moi simplement les règles du cricket.",
    "¿Cómo se quita la cal de un hervidor eléctrico?",
    "Sugiere un juego de mesa para cuatro jugadores.",
    "¿Cuál es la diferencia entre un cocodrilo y un caimán?",
    "¿Cada cuánto hay que regar un cactus?",
)
# A query's "hubness": the mean of its this many highest similarities to the background.
HUB_TOP = 5


class VectorIndex:
    """Unit vectors of the cached episodes as rows of one float32 matrix, by sequence number,
    and the background's vectors once they are known.

    Rows are appended (the matrix grows by a quarter when full); a removed row is zeroed and
    the rows are compacted once half of them are dead, so adding and removing cost
    O(dimension) amortised, and scoring the whole log is one matrix-vector product.
    """

    def __init__(self) -> None:
        self.dimension: int | None = None
        self.background: Matrix | None = None
        self._rows: Matrix = np.zeros((0, 0), dtype=np.float32)
        self._seqs: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)  # -1: a dead row
        self._row_of: dict[int, int] = {}
        self._used = 0

    def __len__(self) -> int:
        return len(self._row_of)

    def __contains__(self, seq: object) -> bool:
        return seq in self._row_of

    def __iter__(self) -> Iterator[int]:
        return iter(self._row_of)

    @property
    def nbytes(self) -> int:
        return int(self._rows.nbytes + self._seqs.nbytes)

    def reset(self) -> None:
        self._rows = np.zeros((0, 0), dtype=np.float32)
        self._seqs = np.zeros(0, dtype=np.int64)
        self._row_of = {}
        self._used = 0
        self.dimension = None

    def set_background(self, background: Matrix) -> None:
        """Queries are measured against *background* (the same model's vectors of BACKGROUND)."""
        self.background = background

    def add(self, seq: int, vector: Matrix) -> None:
        if self.dimension is None or not self._row_of:
            self.reset()
            self._rows = np.zeros((0, len(vector)), dtype=np.float32)
            self.dimension = len(vector)
        if len(vector) != self.dimension:
            raise ValueError(f"vector of {len(vector)} dimensions in an index of {self.dimension}")
        row = self._row_of.get(seq)
        if row is None:
            if self._used == len(self._rows):
                self._grow()
            row = self._used
            self._seqs[row] = seq
            self._row_of[seq] = row
            self._used += 1
        self._rows[row] = vector

    def remove(self, seq: int) -> None:
        row = self._row_of.pop(seq, None)
        if row is None:
            return
        self._rows[row] = 0.0
        self._seqs[row] = -1
        if self._used > 64 and len(self._row_of) * 2 < self._used:
            self._compact()

    def vector(self, seq: int) -> Matrix | None:
        row = self._row_of.get(seq)
        return None if row is None else self._rows[row]

    # Every vector held is usable (Semantic.apply adds no other): one not held is lacking.
    exact = True

    def lacks(self, seq: int) -> bool:
        return seq not in self._row_of

    def lacking(self, index: Index, limit: int) -> list[int] | None:
        held = cast("RecallIndex", index).seqs()
        if len(held) - len(self._row_of) > limit:
            return None
        return sorted(held - self._row_of.keys())

    def ahead(self, seqs: Sequence[int]) -> None:
        pass

    def similarities(
        self, query: Matrix, at_least: float | None = None
    ) -> tuple[npt.NDArray[np.int64], Matrix]:
        """The sequence numbers of the live rows and their cosine similarity to *query*
        (all of them: *at_least* is what a caller needs, and every row is at hand)."""
        used = self._used
        if not self._row_of:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        sims = similarities(self._rows[:used], query)
        seqs = self._seqs[:used]
        if len(self._row_of) == used:
            return seqs, sims
        live = seqs >= 0
        return seqs[live], sims[live]

    def _grow(self) -> None:
        self._resize(max(64, len(self._rows) + len(self._rows) // 4))  # 1.25x: little slack

    def _compact(self) -> None:
        live = self._seqs[: self._used] >= 0
        rows = self._rows[: self._used][live]
        seqs = self._seqs[: self._used][live]
        self._rows, self._seqs = rows, seqs
        self._used = len(seqs)
        self._resize(max(64, self._used + self._used // 4))
        self._row_of = {int(s): i for i, s in enumerate(seqs)}

    def _resize(self, size: int) -> None:
        used = self._used
        rows = np.zeros((size, self.dimension or 0), dtype=np.float32)
        rows[:used] = self._rows[:used]
        seqs = np.full(size, -1, dtype=np.int64)
        seqs[:used] = self._seqs[:used]
        self._rows, self._seqs = rows, seqs


def similarities(rows: Matrix, query: Matrix) -> Matrix:
    """Each row's dot product with *query*, each the same whatever rows are beside it (a BLAS
    product is not: its blocking changes the order of the sums), so that a store that measures
    a few candidates gets the bits the in-process matrix gets."""
    sims: Matrix = np.einsum("ij,j->i", rows, query)
    return sims


class Vectors(Protocol):
    """What the hybrid ranking reads of the episodes' vectors (:class:`VectorIndex`,
    :class:`StoreVectors`)."""

    @property
    def background(self) -> Matrix | None: ...

    def similarities(
        self, query: Matrix, at_least: float | None = None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.floating[Any]]]:
        """Sequence numbers and similarities to *query* (exact, or with :attr:`exact` false
        upper bounds of them): at least every episode whose similarity is *at_least* or more
        (``None``: every episode with a vector)."""

    def vector(self, seq: int) -> Matrix | None:
        """The usable vector of *seq* (``None``: it has none)."""

    @property
    def exact(self) -> bool:
        """Whether :meth:`similarities` are exact and an episode :meth:`lacks` does not name
        has a usable vector (``False``: compact copies, each read from its record when it
        matters: it may have been made from another text)."""

    def lacks(self, seq: int) -> bool:
        """Whether *seq* has no vector (after :meth:`similarities`)."""

    def lacking(self, index: Index, limit: int) -> list[int] | None:
        """The episodes of *index* that have no vector, in seq order, perhaps with a few
        seqs it does not hold (``None``: more than *limit*; ask :meth:`lacks`)."""

    def ahead(self, seqs: Sequence[int]) -> None:
        """*seqs* are about to be scored: read their vectors in one trip."""


class VectorReader(Protocol):
    """The reads a store answers for the vectors of one namespace (in its worker thread)."""

    def blocks(self, mark: str, dim: int, live: range) -> Iterator[tuple[int, bytes, bytes]]:
        """The compact copies of the vectors of embedder fingerprint *mark* and *dim*
        dimensions, by blocks of consecutive seqs covering *live*, in seq order: ``(first
        seq, scales, components)``, a float64 scale per slot (0: no copy) and int8
        components, ``component / norm ~= scale * int8`` (off by at most ``scale / 2``)."""

    def stored(self, seqs: Sequence[int]) -> dict[int, str]:
        """The stored vector records of *seqs*."""


# Above the quantization bound: float32 rounding of the exact and the approximate dot
# products (each under 1e-4 for unit vectors of up to MAX_DIMENSION components).
_ROUNDING = 1e-3


class StoreVectors:
    """The vectors of a store's index for one search (see the module doc).

    *usable* decodes one episode's stored vector record as the memory does in process
    (``None``: it is not this embedder's, or not made from the episode's current text)."""

    def __init__(
        self,
        reader: VectorReader,
        mark: str,
        dimension: int,
        live: range,
        background: Matrix,
        usable: Callable[[int, str], Matrix | None],
    ) -> None:
        self._reader = reader
        self._mark = mark
        self.dimension = dimension
        self._live = live
        self.background = background
        self._usable = usable
        self._vectors: dict[int, Matrix | None] = {}
        self.candidates = 0  # how many episodes the last similarities() measured exactly
        # Which seqs of the view have a copy (read with the copies by similarities()).
        self._present = np.zeros(len(live), dtype=np.bool_)

    # A copy says a vector of this embedder is stored; whether it is usable (made from the
    # episode's current text) only its record tells.
    exact = False

    def lacks(self, seq: int) -> bool:
        at = seq - self._live.start
        return not (0 <= at < len(self._present) and self._present[at])

    def lacking(self, index: Index, limit: int) -> list[int] | None:
        missing = np.flatnonzero(~self._present)
        if len(missing) > limit:
            return None
        return [int(s) for s in missing + self._live.start]

    def ahead(self, seqs: Sequence[int]) -> None:
        self._load(list(seqs))

    def similarities(
        self, query: Matrix, at_least: float | None = None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.floating[Any]]]:
        dim = self.dimension
        live = self._live
        # |exact - scale * (codes @ query)| <= scale / 2 * |query|_1 (each component is off
        # by at most scale / 2), plus rounding: the upper bounds of the similarities.
        spread = 0.5 * float(np.abs(query).astype(np.float64).sum())
        keep: list[npt.NDArray[np.int64]] = []
        reach: list[npt.NDArray[np.float64]] = []
        self._present[:] = False
        # One float32 buffer for every block's components (a fresh array per block costs
        # its page faults, more than the product itself).
        buffer: Matrix | None = None
        for first, heads, data in self._reader.blocks(self._mark, dim, live):
            scales = np.frombuffer(heads, dtype="<f8")
            n = len(scales)
            if len(data) != n * dim:
                continue  # not a block this reader can read (cannot happen: one dimension)
            seqs = np.arange(first, first + n, dtype=np.int64)
            present = (scales > 0) & (seqs >= live.start) & (seqs < live.stop)
            self._present[seqs[present] - live.start] = True
            codes = np.frombuffer(data, dtype=np.int8).reshape(n, dim)
            if buffer is None or len(buffer) != n:
                buffer = np.empty((n, dim), dtype=np.float32)
            np.copyto(buffer, codes, casting="unsafe")  # int8 to float32: exact
            bound = scales * (buffer @ query) + scales * spread + _ROUNDING
            if at_least is not None:
                present &= bound >= at_least
            keep.append(seqs[present])
            reach.append(bound[present])
        self.candidates = sum(map(len, keep))
        if not keep:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        return np.concatenate(keep), np.concatenate(reach)

    def vector(self, seq: int) -> Matrix | None:
        if seq not in self._vectors:
            self._load([seq])
        return self._vectors.get(seq)

    def _load(self, seqs: list[int]) -> None:
        wanted = [s for s in seqs if s not in self._vectors]
        if not wanted:
            return
        stored = self._reader.stored(wanted)
        for seq in wanted:
            raw = stored.get(seq)
            self._vectors[seq] = None if raw is None else self._usable(seq, raw)


def hub_levels(rows: Matrix, background: Matrix) -> Matrix:
    """Each row's mean similarity to its :data:`HUB_TOP` closest background sentences."""
    sims = rows @ background.T
    top = min(HUB_TOP, sims.shape[1])
    levels: Matrix = np.sort(sims, axis=1)[:, -top:].mean(axis=1).astype(np.float32)
    return levels


Item = tuple[float, float, int, float]  # score, when, seq, relevance: what a top k orders


class HybridScorer:
    """The hybrid score of the episodes of *index* for one query (module doc). The index's
    background must be set (:meth:`VectorIndex.set_background`).

    ``reach`` holds the episodes that may have a meaning part, each with an upper bound of
    its similarity (in process the exact one: those that have one): every other episode's
    meaning part is zero, so its score is its keyword part or nothing, known without
    reading its vector (see :meth:`rank`)."""

    def __init__(
        self,
        index: Index,
        vectors: Vectors,
        query: str,
        query_vector: Matrix,
        *,
        now: float,
        intent: str,
        half_life_days: float,
        similarity_floor: float = SIMILARITY_FLOOR,
        min_similarity: float | None = None,
    ) -> None:
        if vectors.background is None:
            raise ValueError("the vector index has no background yet")
        self.index, self.vectors = index, vectors
        self.query, self.query_vector = query, query_vector
        self.now, self.intent, self.half_life_days = now, intent, half_life_days
        self.floor, self.min_similarity = similarity_floor, min_similarity
        self.q_terms = terms(query)
        self.ident = any(_IDENTIFIER.search(t) for t in self.q_terms)
        # A store's index reads what each episode holds of the query's terms: set them
        # before any episode is read (those found by meaning alone included).
        index._prepare(self.q_terms)
        self.hub = float(hub_levels(query_vector[None, :], vectors.background)[0])
        # What a meaning part needs (the exact test is _measure's): a store reads only those.
        at_least = self.hub + similarity_floor
        if min_similarity is not None:
            at_least = max(at_least, min_similarity)
        seqs, sims = vectors.similarities(query_vector, at_least)
        self._measured: dict[int, tuple[float, float, bool] | None] = {}
        if vectors.exact:
            above = self._above(sims)
            seqs, sims, excess = seqs[above], sims[above], (sims - self.hub)[above]
            self._measured = {
                int(seqs[i]): (float(sims[i]), float(excess[i]), True) for i in range(len(seqs))
            }
        # (tolist: the same Python ints and floats as int() and float() of each, at C speed)
        self.reach: dict[int, float] = dict(zip(seqs.tolist(), sims.tolist(), strict=True))
        self.reach_arrays = (seqs, sims)  # the same, for what computes over all of them
        self._weights = WEIGHTS[intent]

    def _above(self, sims: Matrix) -> npt.NDArray[np.bool_]:
        above: npt.NDArray[np.bool_] = (sims - self.hub) > self.floor
        if self.min_similarity is not None:
            above &= sims >= self.min_similarity
        return above

    def _measure(self, seq: int) -> tuple[float, float, bool] | None:
        """``(similarity, excess, whether it has a meaning part)`` (``None``: no vector)."""
        if seq in self._measured:
            return self._measured[seq]
        vector = self.vectors.vector(seq)
        found: tuple[float, float, bool] | None = None
        if vector is not None:
            # The same operations on a row of one as on the whole matrix: the same bits.
            sims = similarities(vector[None, :], self.query_vector)
            means = seq in self.reach and bool(self._above(sims)[0])
            found = (float(sims[0]), float((sims - self.hub)[0]), means)
        self._measured[seq] = found
        return found

    def rank(self, seq: int) -> Item | None:
        """What a top k orders *seq* by (``None``: it is not returned), its vector read only
        when the score depends on it."""
        index = self.index
        parts = index.parts(seq, self.q_terms, now=self.now, half_life_days=self.half_life_days)
        keyword = parts.keyword
        if seq not in self.reach:
            if keyword <= 0.0:
                return None
            if keyword < WEAK_KEYWORD and not (
                self.ident and any(_IDENTIFIER.search(t) for t in parts.matched)
            ):
                if not self.vectors.exact:
                    return self._rank(seq)  # only its record says whether it is usable
                if not self.vectors.lacks(seq):
                    return None  # a weak match without meaning: zero (see score)
            total = keyword * parts.factor * self._weights.get(parts.outcome, 1.0)
            return (total, parts.when, seq, keyword)
        return self._rank(seq)

    def _rank(self, seq: int) -> Item | None:
        found = self.score(seq)
        return None if found is None else (found[0], found[1], seq, found[3].relevance)

    def bound(self, seq: int) -> float:
        """At least the score of *seq*, one of ``reach``, without reading its vector."""
        parts = self.index.parts(
            seq, self.q_terms, now=self.now, half_life_days=self.half_life_days
        )
        keyword = parts.keyword
        meaning = min(1.0, max(0.0, (self.reach[seq] - self.hub - self.floor) / MEANING_SPAN))
        relevance = keyword + (meaning + 1e-6) * (1.0 - keyword)
        return relevance * parts.factor * self._weights.get(parts.outcome, 1.0) * (1 + 1e-9)

    def score(self, seq: int) -> tuple[float, float, int, Scored] | None:
        """The hybrid score of one indexed episode (``None``: it is not returned)."""
        index = self.index
        parts = index.parts(seq, self.q_terms, now=self.now, half_life_days=self.half_life_days)
        found = self._measure(seq)
        meaning, keyword = 0.0, parts.keyword
        if found is not None:
            excess = found[1]
            if found[2]:
                meaning = min(1.0, (excess - self.floor) / MEANING_SPAN)
            if (
                keyword < WEAK_KEYWORD
                and meaning < WEAK_MEANING
                and not any(_IDENTIFIER.search(term) for term in parts.matched)
            ):
                # A word shared by texts that mean different things: "the river bank" and
                # "bank transfer failed". (The meaning part stays: it is the model's.)
                keyword = 0.0
        relevance = keyword + meaning * (1.0 - keyword)
        if relevance <= 0.0:
            return None
        outcome_weight = self._weights.get(parts.outcome, 1.0)
        total = relevance * parts.factor * outcome_weight
        return (
            total,
            parts.when,
            seq,
            Scored(
                index.episode(seq),
                total,
                relevance,
                parts.recency,
                outcome_weight,
                parts.matched,
                parts.age_days,
                keyword=keyword,
                similarity=None if found is None else found[0],
                meaning=meaning,
            ),
        )


class RoughBounds:
    """Bounds of the score of each episode of ``hybrid.reach`` (at least
    :meth:`HybridScorer.bound`, the same expression, increasing in each part) read without
    its facts: its keyword relevance from the postings (the ``m`` query terms it holds and
    its length class, in one read; at most ``m / |Q|`` where the class is not known), and
    either a recency factor of 1 and the intent's largest outcome weight (:meth:`rough`), or
    those of its time and recorded outcome (:meth:`closer`, from a row of a few columns)."""

    def __init__(
        self, index: Index, hybrid: HybridScorer, intent: str, now: float, half_life_days: float
    ) -> None:
        q_terms = hybrid.q_terms
        postings, df = index._postings, index._df
        ordered = sorted((t for t in q_terms if t in postings), key=df.__getitem__)
        sized = index._sized_count(ordered) if ordered else None
        seqs, reach = hybrid.reach_arrays
        held = sizes = np.zeros(len(seqs), dtype=np.int64)
        if sized is not None and len(sized.seqs):
            at = np.minimum(np.searchsorted(sized.seqs, seqs), len(sized.seqs) - 1)
            found = sized.seqs[at] == seqs
            held = np.where(found, sized.held[at], 0)
            sizes = np.where(found, sized.sizes[at], 0)
        elif sized is None and ordered:
            counts = index._count(ordered)
            held = np.fromiter((counts.get(s, 0) for s in seqs.tolist()), np.int64, len(seqs))
            sizes = held  # |E| >= m: at most m / |Q|
        q, cap = len(q_terms), index.length_cap
        low, span = hybrid.hub + hybrid.floor, MEANING_SPAN
        # Each episode's relevance bound (keyword and meaning), before recency and weight: the
        # operations of relevance() and of HybridScorer.bound, on arrays (the same bits).
        meaning = np.minimum(1.0, np.maximum(0.0, (reach - low) / span)) + 1e-6
        if cap is not None:
            sizes = np.maximum(held, np.minimum(sizes, cap))
        with np.errstate(divide="ignore", invalid="ignore"):
            keyword = np.minimum(1.0, held / (q + sizes - held))
        keyword = np.where(held > 0, keyword, 0.0)
        bound = np.where(held > 0, keyword + meaning * (1.0 - keyword), meaning)
        self._seqs, self._bounds = seqs, bound
        # seq -> its bound, as closer() reads it
        self.relevance: dict[int, float] = dict(zip(seqs.tolist(), bound.tolist(), strict=True))
        self._rw = index.recency_weight
        self._weights = WEIGHTS[intent]
        self._w_max = max(self._weights.values())
        self._now, self._half_life = now, half_life_days

    def rough(self) -> list[tuple[float, int, int]]:
        """``(-bound, 2, seq)`` of every episode, as the search queues them."""
        most = max(1.0, 1.0 - self._rw) * self._w_max * _OVER
        return list(zip((self._bounds * -most).tolist(), repeat(2), self._seqs.tolist()))

    def closer(self, seq: int, when: float, outcome: str, graded: bool) -> float:
        """With the episode's time and recorded outcome (a grade may change the outcome:
        then the largest weight)."""
        recency = (
            0.0
            if when == -math.inf
            else 0.5 ** (max(0.0, self._now - when) / 86400.0 / self._half_life)
        )
        factor = 1.0 - self._rw + self._rw * recency
        weight = self._w_max if graded else self._weights.get(outcome, 1.0)
        return self.relevance[seq] * factor * weight * _OVER * _OVER


# A hair over one: a bound computed another way than the exact one is above it by more than
# their rounding.
_OVER = 1 + 1e-9


def hybrid_search(
    index: Index,
    vectors: Vectors,
    query: str,
    query_vector: Matrix,
    k: int,
    *,
    now: float,
    intent: str,
    half_life_days: float,
    similarity_floor: float = SIMILARITY_FLOOR,
    min_similarity: float | None = None,
    since: float | None = None,
    accept: Callable[[int], bool] | None = None,
    scorer: HybridScorer | None = None,
    min_relevance: float = 0.0,
    under: list[tuple[int, Scored]] | None = None,
) -> list[tuple[int, Scored]]:
    """The *k* best episodes for *query* by the hybrid score (module doc), best first. The
    index's background must be set (:meth:`VectorIndex.set_background`); *scorer* is a
    :class:`HybridScorer` made with the same arguments, made once for several searches.

    *min_relevance* is the floor on the combined relevance (``keyword + meaning * (1 -
    keyword)``): the result is the top *k* of the episodes at or above it. With *under*, the
    episodes under the floor that would have been in the top *k* without it are appended to
    it, best first (exact, at most the cost of the same search without the floor)."""
    if k <= 0:
        return []
    hybrid = scorer or HybridScorer(
        index,
        vectors,
        query,
        query_vector,
        now=now,
        intent=intent,
        half_life_days=half_life_days,
        similarity_floor=similarity_floor,
        min_similarity=min_similarity,
    )
    cutoff = -math.inf if since is None else since
    scored_at: dict[int, Item | None] = {}
    # The episodes that may have a meaning part, by the best score each could reach: only
    # those that could enter the top k are measured (their vectors read, in a store). Many
    # of them in a store (a query close to much of the log): each first by a rough bound that
    # needs none of its facts (see RoughBounds), its facts read, for its exact bound, only
    # when that could enter the top k.
    pending: list[tuple[float, int, int]]  # (-bound, 2 rough / 1 closer / 0 exact, seq)
    bounds: RoughBounds | None = None
    if not vectors.exact and len(hybrid.reach) > _ROUGH_OVER:
        bounds = RoughBounds(index, hybrid, intent, now, half_life_days)
        pending = bounds.rough()
    else:
        index._ahead(list(hybrid.reach))
        pending = [
            (-hybrid.bound(seq), 0, seq)
            for seq in hybrid.reach
            if seq in index and index.when(seq) >= cutoff
        ]
    heapq.heapify(pending)
    # The other episodes have no meaning part: an episode's hybrid score is then its keyword
    # score when its keyword match counts (it is strong, on an identifier, or the episode has
    # no vector: see HybridScorer.score), and zero otherwise. So the keyword candidates come
    # in streams, one per reason, each read best first until the k-th hybrid score is above
    # what any episode it has not returned could reach: exact, and a weak match on common
    # words (most of a large log) is never read unless nothing better is found.
    ident = frozenset(t for t in hybrid.q_terms if _IDENTIFIER.search(t))
    streams: list[dict[str, Any]] = [{"least": WEAK_KEYWORD}]
    if ident:
        streams.append({"only": ident})
    lacking = vectors.lacking(index, _LACKING)
    if lacking is None:
        streams.append({"among": vectors.lacks})  # many: those the keyword search meets
    else:
        # Few (what failed to embed, what was recorded without an embedder): each scored.
        index._ahead(lacking)
        vectors.ahead(lacking)
        for seq in lacking:
            if seq in scored_at or seq in hybrid.reach:
                continue
            if seq not in index or index.when(seq) < cutoff:
                continue
            item = hybrid.rank(seq)
            if item is not None and (accept is None or accept(seq)):
                scored_at[seq] = item
    # A store's copy says that a vector is kept, not that it is usable (made from the
    # episode's current text, with this memory's fields): a weak match on one is zero only
    # once its record says so, so those are read too, best first, while one could enter.
    checking = not vectors.exact
    # What such a match scores at most (a hair over, for rounding).
    weak_best = WEAK_KEYWORD * max(WEIGHTS[intent].values()) * (1.0 + 1e-9)
    collecting = under is not None and min_relevance > 0.0

    def order(t: Item) -> tuple[float, float, int]:
        return t[0], t[1], t[2]

    def tops() -> tuple[list[Item], list[Item]]:
        ranked = [item for item in scored_at.values() if item is not None]
        best = heapq.nlargest(k, (t for t in ranked if t[3] >= min_relevance), key=order)
        everything = heapq.nlargest(k, ranked, key=order) if collecting else best
        return best, everything

    def could_enter(best: list[Item]) -> bool:
        return bool(pending) and (len(best) < k or -pending[0][0] >= best[-1][0])

    def measure(best: list[Item]) -> list[Item]:
        # The pending episodes that could enter the top k, best bound first.
        while could_enter(best):
            tier = pending[0][1]
            if tier:
                # Rough bounds first: a closer one from a few columns of each (one trip), then
                # the exact one from its facts (one trip), each back in the queue.
                rough: list[int] = []
                while len(rough) < _ROUGH_BATCH and could_enter(best) and pending[0][1] == tier:
                    rough.append(heapq.heappop(pending)[2])
                rows = index._ranked(rough) if tier == 2 and bounds is not None else None
                if rows is not None and bounds is not None:
                    for seq in rough:
                        row = rows.get(seq)
                        if row is not None and row[0] >= cutoff:
                            heapq.heappush(pending, (-bounds.closer(seq, *row), 1, seq))
                    continue
                index._ahead(rough)
                for seq in rough:
                    if seq in index and index.when(seq) >= cutoff:
                        heapq.heappush(pending, (-hybrid.bound(seq), 0, seq))
                continue
            batch: list[int] = []
            while len(batch) < 16 and pending and not pending[0][1]:
                batch.append(heapq.heappop(pending)[2])
            vectors.ahead(batch)
            for seq in batch:
                if seq not in scored_at and (accept is None or accept(seq)):
                    scored_at[seq] = hybrid.rank(seq)
            best = tops()[0]
        return best

    wanted = max(4 * k, 32)
    open_streams = [(stream, wanted) for stream in streams]
    while True:
        read: list[tuple[dict[str, Any], int, list[tuple[int, float]], list[tuple[int, float]]]]
        read = []
        for stream, n in open_streams:
            keyword_under: list[tuple[int, float]] = []
            # (seq, score) only: the hybrid score is this search's own, no record is read.
            fetched = cast(
                "list[tuple[int, float]]",
                index.search(
                    query,
                    n,
                    now=now,
                    intent=intent,
                    half_life_days=half_life_days,
                    since=since,
                    accept=accept,
                    min_relevance=min_relevance,
                    under=cast("list[tuple[int, Scored]]", keyword_under) if collecting else None,
                    scored=False,
                    **stream,
                ),
            )
            # A meaning candidate is pending already: measured (its vector read) only once
            # its bound could enter the top k, however the keyword search ranks it.
            new = [
                seq
                for seq, _ in chain(fetched, keyword_under)
                if seq not in scored_at and seq not in hybrid.reach
            ]
            if not stream:
                vectors.ahead(new)  # the weak matches checked: each reads its vector
            for seq in new:
                scored_at[seq] = hybrid.rank(seq)
            read.append((stream, n, fetched, keyword_under))
        measure(tops()[0])
        best, everything = tops()
        open_streams = []
        for stream, n, fetched, keyword_under in read:
            done = len(fetched) < n or (len(best) == k and best[-1][0] >= fetched[-1][1])
            if collecting and done:
                # The same test for the top k without the floor (what fell under it is
                # reported): the stream's top `n` without the floor is in fetched + under.
                pool = heapq.nlargest(n, (s for _, s in chain(fetched, keyword_under)))
                if len(pool) == n:
                    done = len(everything) == k and everything[-1][0] >= pool[-1]
            if not done:
                open_streams.append((stream, n * 4))
        if not open_streams and checking:
            # (Without the floor the k-th is at least as high: that test passes too.)
            checking = False
            if len(best) < k or best[-1][0] < weak_best:
                open_streams.append(({}, wanted))  # every keyword match, best first
        if not open_streams:
            break
    found: list[tuple[int, Scored]] = []
    for item in best:
        full = hybrid.score(item[2])
        if full is not None:
            found.append((item[2], full[3]))
    if collecting and under is not None:
        for item in everything:
            if item[3] < min_relevance and (full := hybrid.score(item[2])) is not None:
                under.append((item[2], full[3]))
    return found


def hybrid_rules(
    index: Index,
    vectors: Vectors,
    query: str,
    query_vector: Matrix,
    *,
    now: float,
    intent: str,
    half_life_days: float,
    similarity_floor: float,
    min_similarity: float | None,
    since: float | None,
    floor: float,
) -> tuple[
    Callable[[int, Callable[[int], bool], list[tuple[int, Scored]]], list[tuple[int, Scored]]],
    Callable[[int], Scored | None],
]:
    """The *search* and *score* that the ranking rules (``_ranking.keyword_ranking``) take
    for a hybrid ranking over *index* and *vectors*, wherever they are kept."""
    hybrid = {
        "now": now,
        "intent": intent,
        "half_life_days": half_life_days,
        "similarity_floor": similarity_floor,
        "min_similarity": min_similarity,
    }
    scorer = HybridScorer(index, vectors, query, query_vector, **hybrid)  # type: ignore[arg-type]

    def search(
        n: int, accept: Callable[[int], bool], under: list[tuple[int, Scored]]
    ) -> list[tuple[int, Scored]]:
        return hybrid_search(
            index,
            vectors,
            query,
            query_vector,
            n,
            **hybrid,  # type: ignore[arg-type]
            since=since,
            accept=accept,
            scorer=scorer,
            min_relevance=floor,
            under=under,
        )

    def score(seq: int) -> Scored | None:
        item = scorer.score(seq)
        return None if item is None else item[3]

    return search, score
