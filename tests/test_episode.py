"""The Episode record: construction, checks on every assignment, and the stored form."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import pickle
import re
import weakref
from typing import Any

import pytest

from deepcrew_episodic import Episode, InvalidEpisodeError
from deepcrew_episodic._episode import _CHECKS, FIELDS

FULL = Episode(
    query="Refund order 1182 — Rückerstattung",
    response="Refunded 40 EUR.",
    outcome="success",
    score=0.9,
    tools_used=["lookup_order", "refund"],
    reflection="Check the order state first.",
    tags=["billing"],
    timestamp="2026-03-01T10:00:00.000Z",
    agent_id="support",
    id="abc123",
    forget_after="2027-01-01T00:00:00Z",
    approach="Looked the order up and refunded it.",
    transcript_ref="runs/2026-03-01/abc123.jsonl",
    run_id="run-7",
    outcome_source="verifier",
    phase="refund",
    conversation_id="thread-42",
)


def test_every_field_has_one_check_in_field_order() -> None:
    assert tuple(_CHECKS) == FIELDS == tuple(f.name for f in dataclasses.fields(Episode))


def test_positional_arguments_follow_deepcrew_ai() -> None:
    # deepcrew-ai 0.6's Episode is a dataclass: code that builds one positionally keeps working.
    from deepcrew.episodic_memory import Episode as Ancestor

    args = ("q", "r", "failure", 0.25, ["t"], "lesson", ["tag"], "2026-01-01T00:00:00Z", "a")
    ours, theirs = Episode(*args), Ancestor(*args)  # type: ignore[arg-type]
    assert dataclasses.asdict(theirs) == {
        k: v
        for k, v in dataclasses.asdict(ours).items()
        if k not in ("id", "forget_after", "approach", "transcript_ref", "run_id", "outcome_source")
        and k not in ("phase", "conversation_id")
    }


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("query", None, "query"),
        ("response", 3, "response"),
        ("outcome", "great", "outcome"),
        ("score", True, "score"),
        ("score", "0.5", "score"),
        ("score", float("inf"), "score"),
        ("tools_used", "refund", "tools_used"),
        ("tools_used", ["ok", b"bytes"], "tools_used.1"),
        ("tags", {"k": "v"}, "tags"),
        ("reflection", ["a"], "reflection"),
        ("timestamp", "last tuesday", "timestamp"),
        ("agent_id", None, "agent_id"),
        ("id", 7, "id"),
        ("forget_after", "soon", "forget_after"),
        ("score", 10**400, "score"),  # beyond any float: not an OverflowError
        ("query", "caf\udce9 refund", "query"),  # a lone surrogate cannot be written out
        ("tags", ["ok", "\ud800"], "tags.1"),
    ],
)
def test_a_wrong_value_is_refused_on_construction_and_on_assignment(
    field: str, value: Any, named: str
) -> None:
    pattern = "^invalid episode: " + re.escape(named) + ": "
    with pytest.raises(InvalidEpisodeError, match=pattern):
        Episode(**{"query": "q", field: value})
    episode = copy.deepcopy(FULL)
    with pytest.raises(InvalidEpisodeError, match=pattern):
        setattr(episode, field, value)
    assert episode == FULL  # the refused value was not stored
    assert isinstance(InvalidEpisodeError("x"), ValueError)


def test_values_are_normalised() -> None:
    source = ["a", "b"]
    episode = Episode(query="q", score=1, tags=source, tools_used=("x", "y"), forget_after="")  # type: ignore[arg-type]
    assert episode.score == 1.0
    assert isinstance(episode.score, float)
    assert episode.tools_used == ["x", "y"]
    assert episode.forget_after is None  # "" means no deadline
    source.append("c")
    assert episode.tags == ["a", "b"]  # a copy: the caller's list is not shared


def test_an_unknown_field_is_named() -> None:
    with pytest.raises(TypeError, match="scroe"):
        Episode(query="q", scroe=0.5)  # type: ignore[call-arg]
    with pytest.raises(InvalidEpisodeError, match="unknown field 'scroe'"):
        Episode.coerce({"query": "q", "scroe": 0.5})
    with pytest.raises(InvalidEpisodeError, match="query: field required"):
        Episode.coerce({"response": "r"})
    with pytest.raises(AttributeError):
        FULL.scroe = 0.5  # type: ignore[attr-defined]


def test_coerce_accepts_deepcrew_ai_episodes_and_mappings() -> None:
    from deepcrew.episodic_memory import Episode as Ancestor

    theirs = Ancestor(query="q", response="r", outcome="success", tags=["t"])
    assert Episode.coerce(theirs) == Episode(query="q", response="r", outcome="success", tags=["t"])
    assert Episode.coerce(FULL.to_dict()) == FULL
    assert Episode.coerce(FULL) is FULL
    with pytest.raises(InvalidEpisodeError, match="not list"):
        Episode.coerce(["q"])


def test_the_stored_form_leaves_defaults_out_and_round_trips() -> None:
    assert json.loads(Episode(query="q").to_json()) == {"query": "q"}
    assert json.loads(Episode(query="", reflection="").to_json()) == {"query": "", "reflection": ""}
    text = FULL.to_json()
    assert "Rückerstattung" in text
    assert ", " not in text
    assert Episode.from_json(text) == FULL
    assert Episode.from_json(text.encode()) == FULL
    assert json.loads(text) == FULL.to_dict()


def test_to_dict_is_a_copy() -> None:
    data = FULL.to_dict()
    assert data == dataclasses.asdict(FULL)
    data["tags"].append("changed")
    assert FULL.tags == ["billing"]


def test_copies_and_pickles_are_checked_equal_episodes() -> None:
    assert pickle.loads(pickle.dumps(FULL)) == FULL
    assert weakref.ref(FULL)() is FULL
    assert copy.copy(FULL) == FULL
    changed = dataclasses.replace(FULL, outcome="failure")
    assert changed.outcome == "failure"
    assert changed.query == FULL.query
    with pytest.raises(InvalidEpisodeError, match="outcome"):
        dataclasses.replace(FULL, outcome="great")  # type: ignore[arg-type]


def test_a_score_beyond_any_float_decodes_to_the_default() -> None:
    # Read back from a hand-edited file, it must not make the whole log unreadable.
    raw = '{"query": "q", "score": ' + "9" * 400 + "}"
    assert Episode.from_json(raw) == Episode(query="q")


def test_decoding_replaces_one_bad_field_by_its_default_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = json.dumps(
        {"query": "q", "outcome": "excellent", "score": "high", "tags": ["a"], "v2_field": 1}
    )
    with caplog.at_level(logging.WARNING, logger="deepcrew_episodic"):
        episode = Episode.from_json(raw)
    assert episode == Episode(query="q", tags=["a"])  # the unknown field is ignored
    message = caplog.records[0].getMessage()
    assert "outcome" in message
    assert "score" in message
    assert "tags" not in message


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("not json", "Expecting value"),
        ("[1, 2]", "not an object"),
        ('{"response": "no query"}', "query: field required"),
        ('{"query": 3}', "query: expected a string"),
        ('{"query": "q", "id": 5}', "id: expected a string"),
        ('{"query": "q", "forget_after": "whenever"}', "forget_after: not an ISO-8601 time"),
    ],
)
def test_a_record_without_a_valid_identity_or_deadline_does_not_decode(raw: str, why: str) -> None:
    # A garbled deadline must hide the record, never keep it forever.
    with pytest.raises(ValueError, match=why):
        Episode.from_json(raw)


def test_deepcrew_ai_records_decode_unchanged() -> None:
    from deepcrew.episodic_memory import Episode as Ancestor

    theirs = Ancestor(query="q", response="r", outcome="partial", score=None, tags=["x"])
    decoded = Episode.from_json(json.dumps(dataclasses.asdict(theirs)))
    assert dataclasses.asdict(decoded) == {
        **dataclasses.asdict(theirs),
        "id": "",
        "forget_after": None,
        "approach": "",
        "transcript_ref": None,
        "run_id": "",
        "outcome_source": "",
        "phase": "",
        "conversation_id": "",
    }
