"""The paraphrase probe (tests/probes/paraphrase/) is built as it claims.

The probe measures recall by meaning: each ``paraphrase`` query shares no term with the
episodes it asks for, ``near-miss`` queries share a word with a decoy but mean something else,
and ``unrelated`` queries have nothing in the log. These tests check those invariants without
any model, that the committed files are what ``build.py`` writes, and that keyword-only recall
(the default ``EpisodicMemory``) indeed cannot find the paraphrase targets.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from recall_probes import DEPTH, PARAPHRASES, Probe, evaluate, load_episodes, load_probes

from deepcrew_episodic import EpisodicMemory
from deepcrew_episodic._recall import terms
from deepcrew_episodic.providers import InMemoryProvider

FOLDER = PARAPHRASES
# What a paraphrase query must not share with its targets, and what a near-miss query must
# share with its decoys (the fields keyword recall matches by default).
DISJOINT_FIELDS = ("query", "response", "reflection", "tags")
DECOY_FIELDS = ("query", "reflection", "tags")
KEYWORD_RECALL_AT_3_CEILING = 0.2


def load_rows(folder: Path = FOLDER) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for line in (folder / "episodes.jsonl").read_text("utf-8").splitlines()
        if line.strip()
    ]


def load_queries(folder: Path = FOLDER) -> list[dict[str, Any]]:
    queries: list[dict[str, Any]] = json.loads((folder / "queries.json").read_text("utf-8"))
    return queries


def field_terms(episode: dict[str, Any], fields: tuple[str, ...]) -> set[str]:
    found: set[str] = set()
    for name in fields:
        value = episode[name]
        for text in value if isinstance(value, list) else [value or ""]:
            found |= terms(text)
    return found


def by_key() -> dict[str, dict[str, Any]]:
    return {r["key"]: r["episode"] for r in load_rows()}


def import_build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("paraphrase_build", FOLDER / "build.py")
    assert spec is not None
    assert spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return build


# --- the shape the issue asks for ----------------------------------------------------------------


def test_the_log_is_large_varied_and_realistic() -> None:
    rows = load_rows()
    assert len(rows) >= 70
    keys = [r["key"] for r in rows]
    assert len(set(keys)) == len(keys)
    assert {"sup", "bill", "dev", "code", "data"} <= {k.split("-")[0] for k in keys}
    episodes = [r["episode"] for r in rows]
    lessons = sum(1 for e in episodes if e["reflection"])
    assert 0.35 <= lessons / len(rows) <= 0.65  # about half carry a lesson
    assert {e["outcome"] for e in episodes} == {"success", "failure", "partial", "unknown"}
    assert all(e["tags"] for e in episodes)
    assert sum(1 for e in episodes if e["tools_used"]) >= len(rows) * 3 // 4
    ages = sorted(r["age_days"] for r in rows)
    assert ages[0] <= 1
    assert ages[-1] >= 800
    assert all(0 <= a <= 900 for a in ages)
    assert len({int(a // 100) for a in ages}) >= 8  # spread over the whole range
    # families of look-alike tasks, the noise a ranking has to see through
    families = Counter(k.rsplit("-", 1)[0] for k in keys if k.rsplit("-", 1)[-1].isdigit())
    assert sum(1 for n in families.values() if n >= 3) >= 4


def test_query_kinds_counts_and_keys() -> None:
    queries = load_queries()
    ids = [q["id"] for q in queries]
    assert len(set(ids)) == len(ids)
    kinds = Counter(q["kind"] for q in queries)
    assert kinds["paraphrase"] >= 55
    assert kinds["near-miss"] >= 12
    assert kinds["unrelated"] >= 20
    assert set(kinds) == {"paraphrase", "near-miss", "unrelated"}
    keys = set(by_key())
    for q in queries:
        assert set(q["relevant"]) <= keys, q["id"]
        assert set(q.get("decoys", [])) <= keys, q["id"]
        assert len(set(q["relevant"])) == len(q["relevant"]), q["id"]
        if q["kind"] == "paraphrase":
            assert 1 <= len(q["relevant"]) <= 2, q["id"]
        if q["kind"] == "unrelated":
            assert q["relevant"] == [], q["id"]
        if q["kind"] == "near-miss":
            assert q["decoys"], q["id"]
            assert not set(q["decoys"]) & set(q["relevant"]), q["id"]
    near = [q for q in queries if q["kind"] == "near-miss"]
    with_target = sum(1 for q in near if q["relevant"])
    assert 1 <= with_target < len(near) / 2  # some have a real target, most have none


def test_the_loaders_read_the_probe() -> None:
    probes = load_probes(FOLDER)
    episodes = load_episodes(time.time(), FOLDER)
    assert len(probes) == len(load_queries())
    assert len(episodes) == len(load_rows())
    assert [e.time() for _, e in episodes] == sorted(e.time() or 0.0 for _, e in episodes)
    assert all(p.labelled == (p.kind == "paraphrase") for p in probes)


# --- the wording is as claimed -------------------------------------------------------------------


def test_paraphrase_queries_share_no_term_with_their_targets() -> None:
    episodes = by_key()
    clashes = {}
    for q in load_queries():
        if q["kind"] != "paraphrase":
            continue
        words = terms(q["query"])
        assert len(words) >= 3, q["id"]  # a task as a user words it, not a bare keyword
        for key in q["relevant"]:
            shared = words & field_terms(episodes[key], DISJOINT_FIELDS)
            if shared:
                clashes[(q["id"], key)] = sorted(shared)
    assert clashes == {}


def test_near_miss_queries_share_a_term_with_each_decoy() -> None:
    episodes = by_key()
    for q in load_queries():
        if q["kind"] == "near-miss":
            for key in q["decoys"]:
                assert terms(q["query"]) & field_terms(episodes[key], DECOY_FIELDS), (q["id"], key)


def test_unrelated_queries_mostly_avoid_the_log_vocabulary() -> None:
    vocabulary: set[str] = set()
    for episode in by_key().values():
        vocabulary |= field_terms(episode, (*DISJOINT_FIELDS, "tools_used"))
    unrelated = [q for q in load_queries() if q["kind"] == "unrelated"]
    touching = [q["id"] for q in unrelated if terms(q["query"]) & vocabulary]
    # a few incidental overlaps ("morning", "write") are realistic; most share nothing
    assert len(touching) <= len(unrelated) // 3, touching


# --- build.py ------------------------------------------------------------------------------------


def test_committed_files_are_what_build_writes(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(FOLDER / "build.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for name in ("episodes.jsonl", "queries.json"):
        assert (tmp_path / name).read_bytes() == (FOLDER / name).read_bytes(), name


def test_build_refuses_a_paraphrase_that_shares_a_term_with_its_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    build = import_build()
    assert build.problems(build.EPISODES, build.QUERIES) == []
    leaky = {
        "id": "para-leaky",
        "kind": "paraphrase",
        "query": "the customer was billed two times",  # "custom" and "bill" are in the target
        "relevant": ["bill-charged-twice"],
        "first": None,
        "intent": "any",
        "note": "",
    }
    found = build.problems(build.EPISODES, [*build.QUERIES, leaky])
    assert found == ["para-leaky: shares ['bill', 'custom'] with its target bill-charged-twice"]

    monkeypatch.setattr(build, "QUERIES", [*build.QUERIES, leaky])
    assert build.main(["--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "FAIL para-leaky: shares ['bill', 'custom']" in err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_build_refuses_other_broken_invariants() -> None:
    build = import_build()
    episodes, queries = build.EPISODES, build.QUERIES
    unknown = {**queries[0], "relevant": ["no-such-episode"]}
    no_decoy = next(q for q in queries if q["kind"] == "near-miss")
    stray_decoy = {**no_decoy, "decoys": ["code-log4j"]}
    found = build.problems(episodes, [*queries[1:], unknown, stray_decoy])
    assert f"{unknown['id']}: no-such-episode is not an episode" in found
    assert f"{no_decoy['id']}: shares no term with its decoy code-log4j" in found
    assert f"query id {no_decoy['id']} is used twice" in found
    assert any("fewer than 70" in p for p in build.problems(episodes[:10], queries))


# --- keyword recall cannot answer the paraphrases ------------------------------------------------


async def keyword_memory() -> EpisodicMemory:
    memory = EpisodicMemory(InMemoryProvider(), max_episodes=1000)
    for _, episode in load_episodes(time.time(), FOLDER):
        await memory.record(episode)
    return memory


@pytest.mark.anyio
async def test_keyword_recall_misses_the_paraphrases_and_falls_for_the_near_misses() -> None:
    memory = await keyword_memory()

    async def recall(probe: Probe) -> list[str]:
        # without the relevance floor: every episode that shares a term with the query
        found = await memory.recall(probe.query, DEPTH, intent=probe.intent, min_relevance=0)
        return [e.id for e in found]

    probes = load_probes(FOLDER)
    report = await evaluate(recall, probes)
    assert report.by_kind.keys() == {"paraphrase"}
    assert report.labelled == sum(1 for p in probes if p.kind == "paraphrase")
    assert report.recall_at_3 < KEYWORD_RECALL_AT_3_CEILING
    # every near-miss query finds something by its shared word: the trap a meaning-based
    # ranking must avoid
    assert report.near_misses_recalled.keys() == {p.id for p in probes if p.kind == "near-miss"}
