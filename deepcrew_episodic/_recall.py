"""Ranking: which past episodes are relevant to a new query, and why.

Terms
    Text is case-folded, accents are stripped ("Rückerstattung" meets "ruckerstattung"), it is
    split on anything that is not a letter or a digit (punctuation, hyphens, underscores,
    apostrophes), stopwords (English, German, French) and one-character tokens are dropped, and
    English words are stemmed (:func:`stem`) so that deploy / deploys / deploying / deployment
    meet. Chinese and Japanese, written without spaces, are matched by character bigrams.

Score
    ``Q`` is the set of terms of the query and ``E`` the terms of the episode's matched fields
    (query, tags and reflection by default; tags count like any other text)::

        m         = |Q & E|
        relevance = m / (|Q| + e - m)          e = max(m, min(|E|, LENGTH_CAP))
        recency   = 0.5 ** (age_days / half_life_days)
        score     = relevance * (1 - RECENCY_WEIGHT + RECENCY_WEIGHT * recency) * outcome_weight

    ``relevance`` is the Jaccard index ``|Q & E| / |Q | E|`` except that the episode's side
    counts at most ``LENGTH_CAP`` terms: a long lesson must not dilute an exact match. Below
    the cap it *is* Jaccard, so among short episodes the more specific one wins.

    Recency comes from the episode's timestamp (not its position in the log) and is a
    tie-break with a floor: the oldest episode keeps ``1 - RECENCY_WEIGHT`` of its relevance,
    so an old episode that is the only relevant one still surfaces, and an episode with no
    term in common with the query (``m == 0``) is never returned.

    ``outcome_weight`` is the outcome's weight under the intent times its source's
    (``OUTCOME_WEIGHTS``, ``SOURCE_WEIGHTS``): 1 for every outcome under ``intent="any"``, the
    other intents weight the wanted outcome 1 and the others below ``1 - RECENCY_WEIGHT``, and a
    verdict the agent only claimed or a model judged weighs 0.6 or less, so that among equally
    relevant episodes the wanted outcome, then the checked one, comes first whatever their ages.

Floor
    An episode whose ``relevance`` is under ``min_relevance`` (:data:`MIN_RELEVANCE` by
    default) is not returned: one word shared with a longer question is not relevance. It is a
    filter: the episodes above it keep their scores and order, and the search reports the ones
    that would have been in the top k without it (``Ranking.under_floor``).

Index
    :class:`RecallIndex` keeps, per term, the episodes holding it, grouped by their length
    class and sorted by time. A search visits the query's terms rarest first and, within a
    term, the length classes and episodes in decreasing order of the best score they could
    still reach; it stops as soon as that bound falls below the k-th best score found
    (max-score pruning). When a scan runs long anyway (long questions, or thousands of
    episodes matching the same few terms), it counts how many query terms each candidate
    matches at C speed and continues with exact bounds. The result is exactly the
    brute-force top k, but a common term matching tens of thousands of episodes costs a few
    dozen visits, not a full scan. See docs/recall.md for the figures.
"""

from __future__ import annotations

import functools
import heapq
import math
import re
import unicodedata
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Collection, KeysView, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, Literal, NamedTuple

from ._episode import Episode
from ._source import source_of

__all__ = [
    "Intent",
    "Parts",
    "Ranking",
    "RecallIndex",
    "Scored",
    "SizedMatches",
    "stem",
    "terms",
]

Intent = Literal["any", "what_failed", "what_worked"]
INTENTS: tuple[str, ...] = ("any", "what_failed", "what_worked")

RECENCY_WEIGHT = 0.2
HALF_LIFE_DAYS = 30.0
# An episode's side of the Jaccard union counts at most this many terms (see the module doc).
LENGTH_CAP = 6
# The default relevance floor (EpisodicMemory's min_relevance). Against an episode of LENGTH_CAP
# terms, one shared term is above it only when it is the whole question (1/6); one of two (1/7)
# or more is under it; two shared terms pass up to a question of 9, three up to 17. Calibrated on
# the probe sets (recall@3 >= 0.95 kept, one-word near misses out): see docs/benchmarks.md.
MIN_RELEVANCE = 0.15
DEFAULT_FIELDS: tuple[str, ...] = ("query", "tags", "reflection")
MATCHABLE_FIELDS: tuple[str, ...] = ("query", "response", "tags", "reflection", "tools_used")

