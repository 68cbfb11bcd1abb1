"""Check the held-out recall probe.

For every "paraphrase" query, no content-word stem may be shared with the query, response,
tags or reflection of any episode it lists as relevant. Tokens: lower-cased text split on
anything that is not a letter or digit; tokens of one character and common English stopwords
are dropped; the rest are stemmed with snowballstemmer's English stemmer.

Also checks the structure: unique keys, known kinds, every listed key exists, counts.
Prints every problem and exits 1 if there is any.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import snowballstemmer

HERE = Path(__file__).resolve().parent
STEM = snowballstemmer.stemmer("english")
# NLTK's English stopword list.
STOPWORDS = frozenset(
    """i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself
    yourselves he him his himself she she's her hers herself it it's its itself they them their
    theirs themselves what which who whom this that that'll these those am is are was were be
    been being have has had having do does did doing a an the and but if or because as until
    while of at by for with about against between into through during before after above below
    to from up down in out on off over under again further then once here there when where why
    how all any both each few more most other some such no nor not only own same so than too
    very s t can will just don don't should should've now d ll m o re ve y ain aren aren't
    couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't ma
    mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't weren
    weren't won won't wouldn wouldn't""".split()
)
TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


def stems(text: str) -> set[str]:
    words = [w for w in TOKEN.findall(text.lower()) if len(w) > 1 and w not in STOPWORDS]
    return set(STEM.stemWords(words))


def episode_stems(ep: dict) -> set[str]:
    parts = [ep.get("query", ""), ep.get("response", ""), ep.get("reflection") or ""]
    parts += ep.get("tags", [])
    return stems(" ".join(parts))


def main() -> int:
    problems: list[str] = []
    episodes: dict[str, dict] = {}
    for n, line in enumerate((HERE / "episodes.jsonl").read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        obj = json.loads(line)
        key = obj["key"]
        if key in episodes:
            problems.append(f"episodes.jsonl:{n}: duplicate key {key}")
        if not (isinstance(obj.get("age_days"), int) and 0 <= obj["age_days"] <= 400):
            problems.append(f"{key}: age_days must be an int in 0..400")
        episodes[key] = obj["episode"]
    queries = json.loads((HERE / "queries.json").read_text(encoding="utf-8"))
    ids: set[str] = set()
    counts: dict[str, int] = {}
    for q in queries:
        qid, kind = q["id"], q["kind"]
        if qid in ids:
            problems.append(f"duplicate query id {qid}")
        ids.add(qid)
        counts[kind] = counts.get(kind, 0) + 1
        if kind not in ("paraphrase", "near-miss", "unrelated"):
            problems.append(f"{qid}: unknown kind {kind!r}")
        listed = list(q["relevant"]) + list(q.get("decoys", []))
        if q.get("first") is not None:
            listed.append(q["first"])
            if q["first"] not in q["relevant"]:
                problems.append(f"{qid}: first {q['first']} is not in relevant")
        for key in listed:
            if key not in episodes:
                problems.append(f"{qid}: unknown episode key {key}")
        if kind == "paraphrase":
            if not q["relevant"]:
                problems.append(f"{qid}: a paraphrase needs relevant episodes")
            n_words = len(q["query"].split())
            if not 4 <= n_words <= 20:
                problems.append(f"{qid}: {n_words} words (want 4..20)")
            mine = stems(q["query"])
            for key in q["relevant"]:
                if key in episodes:
                    shared = mine & episode_stems(episodes[key])
                    if shared:
                        problems.append(f"{qid} shares stems with {key}: {sorted(shared)}")
        elif kind == "near-miss":
            if not q.get("decoys"):
                problems.append(f"{qid}: a near-miss needs decoys")
            mine = stems(q["query"])
            for key in q.get("decoys", []):
                if key in episodes and not mine & episode_stems(episodes[key]):
                    problems.append(f"{qid}: shares no stem with its decoy {key}")
        elif q["relevant"]:
            problems.append(f"{qid}: an unrelated query must have no relevant episodes")
    for problem in problems:
        print(problem)
    print(f"{len(episodes)} episodes; queries: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print("FAIL" if problems else "OK: no paraphrase shares a content stem with its targets")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
