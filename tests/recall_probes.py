"""The recall probe set (``tests/probes/``) and the checks run on it.

Shared by ``tests/test_recall_quality.py`` and ``bench/recall_quality.py``. A recall function
takes a probe and returns the keys of the episodes it recalls, best first; :func:`evaluate`
turns its answers into recall@3, MRR and the list of what went wrong, and :func:`problems`
says which floors a report misses.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deepcrew_episodic import Episode
from deepcrew_episodic._episode import now_iso

PROBES = Path(__file__).parent / "probes"
RECALL_AT_3_FLOOR = 0.9
DEPTH = 10  # MRR looks this deep


@dataclass(frozen=True)
class Probe:
    id: str
    kind: str
    query: str
    relevant: frozenset[str]
    first: str | None
    intent: str
    decoys: frozenset[str] = frozenset()  # near misses: episodes that share words, not meaning

    @property
    def unrelated(self) -> bool:
        return self.kind == "unrelated"

    @property
    def labelled(self) -> bool:
        return self.kind not in ("unrelated", "near-miss")


PARAPHRASES = PROBES / "paraphrase"  # queries worded unlike their targets (recall by meaning)
# A second paraphrase probe, written blind (without the ranking code or the first probe): the
# ranking is calibrated on PARAPHRASES and reported on this one.
HELDOUT = PROBES / "heldout"


def load_probes(folder: Path = PROBES) -> list[Probe]:
    raw: list[dict[str, Any]] = json.loads((folder / "queries.json").read_text("utf-8"))
    return [
        Probe(
            q["id"],
            q["kind"],
            q["query"],
            frozenset(q["relevant"]),
            q["first"],
            q["intent"],
            frozenset(q.get("decoys", ())),
        )
        for q in raw
    ]


def load_episodes(now: float, folder: Path = PROBES) -> list[tuple[str, Episode]]:
    """``(key, episode)`` pairs stamped relative to *now*, oldest first (the order a log
    would have recorded them in)."""
    rows = [
        json.loads(line)
        for line in (folder / "episodes.jsonl").read_text("utf-8").splitlines()
        if line.strip()
    ]
    rows.sort(key=lambda r: -r["age_days"])
    return [
        (
            r["key"],
            Episode(**r["episode"], id=r["key"], timestamp=now_iso(now - r["age_days"] * 86400)),
        )
        for r in rows
    ]


RecallFn = Callable[[Probe], Awaitable[list[str]]]


@dataclass
class Report:
    recall_at_3: float = 0.0
    mrr: float = 0.0
    labelled: int = 0
    unrelated: int = 0
    unrelated_recalled: dict[str, list[str]] = field(default_factory=dict)
    near_misses: int = 0
    near_misses_recalled: dict[str, list[str]] = field(default_factory=dict)
    decoy_queries: int = 0  # near misses that name decoys
    decoys_in_top3: dict[str, list[str]] = field(default_factory=dict)
    misses: dict[str, list[str]] = field(default_factory=dict)  # top 3 without a relevant one
    wrong_first: dict[str, str | None] = field(default_factory=dict)
    by_kind: dict[str, tuple[float, float, int]] = field(default_factory=dict)  # r@3, mrr, n


async def evaluate(recall: RecallFn, probes: list[Probe]) -> Report:
    report = Report()
    kinds: dict[str, list[tuple[float, float]]] = {}
    for probe in probes:
        got = (await recall(probe))[:DEPTH]
        if probe.unrelated:
            report.unrelated += 1
            if got:
                report.unrelated_recalled[probe.id] = got
            continue
        if not probe.labelled:
            report.near_misses += 1
            if got:
                report.near_misses_recalled[probe.id] = got
            if probe.decoys:
                report.decoy_queries += 1
                if probe.decoys & set(got[:3]):
                    report.decoys_in_top3[probe.id] = got[:3]
            continue
        top3 = got[:3]
        r3 = len(probe.relevant & set(top3)) / min(3, len(probe.relevant))
        rank = next((i for i, key in enumerate(got, 1) if key in probe.relevant), None)
        rr = 1.0 / rank if rank else 0.0
        kinds.setdefault(probe.kind, []).append((r3, rr))
        if not probe.relevant & set(top3):
            report.misses[probe.id] = top3
        if probe.first is not None and (not got or got[0] != probe.first):
            report.wrong_first[probe.id] = got[0] if got else None
    scores = [s for rows in kinds.values() for s in rows]
    report.labelled = len(scores)
    if scores:
        report.recall_at_3 = sum(r for r, _ in scores) / len(scores)
        report.mrr = sum(m for _, m in scores) / len(scores)
    report.by_kind = {
        kind: (sum(r for r, _ in rows) / len(rows), sum(m for _, m in rows) / len(rows), len(rows))
        for kind, rows in sorted(kinds.items())
    }
    return report


def problems(report: Report) -> list[str]:
    """What keeps *report* from passing the floors (empty: it passes)."""
    found = []
    if report.labelled == 0:
        found.append("no labelled query was evaluated")
    if report.recall_at_3 < RECALL_AT_3_FLOOR:
        found.append(f"recall@3 {report.recall_at_3:.3f} < {RECALL_AT_3_FLOOR}")
    if report.unrelated == 0:
        found.append("no unrelated query was evaluated")
    for qid, keys in report.unrelated_recalled.items():
        found.append(f"unrelated query {qid} recalled {keys}")
    for qid, got in report.wrong_first.items():
        found.append(f"query {qid} ranked {got} first")
    return found