# weight = OUTCOME_WEIGHTS[intent][outcome] * SOURCE_WEIGHTS[source] (see docs/recall.md).
# Every factor compared below has to hold against the recency floor (0.8: the oldest episode
# keeps 0.8 of its score) and the largest reinforcement boost (1.2): a weight that must rank an
# episode below another of equal relevance whatever their ages and uses is less than
# 0.8 / 1.2 = 0.667 of it.
# Under an intent, the unwanted outcomes weigh less than that, so that the freshest, most used
# unwanted episode still ranks below the oldest, unused wanted one of equal relevance verified by
# the user (0.95 * 0.8 = 0.76 > 0.55 * 1.2 = 0.66); a wanted outcome the agent only claimed or a
# model judged (0.6, 0.57) ranks below a verified one the same way, and above every other outcome
# of the same age. ``claimed_success`` is a success the agent claimed: under "any" and
# "what_worked" its weight is a success's, times the agent's source weight; when failures are
# wanted, a success only claimed ranks above a verified one (it may be a failure nobody caught).
OUTCOME_WEIGHTS: dict[str, dict[str, float]] = {
    "any": {
        "success": 1.0,
        "claimed_success": 1.0,
        "partial": 1.0,
        "failure": 1.0,
        "abandoned": 1.0,
        "unknown": 1.0,
    },
    "what_failed": {
        "failure": 1.0,
        "abandoned": 0.55,
        "partial": 0.5,
        "unknown": 0.45,
        "claimed_success": 0.72,  # x0.6 (the agent's) = 0.43: between unknown and success
        "success": 0.4,
    },
    "what_worked": {
        "success": 1.0,
        "claimed_success": 1.0,
        "partial": 0.55,
        "unknown": 0.5,
        "abandoned": 0.45,
        "failure": 0.4,
    },
}
# The essay's order of outcome sources, under every intent: checked outside the agent (a
# verifier, then the user) ranks above whatever the agent claims or a model judges by more than
# age and uses can make up (0.6 < 0.95 * 0.667); within each pair the better source ranks first
# among episodes of the same age and uses (x0.95). No recorded source ("": older records,
# deepcrew-ai logs) ranks as verified, as such records always did (an unknown outcome has no
# source to weigh).
SOURCE_WEIGHTS: dict[str, float] = {
    "verifier": 1.0,
    "": 1.0,
    "user": 0.95,
    "agent": 0.6,
    "judge": 0.57,
}


@functools.lru_cache(maxsize=256)  # (few pairs: read for every episode a search scores)
def rank_key(outcome: str, source: str) -> str:
    """What an episode's outcome weight is looked up by: its outcome and where it came from.
    A ``success`` the agent or a model said is a claimed success (the block says so too), and
    ranks as one under every intent, however it was written down."""
    said = source_of(outcome, source)
    if outcome == "success" and said in ("agent", "judge"):
        outcome = "claimed_success"
    return f"{outcome}:{said}"


# The weight of every outcome from every source, under each intent (what the index looks up).
WEIGHTS: dict[str, dict[str, float]] = {
    intent: {
        f"{outcome}:{source}": weight * SOURCE_WEIGHTS[source]
        for outcome, weight in table.items()
        for source in SOURCE_WEIGHTS
    }
    for intent, table in OUTCOME_WEIGHTS.items()
}


def outcome_weight(intent: str, episode: Episode) -> float:
    """*episode*'s outcome weight under *intent* (its outcome times its source's weight)."""
    return WEIGHTS[intent].get(rank_key(episode.outcome, episode.outcome_source), 1.0)


# --- terms ------------------------------------------------------------------------------------

_STOPWORDS_TEXT = """
a about above after again against all also am an and any are as at be because been before being
below between both but by can could did do does doing down during each either else ever every
few for from further had has have having he her here hers herself him himself his how i if in
into is it its itself just let me might more most much must my myself no nor not now of off on
once only or other ought our ours ourselves out over own per same she should since so some such
than that the their theirs them themselves then there these they this those through thus to too
under until up upon us very via was we were what whatever when whenever where whether which
while who whom whose why will with within without would yet you your yours yourself yourselves
don doesn didn isn aren wasn weren hasn haven hadn won wouldn shouldn couldn cannot ll ve re
hi hello hey thanks thank please pls ok okay yes yeah anyone anything someone something
somebody everyone everything thing things stuff lot lots really quite maybe perhaps
many far little several various
get gets got getting make makes made let lets need needs want wants wanted tell told know
knew like see saw seen say said go goes going went come came try tried one two
aber als am an auch auf aus bei bis bitte da dann das dass dem den der des die doch du durch
ein eine einem einen einer eines er es fur hat hatte hatten ich ihr im in ist ja kann konnen
man mich mir mit nach nicht noch nur ob oder sich sie sind so um und uns unser unsere vom von
vor war was wenn wer wie wir wird wo zu zum zur
ai au aux avec ce ces cette dans de des du elle en est et etait ete etre il ils je la le les
leur lui ma mais me mes mon ne nos notre nous on ou par pas pour qu que qui sa se ses son sur
ta te tes toi ton tu un une vos votre vous
"""

