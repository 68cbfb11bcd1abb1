"""Ranking: which past episodes are relevant to a new query, and why.

The score of an episode for a query is

    relevance = |Q & E| / |Q | E|                       (Jaccard over terms)
    score     = relevance * (1 - RECENCY_WEIGHT + RECENCY_WEIGHT * recency) * outcome_weight

where ``Q`` is the set of terms of the query, ``E`` the terms of the episode's matched fields
(query, tags and reflection by default), ``recency = 0.5 ** (age_days / half_life_days)``.
Recency is a tie-break bounded below by a floor, so an old episode that is the only relevant
one still surfaces, and an episode with no term in common is never returned.

An inverted index (term -> episodes) is kept up to date incrementally, so a recall touches
only the episodes that share a term with the query.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from ._episode import Episode

__all__ = ["Intent", "RecallIndex", "Scored", "terms"]

Intent = Literal["any", "what_failed", "what_worked"]
INTENTS: tuple[str, ...] = ("any", "what_failed", "what_worked")

RECENCY_WEIGHT = 0.2
HALF_LIFE_DAYS = 30.0
DEFAULT_FIELDS: tuple[str, ...] = ("query", "tags", "reflection")
MATCHABLE_FIELDS: tuple[str, ...] = ("query", "response", "tags", "reflection", "tools_used")

# Outcome weights stay close to 1 so that they reorder equally relevant episodes and never
# make an unrelated one win.
OUTCOME_WEIGHTS: dict[str, dict[str, float]] = {
    "any": {"success": 1.0, "partial": 1.0, "failure": 1.0, "unknown": 1.0},
    "what_failed": {"failure": 1.0, "partial": 0.97, "unknown": 0.95, "success": 0.9},
    "what_worked": {"success": 1.0, "partial": 0.97, "unknown": 0.95, "failure": 0.9},
}


def _fold(text: str) -> str:
    """Case-fold and strip accents, so "Rückerstattung" and "ruckerstattung" meet."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "being",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "for",
        "from",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "my",
        "no",
        "nor",
        "not",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "our",
        "ours",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "please",
        "need",
        "want",
        "get",
        "got",
        "der",
        "die",
        "das",
        "und",
        "oder",
        "ist",
        "sind",
        "ein",
        "eine",
        "einen",
        "dem",
        "den",
        "des",
        "mit",
        "von",
        "zu",
        "im",
        "in",
        "auf",
        "für",
        "nicht",
        "wie",
        "ich",
        "wir",
        "sie",
        "es",
        "le",
        "la",
        "les",
        "un",
        "une",
        "des",
        "et",
        "ou",
        "est",
        "sont",
        "de",
        "du",
        "au",
        "aux",
        "pour",
        "par",
        "avec",
        "dans",
        "sur",
        "pas",
        "comment",
        "je",
        "nous",
        "vous",
        "il",
        "elle",
    ]
)
_STOPWORDS = frozenset(_fold(w) for w in _STOPWORDS)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


# A light English suffix stripper (in the spirit of Porter step 1 and 2, much smaller).
# It only needs to be consistent: query and episode terms go through the same function.
_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("ational", "ate"),
    ("ization", "ize"),
    ("fulness", "ful"),
    ("iveness", "ive"),
    ("ations", "ate"),
    ("ation", "ate"),
    ("ements", ""),
    ("ement", ""),
    ("ments", ""),
    ("ment", ""),
    ("ings", ""),
    ("ing", ""),
    ("ies", "y"),
    ("ied", "y"),
    ("edly", ""),
    ("ed", ""),
    ("ers", ""),
    ("er", ""),
    ("es", ""),
    ("s", ""),
)


def stem(word: str) -> str:
    if len(word) <= 3 or word.isdigit():
        return word
    for suffix, replacement in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "s" and word.endswith(("ss", "us", "is")):
                return word
            if suffix == "es" and not word.endswith(("ches", "shes", "xes", "sses", "zes")):
                # "releases" -> "release" -> handled by "s"; keep the e
                continue
            base = word[: len(word) - len(suffix)] + replacement
            if len(base) >= 2 and base[-1] == base[-2] and base[-1] not in "lsz":
                base = base[:-1]  # "running" -> "runn" -> "run"
            if base.endswith("e") and len(base) > 4:
                base = base[:-1]
            return base
    if word.endswith("e") and len(word) > 4:
        return word[:-1]
    return word


