"""Recall by meaning: the vectors of the cached episodes and the hybrid ranking.

Imported only by a memory with an embedder (it needs numpy).

Score (see docs/recall.md)
    ``c`` is the cosine similarity of the query's vector and the episode's. Whether ``c`` is
    high depends on the model (unrelated texts score about 0.0 with one model and 0.7 with
    another) and on the query, so the floor is not a fixed number: it is read off how the
    query's similarities spread over the whole log plus a fixed set of everyday sentences that
    no log is about (the *background*, which makes the floor work for a log of one episode)::

        centre, spread = median, 1.4826 * MAD   of the query's similarities to log + background
        floor          = max(centre + similarity_floor * spread, min_similarity)
        meaning        = clamp((c - floor) / (1 - floor), 0, 1)
        relevance      = keyword + meaning * (1 - keyword)
        score          = relevance * recency factor * outcome weight      (as for keywords)

    ``keyword`` is the Jaccard relevance of :mod:`._recall`. An episode is returned when one of
    the two parts is above zero, so an exact identifier still finds its episode and a
    paraphrase finds its own, and a query that stands out from nothing returns nothing. An
    episode that shares a word with the query but whose meaning is further from it than the
    log's median (``c < centre``: "bank" the river against "bank transfer") is left out.

    The top k is exact: an episode that is not among the keyword top k (with the same filters)
    and whose meaning part is zero scores its keyword part alone, which is below every keyword
    top-k episode's hybrid score.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ._recall import OUTCOME_WEIGHTS, RecallIndex, Scored, terms

__all__ = ["BACKGROUND", "Floor", "VectorIndex", "floor_for", "hybrid_search"]

Matrix = npt.NDArray[np.float32]

# Robust standard deviations above the median similarity that a query's similarity to an
# episode must reach to count as meaning the same (calibrated on the paraphrase probe: see
# docs/benchmarks.md).
SIMILARITY_FLOOR = 3.0
# The spread is at least this much, so that a log of near-identical episodes (a tiny MAD)
# does not turn noise into meaning.
MIN_SPREAD = 0.02

# Everyday requests no agent log is about: the similarity of a query to these shows where
# "unrelated" lies for this model, whatever the size of the log.
BACKGROUND: tuple[str, ...] = (
    "What is a good recipe for banana bread?",
    "Recommend a novel to read on holiday.",
    "How tall is the Eiffel Tower?",
    "Write a short poem about the sea.",
    "Which houseplants need little light?",
    "Plan a three-day trip to Lisbon.",
    "Who won the football world cup in 1998?",
    "How do I train my puppy to sit?",
    "Explain how rainbows form.",
    "Suggest a name for a pet goldfish.",
    "What should I pack for a camping weekend?",
    "How long should I boil an egg?",
    "Translate 'good morning' into Italian.",
    "What are the rules of chess castling?",
    "Give me a beginner yoga routine.",
    "How do I remove a wine stain from a carpet?",
    "Tell me a fun fact about octopuses.",
    "What is the capital of Australia?",
    "How many calories are in an apple?",
    "Help me write a birthday card for my aunt.",
    "Which movies won the Oscar for best picture recently?",
    "How do I grow tomatoes on a balcony?",
    "Summarise the plot of Hamlet.",
    "What is the difference between a violin and a viola?",
    "How can I improve my sleep?",
    "Describe the water cycle for a ten-year-old.",
    "Find a word that rhymes with orange.",
    "What time zone is Tokyo in?",
    "How do I knit a scarf?",
    "Which birds migrate south in winter?",
    "Suggest a playlist for a road trip.",
    "How do volcanoes erupt?",
)


class VectorIndex:
    """Unit vectors of the cached episodes as rows of one float32 matrix, by sequence number.

    Rows are appended; a removed row is zeroed and reused once half the rows are dead (a
    compaction), so adding and removing cost O(dimension) amortised, and scoring the whole log
    is one matrix-vector product.
    """

    def __init__(self) -> None:
        self.dimension: int | None = None
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
        self.__init__()  # type: ignore[misc]

    def add(self, seq: int, vector: Matrix) -> None:
        if self.dimension is None or not self._row_of:
            self._rows = np.zeros((0, len(vector)), dtype=np.float32)
            self._seqs = np.zeros(0, dtype=np.int64)
            self._used = 0
            self.dimension = len(vector)
        if len(vector) != self.dimension:
            raise ValueError(f"vector of {len(vector)} dimensions in an index of {self.dimension}")
        if seq in self._row_of:
            self._rows[self._row_of[seq]] = vector
            return
        if self._used == len(self._rows):
            self._grow()
        row = self._used
        self._rows[row] = vector
        self._seqs[row] = seq
        self._row_of[seq] = row
        self._used += 1

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

    def similarities(self, query: Matrix) -> tuple[npt.NDArray[np.int64], Matrix]:
        """The sequence numbers of the live rows and their cosine similarity to *query*."""
        used = self._used
        if not self._row_of:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        sims = self._rows[:used] @ query
        seqs = self._seqs[:used]
        if len(self._row_of) == used:
            return seqs, sims
        live = seqs >= 0
        return seqs[live], sims[live]

    def _grow(self) -> None:
        size = max(64, 2 * len(self._rows))
        rows = np.zeros((size, self.dimension or 0), dtype=np.float32)
        rows[: self._used] = self._rows[: self._used]
        seqs = np.full(size, -1, dtype=np.int64)
        seqs[: self._used] = self._seqs[: self._used]
        self._rows, self._seqs = rows, seqs

    def _compact(self) -> None:
        live = self._seqs[: self._used] >= 0
        rows, seqs = self._rows[: self._used][live], self._seqs[: self._used][live]
        self._used = len(seqs)
        self._rows = np.zeros((max(64, 2 * self._used), self.dimension or 0), dtype=np.float32)
        self._rows[: self._used] = rows
        self._seqs = np.full(len(self._rows), -1, dtype=np.int64)
        self._seqs[: self._used] = seqs
        self._row_of = {int(s): i for i, s in enumerate(seqs)}


@dataclass(frozen=True)
class Floor:
    """Where "means the same" starts for one query: the similarity floor and the centre of
    the query's similarities (below it, a keyword match is taken for a coincidence)."""

    floor: float
    centre: float
    spread: float