# Letters that do not decompose into a base letter plus an accent.
_LIGATURES = str.maketrans(
    {"ø": "o", "æ": "ae", "œ": "oe", "ł": "l", "đ": "d", "ð": "d", "þ": "th", "\u0131": "i"}
)
_ASCII_WORD = re.compile(r"[a-z0-9]+")
_WORD = re.compile(r"[^\W_]+")
# Han, kana and CJK compatibility ideographs: scripts written without spaces between words.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_NOT_STEMMABLE = re.compile(r"[^a-z]")


def fold(text: str) -> str:
    """Case-fold, apply compatibility forms and strip accents: ``"Straße Ü"`` -> ``"strasse u"``."""
    if text.isascii():
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.casefold().translate(_LIGATURES))
    # Every combining mark goes, in every script: "Rückerstattung" meets "Ruckerstattung", and
    # marks inside Devanagari or Thai words do not split them into pieces.
    return "".join(c for c in decomposed if not unicodedata.category(c).startswith("M"))


_STOPWORDS = frozenset(fold(w) for w in _STOPWORDS_TEXT.split())


def words(text: str) -> list[str]:
    """The folded words of *text*, stopwords and one-character words included."""
    folded = fold(text)
    if folded.isascii():
        return _ASCII_WORD.findall(folded)
    found: list[str] = []
    for run in _CJK.findall(folded):
        found.extend(run[i : i + 2] for i in range(max(1, len(run) - 1)))
    found.extend(_WORD.findall(_CJK.sub(" ", folded)))
    return found


def terms(text: str) -> set[str]:
    """The matchable terms of *text*: folded words, stopwords and one-character words dropped,
    English words stemmed.

    >>> sorted(terms("Deploying the new deployments (Zürich)"))
    ['deploy', 'new', 'zurich']
    """
    found = set(map(_term, words(text)))
    found.discard("")
    return found


@functools.lru_cache(maxsize=1 << 17)
def _term(word: str) -> str:
    # "" for a stopword or a one-character word (a single Han character is a word, though)
    if word in _STOPWORDS or (len(word) < 2 and word.isascii()):
        return ""
    return stem(word)


# --- the stemmer ----------------------------------------------------------------------------
#
# Snowball's stemmers (the snowballstemmer package; it uses PyStemmer's C build when that is
# installed): English (Porter2) for ASCII words, and Russian, Greek or Arabic for words in those
# scripts. One addition to English: a stem ending in "ifi" loses its "i", so that notify /
# notified meet notification ("notif"). Words with digits, short words and other scripts pass
# through unchanged (Chinese and Japanese are matched by bigrams instead).

_NON_LATIN = (
    ("russian", re.compile(r"[\u0400-\u04ff]+")),
    ("greek", re.compile(r"[\u0370-\u03ff\u1f00-\u1fff]+")),
    ("arabic", re.compile(r"[\u0600-\u06ff]+")),
)


@functools.cache
def _stemmer(language: str) -> Callable[[str], str]:
    try:
        # The C build, when installed, straight: snowballstemmer would use it too, but its
        # package imports every language's pure-Python stemmer first (a first recall's
        # largest cost in a fresh process).
        import Stemmer  # type: ignore[import-not-found,unused-ignore]

        word: Callable[[str], str] = Stemmer.Stemmer(language).stemWord
    except ImportError:
        import snowballstemmer

        word = snowballstemmer.stemmer(language).stemWord
    return word


@functools.lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """The stem of one folded word.

    >>> [stem(w) for w in ("deploys", "deploying", "deployment", "configuration", "rotated")]
    ['deploy', 'deploy', 'deploy', 'configur', 'rotat']
    """
    if len(word) < 3:
        return word
    if word.isascii():
        if _NOT_STEMMABLE.search(word):
            return word
        stemmed = _stemmer("english")(word)
        return stemmed[:-1] if stemmed.endswith("ifi") and len(stemmed) > 4 else stemmed
    for language, script in _NON_LATIN:
        if script.fullmatch(word):
            return _stemmer(language)(word)
    return word


