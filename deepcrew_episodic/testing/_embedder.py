"""A small deterministic embedder for the conformance suite: words that mean the same thing
share a dimension, so paraphrases meet without sharing a word, and nothing is downloaded."""

from __future__ import annotations

import hashlib
import math
import re

__all__ = ["CONCEPT_EPISODES", "ConceptEmbedder"]

# Each group is one meaning; a word outside every group gets a hashed dimension of its own.
_CONCEPTS: tuple[frozenset[str], ...] = (
    frozenset({"charged", "billed", "payment", "taken", "paid", "charge"}),
    frozenset({"twice", "double", "two", "times", "duplicate"}),
    frozenset({"login", "sign", "signin", "logon", "authenticate"}),
    frozenset({"broken", "fails", "failing", "error", "cannot"}),
    frozenset({"outage", "down", "unreachable", "offline"}),
    frozenset({"website", "site", "page", "homepage"}),
    frozenset({"customer", "client", "user", "buyer"}),
)

#: Episodes the suite records; the paraphrase "payment taken two times" means the first one.
CONCEPT_EPISODES: tuple[str, ...] = (
    "customer billed double",
    "login broken after password reset",
    "website outage in the morning",
    "rotate the database credentials",
)

_WORD = re.compile(r"[a-z0-9]+")


class ConceptEmbedder:
    """An :class:`~deepcrew_episodic.Embedder` for tests. Set :attr:`failure` to make the next
    calls fail: ``"raise"``, ``"wrong-count"``, ``"nan"``, ``"zero"`` or ``"dimension"``."""

    dimension = 1024

    def __init__(self, name: str = "concepts") -> None:
        self.name = name
        self.failure: str | None = None
        self.calls: list[list[str]] = []

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.failure == "raise":
            raise RuntimeError("embedding service unavailable")
        if self.failure == "wrong-count":
            return [self._vector(t) for t in texts[1:]]
        vectors = [self._vector(t) for t in texts]
        if self.failure == "nan":
            vectors[0][0] = math.nan
        elif self.failure == "zero":
            vectors[0] = [0.0] * self.dimension
        elif self.failure == "dimension":
            vectors = [[*v, 0.5] for v in vectors]
        return vectors

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dimension
        for word in _WORD.findall(text.lower()):
            for i, group in enumerate(_CONCEPTS):
                if word in group:
                    vector[i] += 1.0
                    break
            else:
                digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
                slot = len(_CONCEPTS) + int.from_bytes(digest) % (self.dimension - len(_CONCEPTS))
                vector[slot] += 1.0
        if not any(vector):
            vector[-1] = 1.0
        return vector