def terms(text: str) -> set[str]:
    """The matchable terms of *text*: folded, split on punctuation, stopwords dropped, stemmed."""
    out = set()
    for word in _WORD.findall(_fold(text)):
        if len(word) < 2 or word in _STOPWORDS:
            continue
        out.add(stem(word))
    return out


def episode_terms(episode: Episode, fields: Sequence[str]) -> set[str]:
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
    return found


@dataclass(frozen=True)
class Scored:
    """A recalled episode with its score and the reasons for it."""

    episode: Episode
    score: float
    relevance: float
    recency: float
    outcome_weight: float
    matched: tuple[str, ...]
    age_days: float | None

    def why(self) -> str:
        age = f"{self.age_days:.0f}d" if self.age_days is not None else "undated"
        return (
            f"matched {', '.join(self.matched)}; jaccard={self.relevance:.2f} "
            f"recency={self.recency:.2f} (age {age}) "
            f"outcome={self.episode.outcome} x{self.outcome_weight:g}"
        )


class RecallIndex:
    """An inverted index over cached episodes, updated incrementally."""

    def __init__(self, fields: Sequence[str] = DEFAULT_FIELDS) -> None:
        unknown = [f for f in fields if f not in MATCHABLE_FIELDS]
        if unknown or not fields:
            raise ValueError(
                f"recall fields must be a non-empty subset of {MATCHABLE_FIELDS}, got {fields!r}"
            )
        self.fields = tuple(fields)
        self._postings: dict[str, set[int]] = {}
        self._terms: dict[int, frozenset[str]] = {}
        self._episodes: dict[int, Episode] = {}
        self._times: dict[int, float | None] = {}

    def __len__(self) -> int:
        return len(self._episodes)

    def reset(self) -> None:
        self._postings.clear()
        self._terms.clear()
        self._episodes.clear()
        self._times.clear()

    def add(self, seq: int, episode: Episode) -> None:
        if seq in self._episodes:
            self.remove(seq)
        found = frozenset(episode_terms(episode, self.fields))
        self._terms[seq] = found
        self._episodes[seq] = episode
        try:
            self._times[seq] = episode.time()
        except ValueError:
            self._times[seq] = None
        for term in found:
            self._postings.setdefault(term, set()).add(seq)

    def remove(self, seq: int) -> None:
        for term in self._terms.pop(seq, ()):
            bucket = self._postings.get(term)
            if bucket is not None:
                bucket.discard(seq)
                if not bucket:
                    del self._postings[term]
        self._episodes.pop(seq, None)
        self._times.pop(seq, None)

    def search(
        self,
        query: str,
        *,
        now: float,
        intent: str = "any",
        half_life_days: float = HALF_LIFE_DAYS,
        keep: Iterable[int] | None = None,
    ) -> list[tuple[int, Scored]]:
        """Every episode sharing a term with *query*, best first (ties: newest first).

        *keep*, when given, restricts the candidates to those sequence numbers.
        """
        weights = OUTCOME_WEIGHTS[intent]
        q = terms(query)
        if not q:
            return []
        hits: dict[int, list[str]] = {}
        for term in q:
            for seq in self._postings.get(term, ()):
                hits.setdefault(seq, []).append(term)
        allowed = set(keep) if keep is not None else None
        ranked: list[tuple[float, int, Scored]] = []
        for seq, matched in hits.items():
            if allowed is not None and seq not in allowed:
                continue
            e_terms = self._terms[seq]
            relevance = len(matched) / (len(q) + len(e_terms) - len(matched))
            when = self._times[seq]
            if when is None:
                age, recency = None, 0.0
            else:
                age = max(0.0, (now - when) / 86400.0)
                recency = math.pow(0.5, age / half_life_days)
            episode = self._episodes[seq]
            weight = weights.get(episode.outcome, 1.0)
            score = relevance * (1 - RECENCY_WEIGHT + RECENCY_WEIGHT * recency) * weight
            scored = Scored(episode, score, relevance, recency, weight, tuple(sorted(matched)), age)
            ranked.append((score, seq, scored))
        ranked.sort(key=lambda t: (t[0], t[1]), reverse=True)
        return [(seq, s) for _, seq, s in ranked]