def episode_terms(episode: Episode, fields: Sequence[str]) -> frozenset[str]:
    """The terms of an episode's matched *fields*."""
    found: set[str] = set()
    for name in fields:
        value = getattr(episode, name)
        if value is None:
            continue
        if isinstance(value, list):
            for item in value:
                found |= terms(item)
        else:
            found |= terms(value)
    return frozenset(found)


# --- scores -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scored:
    """A recalled episode with its score and the reasons for it (see :meth:`why`).

    ``relevance`` is what the score was built from: the keyword part alone, or with an
    embedder ``keyword + meaning * (1 - keyword)``; ``similarity`` is the cosine similarity of
    the query and the episode (``None`` without an embedder, or for an episode with no vector
    yet) and ``meaning`` how far it stands above the query's similarity floor, from 0 to 1.
    ``uses`` is how many times the episode was used in runs (reinforcement: ``score`` includes
    its boost of at most 20%), ``iterations`` how many iterations its run had (recall shows one
    item per run: its latest iteration).

    Example::

        for hit in await memory.explain("refund a duplicate charge"):
            print(f"{hit.score:.3f} {hit.episode.query!r}: {hit.why()}")
    """

    episode: Episode
    score: float
    relevance: float
    recency: float
    outcome_weight: float
    matched: tuple[str, ...]
    age_days: float | None
    keyword: float = 0.0
    similarity: float | None = None
    meaning: float = 0.0
    uses: int = 0
    iterations: int = 1

    def why(self) -> str:
        """One line: the matched terms (stems), the keyword and meaning parts, recency and
        outcome weight."""
        age = f"{self.age_days:.0f}d" if self.age_days is not None else "undated"
        matched = f"matched {', '.join(self.matched)}" if self.matched else "no term matched"
        meaning = ""
        if self.similarity is not None:
            meaning = f" keyword={self.keyword:.2f} similarity={self.similarity:.2f} meaning={self.meaning:.2f}"
        extra = ""
        if self.uses:
            extra += f" used {self.uses}x"
        if self.iterations > 1:
            extra += f" run of {self.iterations} iterations"
        return (
            f"{matched}; relevance={self.relevance:.2f}{meaning} "
            f"recency={self.recency:.2f} (age {age}) "
            f"outcome={self.episode.outcome} x{self.outcome_weight:g}{extra}"
        )


class Ranking(list[Scored]):
    """What :meth:`~deepcrew_episodic.EpisodicMemory.explain` returns: the scored episodes,
    best first (a list), and how they were ranked.

    ``by`` is ``"keywords"`` (no embedder), ``"hybrid"`` (keywords and meaning), or
    ``"keywords-fallback"`` (the memory has an embedder but the query could not be embedded:
    ``embedder_error`` names why; the failure was logged and counted).

    ``min_relevance`` is the relevance floor the ranking applied, and ``under_floor`` the
    episodes that would have been among the top k without it, best first, each with its
    relevance (``relevance`` below ``min_relevance``): what the floor kept out of the prompt.
    """

    by: str = "keywords"
    embedder_error: str | None = None
    min_relevance: float = 0.0
    under_floor: tuple[Scored, ...] = ()


@dataclass(frozen=True, slots=True)
class Parts:
    """The keyword side of one episode's score for one query (for the hybrid ranking)."""

    keyword: float
    matched: tuple[str, ...]
    factor: float  # the recency factor the score is multiplied by
    recency: float
    age_days: float | None
    when: float
    outcome: str  # the outcome and its source (rank_key): what the weight is looked up by


def relevance(matched: int, query_size: int, episode_size: int, cap: int | None) -> float:
    """Jaccard ``m / (|Q| + |E| - m)`` with the episode's size capped at *cap* terms."""
    if matched <= 0:
        return 0.0
    size = episode_size if cap is None else max(matched, min(episode_size, cap))
    return matched / (query_size + size - matched)


@dataclass(slots=True)
class _Entry:
    episode: Episode
    terms: frozenset[str]
    size: int  # the length class: min(|E|, cap)
    when: float  # the POSIX timestamp; -inf when undated (sorts oldest)
    outcome: str  # the outcome and its source (rank_key): what the weight is looked up by