def floor_for(
    sims: Matrix, background: Matrix, *, similarity_floor: float, min_similarity: float | None
) -> Floor:
    sample = np.concatenate([sims, background]) if len(sims) else background
    centre = float(np.median(sample))
    spread = max(MIN_SPREAD, 1.4826 * float(np.median(np.abs(sample - centre))))
    floor = centre + similarity_floor * spread
    if min_similarity is not None:
        floor = max(floor, min_similarity)
    return Floor(min(floor, 0.999), centre, spread)


def hybrid_search(
    index: RecallIndex,
    vectors: VectorIndex,
    query: str,
    query_vector: Matrix,
    background: Matrix,
    k: int,
    *,
    now: float,
    intent: str,
    half_life_days: float,
    similarity_floor: float = SIMILARITY_FLOOR,
    min_similarity: float | None = None,
    since: float | None = None,
    accept: Callable[[int], bool] | None = None,
) -> list[tuple[int, Scored]]:
    """The *k* best episodes for *query* by the hybrid score (module doc), best first."""
    if k <= 0:
        return []
    seqs, sims = vectors.similarities(query_vector)
    bg = background @ query_vector
    cut = floor_for(sims, bg, similarity_floor=similarity_floor, min_similarity=min_similarity)
    sim_of: dict[int, float] = {}
    if len(seqs):
        above = np.nonzero(sims > cut.floor)[0]
        sim_of = {int(seqs[i]): float(sims[i]) for i in above}
    low = cut.centre

    def similarity(seq: int) -> float | None:
        found = sim_of.get(seq)
        if found is not None:
            return found
        vector = vectors.vector(seq)
        return None if vector is None else float(vector @ query_vector)

    def keyword_accept(seq: int) -> bool:
        if accept is not None and not accept(seq):
            return False
        sim = similarity(seq)
        return sim is None or sim >= low

    q_terms = terms(query)
    candidates = {
        seq
        for seq, _ in index.search(
            query,
            k,
            now=now,
            intent=intent,
            half_life_days=half_life_days,
            since=since,
            accept=keyword_accept,
        )
    }
    cutoff = -math.inf if since is None else since
    for seq in sim_of:
        if seq in index and index.when(seq) >= cutoff and (accept is None or accept(seq)):
            candidates.add(seq)
    weights = OUTCOME_WEIGHTS[intent]
    span = 1.0 - cut.floor
    ranked: list[tuple[float, float, int, Any]] = []
    for seq in candidates:
        parts = index.parts(seq, q_terms, now=now, half_life_days=half_life_days)
        sim = similarity(seq)
        meaning = 0.0
        if sim is not None and sim > cut.floor:
            meaning = min(1.0, (sim - cut.floor) / span)
        relevance = parts.keyword + meaning * (1.0 - parts.keyword)
        if relevance <= 0.0:
            continue
        outcome_weight = weights.get(parts.outcome, 1.0)
        score = relevance * parts.factor * outcome_weight
        scored = Scored(
            index.episode(seq),
            score,
            relevance,
            parts.recency,
            outcome_weight,
            parts.matched,
            parts.age_days,
            keyword=parts.keyword,
            similarity=sim,
            meaning=meaning,
        )
        ranked.append((score, parts.when, seq, scored))
    best = heapq.nlargest(k, ranked, key=lambda t: t[:3])
    return [(seq, scored) for _, _, seq, scored in best]