class _Bucket:
    """The episodes of one length class that hold one term, oldest first (ties by seq)."""

    __slots__ = ("seqs", "whens")

    def __init__(self) -> None:
        self.whens: list[float] = []
        self.seqs: list[int] = []

    def add(self, when: float, seq: int) -> None:
        whens = self.whens
        if not whens or when > whens[-1] or (when == whens[-1] and seq > self.seqs[-1]):
            whens.append(when)
            self.seqs.append(seq)
            return
        lo, hi = bisect_left(whens, when), bisect_right(whens, when)
        i = bisect_left(self.seqs, seq, lo, hi)
        whens.insert(i, when)
        self.seqs.insert(i, seq)

    def remove(self, when: float, seq: int) -> None:
        lo, hi = bisect_left(self.whens, when), bisect_right(self.whens, when)
        i = bisect_left(self.seqs, seq, lo, hi)
        if i < hi and self.seqs[i] == seq:
            del self.whens[i]
            del self.seqs[i]


_NEVER = -math.inf
# A search switches to counted bounds (see ``search``) after this many visits, or after as
# many as would cost the same as counting every posting of the query's terms (counting one
# posting is about this many times cheaper than visiting one).
_LONG_SCAN = 64
_COUNT_RATIO = 12


class SizedMatches(NamedTuple):
    """What a reader's optional ``sized_matches`` read answers: for every episode that holds
    one of the query's terms, how many of them it holds and its length class (the least one
    its postings name, clamped to 0..15: a class edited out of range reads lower, which only
    raises a bound). Three numpy arrays of one length, in seq order (a search by meaning
    reads it, and numpy is its dependency: thousands of episodes cost no Python object)."""

    seqs: Any  # int64, increasing
    held: Any  # int64
    sizes: Any  # int64

    @classmethod
    def from_codes(cls, codes: Any) -> SizedMatches:
        """From one ``seq * 16 + class`` per posting (an int64 array, any order)."""
        import numpy as np

        codes = np.sort(codes)
        seqs = codes >> 4
        starts = np.flatnonzero(np.concatenate(([True], seqs[1:] != seqs[:-1])))
        if not len(codes):
            starts = starts[:0]
        # Sorted: the first code of a seq carries its least class.
        return cls(seqs[starts], np.diff(np.append(starts, len(codes))), (codes & 15)[starts])

    def counted(self) -> Counter[int]:
        """seq -> how many of the terms it holds (what ``matches`` answers)."""
        return Counter(dict(zip(self.seqs.tolist(), self.held.tolist(), strict=True)))


class Postings:
    """The exact top-k search over postings, wherever they are kept (see the module doc).

    A subclass provides ``_entries`` (seq -> its entry: ``terms``, ``size``, ``when``,
    ``outcome`` and ``episode``), ``_postings`` (term -> length class -> bucket: ``whens``
    and ``seqs``, oldest first, read from the newest end) and ``_df`` (term -> how many
    episodes hold it). :class:`RecallIndex` keeps them in this process; a store that keeps
    the index reads what a query touches through the same mappings, lazily, so both return
    the same episodes with the same scores.
    """

    fields: tuple[str, ...]
    length_cap: int | None
    recency_weight: float
    _entries: Mapping[int, _Entry]
    _postings: Mapping[str, Mapping[int, _Bucket]]
    _df: Mapping[str, int]
    # How many postings counting costs as much as one visit (see _COUNT_RATIO).
    _count_ratio: int = _COUNT_RATIO

    def _prepare(self, q_terms: frozenset[str] | set[str]) -> None:
        """Make the postings of *q_terms* readable (a store reads their counts here)."""

    def _ahead(self, seqs: Sequence[int]) -> None:
        """*seqs* are about to be scored one by one (a store reads their entries in one trip)."""

    def _count(self, ordered: Sequence[str]) -> Counter[int]:
        """How many of the terms *ordered* each episode that holds one of them holds."""
        counts: Counter[int] = Counter()
        postings = self._postings
        for t in ordered:
            counts.update(chain.from_iterable(b.seqs for b in postings[t].values()))
        return counts

    def _most(self, term: str, size: int, counts: Counter[int], seqs: Sequence[int]) -> int:
        """The most query terms an episode of the class *size* of *term* holds, by *counts*
        (those of the search's terms; *seqs*: the class's postings)."""
        return max(map(counts.__getitem__, seqs))

    def _sized_count(self, ordered: Sequence[str]) -> SizedMatches | None:
        """How many of the terms *ordered* each episode holding one holds, and its length
        class, from the postings alone (``None``: not known so)."""
        return None

    def _ranked(self, seqs: Sequence[int]) -> dict[int, tuple[float, str, bool]] | None:
        """seq -> (the time it ranks by, its recorded outcome as ``rank_key``, whether grades
        name it) of the indexed episodes among *seqs* in view (``None``: not read so)."""
        return None

    def parts(
        self, seq: int, q_terms: frozenset[str] | set[str], *, now: float, half_life_days: float
    ) -> Parts:
        """The keyword relevance and recency of one indexed episode for the query terms
        *q_terms*, exactly as :meth:`search` computes them."""
        entry = self._entries[seq]
        hit = q_terms & entry.terms
        rw = self.recency_weight
        when = entry.when
        if when == _NEVER:
            age, recency = None, 0.0
        else:
            age = max(0.0, now - when) / 86400.0
            recency = math.pow(0.5, age / half_life_days)
        return Parts(
            relevance(len(hit), len(q_terms), entry.size, self.length_cap),
            tuple(sorted(hit)),
            1.0 - rw + rw * recency,
            recency,
            age,
            when,
            entry.outcome,
        )

    def score(
        self,
        seq: int,
        query: str,
        *,
        now: float,
        intent: str = "any",
        half_life_days: float = HALF_LIFE_DAYS,
    ) -> Scored | None:
        """One indexed episode scored for *query* as :meth:`search` scores it (``None``: it
        shares no term with the query, or is not indexed)."""
        entry = self._entries.get(seq)
        if entry is None:
            return None
        parts = self.parts(seq, terms(query), now=now, half_life_days=half_life_days)
        if parts.keyword <= 0.0:
            return None
        weight = WEIGHTS[intent].get(entry.outcome, 1.0)
        return Scored(
            entry.episode,
            parts.keyword * parts.factor * weight,
            parts.keyword,
            parts.recency,
            weight,
            parts.matched,
            parts.age_days,
            keyword=parts.keyword,
        )

    def search(
        self,
        query: str,
        k: int,
        *,
        now: float,
        intent: str = "any",
        half_life_days: float = HALF_LIFE_DAYS,
        since: float | None = None,
        accept: Callable[[int], bool] | None = None,
        min_relevance: float = 0.0,
        under: list[tuple[int, Scored]] | None = None,
        least: float = 0.0,
        only: Collection[str] | None = None,
        among: Callable[[int], bool] | None = None,
        scored: bool = True,
    ) -> list[tuple[int, Scored]]:
        """The *k* best episodes sharing a term with *query*, best first (ties: newest first).

        *since* drops episodes older than that POSIX time (and undated ones); *accept*, when
        given, is asked about a candidate only when it would enter the top *k*.
        *min_relevance* drops episodes whose relevance is below it (the floor), which changes
        nothing about the others: the result is the top *k* of the episodes at or above it.
        When *under* is given (and the floor above zero), the episodes that would have been in
        the top *k* without the floor are appended to it, best first.

        The search can be narrowed to part of the episodes (the hybrid ranking's candidate
        streams, see _vectors.py), each a filter that changes nothing about the others:
        *least* drops episodes whose relevance is below it, under the floor or not (with
        *least* above the floor, nothing is reported under it but what is at or above
        *least*); *only* keeps the episodes that hold one of these query terms (only their
        postings are read); *among* keeps the seqs it accepts, asked before anything else is
        read of them.

        With *scored* false, each episode comes as ``(seq, score)`` only (here and in *under*),
        and its record is not read (the hybrid ranking scores them itself).
        """
        q_terms = terms(query)
        if not q_terms or k <= 0:
            return []
        self._prepare(q_terms)
        weights = WEIGHTS[intent]
        w_max = max(weights.values())
        rw = self.recency_weight
        floor = 1.0 - rw
        decay = math.log(2.0) / (half_life_days * 86400.0)
        cap = self.length_cap
        q = len(q_terms)
        cutoff = _NEVER if since is None else since

        def bound(size: int, most: int) -> float:
            # the best relevance an episode of this length class can reach matching <= most
            mm = most if cap is not None and size >= cap else min(most, size)
            return mm / (q + max(mm, size) - mm)

        # min-heap of (score, when, seq, matched); its root is the k-th best so far
        top: list[tuple[float, float, int, frozenset[str]]] = []
        # With a floor and *under*: the same heap without the floor (theta_all its k-th
        # score); an episode under the floor is looked at only while it could enter this one.
        floor_at = min_relevance
        every: list[tuple[float, float, int, frozenset[str]]] | None = (
            [] if under is not None and floor_at > 0.0 else None
        )
        theta_all = 0.0

        def useless(rel: float, best: float) -> bool:
            # Nothing at most this relevant, scoring at most *best*, can enter a heap.
            if best < theta or rel < least:
                return True
            return rel < floor_at and (every is None or best < theta_all)

        seen: set[int] = set()
        entries = self._entries
        postings = self._postings
        exp = math.exp
        ordered = sorted((t for t in q_terms if t in postings), key=self._df.__getitem__)
        scanned = len(ordered)
        if only is not None:
            # Their postings first (rarest first): an episode first met in a later term's
            # postings holds none of them, so the scan stops there.
            ordered = [t for t in ordered if t in only] + [t for t in ordered if t not in only]
            scanned = sum(1 for t in ordered if t in only)
        # How many query terms each candidate matches, counted at C speed over the postings,
        # but only once a scan turns out long: the bounds above assume an unseen episode
        # matches every remaining term, which is loose for long questions and for runs of
        # episodes that all match the same few terms.
        counts: Counter[int] | None = None
        most_matched = len(ordered)
        count_after = max(_LONG_SCAN, sum(map(self._df.__getitem__, ordered)) // self._count_ratio)
        visited = 0
        theta = 0.0
        for j, term in enumerate(ordered):
            if j >= scanned:
                break
            # An episode first met here holds none of the rarer terms already scanned in full
            # (or scanned until nothing left there could beat the k-th best): it matches at
            # most the terms from here on.
            most = min(len(ordered) - j, most_matched)
            if useless(most / q, most / q * w_max):
                break
            buckets = postings[term]
            for size in sorted(buckets, key=lambda s: -bound(s, most)):
                rel_most = bound(size, most)
                rel_bound = rel_most * w_max
                if useless(rel_most, rel_bound):
                    # not break: the classes were sorted by their bounds for the `most` the
                    # term began with, and counting may lower it mid-term, which reorders them
                    continue
                bucket = buckets[size]
                whens, seqs = bucket.whens, bucket.seqs
                i = len(seqs) - 1
                if counts is not None and i >= _LONG_SCAN:
                    rel_most = bound(size, min(most, self._most(term, size, counts, seqs)))
                    rel_bound = rel_most * w_max
                while i >= 0:
                    when = whens[i]
                    if when < cutoff:
                        break
                    # recency factor; exp(-inf) = 0 puts an undated episode at the floor
                    f = floor + rw * exp(decay * (min(when, now) - now))
                    best = rel_bound * f
                    if (
                        best < theta
                        or rel_most < least
                        or (rel_most < floor_at and (every is None or best < theta_all))
                    ):
                        break
                    seq = seqs[i]
                    i -= 1
                    visited += 1
                    if counts is None:
                        # Ski rental: count once the visits so far cost as much as counting.
                        if visited >= count_after:
                            counts = self._count(ordered)
                            most_matched = max(counts.values())
                            most = min(most, most_matched)
                            rest = max(map(counts.__getitem__, seqs[: i + 1]), default=0)
                            rel_most = bound(size, min(most, rest))
                            rel_bound = rel_most * w_max
                    elif theta or floor_at or least:
                        m = counts[seq]
                        rel = m / (q + max(m, size) - m)
                        if useless(rel, rel * f * w_max):
                            continue
                    if seq in seen:
                        continue
                    seen.add(seq)
                    if among is not None and not among(seq):
                        continue
                    entry = entries.get(seq)
                    if entry is None:
                        continue  # kept by a store, outside this memory's view of the ring
                    hit = q_terms & entry.terms
                    m = len(hit)
                    rel = m / (q + max(m, size) - m)
                    if rel < least:
                        continue
                    score = rel * f * weights[entry.outcome]
                    kept = rel >= floor_at
                    wanted_here = kept and (len(top) < k or (score, when, seq) > top[0][:3])
                    wanted_all = every is not None and (
                        len(every) < k or (score, when, seq) > every[0][:3]
                    )
                    if not (wanted_here or wanted_all):
                        continue
                    if accept is not None and not accept(seq):
                        continue
                    item = (score, when, seq, frozenset(hit))
                    if wanted_all and every is not None:
                        if len(every) >= k:
                            heapq.heapreplace(every, item)
                        else:
                            heapq.heappush(every, item)
                        if len(every) >= k:
                            theta_all = every[0][0]
                    if not wanted_here:
                        continue
                    if len(top) >= k:
                        heapq.heapreplace(top, item)
                        theta = top[0][0]
                    else:
                        heapq.heappush(top, item)
                        if len(top) >= k:
                            theta = top[0][0]
        if every is not None and under is not None:
            under.extend(
                self._scored(t, q, now, weights, half_life_days) if scored else (t[2], t[0])  # type: ignore[misc]
                for t in sorted(every, key=lambda t: t[:3], reverse=True)
                if relevance(len(t[3]), q, entries[t[2]].size, cap) < floor_at
            )
        ranked = sorted(top, key=lambda t: t[:3], reverse=True)
        if not scored:
            return [(t[2], t[0]) for t in ranked]  # type: ignore[misc]
        return [self._scored(t, q, now, weights, half_life_days) for t in ranked]

    def _scored(
        self,
        item: tuple[float, float, int, frozenset[str]],
        q: int,
        now: float,
        weights: dict[str, float],
        half_life_days: float,
    ) -> tuple[int, Scored]:
        score, when, seq, matched = item
        entry = self._entries[seq]
        age = None if when == _NEVER else max(0.0, now - when) / 86400.0
        recency = 0.0 if age is None else math.pow(0.5, age / half_life_days)
        rel = relevance(len(matched), q, entry.size, self.length_cap)
        return (
            seq,
            Scored(
                entry.episode,
                score,
                rel,
                recency,
                weights.get(entry.outcome, 1.0),
                tuple(sorted(matched)),
                age,
                keyword=rel,
            ),
        )


class RecallIndex(Postings):
    """An inverted index over the cached episodes, updated incrementally.

    ``add`` and ``remove`` follow the log's cache; ``search`` returns the exact top k without
    scoring every episode that shares a term with the query.
    """

    def __init__(
        self,
        fields: Sequence[str] = DEFAULT_FIELDS,
        *,
        length_cap: int | None = LENGTH_CAP,
        recency_weight: float = RECENCY_WEIGHT,
    ) -> None:
        unknown = [f for f in fields if f not in MATCHABLE_FIELDS]
        if isinstance(fields, str) or unknown or not fields:
            raise ValueError(
                f"recall fields must be a non-empty subset of {MATCHABLE_FIELDS}, got {fields!r}"
            )
        if length_cap is not None and length_cap < 1:
            raise ValueError(f"length_cap must be >= 1 or None, not {length_cap!r}")
        if not 0.0 <= recency_weight <= 1.0:
            raise ValueError(f"recency_weight must be in [0, 1], not {recency_weight!r}")
        self.fields = tuple(fields)
        self.length_cap = length_cap
        self.recency_weight = recency_weight
        self._entries: dict[int, _Entry] = {}
        # term -> length class -> bucket
        self._postings: dict[str, dict[int, _Bucket]] = {}
        self._df: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, seq: object) -> bool:
        return seq in self._entries

    def seqs(self) -> KeysView[int]:
        """The seqs of the indexed episodes."""
        return self._entries.keys()

    def episode(self, seq: int) -> Episode:
        return self._entries[seq].episode

    def when(self, seq: int) -> float:
        """The time *seq* ranks by (-inf: undated)."""
        return self._entries[seq].when

    def reset(self) -> None:
        self._entries.clear()
        self._postings.clear()
        self._df.clear()

    def add(self, seq: int, episode: Episode, *, when: float | None = None) -> None:
        """Index *episode*; *when* is its time for recency (default: its timestamp; ``None``
        or -inf: undated, ranked oldest)."""
        if seq in self._entries:
            self.remove(seq)
        found = episode_terms(episode, self.fields)
        if when is None:
            try:
                when = episode.time()
            except ValueError:
                when = None
        size = len(found) if self.length_cap is None else min(len(found), self.length_cap)
        key = rank_key(episode.outcome, episode.outcome_source)
        entry = _Entry(episode, found, size, _NEVER if when is None else when, key)
        self._entries[seq] = entry
        postings, df, when_ = self._postings, self._df, entry.when
        for term in found:
            buckets = postings.get(term)
            if buckets is None:
                buckets = postings[term] = {}
            bucket = buckets.get(size)
            if bucket is None:
                bucket = buckets[size] = _Bucket()
            whens = bucket.whens
            if not whens or when_ > whens[-1]:  # the usual case: the newest episode so far
                whens.append(when_)
                bucket.seqs.append(seq)
            else:
                bucket.add(when_, seq)
            df[term] = df.get(term, 0) + 1

    def remove(self, seq: int) -> None:
        entry = self._entries.pop(seq, None)
        if entry is None:
            return
        for term in entry.terms:
            buckets = self._postings[term]
            bucket = buckets[entry.size]
            bucket.remove(entry.when, seq)
            if not bucket.seqs:
                del buckets[entry.size]
                if not buckets:
                    del self._postings[term]
            left = self._df[term] - 1
            if left:
                self._df[term] = left
            else:
                del self._df[term]
